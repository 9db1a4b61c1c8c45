"""The channel between the sandboxed kernel and the console, fuzzed through a real kernel.

Block code can write anything to the kernel's answer pipe and end the kernel any way it
likes. Whatever it does, the console side returns a failed CallResult (or raises only
its own SandboxError), never another exception, and a restarted kernel takes the next
call; through the runtime, the action fails with a clear outcome and the session goes
on. Frames are generated from a fixed seed, so a failure replays.

Each generated call writes many stray frames (objects with ids no request has, holding
random JSON of every type, forged answers' fields of the wrong types) and, in most calls,
ends on one the console cannot take: bytes that are not JSON, invalid UTF-8, a lone
surrogate, NaN, a 5,000-digit number, nesting past `kernel.MAX_DEPTH` or past Python's
recursion limit, a length over the answer cap, a torn frame, a closed pipe. Then every
exit status 0-255 and every signal. Skips without bwrap unless
AGENT_CONSOLE_REQUIRE_SANDBOX=1 (tests/reliability/test_sandbox_attacks.py).
"""

from __future__ import annotations

import base64
import json
import random
import signal
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents import blocks
from agents.approval import Answer
from agents.sandbox import CallResult, Kernel, Limits
from agents.sandbox.kernel import MAX_DEPTH
from storage import Author, NodeStatus, SessionStatus, TraceStore
from tests.reliability.test_sandbox_attacks import _bwrap_present  # noqa: F401 (autouse)
from tests.support.answer_task import SOLVE, TASK
from tests.support.runs import make_runtime

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: Short wall clock: a stop signal (SIGSTOP, SIGTSTP, ...) leaves the kernel waiting.
LIMITS = Limits(wall_seconds=3, cpu_seconds=2, memory_bytes=512 << 20, tmp_bytes=4 << 20)
FRAMES = 10_000
CALLS = 100
SEED = 20261125


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    work = tmp_path / "work"
    work.mkdir()
    with Kernel(work, limits=LIMITS) as opened:
        yield opened


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def random_json(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(8 if depth > 0 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 2**63, -(2**70), rng.randrange(-(10**9), 10**9)])
    if kind == 3:
        return rng.choice([0.5, -1e308, 1e-300, rng.random()])
    if kind == 4:
        return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0xD7FF)]))
                       for _ in range(rng.randrange(12)))  # fmt: skip
    if kind == 5:
        return [random_json(rng, depth - 1) for _ in range(rng.randrange(4))]
    keys = ["ok", "value", "error", "stdout", "stderr", "messages", "registered", "finished"]
    return {
        rng.choice([*keys, "x", ""]): random_json(rng, depth - 1) for _ in range(rng.randrange(5))
    }


def stray(rng: random.Random) -> bytes:
    """An object the console must skip: its id is one no request ever has."""
    answer = random_json(rng, 6)
    answer = answer if isinstance(answer, dict) else {"value": answer}
    ident = rng.choice([None, "1", -1, 0.5, [1], {"id": 1}, 10**12 + rng.randrange(10**6)])
    if ident is not None or rng.random() < 0.5:
        answer["id"] = ident
    else:
        answer.pop("id", None)
    return frame(json.dumps(answer).encode())


def deep(levels: int) -> bytes:
    return b'{"id": 1, "value": ' + b"[" * levels + b"]" * levels + b"}"


#: Frames the console cannot take, each with the code that writes it; the call fails.
FATAL: dict[str, Callable[[random.Random], tuple[bytes, str]]] = {
    "not json": lambda rng: (frame(rng.randbytes(rng.randrange(1, 200))), ""),
    "invalid utf-8": lambda rng: (frame(b'{"id": 1, "stdout": "\xff\xfe\xc3("}'), ""),
    "lone surrogate": lambda rng: (frame(b'{"id": 1, "stdout": "\\udcff"}'), ""),
    "nan": lambda rng: (frame(b'{"id": 1, "ok": true, "value": NaN}'), ""),
    "infinity": lambda rng: (frame(b'{"id": 1, "value": [-Infinity]}'), ""),
    "5000 digits": lambda rng: (frame(b'{"id": 1, "value": 1' + b"7" * 5000 + b"}"), ""),
    "past the depth": lambda rng: (frame(deep(MAX_DEPTH + rng.randrange(1, 50))), ""),
    "past recursion": lambda rng: (frame(deep(rng.randrange(2_000, 100_000))), ""),
    "not an object": lambda rng: (frame(json.dumps(random_json(rng, 0)).encode()), ""),
    "empty": lambda rng: (frame(b""), ""),
    "over the cap": lambda rng: (struct.pack(">I", LIMITS.result_bytes + rng.randrange(1, 2**31)), ""),
    "torn frame": lambda rng: (struct.pack(">I", 100) + b'{"id": ', "os._exit(3)"),
    "torn header": lambda rng: (b"\x00\x00", "os._exit(0)"),
    "closed pipe": lambda rng: (b"", "os.close(fd)"),
}  # fmt: skip


def block(data: bytes, then: str) -> str:
    return (
        "import os, base64\n"
        "fd = self._kernel.responses_fd\n"
        f"data = memoryview(base64.b64decode({base64.b64encode(data).decode()!r}))\n"
        "while data:\n"
        "    data = data[os.write(fd, data):]\n"
        f"{then}\n"
    )


def survived(kernel: Kernel, result: Any) -> CallResult:
    """The call gave a CallResult; a dead kernel is restarted and takes the next call."""
    assert isinstance(result, CallResult)
    if not kernel.alive:
        kernel.restart()
    return result


