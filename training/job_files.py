"""Where a training job's files are: its folder under the data dir (`jobs/<id>/`), its
log, its dataset, its checkpoints and the adapter it registers. Standard library only."""

from __future__ import annotations

import json
from pathlib import Path

from storage import Job

LOG_NAME = "worker.log"
DATASET_NAME = "dataset.jsonl"
CHECKPOINTS = "checkpoints"
CHECKPOINT_PREFIX = "checkpoint-"
#: Written into an adapter folder before it is renamed into place: which job made it.
ADAPTER_MARKER = "agent_console_job.json"


def job_dir(job: Job) -> Path:
    return Path(job.config["data_dir"]) / "jobs" / str(job.id)


def log_path(job: Job) -> Path:
    return job_dir(job) / LOG_NAME


def checkpoints_dir(job: Job) -> Path:
    return job_dir(job) / CHECKPOINTS


def adapters_dir(data_dir: Path | str) -> Path:
    return Path(data_dir) / "adapters"


def adapter_path(job: Job) -> Path:
    return adapters_dir(job.config["data_dir"]) / job.name


def checkpoint_step(path: Path) -> int | None:
    if not path.name.startswith(CHECKPOINT_PREFIX):
        return None
    try:
        return int(path.name[len(CHECKPOINT_PREFIX) :])
    except ValueError:
        return None


def checkpoint_complete(path: Path) -> bool:
    """The trainer writes `trainer_state.json` last: a checkpoint with a readable one is
    whole; one cut short by a kill mid-save is not."""
    try:
        json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def last_checkpoint(folder: Path) -> Path | None:
    """The complete checkpoint with the highest step in `folder`, if any."""
    if not folder.is_dir():
        return None
    found = [(checkpoint_step(p), p) for p in folder.iterdir() if p.is_dir()]
    ordered = sorted(((s, p) for s, p in found if s is not None), reverse=True)
    return next((p for _, p in ordered if checkpoint_complete(p)), None)
