"""Datasets from the store: rows re-rendered exactly as the agent saw them, checked against
the hash stored at sampling time, in the forms trl and RL trainers load.

Sessions come from the real runtime on the tiny model (so every model-written block
carries the hash of the very prompt it was sampled after) or, for the pair rules, from
hand-built trees without hashes (`tests/support/label_trees.py`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents import blocks
from agents.approval import Answer
from app import exit_codes
from app.cli import run
from storage import Author, LabelScope, LabelValue, Node, NodeStatus, TraceStore
from tests.support.answer_task import SOLVE
from tests.support.label_trees import SessionBuilder
from tests.support.runs import make_runtime
from training.datasets import (
    BuildReport,
    DatasetKind,
    hf_tokenizer,
    iter_rows,
    parse_since,
    write_jsonl,
)
from training.rules import count_training_data

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "traces.db"


@pytest.fixture
def sqlite_store(db: Path) -> Iterator[TraceStore]:
    with TraceStore(db) as opened:
        yield opened


def edited_session(store: TraceStore, backend: object, tmp_path: Path) -> int:
    """One real tick on the tiny model where the operator rewrites the action."""
    runtime, _ = make_runtime(store, backend, tmp_path, [lambda r: Answer.edit(SOLVE)])
    return runtime.run().session_id


def labelled_edit(store: TraceStore, backend: object, tmp_path: Path) -> tuple[list[Node], Node]:
    """`edited_session` with a good path label over its whole chain (every model-written
    block on it is data): its tree and the operator's edit."""
    tree = store.tree(edited_session(store, backend, tmp_path))
    store.add_label(tree[-1].id, LabelValue.GOOD, scope=LabelScope.PATH)
    return tree, next(n for n in tree if n.author is Author.OPERATOR)


def rows(store: TraceStore, kind: str, **options: Any) -> list[dict[str, Any]]:
    return list(iter_rows(store, kind, **options))