def test_ten_thousand_generated_frames_fail_their_call_never_the_console(kernel: Kernel) -> None:
    rng = random.Random(SEED)
    written = 0
    classes: dict[str, int] = {}
    for _ in range(CALLS):
        frames = [stray(rng) for _ in range(FRAMES // CALLS)]
        fatal = rng.choice([*FATAL, None])  # about one call in 15 ends cleanly
        then = ""
        if fatal is not None:
            last, then = FATAL[fatal](rng)
            frames.append(last)
            classes[fatal] = classes.get(fatal, 0) + 1
        written += len(frames)
        result = survived(kernel, kernel.exec_block(block(b"".join(frames), then), name="fuzz"))
        if fatal is None:
            assert result.ok, result.error  # strays are skipped: the real answer came
        else:
            assert not result.ok and result.killed in ("output", "crashed"), (fatal, result)
            assert result.error and "\n" not in result.error, result.error
    assert written >= FRAMES
    assert set(classes) == set(FATAL), f"a class of frame was never tried: {classes}"
    assert kernel.exec_block("print('after', 2 + 2)").stdout == "after 4\n"


def test_every_exit_status_and_every_signal_fail_the_call_never_the_console(
    kernel: Kernel,
) -> None:
    said: dict[str, set[str]] = {}
    for status in range(256):
        result = survived(kernel, kernel.exec_block(f"import os\nos._exit({status})"))
        assert not result.ok and result.killed in ("crashed", "memory", "cpu"), (status, result)
        said.setdefault(result.killed or "", set()).add(result.error or "")
    assert "the kernel exited with status 200" in said["crashed"]
    assert any("died of SIGSEGV" in e for e in said["crashed"])
    # ignored by default (CHLD, CONT, URG, WINCH), by Python (PIPE), by the kernel (XFSZ),
    # or dropped by Linux for an orphaned process group (TSTP, TTIN, TTOU); SIGSTOP stops
    # the kernel until the wall clock kills it
    harmless = {signal.SIGCHLD, signal.SIGCONT, signal.SIGURG, signal.SIGWINCH, signal.SIGPIPE,
                signal.SIGXFSZ, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}  # fmt: skip
    failed = set()
    for number in sorted(int(n) for n in signal.valid_signals()):
        result = survived(kernel, kernel.exec_block(f"import os\nos.kill(os.getpid(), {number})"))
        if not result.ok:
            # the block's own traceback (SIGINT), or one line saying how the kernel ended
            assert result.error and (not result.killed or "\n" not in result.error), result
            failed.add(number)
    assert failed == {int(n) for n in signal.valid_signals()} - harmless
    assert kernel.exec_block("print('still here')").stdout == "still here\n"


# -- through the runtime: the action fails, the session goes on ------------------------------

ATTACKS = {
    "exit 200": "import os\nos._exit(200)\n",
    "a real-time signal": "import os, signal\nos.kill(os.getpid(), signal.SIGRTMIN + 6)\n",
    "nesting past the recursion limit": (
        "import os, struct\n"
        "body = b'{\"id\": 1, \"value\": ' + b'[' * 50000 + b']' * 50000 + b'}'\n"
        "os.write(self._kernel.responses_fd, struct.pack('>I', len(body)) + body)\n"
    ),
    # answers forged for this call's id and the next ones, all written before the real
    # answer: this call and the runtime's next ones (clearing the callbacks) get them
    "forged answers ahead": (
        "import json, os, struct\n"
        "for ident in range(1, 200):\n"
        "    body = json.dumps({'id': ident, 'ok': False, 'value': 7}).encode()\n"
        "    os.write(self._kernel.responses_fd, struct.pack('>I', len(body)) + body)\n"
    ),
}


def action(attack: str) -> str:
    return f"def attack(subagent):\n    exec({attack!r}, globals())\nself.add_action('Attack', attack)\n"


@pytest.mark.parametrize("name", list(ATTACKS))
def test_an_attacking_action_fails_and_the_session_goes_on_to_solve_the_task(
    name: str, backend: object, tmp_path: Path
) -> None:
    with TraceStore(tmp_path / "traces.db") as store:
        runtime, _ = make_runtime(
            store,
            backend,
            tmp_path,
            # the fix, as often as the operator is asked: a call cut short by the
            # kernel's restart fails, and the operator writes the fix again
            [lambda r: Answer.edit(action(ATTACKS[name]))] + [lambda r: Answer.edit(SOLVE)] * 4,
            task=TASK,
            candidates=1,
            escalation=(),
            block_tokens=12,
            max_ticks=2,
            action_timeout=5,
        )
        outcome = runtime.run()
        assert outcome.status is SessionStatus.COMPLETED, outcome
        edits = [n for n in store.tree(outcome.session_id) if n.author is Author.OPERATOR]
        attacked, solved = store.get_node(edits[0].id), store.get_node(edits[-1].id)
        assert solved.status is NodeStatus.EXECUTED, solved.meta
        assert attacked.status is NodeStatus.FAILED, attacked.meta
        if name != "forged answers ahead":
            assert "kernel" in attacked.meta["error"], attacked.meta
        else:  # the runtime's last line of defence took the sandbox's error
            said = [n.text for n in store.tree(outcome.session_id) if n.kind == blocks.ERROR]
            assert any(t.startswith("the sandbox failed: ") for t in said), said
