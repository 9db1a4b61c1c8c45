"""The trl side of a training job: pick the settings for the hardware, load the base model
with a LoRA config, run SFTTrainer, DPOTrainer or KTOTrainer with a callback that reports
to the store, and publish the adapter. This module is the run (`run_training`); its parts
live beside it, one idea each, and their names are importable from here too:

- training/hardware.py: the model's shape and the machine (`ModelShape`, `detect_hardware`)
- training/plan.py: the settings for them (`pick_settings`: how they are picked) and the
  trl, transformers and peft arguments they stand for
- training/losses.py: on a CPU, the LM head only where the loss is
- training/job_dataset.py: the job's rows, built once, loaded and fitted for trl
- training/report.py: what the job says to the store (`Reporter`), cancel requests
- training/callbacks.py: the trainer's callback (imported inside `run_training` only)
- training/publish.py: the saved adapter moved into place and registered
- training/errors.py: `TrainingError`

Imported by the worker process (training/worker.py) and bench/train.py only; torch,
transformers, peft, trl and datasets load inside the functions that need them, so
`pick_settings` is testable (and the bench's parent process runs) without them.
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storage import JobKind, JobStatus
from training.errors import TrainingError
from training.hardware import (
    QWEN2_SHAPES,
    Hardware,
    ModelShape,
    detect_hardware,
    usable_cores,
)
from training.job_dataset import (
    DATASET_REPORT,
    DPO_COLUMNS,
    KTO_COLUMNS,
    SFT_COLUMNS,
    build_dataset,
    dataset_path,
    fit_prompts,
    load_rows,
)
from training.job_files import (
    adapter_path,
    checkpoint_step,
    checkpoints_dir,
    job_dir,
    last_checkpoint,
)
from training.jobs import JobOptions
from training.losses import _completion_compute_loss, compact_fused_head, completion_loss
from training.plan import (
    EFFECTIVE_BATCH,
    GIB,
    MEMORY_BUDGET,
    MEMORY_OVERHEAD,
    TrainSettings,
    estimate_peak_bytes,
    lora_config,
    model_kwargs,
    pick_settings,
    trl_config_kwargs,
)
from training.publish import publish_adapter
from training.report import Reporter, cancel_requested

if TYPE_CHECKING:
    from storage import Job, TraceStore

__all__ = [
    "DATASET_REPORT",
    "DPO_COLUMNS",
    "EFFECTIVE_BATCH",
    "GIB",
    "KTO_COLUMNS",
    "MEMORY_BUDGET",
    "MEMORY_OVERHEAD",
    "QWEN2_SHAPES",
    "SFT_COLUMNS",
    "Hardware",
    "ModelShape",
    "Reporter",
    "TrainSettings",
    "TrainingError",
    "build_dataset",
    "cancel_requested",
    "compact_fused_head",
    "completion_loss",
    "dataset_path",
    "detect_hardware",
    "estimate_peak_bytes",
    "fit_prompts",
    "load_rows",
    "lora_config",
    "model_kwargs",
    "pick_settings",
    "publish_adapter",
    "run_training",
    "trl_config_kwargs",
    "usable_cores",
]


def run_training(
    store: TraceStore,
    job: Job,
    *,
    baseline_event: int,
    reporter: Reporter,
    world_size: int = 1,
    hardware: Hardware | None = None,
) -> str:
    """Train the job's adapter; on the main process publish and register it. Returns
    "completed" or "cancelled". Raises TrainingError (or anything else) on failure."""
    options = JobOptions.from_config(job.config)
    folder = job_dir(job)
    path = dataset_path(job)
    report = json.loads((folder / DATASET_REPORT).read_text(encoding="utf-8"))

    warnings.filterwarnings("ignore", category=FutureWarning)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_warning()
    hf_logging.disable_progress_bar()
    base = options.base_model
    try:
        config = AutoConfig.from_pretrained(base)
    except (OSError, ValueError) as exc:
        raise TrainingError(f"cannot load base model {base!r}: {_one_line(exc)}") from exc
    shape = ModelShape.from_config(config)
    hardware = hardware or detect_hardware()
    settings = pick_settings(
        options.kind,
        shape,
        hardware,
        max_length=options.max_length,
        lora_r=options.lora_r,
        qlora=options.qlora,
        batch_size=options.batch_size,
    )
    if options.cpu_threads and settings.device == "cpu":
        settings = replace(settings, cpu_threads=options.cpu_threads)
    reporter.log(f"settings: {settings.describe()}", settings=settings.as_dict())
    for note in settings.notes:
        reporter.log(f"settings: {note}")

    if settings.cpu_threads:
        torch.set_num_threads(settings.cpu_threads)
    tokenizer = AutoTokenizer.from_pretrained(base)
    rows = load_rows(path, options.kind, folder / "hf-datasets", tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    rows, cut = fit_prompts(rows, tokenizer, options.max_length)
    if cut:
        reporter.log(
            f"{cut} of {len(rows)} rows longer than {options.max_length} tokens: "
            "their prompts keep their last tokens"
        )
    model = AutoModelForCausalLM.from_pretrained(base, **model_kwargs(settings))
    if settings.quantize_4bit:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=settings.gradient_checkpointing
        )

    peft_config = lora_config(options.lora_r)
    if job.config.get("start_path"):
        from peft import PeftModel

        reporter.log(f"starting from adapter {options.start_from}")
        model = PeftModel.from_pretrained(  # type: ignore[assignment]
            model, job.config["start_path"], is_trainable=True
        )
        peft_config = None  # the adapter's own LoRA settings go on

    output = checkpoints_dir(job)
    output.mkdir(parents=True, exist_ok=True)
    resume_from = _prepare_resume(output)
    common = {
        "output_dir": str(output),
        "num_train_epochs": options.epochs,
        "max_steps": options.max_steps,
        "learning_rate": options.lr,
        "logging_steps": options.logging_steps,
        "save_strategy": "steps",
        "save_steps": options.save_steps,
        "save_total_limit": 2,
        "report_to": "none",
        "seed": options.seed,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        **trl_config_kwargs(options.kind, settings, options.max_length),
    }
    from training.callbacks import JobCallback

    callback = JobCallback(
        reporter,
        baseline_event=baseline_event,
        poll_seconds=options.poll_seconds,
        world_size=world_size,
    )
    # DPO and KTO's reference is the base with the adapter switched off (ref_model None)
    reference = {} if options.kind is JobKind.SFT else {"ref_model": None}
    trainer_class, config_class = trl_classes(options.kind, settings.device)
    trainer: Any = trainer_class(
        model=model,
        args=config_class(**common),
        train_dataset=rows,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[callback],
        **reference,
    )
    if options.kind is not JobKind.SFT and settings.device == "cpu":
        compact_fused_head(trainer.model.get_base_model())
    if resume_from is not None:
        reporter.log(f"resuming from {resume_from.name}")
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)

    # Events before the status: whoever sees the job finished has its last word too.
    if callback.cancelled:
        reporter.log(
            f"cancelled at step {trainer.state.global_step}; checkpoint saved: "
            f"`agent-console train resume {job.id}` continues it"
        )
        reporter.update(status=JobStatus.CANCELLED, error=None)
        return "cancelled"

    metrics = dict(callback.latest)
    metrics.update({k: v for k, v in callback.summary.items() if k != "total_flos"})
    metrics["steps"] = int(trainer.state.global_step)
    if torch.cuda.is_available():
        metrics["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 2)
    metrics["settings"] = settings.as_dict()
    metrics["dataset"] = {
        "path": str(path),
        "rows": report["rows"],
        "sessions": report.get("sessions"),
        "since": options.since,
        "kind": options.kind.value,
    }
    staging = adapter_path(job).with_name(f".{job.name}.tmp-{job.id}")
    if reporter.main and staging.exists():
        shutil.rmtree(staging)
    trainer.save_model(str(staging))
    if not reporter.main:
        return "completed"
    final = publish_adapter(store, job, staging, metrics)
    reporter.event(
        "done",
        message=f"adapter {job.name!r} registered at {final}",
        step=metrics["steps"],
        adapter=job.name,
        path=str(final),
        metrics={k: v for k, v in metrics.items() if k not in ("settings", "dataset")},
    )
    reporter.update(status=JobStatus.COMPLETED, progress=1.0, metrics=metrics, error=None)
    return "completed"


def trl_classes(kind: JobKind, device: str) -> tuple[Any, Any]:
    """trl's trainer and config classes for `kind`; on a CPU, SFT's trainer computes its
    loss with the LM head on the completion only (`completion_loss`)."""
    import trl

    name = {JobKind.SFT: "SFT", JobKind.DPO: "DPO", JobKind.KTO: "KTO"}[kind]
    trainer_class = getattr(trl, f"{name}Trainer")
    if kind is JobKind.SFT and device == "cpu":
        trainer_class = type(
            "CompletionLossSFTTrainer", (trainer_class,), {"compute_loss": _completion_compute_loss}
        )
    return trainer_class, getattr(trl, f"{name}Config")


def _prepare_resume(output: Path) -> Path | None:
    """The checkpoint to continue from; checkpoints past it (cut short by a kill while
    saving) are removed so the trainer's rotation never counts them."""
    latest = last_checkpoint(output)
    latest_step = (checkpoint_step(latest) if latest else None) or -1
    for candidate in output.iterdir():
        step = checkpoint_step(candidate)
        if step is not None and step > latest_step and candidate.is_dir():
            shutil.rmtree(candidate, ignore_errors=True)
    return latest


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
