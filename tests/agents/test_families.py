"""Task families: every variant is deterministic, solvable by its operator's blocks in the
real sandbox and unsolved as given; the split keeps teaching and held-out apart; the CLI
and batch files name variants."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from agents import blocks, forms
from agents.batch import TasksFileError, read_tasks, wilson
from agents.forms import FORMS
from agents.sandbox import Kernel
from agents.tasks import TaskError, load_task, seed_workdir
from agents.tasks.families import FAMILIES, VARIANTS, as_script, parse_seeds, split, variant


def test_a_seed_always_makes_the_same_variant_and_seeds_differ_in_substance() -> None:
    for family in FAMILIES:
        assert variant(family, 7) == variant(family, 7)
        subjects = {
            (v.task.prompt, tuple(sorted(v.task.files.items())))
            for v in (variant(family, seed) for seed in range(VARIANTS))
        }
        assert len(subjects) >= 30, family
        # other names and other work, not only other numbers
        titles = {variant(family, seed).task.title for seed in range(VARIANTS)}
        assert len(titles) >= 8, family


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_variant_is_solved_by_its_operators_blocks_and_not_before(
    family: str, form: str, tmp_path: Path
) -> None:
    # the script blocks are the callbacks rewritten (`as_script`): a third of the seeds
    # covers each family's kinds of variant
    for seed in range(0, VARIANTS, 1 if form == forms.CALLBACK else 3):
        found = variant(family, seed)
        action, evaluation = found.blocks_for(form)
        assert forms.form_of(blocks.ACTION, form, action) == form
        work = tmp_path / str(seed)
        seed_workdir(found.task, work)
        with Kernel(work) as kernel:
            assert kernel.exec_block(found.task.checks, name="checks").ok
            before = [kernel.call_evaluation(n) for n in found.task.check_names]
            assert all(r.ok for r in before)
            assert not all(r.value is True for r in before), (family, seed)
            code = forms.kernel_code(blocks.EVALUATION, form, evaluation, timeout=20)
            check = kernel.exec_block(code, name="evaluation").registered["evaluation"][-1]
            own = kernel.call_evaluation(check)
            assert not (own.ok and own.value is True), (family, seed)
            code = forms.kernel_code(blocks.ACTION, form, action, timeout=20)
            defined = kernel.exec_block(code, name="action")
            assert defined.ok, (family, seed, defined.error)
            ran = kernel.call_action(defined.registered["action"][-1])
            assert ran.ok, (family, seed, ran.error)
            own = kernel.call_evaluation(check)
            assert own.ok and own.value is True, (family, seed, own.error)
            after = [kernel.call_evaluation(n) for n in found.task.check_names]
            assert all(r.ok and r.value is True for r in after), (family, seed, after)
        # the orientation names the variant's own files
        assert all(path in found.orientation for path in found.task.files if "__init__" not in path)


def test_the_split_is_fixed_disjoint_and_covers_every_seed() -> None:
    for family in FAMILIES:
        teach, held_out = split(family)
        assert (teach, held_out) == split(family)
        assert not set(teach) & set(held_out)
        assert sorted(teach + held_out) == list(range(VARIANTS))
        assert len(held_out) >= 30
    assert split("compute") != split("transform")


def test_family_tasks_load_by_name_and_bad_names_say_what_is_wrong() -> None:
    task = load_task("family:compute:3")
    assert task == variant("compute", 3).task
    assert task.name == "compute:3" and task.check_names
    assert load_task("family:transform").name.startswith("transform:")
    for ref, said in (
        ("family:nope:1", "no such task family"),
        ("family:compute:x", "seed must be a whole number"),
        ("family:compute:-1", "0 or more"),
        ("family:compute:1:2", "family:NAME:SEED"),
    ):
        with pytest.raises(TaskError, match=said):
            load_task(ref)


def test_the_wilson_interval() -> None:
    assert wilson(0, 30) == pytest.approx((0.0, 0.1135), abs=1e-4)
    assert wilson(15, 30) == pytest.approx((0.3315, 0.6685), abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)


def test_parse_seeds() -> None:
    assert parse_seeds("0-3,7") == [0, 1, 2, 3, 7]
    assert parse_seeds("5") == [5]
    for bad in ("a", "3-1", "1-", "0-99999"):
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_a_batch_line_names_a_family_and_a_range(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    lines = [
        {"family": "compute", "seeds": "0-2", "max_ticks": 2},
        {"task": "family:fix_bug:5"},
    ]
    tasks.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    specs, _ = read_tasks(tasks)
    assert [s["task"] for s in specs] == [
        "family:compute:0",
        "family:compute:1",
        "family:compute:2",
        "family:fix_bug:5",
    ]
    assert specs[0]["max_ticks"] == 2
    tasks.write_text(json.dumps({"family": "transform", "seeds": "held-out"}) + "\n")
    specs, _ = read_tasks(tasks)
    assert [s["task"] for s in specs] == [f"family:transform:{i}" for i in split("transform")[1]]
    for bad, said in (
        ({"family": "compute"}, "needs"),
        ({"family": "compute", "seeds": "2-1"}, "ends before"),
        ({"family": "nope", "seeds": "1"}, "no such task family"),
        ({"family": "compute", "seeds": "1", "task": "vigenere"}, "names no"),
        ({"task": "family:compute"}, "name the variant"),
        ({"family": "nope", "seeds": "held-out"}, "no such task family"),
    ):
        tasks.write_text(json.dumps(bad) + "\n")
        with pytest.raises(TasksFileError, match=said):
            read_tasks(tasks)


def test_a_callback_the_rewrite_does_not_know_is_taught_as_it_is_in_a_session_of_scripts() -> None:
    from tests.support.coin_family import coin

    odd = 'self.add_action("answer", lambda subagent: 42)'
    assert as_script(odd) is None
    assert as_script("def f(subagent):\n    subagent.run('ls')\nself.add_action(\"x\", f)") is None
    found = variant("compute", 3)
    made = coin(random.Random(1))
    other = replace(found, action=str(made["action"]), script_action=None)
    assert other.blocks_for(forms.SCRIPT)[0] == odd
    assert found.blocks_for(forms.SCRIPT)[0].startswith("# Write ")
