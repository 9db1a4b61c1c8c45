"""One SQLite trace store, four writers at once: zero lock errors, nothing lost.

The store starts with four operator edits (enough for an SFT job). Then, at the same time:
the installed `agent-console` in a real terminal (tmux) runs a task with approval `auto`
on the tiny model, writing its blocks; `agent-console train sft` queues a job whose
detached worker writes the job's rows, its progress events and the adapter; and two
`agent-console --query ... --json` runs write their own sessions. Everything is real: the
executable, the sandbox, the tiny transformer, the worker, the file. A fifth writer, a
thread of the test using the store's API, appends a block every 20 ms all the while, so
that writes really collide (the agents on their own write about one a second).

Afterwards: every exit status is the expected one; no "database is locked",
`OperationalError` or traceback in any stderr, the worker's log, the console's screens
(sampled all along) or its crash log; every node, decision and evaluation the two queries
reported on stdout is in the store as reported; the job completed and its adapter is
registered with every progress event; the console's session is stored, completed, and
its memory index wrote too; the writers really overlapped in time; the blocks stored
before are untouched; and `PRAGMA integrity_check` says ok.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app import exit_codes
from storage import Author, JobStatus, NewNode, NodeStatus, TraceStore
from tests.app.test_cli import SCRIPT, _env
from tests.app.test_tmux import Tmux, tmux  # noqa: F401  (tmux: the fixture)
from tests.support.answer_task import task_toml
from tests.support.label_trees import SessionBuilder
from tests.support.screens import console_traceback
from training.jobs import worker_alive

pytestmark = [
    pytest.mark.worker,
    pytest.mark.cli,
    pytest.mark.tmux,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]

#: Short sessions: one candidate a block, short blocks, one tick.
AGENT = ("--candidates", "1", "--escalation", "", "--block-tokens", "24", "--max-ticks", "1")
#: Generous: four model processes and a trainer share two loaded cores.
DEADLINE = 600.0
#: What a lost write or a lock fight leaves behind, in any output.
BAD = ("database is locked", "OperationalError", "Traceback")
#: The same on the console's screen, where the agent's own error blocks may hold a traceback.
SCREEN_BAD = ("database is locked", "OperationalError")
QUERIES = ("first query writer", "second query writer")
#: The console's notification when its session ends.
ENDED = re.compile(r"\bsession (\d+) (completed|truncated|failed|aborted)\b")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    """A store with four operator edits (four SFT examples); a worker still running at
    the end is killed."""
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


def _clean(what: str, text: str) -> None:
    for needle in BAD:
        assert needle not in text, f"{needle!r} in {what}:\n{text[-4000:]}"


def _clean_screen(screen: str) -> None:
    """A captured screen: the agent's tiny model may write code that raises (an `error` block
    with its traceback, drawn inside the console's panes); a traceback outside them is not."""
    for needle in SCREEN_BAD:
        assert needle not in screen, f"{needle!r} on the console's screen:\n{screen}"
    assert not console_traceback(screen), f"a traceback on the console's screen:\n{screen}"


