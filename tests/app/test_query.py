"""`agent-console --query`, headless, as a real subprocess: the tiny real model, the real
sandbox, a real store; one exit code per way a session ends."""

from __future__ import annotations

import json
import re
import signal
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from app import exit_codes
from tests.app.test_cli import SCRIPT, _env, _one_error_line, _run, _spawn
from tests.support.answer_task import task_toml

pytestmark = [pytest.mark.cli, pytest.mark.timeout(300)]


FAST = ("--candidates", "2", "--escalation", "", "--block-tokens", "24", "--max-ticks", "1")


#: a progress line of `--query` on stderr: elapsed seconds, then what happened
PROGRESS_LINE = re.compile(r"^ *(\d+\.\d) s  \S")


def _task(tmp_path: Path, passes: bool) -> Path:
    path = tmp_path / ("easy.toml" if passes else "hard.toml")
    path.write_text(task_toml(passes))
    return path


def _command(tmp_path: Path, model: Path, *args: str) -> list[str]:
    """agent-console on this test's store and the tiny model; later flags win."""
    db = str(tmp_path / "traces.db")
    return [str(SCRIPT), "--db", db, "--backend", "transformers", "--model", str(model), *args]


def _query(tmp_path: Path, model: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _finished(tmp_path, _command(tmp_path, model, *FAST, *args))


def _finished(tmp_path: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        env=_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )


def _sessions(tmp_path: Path) -> list[tuple[int, str]]:
    """The stored sessions; none while the store is still being created."""
    with sqlite3.connect(tmp_path / "traces.db") as db:
        try:
            return list(db.execute("select id, status from session order by id"))
        except sqlite3.OperationalError:  # the file exists, its schema not yet
            return []


#: What a run may print on stderr besides its progress lines: the model's loading, and how
#: to go on after an interrupt. Nothing else, at a normal exit or after a signal: a run once
#: printed 31 lines of `nanobind: leaked ...` as it exited, triton's bindings (torch loads
#: them) finding their objects still alive because the run had frozen them out of the
#: collector's reach.
EXPECTED_STDERR = re.compile(
    r"loading the model\.\.\.$|Loading weights: |agent-console: session \d+ .*; to go on: "
)


#: a progress line, indented or not (a check's result, a policy's decision)
ANY_PROGRESS_LINE = re.compile(r"^ *\d+\.\d s  ")


def _unexpected(stderr: str) -> list[str]:
    return [
        line
        for line in stderr.splitlines()
        if line.strip() and not ANY_PROGRESS_LINE.match(line) and not EXPECTED_STDERR.match(line)
    ]


def test_completed_exits_0_and_prints_the_final_message(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    task = _task(tmp_path, passes=True)
    result = _query(
        tmp_path, tiny_model_dir, "--query", "go", "--task", str(task), "--approval", "deny"
    )
    assert result.returncode == exit_codes.OK, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.strip() == ("session 1 completed after 1 ticks; 2/2 task checks passed")
    assert "tick 1 orientation chosen" in result.stderr  # progress on stderr
    # every progress line leads with the seconds since the session started, rising
    progress = [line for line in result.stderr.splitlines() if PROGRESS_LINE.match(line)]
    assert any("tick 1 orientation chosen" in line for line in progress), result.stderr
    seconds = [float(PROGRESS_LINE.match(line)[1]) for line in progress]  # type: ignore[index]
    assert len(seconds) >= 5 and seconds == sorted(seconds) and seconds[-1] > 0
    assert _sessions(tmp_path) == [(1, "completed")]
    assert _unexpected(result.stderr) == [], result.stderr  # after generating, a clean exit
    with sqlite3.connect(tmp_path / "traces.db") as db:
        chat = db.execute(
            "select text from node where kind = 'observation' and json_extract(meta, '$.title') = 'Operator'"
        ).fetchall()
    assert chat == [("go",)]  # with --task, the query is the operator's message


def test_truncated_exits_4_and_json_prints_one_event_per_line(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    task = _task(tmp_path, passes=False)
    result = _query(tmp_path, tiny_model_dir, "--query", "go", "--task", str(task), "--json")
    assert result.returncode == exit_codes.TRUNCATED, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = {e["event"] for e in events}
    assert {"node", "decision", "evaluation", "status", "end"} <= kinds
    assert events[-1]["event"] == "end" and events[-1]["status"] == "truncated"
    # headless, `ask` acts as `deny`: every action was rejected by the policy
    decisions = [e for e in events if e["event"] == "decision"]
    assert decisions and all(d["actor"] == "policy" for d in decisions)
    failed = [e for e in events if e["event"] == "evaluation" and e["name"] == "check_done"]
    assert failed and failed[0]["passed"] is False
    assert _sessions(tmp_path) == [(1, "truncated")]


def test_free_text_query_runs_as_a_chat_task(tmp_path: Path, tiny_model_dir: Path) -> None:
    result = _query(tmp_path, tiny_model_dir, "--query", "Say hello to the operator")
    assert result.returncode == exit_codes.TRUNCATED, result.stderr
    with sqlite3.connect(tmp_path / "traces.db") as db:
        task, _title = db.execute("select task, title from session").fetchone()
    assert task == "Say hello to the operator"


def test_backend_down_exits_3_and_the_session_is_kept(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    task = _task(tmp_path, passes=True)
    result = _run(
        tmp_path,
        "--db",
        str(tmp_path / "traces.db"),
        "--backend",
        "openai",
        "--base-url",
        f"http://127.0.0.1:{port}/v1",
        "--model",
        "tiny",
        "--request-timeout",
        "2",
        "--query",
        "go",
        "--task",
        str(task),
    )
    assert result.returncode == exit_codes.MODEL, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith("agent-console: error: ")
    sessions = _sessions(tmp_path)
    assert sessions in ([], [(1, "failed")])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--query", ""), "--query needs the task"),
        (("--query", "x", "--task", "no-such-task"), "no-such-task"),
        (("--json",), "--json goes with --query"),
        (("--task", "no-such-task"), "no-such-task"),
        (("--query", "x", "--approval", "sometimes"), "invalid choice"),
        (("--query", "x", "--candidates", "0"), "candidates"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    result = _run(tmp_path, *args)
    assert result.returncode == exit_codes.USAGE
    assert "Traceback" not in result.stderr
    assert needle in result.stderr.splitlines()[-1]
    if "invalid choice" not in needle:
        _one_error_line(result)


def test_resume_of_an_unknown_session_is_refused(tmp_path: Path) -> None:
    result = _run(tmp_path, "--db", str(tmp_path / "t.db"), "--resume", "42", "--backend", "none")
    assert result.returncode == exit_codes.USAGE
    assert "no such session" in _one_error_line(result)


def test_a_resumed_session_runs_as_it_was_started_but_for_the_flags_given(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Before, `--resume` (the hint printed after Ctrl-C) ran with the settings' defaults:
    4 candidates, 512 tokens, approval `ask` with no operator, so every action was
    rejected, and the base model instead of the session's adapter."""
    from agents.runtime import RunOptions, task_snapshot
    from agents.tasks import load_task
    from storage import SessionStatus, TraceStore

    task = load_task(str(_task(tmp_path, passes=True)))
    started = RunOptions(
        candidates=2, escalation=(), block_tokens=24, temperature=1.0, max_ticks=1, approval="deny"
    )
    with TraceStore(tmp_path / "traces.db") as store:
        store.create_session(
            task.prompt,
            settings={"task": task_snapshot(task), "run": started.snapshot()},
            status=SessionStatus.ABORTED,
        )

    def resume(*flags: str) -> dict:
        command = [*_command(tmp_path, tiny_model_dir, *flags), "--resume", "1", "--json"]
        result = _finished(tmp_path, command)
        assert "Traceback" not in result.stderr, result.stderr
        with TraceStore(tmp_path / "traces.db") as store:
            decided = [d for n in store.tree(1) for d in store.decisions(n.id)]
            return store.get_session(1).settings["run"] | {
                "verdicts": {(d.actor.value, d.verdict.value) for d in decided}
            }

    first = resume("--max-ticks", "1")  # (without the fix: the defaults' 20 ticks)
    assert (first["candidates"], first["block_tokens"], first["approval"]) == (2, 24, "deny")
    assert first["verdicts"] == {("policy", "reject")}  # `deny` decided every action
    again = resume("--candidates", "3", "--approval", "auto")
    assert (again["candidates"], again["block_tokens"], again["approval"]) == (3, 24, "auto")
    assert ("policy", "approve") in again["verdicts"]


def test_query_and_the_console_build_the_same_options() -> None:
    """`--query`, the console's live session and its A/B build their options in one place
    (agents.runtime.session_options): the same settings give the same run, the A/B differs
    only where it means to, and a task's own tick limit wins where it is lower."""
    from dataclasses import replace

    from agents.runtime import RunOptions, session_options
    from agents.settings import Settings
    from agents.tasks import load_task

    settings = Settings(max_ticks=50, block_tokens=64)
    task = load_task("csv_summary")
    assert task.max_ticks == 30
    live = session_options(settings, None, task)
    assert live == RunOptions.from_settings(settings, None, max_ticks=30)
    assert (live.approval, live.memory, live.block_tokens) == ("ask", True, 64)
    ab = session_options(settings, None, task, approval="auto", seed=5, memory=False)
    assert replace(ab, approval="ask", seed=None, memory=True) == live
    assert session_options(Settings(max_ticks=2), None, task).max_ticks == 2


@pytest.mark.model
async def test_the_console_query_and_batch_store_the_same_run_options(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """One setting means the same run whichever way the task comes in: a session started
    in the console, by `--query` and by `batch` (whose worker also runs `improve`'s
    rollouts) stores the same options, given the same settings; a task's own tick limit
    still applies in each."""
    from agents.settings import Settings
    from agents.tasks import load_task
    from app.console import ConsoleApp
    from storage import TraceStore
    from tests.support.pilot import until

    task = _task(tmp_path, passes=True)
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"task": task.name}) + "\n")
    env = _env(tmp_path, AGENT_CONSOLE_APPROVAL="auto", AGENT_CONSOLE_MEMORY="false")
    for args in (("--query", "go", "--task", str(task)), ("batch", str(tmp_path / "tasks.jsonl"))):
        done = subprocess.run(
            _command(tmp_path, tiny_model_dir, *FAST, *args),
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=240,
        )
        assert done.returncode in (exit_codes.OK, exit_codes.FAILED, exit_codes.TRUNCATED)
        assert "Traceback" not in done.stderr, done.stderr
    settings = Settings(
        backend="transformers",
        model=str(tiny_model_dir),
        approval="auto",
        memory=False,
        candidates=2,
        escalation=(),
        block_tokens=24,
        max_ticks=1,
    )
    with TraceStore(tmp_path / "traces.db") as store:
        app = ConsoleApp(store=store, settings=settings)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.workbench.backend is not None, "the model to load")
            app.main.start_session(load_task(str(task)))
            await until(pilot, lambda: app.main.live is None, "the session to end", timeout=120)
        runs = [session.settings["run"] for session in store.list_sessions()]
    assert len(runs) == 3
    assert runs[0] == runs[1] == runs[2], runs
    assert (runs[0]["approval"], runs[0]["memory"], runs[0]["max_ticks"]) == ("auto", False, 1)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_the_first_ending_signal_raises_and_later_ones_are_ignored(signum: int) -> None:
    """In process: the first SIGTERM or SIGHUP interrupts a blocking call in the main
    thread with `Terminated` naming it; a second, while the run winds down, does nothing;
    the previous handlers come back on the way out."""
    import os

    from app.signals import Terminated, ending_on_signals

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    name = signal.Signals(signum).name
    with ending_on_signals():
        started = time.monotonic()
        with pytest.raises(Terminated, match=f"^stopped by {name}$"):
            os.kill(os.getpid(), signum)
            time.sleep(30)
        assert time.monotonic() - started < 10
        os.kill(os.getpid(), signum)  # ignored: the run is already ending
        time.sleep(0.2)
    assert {s: signal.getsignal(s) for s in before} == before


SLOW_CHECK_TASK = """\
title = "Wait for the slow check"
prompt = "Write the answer to answer.txt."
checks = '''
def check_slowly(subagent):
    import time
    time.sleep(240)
    return False
'''
"""


def _stopped_by(tmp_path: Path) -> list[tuple[int, str, str | None]]:
    with sqlite3.connect(tmp_path / "traces.db") as db:
        return list(
            db.execute("select id, status, json_extract(settings, '$.status_reason') from session")
        )


#: Ctrl-C's handler and the one SIGTERM and SIGHUP share, each in both phases; that the
#: shared one names either signal is asserted in process (the test above)
SIGNAL_CASES = [
    pytest.param("generating", signal.SIGINT, id="generating-SIGINT"),
    pytest.param("generating", signal.SIGHUP, id="generating-SIGHUP"),
    pytest.param("in the kernel", signal.SIGINT, id="in the kernel-SIGINT"),
    pytest.param("in the kernel", signal.SIGTERM, id="in the kernel-SIGTERM"),
]


@pytest.mark.parametrize(("phase", "signum"), SIGNAL_CASES)
def test_a_terminating_signal_aborts_the_session_like_ctrl_c(
    tmp_path: Path, tiny_model_dir: Path, signum: signal.Signals, phase: str
) -> None:
    """SIGTERM or SIGHUP to `--query` ends it as Ctrl-C (SIGINT) does: the session is
    stored as aborted with the signal as its reason, the exit code is 130 and stderr gives
    the command that resumes it; also when the signal lands in the middle of the model's `generate` (long
    blocks, sent just after the tick's first observation) or while the sandboxed kernel
    runs a task check that sleeps for minutes."""
    task = tmp_path / "slow.toml"
    task.write_text(SLOW_CHECK_TASK)
    if phase == "generating":  # the tiny model never ends a block: thousands of tokens
        tuning = ("--block-tokens", "4000", "--candidates", "4")

        def ready(event: dict[str, object]) -> bool:
            # the orientation's first tokens are out: its generate call is running
            return event.get("event") == "sampling" and event.get("block") == "orientation"

        pause = 0.0
    else:
        tuning = ("--action-timeout", "600")

        def ready(event: dict[str, object]) -> bool:
            return (
                event.get("event") == "node"
                and event.get("kind") == "evaluation"
                and event.get("status") in ("executed", "failed")
            )

        pause = 1.0  # into the check's sleep

    command = _command(
        tmp_path,
        tiny_model_dir,
        *FAST,
        *tuning,
        "--memory",
        "off",
        "--json",
        "--query",
        "go",
        "--task",
        str(task),
    )
    process = _spawn(command, tmp_path)
    assert process.stdout is not None
    events: list[dict[str, object]] = []
    for line in process.stdout:
        events.append(json.loads(line))
        if ready(events[-1]):
            break
    else:
        process.wait(60)
        pytest.fail(f"the run ended before the signal: {process.stderr.read()[-2000:]}")
    time.sleep(pause)
    sent = time.monotonic()
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)
    took = time.monotonic() - sent
    name = signal.Signals(signum).name
    # Ctrl-C is the operator; the others name themselves
    reason = "stopped by the operator" if signum == signal.SIGINT else f"stopped by {name}"
    assert process.returncode == exit_codes.INTERRUPTED, err
    assert "Traceback" not in err
    assert _unexpected(err) == [], err  # nothing at exit after the signal, either
    assert _stopped_by(tmp_path) == [(1, "aborted", reason)]
    resume = f"agent-console --db {tmp_path / 'traces.db'} --resume 1"  # the same store
    hint = f"agent-console: session 1 {reason}; to go on: {resume}"
    assert hint in err.splitlines(), err
    end = json.loads(out.splitlines()[-1])
    assert (end["event"], end["status"], end["reason"]) == ("end", "aborted", reason)
    assert took < 60, took  # not after the block, nor after the check's four minutes
    with sqlite3.connect(tmp_path / "traces.db") as db:
        kinds = [kind for (kind,) in db.execute("select kind from node where tick = 1")]
    if phase == "generating":
        assert "orientation" not in kinds  # stopped inside the block's generate call
    else:
        assert "outcome" not in kinds  # stopped inside the check, before the outcome
