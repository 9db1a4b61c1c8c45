"""`agent-console improve` on the command line: a bad request is one line and exit 2,
`--list` shows the runs and their rounds, and a run that does not exist or is completed
cannot be resumed; a run killed with -9 is resumed from the store by a new process. (The
rounds themselves: tests/training/test_improve.py.)"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from app import exit_codes
from storage import TraceStore
from tests.app.test_cli import SCRIPT, _env, _run
from tests.app.test_query import FAST

pytestmark = [pytest.mark.worker, pytest.mark.cli]


def test_bad_requests_are_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "traces.db")
    for args, wanted in (
        ((), "give one of --family NAME, --resume ID or --list"),
        (("--family", "nope"), "--family 'nope': no such task family"),
        (("--family", "compute", "--rounds", "0"), "--rounds 0: must be 1 to 100"),
        (("--family", "compute", "--list"), "give one of"),
        (("--family", "compute", "--held-out-from", "29"), "--held-out 10: must be 1 to 1"),
        (("--resume", "7"), "--resume 7: no such run"),
    ):
        result = _run(tmp_path, "--db", db, "improve", *args)
        assert result.returncode == exit_codes.USAGE, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and wanted in lines[0], (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_list_shows_each_run_and_its_rounds(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    result = _run(tmp_path, "--db", str(db), "improve", "--list")
    assert result.returncode == exit_codes.OK
    assert "no improvement runs yet" in result.stdout
    with TraceStore(db) as store:
        run = store.create_improvement(
            "compute",
            config={"rounds": 2},
            state={"rounds": [{"round": 1, "labels": {"good": 0, "bad": 4},
                               "train": {"skipped": "no solved session yet: nothing to train"},
                               "verdict": "kept as data: no adapter trained"}]},
        )  # fmt: skip
        store.update_improvement(run.id, status="completed")
    result = _run(tmp_path, "--db", str(db), "improve", "--list")
    assert f"run {run.id}  compute  completed  in use: base" in result.stdout
    assert "round 1: labels +0 -4 · not trained: no solved session yet" in result.stdout
    again = _run(tmp_path, "--db", str(db), "improve", "--resume", str(run.id))
    assert again.returncode == exit_codes.USAGE
    assert f"run {run.id} is completed: nothing to resume" in again.stderr


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_killed_with_sigkill_then_resumed_runs_each_task_to_its_end(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The command killed with -9 in its first batch; `--resume ID` in a new process goes
    on from the store: tasks that ended are not run again, the one that was running is
    run again, and the round ends with every task ended, the held-out step included."""
    db = tmp_path / "traces.db"
    command = [
        str(SCRIPT), "--db", str(db), "--backend", "transformers", "--model",
        str(tiny_model_dir), *FAST, "improve", "--family", "compute", "--rounds", "1",
        "--per-round", "3", "--held-out", "2",
    ]  # fmt: skip
    first = subprocess.Popen(
        command, env=_env(tmp_path), cwd=tmp_path, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    ended_before: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while not ended_before and time.monotonic() < deadline:
            assert first.poll() is None, first.communicate()
            time.sleep(0.2)
            ended_before = _ended_tasks(db, batch_id=1)
        assert ended_before, "no rollout ended in time"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate()
    assert first.returncode == -signal.SIGKILL
    with TraceStore(db) as store:
        (run,) = store.list_improvements()
        assert run.status == "running" and "verdict" not in run.state["rounds"][0]

    again = subprocess.run(
        [*command[: command.index("improve") + 1], "--resume", str(run.id)],
        env=_env(tmp_path), cwd=tmp_path, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == exit_codes.OK, again.stderr
    assert "Traceback" not in again.stderr
    lines = again.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["round 1"], lines
    assert "held-out base 0/2" in lines[0]  # measured though nothing was trained
    with TraceStore(db) as store:
        done = store.get_improvement(run.id)
        assert done.status == "completed"
        (this,) = done.state["rounds"]
        for batch_id, n in ((this["batch"], 3), (done.state["held_out"]["base"]["batch"], 2)):
            tasks = store.batch_tasks(batch_id)
            assert len(tasks) == n and all(t.session_id is not None for t in tasks)
            assert all(t.status.value in ("completed", "truncated") for t in tasks)
        assert this["labels"]["bad"] >= 1  # the tiny model's noise fails every check
        first_batch = {t.id: t for t in store.batch_tasks(1)}
        for task_id in ended_before:
            assert first_batch[task_id].runs == 1  # ended before the kill: not run again
        assert sum(t.runs for t in first_batch.values()) <= 3 + 1  # at most one ran twice


def _ended_tasks(db: Path, *, batch_id: int) -> set[int]:
    try:
        with sqlite3.connect(db) as connection:
            rows = connection.execute(
                "select id from batch_task where batch_id = ? and status in "
                "('completed', 'truncated', 'failed')",
                (batch_id,),
            ).fetchall()
    except sqlite3.OperationalError:  # the schema is not there yet
        return set()
    return {row[0] for row in rows}
