"""Tasks: loading TOML and Python task files (never running them), seeding the work
directory, and every shipped task's checks run for real in the sandbox kernel, first on
the untouched work directory (something fails) and then on a known solution (all pass)."""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from agents.sandbox import Kernel
from agents.tasks import (
    BUILTIN_DIR,
    Task,
    TaskError,
    builtin_names,
    builtin_tasks,
    load_task,
    prompt_task,
    seed_workdir,
)

SHIPPED = ["csv_summary", "fix_failing_test", "vigenere"]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# -- loading -------------------------------------------------------------------------------


def test_builtin_tasks_load_sorted_with_checks() -> None:
    tasks = builtin_tasks()
    names = [task.name for task in tasks]
    assert names == sorted(names)
    assert set(SHIPPED) <= set(names) == set(builtin_names())
    for task in tasks:
        assert task.source == f"builtin:{task.name}"
        assert task.title and task.prompt and task.files
        assert task.check_names, task.name
        ast.parse(task.checks)
        for name in task.check_names:
            assert f'self.add_evaluation("{name}", {name})' in task.checks
        assert task.max_ticks is None or task.max_ticks > 0


def test_load_by_name_prefix_and_path_agree() -> None:
    by_name = load_task("vigenere")
    assert load_task("builtin:vigenere") == by_name
    by_path = load_task(str(BUILTIN_DIR / "vigenere.py"))
    assert by_path.source == str((BUILTIN_DIR / "vigenere.py").resolve())
    assert {**by_path.__dict__, "source": ""} == {**by_name.__dict__, "source": ""}
    assert by_name.name == "vigenere"
    assert by_name.check_names == (
        "check_key_file_exists",
        "check_key_length",
        "check_key_decrypts",
    )
    assert set(by_name.files) == {"cipher.txt"}


def test_vigenere_checks_keep_the_secrets_out() -> None:
    """The checks may be shown to the model: no plaintext, no key, no metadata."""
    task = load_task("vigenere")
    for secret in ("LEMONADE", "LIGHTHOUSE", "lighthouse", "PROMPT", 'cipher.txt":'):
        assert secret not in task.checks
    assert "FILES" not in task.checks and "TITLE" not in task.checks


def test_prompt_task_is_a_chat() -> None:
    task = prompt_task("  Write a haiku about tests.\nMake it rhyme.  ")
    assert task == Task(
        name="chat",
        title="Write a haiku about tests.",
        prompt="Write a haiku about tests.\nMake it rhyme.",
        files={},
        checks="",
        check_names=(),
        max_ticks=None,
        source="prompt",
    )
    assert len(prompt_task("x" * 200).title) <= 60
    with pytest.raises(TaskError):
        prompt_task("   ")


def test_toml_task_loads(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "hello.toml",
        """title = "Say hello"
prompt = '''
Write hello.txt.
'''
max_ticks = 5
checks = '''
import os

def _exists(subagent, name):
    return os.path.exists(os.path.join(subagent.workdir, name))

def check_hello(subagent):
    return _exists(subagent, "hello.txt")

def check_named(agent):
    return True
self.add_evaluation("Named by hand", check_named)
'''

[files]
"notes/readme.md" = "# notes\\n"
"data.txt" = '''
1
2
'''
""",
    )
    task = load_task(str(path))
    assert (task.name, task.title, task.prompt, task.max_ticks) == (
        "hello",
        "Say hello",
        "Write hello.txt.",
        5,
    )
    assert task.files == {"notes/readme.md": "# notes\n", "data.txt": "1\n2\n"}
    # A check registered by hand keeps its title and is not registered twice.
    assert task.check_names == ("Named by hand", "check_hello")
    assert task.checks.count("add_evaluation") == 2
    assert task.checks.rstrip().endswith('self.add_evaluation("check_hello", check_hello)')
    assert task.source == str(path.resolve())


def test_toml_title_defaults_to_the_file_name(tmp_path: Path) -> None:
    task = load_task(str(_write(tmp_path, "count_words.toml", 'prompt = "Count."\n')))
    assert (task.title, task.checks, task.check_names, task.files) == (
        "Count words",
        "",
        (),
        {},
    )


