"""The batch tasks file (agents.batch.read_tasks) and how a task is named (spec_name):
fast, no model."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from agents.batch import SPEC_KEYS, TasksFileError, read_tasks, spec_name

TASK_TOML = """\
title = "Answer"
prompt = "Write the answer to answer.txt."
[files]
"question.txt" = "What is six times seven?"
"""


def write(path: Path, *lines: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_specs_in_order_with_comments_and_blank_lines_skipped(tmp_path: Path) -> None:
    tasks = write(
        tmp_path / "tasks.jsonl",
        "# the suite",
        '{"task": "vigenere", "id": "v1", "max_ticks": 3}',
        "",
        "   ",
        '   # an indented comment: {"prompt": "not a task"}',
        '{"prompt": "Say hi.", "message": "be brief"}',
    )
    specs, digest = read_tasks(tasks)
    assert specs == [
        {"task": "vigenere", "id": "v1", "max_ticks": 3},
        {"prompt": "Say hi.", "message": "be brief"},
    ]
    assert digest == hashlib.sha256(tasks.read_bytes()).hexdigest()


def test_a_str_path_works_too(tmp_path: Path) -> None:
    tasks = write(tmp_path / "tasks.jsonl", '{"prompt": "Say hi."}')
    assert read_tasks(str(tasks)) == read_tasks(tasks)


def test_a_relative_task_file_is_made_absolute_from_the_tasks_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = tmp_path / "suite"
    write(suite / "answer.toml", TASK_TOML)
    write(suite / "more" / "deeper.toml", TASK_TOML)
    tasks = write(
        suite / "tasks.jsonl", '{"task": "answer.toml"}', '{"task": "more/../more/deeper.toml"}'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    specs, _ = read_tasks(Path("..") / "suite" / "tasks.jsonl")
    assert [s["task"] for s in specs] == [
        str((suite / "answer.toml").resolve()),
        str((suite / "more" / "deeper.toml").resolve()),
    ]
    assert all(Path(s["task"]).is_absolute() for s in specs)
    assert read_tasks(tasks)[0] == specs


def test_an_absolute_task_file_and_a_shipped_name_are_kept(tmp_path: Path) -> None:
    task = write(tmp_path / "tasks" / "answer.toml", TASK_TOML)
    tasks = write(tmp_path / "tasks.jsonl", f'{{"task": "{task}"}}', '{"task": "vigenere"}')
    specs, _ = read_tasks(tasks)
    assert specs == [{"task": str(task)}, {"task": "vigenere"}]


def test_a_task_file_is_not_looked_up_from_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task files are relative to the tasks file: one that only exists relative to the
    working folder is refused (stored as it is, it would not be found by a worker or a
    resume started elsewhere)."""
    write(tmp_path / "answer.toml", TASK_TOML)
    tasks = write(tmp_path / "suite" / "tasks.jsonl", '{"task": "answer.toml"}')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TasksFileError, match=r"line 1: .*answer\.toml: task file does not exist"):
        read_tasks(tasks)


def test_the_hash_changes_with_the_content(tmp_path: Path) -> None:
    first = write(tmp_path / "a.jsonl", '{"prompt": "Say hi."}')
    same = write(tmp_path / "b.jsonl", '{"prompt": "Say hi."}')
    with_comment = write(tmp_path / "c.jsonl", "# a comment", '{"prompt": "Say hi."}')
    other = write(tmp_path / "d.jsonl", '{"prompt": "Say bye."}')
    digests = [read_tasks(p)[1] for p in (first, same, with_comment, other)]
    assert digests[0] == digests[1]  # the content, not the name
    assert len({digests[0], digests[2], digests[3]}) == 3
    assert all(len(d) == 64 for d in digests)


def test_the_hash_does_not_follow_a_task_files_content(tmp_path: Path) -> None:
    """The hash is the tasks file's own bytes: editing a task file it names does not
    change it (the batches of that file still compare)."""
    task = write(tmp_path / "answer.toml", TASK_TOML)
    tasks = write(tmp_path / "tasks.jsonl", '{"task": "answer.toml"}')
    before = read_tasks(tasks)[1]
    task.write_text(TASK_TOML.replace("six times seven", "two plus two"))
    assert read_tasks(tasks)[1] == before


# -- errors ----------------------------------------------------------------------------------

