"""`agent-console improve` (`training.improve`): the promotion rule, the request checks,
and a small run on the tiny model end to end (rollouts, automatic labels, a training job,
the held-out measurement, the promotion decision), stopped in its first held-out step and resumed
from the store; the operator's labels win over the automatic ones in the dataset the job
trains on, row by row.

The tiny model writes noise, so the test family's checks decide by the variant alone: a
third of its variants pass whatever the model does (`coin`, tests/support/coin_family.py).
That makes solved and failed sessions a test can count on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents import batch as b
from agents.adapters import use_registered_adapter
from agents.backends import open_backend
from agents.runtime import RunOptions
from agents.settings import Settings
from agents.tasks.families import FAMILIES, split
from storage import BatchStatus, BatchTaskStatus, LabelValue, NodeStatus, TraceStore
from tests.support.coin_family import FAMILY, coin_passes
from training.datasets import iter_rows
from training.improve import (
    ImproveConfig,
    ImproveError,
    Improver,
    SideFigures,
    held_out_refs,
    promote_by_hand,
    promotes,
    round_line,
)
from training.rules import load_evidence

pytestmark = [pytest.mark.worker]

# -- the rule and the request ----------------------------------------------------------------


def test_promotion_needs_the_interval_above_the_current_rate() -> None:
    current = SideFigures("base", 1, 2, 10)  # 0.20
    assert promotes(SideFigures("a", 2, 9, 10), current)  # 0.90, interval from 0.60
    assert not promotes(SideFigures("a", 2, 4, 10), current)  # 0.40: within its interval
    assert not promotes(SideFigures("a", 2, 2, 10), current)


def test_a_bad_request_is_one_line() -> None:
    with pytest.raises(ImproveError, match="no such task family"):
        ImproveConfig(family="nope")
    teaching = len(split("compute")[0])
    with pytest.raises(ImproveError, match=f"--per-round {teaching + 1}: must be 1 to"):
        ImproveConfig(family="compute", per_round=teaching + 1)
    with pytest.raises(ImproveError, match="--rounds 0"):
        ImproveConfig(family="compute", rounds=0)
    with pytest.raises(ImproveError, match="--then 'grpo': must be one of kto, dpo, none"):
        ImproveConfig(family="compute", then="grpo")
    held_out = len(split("compute")[1])
    with pytest.raises(ImproveError, match=f"--held-out 10: must be 1 to {held_out - 25}"):
        ImproveConfig(family="compute", held_out_from=25)
    with pytest.raises(ImproveError, match="--held-out-from -1"):
        ImproveConfig(family="compute", held_out_from=-1)


def test_the_held_out_variants_start_where_asked() -> None:
    seeds = split("compute")[1]
    refs = held_out_refs(ImproveConfig(family="compute", held_out=3, held_out_from=6))
    assert refs == [f"family:compute:{seed}" for seed in seeds[6:9]]
    assert held_out_refs(ImproveConfig(family="compute", held_out=2))[0].endswith(f":{seeds[0]}")


def test_a_run_stored_before_the_preference_stage_trains_sft_only() -> None:
    stored = ImproveConfig(family="compute").to_config()
    assert stored["then"] == "kto"
    del stored["then"]
    assert ImproveConfig.from_config(stored).then == "none"


def test_a_round_line_says_each_step() -> None:
    line = round_line(
        {
            "round": 2,
            "rollouts": {"solved": 3, "n": 8, "tokens": 12_000, "seconds": 61.0},
            "labels": {"good": 3, "bad": 9},
            "train": {"adapter": "improve1-r2", "seconds": 40.0},
            "evaluate": {
                "current": {"adapter": "base", "batch": 1, "passed": 1, "n": 10},
                "candidate": {"adapter": "improve1-r2", "batch": 2, "passed": 4, "n": 10},
            },
            "verdict": "kept as data: base stays",
        }
    )
    assert line.startswith("round 2: 3/8 solved (12,000 tokens, 61 s)")
    assert "labels +3 -9" in line and "trained improve1-r2 (40 s)" in line
    assert "held-out 4/10 (0.17-0.69) against base 1/10 (0.02-0.40)" in line
    assert line.endswith("kept as data: base stays")


def test_a_round_with_nothing_trained_still_says_the_held_out_rate() -> None:
    line = round_line(
        {
            "round": 1,
            "rollouts": {"solved": 0, "n": 6, "tokens": 9_000, "seconds": 400.0},
            "labels": {"good": 0, "bad": 6},
            "train": {"skipped": "no solved session yet: nothing to train"},
            "evaluate": {"current": {"adapter": "base", "batch": 2, "passed": 0, "n": 8}},
            "verdict": "kept as data: no adapter trained",
        }
    )
    assert "not trained: no solved session yet" in line
    assert "held-out base 0/8 (0.00-0.32)" in line
    line = round_line(
        {"round": 2, "train": {"adapter": "improve1-r2", "seconds": 40.0},
         "prefer": {"skipped": "KTO needs good and bad labels"}}
    )  # fmt: skip
    assert "no preference stage: KTO needs good and bad labels" in line


def test_a_promotion_by_hand_survives_the_running_commands_next_save(
    store: TraceStore, tmp_path: Path
) -> None:
    """The console promotes round 1's adapter while `improve` runs round 2 in another
    process: that process's next write keeps the promotion, and its round 2 uses it."""
    config = ImproveConfig(family="compute", rounds=2).to_config()
    one = {"round": 1, "rollouts": {"sessions": []}, "labels": {"good": 1, "bad": 2},
           "train": {"adapter": "improve1-r1", "seconds": 1.0},
           "prefer": {"adapter": "improve1-r1-kto", "seconds": 1.0},
           "evaluate": {}, "verdict": "kept as data: base stays"}  # fmt: skip
    run = store.create_improvement("compute", config=config, state={"rounds": [one]})
    running = Improver(store, run, backend=None, run_batch=None, data_dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ImproveError, match="run 1 has no round 3"):
        promote_by_hand(store, run.id, 3)
    assert promote_by_hand(store, run.id, 1) == "improve1-r1-kto"  # the round's last stage
    running.round_state(2)["batch"] = 7
    running.save()
    stored = store.get_improvement(run.id).state
    assert stored["adapter"] == running.state["adapter"] == "improve1-r1-kto"
    assert stored["rounds"][0]["promoted_by_hand"] and stored["rounds"][1]["batch"] == 7


