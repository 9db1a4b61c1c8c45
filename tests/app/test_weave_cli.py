"""`agent-console import weave PATH...` and `agent-console export weave SESSION --out DIR`,
run as the installed script in a subprocess against a real SQLite store: a folder with good
and malformed traces, importing twice, exporting back to the same JSON, and every refusal
ending in one line and exit 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app import exit_codes
from storage import Author, NodeStatus, TraceStore
from tests.app.test_cli import _run

pytestmark = pytest.mark.timeout(120)

#: weave-agent's current format: "body" everywhere, an action with its outcome and the
#: candidate it beat, an outcome block's table with one evaluation that raised.
CURRENT: list[dict[str, Any]] = [
    {"type": "genesis", "body": "# the bootstrap\nprint('hi')", "index": 0,
     "timestamp": 1737530000.5, "q": "", "score": 2},
    {"type": "task-reminder", "body": "Write hello.txt", "index": 1,
     "timestamp": 1737530001.25, "q": "", "score": 2},
    {"type": "observation", "title": "Files", "body": "hello.txt missing", "index": 2,
     "timestamp": 1737530002.0, "q": "", "score": 2},
    {"type": "orientation", "body": "I should write the file.", "index": 3,
     "timestamp": 1737530003.0, "q": "Is this orientation good?", "score": 1.5,
     "metadata": {"block_index": 3, "working_directory": "/app"}},
    {"type": "action",
     "body": "def write(subagent):\n    open('hello.txt','w').write('hi')\n    return True\n\n"
     "self.add_action('Write the file', write)",
     "index": 4, "timestamp": 1737530004.0, "q": "Is this action good?", "score": 2.2,
     "outcome": {"id": 4, "body": "...same body...", "error": None, "result": True},
     "candidates": [["def other(subagent):\n    return False\n\nself.add_action('Other', other)",
                     -1.0]]},
    {"type": "outcome", "index": 5, "timestamp": 1737530005.0,
     "table": [["Write the file", True], ["hello.txt exists", True], ["greeting right", "ERROR"]],
     "q": "", "score": 2},
]  # fmt: skip

#: An older trace: "program", "task", "content" and "message" instead of "body".
LEGACY: list[dict[str, Any]] = [
    {"type": "genesis", "program": "print('old')", "index": 0, "timestamp": 1700000000.0,
     "q": "", "score": 2},
    {"type": "task-reminder", "task": "Sort the list", "index": 1, "timestamp": 1700000001.0},
    {"type": "observation", "title": "ls", "content": "a.txt b.txt", "index": 2,
     "timestamp": 1700000002.0},
    {"type": "orientation", "program": "Sort them by name.", "index": 3,
     "timestamp": 1700000003.0, "q": "Is this orientation good?", "score": 0.5},
    {"type": "error", "message": "NameError: name 'x' is not defined", "index": 4,
     "timestamp": 1700000004.0},
]  # fmt: skip


class Folder:
    """traces/: two good traces (one in a subfolder) and two files that are not traces."""

    def __init__(self, root: Path) -> None:
        self.path = root / "traces"
        (self.path / "run2").mkdir(parents=True)
        self.current = self.path / "event_trace_1737530005.json"
        self.legacy = self.path / "run2" / "event_trace_1700000004.json"
        self.not_json = self.path / "notes.json"
        self.not_a_trace = self.path / "config.json"
        self.current.write_text(json.dumps(CURRENT), encoding="utf-8")
        self.legacy.write_text(json.dumps(LEGACY), encoding="utf-8")
        self.not_json.write_text("the run went well {", encoding="utf-8")
        self.not_a_trace.write_text(json.dumps({"model": "mistral", "ticks": 3}), encoding="utf-8")


@pytest.fixture
def folder(tmp_path: Path) -> Folder:
    return Folder(tmp_path)


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed script on tmp_path/traces.db, with a clean config and data folder."""
    result = _run(tmp_path, "--db", str(tmp_path / "traces.db"), *args)
    assert "Traceback" not in result.stdout + result.stderr
    assert result.returncode != exit_codes.INTERNAL, result.stderr
    assert not list((tmp_path / "data").rglob("crash.log")), "an internal error was logged"
    return result


