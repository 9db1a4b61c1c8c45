"""The learning bench's plumbing on the tiny model (bench/learning.py; the figures are the
real model's): base, one teaching session, an SFT adapter trained on that session's
labels only and the held-out variants again with it, all kept under `--work`; run again,
it resumes and does nothing twice; from its rows alone, it does again only what the lost
store held. Other training settings are refused under a kept adapter's name and trained
beside it with `--tag`."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.worker, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def run_bench(model: Path, work: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "learning.py"),
            *("--model", str(model), "--work", str(work), "--out", str(work / "out.json")),
            *("--families", "compute", "--untaught", "", "--teach", "1", "--held-out", "1"),
            *("--kinds", "sft", "--epochs", "1", "--max-length", "512"),
            *("--candidates", "1", "--block-tokens", "24"),
            *more,
        ],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=ROOT,
    )


# In the long tier (1.5-2 minutes): the bench's whole run; the refusal below stays.
@pytest.mark.slow
def test_the_learning_bench_measures_teaches_trains_and_resumes(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    done = run_bench(tiny_model_dir, work)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (work / "rows.jsonl").open()]
    measured = [r for r in rows if "point" in r]
    assert [(r["point"], r["family"]) for r in measured] == [
        ("base", "compute"),
        ("sft-1", "compute"),
    ]
    assert measured[0]["ref"] == measured[1]["ref"]  # the same held-out variant, before and after
    (taught,) = [r for r in rows if "taught" in r]
    assert taught["taught"].startswith("compute:") and taught["taught"] != measured[0]["ref"]
    (trained,) = [r for r in rows if "trained" in r]
    assert trained["trained"] == "sft-1" and trained["rows"] > 0
    figures = json.loads((work / "out.json").read_text())
    assert figures["sft-1"]["operator"]["sessions"] == 1
    assert figures["sft-1"]["taught"]["n"] == 1

    again = run_bench(tiny_model_dir, work)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [json.loads(line) for line in (work / "rows.jsonl").open()] == rows

    # only the rows and the run's settings kept (bench/results, another machine): the
    # verdicts stand; the teaching session and the adapter, lost with the store, again
    restored = tmp_path / "restored"
    restored.mkdir()
    for name in ("rows.jsonl", "run.json"):
        (restored / name).write_text((work / name).read_text())
    redone = run_bench(tiny_model_dir, restored)
    assert redone.returncode == 0, redone.stderr[-3000:]
    added = [json.loads(line) for line in (restored / "rows.jsonl").open()][len(rows) :]
    assert [("taught" in r, r.get("trained"), r.get("again")) for r in added] == [
        (True, None, None),
        (False, "sft-1", True),
    ]

    # other training settings: refused under a kept adapter's name, trained beside it with
    # a tag, against the same base (not measured again)
    other = run_bench(tiny_model_dir, work, "--epochs", "2")
    assert other.returncode != 0
    assert other.stderr.strip().splitlines()[-1] == (
        "sft-1 was trained with epochs 1.0: give --tag to train another beside it"
    )
    assert [json.loads(line) for line in (work / "rows.jsonl").open()] == rows
    tagged = run_bench(tiny_model_dir, work, "--epochs", "2", "--tag", "e2")
    assert tagged.returncode == 0, tagged.stderr[-3000:]
    added = [json.loads(line) for line in (work / "rows.jsonl").open()][len(rows) :]
    assert [r.get("point") or r.get("trained") for r in added] == ["sft-1-e2", "sft-1-e2"]
    assert added[0]["training"]["epochs"] == "2.0"


def test_an_adapter_kept_from_other_teaching_sessions_is_refused(tmp_path: Path) -> None:
    """The starter sessions made again keep their path: an adapter kept from the old ones
    is not taken for one trained on the new."""
    spec = importlib.util.spec_from_file_location("learning", ROOT / "bench" / "learning.py")
    assert spec is not None and spec.loader is not None
    learning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(learning)
    sessions = tmp_path / "starter_sessions.db"
    sessions.write_bytes(b"the first sessions")
    args = argparse.Namespace(
        epochs=2.0, lr={"sft": 2e-4}, max_length=2048, start_from={}, changed_only=False,
        teaching_from=sessions,
    )  # fmt: skip
    row = {"trained": "sft-20", "training": learning.training_settings(args)}
    learning.check_training(tmp_path, "sft-20", row, args)  # the same sessions: kept
    sessions.write_bytes(b"the sessions made again")
    with pytest.raises(SystemExit, match="sft-20 was trained with teaching_sha256 "):
        learning.check_training(tmp_path, "sft-20", row, args)
