"""`agent-console batch`, run as a real subprocess, without a model: every way it refuses
a tasks file or a flag (one error line naming the file and line, exit 2), and `--list` /
`--show` reporting batches written through the store API."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app import exit_codes
from storage import BatchStatus, BatchTaskStatus, TraceStore
from tests.app.test_cli import _run
from tests.conftest import PG_URL_ENV, REQUIRE_PG_ENV

pytestmark = pytest.mark.timeout(120)

PREFIX = "agent-console batch: error: "
#: read before tests/app/conftest.py's `isolated` hides every AGENT_CONSOLE_* variable
_PG_ENV = {name: os.environ.get(name, "") for name in (PG_URL_ENV, REQUIRE_PG_ENV)}
GOOD_LINE = '{"prompt": "Say hello."}'


def _batch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`agent-console --db TMP/traces.db batch ARGS` in tmp_path."""
    return _run(tmp_path, "--db", str(tmp_path / "traces.db"), "batch", *args)


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single `agent-console batch: error: ...` line a refusal prints (without its
    prefix), and nothing else."""
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(PREFIX), lines[0]
    return lines[0][len(PREFIX) :]


def _tasks(tmp_path: Path, *lines: str, name: str = "tasks.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _flat(text: str) -> list[str]:
    """Each line with its runs of spaces collapsed (the columns are padded)."""
    return [" ".join(line.split()) for line in text.splitlines()]


# -- a bad tasks file: exit 2, one line naming the file and line ---------------------------


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("not json", "not JSON: Expecting value (column 1)"),
        ('{"task": "vigenere",}', "not JSON: "),
        ('["vigenere"]', 'expected an object such as {"task": "vigenere"}'),
        (
            '{"task": "vigenere", "tick": 3}',
            "unknown key 'tick' (known: task, family, seeds, prompt, id, message, max_ticks)",
        ),
        ('{"task": "vigenere", "prompt": "hi"}', 'give either "task" or "prompt"'),
        ('{"id": "lonely"}', 'give either "task" or "prompt"'),
        ('{"prompt": 42}', '"prompt" must be a string'),
        ('{"prompt": "hi", "id": 7}', '"id" must be a string'),
        ('{"prompt": "hi", "max_ticks": 0}', '"max_ticks" must be a whole number from 1'),
        ('{"prompt": "hi", "max_ticks": -1}', '"max_ticks" must be a whole number from 1'),
        ('{"prompt": "hi", "max_ticks": 2.5}', '"max_ticks" must be a whole number from 1'),
        ('{"prompt": "hi", "max_ticks": true}', '"max_ticks" must be a whole number from 1'),
        ('{"task": "missing.toml"}', "missing.toml: task file does not exist"),
        (
            '{"task": "no-such-shipped-task"}',
            "no-such-shipped-task: no such task (built-in tasks: ",
        ),
    ],
    ids=[
        "not-json",
        "trailing-comma",
        "not-an-object",
        "unknown-key",
        "task-and-prompt",
        "neither",
        "prompt-not-a-string",
        "id-not-a-string",
        "max-ticks-0",
        "max-ticks-negative",
        "max-ticks-float",
        "max-ticks-bool",
        "task-file-missing",
        "unknown-task-name",
    ],
)
def test_a_bad_line_is_refused_with_its_file_and_line(
    tmp_path: Path, line: str, problem: str
) -> None:
    tasks = _tasks(tmp_path, "# two good tasks, then a bad one", GOOD_LINE, "", GOOD_LINE, line)
    result = _batch(tmp_path, tasks.name)
    assert result.returncode == exit_codes.USAGE
    message = _one_error_line(result)
    assert message.startswith("tasks.jsonl line 5: "), message
    assert problem in message
    assert not (tmp_path / "traces.db").exists()  # refused before the store is opened


def test_a_task_file_with_a_toml_syntax_error(tmp_path: Path) -> None:
    (tmp_path / "broken.toml").write_text('title = "Broken"\nprompt = \n')
    tasks = _tasks(tmp_path, GOOD_LINE, '{"task": "broken.toml"}')
    result = _batch(tmp_path, tasks.name)
    assert result.returncode == exit_codes.USAGE
    message = _one_error_line(result)
    assert message.startswith("tasks.jsonl line 2: "), message
    assert "broken.toml" in message and "TOML syntax error" in message


def test_a_task_file_is_found_next_to_the_tasks_file(tmp_path: Path) -> None:
    """Relative to the tasks file, not to the working folder: run from elsewhere, the
    broken task file in the tasks file's folder is still the one named."""
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "broken.toml").write_text("prompt = [\n")
    tasks = _tasks(folder, '{"task": "broken.toml"}')
    result = _batch(tmp_path, str(tasks.relative_to(tmp_path)))
    assert result.returncode == exit_codes.USAGE
    message = _one_error_line(result)
    assert message.startswith("suite/tasks.jsonl line 1: "), message
    assert str((folder / "broken.toml").resolve()) in message