def one_error(result: subprocess.CompletedProcess[str], command: str) -> str:
    """The single `agent-console COMMAND: error: ...` line of a refusal, and exit 2."""
    assert result.returncode == exit_codes.USAGE, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"agent-console {command}: error: "), lines[0]
    return lines[0]


def counts(db: Path) -> dict[str, int]:
    """Each session's task and how many nodes it has."""
    with TraceStore(db) as store:
        return {s.task: store.count_nodes(s.id) for s in store.list_sessions()}


# -- import ---------------------------------------------------------------------------------


def test_a_folder_imports_its_good_traces_and_names_each_bad_file_with_its_problem(
    tmp_path: Path, folder: Folder
) -> None:
    result = cli(tmp_path, "import", "weave", str(folder.path))
    assert result.returncode == exit_codes.USAGE  # some files were not traces

    errors = result.stderr.splitlines()
    assert len(errors) == 2, result.stderr
    by_path = {line.split(": error: ")[0]: line.split(": error: ")[1] for line in errors}
    assert set(by_path) == {str(folder.not_json), str(folder.not_a_trace)}
    assert by_path[str(folder.not_json)].startswith("not JSON: ")
    assert "expected a list of blocks" in by_path[str(folder.not_a_trace)]
    assert "got an object" in by_path[str(folder.not_a_trace)]

    out = result.stdout.splitlines()
    assert len(out) == 3, result.stdout
    assert out[-1].startswith("2 of 4 file(s) imported into 2 session(s): 11 block(s) added")
    good = {line.split(": ")[0]: line for line in out[:-1]}
    assert set(good) == {str(folder.current), str(folder.legacy)}
    assert "6 block(s) added as session" in good[str(folder.current)]
    assert "5 block(s) added as session" in good[str(folder.legacy)]

    db = tmp_path / "traces.db"
    with TraceStore(db) as store:
        sessions = {s.task: s for s in store.list_sessions()}
        assert set(sessions) == {"Write hello.txt", "Sort the list"}
        current = store.tree(sessions["Write hello.txt"].id)
        chosen = [n for n in current if n.status is not NodeStatus.ALTERNATE]
        assert [n.kind for n in chosen] == [b["type"] for b in CURRENT]
        assert [n.text for n in chosen[:4]] == [b["body"] for b in CURRENT[:4]]
        action = chosen[4]
        assert action.author is Author.MODEL and action.status is NodeStatus.EXECUTED
        alternates = [n for n in current if n.status is NodeStatus.ALTERNATE]
        assert [(a.kind, a.parent_id, a.score) for a in alternates] == [
            ("action", action.parent_id, -1.0)
        ]
        outcome = chosen[5]
        assert {(e.name, e.passed) for e in store.evaluations(outcome.id)} == {
            ("hello.txt exists", True),
            ("greeting right", False),
        }
        legacy = store.tree(sessions["Sort the list"].id)
        assert [(n.kind, n.text) for n in legacy] == [
            ("genesis", "print('old')"),
            ("task-reminder", "Sort the list"),
            ("observation", "a.txt b.txt"),
            ("orientation", "Sort them by name."),
            ("error", "NameError: name 'x' is not defined"),
        ]


def test_importing_again_adds_nothing(tmp_path: Path, folder: Folder) -> None:
    cli(tmp_path, "import", "weave", str(folder.path))
    db = tmp_path / "traces.db"
    before = counts(db)
    assert before == {"Write hello.txt": 7, "Sort the list": 5}  # 6 blocks + 1 alternate

    again = cli(tmp_path, "import", "weave", str(folder.current), str(folder.legacy))
    assert again.returncode == exit_codes.OK, again.stderr
    assert again.stderr == ""
    *files, summary = again.stdout.splitlines()
    assert len(files) == 2
    assert all("already imported" in line and "nothing new" in line for line in files), files
    assert summary.startswith("2 of 2 file(s) imported into 2 session(s): 0 block(s) added")
    assert counts(db) == before


