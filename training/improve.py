"""Improvement between operator sessions (`agent-console improve`): rounds of rollouts on a
task family's teaching variants (or a benchmark suite's teaching problems, `agents.tasks.suites`), labelled by the tasks' own checks, trained with the
product's own jobs, and kept only when held-out variants get better.

A round, in order; each step's result is written to the run's `state` in the store as soon
as it is done, so a run killed at any point resumes from its last complete step:

1. `rollouts`: a batch of `per_round` teaching variants (the family's teaching seeds, in
   turn across rounds), run with the adapter in use, on local threads or on Ray.
2. `labels`: each session labelled from its checks (`training.auto_labels`): a solved
   session's path good, a failed one's actions bad; stored as automatic labels, never over
   an operator's, and outranked by any the operator gives.
3. `train`: rejection-sampling SFT on the solved paths of every round so far (and whatever
   the operator labelled in those sessions), as an ordinary training job. No solved path
   yet: nothing to train, and the round is kept as data.
4. `prefer` (`then`): KTO (the default) or DPO on top of the SFT adapter, from the same
   sessions' labels; skipped, with its reason kept, where they make no such rows.
5. `evaluate`: the adapter in use on the family's held-out variants (every round: the
   curve), and the round's new adapter beside it; pass rates with 95% Wilson intervals,
   each side measured once per run.
6. `verdict`: the new adapter is promoted (used from the next round on) only when its
   interval's lower bound is above the pass rate of the adapter in use; otherwise the
   adapter in use stays and the round is kept as data.
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.batch import wilson
from agents.tasks.spec import TaskError
from agents.tasks.suites import task_sets
from storage import BatchStatus, JobKind, JobStatus
from training.auto_labels import label_from_checks
from training.jobs import JobError, JobOptions, follow, queue_job, resume_if_interrupted
from training.rules import count_training_data

if TYPE_CHECKING:
    from agents.backends import Backend
    from storage import Improvement, TraceStore
    from storage.views import Improvements

#: what a run's side is called when no adapter is in use
BASE = "base"
#: the preference stages a round may add after its SFT job
THEN = ("kto", "dpo", "none")


class ImproveError(ValueError):
    """A request that cannot run (an unknown family, a bad count); one line for the user."""


@dataclass(frozen=True)
class ImproveConfig:
    family: str
    rounds: int = 3
    per_round: int = 8
    held_out: int = 10
    #: the first held-out variant measured (the benchmark skips those looked at while the
    #: prompts were written, as bench/learning.py does)
    held_out_from: int = 0
    workers: int = 1
    ray: str | None = None
    epochs: float = 2.0
    learning_rate: float | None = None
    lora_r: int = 16
    #: the base model the jobs train (the backend's model)
    base_model: str = ""
    #: job knobs for tests: cap the steps (-1: the epochs decide)
    max_steps: int = -1
    #: the preference stage after SFT: "kto", "dpo" or "none"
    then: str = "kto"
    #: the rollouts try each action's candidates against the checks on a copy of the work
    #: dir and run one that passes (`RunOptions.choose_by_checks`); held-out sessions never
    choose_by_checks: bool = False

    def __post_init__(self) -> None:
        try:
            teaching, held_out = task_sets(self.family)
        except TaskError as exc:
            raise ImproveError(f"--family {exc}") from None
        for name, value, low, high in (
            ("--rounds", self.rounds, 1, 100),
            ("--per-round", self.per_round, 1, len(teaching)),
            ("--held-out-from", self.held_out_from, 0, len(held_out) - 1),
            ("--held-out", self.held_out, 1, len(held_out) - max(self.held_out_from, 0)),
            ("--workers", self.workers, 1, 256),
        ):
            if not low <= value <= high:
                raise ImproveError(f"{name} {value}: must be {low} to {high}")
        if self.then not in THEN:
            raise ImproveError(f"--then {self.then!r}: must be one of {', '.join(THEN)}")
        # here, not when the first round's job is queued after its rollouts
        for name, number in (("--epochs", self.epochs), ("--lr", self.learning_rate)):
            if number is not None and not (number > 0 and math.isfinite(number)):
                raise ImproveError(f"{name} {number:g}: must be > 0")

    def to_config(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ImproveConfig:
        # a run stored before the preference stage existed trained SFT only
        return cls(**{"then": "none", **config})


@dataclass
class SideFigures:
    """One adapter (or the base) on the held-out variants."""

    adapter: str
    batch: int
    passed: int
    n: int

    @property
    def rate(self) -> float:
        return self.passed / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.passed, self.n)

    def line(self) -> str:
        low, high = self.interval
        return f"{self.passed}/{self.n} ({low:.2f}-{high:.2f})"


def promotes(candidate: SideFigures, current: SideFigures) -> bool:
    """The candidate's held-out pass rate rises beyond its confidence interval: the
    interval's lower bound is above the current adapter's pass rate."""
    return candidate.interval[0] > current.rate


#: Runs a stored batch to its end with an adapter (None: the base model) and returns its
#: status: local threads over the loaded backend, or Ray workers.
BatchRunner = Callable[[int, str | None], BatchStatus]


@dataclass
class Improver:
    store: TraceStore
    run: Improvement
    backend: Backend
    run_batch: BatchRunner
    data_dir: Path
    say: Callable[[str], None] = print
    #: seconds between reads of a training job's progress
    poll: float = 1.0
    config: ImproveConfig = field(init=False)

    state: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.config = ImproveConfig.from_config(self.run.config)
        #: the run's state as this process changes it; each step's end writes it whole
        self.state = copy.deepcopy(self.run.state)

    # -- the stored state -----------------------------------------------------------------

    def save(self) -> None:
        """Write the state whole, keeping a promotion the operator made by hand meanwhile
        (the console's improvement screen writes to the same row)."""
        stored = self.store.get_improvement(self.run.id).state
        for number, theirs in enumerate(stored.get("rounds", []), 1):
            if theirs.get("promoted_by_hand") and number <= len(self.state.get("rounds", [])):
                ours = self.round_state(number)
                if not ours.get("promoted_by_hand"):
                    ours["promoted_by_hand"] = True
                    self.state["adapter"] = stored.get("adapter")
        self.run = self.store.update_improvement(self.run.id, state=self.state)

    def round_state(self, number: int) -> dict[str, Any]:
        rounds: list[dict[str, Any]] = self.state.setdefault("rounds", [])
        while len(rounds) < number:
            rounds.append({"round": len(rounds) + 1})
        return rounds[number - 1]

    # -- the whole run --------------------------------------------------------------------

    def go(self) -> Improvement:
        """Every round not yet complete, in order; the run completed at the end."""
        for number in range(1, self.config.rounds + 1):
            done = self.round_state(number)
            if "verdict" in done:
                continue
            self.one_round(number)
            self.say(round_line(self.round_state(number)))
        self.run = self.store.update_improvement(self.run.id, status="completed")
        return self.run

    def one_round(self, number: int) -> None:
        this = self.round_state(number)
        if "rollouts" not in this:
            self.rollouts(number, this)
        if "labels" not in this:
            self.labels(this)
        if "train" not in this:
            self.train(number, this)
        if self.config.then != "none" and this["train"].get("adapter") and "prefer" not in this:
            self.prefer(number, this)
        if "evaluate" not in this:
            self.evaluate(this)
        if "verdict" not in this:
            self.verdict(this)

    # -- the steps ------------------------------------------------------------------------

    def rollouts(self, number: int, this: dict[str, Any]) -> None:
        teaching = task_sets(self.config.family)[0]
        start = (number - 1) * self.config.per_round
        refs = [teaching[(start + i) % len(teaching)] for i in range(self.config.per_round)]
        adapter = self.state.get("adapter")
        batch_id = this.get("batch")
        if batch_id is None:
            batch_id = self.new_batch(
                f"round {number} rollouts", refs, adapter, judged=self.config.choose_by_checks
            )
            this["batch"] = batch_id
            self.save()
        started = time.monotonic()
        self.finish_batch(batch_id, adapter)
        tasks = self.store.batch_tasks(batch_id)
        this["rollouts"] = {
            "sessions": [t.session_id for t in tasks if t.session_id is not None],
            "solved": sum(1 for t in tasks if solved(t.result)),
            "n": len(tasks),
            "tokens": sum(int(t.result.get("tokens", 0)) for t in tasks),
            "seconds": round(time.monotonic() - started, 1),
            "adapter": adapter,
        }
        self.save()

    def labels(self, this: dict[str, Any]) -> None:
        good = bad = kept = 0
        for session_id in this["rollouts"]["sessions"]:
            result = label_from_checks(self.store, session_id)
            good, bad, kept = good + result.good, bad + result.bad, kept + result.kept
        this["labels"] = {"good": good, "bad": bad, "operator_kept": kept}
        self.save()

    def train(self, number: int, this: dict[str, Any]) -> None:
        """Rejection-sampling SFT on the solved paths of every round so far."""
        sessions = self.sessions_so_far(number)
        if (
            this.get("job") is None
            and not count_training_data(self.store, sessions=sessions).sft_examples
        ):
            this["train"] = {"skipped": "no solved session yet: nothing to train"}
            self.save()
            return
        this["train"] = self.job(this, "job", JobKind.SFT, f"improve{self.run.id}-r{number}",
                                 sessions)  # fmt: skip
        self.save()

    def prefer(self, number: int, this: dict[str, Any]) -> None:
        """DPO or KTO (`then`) on top of the round's SFT adapter, from the same labels: KTO
        takes the solved paths as desirable and the failed actions as undesirable; DPO
        takes pass-over-fail siblings, which only blocks judged side by side make."""
        kind = JobKind(self.config.then)
        name = f"improve{self.run.id}-r{number}-{kind.value}"
        start_from = this["train"]["adapter"]
        this["prefer"] = self.job(this, "prefer_job", kind, name,
                                  self.sessions_so_far(number), start_from)  # fmt: skip
        self.save()

    def sessions_so_far(self, number: int) -> list[int]:
        return [
            s
            for r in self.state["rounds"][:number]
            for s in r.get("rollouts", {}).get("sessions", [])
        ]

    def job(
        self,
        this: dict[str, Any],
        key: str,
        kind: JobKind,
        name: str,
        sessions: list[int],
        start_from: str | None = None,
    ) -> dict[str, Any]:
        """One training job of the round, queued once (its id kept under `key`) and
        followed to its end: `{adapter, examples, seconds}`, or `{skipped: why}`."""
        job_id = this.get(key)
        if job_id is None:
            options = JobOptions(
                kind=kind,
                base_model=self.config.base_model,
                name=name,
                epochs=self.config.epochs,
                learning_rate=self.config.learning_rate if kind is JobKind.SFT else None,
                lora_r=self.config.lora_r,
                max_steps=self.config.max_steps,
                sessions=tuple(sessions),
                save_steps=10_000,
                start_from=start_from,
                # the run waits idle for its job (no rollout runs beside it): every core
                cpu_threads=os.cpu_count(),
            )
            try:
                job = queue_job(self.store, options, data_dir=self.data_dir)
            except JobError as exc:
                return {"skipped": str(exc)}
            job_id = this[key] = job.id
            self.save()
        started = time.monotonic()
        job = self.wait_for_job(job_id)
        if job.status is not JobStatus.COMPLETED:
            return {"skipped": f"job {job.id} {job.status.value}: {job.error or ''}"}
        return {
            "adapter": job.name,
            "kind": kind.value,
            "examples": job.config.get("rows_at_queue"),
            "seconds": round(time.monotonic() - started, 1),
        }

    def wait_for_job(self, job_id: int) -> Any:
        """The job to its end; one interrupted (its worker killed or stopped by a signal,
        with the run or on its own) is resumed, one that failed on its own is not."""
        resume_if_interrupted(self.store, job_id)
        for _ in follow(self.store, job_id, poll=self.poll):
            pass
        return self.store.get_job(job_id)

    def evaluate(self, this: dict[str, Any]) -> None:
        """The held-out figures of the adapter in use (every round has them: the curve) and
        of the round's new adapter, where one was trained."""
        figures = {"current": asdict(self.held_out(self.state.get("adapter")))}
        if adapter := trained_adapter(this):
            figures["candidate"] = asdict(self.held_out(adapter))
        this["evaluate"] = figures
        self.save()

    def held_out(self, adapter: str | None) -> SideFigures:
        """The held-out figures of `adapter`, measured once per run and kept."""
        key = adapter or BASE
        kept: dict[str, Any] = self.state.setdefault("held_out", {})
        if key in kept and "passed" in kept[key]:
            return SideFigures(**kept[key])
        refs = held_out_refs(self.config)
        batch_id = kept.get(key, {}).get("batch")
        if batch_id is None:
            batch_id = self.new_batch(f"held-out {key}", refs, adapter)
            kept[key] = {"batch": batch_id}
            self.save()
        self.finish_batch(batch_id, adapter)
        tasks = self.store.batch_tasks(batch_id)
        figures = SideFigures(key, batch_id, sum(1 for t in tasks if solved(t.result)), len(tasks))
        kept[key] = asdict(figures)
        self.save()
        return figures

    def verdict(self, this: dict[str, Any]) -> None:
        figures = this.get("evaluate") or {}
        if "candidate" not in figures:
            this["verdict"] = "kept as data: no adapter trained"
        else:
            current = SideFigures(**figures["current"])
            candidate = SideFigures(**figures["candidate"])
            if promotes(candidate, current):
                self.state["adapter"] = candidate.adapter
                this["verdict"] = "promoted"
            else:
                this["verdict"] = f"kept as data: {current.adapter} stays"
        self.save()

    # -- batches --------------------------------------------------------------------------

    def new_batch(
        self, what: str, refs: list[str], adapter: str | None, *, judged: bool = False
    ) -> int:
        specs = [{"task": ref, **({"choose_by_checks": True} if judged else {})} for ref in refs]
        name = f"improve {self.run.id} {what}"
        batch = self.store.create_batch(
            specs,
            name=name,
            source=f"improve:{self.run.id}",
            source_hash=f"improve-{self.run.id}-{what}".replace(" ", "-"),
            config={"improvement": self.run.id, "adapter": adapter, "approval": "auto",
                    "workers": self.config.workers, "ray": self.config.ray},
        )  # fmt: skip
        return batch.id

    def finish_batch(self, batch_id: int, adapter: str | None) -> None:
        if self.store.get_batch(batch_id).status is BatchStatus.COMPLETED:
            return
        status = self.run_batch(batch_id, adapter)
        if status is not BatchStatus.COMPLETED:
            raise Stopped(f"batch {batch_id} {status.value}")


def held_out_refs(config: ImproveConfig) -> list[str]:
    """The held-out variants (or problems) each adapter of the run is measured on."""
    first = config.held_out_from
    return task_sets(config.family)[1][first : first + config.held_out]


def promote_by_hand(store: Improvements, run_id: int, number: int) -> str:
    """Put round `number`'s new adapter in use for the run's next rounds (the operator's
    call, over the verdict); returns its name. ImproveError when the round trained none."""
    run = store.get_improvement(run_id)
    rounds = run.state.get("rounds", [])
    if not 1 <= number <= len(rounds):
        raise ImproveError(f"run {run_id} has no round {number}")
    adapter = trained_adapter(rounds[number - 1])
    if adapter is None:
        raise ImproveError(f"round {number} trained no adapter")
    state = copy.deepcopy(run.state)
    state["adapter"] = adapter
    state["rounds"][number - 1]["promoted_by_hand"] = True
    store.update_improvement(run_id, state=state)
    return adapter


def trained_adapter(this: dict[str, Any]) -> str | None:
    """The round's new adapter: the preference stage's where it trained, else the SFT one."""
    return this.get("prefer", {}).get("adapter") or this.get("train", {}).get("adapter")


class Stopped(Exception):
    """A batch did not complete (stopped, or its backend failed): the run is resumable."""


def solved(result: dict[str, Any]) -> bool:
    total = result.get("checks_total") or 0
    return bool(total) and result.get("checks_passed") == total


def round_line(this: dict[str, Any]) -> str:
    """`round 2: 3/8 solved · labels +3 -9 · trained improve4-r2 · held-out ... · promoted`"""
    parts = [f"round {this['round']}"]
    rollouts = this.get("rollouts")
    if rollouts:
        parts.append(
            f"{rollouts['solved']}/{rollouts['n']} solved ({rollouts['tokens']:,} tokens, "
            f"{rollouts['seconds']:.0f} s)"
        )
    labels = this.get("labels")
    if labels:
        parts.append(f"labels +{labels['good']} -{labels['bad']}")
    train = this.get("train", {})
    if "adapter" in train:
        parts.append(f"trained {train['adapter']} ({train['seconds']:.0f} s)")
    elif "skipped" in train:
        parts.append(f"not trained: {train['skipped']}")
    prefer = this.get("prefer", {})
    if "adapter" in prefer:
        parts.append(f"then {prefer['adapter']} ({prefer['seconds']:.0f} s)")
    elif "skipped" in prefer:
        parts.append(f"no preference stage: {prefer['skipped']}")
    figures = this.get("evaluate") or {}
    if "candidate" in figures:
        current, candidate = SideFigures(**figures["current"]), SideFigures(**figures["candidate"])
        parts.append(f"held-out {candidate.line()} against {current.adapter} {current.line()}")
    elif "current" in figures:
        current = SideFigures(**figures["current"])
        parts.append(f"held-out {current.adapter} {current.line()}")
    if "verdict" in this:
        parts.append(this["verdict"])
    return ": ".join(parts[:2]) + "".join(f" · {p}" for p in parts[2:])