def _rows(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """A read on its own short connection, as a fifth process would do it."""
    conn = sqlite3.connect(db, timeout=60)
    try:
        return list(conn.execute(sql, args))
    finally:
        conn.close()


class Scribe(threading.Thread):
    """A fifth writer, in this process: appends blocks to a session of its own through the
    store's API, one short write transaction each, every 20 ms, for as long as the others
    run. It keeps the write lock busy, so the others' writes do meet it (a lone agent
    writes a block only every second or so): with a busy timeout of 1 ms instead of 30 s,
    the worker and the console fail with "database is locked" here."""

    def __init__(self, db: Path) -> None:
        super().__init__(name="scribe", daemon=True)
        self.db = db
        self.stop = threading.Event()
        self.written: list[int] = []
        self.error: BaseException | None = None
        self.session = 0

    def run(self) -> None:
        try:
            with TraceStore(self.db) as store:
                self.session = store.create_session("notes", title="Scribe").id
                parent = None
                while not self.stop.is_set():
                    node = store.add_node(
                        self.session,
                        NewNode(
                            kind="observation", text=f"note {len(self.written)}", parent_id=parent,
                            author=Author.RUNTIME, status=NodeStatus.CHOSEN,
                        ),
                    )  # fmt: skip
                    self.written.append(node.id)
                    parent = node.id
                    time.sleep(0.02)
        except BaseException as exc:  # reported by the test, with its message
            self.error = exc


def _check_query_reported_everything(db: Path, out: str) -> int:
    """Every node, decision and evaluation the run printed is stored as printed; returns
    the session's id."""
    events = [json.loads(line) for line in out.splitlines()]
    end = events[-1]
    assert end["event"] == "end" and end["status"] == "completed", end
    session = end["session"]
    assert {e["session"] for e in events} == {session}

    nodes: dict[int, dict[str, Any]] = {}
    for event in events:
        if event["event"] == "node":
            nodes[event["id"]] = event  # the last report of a node is its final state
    assert len(nodes) >= 6, "the session wrote too little to prove anything"
    stored = {
        row[0]: row[1:]
        for row in _rows(
            db,
            "select id, parent_id, tick, kind, author, status, text from node where session_id = ?",
            session,
        )
    }
    for node_id, event in nodes.items():
        assert node_id in stored, f"node {node_id} of session {session} was lost"
        assert stored[node_id] == (
            event["parent"], event["tick"], event["kind"], event["author"], event["status"],
            event["text"],
        ), f"node {node_id} differs from what was reported"  # fmt: skip

    decisions = {(e["node"], e["verdict"], e["actor"]) for e in events if e["event"] == "decision"}
    assert decisions, "approval auto decided nothing"
    stored_decisions = set(
        _rows(
            db,
            "select d.node_id, d.verdict, d.actor from decision d "
            "join node n on n.id = d.node_id where n.session_id = ?",
            session,
        )
    )
    assert decisions <= stored_decisions

    evaluations = [
        (e["node"], e["name"], e["passed"]) for e in events if e["event"] == "evaluation"
    ]
    assert evaluations
    for node_id, name, passed in evaluations:
        assert _rows(
            db, "select passed from evaluation where node_id = ? and name = ?", node_id, name
        ) == [(int(passed),)], (node_id, name)

    assert _rows(db, "select status from session where id = ?", session) == [("completed",)]
    return session


def test_console_worker_and_two_queries_share_one_database(
    db: Path,
    tmp_path: Path,
    tiny_model_dir: Path,
    tmux: Tmux,  # noqa: F811  (the fixture imported from test_tmux)
) -> None:
    task = tmp_path / "answer.toml"
    task.write_text(task_toml(True), encoding="utf-8")  # completes in its first tick
    base = (str(SCRIPT), "--db", str(db))
    model = (*base, "--backend", "transformers", "--model", str(tiny_model_dir), *AGENT)
    env = _env(tmp_path)
    before = _rows(db, "select id, kind, status, text from node order by id")
    assert before
    data = tmp_path / "data" / "agent-console"

    scribe = Scribe(db)
    scribe.start()
    # 1. The console, in a real terminal, starts the task once its model is up.
    tmux.start(*model, "--approval", "auto", "--task", str(task))
    # 2. Two headless sessions, their output in files (a pipe could fill and block them).
    # Their retrieval memory is off to spare the cores; the console's stays on, so its
    # memory index writes to the store too.
    queries: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    for n, text in enumerate(QUERIES):
        out, err = tmp_path / f"query{n}.out", tmp_path / f"query{n}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            command = [*model, "--approval", "auto", "--memory", "off", "--json", "--query", text,
                       "--task", str(task)]  # fmt: skip
            process = subprocess.Popen(
                command, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=stdout,
                stderr=stderr,
            )  # fmt: skip
        queries.append((process, out, err))
    try:
        # 3. A training job: 40 steps (4 examples, batch 4), long enough to overlap.
        train = ["train", "sft", "--base", str(tiny_model_dir), "--epochs", "40", "--lora-r", "8",
                 "--max-length", "256"]  # fmt: skip
        queued = subprocess.run(
            [*base, *train], env=env, cwd=tmp_path, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert queued.returncode == exit_codes.OK, queued.stderr
        assert "job 1 queued: sft on 4 examples -> adapter 'sft-1'" in queued.stdout
        _clean("train sft's stderr", queued.stderr)

        # Wait for all of them, sampling the console's screen all along: an error
        # notification lasts only seconds.
        deadline = time.monotonic() + DEADLINE
        screens: list[str] = []
        console_session: int | None = None
        console_status = ""
        while True:
            screen = tmux.screen()
            screens.append(screen)
            if console_session is None and (found := ENDED.search(screen)):
                console_session, console_status = int(found.group(1)), found.group(2)
            queries_done = all(q.poll() is not None for q, _, _ in queries)
            job_status = _rows(db, "select status from job where id = 1")[0][0]
            if (
                queries_done
                and console_session is not None
                and job_status not in ("queued", "running")
            ):
                break
            if tmux.show("#{pane_dead}") == "1" or tmux.exit_status() is not None:
                pytest.fail(f"the console exited early:\n{screen}")
            assert time.monotonic() < deadline, (
                f"not done after {DEADLINE:.0f} s: queries {[q.poll() for q, _, _ in queries]}, "
                f"job {job_status}, console session {console_session}; the screen:\n{screen}"
            )
            time.sleep(1.0)
    finally:
        scribe.stop.set()
        scribe.join(timeout=60)
        for q, _, _ in queries:
            if q.poll() is None:
                q.kill()
            q.wait(timeout=60)

    # The console quits cleanly.
    tmux.keys("q")
    quit_by = time.monotonic() + 60
    while (status := tmux.exit_status()) is None:
        assert time.monotonic() < quit_by, f"q did not quit the console:\n{tmux.screen()}"
        time.sleep(0.2)
    screens.append(tmux.screen())
    assert status == exit_codes.OK, screens[-1]
    for screen in screens:
        _clean_screen(screen)
    assert not (data / "logs" / "crash.log").exists(), (data / "logs" / "crash.log").read_text()

    # The queries: exit 0, clean stderr, and everything they reported is stored.
    sessions = []
    for query, out, err in queries:
        errors = err.read_text(encoding="utf-8")
        assert query.returncode == exit_codes.OK, errors[-4000:]
        _clean("a query's stderr", errors)
        sessions.append(_check_query_reported_everything(db, out.read_text(encoding="utf-8")))
    assert len(set(sessions)) == 2
    for session, text in zip(sessions, QUERIES, strict=True):
        chat = _rows(
            db,
            "select text from node where session_id = ? and kind = 'observation' "
            "and json_extract(meta, '$.title') = 'Operator'",
            session,
        )
        assert chat == [(text,)]

    # The worker: job completed, adapter registered, clean log.
    log = (data / "jobs" / "1" / "worker.log").read_text(encoding="utf-8")
    _clean("the worker's log", log)
    with TraceStore(db) as store:
        job = store.get_job(1)
        assert job.status == JobStatus.COMPLETED, log[-4000:]
        events = store.job_events(1, kind="progress")
        assert len(events) == 40  # one per step: none lost
        adapter = store.get_adapter("sft-1")
        assert adapter.job_id == 1
        assert (Path(adapter.path) / "adapter_model.safetensors").is_file()

    # The console's session: its own, stored, completed, with its blocks.
    assert console_session is not None and console_status == "completed"
    assert console_session not in sessions
    assert _rows(db, "select status, title from session where id = ?", console_session) == [
        ("completed", "Answer the question")
    ]
    kinds = {k for (k,) in _rows(db, "select kind from node where session_id = ?", console_session)}
    assert {"genesis", "orientation", "action", "outcome"} <= kinds
    remembered = "select count(*) from memory_vector m join node n on n.id = m.node_id "
    assert _rows(db, remembered + "where n.session_id = ?", console_session)[0][0] > 0

    # They really wrote at the same time: some progress event of the worker lies inside
    # the span of the sessions' blocks.
    first, last = _rows(
        db, "select min(created_at), max(created_at) from node where session_id in (?, ?, ?)",
        *sessions, console_session,
    )[0]  # fmt: skip
    assert any(first < e.created_at < last for e in events), "the writers never overlapped"

    # The scribe met no lock error either, and lost nothing.
    assert scribe.error is None, f"the scribe failed: {scribe.error!r}"
    assert len(scribe.written) >= 100
    stored = _rows(db, "select id from node where session_id = ? order by id", scribe.session)
    assert [i for (i,) in stored] == scribe.written

    # What the store held before is still there, untouched.
    assert (
        _rows(db, "select id, kind, status, text from node where session_id = 1 order by id")
        == before
    )
    assert _rows(db, "PRAGMA integrity_check") == [("ok",)]
    assert _rows(db, "PRAGMA journal_mode") == [("wal",)]
