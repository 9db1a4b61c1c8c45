"""A training worker SIGKILLed at any moment of saving: the adapter registry never names a
partial folder, the next reader reaps the job as failed, and `train resume ID` finishes it
with a whole adapter. A registered adapter damaged later is reported in one line.

How: one real SFT job on the tests' tiny Qwen2 model, trained by the real detached worker
(`python -m training.worker`) into a real SQLite store. The test polls the job's folders
about every millisecond and SIGKILLs the worker's process group at these moments, with no
hook in the product:

1. `checkpoint`: a checkpoint folder has appeared after a complete one, and its
   `trainer_state.json` (the trainer writes it last) has not yet;
2. `staging`: the adapter's staging folder (`adapters/.NAME.tmp-ID`) exists and
   `adapters/NAME` does not: the adapter is being saved;
3. `renamed`: `adapters/NAME` has appeared (the rename) and the registry has no row. From
   the moment the worker's training writes are over the test holds SQLite's write lock, as
   any other writer of the store may, so the worker cannot register before the kill;
4. `registered`: the registry has the row (the kill lands before or after the job's
   `done`, whichever the race gives: both must be consistent).

The windows are tens of milliseconds; a poll that wakes too late tries the next chance (the
next checkpoint, the next run). After every kill, the real `agent-console` executable is the
reader: `train status ID` reaps the job; the registry is empty or names `adapters/NAME`
holding a whole adapter; `adapters` exits 0 listing only whole ones (a staging folder left
behind is ignored); `--adapter NAME` is refused in one line while nothing is registered;
`train resume ID` continues from the last complete checkpoint. The end: a completed job,
one registered adapter that safetensors and peft load, no staging folder left.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agents.backends.base import AdapterError
from agents.backends.lora import read_adapter, safetensors_problem
from storage import Job, JobKind, JobStatus, TraceStore
from tests.app.test_cli import SCRIPT
from tests.support.label_trees import SessionBuilder
from training.job_files import (
    adapter_path,
    checkpoint_complete,
    checkpoint_step,
    checkpoints_dir,
    last_checkpoint,
    log_path,
)
from training.jobs import JobOptions, queue_job, worker_alive

pytestmark = [pytest.mark.worker, pytest.mark.cli, pytest.mark.timeout(900)]

RANK = 8
#: one step per epoch (four rows, batch 4), a checkpoint at every step
MAX_STEPS = 4
POINTS = ("checkpoint", "staging", "renamed", "registered")
#: worker runs allowed for the four points (a run per point, and room for misses)
MAX_RUNS = 8
WEIGHTS = "adapter_model.safetensors"


# -- the real executable as the reader ----------------------------------------------------------


def cli(tmp_path: Path, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CONSOLE_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg-data")
    return subprocess.run(
        [str(SCRIPT), "--db", str(db), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one `agent-console: error:` line of a refusal with exit 2."""
    assert "Traceback" not in result.stdout + result.stderr
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agent-console: error: "), result.stderr
    return lines[0]


# -- the job and its files -------------------------------------------------------------------------


def staging_path(job: Job) -> Path:
    """Where the trainer saves the adapter before the rename (training/trainer.py)."""
    return adapter_path(job).with_name(f".{job.name}.tmp-{job.id}")


def registry(db: Path) -> list[tuple[str, str, int | None]]:
    """(name, path, job_id) of every registered adapter, read past the store's API."""
    with contextlib.closing(sqlite3.connect(db, timeout=60)) as conn:
        return conn.execute("SELECT name, path, job_id FROM adapter ORDER BY id").fetchall()


def assert_whole_adapter(folder: Path, model: Path, base: str | None, *, load: bool) -> None:
    """A LoRA adapter the backends load: its config (naming the job's `base`), weights
    whose header covers the file; with `load`, safetensors reads every tensor and peft
    puts it on the tiny model."""
    info = read_adapter("check", folder)
    assert info.rank == RANK and info.base_model == base
    assert safetensors_problem(folder / WEIGHTS) is None
    if not load:
        return
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    tensors = load_file(str(folder / WEIGHTS))
    assert tensors and all("lora_A" in k or "lora_B" in k for k in tensors)
    tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model), str(folder))
    assert getattr(tuned.peft_config["default"], "r", None) == RANK
    loaded = {k for k, _ in tuned.named_parameters() if "lora_" in k}
    assert len(loaded) == len(tensors)


@contextlib.contextmanager
def workers_killed(db: Path) -> Iterator[None]:
    """On the way out, every worker of the store's jobs still alive is killed with its
    process group: a failed test leaves no detached trainer behind."""
    try:
        yield
    finally:
        with TraceStore(db) as store:
            for job in store.list_jobs():
                if job.pid is not None and worker_alive(job.pid, job.id):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(job.pid, signal.SIGKILL)


