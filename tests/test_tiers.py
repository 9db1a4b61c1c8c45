"""`make test` keeps every real part at least once: moving a test to the long tier
(`slow`) must not take the last proof of one of them out of the README's test command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cli]

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Each real part, and a test of `make test` that exercises it for real.
REAL_PARTS = {
    "the sandbox (bwrap + seccomp) against attacks": "tests/reliability/test_sandbox_attacks.py::",
    "SQLite": "tests/storage/test_store.py::test_reopening_keeps_data[sqlite]",
    "PostgreSQL": "tests/storage/test_store.py::test_reopening_keeps_data[postgresql]",
    "a vLLM server with a LoRA loaded at run time": (
        "tests/backends/test_openai_backend.py::test_lora_adapter_loaded_at_run_time_is_used"
    ),
    "a Textual app under Pilot, with snapshots": "tests/app/test_snapshots.py::",
    "the console in tmux": "tests/app/test_tmux.py::",
    "Ray": "tests/agents/test_batch.py::test_the_same_batch_as_ray_tasks_writing_to_postgresql",
    "a training job with trl on the tiny model": (
        "tests/training/test_jobs.py::test_job_runs_to_completion_in_a_detached_worker[sft]"
    ),
    "the offline real model, one full tick, streamed": (
        "tests/real/test_coder.py::test_a_tick_of_the_default_model"
    ),
}


def tiers() -> dict[str, list[str]]:
    """The tests of each tier ("make-test", "slow"), from one collection: the markers
    decide, as `-m "not slow"` and `-m slow` do."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "tests.support.tier_listing", "-o", "addopts="],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found: dict[str, list[str]] = {"make-test": [], "slow": []}
    for line in done.stdout.splitlines():
        if line.startswith("TIER "):
            _, tier, nodeid = line.split(" ", 2)
            found[tier].append(nodeid)
    return found


def test_every_real_part_is_in_make_test_and_the_long_tier_is_not() -> None:
    found = tiers()
    ids = found["make-test"]
    missing = [
        part for part, test in REAL_PARTS.items() if not any(i.startswith(test) for i in ids)
    ]
    assert not missing, f"no test of `make test` exercises: {missing}"
    long_tier = found["slow"]
    assert any(i.startswith("tests/real/test_learning.py::") for i in long_tier)
    assert not set(long_tier) & set(ids)
