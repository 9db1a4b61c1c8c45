"""A/B: the base model against an adapter, headless. What one side's session came to
(`summarize`), which side the evaluation callbacks and the logit evaluator prefer
(`judge`), the task a stored session ran (`resolve_task`), and the held-out set: the first
`PER_FAMILY` held-out variants of every family (`agents.tasks.families.split`: never one a
teaching script was given), run on both sides one session after another (`run_held_out`).

The console's A/B screens show these; the sides share the console's one model through
`agents.backends.pinned.PinnedAdapter`.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents.backends.pinned import PinnedAdapter
from agents.tasks.families import Variant, family_names, split, variant
from storage import Author, EvaluationKind, NodeStatus, SessionStatus, TraceStore
from training.rules import evaluation_passed

if TYPE_CHECKING:
    from agents.runtime import Runtime
    from agents.tasks import Task
    from agents.workbench import Workbench

BASE = "base"
TUNED = "adapter"
#: Blocks not on the path: they were sampled but another candidate was taken.
OFF_PATH = frozenset({NodeStatus.ALTERNATE, NodeStatus.PROPOSED})
#: held-out variants per family
PER_FAMILY = 3
#: ticks per held-out session: does the agent solve it at its first try
TICKS = 1


@dataclass(frozen=True, slots=True)
class SideSummary:
    """What one side's session came to."""

    session_id: int
    adapter: str | None
    status: SessionStatus
    callbacks_passed: int
    callbacks_total: int
    #: the logit evaluator's mean log-odds over the blocks the model wrote on the path
    mean_log_odds: float | None
    blocks: int

    @property
    def pass_rate(self) -> float | None:
        return self.callbacks_passed / self.callbacks_total if self.callbacks_total else None


@dataclass(frozen=True, slots=True)
class Verdict:
    """Which side each judge prefers (BASE, TUNED, or None for no preference)."""

    callbacks: str | None
    evaluator: str | None
    overall: str | None


def summarize(store: TraceStore, session_id: int) -> SideSummary:
    """A side's evaluation-callback results and mean evaluator log-odds, from the store."""
    session = store.get_session(session_id)
    nodes = store.tree(session_id)
    results = [
        r for r in store.evaluations_for([n.id for n in nodes]) if r.kind is EvaluationKind.CALLBACK
    ]
    # A task's own checks judge it (the model cannot forge them); a chat has only the
    # model's evaluations.
    checks = set(session.settings.get("task", {}).get("check_names", ()))
    if checks:
        results = [r for r in results if r.name in checks]
    odds = [
        float(n.score_parts["evaluator"])
        for n in nodes
        if n.author is Author.MODEL
        and n.status not in OFF_PATH
        and isinstance(n.score_parts.get("evaluator"), int | float)
        and math.isfinite(n.score_parts["evaluator"])
    ]
    return SideSummary(
        session_id=session_id,
        adapter=session.adapter,
        status=session.status,
        callbacks_passed=sum(1 for r in results if evaluation_passed(r)),
        callbacks_total=len(results),
        mean_log_odds=sum(odds) / len(odds) if odds else None,
        blocks=len(odds),
    )


def prefer(base: float | None, tuned: float | None) -> str | None:
    if base is None or tuned is None or math.isclose(base, tuned, abs_tol=1e-9):
        return None
    return TUNED if tuned > base else BASE


def judge(base: SideSummary, tuned: SideSummary) -> Verdict:
    """The callbacks decide; where they don't (a tie, or none ran), the evaluator does."""
    callbacks = prefer(base.pass_rate, tuned.pass_rate)
    evaluator = prefer(base.mean_log_odds, tuned.mean_log_odds)
    return Verdict(callbacks, evaluator, callbacks or evaluator)


def resolve_task(settings_snapshot: dict[str, object], task_text: str) -> Task:
    """The task a stored session ran: a shipped or file task is loaded again (with its
    files); otherwise rebuilt from the snapshot, or from the session's text."""
    from agents.runtime import task_from_snapshot
    from agents.tasks import TaskError, load_task, prompt_task

    snapshot = settings_snapshot.get("task")
    if isinstance(snapshot, dict) and snapshot.get("prompt"):
        source = str(snapshot.get("source") or "")
        if source.startswith("builtin:") or source.endswith((".toml", ".py")):
            try:
                return load_task(source)
            except TaskError:
                pass
        return task_from_snapshot(snapshot)
    return prompt_task(task_text)


# -- the held-out set ------------------------------------------------------------------------


def held_out_variants(per_family: int = PER_FAMILY) -> list[Variant]:
    """The first `per_family` held-out variants of each family, families in turn."""
    seeds = {family: split(family)[1][:per_family] for family in family_names()}
    return [variant(f, seeds[f][i]) for i in range(per_family) for f in seeds]


def run_held_out(
    bench: Workbench,
    adapter: str,
    variants: list[Variant],
    *,
    stopping: threading.Event,
    solved: Callable[[int, str, bool], None],
    running: Callable[[Runtime | None], None] = lambda runtime: None,
) -> None:
    """Each variant on the base model, then with `adapter`, with the same seed, approval
    `auto`, no memory and `TICKS` ticks (as `bench/learning.py` measures), on the
    workbench's model; `solved(index, BASE or TUNED, solved)` after each session.
    `running(runtime)` names the session running now (None between sessions), so that a
    caller can stop it. Returns early, without a result for the session cut short, once
    `stopping` is set or the console is ending. Blocking: call from a thread."""
    from agents.runtime import UNATTENDED, session_options, session_solved
    from agents.runtime import Runtime as Session

    backend = bench.require_model()
    bench.ensure_adapter(backend, adapter)
    settings = bench.settings
    lock = threading.Lock()
    seed = random.randrange(1 << 30)
    for index, row in enumerate(variants):
        for key, name in ((BASE, None), (TUNED, adapter)):
            if stopping.is_set():
                return
            options = session_options(
                settings,
                backend,
                row.task,
                **UNATTENDED,
                seed=seed + index,  # the same for both sides
                max_ticks=TICKS,
            )
            runtime = Session(
                bench.store,
                PinnedAdapter(backend, name, lock),
                row.task,
                options,
                sessions_dir=settings.sessions_dir(),
            )
            running(runtime)
            with bench.sessions.running(runtime) as may_run:
                outcome = runtime.run() if may_run else None
            running(None)
            if outcome is None or stopping.is_set():  # cut short: not a result
                return
            solved(index, key, session_solved(bench.store, outcome.session_id))
