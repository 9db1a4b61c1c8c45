"""Publishing a trained adapter: from the staging folder the trainer saved it in to
adapters/<name>/ with one rename, synced to disk, then registered in the store."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storage import NotFoundError
from training.errors import TrainingError
from training.job_files import ADAPTER_MARKER, adapter_path

if TYPE_CHECKING:
    from storage import Job
    from storage.views import Adapters


def publish_adapter(store: Adapters, job: Job, staging: Path, metrics: dict[str, Any]) -> Path:
    """Move the saved adapter from `staging` to adapters/<name>/ with one rename, then
    register it: the registry never names a folder that is not whole, and a failure to
    register leaves no folder behind."""
    final = adapter_path(job)
    config_file = staging / "adapter_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = job.base_model or config.get("base_model_name_or_path")
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")
    (staging / "training_args.bin").unlink(missing_ok=True)  # a pickle: nothing needs it
    (staging / ADAPTER_MARKER).write_text(json.dumps({"job": job.id, "name": job.name}))
    _check_saved_adapter(job, staging)
    _sync_tree(staging)  # whole on disk before the rename names it, power cut or not
    if final.exists():
        if _made_by(final) != job.id:
            raise TrainingError(f"{final} already exists (not this job's): rename or remove it")
        try:
            store.get_adapter(job.name)
        except NotFoundError:
            shutil.rmtree(final)  # this job's, published but never registered (killed)
        else:
            raise TrainingError(f"an adapter named {job.name!r} is already registered")
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, final)
    _sync_tree(final.parent, files=False)  # the rename itself
    try:
        store.register_adapter(
            job.name,
            base_model=job.base_model or str(config.get("base_model_name_or_path")),
            path=final,
            job_id=job.id,
            metrics=metrics,
        )
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)
        raise
    return final


def _check_saved_adapter(job: Job, staging: Path) -> None:
    """TrainingError unless `staging` holds a LoRA adapter the backends will load (its
    config, and weights whose safetensors header covers the whole file)."""
    from agents.backends.base import AdapterError
    from agents.backends.lora import read_adapter

    try:
        read_adapter(job.name, staging)
    except AdapterError as exc:
        raise TrainingError(f"the saved adapter is not whole: {exc}") from None


def _sync_tree(folder: Path, *, files: bool = True) -> None:
    """fsync the files under `folder` (when `files`), then the folder itself."""
    paths = [p for p in folder.rglob("*") if p.is_file()] if files else []
    for path in [*paths, folder]:
        flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path == folder else 0)
        try:
            fd = os.open(path, flags)
        except OSError:
            continue  # a folder that cannot be opened to sync (not on Linux): skip it
        try:
            os.fsync(fd)
        except OSError:
            pass  # some file systems cannot fsync a folder; the files are synced
        finally:
            os.close(fd)


def _made_by(folder: Path) -> int | None:
    try:
        return int(json.loads((folder / ADAPTER_MARKER).read_text())["job"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
