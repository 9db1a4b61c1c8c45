"""The trainer's callback: progress and checkpoint events to the store, and a cancel request
that saves a checkpoint and stops.

transformers is imported at module level (the callback subclasses its `TrainerCallback`):
only `run_training` (training/trainer.py) imports this module, inside the function, so
nothing the console or the worker's parent imports loads it.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from training.job_files import CHECKPOINT_PREFIX
from training.report import Reporter, cancel_requested


class JobCallback(TrainerCallback):  # type: ignore[misc]
    """Progress to the store at each logging step; a checkpoint event at each save;
    and every `poll_seconds` a look for a cancel request, which saves and stops."""

    def __init__(
        self,
        reporter: Reporter,
        *,
        baseline_event: int,
        poll_seconds: float,
        world_size: int,
    ) -> None:
        self.reporter = reporter
        self.baseline_event = baseline_event
        self.poll_seconds = poll_seconds
        self.world_size = world_size
        self.cancelled = False
        self.started = time.monotonic()
        self.start_step = 0
        self.last_poll = 0.0
        self.last_tokens: tuple[float, float] | None = None  # (time, num_tokens)
        self.latest: dict[str, Any] = {}
        self.summary: dict[str, Any] = {}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.started = time.monotonic()
        self.start_step = state.global_step
        if state.global_step:
            self.reporter.log(f"resumed at step {state.global_step} of {state.max_steps}")
        else:
            self.reporter.log(f"training: {state.max_steps} steps")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.monotonic()
        stop = False
        if self.reporter.main and now - self.last_poll >= self.poll_seconds:
            self.last_poll = now
            stop = cancel_requested(self.reporter.store, self.reporter.job_id, self.baseline_event)
        if self.world_size > 1:
            stop = _broadcast_flag(stop, args)
        if stop and not self.cancelled:
            self.cancelled = True
            control.should_save = True
            control.should_training_stop = True
            print(f"cancel requested: saving a checkpoint at step {state.global_step}", flush=True)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        logs = dict(logs or {})
        if "train_runtime" in logs or "train_loss" in logs:
            self.summary = {k: v for k, v in logs.items() if isinstance(v, int | float)}
            return
        if "loss" not in logs:
            return
        now = time.monotonic()
        step, total = int(state.global_step), int(state.max_steps or 0)
        done = step - self.start_step
        eta = (now - self.started) / done * (total - step) if done > 0 and total else None
        rate = None
        tokens = logs.get("num_tokens")
        if isinstance(tokens, int | float):
            # The first rate counts from the start (a resumed run's count may not).
            first = (self.started, 0.0 if self.start_step == 0 else None)
            since, before = self.last_tokens or first
            if before is not None and now > since:
                rate = (tokens - before) / (now - since)
            self.last_tokens = (now, float(tokens))
        data = {
            "step": step,
            "total_steps": total,
            "loss": _number(logs.get("loss")),
            "learning_rate": _number(logs.get("learning_rate")),
            "tokens_per_second": rate,
            "eta_seconds": eta,
            "epoch": _number(logs.get("epoch", state.epoch)),
            "grad_norm": _number(logs.get("grad_norm")),
        }
        for key in ("rewards/accuracies", "rewards/margins", "mean_token_accuracy"):
            if key in logs:
                data[key.replace("/", "_")] = _number(logs[key])
        self.latest = data
        if self.reporter.main:
            self.reporter.store.add_job_event(
                self.reporter.job_id, "progress", step=step, data=data
            )
            self.reporter.store.update_job(
                self.reporter.job_id, progress=step / total if total else 0.0, metrics=data
            )

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        path = Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}"
        self.reporter.event(
            "checkpoint",
            message=f"checkpoint at step {state.global_step}",
            step=int(state.global_step),
            path=str(path),
        )


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _broadcast_flag(flag: bool, args: Any) -> bool:
    """Rank 0's answer to every rank, so all stop at the same step."""
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return flag
    tensor = torch.tensor([1 if flag else 0], device=args.device)
    dist.broadcast(tensor, src=0)
    return bool(tensor.item())
