"""`agent-console improve` on the command line: a bad request is one line and exit 2,
`--list` shows the runs and their rounds, and a run that does not exist or is completed
cannot be resumed. (The rounds themselves: tests/training/test_improve.py.)"""

from __future__ import annotations

from pathlib import Path

from app import exit_codes
from storage import TraceStore
from tests.app.test_cli import _run


def test_bad_requests_are_one_line(tmp_path: Path) -> None:
    db = str(tmp_path / "traces.db")
    for args, wanted in (
        ((), "give one of --family NAME, --resume ID or --list"),
        (("--family", "nope"), "--family 'nope': no such task family"),
        (("--family", "compute", "--rounds", "0"), "--rounds 0: must be 1 to 100"),
        (("--family", "compute", "--list"), "give one of"),
        (("--resume", "7"), "--resume 7: no such run"),
    ):
        result = _run(tmp_path, "--db", db, "improve", *args)
        assert result.returncode == exit_codes.USAGE, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and wanted in lines[0], (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_list_shows_each_run_and_its_rounds(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    result = _run(tmp_path, "--db", str(db), "improve", "--list")
    assert result.returncode == exit_codes.OK
    assert "no improvement runs yet" in result.stdout
    with TraceStore(db) as store:
        run = store.create_improvement(
            "compute",
            config={"rounds": 2},
            state={"rounds": [{"round": 1, "labels": {"good": 0, "bad": 4},
                               "train": {"skipped": "no solved session yet: nothing to train"},
                               "verdict": "kept as data: no adapter trained"}]},
        )  # fmt: skip
        store.update_improvement(run.id, status="completed")
    result = _run(tmp_path, "--db", str(db), "improve", "--list")
    assert f"run {run.id}  compute  completed  in use: base" in result.stdout
    assert "round 1: labels +0 -4 · not trained: no solved session yet" in result.stdout
    again = _run(tmp_path, "--db", str(db), "improve", "--resume", str(run.id))
    assert again.returncode == exit_codes.USAGE
    assert f"run {run.id} is completed: nothing to resume" in again.stderr