def test_an_empty_tasks_file(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path, "# nothing but a comment", "", "   ")
    result = _batch(tmp_path, tasks.name)
    assert result.returncode == exit_codes.USAGE
    assert _one_error_line(result).startswith("tasks.jsonl: no tasks (one JSON object per line")


def test_a_missing_tasks_file(tmp_path: Path) -> None:
    result = _batch(tmp_path, "nowhere.jsonl")
    assert result.returncode == exit_codes.USAGE
    assert _one_error_line(result) == "nowhere.jsonl: No such file or directory"


def test_a_tasks_file_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_bytes(b'{"prompt": "caf\xe9"}\n')
    result = _batch(tmp_path, "tasks.jsonl")
    assert result.returncode == exit_codes.USAGE
    assert _one_error_line(result) == "tasks.jsonl: not UTF-8 text (byte 15)"


# -- bad usage: exit 2 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "got"),
    [
        ((), "nothing"),
        (("tasks.jsonl", "--resume", "1"), "TASKS.jsonl and --resume"),
        (("--list", "--show", "1"), "--list and --show"),
        (("tasks.jsonl", "--list"), "TASKS.jsonl and --list"),
        (("tasks.jsonl", "--suite", "humaneval:0-1"), "TASKS.jsonl and --suite"),
    ],
    ids=["nothing", "tasks-and-resume", "list-and-show", "tasks-and-list", "tasks-and-suite"],
)
def test_exactly_one_of_tasks_resume_list_show(
    tmp_path: Path, args: tuple[str, ...], got: str
) -> None:
    _tasks(tmp_path, GOOD_LINE)
    result = _batch(tmp_path, *args)
    assert result.returncode == exit_codes.USAGE
    assert _one_error_line(result) == (
        f"give one of TASKS.jsonl, --suite SUITE, --resume ID, --list or --show ID (got {got})"
    )
    assert not (tmp_path / "traces.db").exists()


@pytest.mark.parametrize("workers", ["0", "-3"])
def test_workers_must_be_at_least_one(tmp_path: Path, workers: str) -> None:
    tasks = _tasks(tmp_path, GOOD_LINE)
    result = _batch(tmp_path, tasks.name, "--workers", workers)
    assert result.returncode == exit_codes.USAGE
    assert _one_error_line(result) == "--workers must be at least 1"


def test_workers_must_be_a_number(tmp_path: Path) -> None:
    result = _batch(tmp_path, "--list", "--workers", "many")
    assert result.returncode == exit_codes.USAGE
    assert "Traceback" not in result.stderr
    assert "--workers: invalid int value: 'many'" in result.stderr


def test_an_unknown_approval_is_refused(tmp_path: Path) -> None:
    result = _batch(tmp_path, "--list", "--approval", "ask")
    assert result.returncode == exit_codes.USAGE
    assert "Traceback" not in result.stderr
    assert "--approval: invalid choice: 'ask'" in result.stderr


def test_resume_of_a_batch_that_does_not_exist(tmp_path: Path) -> None:
    result = _batch(tmp_path, "--resume", "99")
    assert result.returncode == exit_codes.USAGE
    assert _one_error_line(result) == "--resume 99: no such batch"


def test_resume_of_a_completed_batch(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "traces.db") as store:
        batch = _make_batch(store, [({"prompt": "one"}, _result(1, 1), BatchTaskStatus.COMPLETED)])
        store.set_batch_status(batch.id, BatchStatus.COMPLETED)
    result = _batch(tmp_path, "--resume", str(batch.id))
    assert result.returncode == exit_codes.USAGE
    assert _one_error_line(result) == f"batch {batch.id} is completed: nothing to resume"


def test_ray_needs_a_postgresql_store(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path, GOOD_LINE)
    result = _batch(tmp_path, tasks.name, "--ray", "auto")
    assert result.returncode == exit_codes.USAGE
    assert _one_error_line(result) == (
        "--ray needs a store every machine can write to: a PostgreSQL URL "
        "(--db postgresql+psycopg://USER:PASSWORD@HOST/DB)"
    )
    with TraceStore(tmp_path / "traces.db") as store:
        assert store.list_batches() == []  # refused before any batch is stored


