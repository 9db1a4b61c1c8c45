"""Bad input everywhere a user types: one clear line or notification, no traceback, nothing
lost.

The command line side runs the real installed `agent-console` executable as a subprocess,
in a folder of its own (config, data and home folders in `tmp_path`, no AGENT_CONSOLE_*
variable but the case's own), over a table of bad inputs to every subcommand: unknown
flags, missing values, wrong types, ids and names that do not exist, broken config files,
environment variables, task files, tasks files and trace stores (random bytes, text, a
truncated database, a folder, one written by a newer agent-console, a read-only one),
and 2 GB (sparse) files that must be refused unread. Each case checks the exit code
docs/reference.md documents, that stderr is one `...: error: ...` line naming the problem
and stdout is empty, that no traceback appears, and that every file of the case's folder
is byte for byte what it was, with nothing added beside it (no -wal, no partial output).

The console side drives the real app with Pilot: broken theme files (a bad colour, binary,
2 GB) and an unknown key binding id give notifications and a fallback theme; an edited
action that does not parse (a syntax error, or nested too deeply for Python's parser) is
refused with a notification and nothing is decided or stored; a 2 MB paste into the chat
input is taken without hanging.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from textual import events
from textual.widgets import Input, TextArea

from agents.settings import Settings
from app import exit_codes
from app.console import FALLBACK_THEME, ConsoleApp
from app.screens.approval import ApprovalScreen, Mode
from storage import TraceStore
from tests.app.snapshot_apps.approval_app import build_approval_request
from tests.app.test_approval import Host
from tests.support.pilot import Notes

pytestmark = [pytest.mark.cli]

SCRIPT = Path(sys.executable).with_name("agent-console")
HUGE = 2 << 30  # a 2 GiB sparse file: reading it whole takes many seconds and 2 GiB
QUICK_S = 20.0  # "refused quickly": reading a 2 GiB file here takes 30 s and more
USAGE, MODEL, STORE = exit_codes.USAGE, exit_codes.MODEL, exit_codes.STORE

# -- the files a case may name (relative to its working folder) ----------------------------

TEXT_FILES: dict[str, str] = {
    # config files
    "c_syntax.toml": 'theme = "nord"\ndb = = "x"\n',
    "c_type.toml": 'candidates = "four"\n',
    "c_negative.toml": "max_ticks = -3\n",
    "c_table.toml": '[db]\npath = "x.db"\n',
    "c_keys_id.toml": '[keys]\n"app refresh" = "f5"\n',
    "c_keys_empty.toml": '[keys]\n"app.refresh" = ""\n',
    "c_keys_scalar.toml": "keys = 5\n",
    "c_escalation.toml": 'escalation = ["a"]\n',
    # task files
    "t_syntax.toml": 'prompt = "unclosed\n',
    "t_no_prompt.toml": 'title = "a title and nothing to do"\n',
    "t_prompt_number.toml": "prompt = 5\n",
    "t_unknown_key.toml": 'prompt = "x"\npromt = "y"\n',
    "t_checks_syntax.toml": "prompt = \"x\"\nchecks = '''\ndef check_a(subagent)\n    return 1\n'''\n",
    "t_check_missing_fn.toml": (
        "prompt = \"x\"\nchecks = '''\nself.add_evaluation(\"it works\", check_nowhere)\n'''\n"
    ),
    "t_check_no_arg.toml": "prompt = \"x\"\nchecks = '''\ndef check_a():\n    return 1\n'''\n",
    "t_escape.toml": 'prompt = "x"\n[files]\n"../../outside.txt" = "escaped"\n',
    "t_syntax.py": 'PROMPT = "x"\ndef check_a(:\n',
    "t_runs_code.py": 'PROMPT = __import__("os").system("touch pwned")\n',
    "t_nested.py": 'PROMPT = "x"\nX = (1\n' + "+ 1\n" * 5000 + ")\n",
    "t_empty.toml": "",
    "t_empty.py": "",
    "t_wrong_suffix.txt": 'prompt = "x"\n',
    # batch tasks files
    "b_bad_json.jsonl": '{"task": \n',
    "b_empty.jsonl": "\n\n",
    "b_broken_task.jsonl": '{"task": "t_syntax.toml"}\n',
    "b_good.jsonl": '{"prompt": "say hi"}\n',
    "b_unknown_key.jsonl": '{"prompt": "x", "tick_limit": 3}\n',
    # weave traces
    "i_not_a_trace.json": '{"hello": "world"}\n',
    "text.db": "this is a text file, not a database\n",
}
BINARY = bytes(random.Random(7).randbytes(4096)) + b"\xff\xfe\x00"
BINARY_FILES = ("c_binary.toml", "t_binary.toml", "b_binary.jsonl", "noise.db")
SPARSE_FILES = ("c_huge.toml", "t_huge.toml", "b_huge.jsonl")
FOLDERS = ("emptydir", "t_folder.toml", "dir.db", "outdir")


@pytest.fixture(scope="module")
def store_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The bytes of a real store stamped with a newer schema, and of a truncated one."""
    folder = tmp_path_factory.mktemp("stores")
    db = folder / "t.db"
    TraceStore(db).close()
    good = db.read_bytes()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099'")
    conn.close()
    return {"newer.db": db.read_bytes(), "truncated.db": good[:4096] + BINARY * 4}


