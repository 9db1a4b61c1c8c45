"""Training jobs: queue one, run it in a detached worker process, follow, cancel, resume,
and notice a worker that died.

A job is a `job` row (its options in `config`) plus a folder, `<data dir>/jobs/<id>/`
(`training.job_files` says where each file is; `training.job_lines` prints progress):

    worker.log        the worker's stdout and stderr (tracebacks land here)
    dataset.jsonl     the rows it trains on, built once (a resumed job reuses them)
    checkpoints/      trainer checkpoints (`checkpoint-<step>`), the resume points

The worker (`python -m training.worker ID --db URL`, training/worker.py) runs detached
from whoever queued it, in its own session, so the console or the shell can close and the
job goes on. It reports through the store only, in short write transactions: `job` status,
progress and metrics, and `job_event` rows of these kinds:

    log         a line worth showing (dataset built, settings picked, resumed at step N)
    progress    at each logging step; data: step, total_steps, loss, learning_rate,
                tokens_per_second, eta_seconds, epoch
    checkpoint  a checkpoint was written; data: path
    cancel      someone asked the job to stop (written by `cancel_job`)
    error       the job failed; message: one line (the traceback is in worker.log)
    done        the adapter is registered; data: adapter, path, metrics

A job's last event (done, error, the "cancelled at step N" log) is written before its
final status, so a reader that sees the job finished has already got every event.

Statuses: queued -> running -> completed | failed | cancelling -> cancelled. A failed or
cancelled job is resumable: `resume_job` starts a new worker that continues from the last
complete checkpoint. A worker killed outright (SIGKILL, OOM killer, power) cannot say so:
any reader on the same host finds it with `reap_dead_jobs` (its pid is gone, or now belongs
to some other program) and marks the job failed.

Only the standard library and `storage` are imported here: the CLI and the console use
this module without loading torch.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storage import Job, JobEvent, JobKind, JobStatus, NotFoundError
from training.job_files import checkpoints_dir, job_dir, last_checkpoint, log_path

if TYPE_CHECKING:
    from storage import TraceStore
    from storage.views import JobControl, JobWrites

WORKER_MODULE = "training.worker"

ACTIVE = frozenset({JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.CANCELLING})
FINISHED = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED})
RESUMABLE = frozenset({JobStatus.FAILED, JobStatus.CANCELLED})
#: how a worker stopped from outside says so (`training.worker`): the job did not fail on
#: its own, so whoever waits on it may resume it
STOPPED_BY_SIGNAL = "stopped by signal"
DIED = "died without finishing"
#: the first event of each worker run of a job (a resumed job has one per run)
WORKER_STARTED = "worker started"

#: Default learning rates for LoRA: SFT takes a large step; DPO moves gently off the base.
DEFAULT_LR = {JobKind.SFT: 2e-4, JobKind.DPO: 5e-5, JobKind.KTO: 5e-5}
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class JobError(Exception):
    """A request about jobs that cannot be done; `str()` is one line for the user."""


class NotEnoughDataError(JobError):
    """The labels make no training rows of the kind asked for."""


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Everything a job is trained with; stored (with where it runs) in `job.config`.

    The fields after `max_length` are knobs for tests and power users, not CLI flags:
    `max_steps` caps training (-1: epochs decide), `save_steps` is the checkpoint interval,
    `poll_seconds` how often the worker checks for a cancel request."""

    kind: JobKind
    base_model: str
    name: str | None = None
    epochs: float = 3.0
    learning_rate: float | None = None
    lora_r: int = 16
    since: float | None = None
    qlora: bool = False
    max_length: int = 2048
    max_steps: int = -1
    save_steps: int = 50
    logging_steps: int = 1
    batch_size: int | None = None
    seed: int = 0
    poll_seconds: float = 1.5
    #: a registered adapter whose weights this job starts from (DPO on top of SFT), by name
    start_from: str | None = None
    #: another trace store (a SQLite file) whose labels the job trains on instead of its
    #: own store's: shared teaching sets, the starter sessions (training/starter.py)
    labels_from: str | None = None
    #: only these sessions' labels (None: every session's); the learning bench's points
    sessions: tuple[int, ...] | None = None
    #: SFT (KTO's desirable side) on the blocks the operator wrote only, their edits and
    #: rewrites, not the model's blocks they approved: fewer rows, on what the model got wrong
    changed_only: bool = False
    #: torch threads on a CPU (None: all cores but one, which the console keeps); a test
    #: or bench that waits idle for the job gives it every core
    cpu_threads: int | None = None

    def __post_init__(self) -> None:
        checks = [
            (
                self.epochs > 0 and math.isfinite(self.epochs),
                f"--epochs {self.epochs:g}: must be > 0",
            ),
            (
                self.learning_rate is None
                or (self.learning_rate > 0 and math.isfinite(self.learning_rate)),
                f"--lr {self.learning_rate or 0:g}: must be > 0",
            ),
            (1 <= self.lora_r <= 1024, f"--lora-r {self.lora_r}: must be 1 to 1024"),
            (16 <= self.max_length <= 1_048_576, f"--max-length {self.max_length}: must be >= 16"),
            (self.max_steps == -1 or self.max_steps > 0, "max_steps must be -1 or > 0"),
            (self.save_steps > 0, "save_steps must be > 0"),
            (self.logging_steps > 0, "logging_steps must be > 0"),
            (self.batch_size is None or self.batch_size > 0, "batch_size must be > 0"),
            (self.cpu_threads is None or self.cpu_threads > 0, "cpu_threads must be > 0"),
            (self.poll_seconds >= 0, "poll_seconds must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise JobError(message)
        if self.name is not None and not NAME_PATTERN.fullmatch(self.name):
            raise JobError(
                f"--name {self.name!r}: use 1-100 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit (it names the adapter's folder)"
            )
        if not self.base_model.strip():
            raise JobError("no base model: give --base MODEL (a local folder or a hub id)")

    @property
    def lr(self) -> float:
        return self.learning_rate if self.learning_rate is not None else DEFAULT_LR[self.kind]

    def to_config(self) -> dict[str, Any]:
        values = asdict(self)
        values["kind"] = self.kind.value
        values["learning_rate"] = self.lr
        return values

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> JobOptions:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in config.items() if k in known}
        values["kind"] = JobKind(values["kind"])
        return cls(**values)


# -- parsing what the CLI takes ----------------------------------------------------------------


def parse_since(text: str) -> float:
    """An ISO date (2026-11-20: local midnight) or date-time (local time unless it carries
    an offset) as epoch seconds, as `export --since` reads it; JobError otherwise."""
    from training.datasets import parse_since as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise JobError(f"--since: {exc}") from None


# -- queueing -------------------------------------------------------------------------------


def needed_labels_message(kind: JobKind) -> str:
    if kind is JobKind.SFT:
        return (
            "SFT needs at least 1 example, and the labels make none: label good blocks "
            "(`agent-console label`, g), or approve or edit the agent's actions in the console"
        )
    if kind is JobKind.KTO:
        return (
            "KTO needs at least 1 good and 1 bad example: label blocks good and bad "
            "(`agent-console label`, g and b), or approve, reject or edit actions in the console"
        )
    return (
        "DPO needs at least 1 pair, and the labels make none: label one sibling good and "
        "another bad (`agent-console label`), reject one candidate and approve another, "
        "edit an action, or pick an alternate in the console"
    )


def check_enough_data(
    store: TraceStore,
    kind: JobKind,
    since: float | None,
    sessions: Collection[int] | None = None,
    changed_only: bool = False,
) -> int:
    """How many rows the labels (of `sessions`, if given) make for `kind`;
    NotEnoughDataError when none."""
    from training.rules import count_kto_examples, count_training_data

    if kind is JobKind.KTO:
        good, bad = count_kto_examples(store, since, sessions, changed_only)
        rows = good + bad if good and bad else 0
    else:
        counts = count_training_data(store, since, sessions, changed_only)
        rows = counts.sft_examples if kind is JobKind.SFT else counts.dpo_pairs
    if rows == 0:
        message = needed_labels_message(kind)
        if since is not None:
            message += " (only labels from --since on count)"
        raise NotEnoughDataError(message)
    return rows


def copy_labels(path: str, data_dir: Path) -> Path:
    """A private copy of the trace store at `path` for a job to read its labels from: the
    original (shipped with the project, or someone else's) is never opened for writing."""
    import sqlite3
    import uuid

    original = Path(path).expanduser()
    if not original.is_file():
        raise JobError(f"--labels-from {path}: no such file")
    folder = Path(data_dir).expanduser() / "labels"
    folder.mkdir(parents=True, exist_ok=True)
    copy = (folder / f"{original.stem}-{uuid.uuid4().hex[:8]}.db").resolve()
    try:
        copy_sqlite(original, copy)
        with contextlib.closing(sqlite3.connect(copy)) as conn:
            conn.execute("select count(*) from session").fetchone()
    except sqlite3.DatabaseError as exc:
        copy.unlink(missing_ok=True)
        raise JobError(f"--labels-from {path}: not a trace store ({exc})") from None
    return copy


def copy_sqlite(source: Path, copy: Path) -> None:
    """A consistent copy of the SQLite file `source` (its WAL included), opened read-only:
    the source is never written, not even a WAL file beside it."""
    import sqlite3

    with (
        contextlib.closing(
            sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)
        ) as src,
        contextlib.closing(sqlite3.connect(copy)) as dst,
    ):
        src.backup(dst)


