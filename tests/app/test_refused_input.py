"""Input the command line must refuse in one line, quickly, as a real `agent-console`
subprocess: files that are not regular files (a FIFO, a symlink to /dev/zero) wherever a
user names a file, names too long for the file system, the console and `label` with no
terminal, and numbers that are not finite.

A FIFO read waits forever for a writer, and /dev/zero reads without end: each command
runs under a memory limit and a timeout, so that a regression fails here rather than
hanging the suite or waking the OOM killer on the machine.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from app import exit_codes
from tests.app.test_cli import SCRIPT, _env

pytestmark = [pytest.mark.cli]

#: Far above what a refused command needs, far below what reading /dev/zero would take.
MEMORY_LIMIT = 2 << 30
QUICK_S = 60


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _run(
    tmp_path: Path, *args: str, stdin: int | None = subprocess.DEVNULL, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        env=_env(tmp_path, **env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=QUICK_S,
        stdin=stdin,
        preexec_fn=_limit_memory,
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single `agent-console[ COMMAND]: error: ...` line, and nothing else."""
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert re.match(r"agent-console( \w+)?: error: ", lines[0]), lines[0]
    return lines[0]


# -- files that are not regular files --------------------------------------------------------


@dataclass(frozen=True)
class Special:
    """Makes `folder / NAME` a FIFO or a symlink to /dev/zero, for any NAME."""

    folder: Path
    fifo: bool

    @property
    def kind(self) -> str:
        """What the error line calls it."""
        return "a FIFO" if self.fifo else "a character device"

    def make(self, name: str) -> Path:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.fifo:
            os.mkfifo(path)
        else:
            path.symlink_to("/dev/zero")
        return path


@pytest.fixture(params=["fifo", "dev-zero"])
def special(request: pytest.FixtureRequest, tmp_path: Path) -> Special:
    return Special(tmp_path, fifo=request.param == "fifo")


@pytest.mark.parametrize(
    ("name", "args", "what"),
    [
        ("t.toml", ("--task", "t.toml", "--backend", "none"), "a task file"),
        ("t.py", ("--query", "x", "--task", "t.py", "--backend", "none"), "a task file"),
        ("tasks.jsonl", ("batch", "tasks.jsonl"), "a tasks file"),
        ("c.toml", ("--config", "c.toml", "adapters"), "a config file"),
    ],
    ids=["task", "query-task", "batch-tasks-file", "config"],
)
def test_a_named_file_that_is_not_a_regular_file_is_refused_unread(
    tmp_path: Path, special: Special, name: str, args: tuple[str, ...], what: str
) -> None:
    special.make(name)
    result = _run(tmp_path, "--db", str(tmp_path / "t.db"), *args)
    assert result.returncode == exit_codes.USAGE, result.stderr
    line = _one_error_line(result)
    assert f"{name}: is {special.kind}; {what} must be a regular file" in line, line


def test_the_platform_config_file_is_refused_too(tmp_path: Path, special: Special) -> None:
    path = special.make("config/agent-console/config.toml")
    result = _run(tmp_path, "--db", str(tmp_path / "t.db"), "adapters")
    assert result.returncode == exit_codes.USAGE, result.stderr
    assert f"{path}: is {special.kind}" in _one_error_line(result)


def test_a_trace_to_import_that_is_not_a_regular_file_is_skipped(
    tmp_path: Path, special: Special
) -> None:
    special.make("trace.json")
    result = _run(tmp_path, "--db", str(tmp_path / "t.db"), "import", "weave", "trace.json")
    assert result.returncode == exit_codes.USAGE, result.stderr
    assert f"trace.json: error: is {special.kind}; a trace file must be a regular file" in (
        result.stderr.splitlines()
    )
    assert "Traceback" not in result.stderr


def test_an_adapter_whose_config_is_not_a_regular_file_is_refused(
    tmp_path: Path, special: Special
) -> None:
    special.make("adapter/adapter_config.json")
    result = _run(tmp_path, "serve", "--adapter", "x=adapter")
    assert result.returncode == exit_codes.USAGE, result.stderr
    line = _one_error_line(result)
    assert "adapter 'x'" in line and f"is {special.kind}" in line, line


def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "real.toml").write_text('prompt = "x"\nmax_ticks = -1\n')
    (tmp_path / "t.toml").symlink_to(tmp_path / "real.toml")
    result = _run(tmp_path, "--db", str(tmp_path / "t.db"), "--task", "t.toml")
    assert result.returncode == exit_codes.USAGE, result.stderr
    assert "max_ticks" in _one_error_line(result)  # read and parsed: its content refused


# -- names too long for the file system ----------------------------------------------------

LONG = "a" * 300
USAGE = exit_codes.USAGE


