"""The default model: Qwen2.5-Coder-0.5B-Instruct, converted from its PyPI chunk packages,
one headless tick through the real CLI and the real sandbox with the defaults its registry
entry gives (chat turns, script blocks)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from agents import blocks, forms
from agents.backends import registry
from storage import Author, NodeStatus, TraceStore
from tests.support.real_tick import headless_tick

pytestmark = [pytest.mark.real, pytest.mark.cli, pytest.mark.timeout(900)]
#: The most seconds a block may take to its first streamed tokens on a 2-core CI machine.
FIRST_TOKENS_S = 30.0


def test_a_tick_of_the_default_model(qwen_dir: Path, tmp_path: Path) -> None:
    """The session's first line names the coder and its defaults, the first tokens come
    within seconds, and the chosen action ran in the sandbox as a script or a file; the
    blocks say how they were asked for, and the runtime wrote every report."""
    assert qwen_dir.name == registry.DEFAULT
    started = time.monotonic()
    # one candidate a block, the greedy one: on a 2-core CPU a second costs nearly as much
    # again (48 tokens: 11.5 s for one, 21.2 s for two), and this tick is make test's longest
    lines, db = headless_tick(qwen_dir, "family:text_edit:2", tmp_path, candidates=1)
    text = "\n".join(lines)
    assert "Traceback" not in text
    first = next(line for line in lines if line.startswith("session 1: qwen2.5-coder-0.5b"))
    assert "(offline, instruct)" in first
    assert "1 candidate a block at temperature 0.3, the first greedy" in first
    assert "chat prompts, script blocks" in first
    streamed = [line for line in lines if "to the first tokens" in line]
    assert streamed and streamed[0].startswith("tick 1 orientation: sampling 1 candidate ")
    seconds = float(streamed[0].split("(")[1].split(" s to")[0])
    assert seconds < FIRST_TOKENS_S, streamed[0]
    print(f"whole run: {time.monotonic() - started:.0f} s", file=sys.stderr)

    with TraceStore(str(db)) as store:
        session = store.list_sessions()[0]
        nodes = store.tree(session.id)
    genesis = nodes[0]
    assert genesis.kind == blocks.GENESIS and "a complete Python program" in genesis.text
    model = [n for n in nodes if n.author is Author.MODEL]
    assert {n.kind for n in model} >= {blocks.ORIENTATION, blocks.ACTION, blocks.EVALUATION}
    assert all(n.meta.get("prompt") == "chat" and n.meta.get("form") == "script" for n in model)
    # the runtime writes every report: no debug block, no `#q:` or header in a body
    assert blocks.DEBUG not in {n.kind for n in nodes}
    assert not any("#startblock" in n.text or "#endblock" in n.text for n in model)
    action = next(
        n for n in model if n.kind == blocks.ACTION and n.status is not NodeStatus.ALTERNATE
    )
    assert action.status in (NodeStatus.EXECUTED, NodeStatus.FAILED)
    assert "ok" in action.meta
    assert action.meta["title"] == forms.title(blocks.ACTION, forms.SCRIPT, action.text)