def test_a_later_dump_of_the_same_run_adds_only_its_new_blocks(
    tmp_path: Path, folder: Folder
) -> None:
    early = tmp_path / "early" / "event_trace_1737530003.json"
    early.parent.mkdir()
    early.write_text(json.dumps(CURRENT[:4]), encoding="utf-8")
    first = cli(tmp_path, "import", "weave", str(early))
    assert first.returncode == exit_codes.OK, first.stderr
    assert "4 block(s) added as session" in first.stdout

    later = cli(tmp_path, "import", "weave", str(folder.current))
    assert later.returncode == exit_codes.OK, later.stderr
    assert "2 block(s) added into session" in later.stdout
    assert counts(tmp_path / "traces.db") == {"Write hello.txt": 7}


def test_import_of_a_missing_path_is_one_line(tmp_path: Path) -> None:
    line = one_error(cli(tmp_path, "import", "weave", "missing/path"), "import")
    assert "missing/path" in line and "no such file or folder" in line
    assert not (tmp_path / "traces.db").exists()


def test_import_of_a_folder_without_traces_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("nothing here", encoding="utf-8")
    line = one_error(cli(tmp_path, "import", "weave", str(tmp_path / "empty")), "import")
    assert "no trace files" in line


# -- export ---------------------------------------------------------------------------------


def test_export_writes_the_trace_and_its_rendering_as_they_were_imported(
    tmp_path: Path, folder: Folder
) -> None:
    cli(tmp_path, "import", "weave", str(folder.path))
    with TraceStore(tmp_path / "traces.db") as store:
        ids = {s.task: s.id for s in store.list_sessions()}

    for task, given, trace in (
        ("Write hello.txt", folder.current, CURRENT),
        ("Sort the list", folder.legacy, LEGACY),
    ):
        out = tmp_path / "out" / str(ids[task])
        result = cli(tmp_path, "export", "weave", str(ids[task]), "--out", str(out))
        assert result.returncode == exit_codes.OK, result.stderr
        assert result.stderr == ""
        written = sorted(p.name for p in out.iterdir())
        stamp = given.stem.removeprefix("event_trace_")
        assert written == [f"event_trace_{stamp}.json", f"rendered_trace_{stamp}.py"]
        assert result.stdout.splitlines() == [
            f"wrote {len(trace)} block(s) of session {ids[task]}: "
            f"{out / written[0]} and {out / written[1]}"
        ]
        exported = json.loads((out / written[0]).read_text(encoding="utf-8"))
        assert exported == trace
        assert [list(block) for block in exported] == [list(block) for block in trace]
        rendered = (out / written[1]).read_text(encoding="utf-8")
        assert rendered.count("#startblock type: ") == len(trace)
        assert rendered.count("#endblock") == len(trace)
        for block in trace:
            assert f"#startblock type: {block['type']}" in rendered
    assert "self.add_action('Write the file', write)" in (
        tmp_path / "out" / str(ids["Write hello.txt"]) / "rendered_trace_1737530005.py"
    ).read_text(encoding="utf-8")


def test_export_of_a_session_that_is_not_there_is_one_line(tmp_path: Path, folder: Folder) -> None:
    cli(tmp_path, "import", "weave", str(folder.current))
    line = one_error(cli(tmp_path, "export", "weave", "999", "--out", "out"), "export")
    assert "no session 999" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("export", "weave", "--out", "out"), "which session?"),
        (("export", "weave", "first", "--out", "out"), "SESSION is a session id, not 'first'"),
        (("export", "sft", "3", "--out", "x.jsonl"), "a SESSION goes with `export weave`"),
        (("export", "weave", "1", "--out", "out", "--since", "2025-01-01"), "--since goes with"),
    ],
    ids=["no-session", "not-a-number", "session-with-sft", "since-with-weave"],
)
def test_export_refusals_are_one_line(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    line = one_error(cli(tmp_path, *args), "export")
    assert says in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "x.jsonl").exists()
