"""`agent-console sessions`: the real command on a real store. The list is newest first
with each session's id, status (and why it ended), task and title; it filters by status
and by task; `--json` gives one object a line; and an id it prints is one that `export
weave` takes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from app import exit_codes
from storage import NewNode, SessionStatus, TraceStore
from tests.app.test_cli import _run


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Three sessions, updated oldest to newest: vigenere (completed), a chat (aborted by
    SIGTERM, with an adapter), and a family variant (running)."""
    path = tmp_path / "traces.db"
    with TraceStore(path) as store:
        cipher = store.create_session(
            "Crack the cipher in cipher.txt",
            title="Crack the Vigenère cipher",
            settings={"task": {"name": "vigenere", "source": "builtin:vigenere"}},
        )
        store.add_nodes(cipher.id, [NewNode("genesis", "# the task: crack the cipher", tick=0)])
        store.set_session_status(cipher.id, SessionStatus.COMPLETED)
        time.sleep(0.01)
        chat = store.create_session(
            "How many lines does data.csv have?\nCount them.",
            adapter="sft-1",
            settings={"task": {"name": "chat", "source": "prompt"}},
        )
        store.set_session_status(chat.id, SessionStatus.ABORTED, reason="stopped by SIGTERM")
        time.sleep(0.01)
        store.create_session(
            "Compute the sum",
            title="Sum the numbers",
            settings={"task": {"name": "family:compute:7", "source": "family:compute:7"}},
        )
    return path


def sessions(tmp_path: Path, db: Path, *args: str) -> list[str]:
    result = _run(tmp_path, "--db", str(db), "sessions", *args)
    assert result.returncode == exit_codes.OK, result.stderr
    assert result.stderr == ""
    return result.stdout.splitlines()


def test_the_list_is_newest_first_with_what_each_session_is(tmp_path: Path, db: Path) -> None:
    lines = sessions(tmp_path, db)
    assert [line.split()[0] for line in lines] == ["#3", "#2", "#1"]
    family, chat, cipher = lines
    assert "running" in family and "family:compute:7" in family and "Sum the numbers" in family
    assert "aborted (stopped by SIGTERM)" in chat and "chat" in chat
    assert "How many lines does data.csv have?" in chat and "Count them" not in chat
    assert chat.endswith("(adapter sft-1)")
    assert "completed" in cipher and "vigenere" in cipher and "Crack the Vigenère" in cipher
    assert "(" not in cipher  # a completed session needs no reason


def test_a_session_left_running_by_a_dead_process_is_listed_aborted(
    tmp_path: Path, db: Path
) -> None:
    from agents.processes import OWNER
    from tests.support.processes import dead_owner

    owner = dead_owner()
    with TraceStore(db) as store:
        ghost = store.create_session("ghost", settings={OWNER: owner}).id
    assert [ln.split()[0] for ln in sessions(tmp_path, db, "--status", "running")] == ["#3"]
    (line,) = [ln for ln in sessions(tmp_path, db) if ln.startswith(f"#{ghost} ")]
    assert f"aborted (its process (pid {owner['pid']}) ended without storing" in line


def test_filters_by_status_and_task_and_a_limit(tmp_path: Path, db: Path) -> None:
    assert [ln.split()[0] for ln in sessions(tmp_path, db, "--status", "aborted")] == ["#2"]
    assert [ln.split()[0] for ln in sessions(tmp_path, db, "--task", "VIGENERE")] == ["#1"]
    assert [ln.split()[0] for ln in sessions(tmp_path, db, "--task", "family:")] == ["#3"]
    assert [ln.split()[0] for ln in sessions(tmp_path, db, "--limit", "2")] == ["#3", "#2"]
    assert sessions(tmp_path, db, "--status", "failed") == ["no session matches"]
    empty = tmp_path / "empty.db"
    TraceStore(empty).close()
    (line,) = sessions(tmp_path, empty)
    assert line.startswith("no sessions yet") and "--task" in line


def test_bad_input_is_one_line(tmp_path: Path, db: Path) -> None:
    for args, says in (
        (("--status", "done"), "invalid choice: 'done'"),
        (("--limit", "-1"), "--limit must be 0 or more"),
    ):
        result = _run(tmp_path, "--db", str(db), "sessions", *args)
        assert result.returncode == exit_codes.USAGE
        (line,) = result.stderr.splitlines()
        assert line.startswith("agent-console sessions: error: ") and says in line
    noise = tmp_path / "noise.db"
    noise.write_bytes(os.urandom(4096))
    result = _run(tmp_path, "--db", str(noise), "sessions")
    assert result.returncode == exit_codes.STORE and "not a SQLite database" in result.stderr


def test_json_lines_and_the_ids_are_what_export_takes(tmp_path: Path, db: Path) -> None:
    rows = [json.loads(line) for line in sessions(tmp_path, db, "--json")]
    assert [row["id"] for row in rows] == [3, 2, 1]
    assert rows[1] == {
        **rows[1],
        "status": "aborted",
        "reason": "stopped by SIGTERM",
        "task": "chat",
        "adapter": "sft-1",
        "prompt": "How many lines does data.csv have?\nCount them.",
    }
    assert rows[0]["reason"] is None and rows[0]["updated_at"] >= rows[1]["updated_at"]
    out = tmp_path / "weave"
    result = _run(
        tmp_path, "--db", str(db), "export", "weave", str(rows[2]["id"]), "--out", str(out)
    )
    assert result.returncode == exit_codes.OK, result.stderr
    assert list(out.glob("*.json"))
