"""Training jobs end to end: real detached worker processes running trl on the tiny model,
reporting through a real store; the adapters they register loaded by the transformers
backend and by a real vLLM server; cancel, SIGKILL and resume; the settings picker.

Sessions are hand-built label trees (tests/support/label_trees.py): each `edited` tick is
one SFT example (the operator's edit) and one DPO pair (the edit over the original). Their
blocks carry no prompt hash, which the dataset builder takes as "unchecked".

Long jobs (cancel, kill) run a fixed `max_steps` and the test acts on the job's own events
(the first progress, the first checkpoint), never on a sleep, so the cancel or the kill
lands mid-training however fast the machine is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.backends.lora import read_adapter
from storage import Job, JobEvent, JobKind, JobStatus, TraceStore
from tests.backends.vllm_server import SERVED_NAME, VLLMServer
from tests.support.label_trees import SessionBuilder
from training import worker
from training.job_files import checkpoint_step, checkpoints_dir, job_dir, last_checkpoint, log_path
from training.jobs import (
    RESUMABLE,
    STOPPED_BY_SIGNAL,
    JobError,
    JobOptions,
    NotEnoughDataError,
    cancel_job,
    interrupted,
    queue_job,
    reap_dead_jobs,
    resume_if_interrupted,
    resume_job,
    worker_alive,
)
from training.trainer import (
    GIB,
    QWEN2_SHAPES,
    Hardware,
    ModelShape,
    TrainingError,
    estimate_peak_bytes,
    model_kwargs,
    pick_settings,
    trl_config_kwargs,
)

pytestmark = [pytest.mark.worker, pytest.mark.cli, pytest.mark.timeout(300)]

#: LoRA rank of the tiny jobs: the test vLLM server takes ranks up to 8.
RANK = 8

QWEN2_05B = QWEN2_SHAPES["0.5b"]
QWEN2_7B = QWEN2_SHAPES["7b"]
H100 = Hardware(
    device="cuda", gpu_count=1, free_memory=int(79 * GIB), total_memory=int(80 * GIB), bf16=True
)
LIGER_H100 = dataclasses.replace(H100, liger=True, flash_attention=True)
FLASH_H100 = dataclasses.replace(H100, flash_attention=True)


# -- helpers -------------------------------------------------------------------------------------


def label_sessions(store: TraceStore, ticks: int = 4) -> None:
    builder = SessionBuilder(store, "edits")
    for tick in range(1, ticks + 1):
        builder.edited(tick)


def options(model: Path, kind: JobKind, **changes: object) -> JobOptions:
    values: dict[str, object] = {
        "kind": kind,
        "base_model": str(model),
        "epochs": 2,
        "lora_r": RANK,
        "max_length": 512,
        "poll_seconds": 0.0,
    }
    values.update(changes)
    return JobOptions(**values)  # type: ignore[arg-type]


def wait_for(
    store: TraceStore,
    job_id: int,
    until: Callable[[Job, list[JobEvent]], bool],
    *,
    timeout: float = 180,
) -> tuple[Job, list[JobEvent]]:
    """Poll the job and its events until `until` holds; fail with the worker's log."""
    deadline = time.monotonic() + timeout
    while True:
        job = store.get_job(job_id)
        events = store.job_events(job_id)
        if until(job, events):
            return job, events
        if time.monotonic() > deadline:
            log = log_path(job).read_text(errors="replace")[-3000:]
            pytest.fail(f"job {job_id} is {job.status.value} after {timeout} s; log:\n{log}")
        time.sleep(0.05)


def finished(job: Job, events: list[JobEvent]) -> bool:
    return job.status in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)


def wait_finished(store: TraceStore, job_id: int) -> tuple[Job, list[JobEvent]]:
    return wait_for(store, job_id, finished)


def kinds(events: list[JobEvent]) -> list[str]:
    return [e.kind for e in events]


def wait_gone(pid: int, job_id: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while worker_alive(pid, job_id):
        assert time.monotonic() < deadline, f"worker {pid} still alive"
        time.sleep(0.05)


@contextlib.contextmanager
def workers_stopped(store: TraceStore) -> Iterator[TraceStore]:
    """The store; on the way out, every worker of its jobs still running is killed with
    its process group: a failed test must not leave detached trainers behind."""
    try:
        yield store
    finally:
        for job in store.list_jobs():
            if job.pid is not None and worker_alive(job.pid, job.id):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.pid, signal.SIGKILL)


