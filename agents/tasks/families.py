"""Task families: generators of seeded task variants, for teaching and for held-out measure.

A family makes one `Variant` per seed: a `Task` (its own files, prompt and checks) and the
blocks an operator would write for it (orientation, action, evaluation), which the scripted
operator of `training.teach` uses to correct the agent. Variants differ in substance (another
function and bug, other data, other names), and the same seed always gives the same variant.

`--task family:NAME` runs a variant at random (its seed is in its name), `family:NAME:SEED`
that one; a batch tasks file line `{"family": NAME, "seeds": "0-29"}` runs a range.

Each family's seeds `0..VARIANTS-1` are split once, by a fixed shuffle, into a teaching set
and a held-out set (`split`): what is taught is never what is measured.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agents.forms import SCRIPT
from agents.tasks.spec import Task, TaskError, register_checks

FAMILY_PREFIX = "family:"
#: Seeds per family in the teaching/held-out split (any seed makes a variant).
VARIANTS = 60


@dataclass(frozen=True)
class Variant:
    family: str
    seed: int
    task: Task
    orientation: str
    """The orientation an operator would write: the goal, the files, the plan."""
    action: str
    """An action block that solves the variant."""
    evaluation: str
    """An evaluation block that checks the action's result."""
    targets: tuple[str, ...]
    """The files the task is about (inputs and output): a good orientation names them."""
    script_action: str | None = None
    """The action as a script-form block (`agents.forms`): a script, or a file's new text
    (None: the callback rewritten by `as_script`)."""
    script_evaluation: str | None = None
    """The evaluation as a check script, exit status 0 passing (None: as `script_action`)."""

    def blocks_for(self, form: str) -> tuple[str, str]:
        """(action, evaluation) as an operator writes them in a session of `form`. A
        callback `as_script` cannot rewrite (another family's, registered by a user) is
        given as it is: a callback runs as one in a session of scripts too."""
        if form != SCRIPT:
            return self.action, self.evaluation
        action = self.script_action or as_script(self.action) or self.action
        evaluation = self.script_evaluation or as_script(self.evaluation) or self.evaluation
        return action, evaluation


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    make: Callable[[random.Random], dict[str, object]]
    taught: bool = True
    """False for the family kept out of every teaching set (transfer to a new kind)."""


# -- shared pieces -------------------------------------------------------------------------

_THEMES = [
    ("orders", "customer", ["Ada", "Bo", "Cy", "Dee", "Eli"], ["qty", "price"]),
    ("trips", "driver", ["Kim", "Lu", "Max", "Noor", "Oli"], ["km", "minutes"]),
    ("grades", "student", ["Ana", "Ben", "Cleo", "Dan", "Eva"], ["score", "credits"]),
    ("plants", "garden", ["north", "south", "roof", "yard"], ["height", "age"]),
    ("books", "genre", ["poetry", "crime", "travel", "history"], ["pages", "year"]),
    ("games", "team", ["Reds", "Blues", "Greens", "Golds"], ["points", "fouls"]),
    ("sensors", "room", ["lab", "hall", "attic", "cellar"], ["temp", "humidity"]),
    ("runs", "runner", ["Ivo", "Jo", "Kai", "Lea", "Mo"], ["meters", "seconds"]),
]
_RANGES = {
    "qty": (1, 12), "price": (2, 90), "km": (3, 400), "minutes": (10, 300),
    "score": (40, 100), "credits": (1, 6), "height": (5, 180), "age": (1, 30),
    "pages": (80, 900), "year": (1950, 2024), "points": (0, 40), "fouls": (0, 9),
    "temp": (12, 31), "humidity": (20, 90), "meters": (100, 10000), "seconds": (15, 3000),
}  # fmt: skip


def _table(rng: random.Random) -> tuple[str, str, list[str], list[dict[str, str]]]:
    """(file stem, key column, numeric columns, rows): a small themed table."""
    stem, key, values, numbers = rng.choice(_THEMES)
    rows = []
    for _ in range(rng.randint(6, 14)):
        row = {key: rng.choice(values)}
        for column in numbers:
            low, high = _RANGES[column]
            row[column] = str(rng.randint(low, high))
        rows.append(row)
    return stem, key, numbers, rows