def test_python_task_is_parsed_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = _write(
        tmp_path,
        "parsed.py",
        f'''"""A task file with side effects that must never run in the console."""
from __future__ import annotations

import os
from pathlib import Path

Path({str(marker)!r}).write_text("ran")
raise SystemExit("the console executed a task file")

TITLE = "Parsed only"
PROMPT = """
    Write out.txt.
"""
FILES = {{"in.txt": "data\\n", "sub/dir/x.py": "print(1)\\n"}}
MAX_TICKS = 7
EXPECTED: str = "data"


# The helper's comment comes along.
def _helper(subagent):
    return os.path.join(subagent.workdir, "out.txt")


class Box:
    value = 1


def check_output(subagent):
    return Path(_helper(subagent)).exists()


def check_other(subagent, extra=None):
    return Box.value == 1


if __name__ == "__main__":
    print("main")
''',
    )
    task = load_task(str(path))
    assert not marker.exists()
    assert (task.title, task.prompt, task.max_ticks) == ("Parsed only", "Write out.txt.", 7)
    assert task.files == {"in.txt": "data\n", "sub/dir/x.py": "print(1)\n"}
    assert task.check_names == ("check_output", "check_other")
    checks = task.checks
    for kept in ("import os", "from pathlib import Path", 'EXPECTED: str = "data"'):
        assert kept in checks
    for kept in ("# The helper's comment comes along.", "def _helper", "class Box"):
        assert kept in checks
    for dropped in ("SystemExit", "write_text", "TITLE", "PROMPT", "FILES", "__main__"):
        assert dropped not in checks
    assert "__future__" not in checks
    namespace: dict[str, object] = {}

    class Registry:
        def add_evaluation(self, title: str, fn: Callable[[object], object]) -> None:
            namespace[title] = fn

    # Only to see that the assembled source is whole; the real run is in the sandbox below.
    exec(compile(checks, "checks", "exec"), {"self": Registry()})
    assert set(namespace) == {"check_output", "check_other"}


def test_python_task_without_checks_has_no_check_source(tmp_path: Path) -> None:
    path = _write(tmp_path, "plain.py", 'import os\nPROMPT = "Do it."\n\ndef helper():\n    pass\n')
    task = load_task(str(path))
    assert (task.checks, task.check_names, task.title) == ("", (), "Plain")