def assert_completed(store: TraceStore, job: Job, events: list[JobEvent]) -> Path:
    """The job ended well: progress events, a checkpoint, `done`, and a registered
    adapter whose folder is a whole PEFT adapter for the tiny model. Returns its folder."""
    assert job.status is JobStatus.COMPLETED, (job.error, log_path(job).read_text()[-2000:])
    assert job.progress == 1.0 and job.error is None
    assert job.started_at is not None and job.finished_at is not None
    assert {"log", "progress", "checkpoint", "done"} <= set(kinds(events))
    progress = [e for e in events if e.kind == "progress"]
    last = progress[-1].data
    assert last["step"] == last["total_steps"] == progress[-1].step
    for key in ("loss", "learning_rate", "eta_seconds", "epoch"):
        assert isinstance(last[key], float), key
    assert any(isinstance(e.data.get("tokens_per_second"), float) for e in progress)
    adapter = store.get_adapter(job.name)
    assert adapter.job_id == job.id and adapter.base_model == job.base_model
    folder = Path(adapter.path)
    assert folder == Path(job.config["data_dir"]) / "adapters" / job.name
    info = read_adapter(job.name, folder)
    assert info.rank == RANK and info.base_model == job.base_model
    assert (folder / "adapter_model.safetensors").is_file()
    assert not (folder / "training_args.bin").exists()
    assert adapter.metrics["dataset"]["kind"] == job.kind.value
    assert adapter.metrics["dataset"]["rows"] == 4
    assert Path(adapter.metrics["dataset"]["path"]).is_file()
    assert isinstance(adapter.metrics["train_loss"], float)
    # Nothing half-made is left beside it.
    assert sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(".")) == []
    return folder


# -- the trained adapters, shared by the loading tests --------------------------------------------


@pytest.fixture(scope="module")
def trained(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path
) -> Iterator[tuple[TraceStore, dict[str, tuple[Job, list[JobEvent]]]]]:
    """One SFT and one DPO job on the same labels, both queued at once (two workers side
    by side on one SQLite store), run to the end; the DPO job told to use 2 threads."""
    root = tmp_path_factory.mktemp("jobs")
    with TraceStore(root / "traces.db") as opened, workers_stopped(opened) as store:
        label_sessions(store)
        sft = queue_job(store, options(tiny_model_dir, JobKind.SFT), data_dir=root / "data")
        dpo = queue_job(
            store, options(tiny_model_dir, JobKind.DPO, cpu_threads=2), data_dir=root / "data"
        )
        assert sft.status is JobStatus.QUEUED or sft.status is JobStatus.RUNNING
        assert sft.pid is not None and sft.pid != dpo.pid
        yield store, {"sft": wait_finished(store, sft.id), "dpo": wait_finished(store, dpo.id)}