def _csv(columns: list[str], rows: list[dict[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _unchanged_check(path: str, text: str) -> str:
    return f'''
def check_input_unchanged(subagent):
    """{path} is exactly as it was given."""
    try:
        text = subagent.read_file({path!r})
    except (OSError, ValueError):
        return False
    return hashlib.sha256(text.encode("utf-8")).hexdigest() == {_sha(text)!r}
'''


_READ = re.compile(r"subagent\.read_file\(('[^']*')\)")
_WRITE = re.compile(r"^(\s*)subagent\.write_file\(('[^']*'), (.*)\)$")
_DEFINITION = re.compile(r"^def \w+\(subagent\):$")
_REGISTER = re.compile(r"^self\.add_(?:action|evaluation)\((\"[^\"]*\"), \w+\)$")


def as_script(block: str) -> str | None:
    """A family's callback block (one function of `subagent` that reads and writes the
    work dir's files, then its registration) as the script that does the same: its title
    as the first comment, the function's body at the top level with `open()` for the
    files; an action prints what the function returned, a check asserts it. None for a
    block of another shape."""
    lines = block.splitlines()
    registered = _REGISTER.match(lines[-1]) if len(lines) > 2 else None
    if not registered or not _DEFINITION.match(lines[0]):
        return None
    title = json.loads(registered[1])
    action = lines[-1].startswith("self.add_action")
    body: list[str] = []
    for line in lines[1:-1]:
        line = line.removeprefix("    ")
        line = _READ.sub(r"open(\1).read()", line)
        written = _WRITE.match(line)
        if written:
            indent, path, text = written.groups()
            line = f"{indent}with open({path}, 'w') as out:\n{indent}    out.write({text})"
        if line.startswith("return "):
            value = line.removeprefix("return ")
            line = f"print({value})" if action else f"assert {value}, {title!r}"
        body.append(line)
    script = f"# {title}\n" + "\n".join(body) + "\n"
    if "subagent" in script or "\n    return" in script:
        return None  # a call or a return the rewrite does not know
    return script


def _orientation(goal: str, files: str, check: str, plan: str) -> str:
    return (
        f"# The task is to {goal}.\n# The work directory holds {files}.\n"
        f"# The check {check}. Plan: {plan}."
    )


# -- fix a bug so the tests pass -----------------------------------------------------------

#: (function names, signature, correct body, [(good fragment, bad fragment)], test lines)
_FUNCTIONS = [
    (["clamp", "bound", "limit"], "value, low, high", "return max(low, min(value, high))",
     [("min(value, high)", "min(value, low)"), ("max(low", "min(low")],
     ["{f}(5, 0, 10) == 5", "{f}(-3, 0, 10) == 0", "{f}(42, 0, 10) == 10"]),
    (["average", "mean", "avg"], "numbers", "return sum(numbers) / len(numbers)",
     [("/ len(numbers)", "/ (len(numbers) - 1)"), ("sum(numbers)", "max(numbers)")],
     ["{f}([2, 4, 6]) == 4", "{f}([5]) == 5"]),
    (["is_even", "even", "divisible_by_two"], "n", "return n % 2 == 0",
     [("n % 2 == 0", "n % 2 == 1"), ("% 2", "% 3")],
     ["{f}(4) is True", "{f}(7) is False", "{f}(0) is True"]),
    (["factorial", "fact", "product_to"], "n",
     "total = 1\n    for i in range(2, n + 1):\n        total *= i\n    return total",
     [("range(2, n + 1)", "range(2, n)"), ("total = 1", "total = 0")],
     ["{f}(5) == 120", "{f}(1) == 1", "{f}(3) == 6"]),
    (["longest", "longest_word", "widest"], "words", "return max(words, key=len)",
     [("max(words", "min(words"), ("key=len", "key=str.lower")],
     ["{f}(['a', 'abcd', 'ab']) == 'abcd'", "{f}(['zz', 'yyy']) == 'yyy'"]),
    (["to_fahrenheit", "c_to_f", "fahrenheit"], "celsius", "return celsius * 9 / 5 + 32",
     [("* 9 / 5", "* 5 / 9"), ("+ 32", "- 32")],
     ["{f}(100) == 212", "{f}(0) == 32"]),
    (["count_above", "above", "how_many_over"], "values, limit",
     "return sum(1 for v in values if v > limit)",
     [("v > limit", "v >= limit"), ("sum(1 for", "sum(v for")],
     ["{f}([1, 5, 9], 5) == 1", "{f}([6, 7], 5) == 2"]),
    (["reverse_words", "backwards", "flip_words"], "text",
     'return " ".join(reversed(text.split()))',
     [("reversed(", "sorted("), ('" ".join', '"".join')],
     ["{f}('a b c') == 'c b a'", "{f}('hi there') == 'there hi'"]),
    (["first_index", "find_first", "position"], "items, target",
     "for i, item in enumerate(items):\n        if item == target:\n            return i\n"
     "    return -1",
     [("return -1", "return 0"), ("item == target", "item != target")],
     ["{f}(['x', 'y'], 'y') == 1", "{f}(['x'], 'q') == -1"]),
    (["percent", "share", "as_percent"], "part, whole", "return round(100 * part / whole, 1)",
     [("100 * part / whole", "100 * whole / part"), (", 1)", ", 0)")],
     ["{f}(1, 4) == 25.0", "{f}(1, 3) == 33.3"]),
    (["last_items", "tail", "take_last"], "items, n", "return items[-n:] if n > 0 else []",
     [("items[-n:]", "items[-n + 1:]"), ("n > 0", "n > 1")],
     ["{f}([1, 2, 3], 2) == [2, 3]", "{f}([1, 2, 3], 1) == [3]", "{f}([1], 0) == []"]),
    (["count_vowels", "vowels", "vowel_count"], "text",
     'return sum(1 for ch in text.lower() if ch in "aeiou")',
     [("text.lower()", "text.upper()"), ('"aeiou"', '"aeio"')],
     ["{f}('Apple') == 2", "{f}('you') == 2", "{f}('xyz') == 0"]),
]  # fmt: skip
_PACKAGES = ["mathkit", "textkit", "listtools", "numutil", "helpers", "toolbox", "pyutils"]
_MODULES = ["core", "funcs", "ops", "util", "basics"]


def _fix_bug(rng: random.Random) -> dict[str, object]:
    names, args, body, bugs, tests = rng.choice(_FUNCTIONS)
    func = rng.choice(names)
    good, bad = rng.choice(bugs)
    package, module = rng.choice(_PACKAGES), rng.choice(_MODULES)
    path = f"{package}/{module}.py"
    test_path = f"tests/test_{module}.py"
    source = f"def {func}({args}):\n    {body.replace(good, bad, 1)}\n"
    asserts = "".join(
        f"    def test_{i}(self):\n        self.assertTrue({t.format(f=func)})\n\n"
        for i, t in enumerate(tests)
    )
    test_text = (
        f"import unittest\n\nfrom {package}.{module} import {func}\n\n\n"
        f"class Test{func.title().replace('_', '')}(unittest.TestCase):\n{asserts}"
        "\nif __name__ == '__main__':\n    unittest.main()\n"
    )
    count = len(tests)
    prompt = (
        f"Your work directory holds a Python package, {package}/ ({path}), and its unit tests "
        f"in {test_path}. A test of `{func}` fails: in {path}, `{func}` has `{bad}` where it "
        f"should have `{good}`. Fix {path} so that all {count} tests pass "
        "(`python3 -m unittest` from the work directory). Do not change anything under tests/."
    )
    checks = f'''
import hashlib
import re
import shlex
import sys


def check_tests_pass(subagent):
    """All {count} unit tests run and pass."""
    done = subagent.run(f"{{shlex.quote(sys.executable)}} -B -m unittest", timeout=20)
    output = done["stdout"] + done["stderr"]
    ran = re.search(r"^Ran (\\d+) tests?", output, re.MULTILINE)
    return done["returncode"] == 0 and ran is not None and int(ran[1]) == {count}
''' + _unchanged_check(test_path, test_text).replace("input_unchanged", "tests_unchanged")
    action = (
        f"def fix_{func}(subagent):\n"
        f"    path = {path!r}\n"
        "    code = subagent.read_file(path)\n"
        f"    subagent.write_file(path, code.replace({bad!r}, {good!r}))\n"
        '    return "fixed"\n'
        f'self.add_action("Fix {func} in {path}", fix_{func})'
    )
    evaluation = (
        "def bug_is_gone(subagent):\n"
        f"    return {bad!r} not in subagent.read_file({path!r})\n"
        f'self.add_evaluation("{path} no longer has the bug", bug_is_gone)'
    )
    return {
        "title": f"Fix {func} in {package}",
        "prompt": prompt,
        "files": {f"{package}/__init__.py": "", path: source, "tests/__init__.py": "",
                  test_path: test_text},
        "checks": checks,
        "orientation": _orientation(
            f"fix `{func}` in {path} so that the tests in {test_path} pass",
            f"{path} and {test_path}",
            "runs the unit tests, so all of them must pass",
            f"read {path}, replace `{bad}` with `{good}`, write it back",
        ),
        "action": action,
        "evaluation": evaluation,
        "script_action": f"# {path}\ndef {func}({args}):\n    {body}\n",
        "script_evaluation": (
            "# the unit tests pass\n"
            "import subprocess\n"
            "import sys\n\n"
            'done = subprocess.run([sys.executable, "-m", "unittest"], capture_output=True, '
            "text=True)\n"
            "print(done.stderr[-1000:])\n"
            'assert done.returncode == 0, "the unit tests fail"\n'
        ),
        "targets": (path, test_path),
    }  # fmt: skip


# -- compute a value from a file -----------------------------------------------------------

_ANSWERS = ["answer.txt", "result.txt", "value.txt", "out.txt"]


def _compute(rng: random.Random) -> dict[str, object]:
    stem, key, numbers, rows = _table(rng)
    data = f"{stem}.csv"
    answer = rng.choice(_ANSWERS)
    column = rng.choice(numbers)
    values = [int(r[column]) for r in rows]
    which = rng.choice(["sum", "max", "min", "count", "distinct", "mean"])
    if which == "count":
        target = rng.choice(sorted({r[key] for r in rows}))
        expected = float(sum(1 for r in rows if r[key] == target))
        asked = f"the number of rows whose {key} is {target}"
        code = f"value = sum(1 for row in rows if row[{key!r}] == {target!r})"
        name = f"count_{target.lower()}"
    elif which == "distinct":
        expected = float(len({r[key] for r in rows}))
        asked = f"the number of different {key} values"
        code = f"value = len({{row[{key!r}] for row in rows}})"
        name = f"count_{key}s"
    elif which == "mean":
        expected = round(sum(values) / len(values), 2)
        asked = f"the mean of the {column} column, rounded to 2 decimals"
        code = f"value = round(sum(float(row[{column!r}]) for row in rows) / len(rows), 2)"
        name = f"mean_{column}"
    else:
        expected = float(
            sum(values) if which == "sum" else max(values) if which == "max" else min(values)
        )
        word = {"sum": "total", "max": "largest", "min": "smallest"}[which]
        asked = f"the {word} {column}" if which != "sum" else f"the total of the {column} column"
        code = f"value = {which}(int(row[{column!r}]) for row in rows)"
        name = f"{word}_{column}"
    columns = [key, *numbers]
    text = _csv(columns, rows)
    prompt = (
        f"Your work directory holds {data}: {len(rows)} rows with the columns "
        f"{', '.join(columns)}. Write {asked} to {answer}, as a number and nothing else. "
        f"Do not change {data}."
    )
    checks = f'''
import hashlib


def check_answer_is_right(subagent):
    """{answer} holds {asked}."""
    try:
        got = float(subagent.read_file({answer!r}).strip())
    except (OSError, ValueError):
        return False
    return abs(got - {expected!r}) <= 0.011
''' + _unchanged_check(data, text)
    action = (
        f"def write_{name}(subagent):\n"
        "    import csv\n"
        f"    rows = list(csv.DictReader(subagent.read_file({data!r}).splitlines()))\n"
        f"    {code}\n"
        f"    subagent.write_file({answer!r}, str(value))\n"
        "    return value\n"
        f'self.add_action("Write {asked} to {answer}", write_{name})'
    )
    evaluation = (
        "def answer_is_a_number(subagent):\n"
        f"    text = subagent.read_file({answer!r}).strip()\n"
        '    return text.replace(".", "", 1).isdigit()\n'
        f'self.add_evaluation("{answer} holds a number", answer_is_a_number)'
    )
    return {
        "title": f"Compute from {data}",
        "prompt": prompt,
        "files": {data: text},
        "checks": checks,
        "orientation": _orientation(
            f"write {asked} to {answer}",
            f"{data} with the columns {', '.join(columns)}; {answer} does not exist yet",
            f"compares {answer} with the right number, so it must hold only the number",
            f"read {data} as CSV rows, compute the value, write it to {answer}",
        ),
        "action": action,
        "evaluation": evaluation,
        "targets": (data, answer),
    }


# -- transform a CSV or JSON file ----------------------------------------------------------


def _transform(rng: random.Random) -> dict[str, object]:
    stem, key, numbers, rows = _table(rng)
    columns = [key, *numbers]
    which = rng.choice(["to_json", "filter", "select", "sort", "from_json", "pluck"])
    column = rng.choice(numbers)
    out_stem = rng.choice(["out", "result", f"{stem}_new", "converted"])
    source = f"{stem}.csv"
    load = f"    rows = list(csv.DictReader(subagent.read_file({source!r}).splitlines()))\n"
    imports = "    import csv\n"
    if which == "to_json":
        out = f"{out_stem}.json"
        asked = (
            f"Write {out}: a JSON list with one object per row of {source}, in order, its "
            "keys the column names and its values the text of the cells"
        )
        expected: object = rows
        imports = "    import csv\n    import json\n"
        body = f"    subagent.write_file({out!r}, json.dumps(rows))\n"
        kind = "json"
    elif which == "from_json":
        source = f"{stem}.json"
        out = f"{out_stem}.csv"
        asked = (
            f"Write {out}: a CSV file with the header {','.join(columns)} and one line per "
            f"object of the JSON list in {source}, in order"
        )
        expected = rows
        imports = "    import csv\n    import io\n    import json\n"
        load = f"    rows = json.loads(subagent.read_file({source!r}))\n"
        body = (
            "    buffer = io.StringIO()\n"
            f"    writer = csv.DictWriter(buffer, {columns!r}, lineterminator='\\n')\n"
            "    writer.writeheader()\n    writer.writerows(rows)\n"
            f"    subagent.write_file({out!r}, buffer.getvalue())\n"
        )
        kind = "csv"
    elif which == "pluck":
        out = f"{out_stem}.txt"
        source = f"{stem}.json"
        asked = f"Write {out}: the {column} of every object in {source}, one per line, in order"
        expected = [r[column] for r in rows]
        imports = "    import json\n"
        load = f"    rows = json.loads(subagent.read_file({source!r}))\n"
        body = f'    subagent.write_file({out!r}, "\\n".join(row[{column!r}] for row in rows))\n'
        kind = "lines"
    else:
        out = f"{out_stem}.csv"
        if which == "filter":
            limit = sorted(int(r[column]) for r in rows)[len(rows) // 2]
            asked = (
                f"Write {out}: the header of {source} and only its rows whose {column} is "
                f"greater than {limit}, in order"
            )
            expected = [r for r in rows if int(r[column]) > limit]
            pick = f"    rows = [row for row in rows if int(row[{column!r}]) > {limit}]\n"
            keep = columns
        elif which == "sort":
            asked = f"Write {out}: the rows of {source} sorted by {column}, largest first"
            expected = sorted(rows, key=lambda r: -int(r[column]))
            pick = f"    rows.sort(key=lambda row: -int(row[{column!r}]))\n"
            keep = columns
        else:
            keep = [key, column]
            asked = f"Write {out}: only the columns {key} and {column} of {source}, in that order"
            expected = [{c: r[c] for c in keep} for r in rows]
            pick = f"    rows = [{{c: row[c] for c in {keep!r}}} for row in rows]\n"
        imports = "    import csv\n    import io\n"
        body = (
            pick + "    buffer = io.StringIO()\n"
            f"    writer = csv.DictWriter(buffer, {keep!r}, lineterminator='\\n')\n"
            "    writer.writeheader()\n    writer.writerows(rows)\n"
            f"    subagent.write_file({out!r}, buffer.getvalue())\n"
        )
        kind = "csv"
    text = json.dumps(rows, indent=1) if source.endswith(".json") else _csv(columns, rows)
    reader = {
        "json": "json.loads(text)",
        "csv": "list(csv.DictReader(text.splitlines()))",
        "lines": "text.strip().splitlines()",
    }[kind]
    checks = f'''
import csv
import hashlib
import json


def check_output_is_right(subagent):
    """{out} holds what was asked, in order."""
    try:
        text = subagent.read_file({out!r})
        return {reader} == {expected!r}
    except (OSError, ValueError):
        return False
''' + _unchanged_check(source, text)
    name = f"write_{out_stem}"
    action = (
        f"def {name}(subagent):\n{imports}{load}{body}    return len(rows)\n"
        f'self.add_action("Write {out} from {source}", {name})'
    )
    evaluation = (
        "def output_exists(subagent):\n"
        f"    return len(subagent.read_file({out!r}).strip()) > 0\n"
        f'self.add_evaluation("{out} was written", output_exists)'
    )
    return {
        "title": f"Write {out} from {source}",
        "prompt": f"Your work directory holds {source}. {asked}. Do not change {source}.",
        "files": {source: text},
        "checks": checks,
        "orientation": _orientation(
            asked[0].lower() + asked[1:],
            f"{source}; {out} does not exist yet",
            f"compares {out} with the rows asked for, in order",
            f"read {source}, build the rows asked for, write {out}",
        ),
        "action": action,
        "evaluation": evaluation,
        "targets": (source, out),
    }


# -- edit a text file (never taught) ---------------------------------------------------------

_SETTINGS = ["port", "host", "workers", "timeout", "level", "mode", "retries", "theme"]
_VALUES = {"port": "8080", "host": "example.org", "workers": "4", "timeout": "30",
           "level": "debug", "mode": "fast", "retries": "5", "theme": "dark"}  # fmt: skip
_WORDS = ["apple", "river", "stone", "cloud", "maple", "ember", "harbor", "violet"]


def _text_edit(rng: random.Random) -> dict[str, object]:
    which = rng.choice(["set", "replace", "delete", "append", "upper"])
    if which == "set":
        path = rng.choice(["settings.cfg", "app.conf", "server.ini"])
        keys = rng.sample(_SETTINGS, 4)
        lines = [f"{k} = {_VALUES[k]}" for k in keys]
        key = rng.choice(keys)
        value = rng.choice(["9000", "localhost", "12", "quiet", "slow", "light", "2"])
        old, new = f"{key} = {_VALUES[key]}", f"{key} = {value}"
        asked = f"In {path}, change the value of {key} to {value}; keep every other line"
    else:
        path = rng.choice(["notes.md", "list.txt", "draft.txt", "todo.txt"])
        lines = [f"{w} {rng.choice(_WORDS)}" for w in rng.sample(_WORDS, 5)]
        word = rng.choice(lines[rng.randrange(len(lines))].split())
        if which == "replace":
            other = rng.choice([w for w in ["tiger", "lemon", "comet", "north"] if w != word])
            old, new = word, other
            asked = f"In {path}, replace every `{word}` with `{other}`"
        elif which == "delete":
            old, new = word, ""
            asked = f"Delete from {path} every line that contains `{word}`"
        elif which == "append":
            old, new = "", rng.choice(["done", "the end", "checked"])
            asked = f"Add the line `{new}` at the end of {path}"
        else:
            old, new = "", ""
            asked = f"Rewrite {path} with every line in upper case"
    text = "\n".join(lines) + "\n"
    if which in ("set", "replace"):
        expected = text.replace(old, new)
        step = f"text.replace({old!r}, {new!r})"
    elif which == "delete":
        expected = "".join(line + "\n" for line in lines if old not in line)
        step = f'"".join(line for line in text.splitlines(True) if {old!r} not in line)'
    elif which == "append":
        expected = text + new + "\n"
        step = f"text + {new + chr(10)!r}"
    else:
        expected = text.upper()
        step = "text.upper()"
    checks = f'''
def check_file_is_right(subagent):
    """{path} holds what was asked."""
    try:
        return subagent.read_file({path!r}).rstrip("\\n") == {expected.rstrip(chr(10))!r}
    except (OSError, ValueError):
        return False
'''
    action = (
        "def edit_file(subagent):\n"
        f"    text = subagent.read_file({path!r})\n"
        f"    subagent.write_file({path!r}, {step})\n"
        '    return "edited"\n'
        f'self.add_action("Edit {path}", edit_file)'
    )
    evaluation = (
        "def file_changed(subagent):\n"
        f"    return subagent.read_file({path!r}) != {text!r}\n"
        f'self.add_evaluation("{path} was changed", file_changed)'
    )
    return {
        "title": {
            "set": f"Set a value in {path}",
            "replace": f"Replace a word in {path}",
            "delete": f"Delete lines from {path}",
            "append": f"Add a line to {path}",
            "upper": f"Upper-case {path}",
        }[which],
        "prompt": f"Your work directory holds {path}. {asked}.",
        "files": {path: text},
        "checks": checks,
        "orientation": _orientation(
            asked[0].lower() + asked[1:],
            f"{path} only",
            f"compares {path} with the text asked for",
            f"read {path}, change the text, write it back",
        ),
        "action": action,
        "evaluation": evaluation,
        "targets": (path,),
    }


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("fix_bug", "Fix a bug in a small package so its tests pass", _fix_bug),
        Family("compute", "Compute a value from a CSV file and write it", _compute),
        Family("transform", "Transform a CSV or JSON file as asked", _transform),
        Family("text_edit", "Edit a text file as asked (never taught)", _text_edit, False),
    )
}


def family_names(*, taught: bool | None = None) -> list[str]:
    return [n for n, f in FAMILIES.items() if taught is None or f.taught == taught]


def variant(family: str, seed: int) -> Variant:
    """The variant `seed` of `family`: the same every time."""
    if family not in FAMILIES:
        known = ", ".join(FAMILIES)
        raise TaskError(f"{FAMILY_PREFIX}{family}: no such task family (families: {known})")
    made = FAMILIES[family].make(random.Random(f"{family}:{seed}"))
    source = f"{FAMILY_PREFIX}{family}:{seed}"
    checks, names = register_checks(Path(source), str(made["checks"]), lambda line: line)
    task = Task(
        name=f"{family}:{seed}",
        title=str(made["title"]),
        prompt=str(made["prompt"]),
        files=dict(made["files"]),  # type: ignore[call-overload]
        checks=checks,
        check_names=names,
        max_ticks=10,
        source=source,
    )
    return Variant(
        family,
        seed,
        task,
        str(made["orientation"]),
        str(made["action"]),
        str(made["evaluation"]),
        tuple(made["targets"]),  # type: ignore[arg-type]
        made.get("script_action"),  # type: ignore[arg-type]
        made.get("script_evaluation"),  # type: ignore[arg-type]
    )


def parse_name(name: str) -> Variant | None:
    """The variant a task named `name` ("fix_bug:3", as `variant` names its task) is, or
    None when the name is no family variant's."""
    family, colon, seed = name.removeprefix(FAMILY_PREFIX).partition(":")
    if not colon or family not in FAMILIES or not seed.isdigit():
        return None
    return variant(family, int(seed))


def load_family_task(ref: str) -> Task:
    """`family:NAME:SEED`, or `family:NAME` for a variant at random."""
    parts = ref.removeprefix(FAMILY_PREFIX).split(":")
    if len(parts) > 2 or not parts[0]:
        raise TaskError(f"{ref}: write family:NAME or family:NAME:SEED")
    if len(parts) == 1:
        return variant(parts[0], random.randrange(VARIANTS)).task
    try:
        seed = int(parts[1])
    except ValueError:
        raise TaskError(f"{ref}: the seed must be a whole number, not {parts[1]!r}") from None
    if seed < 0:
        raise TaskError(f"{ref}: the seed must be 0 or more")
    return variant(parts[0], seed).task


def split(family: str) -> tuple[list[int], list[int]]:
    """(teaching seeds, held-out seeds) of `family`: half of `0..VARIANTS-1` each, fixed."""
    seeds = list(range(VARIANTS))
    random.Random(f"split:{family}").shuffle(seeds)
    half = VARIANTS // 2
    return sorted(seeds[:half]), sorted(seeds[half:])


def parse_seeds(text: str) -> list[int]:
    """ "0-29" or "3,5,8" or "7" -> seeds; a ValueError says what is wrong."""
    seeds: list[int] = []
    for part in str(text).split(","):
        low, dash, high = part.strip().partition("-")
        if not low.strip().isdigit() or (dash and not high.strip().isdigit()):
            raise ValueError(f"seeds are whole numbers or ranges such as 0-29, not {text!r}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"the range {part.strip()} ends before it starts")
        if last - first >= 10_000:
            raise ValueError(f"the range {part.strip()} is too long (at most 10,000 seeds)")
        seeds.extend(range(first, last + 1))
    return seeds