@pytest.fixture
def workdir(tmp_path: Path, store_files: dict[str, bytes]) -> Path:
    work = tmp_path / "w"
    work.mkdir()
    for name, text in TEXT_FILES.items():
        (work / name).write_text(text, encoding="utf-8")
    for name in BINARY_FILES:
        (work / name).write_bytes(BINARY)
    for name, data in store_files.items():
        (work / name).write_bytes(data)
    for name in SPARSE_FILES:
        with (work / name).open("wb") as sparse:
            sparse.truncate(HUGE)
    for name in FOLDERS:
        (work / name).mkdir()
    return work


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CONSOLE_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env["HOME"] = str(tmp_path / "home")
    env.update(extra)
    return env


def _run(
    tmp_path: Path, cwd: Path, args: tuple[str, ...], env: dict[str, str], prefix: list[str]
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run(
        [*prefix, str(SCRIPT), *args],
        env=_env(tmp_path, **env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return result, time.monotonic() - started


def _snapshot(folder: Path) -> dict[str, str]:
    """Every entry under `folder`: a small file's sha256, a big one's size, a folder's mark."""
    seen = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_dir():
            seen[name] = "folder"
        elif path.stat().st_size > 1 << 20:
            seen[name] = f"{path.stat().st_size} bytes"  # the sparse ones: never read whole
        else:
            seen[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.stdout == "", result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("agent-console") and ": error: " in lines[0], lines[0]
    return lines[0]


def _sandbox_ok() -> bool:
    from agents.sandbox import sandbox_status

    return sandbox_status().ok


# -- the table -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    code: int
    needle: str
    env: dict[str, str] = field(default_factory=dict)
    huge: bool = False  # names a 2 GiB file: refused quickly
    sandbox: bool = False  # a --query case: the sandbox is checked before the store


def case(id: str, args: str | tuple[str, ...], code: int, needle: str, **kw: object) -> Case:
    return Case(id, tuple(args.split()) if isinstance(args, str) else args, code, needle, **kw)  # type: ignore[arg-type]


FLAG_CASES = [
    case("unknown-flag", "--frobnicate", USAGE, "unrecognized arguments: --frobnicate"),
    case("max-ticks-not-int", "--max-ticks abc", USAGE, "--max-ticks: invalid int value: 'abc'"),
    case("max-ticks-negative", "--max-ticks -1", USAGE, "command line: max_ticks:"),
    case("candidates-too-many", "--candidates 65", USAGE, "command line: candidates:"),
    case("temperature-negative", "--temperature -1", USAGE, "command line: temperature:"),
    case("request-timeout-zero", "--request-timeout 0", USAGE, "request_timeout:"),
    case("escalation-not-counts", "--escalation 4,x", USAGE, "escalation: expected comma"),
    case(
        "pick-unknown",
        "--pick random",
        USAGE,
        "pick: Input should be 'best', 'softmax' or 'greedy'",
    ),
    case("memory-not-bool", "--memory maybe", USAGE, "memory: Input should be a valid boolean"),
    case("db-without-value", "--db", USAGE, "argument --db: expected one argument"),
    case("backend-unknown", "--backend gpu", USAGE, "invalid choice: 'gpu'"),
    case("keys-without-equals", "--keys nonsense", USAGE, "expected id=keys, not 'nonsense'"),
    case("keys-bad-id", ("--keys", "bad id=f5"), USAGE, "'bad id' is not a binding id"),
    case("resume-not-int", "--resume abc", USAGE, "--resume: invalid int value: 'abc'"),
    case(
        "resume-unknown-session",
        ("--query", "go on", "--resume", "999999"),
        USAGE,
        "--resume 999999: no such session",
        sandbox=True,
    ),
    case("task-unknown-name", "--task builtin:nosuch", USAGE, "builtin:nosuch: no such task"),
    case("adapter-unknown", "--backend none --adapter nosuch", USAGE, "'nosuch': no such adapter"),
    case(
        "query-adapter-unknown",
        "--query x --adapter nosuch",
        USAGE,
        "'nosuch': no such adapter",
        sandbox=True,
    ),
    case("unsafe-without-query", "--unsafe-no-sandbox", USAGE, "goes with --query"),
    # label
    case("label-unknown-session", "label --session 9999", USAGE, "--session 9999: no such session"),
    case("label-session-not-int", "label --session abc", USAGE, "invalid int value: 'abc'"),
    case("label-with-query", "--query x label", USAGE, "--query does not go with `label`"),
    case("label-misplaced-db", "label --db x.db", USAGE, "--db is an option of agent-console"),
    # train
    case("train-without-command", "train", USAGE, "train needs a command"),
    case("train-unknown-command", "train fly", USAGE, "invalid choice: 'fly'"),
    case("train-status-unknown-job", "train status 42", USAGE, "no job 42"),
    case("train-status-not-id", "train status abc", USAGE, "'abc' is not a job id"),
    case("train-cancel-zero", "train cancel 0", USAGE, "'0' is not a job id"),
    case("train-cancel-without-id", "train cancel", USAGE, "the following arguments are required"),
    case("train-resume-unknown-job", "train resume 42", USAGE, "no job 42"),
    case("train-logs-unknown-job", "train logs 7", USAGE, "no job 7"),
    case("train-epochs-not-float", "train sft --epochs abc", USAGE, "invalid float value: 'abc'"),
    case("train-epochs-negative", "train sft --epochs -1", USAGE, "--epochs -1: must be > 0"),
    case("train-lora-r-zero", "train dpo --lora-r 0", USAGE, "--lora-r 0: must be 1 to 1024"),
    case("train-since-not-date", "train sft --since yesterday", USAGE, "is not a date"),
    case("train-max-length-negative", "train dpo --max-length -5", USAGE, "--max-length -5"),
    case("train-without-labels", "train sft", USAGE, "too little data"),
    case("adapters-unknown-flag", "adapters --bogus", USAGE, "unrecognized arguments: --bogus"),
    # export
    case("export-without-out", "export sft", USAGE, "required: --out"),
    case("export-unknown-kind", "export csv --out x", USAGE, "invalid choice: 'csv'"),
    case("export-since-not-date", "export sft --out x.jsonl --since no", USAGE, "is not a date"),
    case(
        "export-unknown-session",
        "export dpo --out x.jsonl --session 9999",
        USAGE,
        "--session 9999: no such session",
    ),
    case("export-out-is-a-folder", "export sft --out outdir", USAGE, "Is a directory"),
    case(
        "export-tokenizer-missing",
        "export tokens --out x.jsonl --tokenizer ./no-such-model",
        MODEL,
        "no such folder",
    ),
    case("export-chat-tokens", "export tokens --out x.jsonl --chat", USAGE, "--chat goes with"),
    case("export-weave-no-session", "export weave --out d", USAGE, "which session?"),
    case("export-weave-not-id", "export weave abc --out d", USAGE, "not 'abc'"),
    case("export-weave-unknown", "export weave 999 --out d", USAGE, "no session 999"),
    # import
    case("import-missing-path", "import weave nowhere.json", USAGE, "no such file or folder"),
    case("import-empty-folder", "import weave emptydir", USAGE, "no trace files"),
    case("import-unknown-format", "import xml x", USAGE, "invalid choice: 'xml'"),
    # batch
    case("batch-missing-file", "batch missing.jsonl", USAGE, "No such file or directory"),
    case("batch-folder", "batch emptydir", USAGE, "emptydir: is a folder"),
    case("batch-bad-json", "batch b_bad_json.jsonl", USAGE, "line 1: not JSON"),
    case("batch-binary", "batch b_binary.jsonl", USAGE, "not UTF-8 text"),
    case("batch-empty", "batch b_empty.jsonl", USAGE, "no tasks"),
    case("batch-unknown-key", "batch b_unknown_key.jsonl", USAGE, "unknown key 'tick_limit'"),
    case("batch-broken-task", "batch b_broken_task.jsonl", USAGE, "TOML syntax error"),
    case("batch-huge", "batch b_huge.jsonl", USAGE, "too large for a tasks file", huge=True),
    case("batch-show-unknown", "batch --show 999", USAGE, "--show 999: no such batch"),
    case("batch-show-not-int", "batch --show abc", USAGE, "invalid int value: 'abc'"),
    # memory, serve, doctor
    case("memory-without-action", "memory", USAGE, "required: action"),
    case("memory-unknown-action", "memory frobnicate", USAGE, "invalid choice: 'frobnicate'"),
    case("serve-port-zero", "serve --port 0", USAGE, "--port 0: not a port number"),
    case("serve-port-not-int", "serve --port abc", USAGE, "invalid int value: 'abc'"),
    case("serve-adapter-no-path", "serve --adapter bad", USAGE, "expected NAME=PATH"),
    case("serve-adapter-missing", "serve --adapter x=./nowhere", USAGE, "adapter 'x'"),
    case("serve-model-missing", "serve --model ./no-model", MODEL, "not a model folder"),
    case("doctor-unknown-flag", "doctor --bogus", USAGE, "unrecognized arguments: --bogus"),
]

CONFIG_CASES = [
    case("config-syntax", "--config c_syntax.toml", USAGE, "c_syntax.toml, line 2"),
    case("config-binary", "--config c_binary.toml", USAGE, "not valid UTF-8"),
    case("config-wrong-type", "--config c_type.toml", USAGE, "line 1: candidates:"),
    case("config-negative", "--config c_negative.toml", USAGE, "line 1: max_ticks:"),
    case("config-table-for-text", "--config c_table.toml", USAGE, "line 1: db:"),
    case("config-keys-bad-id", "--config c_keys_id.toml", USAGE, "'app refresh' is not a binding"),
    case("config-keys-no-keys", "--config c_keys_empty.toml", USAGE, "'' is not a key list"),
    case("config-keys-not-table", "--config c_keys_scalar.toml", USAGE, "keys: Input should be"),
    case("config-escalation", "--config c_escalation.toml", USAGE, "line 1: escalation:"),
    case("config-folder", "--config emptydir", USAGE, "is a folder"),
    case("config-huge", "--config c_huge.toml", USAGE, "too large for a config file", huge=True),
    case(
        "config-from-env",
        "adapters",
        USAGE,
        "c_type.toml, line 1: candidates:",
        env={"AGENT_CONSOLE_CONFIG": "c_type.toml"},
    ),
    case(
        "env-max-ticks", "", USAGE, "AGENT_CONSOLE_MAX_TICKS", env={"AGENT_CONSOLE_MAX_TICKS": "x"}
    ),
    case("env-backend", "", USAGE, "AGENT_CONSOLE_BACKEND", env={"AGENT_CONSOLE_BACKEND": "gpu"}),
    case("env-keys", "", USAGE, "expected id=keys", env={"AGENT_CONSOLE_KEYS": "app.quit"}),
    case("env-escalation", "", USAGE, "1 to 64", env={"AGENT_CONSOLE_ESCALATION": "0"}),
    case("env-memory", "", USAGE, "AGENT_CONSOLE_MEMORY", env={"AGENT_CONSOLE_MEMORY": "perhaps"}),
    case(
        "env-request-timeout",
        "label",
        USAGE,
        "AGENT_CONSOLE_REQUEST_TIMEOUT",
        env={"AGENT_CONSOLE_REQUEST_TIMEOUT": "-5"},
    ),
]

TASK_CASES = [
    case("task-toml-syntax", "--task t_syntax.toml", USAGE, "line 1, column 19: TOML syntax"),
    case("task-no-prompt", "--task t_no_prompt.toml", USAGE, "prompt is missing"),
    case("task-prompt-number", "--task t_prompt_number.toml", USAGE, "prompt must be text"),
    case("task-unknown-key", "--task t_unknown_key.toml", USAGE, "line 2: unknown key 'promt'"),
    case("task-checks-syntax", "--task t_checks_syntax.toml", USAGE, "line 3: Python syntax"),
    case(
        "task-check-names-missing-function",
        "--task t_check_missing_fn.toml",
        USAGE,
        "line 3: add_evaluation names 'check_nowhere', which the checks do not define",
    ),
    case("task-check-no-argument", "--task t_check_no_arg.toml", USAGE, "must take one argument"),
    case("task-file-escapes", "--task t_escape.toml", USAGE, "leads outside the work directory"),
    case("task-py-syntax", "--task t_syntax.py", USAGE, "t_syntax.py, line 2: Python syntax"),
    case("task-py-runs-code", "--task t_runs_code.py", USAGE, "PROMPT must be a literal"),
    case("task-py-nested", "--task t_nested.py", USAGE, "nested too deeply to parse"),
    case("task-empty-toml", "--task t_empty.toml", USAGE, "prompt is missing"),
    case("task-empty-py", "--task t_empty.py", USAGE, "PROMPT is missing"),
    case("task-binary", "--task t_binary.toml", USAGE, "not valid UTF-8"),
    case("task-folder", "--task t_folder.toml", USAGE, "is a folder"),
    case("task-wrong-suffix", "--task ./t_wrong_suffix.txt", USAGE, "must end in .toml or .py"),
    case("task-huge", "--task t_huge.toml", USAGE, "too large for a task file", huge=True),
    case(
        "task-missing-with-query",
        "--query x --task missing.toml",
        USAGE,
        "missing.toml: task file does not exist",
    ),
]

NOT_A_DB = "is not a SQLite database"
NEWER = "newer than this agent-console knows"
STORE_CASES = [
    case("db-noise-console", "--db noise.db --backend none", STORE, NOT_A_DB),
    case("db-text-label", "--db text.db label", STORE, NOT_A_DB),
    case("db-truncated-console", "--db truncated.db --backend none", STORE, NOT_A_DB),
    case("db-noise-train-sft", "--db noise.db train sft", STORE, NOT_A_DB),
    case("db-text-train-status", "--db text.db train status", STORE, NOT_A_DB),
    case("db-newer-train-cancel", "--db newer.db train cancel 1", STORE, NEWER),
    case("db-newer-adapters", "--db newer.db adapters", STORE, NEWER),
    case("db-newer-export-sft", "--db newer.db export sft --out x.jsonl", STORE, NEWER),
    case("db-noise-export-weave", "--db noise.db export weave 1 --out d", STORE, NOT_A_DB),
    case("db-text-import", "--db text.db import weave i_not_a_trace.json", STORE, NOT_A_DB),
    case("db-newer-batch-list", "--db newer.db batch --list", STORE, NEWER),
    case("db-noise-batch-run", "--db noise.db batch b_good.jsonl", STORE, NOT_A_DB),
    case("db-noise-memory", "--db noise.db memory status", STORE, NOT_A_DB),
    case("db-newer-label", "--db newer.db label", STORE, NEWER),
    case("db-newer-query", "--db newer.db --query x --backend none", STORE, NEWER, sandbox=True),
    case("db-folder", "--db dir.db adapters", STORE, "dir.db: it is a folder"),
    case("db-from-env", "adapters", STORE, NOT_A_DB, env={"AGENT_CONSOLE_DB": "noise.db"}),
]

CASES = FLAG_CASES + CONFIG_CASES + TASK_CASES + STORE_CASES


def test_the_case_ids_are_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("bad", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_a_documented_code_and_changes_nothing(
    tmp_path: Path, workdir: Path, bad: Case
) -> None:
    if bad.sandbox and not _sandbox_ok() and not os.environ.get("AGENT_CONSOLE_REQUIRE_SANDBOX"):
        pytest.skip("needs the sandbox: --query checks it before the store")
    before = _snapshot(workdir)
    result, took = _run(tmp_path, workdir, bad.args, bad.env, [])
    assert result.returncode == bad.code, result.stderr
    line = _one_error_line(result)
    assert bad.needle in line, line
    assert _snapshot(workdir) == before  # nothing changed, nothing added (no -wal, no pwned)
    if bad.huge:
        assert took < QUICK_S, f"{took:.1f} s: the 2 GiB file was read"


# -- beyond the table ------------------------------------------------------------------------


def test_a_trace_that_is_not_one_is_named_and_nothing_is_imported(
    tmp_path: Path, workdir: Path
) -> None:
    before = _snapshot(workdir)
    result, _ = _run(
        tmp_path, workdir, ("import", "weave", "i_not_a_trace.json", "c_binary.toml"), {}, []
    )
    assert result.returncode == USAGE
    assert "Traceback" not in result.stdout + result.stderr
    problems = result.stderr.splitlines()  # one line per file, each naming it
    assert len(problems) == 2, result.stderr
    assert problems[0].startswith("i_not_a_trace.json: error: expected a list of blocks")
    assert problems[1].startswith("c_binary.toml: error:")
    assert result.stdout.splitlines() == [
        "0 of 2 file(s) imported into 0 session(s): 0 block(s) added"
    ]
    assert _snapshot(workdir) == before


def test_doctor_names_a_store_that_is_not_one_and_leaves_it_alone(
    tmp_path: Path, workdir: Path
) -> None:
    before = _snapshot(workdir)
    result, _ = _run(tmp_path, workdir, ("--db", "newer.db", "--backend", "none", "doctor"), {}, [])
    assert result.returncode == 1  # doctor: 0 only when every check passes
    assert "Traceback" not in result.stdout + result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].startswith("FAIL trace store: ") and NEWER in failed[0]
    assert _snapshot(workdir) == before


def test_a_zero_length_file_is_a_new_empty_store(tmp_path: Path, workdir: Path) -> None:
    """An empty file is a SQLite database with nothing in it yet: it is made a store."""
    (workdir / "zero.db").touch()
    result, _ = _run(tmp_path, workdir, ("--db", "zero.db", "adapters"), {}, [])
    assert result.returncode == exit_codes.OK, result.stderr
    assert result.stdout.startswith("no adapters yet")
    with TraceStore(workdir / "zero.db") as store:
        assert store.list_sessions() == []


@pytest.mark.parametrize(
    ("db", "args"),
    [("ro/traces.db", ("adapters",)), ("ro/traces.db", ("--backend", "none")), ("ro/new.db", ())],
    ids=["adapters", "console", "new-file"],
)
def test_a_store_on_a_read_only_mount_is_refused_and_left_alone(
    tmp_path: Path, workdir: Path, store_files: dict[str, bytes], db: str, args: tuple[str, ...]
) -> None:
    """Read-only for real: bubblewrap mounts the folder read-only (we may be root, whom
    file modes do not stop)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None and not os.environ.get("AGENT_CONSOLE_REQUIRE_SANDBOX"):
        pytest.skip("needs bubblewrap for a read-only mount")
    assert bwrap is not None
    folder = workdir / "ro"
    folder.mkdir()
    with TraceStore(folder / "traces.db") as store:
        store.create_session("kept")
    before = _snapshot(folder)
    prefix = [bwrap, "--bind", "/", "/", "--ro-bind", str(folder), str(folder)]
    prefix += ["--dev", "/dev", "--proc", "/proc", "--"]
    result, _ = _run(tmp_path, workdir, ("--db", db, *args), {}, prefix)
    assert result.returncode == STORE, result.stderr
    line = _one_error_line(result)
    assert f"cannot open trace store {workdir / db}" in line and "read-only?" in line, line
    assert _snapshot(folder) == before
    with TraceStore(folder / "traces.db") as store:
        assert [s.task for s in store.list_sessions()] == ["kept"]


# -- the console ------------------------------------------------------------------------------

SIZE = (120, 36)


@pytest.fixture
def console_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TraceStore]:
    for name in list(os.environ):
        if name.startswith("AGENT_CONSOLE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with TraceStore(tmp_path / "t.db") as store:
        yield store


async def test_broken_theme_files_and_an_unknown_key_id_are_notified(
    tmp_path: Path, console_store: TraceStore
) -> None:
    themes = tmp_path / "config" / "agent-console" / "themes"
    themes.mkdir(parents=True)
    (themes / "mine.toml").write_text('name = "mine"\nprimary = "not a colour"\n', "utf-8")
    (themes / "binary.toml").write_bytes(BINARY)
    with (themes / "huge.toml").open("wb") as sparse:
        sparse.truncate(HUGE)
    before = _snapshot(themes)
    notes = Notes()
    settings = Settings(backend="none", theme="mine", keys={"no.such.binding": "f5"})
    app = ConsoleApp(store=console_store, settings=settings)
    started = time.monotonic()
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await pilot.pause()
        assert time.monotonic() - started < QUICK_S  # the 2 GiB theme was not read
        assert app.is_running
        assert app.theme == FALLBACK_THEME
        assert notes.of("error") == [f"unknown theme 'mine'; using {FALLBACK_THEME}"]
        warnings = notes.of("warning")
        skipped = sorted(w for w in warnings if w.startswith("theme file "))
        assert len(skipped) == 3, warnings
        assert skipped[0].startswith(f"theme file {themes / 'binary.toml'} skipped: ")
        assert skipped[1].startswith(f"theme file {themes / 'huge.toml'} skipped: ")
        assert "too large for a theme file" in skipped[1]
        assert skipped[2] == (
            f"theme file {themes / 'mine.toml'} skipped: primary = 'not a colour' is not a colour"
        )
        assert any("no.such.binding" in w for w in warnings), warnings
        assert all("\n" not in w for w in warnings)
        await pilot.press("q")
    assert _snapshot(themes) == before


def _decisions(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT count(*) FROM decision").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("edit", "refusal"),
    [
        ("def action(subagent:\n    return 1\n", "line 1: "),
        ("x = (1\n" + "+ 1\n" * 5000 + ")\n", "nested too deeply for Python to parse"),
    ],
    ids=["syntax-error", "nested-too-deeply"],
)
async def test_an_edit_that_does_not_parse_is_refused_and_nothing_is_decided(
    tmp_path: Path, console_store: TraceStore, edit: str, refusal: str
) -> None:
    request = build_approval_request(console_store)
    stored = _decisions(tmp_path / "t.db")
    notes = Notes()
    app = Host(request)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ApprovalScreen)
        editor = screen.query_one("#approval-editor", TextArea)
        editor.load_text(edit)
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.is_running
        assert app.screen is screen and screen.mode is Mode.EDIT  # the edit stays open
        assert editor.text == edit  # nothing the operator typed is lost
        assert notes.seen[-1].severity == "error"
        assert notes.seen[-1].message.startswith(refusal), notes.seen[-1].message
        assert app.decisions == []
    assert _decisions(tmp_path / "t.db") == stored


async def test_a_two_megabyte_paste_into_the_chat_does_not_hang(
    console_store: TraceStore,
) -> None:
    paste = ("all work and no play " * 100_000)[: 2 << 20]
    notes = Notes()
    app = ConsoleApp(store=console_store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await pilot.pause()
        await pilot.press("i")
        await pilot.pause()
        chat = app.screen.query_one("#chat-input", Input)
        assert chat.has_focus
        started = time.monotonic()
        chat.post_message(events.Paste(paste))
        await pilot.pause()
        assert chat.value.strip() == paste.strip()  # taken whole, as the agent would get it
        await pilot.press("enter")
        await pilot.pause()
        took = time.monotonic() - started
        assert took < QUICK_S, f"{took:.1f} s"
        assert app.is_running
        assert chat.value == ""
        # No model to send it to: said in one notification, the console goes on.
        assert notes.of("warning")[-1].startswith("no model")
        await pilot.press("down")
        await pilot.pause()
        assert app.is_running
