"""Escape sequences the model writes never reach the operator's terminal raw.

A terminal acts on what it is sent: OSC 52 sets the clipboard, OSC 0 the window title,
SGR 8 hides text, a carriage return overwrites a line. Code in the sandbox writes
`tell_operator` texts, the final message, evaluation titles and file names that a warning
names; these tests send them through a real `agent-console --query` (the real openai
backend, sandbox and store; the model a script, tests/support/scripted_vllm.py, so that it
writes the attack) and through the handler our log records go to, and look at the bytes
that came out: no control character a terminal acts on, and the text still there, escaped.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest

from agents.safe_text import escape_logs_without_handlers
from agents.sandbox import Kernel, sandbox_status
from agents.sandbox import workdir as workdir_module
from app import exit_codes
from tests.agents.test_sandbox import FAST, ok
from tests.app.test_cli import SCRIPT, _env
from tests.support.scripted_vllm import SERVED, scripted_vllm

pytestmark = [pytest.mark.cli, pytest.mark.timeout(180)]

#: Clipboard, title, hidden text, an 8-bit CSI that clears the screen, a bell, a line
#: overwritten.
ATTACK = "\x1b]52;c;b3duZWQ=\x07\x1b]0;owned\x07\x1b[8mhidden\x9b2J\x07\rover"
#: The same, as Python source (string literal escapes).
ATTACK_SOURCE = ATTACK.encode("unicode_escape").decode("ascii")
#: How the operator sees it.
SHOWN = r"\x1b]52;c;b3duZWQ=\x07\x1b]0;owned\x07\x1b[8mhidden\x9b2J\x07\x0dover"
#: What a terminal may act on: C0 but tab and line break, DEL, C1.
CONTROLS = {chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))} - {"\t", "\n"}


def sandboxed() -> None:
    status = sandbox_status()
    if not status.ok:
        pytest.skip(f"no sandbox here: {status.detail}")


#: What the model writes: its action tells the operator, leaves a file the write back must
#: leave out (a sparse file past the work dir's bytes, so a warning names it) and
#: finishes; its evaluation's title carries the attack too. Each carries the attack.
BLOCKS = {
    "orientation": "# Tell the operator, then finish.",
    "action": f"""def action_tell(subagent):
    attack = "{ATTACK_SOURCE}"
    subagent.tell_operator("told " + attack)
    with open("left " + attack, "wb") as f:
        f.truncate(2 << 20)
    subagent.finish("done " + attack)
    return "told"
self.add_action("Tell the operator", action_tell)""",
    "expectation": "# The operator is told and the session finishes.",
    "evaluation": f"""def told(subagent):
    return True
self.add_evaluation("checked " + "{ATTACK_SOURCE}", told)""",
}


def test_attack_escape_sequences_in_messages_and_file_names_reach_query_escaped(
    tmp_path: Path,
) -> None:
    """The real `agent-console --query` (openai backend, sandbox, store) with a scripted
    model: stdout (the final message) and stderr (progress, the agent's messages, the
    write back's warning) hold no control character, and every attack shows escaped."""
    sandboxed()
    with scripted_vllm(BLOCKS) as url:
        # fmt: off
        command = [
            str(SCRIPT), "--db", str(tmp_path / "traces.db"),
            "--backend", "openai", "--base-url", url, "--model", SERVED,
            "--approval", "auto", "--candidates", "1", "--escalation", "",
            "--block-tokens", "600", "--max-ticks", "1", "--example", "off",
            "--constrain", "off", "--memory", "off", "--workdir-bytes", str(1 << 20),
            "--query", "Tell me something.",
        ]
        # fmt: on
        result = subprocess.run(
            command,
            env=_env(tmp_path),
            cwd=tmp_path,
            capture_output=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    # bytes as written: text mode would turn a carriage return into a line break
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == exit_codes.OK, err
    assert not CONTROLS & set(out), repr(out)
    assert not CONTROLS & set(err), repr(err)
    assert out == f"done {SHOWN}\n"
    assert f"agent: told {SHOWN}\n" in err
    assert f"agent: done {SHOWN}\n" in err
    assert f"  checked {SHOWN}: passed\n" in err
    if workdir_module.can_mount() is None:  # the work dir is a tmpfs, written back
        warnings = [line for line in err.splitlines() if f"left {SHOWN}" in line]
        assert len(warnings) == 1 and "work dir" in warnings[0], err


def test_attack_a_file_name_with_escape_sequences_in_a_log_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name the model gave a file, in a warning of ours: the record holds it as the
    model wrote it; the handler that writes records out (Python's last resort, set up by
    `agent-console` for `--query`, the console and the commands) shows it escaped."""
    sandboxed()
    workdir = tmp_path / "work"
    workdir.mkdir()
    with Kernel(workdir, limits=FAST) as kernel:
        ok(kernel.exec_block(f'open("left {ATTACK_SOURCE}", "w").close()'))
    (name,) = os.listdir(workdir)  # as the host reads it back
    assert name == f"left {ATTACK}"
    with caplog.at_level(logging.WARNING, logger="agents.workdir"):
        logging.getLogger("agents.workdir").warning("the work dir kept %s", name)
    (record,) = caplog.records

    last_resort = logging.lastResort
    assert last_resort is not None
    capsys.readouterr()
    try:
        escape_logs_without_handlers()
        last_resort.handle(record)
    finally:
        last_resort.setFormatter(None)
    err = capsys.readouterr().err
    assert err == f"the work dir kept left {SHOWN}\n"