@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_job_runs_to_completion_in_a_detached_worker(
    trained: tuple[TraceStore, dict[str, tuple[Job, list[JobEvent]]]], kind: str
) -> None:
    store, jobs = trained
    job, events = jobs[kind]
    assert job.name == f"{kind}-{job.id}"
    assert_completed(store, job, events)
    assert job.config["host"] and job.config["kind"] == kind
    assert job.config["learning_rate"] == (2e-4 if kind == "sft" else 5e-5)
    # The worker exits once it has said so.
    assert job.pid is not None
    wait_gone(job.pid, job.id)
    log = log_path(job).read_text()
    assert f"worker: job {job.id} ({kind}" in log and "done: adapter" in log
    settings = next(e for e in events if (e.message or "").startswith("settings: cpu"))
    assert settings.data["settings"]["dtype"] == "float32"
    assert not settings.data["settings"]["gradient_checkpointing"]
    # all cores but one, unless the job says how many
    default = max(1, (os.cpu_count() or 1) - 1)
    assert settings.data["settings"]["cpu_threads"] == (default if kind == "sft" else 2)
    rows = [json.loads(line) for line in (job_dir(job) / "dataset.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    assert set(rows[0]) >= ({"prompt", "completion"} if kind == "sft" else {"chosen", "rejected"})


def test_trained_adapters_load_in_the_transformers_backend(
    trained: tuple[TraceStore, dict[str, tuple[Job, list[JobEvent]]]], tiny_model_dir: Path
) -> None:
    from agents.backends.transformers_backend import TransformersBackend

    store, jobs = trained
    backend = TransformersBackend(str(tiny_model_dir), device="cpu", dtype="float32")
    try:
        prompt = "#startblock type: action\n"
        base = backend.generate(prompt, max_tokens=8, temperature=0.0)[0]
        for kind in ("sft", "dpo"):
            adapter = store.get_adapter(jobs[kind][0].name)
            backend.load_adapter(adapter.name, adapter.path)
            backend.use_adapter(adapter.name)
            tuned = backend.generate(prompt, max_tokens=8, temperature=0.0)[0]
            assert tuned.token_ids and len(tuned.logprobs) == len(tuned.token_ids)
            assert backend.active_adapter == adapter.name
        backend.use_adapter(None)
        assert backend.generate(prompt, max_tokens=8, temperature=0.0)[0] == base
    finally:
        backend.close()


def test_trained_adapters_load_in_the_vllm_server(
    trained: tuple[TraceStore, dict[str, tuple[Job, list[JobEvent]]]],
    vllm_server: VLLMServer,
) -> None:
    """Runtime LoRA loading (/v1/load_lora_adapter) of both adapters, then a completion
    through each: what the openai backend does with `--adapter NAME`."""
    from agents.backends.openai_backend import OpenAIBackend

    store, jobs = trained
    backend = OpenAIBackend(vllm_server.base_url, SERVED_NAME, timeout=60)
    try:
        for kind in ("sft", "dpo"):
            adapter = store.get_adapter(jobs[kind][0].name)
            backend.load_adapter(adapter.name, adapter.path)
            backend.use_adapter(adapter.name)
            candidate = backend.generate("#startblock type: action\n", max_tokens=8)[0]
            assert candidate.token_ids
        assert set(backend.adapters()) >= {jobs["sft"][0].name, jobs["dpo"][0].name}
    finally:
        backend.close()


def test_a_job_on_postgresql_runs_to_completion(
    pg_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The worker gets the store's URL (password included) through its environment, not
    its command line, and reports to PostgreSQL the same way."""
    with TraceStore(pg_url) as opened, workers_stopped(opened) as store:
        label_sessions(store)
        job = queue_job(
            store, options(tiny_model_dir, JobKind.SFT, epochs=1), data_dir=tmp_path / "data"
        )
        cmdline = Path(f"/proc/{job.pid}/cmdline").read_bytes().split(b"\0")
        assert b"--db-from-env" in cmdline
        credentials = pg_url.split("@")[0].split("//")[-1]
        assert all(credentials.encode() not in part for part in cmdline)
        assert credentials not in job.config["db"]
        done, events = wait_finished(store, job.id)
        assert_completed(store, done, events)


# -- cancel, kill, resume --------------------------------------------------------------------------


def test_cancel_saves_a_checkpoint_and_resume_completes(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    with TraceStore(tmp_path / "traces.db") as opened, workers_stopped(opened) as store:
        label_sessions(store)
        job = queue_job(
            store,
            options(tiny_model_dir, JobKind.SFT, max_steps=60, save_steps=30, logging_steps=4),
            data_dir=tmp_path / "data",
        )
        wait_for(store, job.id, lambda j, ev: "progress" in kinds(ev))
        asked = cancel_job(store, job.id)
        assert asked.status is JobStatus.CANCELLING
        cancelled, events = wait_finished(store, job.id)
        assert cancelled.status is JobStatus.CANCELLED, cancelled.error
        assert cancelled.finished_at is not None and cancelled.error is None
        checkpoint = last_checkpoint(checkpoints_dir(cancelled))
        assert checkpoint is not None
        stopped_at = checkpoint_step(checkpoint)
        assert stopped_at is not None and 0 < stopped_at < 60
        assert "cancel" in kinds(events) and "done" not in kinds(events)
        assert events[-1].message is not None and "cancelled at step" in events[-1].message
        with pytest.raises(JobError, match="already cancelled"):
            cancel_job(store, job.id)
        wait_gone(cancelled.pid or 0, job.id)

        resumed = resume_job(store, job.id)
        assert resumed.status in (JobStatus.QUEUED, JobStatus.RUNNING)
        assert resumed.pid != cancelled.pid
        with pytest.raises(JobError, match="only a failed or cancelled job resumes"):
            resume_job(store, job.id)
        done, events = wait_finished(store, job.id)
        assert_completed(store, done, events)
        assert any(e.message == f"resumed at step {stopped_at} of 60" for e in events)
        # Training went on from the checkpoint, not from step 1 again.
        steps = [e.step for e in events if e.kind == "progress"]
        assert steps == sorted(steps) and steps[-1] == 60
        with pytest.raises(JobError, match="is completed"):
            resume_job(store, job.id)


def kill_when(
    store: TraceStore, tmp_path: Path, model: Path, kind: JobKind, event: str, signum: int
) -> Job:
    """A job of 40 steps (checkpoints every 10) on labelled sessions, its worker sent
    `signum` at its first `event` and gone."""
    label_sessions(store)
    job = queue_job(
        store,
        options(model, kind, max_steps=40, save_steps=10, logging_steps=4),
        data_dir=tmp_path / "data",
    )
    running, _ = wait_for(store, job.id, lambda j, ev: event in kinds(ev))
    assert running.status is JobStatus.RUNNING and running.pid is not None
    os.kill(running.pid, signum)
    wait_gone(running.pid, job.id)
    return job


def test_sigkill_leaves_a_failed_resumable_job_and_an_intact_store(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    with TraceStore(tmp_path / "traces.db") as opened, workers_stopped(opened) as store:
        job = kill_when(store, tmp_path, tiny_model_dir, JobKind.DPO, "checkpoint", signal.SIGKILL)

        # Nobody told the store: the job still says running until a reader looks.
        assert store.get_job(job.id).status is JobStatus.RUNNING
        reaped = reap_dead_jobs(store)
        assert [j.id for j in reaped] == [job.id]
        failed = store.get_job(job.id)
        assert failed.status is JobStatus.FAILED
        assert failed.error is not None and "died" in failed.error and "resume" in failed.error
        assert interrupted(failed)
        assert reap_dead_jobs(store) == []  # once
        assert store.health()["integrity"] == "ok"
        checkpoint = last_checkpoint(checkpoints_dir(failed))
        assert checkpoint is not None

        resume_job(store, job.id)
        done, events = wait_finished(store, job.id)
        assert_completed(store, done, events)
        assert any(
            e.message == f"resumed at step {checkpoint_step(checkpoint)} of 40" for e in events
        )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_the_workers_handler_names_each_ending_signal(signum: signal.Signals) -> None:
    """In process: SIGTERM, SIGINT and SIGHUP each stop the worker with `Stopped`, which
    names the signal (its job's error, below)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        worker._stop_on_signals()
        with pytest.raises(worker.Stopped, match=f"^{STOPPED_BY_SIGNAL} {signum.name}$"):
            os.kill(os.getpid(), signum)
            time.sleep(10)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_sigterm_ends_a_job_failed_with_the_signal_named_and_resumable(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """A worker process sent SIGTERM (the handler it shares with SIGINT and SIGHUP, above)."""
    signum = signal.SIGTERM
    with TraceStore(tmp_path / "traces.db") as opened, workers_stopped(opened) as store:
        job = kill_when(store, tmp_path, tiny_model_dir, JobKind.SFT, "progress", signum)
        stopped = store.get_job(job.id)  # the worker said so itself: no reaping needed
        assert stopped.status is JobStatus.FAILED
        assert stopped.error == f"stopped by signal {signum.name}"
        assert stopped.status in RESUMABLE and interrupted(stopped)

        # Whoever waits on it (an improvement round) runs it again, to its end.
        resume_if_interrupted(store, job.id)
        done, events = wait_finished(store, job.id)
        assert_completed(store, done, events)


def test_a_failing_job_ends_failed_in_one_line_with_the_traceback_in_its_log(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the worker inherits it: no hub to ask
    with TraceStore(tmp_path / "traces.db") as opened, workers_stopped(opened) as store:
        label_sessions(store)
        job = queue_job(
            store,
            options(tiny_model_dir, JobKind.SFT, base_model="nobody/no-such-model"),
            data_dir=tmp_path / "data",
        )
        failed, events = wait_finished(store, job.id)
        assert failed.status is JobStatus.FAILED
        assert failed.error is not None and "\n" not in failed.error
        assert failed.error.startswith("cannot load base model 'nobody/no-such-model'")
        assert events[-1].kind == "error" and events[-1].message == failed.error
        assert "Traceback (most recent call last)" in log_path(failed).read_text()
        # It failed on its own: nothing to run again.
        assert not interrupted(failed)
        assert resume_if_interrupted(store, job.id) == store.get_job(job.id) == failed
        assert store.list_adapters() == []
        assert not (Path(failed.config["data_dir"]) / "adapters").exists()


def test_a_recycled_pid_counts_as_a_dead_worker(tmp_path: Path) -> None:
    """The job's pid now belongs to some other program: its worker is gone."""
    with TraceStore(tmp_path / "traces.db") as store:
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            job = store.create_job(
                "sft", "recycled", config={"data_dir": str(tmp_path), "host": os.uname().nodename}
            )
            store.update_job(job.id, status=JobStatus.RUNNING, pid=other.pid)
            assert worker_alive(other.pid) is False
            assert [j.id for j in reap_dead_jobs(store)] == [job.id]
            assert store.get_job(job.id).status is JobStatus.FAILED
        finally:
            other.kill()
            other.wait()


def test_a_job_on_another_host_is_left_alone(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "traces.db") as store:
        job = store.create_job("sft", "elsewhere", config={"host": "some-other-machine"})
        store.update_job(job.id, status=JobStatus.RUNNING, pid=os.getpid())
        assert reap_dead_jobs(store) == []
        store.update_job(job.id, status=JobStatus.FAILED)
        with pytest.raises(JobError, match="ran on host 'some-other-machine'"):
            resume_job(store, job.id)


# -- refusals ------------------------------------------------------------------------------------


def test_too_little_data_is_refused_before_any_job_exists(
    store: TraceStore, tiny_model_dir: Path, tmp_path: Path
) -> None:
    for kind in (JobKind.SFT, JobKind.DPO):
        with pytest.raises(NotEnoughDataError, match="needs at least 1"):
            queue_job(store, options(tiny_model_dir, kind), data_dir=tmp_path)
    # Approvals make SFT examples but no pairs: DPO is still refused.
    builder = SessionBuilder(store, "approved only")
    builder.executed(1)
    with pytest.raises(NotEnoughDataError, match="DPO needs at least 1 pair"):
        queue_job(store, options(tiny_model_dir, JobKind.DPO), data_dir=tmp_path)
    # Only labels from --since on count.
    with pytest.raises(NotEnoughDataError, match="only labels from --since"):
        queue_job(
            store, options(tiny_model_dir, JobKind.SFT, since=time.time() + 3600), data_dir=tmp_path
        )
    assert store.list_jobs() == []


def test_bad_requests_are_refused_in_one_line(
    tmp_path: Path, tiny_model_dir: Path, tiny_adapter_dir: Path
) -> None:
    with TraceStore(tmp_path / "traces.db") as store:
        label_sessions(store)
        store.register_adapter("taken", base_model=str(tiny_model_dir), path=tiny_adapter_dir)
        for changes, message in [
            ({"name": "taken"}, "an adapter named 'taken' already exists"),
            ({"name": "no spaces"}, "--name 'no spaces'"),
            ({"name": ".hidden"}, "--name '.hidden'"),
            ({"lora_r": 0}, "--lora-r 0"),
            ({"epochs": 0}, "--epochs 0: must be > 0"),
            ({"learning_rate": -1.0}, "--lr -1: must be > 0"),
            ({"base_model": str(tmp_path / "nope")}, "not a model folder"),
        ]:
            with pytest.raises(JobError, match=re.escape(message)) as raised:
                queue_job(store, options(tiny_model_dir, JobKind.SFT, **changes), data_dir=tmp_path)
            assert "\n" not in str(raised.value)
        queued = queue_job(
            store, options(tiny_model_dir, JobKind.SFT, name="mine"), data_dir=tmp_path, spawn=False
        )
        with pytest.raises(
            JobError, match=r"job 1 \(queued\) already trains an adapter named 'mine'"
        ):
            queue_job(store, options(tiny_model_dir, JobKind.DPO, name="mine"), data_dir=tmp_path)
        with pytest.raises(JobError, match="no job 99"):
            cancel_job(store, 99)
        with pytest.raises(JobError, match="only a failed or cancelled job resumes"):
            resume_job(store, queued.id)
        # Queued, but no worker ever started: cancelling it is immediate.
        assert cancel_job(store, queued.id).status is JobStatus.CANCELLED


def test_a_worker_started_for_a_cancelled_job_does_nothing(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The cancel came before the worker got going: it ends the job without training."""
    with TraceStore(tmp_path / "traces.db") as opened, workers_stopped(opened) as store:
        label_sessions(store)
        job = queue_job(
            store, options(tiny_model_dir, JobKind.SFT), data_dir=tmp_path / "data", spawn=False
        )
        store.update_job(job.id, status=JobStatus.CANCELLING)
        done = subprocess.run(
            [sys.executable, "-m", "training.worker", str(job.id), "--db", store.url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        job = store.get_job(job.id)
        assert job.status is JobStatus.CANCELLED
        assert not (job_dir(job) / "dataset.jsonl").exists()
        bad = subprocess.run(
            [sys.executable, "-m", "training.worker", "77", "--db", store.url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bad.returncode == 2 and bad.stderr.strip() == f"worker: no job 77 in {store.where}"


# -- the settings picker ---------------------------------------------------------------------------


def test_model_shapes_count_parameters_like_the_real_checkpoints() -> None:
    small, large = ModelShape.from_config(QWEN2_05B), ModelShape.from_config(QWEN2_7B)
    assert small.parameters == pytest.approx(494e6, rel=0.01)
    assert large.parameters == pytest.approx(7.62e9, rel=0.01)
    assert small.lora_parameters(64) == pytest.approx(35.2e6, rel=0.02)


def test_cpu_gets_float32_without_checkpointing() -> None:
    small = ModelShape.from_config(QWEN2_05B)
    for kind in ("sft", "dpo"):
        settings = pick_settings(kind, small, Hardware.cpu(), max_length=4096, lora_r=16)
        assert settings.dtype == "float32" and not settings.bf16 and not settings.fp16
        assert not settings.gradient_checkpointing and not settings.packing
        assert not settings.liger and settings.processes == 1
        assert settings.cpu_threads == 1  # one core of Hardware.cpu()'s one
    # One core is left for everything else: spinning OpenMP threads crawl beside it.
    assert pick_settings("sft", small, Hardware.cpu(2), max_length=512, lora_r=8).cpu_threads == 1
    assert pick_settings("sft", small, Hardware.cpu(16), max_length=512, lora_r=8).cpu_threads == 15


def test_a_small_model_on_an_h100_packs_in_bf16_without_checkpointing() -> None:
    settings = pick_settings(
        "sft", ModelShape.from_config(QWEN2_05B), FLASH_H100, max_length=4096, lora_r=64
    )
    assert settings.bf16 and settings.dtype == "bfloat16"
    assert settings.packing and not settings.gradient_checkpointing
    assert model_kwargs(settings)["attn_implementation"] == "flash_attention_2"
    assert trl_config_kwargs(JobKind.SFT, settings, 4096)["packing_strategy"] == "bfd"
    assert settings.per_device_batch_size * settings.gradient_accumulation_steps == 8
    assert settings.estimated_peak_bytes is not None
    assert settings.estimated_peak_bytes < 0.88 * H100.free_memory
    with_liger = pick_settings(
        "sft", ModelShape.from_config(QWEN2_05B), LIGER_H100, max_length=4096, lora_r=64
    )
    assert with_liger.liger


def test_without_flash_attention_sft_pads_rows_instead_of_packing() -> None:
    """trl packs padding-free, the micro-batch flattened into one row, and supports that
    with FlashAttention only: through sdpa the 0.5B run (8 x 4k tokens in one row) was
    slower than trl's defaults and took 90 GiB against a 55.5 GiB plan on an H200."""
    settings = pick_settings(
        "sft", ModelShape.from_config(QWEN2_05B), H100, max_length=4096, lora_r=64
    )
    assert not settings.packing and settings.attention == "sdpa"
    assert any("FlashAttention" in note for note in settings.notes)
    assert "packing" not in trl_config_kwargs(JobKind.SFT, settings, 4096)
    assert model_kwargs(settings)["attn_implementation"] == "sdpa"
    # the plan counts every row at its full length: padding is planned for
    assert settings.estimated_peak_bytes == estimate_peak_bytes(
        ModelShape.from_config(QWEN2_05B),
        tokens=settings.per_device_batch_size * 4096,
        lora_r=64,
        checkpointing=settings.gradient_checkpointing,
    )


def test_the_plan_counts_trls_lm_head_tile() -> None:
    """trl's SFT computes the LM head in tiles of at most its token chunk by its vocabulary
    chunk (the logits are never whole: `bench/train.py --head-memory`); the plan counts at
    least one such tile, in float32, whatever the vocabulary and tokens."""
    from trl.kernels.chunked_logprob import TOKEN_CHUNK_SIZE
    from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE

    shape = ModelShape.from_config(QWEN2_05B)
    tile = TOKEN_CHUNK_SIZE * min(_CHUNKED_LOGPROB_CHUNK_SIZE, shape.vocab_size) * 4
    for tokens in (4096, 32768):
        plain = estimate_peak_bytes(shape, tokens=tokens, lora_r=64, checkpointing=False)
        headless = dataclasses.replace(shape, vocab_size=1)
        without = estimate_peak_bytes(headless, tokens=tokens, lora_r=64, checkpointing=False)
        weights = (shape.parameters - headless.parameters) * 2  # the embedding, bf16
        assert plain - without - weights >= tile


def test_a_7b_model_fits_two_sequences_without_checkpointing_on_an_h100() -> None:
    """The configuration trl 1.16 measured fastest (63.7 GiB peak) is the one picked."""
    shape = ModelShape.from_config(QWEN2_7B)
    settings = pick_settings("sft", shape, LIGER_H100, max_length=4096, lora_r=64)
    assert not settings.gradient_checkpointing
    assert settings.per_device_batch_size == 2 and settings.gradient_accumulation_steps == 4
    planned = estimate_peak_bytes(shape, tokens=8192, lora_r=64, checkpointing=False, liger=True)
    assert 60 * GIB < planned < 75 * GIB


def test_less_memory_shrinks_the_batch_before_checkpointing() -> None:
    shape = ModelShape.from_config(QWEN2_7B)
    gpu = Hardware(device="cuda", gpu_count=1, free_memory=int(23 * GIB), bf16=True)
    settings = pick_settings("sft", shape, gpu, max_length=4096, lora_r=16)
    assert settings.gradient_checkpointing and settings.per_device_batch_size >= 1
    assert any("checkpointing" in note for note in settings.notes)
    small = pick_settings("sft", shape, gpu, max_length=256, lora_r=16)
    assert not small.gradient_checkpointing
    qlora = pick_settings(
        "dpo",
        shape,
        dataclasses.replace(gpu, bitsandbytes=True),
        max_length=1024,
        lora_r=16,
        qlora=True,
    )
    assert qlora.quantize_4bit and not qlora.packing


def test_old_gpus_get_fp16_and_several_gpus_share_the_batch() -> None:
    shape = ModelShape.from_config(QWEN2_05B)
    old = pick_settings(
        "sft",
        shape,
        Hardware(device="cuda", gpu_count=1, free_memory=int(15 * GIB)),
        max_length=1024,
        lora_r=16,
    )
    assert old.fp16 and not old.bf16 and old.dtype == "float16"
    many = pick_settings(
        "sft",
        shape,
        Hardware(device="cuda", gpu_count=4, free_memory=int(79 * GIB), bf16=True),
        max_length=1024,
        lora_r=16,
    )
    assert many.processes == 4
    assert many.per_device_batch_size * many.gradient_accumulation_steps * 4 >= 8


def test_qlora_is_refused_without_cuda_or_bitsandbytes() -> None:
    shape = ModelShape.from_config(QWEN2_05B)
    with pytest.raises(TrainingError, match="--qlora needs a CUDA GPU"):
        pick_settings("sft", shape, Hardware.cpu(), max_length=512, lora_r=8, qlora=True)
    with pytest.raises(TrainingError, match="--qlora needs bitsandbytes"):
        pick_settings("sft", shape, H100, max_length=512, lora_r=8, qlora=True)


def test_a_cpu_with_native_bf16_trains_big_enough_models_in_bf16() -> None:
    small = ModelShape.from_config(QWEN2_05B)
    native = Hardware(device="cpu", bf16=True, cpu_count=2)
    settings = pick_settings("sft", small, native, max_length=2048, lora_r=16)
    # bf16 base weights (peft keeps the LoRA weights in float32)
    assert settings.dtype == "bfloat16" and settings.bf16 and not settings.fp16
    assert "bf16 weights" in " ".join(settings.notes)
    tiny = ModelShape.from_config({**QWEN2_05B, "num_hidden_layers": 1, "hidden_size": 64,
                                   "intermediate_size": 128, "vocab_size": 1000})  # fmt: skip
    assert not pick_settings("sft", tiny, native, max_length=512, lora_r=8).bf16
    assert not pick_settings("sft", small, Hardware.cpu(2), max_length=512, lora_r=8).bf16


def test_rows_longer_than_max_length_keep_the_prompts_end_and_the_whole_completion(
    tiny_model_dir: Path,
) -> None:
    import datasets
    from transformers import AutoTokenizer

    from training.trainer import fit_prompts

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    context = " ".join(f"line {n} of the context" for n in range(200))
    rows = datasets.Dataset.from_list(
        [
            {"prompt": context + " the block's header", "completion": "the block itself"},
            {"prompt": "a short prompt", "completion": "a short block"},
        ]
    )
    fitted, cut = fit_prompts(rows, tokenizer, max_length=64)
    assert cut == 1
    long, short = fitted[0], fitted[1]
    assert short == {"prompt": "a short prompt", "completion": "a short block"}
    assert long["completion"] == "the block itself"
    assert long["prompt"].endswith("the block's header") and "line 0 " not in long["prompt"]
    ids = tokenizer(long["prompt"] + long["completion"], add_special_tokens=False)["input_ids"]
    assert len(ids) <= 64


def small_trainer(kind: str, model: Path, output: Path, rows: Any) -> Any:
    """trl's `kind` trainer (SFT or DPO) on the tiny model with a LoRA, on the CPU, two
    rows a batch: to compare our CPU losses with trl's own."""
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.trainer import lora_config

    reference = {"ref_model": None} if kind == "DPO" else {}
    return getattr(trl, f"{kind}Trainer")(
        model=AutoModelForCausalLM.from_pretrained(model),
        args=getattr(trl, f"{kind}Config")(
            output_dir=str(output), per_device_train_batch_size=2, use_cpu=True,
            report_to="none", max_length=256, disable_tqdm=True,
        ),
        train_dataset=rows,
        processing_class=AutoTokenizer.from_pretrained(model),
        peft_config=lora_config(8),
        **reference,
    )  # fmt: skip


def test_the_cpu_sft_loss_equals_trls_with_the_head_on_the_completion_only(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import datasets
    import torch

    from training.trainer import completion_loss

    rows = datasets.Dataset.from_list(
        [
            {"prompt": "the task: fix the bug in the package " * 4, "completion": "fixed it"},
            {"prompt": "a shorter prompt", "completion": "a longer completion of a few words"},
        ]
    )
    trainer = small_trainer("SFT", tiny_model_dir, tmp_path, rows)
    batch = next(iter(trainer.get_train_dataloader()))
    assert (batch["labels"] == -100).any() and (batch["labels"] != -100).any()
    with torch.no_grad():
        theirs = trainer.compute_loss(trainer.model, dict(batch))
        ours = completion_loss(trainer.model, dict(batch))
        # the loss is on the completion: counting the prompt's tokens would differ
        wrong = dict(
            batch, labels=batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        )
        every = completion_loss(trainer.model, wrong)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-4)
    assert float(every) != pytest.approx(float(theirs), rel=1e-4)


@pytest.mark.parametrize("kind", [JobKind.SFT, JobKind.DPO])
def test_on_a_cpu_a_batch_runs_a_row_at_a_time_with_the_padded_batchs_step(
    kind: JobKind, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """On a CPU, SFT's batch of 4 rows (DPO's of 2 pairs) runs as micro-batches of one,
    none padded to another's length: the step's loss and gradient norm are those of the
    batch padded whole."""
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.losses import compact_fused_head
    from training.trainer import lora_config, trl_classes

    shape = ModelShape.from_config(QWEN2_05B)
    one_row = pick_settings(kind, shape, Hardware.cpu(2), max_length=256, lora_r=8)
    size = 4 if kind is JobKind.SFT else 2
    assert (one_row.per_device_batch_size, one_row.gradient_accumulation_steps) == (1, size)
    padded = dataclasses.replace(one_row, per_device_batch_size=size, gradient_accumulation_steps=1)
    rows = datasets.Dataset.from_list(
        [
            {"prompt": "fix the bug in the package " * n, "completion": "done " * (5 - n)}
            if kind is JobKind.SFT
            else {
                "prompt": "fix the bug in the package " * n,
                "chosen": "done " * (5 - n),
                "rejected": "not yet " * n,
            }
            for n in range(1, size + 1)
        ]
    )

    def first_step(settings: Any, name: str) -> dict[str, float]:
        torch.manual_seed(0)  # the same LoRA weights to start from
        trainer_class, config_class = trl_classes(kind, "cpu")
        config = config_class(
            output_dir=str(tmp_path / name), max_steps=1, learning_rate=1e-3, logging_steps=1,
            report_to="none", disable_tqdm=True, seed=0,
            **trl_config_kwargs(kind, settings, 256),
        )  # fmt: skip
        trainer = trainer_class(
            model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
            args=config,
            train_dataset=rows,
            processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
            peft_config=lora_config(8),
            **({} if kind is JobKind.SFT else {"ref_model": None}),
        )
        if kind is JobKind.DPO:
            compact_fused_head(trainer.model.get_base_model())
        trainer.train()
        step: dict[str, float] = trainer.state.log_history[0]
        return step

    whole, by_row = first_step(padded, "padded"), first_step(one_row, "by-row")
    assert by_row["loss"] == pytest.approx(whole["loss"], rel=1e-4)
    assert by_row["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-3)


def test_the_cpu_dpo_head_gives_trls_log_probs_from_the_completions_positions_only(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import datasets
    import torch

    from training.trainer import compact_fused_head

    rows = datasets.Dataset.from_list(
        [
            {
                "prompt": "the task: fix the bug " * 6,
                "chosen": "fixed it",
                "rejected": "broke it all over",
            },
            {"prompt": "a short prompt", "chosen": "a longer right answer", "rejected": "no"},
        ]
    )
    trainer = small_trainer("DPO", tiny_model_dir, tmp_path, rows)
    batch = dict(next(iter(trainer.get_train_dataloader())))
    base = trainer.model.get_base_model()
    labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, -100)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    rows_through_head: list[int] = []
    hook = base.get_output_embeddings().register_forward_hook(
        lambda module, args, out: rows_through_head.append(
            args[0].reshape(-1, args[0].shape[-1]).shape[0]
        )
    )
    with torch.no_grad():
        theirs = trainer.model(**inputs, labels=labels, fused_lm_head=True)
        their_loss = trainer.compute_loss(trainer.model, batch)
        compact_fused_head(base)
        rows_through_head.clear()
        ours = trainer.model(**inputs, labels=labels, fused_lm_head=True)
        our_loss = trainer.compute_loss(trainer.model, batch)
    hook.remove()
    kept = int((labels[:, 1:] != -100).any(dim=0).sum())
    assert rows_through_head[0] == labels.shape[0] * kept < labels[:, 1:].numel()
    assert (theirs.log_probs != 0).any()
    for field in ("log_probs", "entropy", "mean_logits"):
        torch.testing.assert_close(
            getattr(ours, field), getattr(theirs, field), rtol=1e-4, atol=1e-4
        )
    assert torch.equal(ours.is_top1, theirs.is_top1)
    assert float(our_loss) == pytest.approx(float(their_loss), rel=1e-4)


def test_a_job_on_some_sessions_counts_the_rows_of_those_only(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    from training import starter

    shipped = str(starter.SESSIONS)
    with TraceStore(tmp_path / "traces.db") as store:
        every = queue_job(
            store,
            JobOptions(JobKind.SFT, str(tiny_model_dir), name="every", labels_from=shipped),
            data_dir=tmp_path / "data",
            spawn=False,
        )
        first = queue_job(
            store,
            JobOptions(
                JobKind.SFT, str(tiny_model_dir), name="first", labels_from=shipped, sessions=(1,)
            ),
            data_dir=tmp_path / "data",
            spawn=False,
        )
    assert 0 < first.config["rows_at_queue"] < every.config["rows_at_queue"]