def test_sft_rows_are_the_exact_prompts_the_model_saw(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    tree, edit = labelled_edit(sqlite_store, backend, tmp_path)
    report = BuildReport(DatasetKind.SFT)
    got = rows(sqlite_store, "sft", report=report)
    assert report.mismatches == [] and report.unchecked == 0
    by_id = {row["node_id"]: row for row in got}
    assert edit.id in by_id
    assert by_id[edit.id]["completion"] == SOLVE + "\n#endblock"
    model_rows = [by_id[n.id] for n in tree if n.id in by_id and n.author is Author.MODEL]
    # (the tiny model's evaluation block is noise that raises: judged wrong, not data)
    assert {row["kind"] for row in model_rows} >= {"orientation", "expectation"}
    for row in model_rows:
        node = sqlite_store.get_node(row["node_id"])
        # the hash was taken of the prefix handed to backend.generate at sampling time
        assert blocks.prompt_hash(row["prompt"]) == node.prompt_hash
        assert row["prompt"].endswith(f"#timestamp {node.meta['timestamp']}\n\n")
        assert row["completion"] == node.text.rstrip("\n") + "\n#endblock"
    # never runtime-written blocks, never the model's original the operator replaced
    assert all(sqlite_store.get_node(i).author is not Author.RUNTIME for i in by_id)
    assert edit.edited_from_id not in by_id


def test_changed_only_keeps_the_blocks_the_operator_wrote(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    _, edit = labelled_edit(sqlite_store, backend, tmp_path)
    every = [row["node_id"] for row in rows(sqlite_store, "sft")]
    assert edit.id in every and len(every) > 1  # the model's approved blocks are data too
    assert [row["node_id"] for row in rows(sqlite_store, "sft", changed_only=True)] == [edit.id]
    assert count_training_data(sqlite_store, changed_only=True).sft_examples == 1
    kto = {row["node_id"]: row["label"] for row in rows(sqlite_store, "kto")}
    changed = {row["node_id"]: row["label"] for row in rows(sqlite_store, "kto", changed_only=True)}
    # the undesirable side (the model's original the operator rewrote) stays
    assert changed == {i: good for i, good in kto.items() if not good or i == edit.id}
    assert changed[edit.edited_from_id] is False


def test_a_prompt_that_no_longer_renders_as_sampled_is_reported_not_used(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    session_id = edited_session(sqlite_store, backend, tmp_path)
    tree = sqlite_store.tree(session_id)
    sqlite_store.add_label(tree[-1].id, LabelValue.GOOD, scope=LabelScope.PATH)
    before = {row["node_id"] for row in rows(sqlite_store, "sft")}
    # the stored header of the block after the operator's edit changes: it and every
    # block after it now render a different prompt than the one they were sampled after
    edit = next(n for n in tree if n.author is Author.OPERATOR)
    target = next(n for n in tree if n.parent_id == edit.id and n.status is NodeStatus.CHOSEN)
    sqlite_store.update_node(target.id, meta={"timestamp": 1.0})
    report = BuildReport(DatasetKind.SFT)
    after = {row["node_id"] for row in rows(sqlite_store, "sft", report=report)}
    later = {n.id for n in tree if n.id >= target.id}
    assert edit.id in after and before & later
    assert after == before - later
    assert {m.node_id for m in report.mismatches} == before & later
    assert "no longer renders" in report.describe()


def test_dpo_rows_for_each_rule(sqlite_store: TraceStore) -> None:
    s = SessionBuilder(sqlite_store, "rules")
    edit = s.edited(1)
    picked = s.picked(2)
    labelled = s.executed(3, approve=False, alternates=1)
    sqlite_store.add_label(labelled.action.id, LabelValue.GOOD)
    sqlite_store.add_label(labelled.alternates[0].id, LabelValue.BAD)
    got = {row["rule"]: row for row in rows(sqlite_store, "dpo")}
    assert set(got) == {"edit", "pick", "labels"}
    assert (got["edit"]["chosen_id"], got["edit"]["rejected_id"]) == (
        edit.action.id,
        edit.more["edited"].id,
    )
    assert got["edit"]["chosen"] == edit.action.text + "\n#endblock"
    assert got["edit"]["rejected"] == edit.more["edited"].text + "\n#endblock"
    assert got["pick"]["chosen_id"] == picked.action.id
    assert got["pick"]["rejected_id"] == picked.more["replaced"].id
    assert got["labels"]["rejected_id"] == labelled.alternates[0].id
    # both sides continue the same prompt: the context up to their shared parent
    for row in got.values():
        chosen = sqlite_store.get_node(row["chosen_id"])
        path = sqlite_store.path(chosen.parent_id or 0)
        assert row["prompt"] == blocks.block_prompt(path, chosen)


def test_dpo_from_a_real_edit_checks_both_sides_hashes(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    edited_session(sqlite_store, backend, tmp_path)
    report = BuildReport(DatasetKind.DPO)
    (row,) = rows(sqlite_store, "dpo", report=report)
    assert report.unchecked == 0 and report.mismatches == []
    original = sqlite_store.get_node(row["rejected_id"])
    assert original.status is NodeStatus.EDITED
    assert row["chosen"] == SOLVE + "\n#endblock"
    assert blocks.prompt_hash(row["prompt"]) == original.prompt_hash


def test_token_rows_are_what_was_sampled(
    sqlite_store: TraceStore, backend: object, tmp_path: Path, tiny_model_dir: Path
) -> None:
    session_id = edited_session(sqlite_store, backend, tmp_path)
    tokenize = hf_tokenizer(str(tiny_model_dir))
    got = rows(sqlite_store, "tokens", tokenize=tokenize)
    tree = {n.id: n for n in sqlite_store.tree(session_id, with_tokens=True)}
    sampled = [n for n in tree.values() if n.author is Author.MODEL]
    assert len(got) == len(sampled) + 1  # and the operator's edit
    for row in got:
        node = tree[row["node_id"]]
        assert row["status"] == sqlite_store.get_session(session_id).status.value
        n_prompt, n_done = len(row["prompt_ids"]), len(row["completion_ids"])
        assert row["loss_mask"] == [0] * n_prompt + [1] * n_done
        if node.author is Author.MODEL:
            assert row["completion_ids"] == node.token_ids
            assert row["logprobs"] == pytest.approx(node.logprobs)
            assert row["prompt_ids"] == backend.tokenize(  # type: ignore[attr-defined]
                blocks.block_prompt(sqlite_store.path(node.parent_id or 0), node)
            )
        else:
            assert row["logprobs"] is None and row["sft_example"] is True
            assert row["completion_ids"] == tokenize(SOLVE + "\n#endblock")
    original = next(r for r in got if r["node_status"] == "edited")
    assert original["sft_example"] is False


def test_jsonl_loads_in_trl_as_written(sqlite_store: TraceStore, tmp_path: Path) -> None:
    from datasets import load_dataset
    from trl.data_utils import is_conversational

    s = SessionBuilder(sqlite_store, "trl")
    s.edited(1)
    for kind, chat in (("sft", False), ("dpo", False), ("sft", True), ("dpo", True)):
        out = tmp_path / f"{kind}-{chat}.jsonl"
        report = write_jsonl(sqlite_store, kind, out, chat=chat)
        assert report.rows == 1 and report.out == out
        loaded = load_dataset("json", data_files=str(out), split="train")
        row = loaded[0]
        assert is_conversational(row) is chat
        columns = {"prompt", "completion"} if kind == "sft" else {"prompt", "chosen", "rejected"}
        assert columns <= set(loaded.column_names)
    assert not list(tmp_path.glob(".*partial"))


def test_building_reads_only_the_examples_and_their_ancestors(sqlite_store: TraceStore) -> None:
    s = SessionBuilder(sqlite_store, "long")
    ticks = [s.executed(tick, approve=False) for tick in range(1, 60)]
    early = ticks[1].orientation
    sqlite_store.add_label(early.id, LabelValue.GOOD)
    report = BuildReport(DatasetKind.SFT)
    assert [row["node_id"] for row in rows(sqlite_store, "sft", report=report)] == [early.id]
    assert report.blocks_read == len(sqlite_store.path(early.id))
    assert report.blocks_read < sqlite_store.count_nodes(s.id) / 20


def test_since_and_session_filters(sqlite_store: TraceStore) -> None:
    first = SessionBuilder(sqlite_store, "old")
    first.edited(1)
    cut = parse_since("2999-01-01")
    assert rows(sqlite_store, "sft", since=cut) == []
    second = SessionBuilder(sqlite_store, "new")
    second.edited(1)
    assert {r["session_id"] for r in rows(sqlite_store, "sft", session_ids=[second.id])} == {
        second.id
    }
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        parse_since("last tuesday")


# -- the CLI ---------------------------------------------------------------------------------


def test_export_cli_writes_each_form(
    db: Path, tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with TraceStore(db) as store:
        SessionBuilder(store, "cli").edited(1)
    for kind in ("sft", "dpo", "tokens"):
        out = tmp_path / f"{kind}.jsonl"
        extra = ["--tokenizer", str(tiny_model_dir)] if kind == "tokens" else []
        assert run(["--db", str(db), "export", kind, "--out", str(out), *extra]) == exit_codes.OK
        lines = out.read_text().splitlines()
        assert lines and all(json.loads(line) for line in lines)
        assert f"to {out}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["export", "sft", "--out", "x.jsonl", "--since", "soon"], "--since: 'soon' is not a date"),
        (["export", "sft", "--out", "x.jsonl", "--session", "99"], "--session 99: no such"),
        (["export", "tokens", "--out", "x.jsonl", "--chat"], "--chat goes with sft or dpo"),
        (["export", "sft", "--out", "x.jsonl", "--tokenizer", "m"], "--tokenizer goes with"),
        (["export", "sft", "--out", "/proc/nope/x.jsonl"], "cannot write"),
        (
            ["export", "tokens", "--out", "x.jsonl", "--tokenizer", "/nonexistent/model"],
            "cannot load the tokenizer",
        ),
    ],
)
def test_export_cli_bad_input_is_one_line(
    db: Path,
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with TraceStore(db) as store:
        SessionBuilder(store, "cli").edited(1)
    code = run(["--db", str(db), *argv])
    err = capsys.readouterr().err
    assert code != exit_codes.OK
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