def test_only_the_rollouts_choose_by_the_checks(store: TraceStore, tmp_path: Path) -> None:
    """`choose_by_checks` reaches the rollouts' sessions (their batch tasks say it), never
    the held-out ones, whose pass rates are the run's figures."""
    config = ImproveConfig(family="compute", per_round=2, held_out=3, choose_by_checks=True)
    run = store.create_improvement("compute", config=config.to_config())
    specs: list[list[dict[str, object]]] = []

    def run_batch(batch_id: int, adapter: str | None) -> BatchStatus:
        specs.append([t.spec for t in store.batch_tasks(batch_id)])
        raise KeyboardInterrupt  # what a batch would run is all this test reads

    improver = Improver(store, run, backend=None, run_batch=run_batch, data_dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        improver.one_round(1)
    with pytest.raises(KeyboardInterrupt):
        improver.held_out(None)
    rollouts, held_out = specs
    assert len(rollouts) == 2 and all(s["choose_by_checks"] is True for s in rollouts)
    assert len(held_out) == 3 and not any("choose_by_checks" in s for s in held_out)


# -- a small run, end to end -----------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_small_run_end_to_end_stopped_and_resumed(
    store: TraceStore, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(FAMILIES, "coin", FAMILY)
    teaching, held_out = split("coin")
    per_round, held = 3, 3
    first_round = teaching[:per_round]
    assert any(map(coin_passes, first_round)) and not all(map(coin_passes, first_round))
    config = ImproveConfig(
        family="coin", rounds=2, per_round=per_round, held_out=held, epochs=1.0,
        base_model=str(tiny_model_dir), max_steps=2,
    )  # fmt: skip
    run = store.create_improvement("coin", config=config.to_config())
    settings = Settings(backend="transformers", model=str(tiny_model_dir))
    backend = open_backend(settings)
    options = RunOptions(
        candidates=1, escalation=(), block_tokens=16, max_ticks=1, approval="auto",
        action_timeout=10.0, memory=False, seed=3,
    )  # fmt: skip
    batches: list[int] = []
    stop_at = {"batch": 2}  # the second batch: round 1's held-out measurement

    def run_batch(batch_id: int, adapter: str | None) -> BatchStatus:
        batches.append(batch_id)
        if len(batches) == stop_at["batch"]:
            raise KeyboardInterrupt  # killed here: nothing of this batch ran
        use_registered_adapter(store, backend, adapter)
        context = b.WorkerContext(store, backend, options, tmp_path / "sessions")
        return b.run_local(context, batch_id, 1).status

    lines: list[str] = []
    try:
        improver = Improver(store, run, backend, run_batch, data_dir=tmp_path / "data",
                            say=lines.append, poll=0.2)  # fmt: skip
        with pytest.raises(KeyboardInterrupt):
            improver.go()
        # Killed in round 1's held-out step: its rollouts, labels and job are stored.
        stored = store.get_improvement(run.id)
        one = stored.state["rounds"][0]
        assert {"rollouts", "labels", "train"} <= set(one) and "verdict" not in one
        solved = [t for t in store.batch_tasks(one["batch"]) if t.result["checks_passed"]]
        assert one["rollouts"]["solved"] == len(solved) == sum(map(coin_passes, first_round))
        assert one["labels"]["good"] == len(solved)
        assert one["train"]["adapter"] == f"improve{run.id}-r1"
        job = store.get_job(one["job"])
        assert job.config["cpu_threads"] == os.cpu_count()  # the run waits: every core
        # KTO on top of the SFT adapter, from the same sessions' good and bad labels.
        assert one["prefer"]["adapter"] == f"improve{run.id}-r1-kto"
        kto = store.get_job(one["prefer_job"])
        assert kto.kind.value == "kto" and kto.config["start_from"] == f"improve{run.id}-r1"
        assert kto.config["sessions"] == one["rollouts"]["sessions"]

        # The operator reads a failed rollout and labels its action good; the checks'
        # bad label on it stays in the history, outranked.
        failed = next(t for t in store.batch_tasks(one["batch"]) if not t.result["checks_passed"])
        ran = {NodeStatus.EXECUTED, NodeStatus.FAILED}
        action = next(
            n for n in store.tree(failed.session_id) if n.kind == "action" and n.status in ran
        )
        assert store.label_of(action.id).automatic  # type: ignore[union-attr]
        store.add_label(action.id, LabelValue.GOOD)
        rows = list(iter_rows(store, "sft", session_ids=one["rollouts"]["sessions"]))
        by_node = {row["node_id"]: row for row in rows}
        assert action.id in by_node  # the operator's good label wins over the checks' bad
        for row in rows:  # every row is a solved session's path or the operator's block
            evidence = load_evidence(store, row["session_id"])
            label = evidence.labels.get(row["node_id"])
            assert row["node_id"] == action.id or row["session_id"] in {
                t.session_id for t in solved
            }, row
            assert label is None or label.value is LabelValue.GOOD, row

        # Resumed from the store: round 1 goes on from its held-out step, round 2 runs.
        stop_at["batch"] = 0
        again = Improver(store, store.get_improvement(run.id), backend, run_batch,
                         data_dir=tmp_path / "data", say=lines.append, poll=0.2)  # fmt: skip
        done = again.go()
    finally:
        backend.close()
    assert done.status == "completed"
    rounds = done.state["rounds"]
    assert [r["round"] for r in rounds] == [1, 2]
    assert rounds[0]["job"] == job.id  # trained once, not again on the resume
    for this in rounds:
        assert this["verdict"] in ("promoted",) or this["verdict"].startswith("kept as data")
        tasks = store.batch_tasks(this["batch"])
        assert len(tasks) == per_round and all(t.runs == 1 for t in tasks)
        assert all(
            t.status in (BatchTaskStatus.COMPLETED, BatchTaskStatus.TRUNCATED) for t in tasks
        )
    # The held-out figures: the coin's checks decide, so every side scores the same.
    measured = done.state["held_out"]
    expected = sum(map(coin_passes, held_out[:held]))
    assert {side["passed"] for side in measured.values()} == {expected}
    assert rounds[0]["evaluate"]["candidate"]["adapter"] == f"improve{run.id}-r1-kto"
    assert rounds[0]["prefer_job"] == kto.id  # trained once too
    assert rounds[0]["verdict"] == "kept as data: base stays"
    assert len(lines) == 2 and lines[0].startswith("round 1: ")
    # Round 2 trained on both rounds' sessions: more examples than round 1 alone.
    assert rounds[1]["train"]["examples"] >= rounds[0]["train"]["examples"]