BAD_TASKS: list[tuple[str, str, str]] = [
    # (file name, content, what the message must contain)
    ("syntax.toml", 'title = "x"\nprompt = \n', "line 2"),
    ("noprompt.toml", 'title = "x"\n', "prompt is missing"),
    ("emptyprompt.toml", 'prompt = """\n   \n"""\n', "prompt is empty"),
    ("title.toml", 'title = 3\nprompt = "p"\n', "line 1: title must be text"),
    ("ticks.toml", 'prompt = "p"\nmax_ticks = "ten"\n', "line 2: max_ticks must be a whole"),
    ("tickbool.toml", 'prompt = "p"\nmax_ticks = true\n', "max_ticks must be a whole"),
    ("tickzero.toml", 'prompt = "p"\nmax_ticks = 0\n', "max_ticks must be at least 1"),
    ("unknown.toml", 'prompt = "p"\npromt = "q"\n', "line 2: unknown key 'promt'"),
    ("files.toml", 'prompt = "p"\nfiles = ["a"]\n', "files must be a table"),
    ("filetype.toml", 'prompt = "p"\n[files]\n"a.txt" = 3\n', "line 3: file 'a.txt' must be text"),
    ("abs.toml", 'prompt = "p"\n[files]\n"/etc/x" = ""\n', "absolute path"),
    ("escape.toml", 'prompt = "p"\n[files]\n"a/../../x" = ""\n', "outside the work directory"),
    ("dotdot.toml", 'prompt = "p"\n[files]\n"../x" = ""\n', "outside the work directory"),
    ("dir.toml", 'prompt = "p"\n[files]\n"a/.." = ""\n', "does not name a file"),
    ("checktype.toml", 'prompt = "p"\nchecks = 1\n', "checks must be Python source"),
    (
        "checksyntax.toml",
        "prompt = \"p\"\nchecks = '''\nimport os\n\ndef check_x(subagent)\n    return 1\n'''\n",
        "line 5: Python syntax error in checks",
    ),
    (
        "checkinline.toml",
        "prompt = \"p\"\nchecks = '''def check_x(subagent):\n  return (\n'''\n",
        "line 3",
    ),
    (
        "checkargs.toml",
        "prompt = \"p\"\nchecks = '''\ndef check_x():\n    return 1\n'''\n",
        "line 3: check_x must take one argument",
    ),
    (
        "checkasync.toml",
        "prompt = \"p\"\nchecks = '''\nasync def check_x(subagent):\n    return 1\n'''\n",
        "check_x must be a plain def",
    ),
    (
        "checktitle.toml",
        "prompt = \"p\"\nchecks = '''\ndef f(s):\n    pass\nself.add_evaluation(NAME, f)\n'''\n",
        "title as a string literal",
    ),
    ("syntax.py", 'PROMPT = "p"\ndef check_x(subagent:\n    pass\n', "line 2: Python syntax error"),
    ("notliteral.py", 'PROMPT = "p"\nFILES = {"a": open("x").read()}\n', "line 2: FILES must be"),
    ("promptcall.py", 'PROMPT = "".join(["a"])\n', "line 1: PROMPT must be a literal"),
    ("noprompt.py", 'TITLE = "t"\n', "PROMPT is missing"),
    ("prompttype.py", "PROMPT = 3\n", "line 1: PROMPT must be text"),
    (
        "ticks.py",
        'PROMPT = "p"\nMAX_TICKS = 2.5\n',
        "line 2: MAX_TICKS must be a whole number, not a decimal",
    ),
    ("fileslist.py", 'PROMPT = "p"\nFILES = ["a"]\n', "FILES must be a dict"),
    ("filesvalue.py", 'PROMPT = "p"\nFILES = {"a": 1}\n', "file 'a' must be text"),
    ("fileskey.py", 'PROMPT = "p"\nFILES = {1: "a"}\n', "FILES keys must be paths"),
    ("filesescape.py", 'PROMPT = "p"\nFILES = {"../a": ""}\n', "outside the work directory"),
    (
        "checkargs.py",
        'PROMPT = "p"\n\n\ndef check_x(a, b):\n    return 1\n',
        "line 4: check_x must take one argument",
    ),
]


@pytest.mark.parametrize(
    ("name", "content", "expected"), BAD_TASKS, ids=[case[0] for case in BAD_TASKS]
)
def test_bad_task_file_is_one_line_naming_the_file(
    tmp_path: Path, name: str, content: str, expected: str
) -> None:
    path = _write(tmp_path, name, content)
    with pytest.raises(TaskError) as caught:
        load_task(str(path))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(str(path)), message
    assert expected in message, message


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.toml"
    path.write_bytes(b'prompt = "p"\ntitle = "caf\xe9"\n')
    with pytest.raises(TaskError, match=r"latin\.toml, line 2: not valid UTF-8"):
        load_task(str(path))


def test_refs_that_are_not_task_files(tmp_path: Path) -> None:
    cases = {
        str(tmp_path / "missing.toml"): "task file does not exist",
        str(tmp_path): "is a folder",
        str(_write(tmp_path, "task.txt", "prompt = 'p'\n")): "must end in .toml or .py",
    }
    for ref, expected in cases.items():
        with pytest.raises(TaskError) as caught:
            load_task(ref)
        assert "\n" not in str(caught.value)
        assert str(caught.value).startswith(ref) and expected in str(caught.value)


def test_unknown_builtin_lists_the_builtins() -> None:
    with pytest.raises(TaskError) as caught:
        load_task("no_such_task")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("no_such_task: no such task")
    for name in SHIPPED:
        assert name in message
    with pytest.raises(TaskError, match="no such task"):
        load_task("builtin:../shipped/vigenere")


# -- seeding -------------------------------------------------------------------------------