KNOWN = ", ".join(SPEC_KEYS)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not JSON: Expecting value (column 1)"),
        ('{"prompt": "hi"', "not JSON: Expecting ',' delimiter (column 16)"),
        ('"vigenere"', 'expected an object such as {"task": "vigenere"}'),
        ("[1, 2]", 'expected an object such as {"task": "vigenere"}'),
        ("null", 'expected an object such as {"task": "vigenere"}'),
        ('{"task": "vigenere", "tick": 3}', f"unknown key 'tick' (known: {KNOWN})"),
        ('{"b": 1, "a": 2, "prompt": "x"}', f"unknown key 'a' (known: {KNOWN})"),
        ('{"task": "vigenere", "prompt": "hi"}', 'give either "task" or "prompt"'),
        ('{"id": "lonely"}', 'give either "task" or "prompt"'),
        ("{}", 'give either "task" or "prompt"'),
        ('{"task": 3}', '"task" must be a string'),
        ('{"prompt": ["hi"]}', '"prompt" must be a string'),
        ('{"prompt": "hi", "id": 7}', '"id" must be a string'),
        ('{"prompt": "hi", "message": null}', '"message" must be a string'),
        ('{"prompt": "hi", "max_ticks": 0}', '"max_ticks" must be a whole number from 1'),
        ('{"prompt": "hi", "max_ticks": -2}', '"max_ticks" must be a whole number from 1'),
        ('{"prompt": "hi", "max_ticks": 1.5}', '"max_ticks" must be a whole number from 1'),
        ('{"prompt": "hi", "max_ticks": "3"}', '"max_ticks" must be a whole number from 1'),
        ('{"prompt": "hi", "max_ticks": true}', '"max_ticks" must be a whole number from 1'),
        # a task file is looked for beside the tasks file, and named in full
        ('{"task": "missing.toml"}', "<folder>/missing.toml: task file does not exist"),
    ],
)
def test_each_bad_line_names_the_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    tasks = write(tmp_path / "tasks.jsonl", "# header", '{"prompt": "fine"}', "", line)
    with pytest.raises(TasksFileError) as caught:
        read_tasks(tasks)
    message = message.replace("<folder>", str(tmp_path.resolve()))
    assert str(caught.value) == f"{tasks} line 4: {message}"


def test_a_null_max_ticks_is_no_limit(tmp_path: Path) -> None:
    tasks = write(tmp_path / "tasks.jsonl", '{"prompt": "hi", "max_ticks": null}')
    assert read_tasks(tasks)[0] == [{"prompt": "hi", "max_ticks": None}]


def test_an_unknown_shipped_task(tmp_path: Path) -> None:
    tasks = write(tmp_path / "tasks.jsonl", '{"task": "nope"}')
    with pytest.raises(TasksFileError) as caught:
        read_tasks(tasks)
    assert str(caught.value).startswith(f"{tasks} line 1: nope: no such task (built-in tasks: ")


def test_a_task_file_with_a_toml_syntax_error(tmp_path: Path) -> None:
    write(tmp_path / "broken.toml", 'title = "Broken"', "prompt = ")
    tasks = write(tmp_path / "tasks.jsonl", '{"task": "broken.toml"}')
    with pytest.raises(TasksFileError) as caught:
        read_tasks(tasks)
    broken = (tmp_path / "broken.toml").resolve()
    assert str(caught.value) == (
        f"{tasks} line 1: {broken}, line 2, column 10: TOML syntax error: Invalid value"
    )


def test_the_first_bad_line_is_the_one_named(tmp_path: Path) -> None:
    tasks = write(tmp_path / "tasks.jsonl", '{"prompt": "ok"}', "{", "also bad")
    with pytest.raises(TasksFileError, match=r"tasks\.jsonl line 2: not JSON"):
        read_tasks(tasks)


def test_no_tasks(tmp_path: Path) -> None:
    for content in ("", "\n\n", "# only\n  # comments\n"):
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text(content)
        with pytest.raises(TasksFileError) as caught:
            read_tasks(tasks)
        assert str(caught.value) == (
            f"{tasks}: no tasks (one JSON object per line, e.g. "
            '{"task": "vigenere"} or {"prompt": "..."})'
        )


def test_a_missing_tasks_file(tmp_path: Path) -> None:
    with pytest.raises(TasksFileError) as caught:
        read_tasks(tmp_path / "nowhere.jsonl")
    assert str(caught.value) == f"{tmp_path / 'nowhere.jsonl'}: No such file or directory"


def test_a_folder_is_not_a_tasks_file(tmp_path: Path) -> None:
    with pytest.raises(TasksFileError) as caught:
        read_tasks(tmp_path)
    assert str(caught.value) == f"{tmp_path}: is a folder; a tasks file must be a regular file"


def test_a_tasks_file_that_is_not_utf8(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(TasksFileError) as caught:
        read_tasks(tasks)
    assert str(caught.value) == f"{tasks}: not UTF-8 text (byte 32)"


def test_a_tasks_file_error_is_a_value_error() -> None:
    assert issubclass(TasksFileError, ValueError)


# -- spec_name -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ({"task": "vigenere", "id": "v1"}, "v1"),
        ({"prompt": "Say hi.", "id": "greet"}, "greet"),
        ({"task": "vigenere"}, "vigenere"),
        ({"task": "/abs/suite/cipher.toml"}, "cipher"),
        ({"task": "/abs/suite/generated.py"}, "generated"),
        ({"task": "vigenere", "id": ""}, "vigenere"),  # an empty id is no id
        ({"prompt": "Say hi."}, "Say hi."),
        ({"prompt": "  Say\n\n hi\tthere  "}, "Say hi there"),
        ({"prompt": "x" * 40}, "x" * 40),
        ({"prompt": "x" * 41}, "x" * 39 + "…"),
        ({"prompt": "word " * 20}, ("word " * 8).strip()[:39] + "…"),
        ({"prompt": ""}, ""),
    ],
)
def test_spec_name(spec: dict[str, object], name: str) -> None:
    assert spec_name(spec) == name
    assert len(spec_name(spec)) <= 40 or "id" in spec
