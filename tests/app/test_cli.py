"""The `agent-console` command, run as a real subprocess: version, help, and every way
it refuses to start (bad config, bad flag, bad store) before the console opens."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from agents.settings import Settings, load_settings
from app import __version__, exit_codes
from storage import TraceStore
from storage.migrate import SCHEMA_HEAD

pytestmark = [pytest.mark.cli]

SCRIPT = Path(sys.executable).with_name("agent-console")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CONSOLE_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env.update(extra)
    return env


def _spawn(command: list[str], tmp_path: Path) -> subprocess.Popen[str]:
    """`command` started in `tmp_path` with this test's environment, its output piped as
    text, no stdin: for tests that watch a run while it goes."""
    return subprocess.Popen(
        command,
        env=_env(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def _run(tmp_path: Path, *args: str, script: bool = True, **env: str):
    command = [str(SCRIPT)] if script else [sys.executable, "-m", "app.cli"]
    return subprocess.run(
        [*command, *args],
        env=_env(tmp_path, **env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single `agent-console: error: ...` line a refused start prints, and nothing else."""
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("agent-console: error: ")
    return lines[0]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_console_script_is_installed() -> None:
    assert SCRIPT.is_file() and os.access(SCRIPT, os.X_OK)


# -- version and help ---------------------------------------------------------------------


@pytest.mark.parametrize("script", [True, False], ids=["console-script", "python-m"])
def test_version(tmp_path: Path, script: bool) -> None:
    result = _run(tmp_path, "--version", script=script)
    assert result.returncode == exit_codes.OK
    assert result.stdout == "agent-console 0.1.0\n"
    assert result.stderr == ""


def test_version_agrees_with_the_package_metadata() -> None:
    assert __version__ == version("agent-console") == "0.1.0"


def test_help_mentions_every_option_setting_and_exit_code(tmp_path: Path) -> None:
    result = _run(tmp_path, "--help")
    assert result.returncode == exit_codes.OK
    assert result.stderr == ""
    out = result.stdout
    assert out.startswith("usage: agent-console")
    for option in ("--db", "--config", "--theme", "--version", "--help"):
        assert option in out
    for name in Settings.model_fields:
        if name != "api_key":  # a secret: never a flag, which `ps` would show
            assert f"--{name.replace('_', '-')}" in out
        assert f"AGENT_CONSOLE_{name.upper()}" in out
    assert "AGENT_CONSOLE_CONFIG" in out
    codes = {
        exit_codes.OK: "ok",
        exit_codes.INTERNAL: "internal error",
        exit_codes.USAGE: "bad usage or config",
        exit_codes.MODEL: "no model can be loaded or served",
        exit_codes.TRUNCATED: "session truncated",
        exit_codes.STORE: "trace store cannot be opened",
        exit_codes.INTERRUPTED: "interrupted",
        exit_codes.CLOSED_PIPE: "the reader of the output went away",
    }
    flat = " ".join(out.split())
    assert "exit codes:" in flat
    for code, meaning in codes.items():
        assert f"{code} {meaning}" in flat


