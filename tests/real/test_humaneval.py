"""HumanEval on the default model (Qwen2.5-Coder-0.5B-Instruct): the model alone answers and
is judged by the problem's own tests in the sandbox, and one tick of the agent on the same
problem, with the product's defaults, writes solution.py and has its hidden verdict
recorded but never shown. bench/humaneval.py is the measurement; this is its plumbing on
the real model, in the long tier (`make test-all`): `make test` runs the same plumbing on
the tiny model (tests/agents/test_suites.py) and the real model's tick in
tests/real/test_coder.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents import blocks
from agents.backends.transformers_backend import TransformersBackend
from agents.runtime import RunOptions, Runtime
from agents.settings import Settings
from agents.tasks.suites import (
    HUMANEVAL,
    SOLUTION,
    load_suite,
    plain_answer,
    plain_solution,
    problem_task,
    verdict,
)
from storage import NodeStatus, TraceStore

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.timeout(900)]


def test_humaneval_alone_and_through_the_agent(qwen_dir: Path, tmp_path: Path) -> None:
    suite = load_suite(HUMANEVAL)
    problem = suite.problems[4]
    task = problem_task(suite, problem)
    backend = TransformersBackend(str(qwen_dir))
    try:
        # alone, greedy: HumanEval/4 passes (as in every measured run)
        answer = plain_answer(backend, problem)
        assert verdict(task, plain_solution(problem, answer.text)) == (True, ""), answer.text
        options = RunOptions.from_settings(
            Settings(), backend, approval="auto", max_ticks=1, memory=False, seed=0
        )
        with TraceStore(tmp_path / "traces.db") as store:
            outcome = Runtime(store, backend, task, options, sessions_dir=tmp_path / "s").run()
            tree = store.tree(outcome.session_id)
    finally:
        backend.close()
    assert outcome.ticks == 1
    # the coder wrote the file as the task asks: a listing of solution.py, and it ran
    chosen = [n for n in tree if n.kind == blocks.ACTION and n.status is not NodeStatus.ALTERNATE]
    assert chosen and chosen[0].text.lstrip().startswith(f"# {SOLUTION}")
    assert any(n.status is NodeStatus.EXECUTED for n in chosen)
    (result,) = [n for n in tree if n.kind == blocks.OUTCOME]
    assert result.meta["task_total"] == 1  # the hidden tests ran and were recorded ...
    assert "check_tests_pass" not in result.text  # ... and the model never read them