class Run:
    """One worker run of the job, watched until it reaches the first pending point."""

    def __init__(self, store: TraceStore, db: Path, job: Job, baseline: int) -> None:
        self.store, self.db, self.job, self.baseline = store, db, job, baseline
        self.pid = job.pid
        assert self.pid is not None
        self.checkpoints = checkpoints_dir(job)
        self.staging, self.final = staging_path(job), adapter_path(job)
        self.seen: set[int] = set()
        #: the partial checkpoint the kill left, and the complete one before it
        self.partial: Path | None = None
        self.previous: Path | None = None

    def training_over(self) -> bool:
        """The worker's last write before it saves the adapter is behind it: the final
        checkpoint's event, or (a run resumed at the end) the `resumed at` line."""
        resumed = f"resumed at step {MAX_STEPS} of {MAX_STEPS}"
        return any(
            (e.kind == "checkpoint" and e.step == MAX_STEPS) or e.message == resumed
            for e in self.store.job_events(self.job.id, after_id=self.baseline)
        )

    def mid_checkpoint(self) -> bool:
        """A checkpoint folder seen for the first time without its trainer_state.json,
        after a complete one. One seen complete at first sight was missed: not this."""
        if not self.checkpoints.is_dir():
            return False
        for entry in os.scandir(self.checkpoints):
            step = checkpoint_step(Path(entry.path))
            if step is None or step in self.seen:
                continue
            self.seen.add(step)
            if (Path(entry.path) / "trainer_state.json").exists():
                continue
            earlier = last_checkpoint(self.checkpoints)
            if earlier is not None and (checkpoint_step(earlier) or 0) < step:
                self.partial, self.previous = Path(entry.path), earlier
                return True
        return False

    def kill(self) -> None:
        assert self.pid is not None
        with contextlib.suppress(ProcessLookupError):  # it ended (and was reaped) just now
            os.killpg(self.pid, signal.SIGKILL)

    def watch(self, pending: list[str], timeout: float = 300) -> str:
        """SIGKILL the worker at the first of `pending` reached; return the point, or
        "finished" when the job ended first. Holds the store's write lock from the end of
        training while `staging` or `renamed` is pending (released before returning)."""
        lock = sqlite3.connect(self.db, timeout=60, isolation_level=None)
        locked = False
        deadline = time.monotonic() + timeout
        tick = 0
        try:
            while True:
                tick += 1
                if "checkpoint" in pending and self.mid_checkpoint():
                    self.kill()
                    return "checkpoint"
                wants_lock = "staging" in pending or "renamed" in pending
                if wants_lock and not locked and tick % 4 == 0 and self.training_over():
                    lock.execute("BEGIN IMMEDIATE")
                    locked = True
                    assert registry(self.db) == [], "registered before the lock"
                if "staging" in pending and self.staging.is_dir() and not self.final.exists():
                    self.kill()
                    return "staging"
                if locked and self.final.is_dir():
                    # Renamed, and cannot register while the lock is held: kill it here
                    # even when this point was reached before (`staging` was missed).
                    self.kill()
                    return "renamed"
                if "registered" in pending and not wants_lock and registry(self.db):
                    self.kill()
                    return "registered"
                if tick % 50 == 0:
                    if not worker_alive(self.pid or 0, self.job.id):
                        return "finished"
                    if time.monotonic() > deadline:
                        log = log_path(self.job).read_text(errors="replace")[-3000:]
                        pytest.fail(f"no kill point in {timeout} s; worker log:\n{log}")
                time.sleep(0.001)
        finally:
            if locked:
                deadline = time.monotonic() + 30
                while worker_alive(self.pid or 0, self.job.id):
                    assert time.monotonic() < deadline
                    time.sleep(0.02)
                lock.execute("ROLLBACK")
            lock.close()


def wait_gone(pid: int, job_id: int) -> None:
    deadline = time.monotonic() + 30
    while worker_alive(pid, job_id):
        assert time.monotonic() < deadline, f"worker {pid} still alive after SIGKILL"
        time.sleep(0.02)


# -- the kill points -------------------------------------------------------------------------------


