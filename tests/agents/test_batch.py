"""Batch rollouts against a real vLLM server serving the tiny model: 20+ sessions with 4
workers in this process, the same on a local Ray cluster writing to PostgreSQL, and the
CLI stopped with Ctrl-C mid-batch, then resumed, every task ending with exactly one
session; an improvement round's batches on Ray."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agents import batch as b
from agents.backends.openai_backend import OpenAIBackend
from agents.runtime import RunOptions
from agents.tasks.families import FAMILIES, split
from app import exit_codes
from storage import BatchStatus, BatchTaskStatus, SessionStatus, TraceStore
from tests.app.test_cli import SCRIPT, _env
from tests.backends.vllm_server import (
    SERVED_NAME,
    VLLMServer,
)
from tests.support import coin_family
from tests.support.answer_task import task_toml

pytestmark = [pytest.mark.worker, pytest.mark.cli, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]


FAST = RunOptions(
    candidates=1,
    escalation=(),
    block_tokens=24,
    max_ticks=2,
    approval="auto",
    action_timeout=10.0,
    memory=False,
    seed=3,
)


def write_tasks(folder: Path, count: int) -> tuple[Path, int]:
    """`count` tasks: two of every three pass their checks (the session completes in its
    first tick), the others never do (truncated at the task's one tick). Returns the file
    and how many complete."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "easy.toml").write_text(task_toml(True, title="easy", max_ticks=1))
    (folder / "hard.toml").write_text(task_toml(False, title="hard", max_ticks=1))
    lines = []
    easy = 0
    for i in range(count):
        passes = i % 3 != 2
        easy += passes
        lines.append(json.dumps({"task": "easy.toml" if passes else "hard.toml", "id": f"t{i}"}))
    path = folder / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path, easy


def _check_batch(store: TraceStore, batch_id: int, tasks: int, easy: int) -> None:
    """Every task ran once to its end, in a session of its own, and the counts add up."""
    done = store.batch_tasks(batch_id)
    assert len(done) == tasks
    counts = store.batch_counts(batch_id)
    assert counts[BatchTaskStatus.COMPLETED] == easy, [(t.line, t.status, t.error) for t in done]
    assert counts[BatchTaskStatus.TRUNCATED] == tasks - easy
    sessions = [t.session_id for t in done]
    assert None not in sessions and len(set(sessions)) == tasks
    assert {s.id for s in store.list_sessions(limit=1000)} == set(sessions)
    for task in done:
        session = store.get_session(task.session_id)  # type: ignore[arg-type]
        assert session.status.value == task.status.value
        assert task.runs == 1 and task.result["checks_total"] == 2
        assert task.result["tokens"] > 0 and task.result["ticks"] == 1
        assert store.count_nodes(session.id) > 5


@pytest.mark.slow
def test_a_batch_of_20_runs_4_at_a_time_against_one_server(
    vllm_server: VLLMServer, tmp_path: Path
) -> None:
    tasks_file, easy = write_tasks(tmp_path / "tasks", 21)
    backend = OpenAIBackend(vllm_server.base_url, SERVED_NAME, timeout=60)
    seen: list[b.BatchProgress] = []
    with TraceStore(tmp_path / "traces.db") as store:
        batch = b.start_batch(store, tasks_file, {"workers": 4})
        context = b.WorkerContext(store, backend, FAST, tmp_path / "sessions")
        started = time.monotonic()
        done = b.run_local(context, batch.id, 4, on_progress=seen.append)
        elapsed = time.monotonic() - started
        assert done.status is BatchStatus.COMPLETED
        _check_batch(store, batch.id, 21, easy)
        # four at a time: the workers overlapped
        spans = [(t.started_at, t.finished_at) for t in store.batch_tasks(batch.id)]
        overlapping = max(
            sum(1 for s, e in spans if s <= start < e)
            for start, _ in spans  # type: ignore[operator]
        )
        assert 2 <= overlapping <= 4
        assert len({t.worker for t in store.batch_tasks(batch.id)}) == 4
        # progress came from the store, ended at the whole batch, with tokens/s
        assert seen[-1].finished == 21 and seen[-1].tokens_per_second > 0
        assert [p.finished for p in seen] == sorted(p.finished for p in seen)
        summary = b.summarize(store, done)
        assert summary.solved == easy and summary.with_checks == 21
        assert summary.pass_rate == pytest.approx((easy * 2 + (21 - easy)) / 42)
        assert summary.tokens == sum(t.result["tokens"] for t in store.batch_tasks(batch.id))
        assert elapsed < 300
    backend.close()


def test_the_same_batch_as_ray_tasks_writing_to_postgresql(
    vllm_server: VLLMServer, pg_url: str, tmp_path: Path
) -> None:
    ray = pytest.importorskip("ray")
    from agents.settings import Settings

    # 5 tasks: enough for 2 Ray workers to each take several; the 20-task scale is the
    # threads test's (each Ray worker pays a process start, imports and connections, and
    # this machine has 2 cores)
    tasks_file, easy = write_tasks(tmp_path / "tasks", 5)
    settings = Settings(
        db=pg_url,
        backend="openai",
        base_url=vllm_server.base_url,
        model=SERVED_NAME,
    )
    # the workers' sessions folder under this test's, not the user's data folder
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env}
    )
    try:
        with TraceStore(pg_url) as store:
            batch = b.start_batch(store, tasks_file, {"workers": 2, "ray": "local"})
            done = b.run_ray(store, settings, FAST, batch.id, 2, address=None)
            assert done.status is BatchStatus.COMPLETED
            _check_batch(store, batch.id, 5, easy)
            workers = {t.worker for t in store.batch_tasks(batch.id)}
            assert len({w.rsplit(":", 1)[0] for w in workers}) >= 2  # several processes
    finally:
        ray.shutdown()


