"""What a batch did: its progress while it runs, and the summary, with intervals, after."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from storage import (
    Batch,
    BatchStatus,
    BatchTaskStatus,
)
from storage.views import Batches

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class BatchProgress:
    """A batch's state as the store has it."""

    counts: Mapping[BatchTaskStatus, int]
    tokens: int
    seconds: float

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        c = self.counts
        return (
            c[BatchTaskStatus.COMPLETED] + c[BatchTaskStatus.FAILED] + c[BatchTaskStatus.TRUNCATED]
        )

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def progress_of(store: Batches, batch_id: int, since: float, tokens_before: int) -> BatchProgress:
    tasks = store.batch_tasks(batch_id)
    counts = dict.fromkeys(BatchTaskStatus, 0)
    for task in tasks:
        counts[task.status] += 1
    tokens = sum(int(t.result.get("tokens", 0)) for t in tasks) - tokens_before
    return BatchProgress(counts, tokens, time.monotonic() - since)


@dataclass(frozen=True)
class Summary:
    """How a batch went."""

    batch: Batch
    counts: Mapping[BatchTaskStatus, int]
    #: the mean fraction of each task's checks passed (tasks that have checks)
    pass_rate: float | None
    #: tasks whose checks all passed, of those with checks
    solved: int
    with_checks: int
    mean_reward: float | None
    tokens: int
    seconds: float

    @property
    def adapter(self) -> str | None:
        value = self.batch.config.get("adapter")
        return str(value) if value else None

    @property
    def solved_interval(self) -> tuple[float, float]:
        """The 95% interval of the share of tasks solved."""
        return wilson(self.solved, self.with_checks)

    def solved_text(self) -> str:
        """ "3/10 solved (95% CI 11-60%)"."""
        low, high = self.solved_interval
        return f"{self.solved}/{self.with_checks} solved (95% CI {low * 100:.0f}-{high * 100:.0f}%)"


def wilson(passed: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a rate of `passed` in `n` (95% by default)."""
    if n <= 0:
        return (0.0, 1.0)
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarize(store: Batches, batch: Batch) -> Summary:
    tasks = store.batch_tasks(batch.id)
    counts = dict.fromkeys(BatchTaskStatus, 0)
    for task in tasks:
        counts[task.status] += 1
    ran = [t for t in tasks if t.result]
    checked = [t for t in ran if t.result.get("checks_total")]
    fractions = [t.result["checks_passed"] / t.result["checks_total"] for t in checked]
    rewards = [float(t.result.get("reward", 0.0)) for t in ran]
    return Summary(
        batch=batch,
        counts=counts,
        pass_rate=sum(fractions) / len(fractions) if fractions else None,
        solved=sum(1 for t in checked if t.result["checks_passed"] == t.result["checks_total"]),
        with_checks=len(checked),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        tokens=sum(int(t.result.get("tokens", 0)) for t in ran),
        seconds=sum(float(t.result.get("seconds", 0.0)) for t in ran),
    )


def by_adapter(store: Batches, batch: Batch) -> list[Summary]:
    """The latest finished batch of the same tasks file for each adapter (the base model
    first): a batch run with `--adapter` is an A/B evaluation against the base."""
    latest: dict[str | None, Batch] = {}
    for other in store.list_batches(source_hash=batch.source_hash, limit=1000):
        key = other.config.get("adapter") or None
        if other.id == batch.id or (key not in latest and other.status is BatchStatus.COMPLETED):
            latest.setdefault(key, other)
    latest[batch.config.get("adapter") or None] = batch
    order = sorted(latest, key=lambda name: (name is not None, name or ""))
    return [summarize(store, latest[name]) for name in order]


def describe_counts(counts: Mapping[BatchTaskStatus, int]) -> str:
    parts = [
        f"{counts[BatchTaskStatus.COMPLETED]} completed",
        f"{counts[BatchTaskStatus.FAILED]} failed",
        f"{counts[BatchTaskStatus.TRUNCATED]} truncated",
    ]
    left = counts[BatchTaskStatus.PENDING] + counts[BatchTaskStatus.ABORTED]
    if left:
        parts.append(f"{left} left")
    return ", ".join(parts)