def test_seed_workdir_writes_files_and_parents(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    task = Task(
        name="t",
        title="t",
        prompt="p",
        files={"a.txt": "A\r\nB", "deep/er/b.py": "x = 1\n", "empty": ""},
    )
    seed_workdir(task, work)
    assert (work / "a.txt").read_bytes() == b"A\r\nB"
    assert (work / "deep/er/b.py").read_text() == "x = 1\n"
    assert (work / "empty").read_text() == ""
    for task in builtin_tasks():
        seeded = tmp_path / task.name
        seeded.mkdir()
        seed_workdir(task, seeded)
        for rel, text in task.files.items():
            assert (seeded / rel).read_text(encoding="utf-8") == text


@pytest.mark.parametrize("rel", ["/etc/passwd", "../outside.txt", "a/../../outside.txt", ".", ""])
def test_seed_workdir_refuses_escapes_and_writes_nothing(tmp_path: Path, rel: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    task = Task(name="t", title="t", prompt="p", files={"first.txt": "1", rel: "x"})
    with pytest.raises(TaskError) as caught:
        seed_workdir(task, work)
    assert "\n" not in str(caught.value)
    assert list(work.iterdir()) == []
    assert not (tmp_path / "outside.txt").exists()


def test_seed_workdir_refuses_a_symlink_out(tmp_path: Path) -> None:
    work = tmp_path / "work"
    outside = tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    os.symlink(outside, work / "link")
    task = Task(name="t", title="t", prompt="p", files={"link/x.txt": "x"})
    with pytest.raises(TaskError, match="outside the work directory"):
        seed_workdir(task, work)
    assert list(outside.iterdir()) == []


# The solutions run inside the kernel as the agent's own code would (`self` is its handle),
# so they also show that the seeded work dir is writable by the sandbox's user.

# Finds the key from the ciphertext alone: the period whose columns look most like
# English (index of coincidence), then each column's shift by a chi-squared fit.
SOLVE_VIGENERE = """
ENGLISH = [8.2, 1.5, 2.8, 4.3, 12.7, 2.2, 2.0, 6.1, 7.0, 0.15, 0.77, 4.0, 2.4, 6.7, 7.5,
           1.9, 0.095, 6.0, 6.3, 9.1, 2.8, 0.98, 2.4, 0.15, 2.0, 0.074]
text = [ord(c) - 65 for c in self.read_file("cipher.txt") if "A" <= c <= "Z"]

def coincidence(column):
    counts = [column.count(i) for i in range(26)]
    return sum(n * (n - 1) for n in counts) / max(1, len(column) * (len(column) - 1))

def mean_coincidence(period):
    return sum(coincidence(text[i::period]) for i in range(period)) / period

period = next(p for p in range(1, 21) if mean_coincidence(p) > 0.06)

def chi2(column, shift):
    total = 0.0
    for letter in range(26):
        expected = ENGLISH[letter] / 100 * len(column)
        seen = sum(1 for c in column if (c - shift) % 26 == letter)
        total += (seen - expected) ** 2 / expected
    return total

key = "".join(
    chr(65 + min(range(26), key=lambda shift: chi2(text[i::period], shift)))
    for i in range(period)
)
self.write_file("solution.txt", key + "\\n")
"""

FIX_FAILING_TEST = """
path = "textstats/__init__.py"
code = self.read_file(path)
assert code.count("range(len(found) - n)") == 1
self.write_file(path, code.replace("range(len(found) - n)", "range(len(found) - n + 1)"))
assert self.run("python3 -m unittest")["returncode"] == 0
"""


def _summary_block(revenue: Mapping[str, object], best: str) -> str:
    summary = {"revenue_by_region": revenue, "best_selling_product": best}
    return f"self.write_file('summary.json', {json.dumps(json.dumps(summary, indent=2))})\n"


# Worked out apart from the checks' own arithmetic.
REVENUE = {"North": 1826.01, "South": 2256.94, "East": 3491.49, "West": 1992.19}

SOLUTIONS: dict[str, str] = {
    "vigenere": SOLVE_VIGENERE,
    "fix_failing_test": FIX_FAILING_TEST,
    "csv_summary": _summary_block(REVENUE, "Notebook"),
}

# Wrong answers that look right, each applied after the solution: each fails the named check
# and passes the others ("...": other checks may fail too).
SEVEN_EMPTY_TESTS = "import unittest\n\nclass T(unittest.TestCase):\n" + "".join(
    f"    def test_{i}(self):\n        pass\n" for i in range(7)
)
NEAR_MISSES: list[tuple[str, str, str]] = [
    ("vigenere", "self.write_file('solution.txt', 'LEMONADELEMONADE')", "check_key_length"),
    ("vigenere", "self.write_file('solution.txt', 'LEMONADA')", "check_key_decrypts"),
    ("vigenere", "self.write_file('solution.txt', 'LEMON ADE')", "check_key_file_exists ..."),
    (
        "fix_failing_test",
        f"self.write_file('tests/test_textstats.py', {SEVEN_EMPTY_TESTS!r})",
        "check_tests_unchanged",
    ),
    ("fix_failing_test", "import os; os.remove('tests/__init__.py')", "check_tests_pass"),
    ("csv_summary", _summary_block(REVENUE, "Backpack"), "check_best_selling_product"),
    (
        "csv_summary",
        _summary_block({**REVENUE, "North": "1826.01"}, "Notebook"),
        "check_revenue_by_region",
    ),
    (
        "csv_summary",
        _summary_block({**REVENUE, "East": 3491.0}, "Notebook"),
        "check_revenue_by_region",
    ),
    ("csv_summary", "self.write_file('summary.json', '[1, 2]')", "check_summary_is_json ..."),
    (
        "csv_summary",
        "self.write_file('sales.csv', self.read_file('sales.csv') + 'North,Pen Set,1,1.00\\n')",
        "check_sales_csv_unchanged ...",
    ),
]


def _evaluate(kernel: Kernel, task: Task) -> dict[str, object]:
    """Each check's value, or the text of the error it raised."""
    results: dict[str, object] = {}
    for name in task.check_names:
        done = kernel.call_evaluation(name)
        results[name] = done.value if done.ok else f"error: {done.error}"
    return results


def _passed(value: object) -> bool:
    return bool(value) and not (isinstance(value, str) and value.startswith("error: "))


def _seeded_kernel(task: Task, tmp_path: Path) -> Kernel:
    work = tmp_path / "work"
    work.mkdir()
    seed_workdir(task, work)
    kernel = Kernel(work)
    kernel.start()
    defined = kernel.exec_block(task.checks, name=f"{task.name} checks")
    assert defined.ok, defined.error
    assert defined.registered["evaluation"] == list(task.check_names)
    return kernel


def _run_block(kernel: Kernel, code: str) -> None:
    done = kernel.exec_block(code, name="solution")
    assert done.ok, done.error


def test_every_shipped_task_has_a_solution_here() -> None:
    assert set(SOLUTIONS) == set(builtin_names())


@pytest.mark.parametrize("name", SHIPPED)
def test_checks_fail_unsolved_and_pass_solved(tmp_path: Path, name: str) -> None:
    task = load_task(name)
    with _seeded_kernel(task, tmp_path) as kernel:
        unsolved = _evaluate(kernel, task)
        assert not all(_passed(v) for v in unsolved.values()), unsolved
        _run_block(kernel, SOLUTIONS[name])
        solved = _evaluate(kernel, task)
        assert all(_passed(v) for v in solved.values()), solved


def test_the_vigenere_solver_found_the_key_itself(tmp_path: Path) -> None:
    task = load_task("vigenere")
    with _seeded_kernel(task, tmp_path) as kernel:
        _run_block(kernel, SOLVE_VIGENERE)
    assert (tmp_path / "work" / "solution.txt").read_text() == "LEMONADE\n"


@pytest.mark.parametrize(
    ("name", "spoil", "failing"),
    NEAR_MISSES,
    ids=[f"{name}-{failing.split()[0]}-{i}" for i, (name, _, failing) in enumerate(NEAR_MISSES)],
)
def test_near_misses_fail_the_right_check(
    tmp_path: Path, name: str, spoil: str, failing: str
) -> None:
    task = load_task(name)
    with _seeded_kernel(task, tmp_path) as kernel:
        _run_block(kernel, SOLUTIONS[name])
        _run_block(kernel, spoil)
        results = _evaluate(kernel, task)
    check, others_may_fail, _ = failing.partition(" ...")
    assert not _passed(results[check]), results
    if not others_may_fail:
        assert all(_passed(v) for k, v in results.items() if k != check), results