def check_name_free(store: TraceStore, name: str, *, job_id: int | None = None) -> None:
    """JobError if an adapter or another job already has `name`."""
    try:
        store.get_adapter(name)
    except NotFoundError:
        pass
    else:
        raise JobError(f"an adapter named {name!r} already exists: pick another --name")
    for other in store.list_jobs(limit=1_000_000):
        if other.name == name and other.id != job_id:
            raise JobError(
                f"job {other.id} ({other.status.value}) already trains an adapter named "
                f"{name!r}: pick another --name"
            )


def resolve_base_model(model: str) -> str:
    """A local folder as an absolute path (the worker runs elsewhere, and the adapter's
    config must point at it); a hub id as it is."""
    text = model.strip()
    path = Path(text).expanduser()
    if path.exists() or text.startswith((".", "/", "~")):
        if not (path / "config.json").is_file():
            raise JobError(f"--base {model}: not a model folder (no config.json)")
        return str(path.resolve())
    return text


def queue_job(
    store: TraceStore,
    options: JobOptions,
    *,
    data_dir: Path | str,
    spawn: bool = True,
) -> Job:
    """Check there is data and the name is free, create the job row, start its worker;
    returns the job (with the worker's pid) at once. JobError for a bad request."""
    source = copy_labels(options.labels_from, Path(data_dir)) if options.labels_from else None
    if source is None:
        rows = check_enough_data(
            store, options.kind, options.since, options.sessions, options.changed_only
        )
    else:
        from storage import TraceStore

        with TraceStore(source) as other:
            rows = check_enough_data(
                other, options.kind, options.since, options.sessions, options.changed_only
            )
    base = resolve_base_model(options.base_model)
    if options.name is not None:
        check_name_free(store, options.name)
    config = options.to_config()
    if options.start_from is not None:
        from storage import NotFoundError

        try:
            start = store.get_adapter(options.start_from)
        except NotFoundError:
            raise JobError(f"--on {options.start_from}: no adapter has that name") from None
        if start.base_model != base:
            raise JobError(
                f"--on {options.start_from}: it was trained on {start.base_model}, not {base}"
            )
        config["start_path"] = start.path
    config.update(
        base_model=base,
        db=redacted_url(store.url),
        data_dir=str(Path(data_dir).expanduser().resolve()),
        host=socket.gethostname(),
        rows_at_queue=rows,
        labels_db=str(source) if source else None,
    )
    placeholder = options.name or f"{options.kind.value}-pending-{os.getpid()}-{time.time_ns()}"
    job = store.create_job(options.kind, placeholder, base_model=base, config=config)
    if options.name is None:
        name = f"{options.kind.value}-{job.id}"
        try:
            check_name_free(store, name, job_id=job.id)
        except JobError as exc:
            store.update_job(job.id, status=JobStatus.FAILED, error=str(exc))
            raise
        job = store.update_job(job.id, name=name)
    if spawn:
        job = spawn_worker(store, job)
    return job


