"""`agent-console train ...`, `agent-console adapters` and `--adapter NAME`, through the
real CLI (`app.cli.run`, and the installed script for the headless session): real workers,
the tiny model, a real store. Bad input ends in one line and exit 2, never a traceback."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import exit_codes
from app.cli import run
from storage import JobStatus, TraceStore
from tests.app.test_cli import SCRIPT, _env, _one_error_line
from tests.app.test_query import FAST, _task
from tests.support.label_trees import SessionBuilder
from training.job_files import checkpoints_dir, last_checkpoint
from training.jobs import worker_alive

pytestmark = [pytest.mark.worker, pytest.mark.cli, pytest.mark.timeout(300)]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    """A store with four operator edits (four SFT examples, four DPO pairs); every
    worker still running at the end is killed."""
    path = tmp_path / "traces.db"
    with TraceStore(path) as store:
        builder = SessionBuilder(store, "edits")
        for tick in range(1, 5):
            builder.edited(tick)
    yield path
    with TraceStore(path) as store:
        for job in store.list_jobs():
            if job.pid is not None and worker_alive(job.pid, job.id):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.pid, signal.SIGKILL)


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("agent-console: error: ")
    return lines[0]


def wait_status(db: Path, job_id: int, *statuses: JobStatus, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    with TraceStore(db) as store:
        while store.get_job(job_id).status not in statuses:
            assert time.monotonic() < deadline, store.get_job(job_id)
            time.sleep(0.1)


def wait_event(db: Path, job_id: int, kind: str, after: int = 0, timeout: float = 180) -> int:
    deadline = time.monotonic() + timeout
    with TraceStore(db) as store:
        while True:
            events = store.job_events(job_id, after_id=after, kind=kind)
            if events:
                return events[0].id
            assert time.monotonic() < deadline, f"no {kind} event"
            time.sleep(0.1)


def test_train_with_no_labels_is_refused_saying_what_is_needed(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = str(tmp_path / "empty.db")
    for kind, needed in (("sft", "needs at least 1 example"), ("dpo", "needs at least 1 pair")):
        code = run(["--db", empty, "train", kind, "--base", str(tiny_model_dir)])
        assert code == exit_codes.USAGE
        line = one_line(capsys)
        assert "too little data" in line and needed in line and "agent-console label" in line
    with TraceStore(empty) as store:
        assert store.list_jobs() == []


def test_queue_follow_status_logs_and_adapters(
    db: Path, tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--db", str(db)]
    assert run([*base, "train", "status"]) == exit_codes.OK
    assert "no training jobs yet" in capsys.readouterr().out
    assert run([*base, "adapters"]) == exit_codes.OK
    assert "no adapters yet" in capsys.readouterr().out

    code = run(
        [*base, "train", "sft", "--base", str(tiny_model_dir), "--epochs", "2", "--lora-r", "8",
         "--max-length", "256", "--follow"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == exit_codes.OK, out
    assert "job 1 queued: sft on 4 examples -> adapter 'sft-1'" in out
    bars = [line for line in out.splitlines() if line.startswith("[")]
    assert bars and re.search(r"100% step 2/2 loss \d+\.\d+ lr \S+ .* ETA", bars[-1])
    assert "done: adapter 'sft-1' registered" in out
    assert out.rstrip().endswith("job 1 completed")

    assert run([*base, "train", "status"]) == exit_codes.OK
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["ID", "KIND", "NAME", "STATUS", "DONE", "LOSS", "BASE", "CREATED"]
    assert table[1].split()[:5] == ["1", "sft", "sft-1", "completed", "100%"]

    assert run([*base, "train", "status", "1"]) == exit_codes.OK
    details = capsys.readouterr().out
    assert details.startswith("job 1: sft -> adapter 'sft-1', completed")
    assert "lora r 8, max length 256" in details and "step 2/2" in details
    adapter_dir = tmp_path / "data" / "agent-console" / "adapters" / "sft-1"
    assert f"adapter      {adapter_dir}" in details

    assert run([*base, "train", "logs", "1"]) == exit_codes.OK
    log = capsys.readouterr().out
    assert "worker: job 1 (sft, 'sft-1')" in log and "done: adapter 'sft-1'" in log

    assert run([*base, "adapters"]) == exit_codes.OK
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split()[:7] == ["NAME", "BASE", "JOB", "CREATED", "LOSS", "ROWS", "FILES"]
    row = listing[1].split()
    assert row[0] == "sft-1" and row[2] == "1" and "4" in row and "yes" in row

    # The name is taken now: a second job may not reuse it.
    code = run([*base, "train", "dpo", "--base", str(tiny_model_dir), "--name", "sft-1"])
    assert code == exit_codes.USAGE
    assert "an adapter named 'sft-1' already exists" in one_line(capsys)
    assert run([*base, "train", "cancel", "1"]) == exit_codes.USAGE
    assert "job 1 is already completed: nothing to cancel" in one_line(capsys)
    assert run([*base, "train", "resume", "1"]) == exit_codes.USAGE
    assert "job 1 is completed" in one_line(capsys)


def test_cancel_and_resume_from_the_command_line(
    db: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--db", str(db)]
    # 4 examples, batch 4: one step an epoch. Long enough that a cancel lands mid-way.
    code = run([*base, "train", "sft", "--base", str(tiny_model_dir), "--epochs", "400",
                "--lora-r", "8", "--max-length", "256", "--name", "long"])  # fmt: skip
    assert code == exit_codes.OK
    out = capsys.readouterr().out
    assert "job 1 queued" in out and "train logs 1 --follow" in out

    first = wait_event(db, 1, "progress")
    assert run([*base, "train", "cancel", "1"]) == exit_codes.OK
    assert "job 1 cancelling" in capsys.readouterr().out
    wait_status(db, 1, JobStatus.CANCELLED, JobStatus.FAILED)
    assert run([*base, "train", "status", "1"]) == exit_codes.OK
    details = capsys.readouterr().out
    assert "long', cancelled" in details and "checkpoint   " in details
    with TraceStore(db) as store:
        job = store.get_job(1)
        checkpoint = last_checkpoint(checkpoints_dir(job))
        assert checkpoint is not None

    assert run([*base, "train", "resume", "1"]) == exit_codes.OK
    assert f"job 1 resumed from {checkpoint.name}" in capsys.readouterr().out
    resumed_at = f"resumed at step {checkpoint.name.split('-')[1]} of 400"
    with TraceStore(db) as store:
        deadline = time.monotonic() + 120
        while not any(e.message == resumed_at for e in store.job_events(1, after_id=first)):
            assert time.monotonic() < deadline, store.get_job(1)
            time.sleep(0.1)
    assert run([*base, "train", "cancel", "1"]) == exit_codes.OK
    wait_status(db, 1, JobStatus.CANCELLED)
    assert run([*base, "train", "logs", "1"]) == exit_codes.OK
    log = capsys.readouterr().out
    assert log.count("=== worker for job 1 started") == 2 and resumed_at in log


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["train"],
            "train needs a command: sft, dpo, kto, starter, status, cancel, resume or logs",
        ),
        (["train", "status", "abc"], "'abc' is not a job id"),
        (["train", "cancel", "99"], "no job 99 in"),
        (["train", "resume", "0"], "'0' is not a job id"),
        (["train", "logs", "42"], "no job 42 in"),
        (["train", "sft", "--since", "soon"], "--since: 'soon' is not a date"),
        (["train", "sft", "--name", "a b"], "--name 'a b': use 1-100 letters"),
        (["train", "sft", "--lora-r", "0"], "--lora-r 0: must be 1 to 1024"),
        (["train", "dpo", "--epochs", "-1"], "--epochs -1: must be > 0"),
        (["train", "sft", "--qlora"], "--qlora needs bitsandbytes"),
        (["train", "dpo", "--base", "/nonexistent/model"], "not a model folder"),
        (["--adapter", "ghost", "--query", "hi"], "--adapter 'ghost': no such adapter (known:"),
    ],
)
def test_bad_input_is_one_line(
    db: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["--db", str(db), *argv]) == exit_codes.USAGE
    assert message in one_line(capsys)
    with TraceStore(db) as store:
        assert store.list_jobs() == []


def test_a_registered_adapter_is_used_by_a_headless_session(
    db: Path, tmp_path: Path, tiny_model_dir: Path, tiny_adapter_dir: Path
) -> None:
    """`--adapter NAME --query`: the backend loads the registered adapter and the session
    records it; an unknown name lists the known ones. (That a job's adapter is registered
    and loads: tests/training/test_jobs.py.)"""
    with TraceStore(db) as store:
        store.register_adapter("prefer", base_model=str(tiny_model_dir), path=tiny_adapter_dir)
    task = _task(tmp_path, passes=True)
    env = _env(tmp_path)
    command = [str(SCRIPT), "--db", str(db), "--backend", "transformers",
               "--model", str(tiny_model_dir), *FAST, "--approval", "deny"]  # fmt: skip
    unknown = subprocess.run(
        [*command, "--adapter", "nope", "--query", "go", "--task", str(task)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert unknown.returncode == exit_codes.USAGE
    assert "no such adapter (known: prefer)" in _one_error_line(unknown)
    result = subprocess.run(
        [*command, "--adapter", "prefer", "--query", "go", "--task", str(task)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == exit_codes.OK, result.stderr
    assert "using adapter 'prefer'" in result.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("select adapter from session order by id desc").fetchone() == (
            "prefer",
        )


def test_train_on_another_stores_labels_leaves_that_store_untouched(
    db: Path, tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import hashlib

    mine = tmp_path / "mine.db"
    TraceStore(mine).close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    code = run(
        ["--db", str(mine), "train", "sft", "--base", str(tiny_model_dir), "--epochs", "1",
         "--lora-r", "8", "--max-length", "256", "--labels-from", str(db), "--follow"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == exit_codes.OK, out
    assert "job 1 queued: sft on 4 examples -> adapter 'sft-1'" in out
    assert out.rstrip().endswith("job 1 completed")
    with TraceStore(mine) as store:
        assert store.get_adapter("sft-1").metrics["dataset"]["rows"] == 4
        assert store.list_sessions() == []  # the labels were read, not imported
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    with TraceStore(db) as store:
        assert store.list_jobs() == []

    assert run(["--db", str(mine), "train", "sft", "--labels-from", str(tmp_path / "no.db"),
                "--base", str(tiny_model_dir)]) == exit_codes.USAGE  # fmt: skip
    line = one_line(capsys)
    assert "--labels-from" in line and "no such file" in line


def test_changed_only_trains_on_the_operators_blocks_alone(
    db: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with TraceStore(db) as store:
        SessionBuilder(store, "approved").executed(1)  # the model's action, approved
    base = ["--db", str(db), "train", "sft", "--base", str(tiny_model_dir)]
    assert run([*base, "--name", "all"]) == exit_codes.OK
    assert "sft on 5 examples -> adapter 'all'" in capsys.readouterr().out
    assert run([*base, "--name", "changed", "--changed-only"]) == exit_codes.OK
    assert "sft on 4 examples -> adapter 'changed'" in capsys.readouterr().out
    with TraceStore(db) as store:
        assert [job.config["changed_only"] for job in store.list_jobs()] == [True, False]
    for job_id in ("1", "2"):
        assert run(["--db", str(db), "train", "cancel", job_id]) == exit_codes.OK


def test_train_starter_queues_a_job_on_a_copy_of_the_shipped_sessions(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from training import starter

    mine = tmp_path / "mine.db"
    code = run(["--db", str(mine), "train", "starter", "--base", str(tiny_model_dir)])
    out = capsys.readouterr().out
    assert code == exit_codes.OK, out
    assert f"the starter sessions: {starter.COUNT} teaching variants, none held out" in out
    assert re.search(r"job 1 queued: sft on \d+ examples -> adapter 'starter'", out), out
    with TraceStore(mine) as store:
        job = store.get_job(1)
        copy = Path(job.config["labels_db"])
        assert copy.is_file() and copy != starter.SESSIONS.resolve()
        assert job.config["labels_from"] == str(starter.SESSIONS)
        assert job.config["rows_at_queue"] >= starter.COUNT
    assert run(["--db", str(mine), "train", "cancel", "1"]) == exit_codes.OK