@pytest.mark.parametrize(
    "args",
    [("--help",), ("--version",), ("doctor",), ("adapters",), ("train", "status")],
    ids=lambda args: " ".join(args),
)
def test_a_reader_that_goes_away_ends_the_command_quietly(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """`agent-console doctor | head -1`: the reader is gone before the command writes, as
    when `head` has its line. The command stops with 141 (as one killed by SIGPIPE) and
    says nothing: no traceback, no "internal error", no complaint at exit. (argparse's
    own --help and --version drop a failed write themselves and exit 0.)"""
    command = [str(SCRIPT), "--db", str(tmp_path / "traces.db"), *args]
    proc = subprocess.Popen(
        command,
        env=_env(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    errors = proc.stderr.read().decode()
    argparse_own = args[0] in ("--help", "--version")
    expected = exit_codes.OK if argparse_own else exit_codes.CLOSED_PIPE
    assert proc.wait(timeout=60) == expected, errors
    assert "Traceback" not in errors and "error" not in errors.lower(), errors


def test_help_does_not_create_any_folder(tmp_path: Path) -> None:
    assert _run(tmp_path, "--help").returncode == 0
    assert not (tmp_path / "config").exists()
    assert not (tmp_path / "data").exists()


# -- bad usage and config: exit 2 ---------------------------------------------------------


def test_unknown_flag(tmp_path: Path) -> None:
    result = _run(tmp_path, "--bogus")
    assert result.returncode == exit_codes.USAGE
    assert "Traceback" not in result.stdout + result.stderr
    assert "unrecognized arguments: --bogus" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith("agent-console: error: ")


def test_malformed_config_file(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('theme = "nord"\ndb = = "x"\n', encoding="utf-8")
    result = _run(tmp_path, "--config", str(config))
    assert result.returncode == exit_codes.USAGE
    line = _one_error_line(result)
    assert f"{config}, line 2" in line


def test_malformed_user_config_file_in_the_platform_folder(tmp_path: Path) -> None:
    config = tmp_path / "config" / "agent-console" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[unclosed\n", encoding="utf-8")
    result = _run(tmp_path)
    assert result.returncode == exit_codes.USAGE
    line = _one_error_line(result)
    assert f"{config}, line 1" in line


def test_config_named_by_the_environment_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    result = _run(tmp_path, AGENT_CONSOLE_CONFIG=str(missing))
    assert result.returncode == exit_codes.USAGE
    line = _one_error_line(result)
    assert str(missing) in line and "does not exist" in line


def test_unknown_setting_in_config(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('theme = "nord"\nfont = "mono"\n', encoding="utf-8")
    result = _run(tmp_path, "--config", str(config))
    assert result.returncode == exit_codes.USAGE
    line = _one_error_line(result)
    assert f"{config}, line 2" in line and "'font'" in line and "known: db, theme" in line


def test_blank_theme_in_the_environment(tmp_path: Path) -> None:
    result = _run(tmp_path, AGENT_CONSOLE_THEME=" ")
    assert result.returncode == exit_codes.USAGE
    assert "AGENT_CONSOLE_THEME" in _one_error_line(result)


def test_config_errors_come_before_the_store_is_touched(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("theme = 1\n", encoding="utf-8")
    db = tmp_path / "traces.db"
    result = _run(tmp_path, "--config", str(config), "--db", str(db))
    assert result.returncode == exit_codes.USAGE
    assert not db.exists()
    assert not (tmp_path / "data").exists()


# -- the store cannot be opened: exit 5 ---------------------------------------------------


def test_db_that_is_random_bytes_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "noise.db"
    db.write_bytes(os.urandom(8192))
    before = _digest(db)
    result = _run(tmp_path, "--db", str(db))
    assert result.returncode == exit_codes.STORE
    line = _one_error_line(result)
    assert str(db) in line and "not a SQLite database" in line
    assert _digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noise.db"]  # no -wal, no -shm


def test_db_in_a_missing_folder(tmp_path: Path) -> None:
    db = tmp_path / "no" / "such" / "folder" / "traces.db"
    result = _run(tmp_path, "--db", str(db))
    assert result.returncode == exit_codes.STORE
    line = _one_error_line(result)
    assert f"folder {db.parent} does not exist" in line
    assert not (tmp_path / "no").exists()


def test_db_from_the_environment_in_a_missing_folder(tmp_path: Path) -> None:
    db = tmp_path / "gone" / "traces.db"
    result = _run(tmp_path, AGENT_CONSOLE_DB=str(db))
    assert result.returncode == exit_codes.STORE
    assert str(db.parent) in _one_error_line(result)


def test_db_written_by_a_newer_version_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    TraceStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099'")
    conn.close()
    before = _digest(db)
    result = _run(tmp_path, "--db", str(db))
    assert result.returncode == exit_codes.STORE
    line = _one_error_line(result)
    assert "0099" in line and "newer" in line and SCHEMA_HEAD in line
    assert _digest(db) == before
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [("0099",)]
    conn.close()


def test_someone_elses_sqlite_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    conn.close()
    before = _digest(db)
    result = _run(tmp_path, "--db", str(db))
    assert result.returncode == exit_codes.STORE
    assert "not an agent-console trace store" in _one_error_line(result)
    assert _digest(db) == before


def test_in_memory_db_is_refused(tmp_path: Path) -> None:
    for db in (":memory:", "sqlite://", "sqlite:///:memory:"):
        result = _run(tmp_path, "--db", db)
        assert result.returncode == exit_codes.STORE, db
        assert "in-memory" in _one_error_line(result)


def test_db_url_is_parsed_as_a_url_by_the_command(tmp_path: Path) -> None:
    # Refused for its missing folder, which shows the URL's path was understood.
    db = tmp_path / "missing" / "x.db"
    result = _run(tmp_path, "--db", f"sqlite:///{db}")
    assert result.returncode == exit_codes.STORE
    assert f"folder {db.parent} does not exist" in _one_error_line(result)


# -- a URL for --db, at the settings and store level --------------------------------------


def test_db_url_opens_a_store(tmp_path: Path) -> None:
    db = tmp_path / "url.db"
    url = f"sqlite:///{db}"
    assert url.startswith("sqlite:////")
    settings = load_settings(flags={"db": url})
    assert settings.database() == url
    with TraceStore(settings.database()) as store:
        assert store.where == str(db)
        session = store.create_session("via a URL")
    assert db.is_file()
    with TraceStore(db) as again:  # the same file, opened by path
        assert [s.id for s in again.list_sessions()] == [session.id]


def test_relative_db_path_is_resolved_against_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with TraceStore(load_settings(flags={"db": "rel.db"}).database()) as store:
        assert store.where == str(tmp_path / "rel.db")
    assert (tmp_path / "rel.db").is_file()


def test_exit_codes_are_distinct() -> None:
    codes = {k: v for k, v in vars(exit_codes).items() if k.isupper()}
    assert set(codes.values()) == {0, 1, 2, 3, 4, 5, 130, 141}
    # one code per outcome; the only shared one: a failed session and a bug both exit 1
    assert [k for k, v in codes.items() if v == 1] == ["INTERNAL", "FAILED"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_empty_db_flag_is_refused(tmp_path: Path) -> None:
    result = _run(tmp_path, "--db", " ")
    assert result.returncode == 2
    assert "--db is empty" in _one_error_line(result)
    assert not (tmp_path / "data").exists()  # the default store was not opened instead


def test_config_naming_a_folder(tmp_path: Path) -> None:
    result = _run(tmp_path, "--config", str(tmp_path))
    assert result.returncode == 2
    assert "is a folder" in _one_error_line(result)