def redacted_url(url: str) -> str:
    """The store's URL with any password hidden (the config is readable by every user of a
    shared store)."""
    with contextlib.suppress(Exception):
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    return url


#: The store's URL reaches the worker here, not on its command line, when the URL holds a
#: password (`ps` shows command lines to every user; the environment only to the owner).
DB_ENV = "AGENT_CONSOLE_WORKER_DB"


def worker_command(job: Job, db_url: str) -> tuple[list[str], dict[str, str]]:
    """The worker's command line, and what its environment needs on top of ours."""
    command = [sys.executable, "-m", WORKER_MODULE, str(job.id)]
    if redacted_url(db_url) != db_url:
        return [*command, "--db-from-env"], {DB_ENV: db_url}
    return [*command, "--db", db_url], {}


def spawn_worker(store: JobControl, job: Job) -> Job:
    """Start the job's worker, detached (own session, stdin closed, output appended to
    worker.log), and record its pid. The job is marked failed if it cannot start."""
    folder = job_dir(job)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        log = log_path(job).open("ab")
    except OSError as exc:
        store.update_job(job.id, status=JobStatus.FAILED, error=f"cannot write {folder}: {exc}")
        raise JobError(f"job {job.id}: cannot write its folder {folder}: {exc.strerror}") from None
    command, extra_env = worker_command(job, store.url)
    env = dict(os.environ, **extra_env)
    env["PYTHONUNBUFFERED"] = "1"
    # The worker imports our packages from wherever this process found them.
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    with log:
        log.write(f"\n=== worker for job {job.id} started {time.ctime()} ===\n".encode())
        log.flush()
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=folder,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            store.update_job(job.id, status=JobStatus.FAILED, error=f"cannot start worker: {exc}")
            raise JobError(f"job {job.id}: cannot start its worker: {exc.strerror}") from None
    # The worker may already have set its own status; only the pid is ours to write.
    return store.update_job(job.id, pid=process.pid)


