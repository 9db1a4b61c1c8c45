"""The scripted operator on the tiny model: teaching sessions go through the runtime's
approval gate and the store's labels, and become SFT examples and DPO pairs that hold the
variant's own blocks; a held-out variant is never taught."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents import forms
from agents.backends import Backend
from agents.runtime import Outcome, Runtime, session_solved
from agents.tasks.families import Variant, split, variant
from storage import Author, JobKind, JobStatus, LabelValue, NodeStatus, TraceStore, Verdict
from tests.support.runs import options
from training.datasets import iter_rows
from training.job_files import log_path
from training.jobs import JobError, JobOptions, follow, queue_job
from training.teach import (
    HeldOutError,
    ScriptedOperator,
    Tally,
    same_action,
    same_code,
    teach_sessions,
)

pytestmark = [pytest.mark.worker]


def test_same_code_ignores_formatting_and_comments() -> None:
    assert same_code("x = 1\n# note\ny = [1,2]", "x = 1\ny = [1, 2]\n")
    assert not same_code("x = 1", "x = 2")
    assert not same_code("x = (", "x = 1")
    # a file listing is the same action only for the same files
    assert same_action("# a.py\nx = 1\n", "```python\n# a.py\nx  =  1\n```", forms.SCRIPT)
    assert not same_action("# a.py\nx = 1\n", "# b.py\nx = 1\n", forms.SCRIPT)
    assert same_action("# a.py\nx = 1\n", "# b.py\nx = 1\n", forms.CALLBACK)


def test_teaching_sessions_store_the_operators_work_and_train_kto(
    tmp_path: Path, backend: object, tiny_model_dir: Path
) -> None:
    store = TraceStore(tmp_path / "traces.db")
    taught = [variant("compute", seed) for seed in split("compute")[0][:2]]

    def runtime_for(v: Variant, operator: ScriptedOperator) -> Runtime:
        return Runtime(
            store,
            backend,  # type: ignore[arg-type]
            v.task,
            options(block_tokens=48, escalation=(), attempts=2),
            sessions_dir=tmp_path / "sessions",
            asker=operator,
        )

    def solved(outcome: Outcome) -> bool:
        tree = store.tree(outcome.session_id)
        return any(n.kind == "outcome" and n.meta.get("task_passed") for n in tree)

    tally = teach_sessions(taught, runtime_for, solved, reject_every=2)
    assert len(tally.sessions) == 2
    # the tiny model's actions are garbage: the first is rejected with a reason, the rest
    # rewritten to the variant's fix, which solves the task
    assert tally.rejected == 1 and tally.edited == 2 and tally.approved == 0
    for session_id, v in zip(tally.sessions, taught, strict=True):
        tree = store.tree(session_id)
        verdicts = [d.verdict for d in store.decisions_for(n.id for n in tree)]
        assert Verdict.EDIT in verdicts
        edits = [n for n in tree if n.author is Author.OPERATOR]
        assert {n.kind for n in edits} >= {"action", "orientation"}
        assert any(n.text == v.orientation for n in edits)
        # the rewritten orientation's original is marked, and the session was solved
        assert any(n.kind == "orientation" and n.status is NodeStatus.EDITED for n in tree)
        assert solved(Outcome(session_id, store.get_session(session_id).status, ""))
        assert any(
            lab.value is LabelValue.GOOD for lab in store.session_labels(session_id).values()
        )
    assert tally.actions == 1 + 2 + tally.rewritten + tally.labelled

    sft = list(iter_rows(store, "sft"))
    texts = {row["completion"] for row in sft}
    for v in taught:
        assert any(v.action in text for text in texts)
        assert any(v.orientation in text for text in texts)
    dpo = list(iter_rows(store, "dpo"))
    assert any(taught[0].orientation in row["chosen"] for row in dpo)

    # KTO: the same blocks, unpaired, with the rejected, rewritten originals as bad ones
    kto = list(iter_rows(store, "kto"))
    assert {row["label"] for row in kto} == {True, False}
    assert sum(row["label"] for row in kto) == len(sft)
    job = queue_job(
        store,
        JobOptions(JobKind.KTO, str(tiny_model_dir), max_steps=2, batch_size=2, save_steps=100),
        data_dir=tmp_path / "data",
    )
    assert job.config["rows_at_queue"] == len(kto)
    for _ in follow(store, job.id, poll=0.3):
        pass
    job = store.get_job(job.id)
    assert job.status is JobStatus.COMPLETED, job.error
    assert store.get_adapter(job.name).metrics["dataset"]["kind"] == "kto"

    # DPO on top of it: the job starts from the adapter's weights
    with pytest.raises(JobError, match="no adapter has that name"):
        queue_job(
            store,
            JobOptions(JobKind.DPO, str(tiny_model_dir), start_from="nope"),
            data_dir=tmp_path / "data",
        )
    on_top = queue_job(
        store,
        JobOptions(
            JobKind.DPO, str(tiny_model_dir), max_steps=1, save_steps=100, start_from=job.name
        ),
        data_dir=tmp_path / "data",
    )
    for _ in follow(store, on_top.id, poll=0.3):
        pass
    on_top = store.get_job(on_top.id)
    assert on_top.status is JobStatus.COMPLETED, on_top.error
    assert f"starting from adapter {job.name}" in log_path(on_top).read_text()
    store.close()


def teach_in_scripts(
    store: TraceStore, backend: Backend, taught: Variant, tmp_path: Path
) -> tuple[Tally, Runtime]:
    """One teaching session of `taught` in a session of scripts, never rejecting first:
    the operator's tally and the session's runtime."""
    runtimes: list[Runtime] = []

    def runtime_for(v: Variant, operator: ScriptedOperator) -> Runtime:
        runtime = Runtime(
            store,
            backend,
            v.task,
            options(form=forms.SCRIPT, candidates=1, escalation=(), attempts=2, block_tokens=400),
            sessions_dir=tmp_path / "sessions",
            asker=operator,
        )
        runtimes.append(runtime)
        return runtime

    tally = teach_sessions(
        [taught], runtime_for, lambda o: session_solved(store, o.session_id), reject_every=0
    )
    return tally, runtimes[0]


def test_a_held_out_variant_is_never_taught() -> None:
    held_out = variant("fix_bug", split("fix_bug")[1][0])
    with pytest.raises(HeldOutError, match="held-out"):
        teach_sessions([held_out], lambda v, o: pytest.fail("ran"), lambda o: True)


def test_in_a_session_of_scripts_the_operator_approves_a_script_fix_and_rewrites_a_wrong_check(
    tmp_path: Path,
) -> None:
    """The model (a script through the real openai backend) writes the variant's own fix
    as a file listing, and a check that fails right work: the operator approves the fix,
    and rewrites the check to the variant's check script, which the SFT rows then hold."""
    from agents.backends.openai_backend import OpenAIBackend
    from tests.support.scripted_vllm import SERVED, scripted_vllm

    taught = variant("fix_bug", split("fix_bug")[0][0])
    action, evaluation = taught.blocks_for(forms.SCRIPT)
    script = {
        "orientation": taught.orientation,
        "action": action,
        "expectation": "# The tests pass.",
        "evaluation": "# the fix is in\nassert False, 'not yet'\n",
    }
    with scripted_vllm(script) as url, TraceStore(tmp_path / "traces.db") as store:
        backend = OpenAIBackend(url, SERVED, timeout=30)

        tally, _ = teach_in_scripts(store, backend, taught, tmp_path)
        assert (tally.approved, tally.edited, tally.rejected) == (1, 0, 0)
        assert tally.rewritten == 1  # the check that failed the right fix
        (session_id,) = tally.sessions
        assert session_solved(store, session_id)
        written = [n for n in store.tree(session_id) if n.author is Author.OPERATOR]
        assert [n.text for n in written] == [evaluation]
        completions = {row["completion"] for row in iter_rows(store, "sft")}
        assert any(action.strip() in text for text in completions)
        assert any(evaluation.strip() in text for text in completions)
        backend.close()