@pytest.mark.parametrize("command", [(), ("adapters",), ("label",), ("--query", "x")])
def test_a_db_name_too_long_is_a_store_error(tmp_path: Path, command: tuple[str, ...]) -> None:
    result = _run(tmp_path, "--db", f"{LONG}.db", "--backend", "none", *command)
    if command[:1] == ("--query",) and "sandbox is unavailable" in result.stderr:
        pytest.skip("needs the sandbox: --query checks it before the store")
    assert result.returncode == exit_codes.STORE, result.stderr
    line = _one_error_line(result)
    assert "cannot open database" in line and "its name is too long" in line, line
    assert list(tmp_path.glob("a*")) == []


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("--task", f"{LONG}.toml"), USAGE),
        (("--config", f"{LONG}.toml", "adapters"), USAGE),
        (("batch", f"{LONG}.jsonl"), USAGE),
        (("import", "weave", f"{LONG}.json"), USAGE),
        (("serve", "--adapter", f"x={LONG}"), USAGE),
        (("train", "sft", "--base", "./no-model", "--labels-from", f"{LONG}.db"), USAGE),
    ],
    ids=["task", "config", "batch", "import", "serve-adapter", "labels-from"],
)
def test_a_file_name_too_long_is_one_line(tmp_path: Path, args: tuple[str, ...], code: int) -> None:
    result = _run(tmp_path, "--db", str(tmp_path / "t.db"), *args)
    assert result.returncode == code, result.stderr
    assert "File name too long" in _one_error_line(result)


# -- no terminal -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [(), ("label",)], ids=["console", "label"])
@pytest.mark.parametrize("missing", ["stdin", "stdout"])
def test_the_console_without_a_terminal_is_refused(
    tmp_path: Path, command: tuple[str, ...], missing: str
) -> None:
    """Textual on a pipe would wait for keys that never come and write its escape codes
    into the pipe: with standard input or output not a terminal, one line and exit 2."""
    main, terminal = os.openpty()
    try:
        with subprocess.Popen(
            [str(SCRIPT), "--db", str(tmp_path / "t.db"), "--backend", "none", *command],
            env=_env(tmp_path),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL if missing == "stdin" else terminal,
            stdout=subprocess.PIPE if missing == "stdout" else terminal,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_limit_memory,
        ) as process:
            try:
                out, err = process.communicate(timeout=QUICK_S)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
                process.communicate()
                pytest.fail("the console waited for a terminal that is not there")
    finally:
        os.close(terminal)
        os.close(main)
    assert process.returncode == exit_codes.USAGE, err
    assert (out or "") == ""  # no escape codes in the pipe
    what = "the console" if not command else "`label`"
    name = "standard input" if missing == "stdin" else "standard output"
    assert err.splitlines() == [
        f"agent-console: error: {what} needs a terminal, and {name} is not one"
        + (" (a headless session: --query TEXT)" if not command else "")
    ]


def test_store_errors_come_before_the_missing_terminal(tmp_path: Path) -> None:
    (tmp_path / "noise.db").write_bytes(b"not a database" * 100)
    for command in ((), ("label",)):
        result = _run(tmp_path, "--db", "noise.db", "--backend", "none", *command)
        assert result.returncode == exit_codes.STORE, result.stderr
        assert "is not a SQLite database" in _one_error_line(result)


# -- numbers that are not finite -------------------------------------------------------------

NOT_A_MODEL = ("--backend", "transformers", "--model", "./no-model")  # never loads a model


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (("--temperature", "inf", "adapters"), {}, "temperature: Input should be a finite"),
        (("--temperature", "nan", "adapters"), {}, "temperature: Input should be a finite"),
        (("--temperature=-inf", "adapters"), {}, "temperature: Input should be a finite"),
        (("--request-timeout", "inf", "adapters"), {}, "request_timeout: Input should be a"),
        (("--action-timeout", "nan", "adapters"), {}, "action_timeout: Input should be a"),
        (("--approval-threshold", "nan", "adapters"), {}, "approval_threshold: Input should"),
        (("--rank-threshold", "inf", "adapters"), {}, "rank_threshold: Input should be a"),
        (("adapters",), {"AGENT_CONSOLE_TEMPERATURE": "inf"}, "AGENT_CONSOLE_TEMPERATURE"),
        (("--config", "c.toml", "adapters"), {}, "c.toml, line 1: temperature: Input should"),
        (("train", "sft", "--epochs", "inf"), {}, "--epochs inf: must be > 0"),
        (("train", "dpo", "--lr", "nan"), {}, "--lr nan: must be > 0"),
        ((*NOT_A_MODEL, "improve", "--family", "compute", "--epochs", "inf"), {}, "--epochs inf"),
        ((*NOT_A_MODEL, "improve", "--family", "compute", "--epochs", "nan"), {}, "--epochs nan"),
        (("serve", "--gpu-memory-utilization", "nan"), {}, "--gpu-memory-utilization nan"),
    ],
)
def test_a_number_that_is_not_finite_is_refused(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], needle: str
) -> None:
    (tmp_path / "c.toml").write_text("temperature = inf\n")
    result = _run(tmp_path, "--db", str(tmp_path / "t.db"), *args, **env)
    assert result.returncode == exit_codes.USAGE, result.stderr
    assert needle in _one_error_line(result)


def test_the_memory_limit_leaves_a_command_room_to_run(tmp_path: Path) -> None:
    """The limit the tests above run under does not itself make commands fail."""
    result = _run(tmp_path, "--db", str(tmp_path / "t.db"), "adapters")
    assert result.returncode == exit_codes.OK, result.stderr