# -- following, cancelling, resuming ------------------------------------------------------------


def get_job(store: JobControl, job_id: int) -> Job:
    try:
        return store.get_job(job_id)
    except NotFoundError:
        raise JobError(f"no job {job_id} in {store.where}") from None


def cancel_job(store: JobControl, job_id: int) -> Job:
    """Ask the job to stop: status `cancelling` and a `cancel` event; the worker saves a
    checkpoint, stops and sets `cancelled`. A job whose worker is gone is cancelled here."""
    job = get_job(store, job_id)
    reap_dead_jobs(store, [job])
    job = store.get_job(job_id)
    if job.status in FINISHED:
        raise JobError(f"job {job_id} is already {job.status.value}: nothing to cancel")
    if job.status is JobStatus.CANCELLING:
        return job
    job = store.update_job(job_id, status=JobStatus.CANCELLING)
    store.add_job_event(job_id, "cancel", message="cancel requested")
    if job.pid is None and _same_host(job):
        # Queued but no worker was ever started (its spawner died): nobody else will.
        job = store.update_job(job_id, status=JobStatus.CANCELLED, error=None)
    return job


def resume_job(store: JobControl, job_id: int) -> Job:
    """Start a new worker for a failed or cancelled job; it continues from the last
    complete checkpoint (from the start when there is none)."""
    job = get_job(store, job_id)
    reap_dead_jobs(store, [job])
    job = store.get_job(job_id)
    if job.status is JobStatus.COMPLETED:
        raise JobError(f"job {job_id} is completed (adapter {job.name!r}): nothing to resume")
    if job.status not in RESUMABLE:
        raise JobError(
            f"job {job_id} is {job.status.value}: only a failed or cancelled job resumes"
        )
    if not _same_host(job):
        raise JobError(
            f"job {job_id} ran on host {job.config.get('host')!r}: resume it there "
            "(its checkpoints are on that machine)"
        )
    try:
        adapter = store.get_adapter(job.name)
    except NotFoundError:
        pass
    else:
        if adapter.job_id == job.id:  # it was registered, then the worker died
            store.add_job_event(job_id, "log", message="its adapter was already registered")
            return store.update_job(job_id, status=JobStatus.COMPLETED, progress=1.0, error=None)
        raise JobError(f"an adapter named {job.name!r} already exists: job {job_id} cannot finish")
    job = store.update_job(job_id, status=JobStatus.QUEUED, error=None, pid=None)
    checkpoint = last_checkpoint(checkpoints_dir(job))
    where = f"from {checkpoint.name}" if checkpoint else "from the start (no checkpoint)"
    store.add_job_event(job_id, "log", message=f"resume requested: continuing {where}")
    return spawn_worker(store, job)