# In the long tier with the other whole improvement runs (2-3 minutes here); `make test`
# keeps Ray (the batch above) and the rounds' parts (tests/training/test_improve.py).
@pytest.mark.slow
def test_improvement_rounds_on_ray_writing_to_postgresql(
    vllm_server: VLLMServer,
    pg_url: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`improve --ray`'s path: a round's rollouts and held-out batches as Ray tasks that
    write to one PostgreSQL store, labels from their checks, a training job that reads the
    same store, and the new adapter loaded into the shared server for the held-out side."""
    ray = pytest.importorskip("ray")
    from agents.adapters import use_registered_adapter
    from agents.settings import Settings
    from training.improve import ImproveConfig, Improver

    monkeypatch.setitem(FAMILIES, coin_family.NAME, coin_family.FAMILY)
    teaching, held_out = split(coin_family.NAME)
    settings = Settings(
        db=pg_url, backend="openai", base_url=vllm_server.base_url, model=SERVED_NAME
    )
    options = RunOptions(
        candidates=1, escalation=(), block_tokens=16, max_ticks=1, approval="auto",
        action_timeout=10.0, memory=False, seed=3,
    )  # fmt: skip
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "PYTHONPATH": str(REPO)}
    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=False,
        runtime_env={"env_vars": env,
                     # the workers know the built-in families only: add the test's
                     "worker_process_setup_hook": "tests.support.coin_family.register"},
    )  # fmt: skip
    backend = OpenAIBackend(vllm_server.base_url, SERVED_NAME, timeout=60)
    try:
        with TraceStore(pg_url) as store:
            config = ImproveConfig(
                family=coin_family.NAME, rounds=1, per_round=3, held_out=3, workers=2,
                ray="local", epochs=1.0, base_model=str(tiny_model_dir), max_steps=2,
                then="none", lora_r=8,  # the shared server's --max-lora-rank
            )  # fmt: skip
            run = store.create_improvement(config.family, config=config.to_config())

            def run_batch(batch_id: int, adapter: str | None) -> BatchStatus:
                use_registered_adapter(store, backend, adapter)  # into the shared server
                return b.run_ray(
                    store, settings, options, batch_id, 2, address=None, adapter=adapter
                ).status

            done = Improver(store, run, backend, run_batch, data_dir=tmp_path / "jobs",
                            say=lambda _: None, poll=0.2).go()  # fmt: skip
            assert done.status == "completed"
            (one,) = done.state["rounds"]
            tasks = store.batch_tasks(one["batch"])
            assert all(t.runs == 1 and t.worker for t in tasks)
            solved = sum(map(coin_family.coin_passes, teaching[:3]))
            assert one["rollouts"]["solved"] == one["labels"]["good"] == solved
            job = store.get_job(one["job"])  # the trainer read the same store
            assert job.config["db"].startswith("postgresql") and job.status.value == "completed"
            adapter = one["train"]["adapter"]
            assert adapter in backend.adapters()  # loaded into the server the workers share
            measured = done.state["held_out"]
            assert set(measured) == {"base", adapter}
            expected = sum(map(coin_family.coin_passes, held_out[:3]))
            assert {side["passed"] for side in measured.values()} == {expected}
            for task in store.batch_tasks(measured[adapter]["batch"]):
                assert store.get_session(task.session_id).adapter == adapter  # type: ignore[arg-type]
    finally:
        backend.close()
        ray.shutdown()


def _batch_command(tmp_path: Path, server: VLLMServer, *args: str) -> list[str]:
    return [
        str(SCRIPT),
        "--db",
        str(tmp_path / "traces.db"),
        "--base-url",
        server.base_url,
        "--model",
        SERVED_NAME,
        "--candidates",
        "1",
        "--escalation",
        "",
        "--block-tokens",
        "24",
        "--max-ticks",
        "3",
        "batch",
        *args,
    ]


#: the tasks of the batch stopped midway: 3 of them hard
TASKS = 9


def test_sighup_mid_batch_then_resume_runs_every_task_exactly_once(
    vllm_server: VLLMServer, tmp_path: Path
) -> None:
    # hard tasks allowed three ticks each, so the batch is still going when stopped: after
    # 3 tasks at least 2 run and some wait
    tasks_file, easy = write_tasks(tmp_path / "tasks", TASKS)
    text = tasks_file.read_text().replace('"hard.toml"', '"hard3.toml"')
    tasks_file.write_text(text)
    (tmp_path / "tasks" / "hard3.toml").write_text(task_toml(False, title="hard", max_ticks=3))
    db = tmp_path / "traces.db"
    first = subprocess.Popen(
        _batch_command(tmp_path, vllm_server, str(tasks_file), "--workers", "2"),
        env=_env(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    finished = 0
    while time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.5)
        if db.exists():
            with TraceStore(db) as store:
                batches = store.list_batches()
                if batches:
                    counts = store.batch_counts(batches[0].id)
                    finished = counts[BatchTaskStatus.COMPLETED] + counts[BatchTaskStatus.TRUNCATED]
                    if finished >= 3 and counts[BatchTaskStatus.RUNNING]:
                        break
    assert first.poll() is None, first.communicate()
    first.send_signal(signal.SIGHUP)  # the terminal went away: as Ctrl-C
    out, err = first.communicate(timeout=120)
    assert first.returncode == exit_codes.INTERRUPTED, err
    assert "Traceback" not in err, err
    assert "--resume 1" in err
    # stderr is a pipe: a line per finished task, not a redrawn bar
    assert len(re.findall(r"^task \d+ \(\S+\) (completed|truncated) in \d+ s", err, re.M)) >= 3
    assert "░" not in err
    assert out.startswith("batch 1 aborted: ")
    with TraceStore(db) as store:
        (batch,) = store.list_batches()
        assert batch.status is BatchStatus.ABORTED
        stopped = store.batch_tasks(batch.id)
        assert not [t for t in stopped if t.status is BatchTaskStatus.RUNNING]
        aborted = [t for t in stopped if t.status is BatchTaskStatus.ABORTED]
        assert aborted, [(t.line, t.status) for t in stopped]  # the sessions running then
        for task in aborted:
            assert store.get_session(task.session_id).status is SessionStatus.ABORTED  # type: ignore[arg-type]
        left = [
            t for t in stopped if t.status in (BatchTaskStatus.PENDING, BatchTaskStatus.ABORTED)
        ]
        assert left
    second = subprocess.run(
        _batch_command(tmp_path, vllm_server, "--resume", str(batch.id), "--workers", "3"),
        env=_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert second.returncode == exit_codes.OK, second.stderr
    assert f"batch {batch.id} completed" in second.stdout
    with TraceStore(db) as store:
        assert store.get_batch(batch.id).status is BatchStatus.COMPLETED
        done = store.batch_tasks(batch.id)
        assert {t.status for t in done} <= {
            BatchTaskStatus.COMPLETED,
            BatchTaskStatus.TRUNCATED,
        }, [(t.line, t.status, t.error) for t in done]
        sessions = [t.session_id for t in done]
        # exactly once: one session per task, and no other session in the store
        assert None not in sessions and len(set(sessions)) == len(done) == TASKS
        assert {s.id for s in store.list_sessions(limit=100)} == set(sessions)
        assert sum(1 for t in done if t.status is BatchTaskStatus.COMPLETED) == easy
        for task in done:
            assert store.get_session(task.session_id).status.value == task.status.value  # type: ignore[arg-type]
        # the tasks stopped midway were taken up twice, in the same session
        assert {t.line for t in done if t.runs == 2} == {t.line for t in aborted}


def test_a_batch_with_an_adapter_is_an_a_b_evaluation_against_the_base(
    vllm_server: VLLMServer, tiny_adapter_dir: Path, tmp_path: Path
) -> None:
    tasks_file, easy = write_tasks(tmp_path / "tasks", 3)
    backend = OpenAIBackend(vllm_server.base_url, SERVED_NAME, timeout=60)
    try:
        with TraceStore(tmp_path / "traces.db") as store:
            context = b.WorkerContext(store, backend, FAST, tmp_path / "sessions")
            base = b.start_batch(store, tasks_file, {"workers": 2, "adapter": None})
            base = b.run_local(context, base.id, 2)
            backend.load_adapter("a1", str(tiny_adapter_dir))
            backend.use_adapter("a1")
            tuned = b.start_batch(store, tasks_file, {"workers": 2, "adapter": "a1"})
            tuned = b.run_local(context, tuned.id, 2)
            assert base.status is tuned.status is BatchStatus.COMPLETED
            for batch, adapter in ((base, None), (tuned, "a1")):
                for task in store.batch_tasks(batch.id):
                    assert task.result["adapter"] == adapter
                    assert store.get_session(task.session_id).adapter == adapter  # type: ignore[arg-type]
            rows = b.by_adapter(store, tuned)
            assert [(r.adapter, r.batch.id) for r in rows] == [(None, base.id), ("a1", tuned.id)]
            assert all(r.solved == easy and r.with_checks == 3 for r in rows)
            # the adapter changed what the model wrote
            texts = [
                {n.text for n in store.tree(t.session_id) if n.kind == "orientation"}  # type: ignore[arg-type]
                for batch in (base, tuned)
                for t in store.batch_tasks(batch.id)[:1]
            ]
            assert texts[0] != texts[1]
    finally:
        backend.close()


# -- one session's failure stays its own --------------------------------------------------


@pytest.fixture
def short_context_model(tiny_model_dir: Path, tmp_path: Path) -> Path:
    """The tiny model with a context of 2,048 tokens: the example tick alone fills it."""
    copy = tmp_path / "short-context"
    shutil.copytree(tiny_model_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    config["max_position_embeddings"] = 2048
    (copy / "config.json").write_text(json.dumps(config))
    return copy


@pytest.mark.slow
def test_sessions_that_fill_a_short_context_end_truncated_and_a_log_gets_a_line_each(
    short_context_model: Path, tmp_path: Path
) -> None:
    # Tried as a new user would: 4 one-line tasks, 2 workers, a 2,048-token model. One
    # session's candidate re-encoded longer than it was sampled, its score prompt
    # overflowed, and the batch aborted with "backend unavailable" (exit 3).
    tasks = tmp_path / "tasks.jsonl"
    prompts = ["write hello to a.txt", "count the files", "say hi", "add 2 and 2"]
    tasks.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    db = tmp_path / "traces.db"
    argv = [str(SCRIPT), "--db", str(db), "--model", str(short_context_model)]
    options = ["--candidates", "2", "--escalation", "2", "--block-tokens", "128"]
    done = subprocess.run(
        [*argv, *options, "batch", str(tasks), "--workers", "2"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    # stderr is a pipe: a line per finished task, no redrawn bar
    finished = [line for line in done.stderr.splitlines() if line.startswith("task ")]
    assert len(finished) == 4, done.stderr
    for line in finished:
        assert re.fullmatch(
            r"task [1-4] \(prompt\) truncated in \d+ s: the context is full.*", line
        )
    assert "░" not in done.stderr  # the bar a terminal gets
    with TraceStore(db) as store:
        (batch,) = store.list_batches()
        assert batch.status is BatchStatus.COMPLETED
        for task in store.batch_tasks(batch.id):
            assert task.status is BatchTaskStatus.TRUNCATED, task
            assert store.get_session(task.session_id).status is SessionStatus.TRUNCATED


def test_head_within_keeps_the_longest_head_of_at_most_so_many_tokens(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    from agents.blocks import head_within

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    # what a random model writes: bytes that are no UTF-8 come back as U+FFFD, and
    # those take more tokens than the 64 that were sampled
    body = "def act(s):\n    return '\ufffd\ufffd x \ufffd'\n" * 20
    assert count(body) > 64
    head = head_within(body, 64, count)
    assert body.startswith(head) and count(head) <= 64 < count(body[: len(head) + 1])
    assert head_within("short", 64, count) == "short"
