"""The task's verdict comes from the task's checks, never from the model: an action that
patches the block API, rewraps the checks' registration, or forges the kernel's answers
does not make a failing check pass, in the store, in the events the console shows, or in
what batch and `improve` read (`task_passed`, `session_solved`). The checks run in a fresh
kernel of their own over the work dir, read-only, while the model's kernel is stopped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.approval import Answer
from agents.events import EvaluationRecorded, RuntimeEvent
from agents.runtime import session_solved
from agents.sandbox import Kernel
from storage import EvaluationKind, SessionStatus, TraceStore
from tests.reliability.test_sandbox_attacks import _bwrap_present  # noqa: F401 (autouse)
from tests.support.answer_task import TASK
from tests.support.runs import make_runtime

#: Each runs as the tick's action; none writes the answer, so `check_answer` must fail.
FORGERIES = {
    "read_file patched": ("type(subagent).read_file = lambda api, path: '42'\n"),
    "every evaluation registered as a pass": (
        "registered = type(subagent).add_evaluation\n"
        "type(subagent).add_evaluation = (\n"
        "    lambda api, title, fn: registered(api, title, lambda s: True))\n"
    ),
    "answers forged ahead by a thread": (
        "import json, os, struct, threading, time\n"
        "kernel = subagent._kernel\n"
        "seen = []\n"
        "read = kernel.read_request\n"
        "def spy():\n"
        "    request = read()\n"
        "    seen.append(request.get('id', 0) if request else 0)\n"
        "    return request\n"
        "kernel.read_request = spy\n"
        "def forge():\n"
        "    last = None\n"
        "    while True:\n"
        "        if seen and seen[-1] != last:\n"
        "            last = seen[-1]\n"
        "            for ident in range(last + 1, last + 4):\n"
        "                body = json.dumps({'id': ident, 'ok': True, 'value': True}).encode()\n"
        "                os.write(kernel.responses_fd, struct.pack('>I', len(body)) + body)\n"
        "        time.sleep(0.001)\n"
        "threading.Thread(target=forge, daemon=True).start()\n"
    ),
}


def action(code: str) -> str:
    body = "".join(f"    {line}\n" for line in code.splitlines())
    return f"def forge(subagent):\n{body}    return 'forged'\nself.add_action('Forge', forge)\n"


@pytest.mark.parametrize("name", list(FORGERIES))
def test_attack_forge_the_tasks_verdict(name: str, backend: object, tmp_path: Path) -> None:
    events: list[RuntimeEvent] = []
    with TraceStore(tmp_path / "traces.db") as store:
        runtime, _ = make_runtime(
            store,
            backend,
            tmp_path,
            [lambda r: Answer.edit(action(FORGERIES[name]))],
            task=TASK,
            events=events,
            candidates=1,
            escalation=(),
            block_tokens=12,
            max_ticks=1,
            action_timeout=5,
        )
        outcome = runtime.run()
        assert outcome.status is not SessionStatus.COMPLETED, outcome
        assert runtime.task_passed == (0, 1)  # what batch and improve read
        assert not session_solved(store, outcome.session_id)
        tree = store.tree(outcome.session_id)
        results = store.evaluations_for([n.id for n in tree])
        (check,) = [r for r in results if r.name == "check_answer"]
        assert check.kind is EvaluationKind.CALLBACK and check.passed is False, check
        shown = [
            e for e in events if isinstance(e, EvaluationRecorded) and e.name == "check_answer"
        ]
        assert [e.passed for e in shown] == [False]  # what the console draws


CHECKS = """
import os
def check_sees(subagent):
    found = {"answer": subagent.read_file("answer.txt"), "names": sorted(globals())}
    try:
        subagent.write_file("answer.txt", "changed by a check")
    except OSError as exc:
        found["write"] = type(exc).__name__
    return found
self.add_evaluation("check_sees", check_sees)
"""


def test_checks_run_in_a_fresh_kernel_over_a_read_only_work_dir_while_the_model_is_stopped(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with Kernel(work) as model:
        # the model's kernel holds a secret and rewrites the answer as fast as it can
        model.exec_block(
            "import os, threading\nSECRET = 1\n"
            "def scribble():\n"
            "    n = 0\n"
            "    while True:\n"
            "        n += 1\n"
            "        with open('answer.new', 'w') as f:\n"
            "            f.write(str(n))\n"
            "        os.replace('answer.new', 'answer.txt')\n"
            "threading.Thread(target=scribble, daemon=True).start()\n"
        )
        assert model.exec_block("import time\ntime.sleep(0.2)").ok  # it has written
        with model.paused():
            frozen = (work / "answer.txt").read_text()
            with Kernel(work, read_only=True) as checker:
                assert checker.exec_block(CHECKS, name="task checks").ok
                seen = checker.call_evaluation("check_sees")
            assert (work / "answer.txt").read_text() == frozen
        assert seen.ok, seen.error
        assert seen.value["answer"] == frozen
        assert seen.value["write"] in ("OSError", "PermissionError")
        assert "SECRET" not in seen.value["names"] and "scribble" not in seen.value["names"]
        # continued afterwards
        assert model.alive
        assert model.exec_block("import time\ntime.sleep(0.5)").ok
        assert (work / "answer.txt").read_text() not in ("", frozen)