@pytest.mark.slow
def test_sigkill_at_every_moment_of_saving_never_registers_a_partial_adapter(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    db = tmp_path / "traces.db"
    data = tmp_path / "data"
    with TraceStore(db) as store, workers_killed(db):
        builder = SessionBuilder(store, "edits")
        for tick in range(1, 5):
            builder.edited(tick)
        options = JobOptions(
            kind=JobKind.SFT,
            base_model=str(tiny_model_dir),
            epochs=MAX_STEPS,
            lora_r=RANK,
            max_length=512,
            max_steps=MAX_STEPS,
            save_steps=1,
            logging_steps=1,
            poll_seconds=0.0,
        )
        job = queue_job(store, options, data_dir=data)
        name, final, staging = job.name, adapter_path(job), staging_path(job)
        pending = list(POINTS)
        reached: list[str] = []
        expected_resume: int | None = None
        baseline = 0
        for _ in range(MAX_RUNS):
            run = Run(store, db, store.get_job(job.id), baseline)
            point = run.watch(pending)
            assert run.pid is not None
            wait_gone(run.pid, job.id)
            events = store.job_events(job.id, after_id=baseline)
            if expected_resume is not None and any(e.kind == "progress" for e in events):
                # The run before left a partial checkpoint: this one went on from the
                # complete one before it, and trained the steps after it again.
                messages = [e.message for e in events]
                assert f"resuming from checkpoint-{expected_resume}" in messages
                assert f"resumed at step {expected_resume} of {MAX_STEPS}" in messages
                steps = [e.step for e in events if e.kind == "progress"]
                assert steps[0] == expected_resume + 1, steps
                expected_resume = None
            if point == "finished":
                break
            reached.append(point)
            if point in pending:
                pending.remove(point)

            # The reader after the kill: the job is failed (or, killed after its `done`,
            # completed), and says where it goes on from.
            status = ok(cli(tmp_path, db, "train", "status", str(job.id)))
            now = store.get_job(job.id)
            assert now.status in (JobStatus.FAILED, JobStatus.COMPLETED), now
            if point != "registered":
                assert now.status is JobStatus.FAILED
                assert f"job {job.id}: sft -> adapter {name!r}, failed" in status
                assert "died without finishing" in status and "train resume" in status

            # The registry: nothing, or adapters/NAME holding a whole adapter.
            rows = registry(db)
            if point == "registered":
                assert rows == [(name, str(final), job.id)]
                assert_whole_adapter(final, tiny_model_dir, job.base_model, load=False)
            else:
                assert rows == []
            assert all(not Path(path).name.startswith(".") for _, path, _ in rows)

            listing = ok(cli(tmp_path, db, "adapters"))
            if rows:
                lines = listing.splitlines()
                assert len(lines) == 2 and lines[1].split()[0] == name, listing
                assert lines[1].split()[-2] == "yes" and "unusable" not in listing
            else:
                assert listing.startswith("no adapters yet"), listing
                line = refused(cli(tmp_path, db, "--adapter", name, "--query", "go"))
                assert f"--adapter {name!r}: no such adapter (known: none yet)" in line

            if point == "checkpoint":
                assert run.partial is not None and run.previous is not None
                assert run.partial.is_dir() and not checkpoint_complete(run.partial)
                assert last_checkpoint(checkpoints_dir(now)) == run.previous
                assert f"checkpoint   {run.previous}" in status
                expected_resume = checkpoint_step(run.previous)
                assert not staging.exists() and not final.exists()
            elif point == "staging":
                # Killed while saving: the staging folder may hold anything; nothing
                # names it, and the final folder does not exist yet.
                assert staging.is_dir() and not final.exists()
            elif point == "renamed":
                # Whole on disk (the rename is the last thing before registering), but
                # never registered: the resume replaces it.
                assert not staging.exists()
                assert_whole_adapter(final, tiny_model_dir, job.base_model, load=True)

            if now.status is JobStatus.COMPLETED:
                break  # killed after its `done`: nothing left to do
            baseline = max(e.id for e in store.job_events(job.id))
            resumed = ok(cli(tmp_path, db, "train", "resume", str(job.id)))
            if store.get_job(job.id).status is JobStatus.COMPLETED:
                # The kill came after registering, before `done`: nothing to train again.
                assert point == "registered"
                assert f"its adapter {name!r} was already registered" in resumed
                break
            if point == "registered":
                pytest.fail(f"a job killed after registering was resumed: {resumed}")
            assert re.match(rf"job {job.id} resumed from checkpoint-\d+", resumed), resumed
            assert store.get_job(job.id).pid not in (None, run.pid)

        print(f"kill points reached, in order: {reached}")
        assert set(reached) >= {"checkpoint", "staging", "renamed"}, reached
        done = store.get_job(job.id)
        assert done.status is JobStatus.COMPLETED, (done.error, log_path(done).read_text()[-2000:])
        assert done.error is None and done.progress == 1.0
        adapter = store.get_adapter(name)
        assert adapter.job_id == job.id and Path(adapter.path) == final
        assert_whole_adapter(final, tiny_model_dir, job.base_model, load=True)
        # Nothing half-made is left beside it.
        assert sorted(p.name for p in final.parent.iterdir()) == [name]
        table = ok(cli(tmp_path, db, "adapters")).splitlines()
        assert len(table) == 2 and table[1].split()[0] == name
        assert table[1].split()[-2] == "yes"
        assert store.health()["integrity"] == "ok"


# -- an adapter damaged after it was registered ----------------------------------------------------


def test_a_damaged_registered_adapter_is_reported_in_one_line(
    tmp_path: Path, tiny_model_dir: Path, tiny_adapter_dir: Path
) -> None:
    """Its safetensors file cut short by hand, then gone: `adapters` says BAD and why (exit
    0), `--adapter NAME` refuses before any model loads (console and --query, exit 2), and
    the transformers backend refuses it and keeps the base model."""
    db = tmp_path / "traces.db"
    folder = tmp_path / "data" / "adapters" / "tuned"
    shutil.copytree(tiny_adapter_dir, folder)
    weights = folder / WEIGHTS
    whole = weights.read_bytes()
    with TraceStore(db) as store:
        store.register_adapter("tuned", base_model=str(tiny_model_dir), path=folder)
    assert ok(cli(tmp_path, db, "adapters")).splitlines()[1].split()[-2] == "yes"

    os.truncate(weights, len(whole) // 2)
    listing = ok(cli(tmp_path, db, "adapters")).splitlines()
    assert listing[1].split()[0] == "tuned" and listing[1].split()[-2] == "BAD"
    reason = f"{WEIGHTS} is damaged ({len(whole) // 2} of {len(whole)} bytes: cut short)"
    assert listing[2:] == [f"unusable: adapter 'tuned' at {folder}: {reason}"]
    for args in (["--adapter", "tuned", "--query", "go"], ["--adapter", "tuned"]):
        started = time.monotonic()
        line = refused(cli(tmp_path, db, *args))
        assert line.startswith("agent-console: error: --adapter 'tuned' cannot be used: ")
        assert line.endswith(reason)
        assert time.monotonic() - started < 30  # refused before loading any model

    from agents.backends.transformers_backend import TransformersBackend

    backend = TransformersBackend(str(tiny_model_dir), device="cpu", dtype="float32")
    try:
        base = backend.generate("#startblock type: action\n", max_tokens=4, temperature=0.0)
        with pytest.raises(AdapterError, match=re.escape(reason)):
            backend.load_adapter("tuned", str(folder))
        assert backend.active_adapter is None
        again = backend.generate("#startblock type: action\n", max_tokens=4, temperature=0.0)
        assert again[0].token_ids == base[0].token_ids
    finally:
        backend.close()

    weights.unlink()
    listing = ok(cli(tmp_path, db, "adapters")).splitlines()
    assert listing[1].split()[-2] == "BAD" and "no adapter weights" in listing[2]
    line = refused(cli(tmp_path, db, "--adapter", "tuned", "--query", "go"))
    assert "no adapter weights (adapter_model.safetensors or adapter_model.bin)" in line

    shutil.rmtree(folder)
    listing = ok(cli(tmp_path, db, "adapters")).splitlines()
    assert listing[1].split()[-2] == "MISSING" and "no such folder" in listing[2]
    line = refused(cli(tmp_path, db, "--adapter", "tuned", "--query", "go"))
    assert line.endswith(f"--adapter 'tuned': its files are gone ({folder})")


@pytest.mark.parametrize(
    ("cut", "problem"),
    [
        (lambda b: b[:5], r"5 bytes: cut short before its header"),
        (lambda b: b[:20], r"20 bytes: cut short inside its \d+-byte header"),
        (lambda b: b[:-1], r"\d+ of \d+ bytes: cut short"),
        (lambda b: b + b"\0", r"\d+ bytes where its header accounts for \d+"),
        (lambda b: b[:8] + b"{" * (len(b) - 8), r"its header is not JSON: not a safetensors file"),
    ],
    ids=["no-header", "in-header", "last-byte", "extra-byte", "not-json"],
)
def test_the_safetensors_check_names_what_is_wrong(
    tmp_path: Path, tiny_adapter_dir: Path, cut: Callable[[bytes], bytes], problem: str
) -> None:
    """Checked from the header alone (no torch): every way a file is not whole, and the
    whole file passes."""
    whole = (tiny_adapter_dir / WEIGHTS).read_bytes()
    path = tmp_path / WEIGHTS
    path.write_bytes(whole)
    assert safetensors_problem(path) is None
    path.write_bytes(cut(whole))
    found = safetensors_problem(path)
    assert found is not None and re.fullmatch(problem, found), found
