"""The model server dying mid-tick: `agent-console --query` reports it in one line with
exit 3 (quickly, not after minutes of timeouts and retries), the session is stored as
failed with every block it had written, and `--resume ID` continues the same tree once a
server answers again.

How: a real vLLM server (CPU, the tests' tiny Qwen2 model) on a port P; the real
`agent-console` executable runs a session against it (`--backend openai --json`, the real
sandbox, a real SQLite file). When the session has stored blocks of its second tick and
vLLM reports a generation request being computed (its own `num_requests_running` gauge),
every server process is SIGKILLed: the console is waiting on that request. A `--resume`
while the port is still closed must fail the same clean way and change nothing; then a new
server on the same port P, and `--resume` runs one more tick under the stored tree.
Two server starts in all. Skips without `.venv-vllm`, unless AGENT_CONSOLE_REQUIRE_VLLM=1.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from app import exit_codes
from storage import SessionStatus, TraceStore
from tests.app.test_cli import SCRIPT, _env
from tests.backends.vllm_server import (
    SERVED_NAME,
    VLLMServer,
    free_port,
    start_vllm_server,
    vllm_python_or_skip,
)
from tests.support.answer_task import task_toml

pytestmark = [pytest.mark.server, pytest.mark.cli, pytest.mark.timeout(900)]

#: a whole session's context fits the server (the default 512 holds less than one tick)
MAX_MODEL_LEN = 4096
#: seconds from the SIGKILL to the console's exit that count as "reported, not hung": well
#: under the backend's request timeout (60 s), so a request left hanging would fail it
REPORT_BOUND = 15.0
NODE_COLUMNS = (
    "id, session_id, parent_id, tick, kind, author, status, text, edited_from_id, token_ids, "
    "prompt_hash"
)


def _command(db: Path, port: int, *args: str) -> list[str]:
    """agent-console --json against the server on `port`: two candidates of short blocks,
    every action approved, no retrieval memory; later flags win."""
    return [
        str(SCRIPT),
        "--db",
        str(db),
        "--backend",
        "openai",
        "--base-url",
        f"http://127.0.0.1:{port}/v1",
        "--model",
        SERVED_NAME,
        "--approval",
        "auto",
        "--candidates",
        "2",
        "--escalation",
        "",
        "--block-tokens",
        "48",
        "--memory",
        "off",
        "--action-timeout",
        "10",
        "--json",
        *args,
    ]


def _nodes(db: Path, session_id: int) -> dict[int, tuple[Any, ...]]:
    """Every stored node of the session, by id, as its row."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            f"select {NODE_COLUMNS} from node where session_id = ? order by id", (session_id,)
        ).fetchall()
    return {row[0]: row for row in rows}


