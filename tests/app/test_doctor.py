"""`agent-console doctor` as a real subprocess: one line per check, a fix under each
failure, exit 0 only when everything needed works."""

from __future__ import annotations

from pathlib import Path

from app import exit_codes
from storage import TraceStore
from storage.migrate import SCHEMA_HEAD
from tests.app.test_cli import _run
from tests.backends.vllm_server import free_port


def _lines(stdout: str) -> dict[str, str]:
    """Check name -> its line (the status word and the detail)."""
    found = {}
    for text in stdout.splitlines():
        if text.startswith(("ok ", "FAIL ")):
            status, rest = text.split(None, 1)
            name, _, detail = rest.partition(": ")
            found[name] = f"{status} {detail}"
    return found


def test_a_healthy_set_up_passes_every_check(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    TraceStore(db).close()
    result = _run(tmp_path, "--backend", "none", "--db", str(db), "doctor")
    assert result.returncode == exit_codes.OK, result.stdout + result.stderr
    lines = _lines(result.stdout)
    assert set(lines) == {"sandbox", "model", "trace store", "gpu", "disk"}
    assert all(text.startswith("ok ") for text in lines.values()), lines
    assert f"schema {SCHEMA_HEAD}" in lines["trace store"]
    assert "journal_mode wal" in lines["trace store"] and "integrity ok" in lines["trace store"]
    assert "bubblewrap" in lines["sandbox"]
    assert "GiB free in" in lines["disk"]
    assert "CUDA" in lines["gpu"]
    assert "Traceback" not in result.stderr


def test_a_file_that_is_not_a_store_and_a_silent_server_fail_with_fixes(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    db.write_bytes(b"these are my notes, not a database" * 100)
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = _run(tmp_path, "--base-url", url, "--db", str(db), "doctor")
    assert result.returncode == exit_codes.FAILED
    lines = _lines(result.stdout)
    assert (
        lines["trace store"].startswith("FAIL ") and "not a SQLite database" in lines["trace store"]
    )
    assert lines["model"].startswith("FAIL ") and "does not answer" in lines["model"]
    assert "fix: start one with `agent-console serve`" in result.stdout
    assert lines["sandbox"].startswith("ok ") and lines["disk"].startswith("ok ")
    assert db.read_bytes() == b"these are my notes, not a database" * 100  # left alone
    assert "Traceback" not in result.stderr


def test_the_model_line_is_a_model_that_loads_not_a_name_that_is_set(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """A folder that looks like a model (a config.json) but has no weights used to pass;
    the model is now loaded as a session would load it."""
    db = tmp_path / "traces.db"
    TraceStore(db).close()
    hollow = tmp_path / "hollow-model"
    hollow.mkdir()
    (hollow / "config.json").write_text('{"model_type": "qwen2"}')
    for model, works in ((tiny_model_dir, True), (hollow, False)):
        args = ("--backend", "transformers", "--model", str(model), "--db", str(db), "doctor")
        result = _run(tmp_path, *args)
        lines = _lines(result.stdout)
        assert "Traceback" not in result.stderr
        if works:
            assert result.returncode == exit_codes.OK, result.stdout + result.stderr
            assert lines["model"].startswith("ok ") and "loads on cpu in" in lines["model"]
        else:
            assert result.returncode == exit_codes.FAILED
            assert lines["model"].startswith("FAIL ") and str(hollow) in lines["model"]
            assert "fix: give a model folder with --model PATH" in result.stdout