#: the compute variant's task done in other words than its own fix: another program
OTHER_WORDS = """\
# Average the credits into value.txt
import csv
with open('grades.csv') as source:
    credits = [float(row['credits']) for row in csv.DictReader(source)]
with open('value.txt', 'w') as out:
    out.write(f"{sum(credits) / len(credits):.2f}")
"""
WRONG = OTHER_WORDS.replace("/ len(credits)", "/ (len(credits) + 1)")


@pytest.mark.parametrize(("proposed", "right"), [(OTHER_WORDS, True), (WRONG, False)])
def test_the_operator_approves_right_work_in_other_words_and_rewrites_wrong_work(
    tmp_path: Path, proposed: str, right: bool
) -> None:
    """An action that is not the variant's fix is tried on a copy of the work dir against
    the task's checks: right work is approved (and left to run), wrong work rewritten to
    the fix; the trial changes nothing of the session's files."""
    from agents.backends.openai_backend import OpenAIBackend
    from tests.support.scripted_vllm import SERVED, scripted_vllm

    taught = variant("compute", split("compute")[0][0])
    action, evaluation = taught.blocks_for(forms.SCRIPT)
    assert not same_action(proposed, action, forms.SCRIPT)
    script = {
        "orientation": taught.orientation,
        "action": proposed,
        "expectation": "# value.txt holds the mean.",
        "evaluation": evaluation,
    }
    with scripted_vllm(script) as url, TraceStore(tmp_path / "traces.db") as store:
        backend = OpenAIBackend(url, SERVED, timeout=30)
        tally, runtime = teach_in_scripts(store, backend, taught, tmp_path)
        assert (tally.approved, tally.edited) == ((1, 0) if right else (0, 1))
        (session_id,) = tally.sessions
        assert session_solved(store, session_id)  # the right work ran, or the fix did
        ran = [
            n
            for n in store.tree(session_id)
            if n.kind == "action" and n.status is NodeStatus.EXECUTED
        ]
        assert [n.text.strip() for n in ran] == [(proposed if right else action).strip()]
        # a trial runs on a copy: the session's files stay as the action that ran left them
        workdir = runtime.workdir
        written = (workdir / "value.txt").read_text()
        assert not runtime.passes_checks(WRONG)
        assert (workdir / "value.txt").read_text() == written
        backend.close()