def _session(db: Path, session_id: int) -> tuple[str, dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        status, settings = conn.execute(
            "select status, settings from session where id = ?", (session_id,)
        ).fetchone()
    return status, json.loads(settings)


def _events(path: Path) -> list[dict[str, Any]]:
    """The --json stream so far (a half-written last line is left for later)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    events = []
    for line in text.splitlines(keepends=True):
        if line.endswith("\n"):
            events.append(json.loads(line))
    return events


def _generating(server: VLLMServer) -> bool:
    """vLLM's own gauge: a request is being computed right now."""
    try:
        with urllib.request.urlopen(f"{server.root_url}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return False
    values = re.findall(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", text, re.M)
    return any(float(value) > 0 for value in values)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("agent-console: error: ")]


def _check_clean_failure(stderr: str, port: int) -> str:
    """Exactly one error line, the last one, naming the unreachable server; no traceback."""
    assert "Traceback" not in stderr, stderr
    errors = _error_lines(stderr)
    assert len(errors) == 1, stderr
    assert stderr.splitlines()[-1] == errors[0], stderr
    assert "cannot reach the model server" in errors[0], errors[0]
    assert f"127.0.0.1:{port}" in errors[0], errors[0]
    return errors[0]


def test_the_status_reason_is_stored_with_the_status_and_replaced(tmp_path: Path) -> None:
    """What the runtime relies on to keep "why it failed" in the store."""
    with TraceStore(tmp_path / "t.db") as store:
        session = store.create_session("t", settings={"task": {"name": "x"}})
        store.set_session_status(session.id, SessionStatus.FAILED, reason="model backend: gone")
        stored = store.get_session(session.id)
        assert stored.status is SessionStatus.FAILED
        assert stored.settings == {"task": {"name": "x"}, "status_reason": "model backend: gone"}
        store.set_session_status(session.id, SessionStatus.RUNNING)  # no reason: kept
        assert store.get_session(session.id).settings["status_reason"] == "model backend: gone"
        store.set_session_status(session.id, SessionStatus.COMPLETED, reason="")  # removed
        assert store.get_session(session.id).settings == {"task": {"name": "x"}}


@pytest.mark.slow
def test_server_killed_mid_tick_then_resume_continues_the_stored_tree(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    vllm_python_or_skip()
    db = tmp_path / "traces.db"
    task = tmp_path / "hard.toml"
    task.write_text(task_toml(False))  # its checks never pass: the session never completes
    port = free_port()
    out, err = tmp_path / "first.jsonl", tmp_path / "first.err"

    # -- the first run, and the server dying under a generation request of tick 2
    server = start_vllm_server(
        tiny_model_dir, tmp_path / "vllm-1", port=port, max_model_len=MAX_MODEL_LEN
    )
    try:
        with out.open("w") as stdout, err.open("w") as stderr:
            first = subprocess.Popen(
                _command(db, port, "--max-ticks", "20", "--query", "go", "--task", str(task)),
                env=_env(tmp_path),
                cwd=tmp_path,
                stdout=stdout,
                stderr=stderr,
                text=True,
                stdin=subprocess.DEVNULL,
            )
        exited: list[float] = []  # when the console exited, seen as it happens
        watcher = threading.Thread(
            target=lambda: (first.wait(), exited.append(time.monotonic())), daemon=True
        )
        watcher.start()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None:
            nodes = [e for e in _events(out) if e["event"] == "node"]
            if any(e["tick"] >= 2 for e in nodes) and _generating(server):
                break
            time.sleep(0.05)
        assert first.poll() is None, (first.returncode, err.read_text())
        assert time.monotonic() < deadline, "tick 2 never started: " + err.read_text()
        session_id = _events(out)[0]["session"]
        before = _nodes(db, session_id)
        server.kill()
    except BaseException:
        server.stop(grace=5)
        raise
    else:
        server.stop(grace=5)  # the folder and shared memory; the processes are gone
    try:
        watcher.join(timeout=REPORT_BOUND)
    finally:
        if first.poll() is None:
            first.kill()
    watcher.join(timeout=10)
    # from the SIGKILLs (kill() then waits a while for Python's resource tracker)
    assert server.killed_at is not None and exited, "the console hung after the server died"
    reported_after = exited[0] - server.killed_at
    assert reported_after < REPORT_BOUND, reported_after

    stderr_text = err.read_text()
    assert first.returncode == exit_codes.MODEL, stderr_text
    _check_clean_failure(stderr_text, port)

    events = _events(out)
    statuses = [e for e in events if e["event"] == "status"]
    assert statuses[-1]["status"] == "failed", statuses
    assert statuses[-1]["reason"].startswith("model backend: cannot reach the model server")
    end = events[-1]
    assert end["event"] == "end" and end["session"] == session_id, end
    assert end["status"] == "failed" and end["reason"].startswith("model backend"), end
    assert f"--resume {session_id}" in _error_lines(stderr_text)[0]

    status, settings = _session(db, session_id)
    assert status == "failed"
    assert settings.get("status_reason", "").startswith("model backend: cannot reach"), settings

    after = _nodes(db, session_id)
    # every block stored before the kill is still there, unchanged but for the status a
    # candidate got when it was chosen (the run went on until the failed request)
    assert set(before) <= set(after)
    for node_id, row in before.items():
        assert after[node_id][:6] == row[:6] and after[node_id][7:] == row[7:], node_id
    emitted = {e["id"] for e in events if e["event"] == "node"}
    assert emitted <= set(after)  # every block the stream announced is stored
    # the kill came mid-tick: the last tick has no outcome block
    last_tick = max(row[3] for row in after.values())
    assert last_tick >= 2
    assert not [r for r in after.values() if r[3] == last_tick and r[4] == "outcome"]
    cut = max(r[3] for r in after.values() if r[4] == "outcome")  # the last whole tick

    # -- resume while nothing listens on the port: the same clean failure, nothing changed
    down = subprocess.run(
        _command(db, port, "--request-timeout", "5", "--resume", str(session_id)),
        env=_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert down.returncode == exit_codes.MODEL, down.stderr
    _check_clean_failure(down.stderr, port)
    assert _session(db, session_id)[0] == "failed"
    assert _nodes(db, session_id) == after

    # -- a new server on the same port; --resume runs one more tick under the stored tree
    server = start_vllm_server(
        tiny_model_dir, tmp_path / "vllm-2", port=port, max_model_len=MAX_MODEL_LEN
    )
    try:
        resumed = subprocess.run(
            _command(db, port, "--max-ticks", "1", "--resume", str(session_id)),
            env=_env(tmp_path),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
    finally:
        server.stop()
    assert resumed.returncode == exit_codes.TRUNCATED, resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert not _error_lines(resumed.stderr), resumed.stderr
    end = json.loads(resumed.stdout.splitlines()[-1])
    assert end["event"] == "end" and end["session"] == session_id, end
    assert end["status"] == "truncated" and end["ticks"] == 1, end

    status, settings = _session(db, session_id)
    assert status == "truncated"
    assert settings.get("status_reason", "").startswith("tick limit"), settings
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from session").fetchone() == (1,)

    final = _nodes(db, session_id)
    assert {node_id: final[node_id] for node_id in after} == after  # old blocks unchanged
    new = {node_id: row for node_id, row in final.items() if node_id not in after}
    assert new, "the resumed run stored nothing"
    assert all(row[3] == cut + 1 for row in new.values())  # the tick after the last whole one
    kinds = {row[4] for row in new.values()}
    assert {"task-reminder", "orientation", "action", "outcome"} <= kinds, kinds
    # the new tick hangs under the last whole tick's outcome block: descendants of the old
    (root,) = [row for row in new.values() if row[2] in after]
    assert after[root[2]][4] == "outcome" and after[root[2]][3] == cut, root
    assert all(row[2] in final for row in new.values())
