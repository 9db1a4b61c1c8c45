"""A block whose every candidate repeats an earlier block gets one more round, drawn
hotter where the model cannot be banned from repeating (a chat model, or a backend
without the ban): at a low temperature a model says its last answer again word for word,
and a retry that changes nothing wastes the tick.

The model is a script (tests/support/scripted_vllm.py) through the real openai backend,
runtime, sandbox and store: it writes the same blocks every tick."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents import blocks
from agents.backends.openai_backend import OpenAIBackend
from agents.runtime import HOT_TEMPERATURE, Outcome
from agents.sandbox import sandbox_status
from storage import Node, NodeStatus, Session, SessionStatus, TraceStore
from tests.support.answer_task import TASK
from tests.support.runs import make_runtime
from tests.support.scripted_vllm import SERVED, scripted_vllm

pytestmark = pytest.mark.timeout(120)

#: An action that runs and a check that never passes: every tick is tried again, and the
#: script writes the same action again.
BLOCKS = {
    "orientation": "# Write the note again.",
    "action": """def action_note(subagent):
    subagent.write_file("note.txt", "same")
    return "wrote note.txt"
self.add_action("Write the note", action_note)""",
    "expectation": "# note.txt says same.",
    "evaluation": """def never(subagent):
    return False
self.add_evaluation("never passes", never)""",
}


def run_scripted(
    tmp_path: Path, script: dict[str, str], **opts: object
) -> tuple[Outcome, list[Node], Session]:
    """A session of the scripted model at temperature 0.3, 2 candidates a block, approval
    auto: how it ended, its tree and its stored session."""
    status = sandbox_status()
    if not status.ok:
        pytest.skip(f"no sandbox here: {status.detail}")
    with scripted_vllm(script) as url, TraceStore(tmp_path / "traces.db") as store:
        backend = OpenAIBackend(url, SERVED, timeout=30)
        try:
            runtime, _ = make_runtime(
                store,
                backend,
                tmp_path,
                **{
                    "temperature": 0.3,
                    "candidates": 2,
                    "escalation": (),
                    "block_tokens": 400,
                    "example": False,
                    "constrain": False,
                    "memory": False,
                    "approval": "auto",
                    **opts,
                },
            )
            outcome = runtime.run()
        finally:
            backend.close()
        return outcome, store.tree(outcome.session_id), store.get_session(outcome.session_id)


def test_a_block_of_copies_gets_one_more_round_drawn_hotter(tmp_path: Path) -> None:
    _, nodes, _ = run_scripted(tmp_path, BLOCKS, max_ticks=2)
    actions = {tick: [n for n in nodes if n.kind == blocks.ACTION and n.tick == tick]
               for tick in (1, 2)}  # fmt: skip
    # the first tick's action is new: one round, at the session's temperature
    assert {(n.sampling["round"], n.sampling["temperature"]) for n in actions[1]} == {(0, 0.3)}
    # the second's repeats it: every candidate is a copy, so a hotter round follows
    rounds = sorted((n.sampling["round"], n.sampling["temperature"]) for n in actions[2])
    assert rounds == [(0, 0.3), (0, 0.3), (1, HOT_TEMPERATURE), (1, HOT_TEMPERATURE)]
    assert all(n.meta.get("copy") for n in actions[2])
    chosen = [n for n in actions[2] if n.status is not NodeStatus.ALTERNATE]
    assert len(chosen) == 1


#: Script blocks: the action writes note.txt as it was already written, every tick; the
#: check script fails, so each tick asks for another try.
SCRIPT_BLOCKS = {
    "orientation": "# Write the note again.",
    "action": "# file: note.txt\nsame",
    "expectation": "# note.txt says same.",
    "evaluation": "# the note is not good enough\nraise SystemExit(1)",
}


def test_a_model_that_keeps_its_answer_ends_the_session(tmp_path: Path) -> None:
    """When every candidate of an action, the hotter round's too, writes the files as
    they already are, the model keeps its answer: the tick ends there (no evaluation, no
    further tries) and the session completes, saying why; it does not spend its ticks
    saying the same again."""
    from agents.runtime.tick import KEPT

    outcome, nodes, session = run_scripted(
        tmp_path, SCRIPT_BLOCKS, max_ticks=4, attempts=3, form="script"
    )
    assert outcome.status is SessionStatus.COMPLETED and outcome.reason == KEPT
    assert session.settings.get("status_reason") == KEPT
    assert outcome.ticks == 2
    tried = [n for n in nodes if n.kind == blocks.ACTION and n.tick == 2]
    assert [n.status for n in tried if n.status is not NodeStatus.ALTERNATE] == [
        NodeStatus.FAILED
    ]  # one try, not three
    assert not [n for n in nodes if n.kind == blocks.EVALUATION and n.tick == 2]
    assert [n.tick for n in nodes if n.kind == blocks.OUTCOME] == [1, 2]


def test_writing_the_tasks_own_file_back_is_not_an_answer_kept(tmp_path: Path) -> None:
    """Before the model has answered, the files are the task's: an action that writes one
    back unchanged (HumanEval/68's first action wrote the stub back) gets its other tries
    and ticks; before, the session ended there as "the model kept its answer"."""
    from agents.runtime.tick import KEPT

    stub = {**SCRIPT_BLOCKS, "action": "# file: question.txt\nWhat is six times seven?\n"}
    outcome, nodes, _ = run_scripted(tmp_path, stub, max_ticks=2, attempts=2, form="script")
    assert outcome.reason != KEPT, outcome
    assert outcome.ticks == 2
    tried = [n for n in nodes if n.kind == blocks.ACTION and n.status is not NodeStatus.ALTERNATE]
    assert [n.tick for n in tried] == [1, 1, 2, 2]  # every try of every tick
    assert all(n.status is NodeStatus.FAILED for n in tried)


#: An action that writes solution.py whole, then goes on into a test file the token limit
#: cuts (the coder's greedy answer to HumanEval/0 did: the cut file did not parse).
CUT_BLOCKS = {
    **SCRIPT_BLOCKS,
    "action": "# solution.py\ndef f():\n    return 1\n\n# test_solution.py\n"
    + "assert f() == 1\n" * 40,
    "evaluation": "# f is one\nfrom solution import f\nassert f() == 1",
}


def test_a_file_block_cut_by_the_token_limit_is_judged_by_the_files_it_writes(
    tmp_path: Path,
) -> None:
    """The block is stored as written and its cut file is not written; its ranking
    judges what runs, so the test file the limit cut costs it no syntax penalty."""
    outcome, nodes, _ = run_scripted(
        tmp_path, CUT_BLOCKS, max_ticks=1, form="script", block_tokens=120
    )
    actions = [n for n in nodes if n.kind == blocks.ACTION]
    assert actions and all(n.truncated and "# test_solution.py" in n.text for n in actions)
    assert all(n.score_parts == {"evaluator": n.score_parts["evaluator"]} for n in actions)
    ran = [n for n in actions if n.status is NodeStatus.EXECUTED]
    assert len(ran) == 1
    work = tmp_path / "sessions" / str(outcome.session_id) / "work"
    assert (work / "solution.py").read_text() == "def f():\n    return 1\n"
    assert not (work / "test_solution.py").exists()


#: One file, longer than the first try's room: the limit cuts it before it ends.
LONG_FILE = {
    **CUT_BLOCKS,
    "action": '# solution.py\ndef f():\n    """' + "One, always. " * 12 + '"""\n    return 1\n',
}


#: A context (scripted tokens) in which the second try of `LONG_FILE` made longer has room
#: for 120 new tokens but not 240 (found by trying: 2,100 to 2,150 do; below, 120 does not fit)
CONTEXT_FOR_120 = 2125


def test_a_file_the_limit_cut_is_asked_for_again_with_more_room(tmp_path: Path) -> None:
    """A try whose only file the token limit cut changes nothing; asked again with the
    same room the model writes the same file, cut the same (the coder's HumanEval/96 and
    /132: 25 minutes so). The next try has twice the room, and the file is written."""
    from agents.runtime.gate import MAX_ROOM

    outcome, nodes, _ = run_scripted(
        tmp_path, LONG_FILE, max_ticks=1, attempts=3, form="script", block_tokens=120
    )
    tried = [n for n in nodes if n.kind == blocks.ACTION and n.status is not NodeStatus.ALTERNATE]
    assert [(n.status, n.sampling["max_tokens"]) for n in tried] == [
        (NodeStatus.FAILED, 120),
        (NodeStatus.EXECUTED, 240),
    ]
    work = tmp_path / "sessions" / str(outcome.session_id) / "work"
    assert "return 1" in (work / "solution.py").read_text()
    # the room grows no further than MAX_ROOM times the options'
    longer = {**LONG_FILE, "action": LONG_FILE["action"] + "#" * 1000}
    (tmp_path / "longer").mkdir()
    _, nodes, _ = run_scripted(
        tmp_path / "longer", longer, max_ticks=1, attempts=4, form="script", block_tokens=120
    )
    tried = [n for n in nodes if n.kind == blocks.ACTION and n.status is not NodeStatus.ALTERNATE]
    assert [n.sampling["max_tokens"] for n in tried] == [120, 240, 120 * MAX_ROOM, 120 * MAX_ROOM]
    # where the context has no room for more, the try keeps the options' room
    (tmp_path / "full").mkdir()
    _, nodes, _ = run_scripted(
        tmp_path / "full", longer, max_ticks=1, attempts=2, form="script", block_tokens=120,
        context_tokens=CONTEXT_FOR_120,
    )  # fmt: skip
    tried = [n for n in nodes if n.kind == blocks.ACTION and n.status is not NodeStatus.ALTERNATE]
    assert [n.sampling["max_tokens"] for n in tried] == [120, 120]


#: A whole file that says the task's text again: in script form no copy (only an earlier
#: action would be); a check that says the action's file again is one.
SAYS_AGAIN = {
    **SCRIPT_BLOCKS,
    "action": "# notes.txt\n" + TASK.prompt + "\n",
    "evaluation": "# notes.txt\n" + TASK.prompt + "\n",
}


def test_an_action_is_a_copy_only_of_an_earlier_action(tmp_path: Path) -> None:
    _, nodes, _ = run_scripted(tmp_path, SAYS_AGAIN, max_ticks=2, form="script")
    first = [n for n in nodes if n.tick == 1 and n.kind == blocks.ACTION]
    assert first and not any("repetition" in n.score_parts for n in first)
    assert all(n.sampling["round"] == 0 for n in first)  # no hotter round was needed
    checks = [n for n in nodes if n.tick == 1 and n.kind == blocks.EVALUATION]
    assert checks and all("repetition" in n.score_parts for n in checks)
    # the second tick's action says the first's again: that is a copy
    again = [n for n in nodes if n.tick == 2 and n.kind == blocks.ACTION]
    assert again and all("repetition" in n.score_parts for n in again)


class Answers(dict[str, str]):
    """The scripted model's blocks, but its action says the same file another way from
    its second request on (`again`)."""

    def __init__(self, script: dict[str, str], again: str) -> None:
        super().__init__(script)
        self.again = again
        self.asked = 0

    def __getitem__(self, kind: str) -> str:
        if kind == blocks.ACTION:
            self.asked += 1
            if self.asked > 1:
                return self.again
        return super().__getitem__(kind)


def test_an_answer_written_again_as_it_is_ends_the_session_though_no_copy(
    tmp_path: Path,
) -> None:
    """The second tick's action names the file another way (no copy of the first's text),
    but writes it as it is: the model kept its answer (the coder wrote HumanEval/20's
    wrong answer nine times, each padded differently)."""
    from agents.runtime.tick import KEPT

    script = Answers(SCRIPT_BLOCKS, "# note.txt\nsame")
    outcome, nodes, _ = run_scripted(tmp_path, script, max_ticks=4, attempts=3, form="script")
    assert outcome.reason == KEPT, outcome
    assert outcome.ticks == 2
    again = [n for n in nodes if n.tick == 2 and n.kind == blocks.ACTION]
    assert again and not any(n.meta.get("copy") for n in again)
    assert [n.status for n in again if n.status is not NodeStatus.ALTERNATE] == [NodeStatus.FAILED]


#: A whole solution.py, then blank lines up to the token limit (the coder pads so).
PADDED = {
    **SCRIPT_BLOCKS,
    "action": "# solution.py\ndef f():\n    return 1\n" + "\n" * 600,
}


def test_a_file_block_cut_in_its_padding_is_whole(tmp_path: Path) -> None:
    """The limit cut only the blank lines after the file: the block is whole and the file
    written (read as cut, the coder's answer was never written), and written again it ends
    the session."""
    from agents.runtime.tick import KEPT

    outcome, nodes, _ = run_scripted(
        tmp_path, PADDED, max_ticks=3, attempts=2, form="script", block_tokens=200
    )
    actions = [n for n in nodes if n.kind == blocks.ACTION and n.status is not NodeStatus.ALTERNATE]
    assert actions and all(n.sampling["finish_reason"] == "length" for n in actions)
    assert not any(n.truncated for n in actions)
    work = tmp_path / "sessions" / str(outcome.session_id) / "work"
    assert (work / "solution.py").read_text() == "def f():\n    return 1\n"
    assert [n.status for n in actions] == [NodeStatus.EXECUTED, NodeStatus.FAILED]
    assert outcome.reason == KEPT, outcome