@pytest.fixture
def pg_url_here(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> str:
    """The `pg_url` fixture, given back the variables `isolated` hid."""
    for name, value in _PG_ENV.items():
        if value:
            monkeypatch.setenv(name, value)
    return str(request.getfixturevalue("pg_url"))


@pytest.mark.postgres
def test_ray_needs_a_model_server(tmp_path: Path, pg_url_here: str) -> None:
    pg_url = pg_url_here
    tasks = _tasks(tmp_path, GOOD_LINE)
    result = _run(
        tmp_path, "--db", pg_url, "--backend", "transformers", "batch", tasks.name, "--ray", "auto"
    )
    assert result.returncode == exit_codes.USAGE
    assert _one_error_line(result) == (
        "--ray needs a model server the workers share: start one with `agent-console "
        "serve` and pass --base-url"
    )
    with TraceStore(pg_url) as store:
        assert store.list_batches() == []


def test_a_store_that_cannot_be_opened_exits_5(tmp_path: Path) -> None:
    (tmp_path / "not-a-folder").write_text("")
    result = _run(tmp_path, "--db", str(tmp_path / "not-a-folder" / "traces.db"), "batch", "--list")
    assert result.returncode == exit_codes.STORE
    assert _one_error_line(result)


# -- --list and --show ---------------------------------------------------------------------


def test_list_on_an_empty_store(tmp_path: Path) -> None:
    result = _batch(tmp_path, "--list")
    assert result.returncode == exit_codes.OK, result.stderr
    assert result.stdout == "no batches yet: `agent-console batch TASKS.jsonl`\n"
    assert result.stderr == ""


def test_show_of_a_batch_that_does_not_exist(tmp_path: Path) -> None:
    result = _batch(tmp_path, "--show", "5")
    assert result.returncode == exit_codes.USAGE
    assert _one_error_line(result) == "--show 5: no such batch"


def _result(passed: int, total: int, reward: float = 0.25, tokens: int = 30) -> dict[str, Any]:
    return {
        "ticks": 1,
        "tokens": tokens,
        "checks_passed": passed,
        "checks_total": total,
        "reward": reward,
        "seconds": 1.0,
    }


def _make_batch(
    store: TraceStore,
    tasks: list[tuple[dict[str, Any], dict[str, Any] | None, BatchTaskStatus | None]],
    *,
    name: str = "tasks.jsonl",
    source_hash: str = "hash-1",
    config: dict[str, Any] | None = None,
    error: str | None = None,
):
    """A batch of `tasks` (spec, result, status): each with a status is claimed, given a
    session and finished with its result (`error` on the failed ones); the rest stay
    pending."""
    batch = store.create_batch(
        [spec for spec, _, _ in tasks],
        name=name,
        source=f"/somewhere/{name}",
        source_hash=source_hash,
        config=config or {},
    )
    for spec, result, status in tasks:
        if status is None:
            continue
        claimed = store.claim_batch_task(batch.id, "test:1:0")
        assert claimed is not None and claimed.spec == spec
        session = store.create_session(str(spec.get("prompt", "")))
        store.set_batch_task_session(claimed.id, session.id)
        why = error if status is BatchTaskStatus.FAILED else None
        store.finish_batch_task(claimed.id, status, result=result, error=why)
    return batch


LONG_PROMPT = "Write   a poem about the sea,\nthe wind and the gulls, in exactly twelve lines."


def test_list_and_show_a_batch(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "traces.db") as store:
        batch = _make_batch(
            store,
            [
                (
                    {"task": "vigenere"},
                    _result(2, 2, reward=0.5, tokens=30),
                    BatchTaskStatus.COMPLETED,
                ),
                (
                    {"prompt": "Say hi.", "id": "greet"},
                    _result(1, 2, reward=0.25, tokens=20),
                    BatchTaskStatus.FAILED,
                ),
                (
                    {"prompt": LONG_PROMPT},
                    _result(0, 0, reward=0.0, tokens=5),
                    BatchTaskStatus.TRUNCATED,
                ),
                ({"task": "/abs/tasks/cipher.toml"}, None, None),
            ],
            error="no progress",
        )
        sessions = [t.session_id for t in store.batch_tasks(batch.id)]

    listed = _batch(tmp_path, "--list")
    assert listed.returncode == exit_codes.OK, listed.stderr
    assert listed.stderr == ""
    summary = (
        "1 completed, 1 failed, 1 truncated, 1 left; 75% of checks passed, 1/2 solved (95% CI 9-91%); "
        "mean reward 0.250; 55 tokens"
    )
    assert _flat(listed.stdout) == [f"{batch.id} running tasks.jsonl base {summary}"]

    shown = _batch(tmp_path, "--show", str(batch.id))
    assert shown.returncode == exit_codes.OK, shown.stderr
    assert shown.stderr == ""
    poem = " ".join(LONG_PROMPT.split())[:39] + "…"
    assert _flat(shown.stdout) == [
        f"1 vigenere completed session {sessions[0]} checks 2/2 reward 0.5 tokens 30",
        f"2 greet failed session {sessions[1]} checks 1/2 reward 0.25 tokens 20 (no progress)",
        f"3 {poem} truncated session {sessions[2]} checks - reward 0.0 tokens 5",
        "4 cipher pending session - checks - reward - tokens 0",
        f"batch {batch.id} running: {summary}",
    ]


def test_show_a_batch_with_no_checks_and_nothing_run(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "traces.db") as store:
        batch = _make_batch(store, [({"prompt": "one"}, None, None)])
        store.set_batch_status(batch.id, BatchStatus.ABORTED)
    shown = _batch(tmp_path, "--show", str(batch.id))
    assert shown.returncode == exit_codes.OK, shown.stderr
    assert _flat(shown.stdout) == [
        "1 one pending session - checks - reward - tokens 0",
        f"batch {batch.id} aborted: 0 completed, 0 failed, 0 truncated, 1 left; no checks; "
        "mean reward -; 0 tokens",
    ]


def test_show_compares_the_adapters_of_the_same_tasks_file(tmp_path: Path) -> None:
    solved = ({"task": "vigenere"}, _result(2, 2, reward=0.5, tokens=10), BatchTaskStatus.COMPLETED)
    half = ({"prompt": "Say hi."}, _result(1, 2, reward=0.25, tokens=10), BatchTaskStatus.FAILED)
    unsolved = ({"prompt": "Say hi."}, _result(0, 2, reward=0.0, tokens=10), BatchTaskStatus.FAILED)
    with TraceStore(tmp_path / "traces.db") as store:
        # older base batch: superseded by the newer completed one
        old_base = _make_batch(store, [unsolved, unsolved])
        store.set_batch_status(old_base.id, BatchStatus.COMPLETED)
        base = _make_batch(store, [solved, unsolved])
        store.set_batch_status(base.id, BatchStatus.COMPLETED)
        # a newer base batch that was stopped: not a finished result, left out
        stopped = _make_batch(store, [solved, (half[0], None, None)])
        store.set_batch_status(stopped.id, BatchStatus.ABORTED)
        # another tasks file: never compared
        other = _make_batch(store, [solved, solved], source_hash="hash-2")
        store.set_batch_status(other.id, BatchStatus.COMPLETED)
        tuned = _make_batch(store, [solved, half], config={"adapter": "a1"})
        store.set_batch_status(tuned.id, BatchStatus.COMPLETED)

    shown = _batch(tmp_path, "--show", str(tuned.id))
    assert shown.returncode == exit_codes.OK, shown.stderr
    lines = _flat(shown.stdout)
    tuned_summary = (
        "1 completed, 1 failed, 0 truncated; 75% of checks passed, 1/2 solved (95% CI 9-91%); "
        "mean reward 0.375; 20 tokens"
    )
    base_summary = (
        "1 completed, 1 failed, 0 truncated; 50% of checks passed, 1/2 solved (95% CI 9-91%); "
        "mean reward 0.250; 20 tokens"
    )
    assert lines[2:] == [
        f"batch {tuned.id} completed: {tuned_summary}",
        "by adapter, latest batch of the same tasks:",
        f"base batch {base.id} {base_summary}",
        f"a1 batch {tuned.id} {tuned_summary}",
    ]

    # the base batch shown: compared with the adapter's batch the same way
    shown = _batch(tmp_path, "--show", str(base.id))
    assert shown.returncode == exit_codes.OK, shown.stderr
    assert _flat(shown.stdout)[-2:] == [
        f"base batch {base.id} {base_summary}",
        f"a1 batch {tuned.id} {tuned_summary}",
    ]

    # a batch of a file run only once: no comparison
    shown = _batch(tmp_path, "--show", str(other.id))
    assert shown.returncode == exit_codes.OK, shown.stderr
    assert "by adapter" not in shown.stdout

    listed = _batch(tmp_path, "--list")
    assert listed.returncode == exit_codes.OK, listed.stderr
    rows = [line.split()[:4] for line in _flat(listed.stdout)]
    assert rows == [
        [str(tuned.id), "completed", "tasks.jsonl", "a1"],
        [str(other.id), "completed", "tasks.jsonl", "base"],
        [str(stopped.id), "aborted", "tasks.jsonl", "base"],
        [str(base.id), "completed", "tasks.jsonl", "base"],
        [str(old_base.id), "completed", "tasks.jsonl", "base"],
    ]


def test_list_does_not_need_a_valid_tasks_file_nor_a_model(tmp_path: Path) -> None:
    """--list reads the store only: a backend setting that could not load a model is fine."""
    with TraceStore(tmp_path / "traces.db") as store:
        _make_batch(store, [({"prompt": "one"}, None, None)], config={"adapter": None})
    result = _run(
        tmp_path, "--db", str(tmp_path / "traces.db"), "--backend", "none", "batch", "--list"
    )
    assert result.returncode == exit_codes.OK, result.stderr
    assert _flat(result.stdout)[0].split()[:4] == ["1", "running", "tasks.jsonl", "base"]