def interrupted(job: Job) -> bool:
    """Whether a failed job was stopped from outside (its worker killed, or sent SIGTERM,
    SIGINT or SIGHUP) rather than failing on its own: it is worth running again."""
    error = job.error or ""
    return job.status is JobStatus.FAILED and (error.startswith(STOPPED_BY_SIGNAL) or DIED in error)


def resume_if_interrupted(store: JobControl, job_id: int) -> Job:
    """The job, its worker started again when it was interrupted (`interrupted`), a dead
    worker's job reaped first; a job that failed on its own is left failed."""
    reap_dead_jobs(store, [get_job(store, job_id)])
    job = store.get_job(job_id)
    return resume_job(store, job_id) if interrupted(job) else job


def _same_host(job: Job) -> bool:
    return job.config.get("host") in (None, socket.gethostname())


def worker_alive(pid: int, job_id: int | None = None) -> bool:
    """Whether `pid` is still a training worker (for `job_id`, if given). A pid that
    now belongs to another program (reuse) or a zombie counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, someone else's: the command line decides
    proc = Path(f"/proc/{pid}")
    raw = b""
    # A command line reads empty for a zombie (dead, not yet waited for), and for a moment
    # while a process is being exec'd (a worker just spawned): wait that moment out.
    for _ in range(40):
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            raw = (proc / "cmdline").read_bytes()
        except FileNotFoundError:
            # Gone since os.kill; or a system without /proc, where os.kill is all we have.
            return not Path("/proc/self").exists()
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return False
        if raw:
            break
        time.sleep(0.025)
    args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    if WORKER_MODULE not in args:
        return False
    return job_id is None or str(job_id) in args


def reap_dead_jobs(store: JobWrites, jobs: list[Job] | None = None) -> list[Job]:
    """Mark failed every active job on this host whose worker is gone (killed, crashed
    before it could say so). Returns the jobs it marked; they are resumable."""
    candidates = jobs if jobs is not None else store.list_jobs(limit=1_000)
    reaped = []
    for job in candidates:
        if job.status not in ACTIVE or job.pid is None or not _same_host(job):
            continue
        if worker_alive(job.pid, job.id):
            continue
        # The worker is gone, so everything it wrote is committed: re-read its last word.
        current = store.get_job(job.id)
        if current.status not in ACTIVE or current.pid != job.pid:
            continue
        error = (
            f"the worker (pid {job.pid}) {DIED} (killed, or out of memory); "
            f"`agent-console train resume {job.id}` continues from the last checkpoint"
        )
        store.add_job_event(job.id, "error", message=error)
        reaped.append(store.update_job(job.id, status=JobStatus.FAILED, error=error))
    return reaped


def follow(
    store: TraceStore,
    job_id: int,
    *,
    after_id: int = 0,
    poll: float = 0.5,
    reap_every: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[JobEvent | Job]:
    """Yield the job's events as they are written, and the job itself whenever it changes,
    until it is finished and every event has been read. Reaps a dead worker on the way."""
    last_reap = 0.0
    seen: tuple[JobStatus, float, float] | None = None
    while True:
        events = store.job_events(job_id, after_id=after_id)
        for event in events:
            after_id = event.id
            yield event
        job = store.get_job(job_id)
        state = (job.status, job.progress, job.updated_at)
        if state != seen:
            seen = state
            yield job
        if job.status in FINISHED:
            if not store.job_events(job_id, after_id=after_id, limit=1):
                return
            continue
        now = time.monotonic()
        if now - last_reap >= reap_every:
            last_reap = now
            reap_dead_jobs(store, [job])
        if not events:
            sleep(poll)
