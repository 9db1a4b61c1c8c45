"""The whole loop on the tiny model, in one test: the operator rewrites the agent's action
on a shipped task a few times; SFT trains on those edits in a real background worker; the
adapter goes back into the agent; the agent's own action now parses and passes the task's
checks, which it never did before.

The model is the tiny random-init Qwen2 with a trained checkpoint's final-norm scale
(`tiny_learner_dir`): the same noise as the other tests' model, but with logits that can
become confident, which a fresh init's cannot (see `build_tiny_model`). Rates before and
after are printed and listed in docs/benchmarks.md.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agents.approval import Answer
from agents.backends.transformers_backend import TransformersBackend
from agents.tasks import Task, load_task
from storage import EvaluationKind, JobKind, JobStatus, LabelValue, TraceStore
from tests.support.runs import make_runtime
from training.jobs import JobOptions, follow, queue_job

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.timeout(900)]

#: The operator's fix for the shipped task: ngrams() stops one n-gram short.
FIX = """def fix(subagent):
    path = "textstats/__init__.py"
    code = subagent.read_file(path)
    subagent.write_file(path, code.replace("len(found) - n)", "len(found) - n + 1)"))
    return "fixed"
self.add_action("Fix the off-by-one in ngrams", fix)"""

TEACH = 4  # sessions the operator corrects
TRIES = 8  # sessions the agent runs alone, before and after
#: Solved alone after training, at least. Measured after one training, 30 sessions: 19
#: solved (about 0.63 each; "2 of 8" then fails about 1 run in 200). A miss is mostly the
#: tiny evaluator scoring a near-copy of the fix (a wrong path) a hair above the fix. With
#: the wall clock in the headers the rate swung from 1 to 4 of 5 with the hour the test ran
#: (the timestamp's digits are tokens the tiny model reads), and "2 of 5" failed in CI.
SOLVED_AFTER = 2


def steady_clock() -> Callable[[], float]:
    """The headers' timestamps: the same in every session, 7 s apart."""
    ticks = itertools.count()
    return lambda: 1_740_912_854.0 + 7 * next(ticks)


RUN = {
    "candidates": 4,
    "escalation": (),
    "block_tokens": 136,  # FIX is 121 tokens with its end marker
    "temperature": 0.8,
    "max_ticks": 1,
    "action_timeout": 30.0,
}


@pytest.fixture
def backend(tiny_learner_dir: Path) -> Iterator[TransformersBackend]:
    loaded = TransformersBackend(str(tiny_learner_dir))
    yield loaded
    loaded.close()


def solved(store: TraceStore, session_id: int) -> bool:
    """The task's own check that the unit tests pass ran and passed."""
    outcome = [n for n in store.tree(session_id) if n.kind == "outcome"]
    results = [e for n in outcome for e in store.evaluations(n.id)]
    return any(
        e.name == "check_tests_pass" and e.kind is EvaluationKind.CALLBACK and e.passed is True
        for e in results
    )


def alone(
    store: TraceStore, backend: TransformersBackend, task: Task, work: Path, seed: int
) -> bool:
    runtime, _ = make_runtime(
        store, backend, work, task=task, approval="auto", seed=seed, clock=steady_clock(), **RUN
    )
    return solved(store, runtime.run().session_id)


def test_operator_edits_train_an_adapter_that_solves_the_task(
    backend: TransformersBackend, tiny_learner_dir: Path, tmp_path: Path
) -> None:
    task = load_task("fix_failing_test")
    store = TraceStore(tmp_path / "traces.db")
    before = sum(alone(store, backend, task, tmp_path / f"b{i}", 100 + i) for i in range(TRIES))

    for i in range(TEACH):
        runtime, asked = make_runtime(
            store,
            backend,
            tmp_path / f"t{i}",
            [lambda request: Answer.edit(FIX)],
            task=task,
            approval="ask",
            seed=i,
            clock=steady_clock(),
            **RUN,
        )
        outcome = runtime.run()
        assert asked and solved(store, outcome.session_id), outcome.message
        # The operator also calls the tick's orientation good: without an example of
        # another block kind, the adapter learns to write the fix after every header,
        # orientation included, and the action then follows a context it never saw.
        (orientation,) = [
            n
            for n in store.tree(outcome.session_id)
            if n.kind == "orientation" and n.status.value == "chosen"
        ]
        store.add_label(orientation.id, LabelValue.GOOD)

    options = JobOptions(
        kind=JobKind.SFT,
        base_model=str(tiny_learner_dir),
        name="fix-ngrams",
        epochs=30,
        learning_rate=5e-3,
        lora_r=16,
        batch_size=2,
        max_length=2048,
        save_steps=1000,
    )
    started = time.monotonic()
    job = queue_job(store, options, data_dir=tmp_path / "data")
    assert job.config["rows_at_queue"] == 2 * TEACH
    for _ in follow(store, job.id, poll=0.5):
        assert time.monotonic() - started < 600, "training took too long"
    job = store.get_job(job.id)
    assert job.status is JobStatus.COMPLETED, job.error
    adapter = store.get_adapter("fix-ngrams")

    backend.load_adapter(adapter.name, adapter.path)
    backend.use_adapter(adapter.name)
    after = sum(alone(store, backend, task, tmp_path / f"a{i}", 200 + i) for i in range(TRIES))
    print(
        f"\nclosed loop: solved alone before {before}/{TRIES}, after {after}/{TRIES} "
        f"(training {time.monotonic() - started:.0f} s)"
    )
    assert before == 0
    assert after >= SOLVED_AFTER
    store.close()
