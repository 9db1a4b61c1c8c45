"""A small version of the learning bench (bench/learning.py) on the real models: an adapter
trained by the product's own job on the first starter sessions (one per taught family),
against the base, on held-out variants it was never shown.

Gemma 3 270M base (callbacks in a document):
What is compared is how likely each model finds the right orientation for a held-out
variant (the operator's, naming the variant's own files and goal), after exactly the
context the agent sees: the runtime renders it (a real session on the base, stopped as
its first orientation is stored) and the stored prompt hash vouches for it. The base
finds these orientations unlikely and writes others (it names the files in about 1 of 30
held-out sessions: docs/benchmarks.md, "Learning"); the taught adapter finds them far
likelier.

With the learning rate at 1e-12 the adapter is the base and the test fails: the margin
below is not met (the learning issue's closing note).

The coder (script blocks in chat turns): what is compared is how likely each model finds
the right action (the operator's script) after the turns the agent gave the base for its
first action on the variant. With the learning rate at 1e-12 it fails too.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from agents import blocks, forms, prompting
from agents.backends.transformers_backend import TransformersBackend, cpu_has_bf16
from agents.events import NodeChanged, RuntimeEvent
from agents.runtime import Runtime
from agents.tasks.families import Variant, split, variant
from storage import JobStatus, Node, NodeStatus, TraceStore
from training import starter
from training.jobs import JobOptions, follow, queue_job
from training.teach import TAUGHT, names_the_task, variant_options

T = TypeVar("T")

pytestmark = [pytest.mark.real, pytest.mark.worker, pytest.mark.slow, pytest.mark.timeout(900)]

#: Gemma's starter sessions
GEMMA_SESSIONS = starter.SESSIONS_BY_MODEL["gemma-3-270m"]
#: the coder's (script blocks in chat turns)
CODER_SESSIONS = starter.SESSIONS_BY_MODEL["qwen2.5-coder-0.5b"]
#: the starter sessions taught (the first three: one per taught family)
TAUGHT_SESSIONS = (1, 2, 3)
#: the learning rate of the test's adapter (1e-12 shows the test failing)
LR = 2e-4
#: held-out variants compared: the first of each taught family
HELD_OUT = [variant(f, split(f)[1][0]) for f in TAUGHT]
#: the adapter's mean log-probability of a right orientation's tokens over the base's, in
#: nats a token, at least: on average, and on each variant. Measured 2026-11-25 (2 epochs,
#: lr 2e-4): +0.31, +0.25, +0.20 (base -1.15, -1.46, -1.19); with lr 1e-12, 0.00.
MARGIN = 0.12
EACH = 0.05
#: the same for the coder's right actions. Measured 2026-11-28 (2 epochs, lr 2e-4, trained
#: in 156 s): +0.07, +0.42, +0.50 (base -0.51, -1.07, -1.22); with lr 1e-12, 0.00.
CODER_MARGIN = 0.15
CODER_EACH = 0.03


def first_block(
    store: TraceStore,
    backend: TransformersBackend,
    found: Variant,
    tmp: Path,
    kind: str,
    block_tokens: int,
) -> tuple[list[Node], Node]:
    """A session of `backend` on `found`, stopped once its first block of `kind` is
    stored: the blocks before it and the block, whose stored prompt hash vouches that the
    path is what the model saw."""
    runtime: Runtime

    def listen(event: RuntimeEvent) -> None:
        if isinstance(event, NodeChanged) and event.node.kind == kind:
            runtime.stop()

    runtime = Runtime(
        store,
        backend,
        found.task,
        variant_options(
            backend, seed=found.seed, teaching=False, candidates=1, block_tokens=block_tokens
        ),
        sessions_dir=tmp / "sessions",
        listener=listen,
    )
    tree = store.tree(runtime.run().session_id)
    first: Node = next(n for n in tree if n.kind == kind)
    by_id = {n.id: n for n in tree}
    path: list[Node] = []
    parent = first.parent_id
    while parent is not None:
        path.insert(0, by_id[parent])
        parent = by_id[parent].parent_id
    assert blocks.prompt_hash(blocks.block_prompt(path, first)) == first.prompt_hash
    return path, first


def mean_logprob(model: object, tokenizer: object, prompt: str, completion: str) -> float:
    """Mean log-probability of `completion`'s tokens after `prompt`."""
    import torch

    ids = tokenizer(prompt + completion, return_tensors="pt").input_ids  # type: ignore[operator]
    start = len(tokenizer(prompt).input_ids)  # type: ignore[operator]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, start - 1 : -1].float()  # type: ignore[operator]
    picked = torch.log_softmax(logits, -1).gather(1, ids[0, start:, None])
    return float(picked.mean())


def train(model_dir: Path, sessions: Path, store: TraceStore, tmp: Path) -> float:
    """Train adapter "taught" with the product's job on the first starter sessions in
    `sessions`, one per taught family (never a held-out variant); its seconds."""
    taught = starter.check_sessions(sessions)[: len(TAUGHT_SESSIONS)]
    assert {v.family for v in taught} == set(TAUGHT)
    assert not {(v.family, v.seed) for v in taught} & {(v.family, v.seed) for v in HELD_OUT}
    started = time.monotonic()
    options = JobOptions(
        kind=starter.job_options(str(model_dir)).kind,
        base_model=str(model_dir),
        name="taught",
        epochs=2,
        learning_rate=LR,
        max_length=1024 if sessions == GEMMA_SESSIONS else 2048,
        labels_from=str(sessions),
        sessions=TAUGHT_SESSIONS,
        save_steps=10_000,
        # the test waits idle for the job: every core (the console keeps one by default)
        cpu_threads=os.cpu_count(),
    )
    job = queue_job(store, options, data_dir=tmp / "data")
    for _ in follow(store, job.id, poll=0.5):
        pass
    job = store.get_job(job.id)
    assert job.status is JobStatus.COMPLETED, job.error
    return time.monotonic() - started


def scores(
    model_dir: Path, adapter: str, pairs: list[tuple[str, str]]
) -> tuple[list[float], list[float]]:
    """Each (prompt, completion)'s mean log-probability a token on the base, and with
    `adapter`."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # bf16 where the CPU multiplies it natively; emulated elsewhere it is several times
    # slower than float32 (a 2-core AVX2 machine)
    dtype = torch.bfloat16 if cpu_has_bf16(torch) else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    base = [mean_logprob(model, tokenizer, p, c) for p, c in pairs]
    taught = PeftModel.from_pretrained(model, adapter)
    return base, [mean_logprob(taught, tokenizer, p, c) for p, c in pairs]


def taught_and_asked(
    model_dir: Path,
    sessions: Path,
    tmp: Path,
    ask: Callable[[TraceStore, TransformersBackend, Variant, Path], T],
) -> tuple[float, list[T], str]:
    """Train adapter "taught" (`train`), then `ask` the base for each held-out variant:
    the seconds training took, the answers, and the adapter's folder."""
    with TraceStore(tmp / "traces.db") as store:
        trained = train(model_dir, sessions, store, tmp)
        backend = TransformersBackend(str(model_dir))
        try:
            found = [ask(store, backend, v, tmp) for v in HELD_OUT]
        finally:
            backend.close()
        return trained, found, store.get_adapter("taught").path


def first_orientation(
    store: TraceStore, backend: TransformersBackend, found: Variant, tmp: Path
) -> tuple[str, Node]:
    """The prompt of Gemma's first orientation on `found`, as the runtime rendered it (a
    few tokens of it sampled), and the orientation."""
    path, first = first_block(store, backend, found, tmp, blocks.ORIENTATION, 24)
    return blocks.block_prompt(path, first), first


def test_an_adapter_taught_on_three_sessions_prefers_held_out_tasks_right_orientations(
    gemma_dir: Path, tmp_path: Path
) -> None:
    trained, found, adapter = taught_and_asked(
        gemma_dir, GEMMA_SESSIONS, tmp_path, first_orientation
    )
    started = time.monotonic()
    right = [
        blocks.block_completion(dataclasses.replace(node, text=v.orientation))
        for (_, node), v in zip(found, HELD_OUT, strict=True)
    ]
    pairs = [(p, c) for (p, _), c in zip(found, right, strict=True)]
    base, after = scores(gemma_dir, adapter, pairs)
    gains = [a - b for a, b in zip(after, base, strict=True)]
    report = f"trained in {trained:.0f} s; " + "; ".join(
        f"{v.task.name}: base {b:.2f}, adapter {a:.2f} nats/token"
        f" (the base's own orientation names the files: {names_the_task(n.text, v)})"
        for v, b, a, (_, n) in zip(HELD_OUT, base, after, found, strict=True)
    )
    print(report, f"; scored in {time.monotonic() - started:.0f} s")
    assert all(g >= EACH for g in gains), report
    assert sum(gains) / len(gains) >= MARGIN, report


def first_action(
    store: TraceStore, backend: TransformersBackend, found: Variant, tmp: Path
) -> tuple[str, Node]:
    """The prompt the coder's first action on `found` was sampled after (its chat turns
    rendered, the reply's code fence begun), and the action."""
    path, action = first_block(store, backend, found, tmp, blocks.ACTION, 96)
    assert action.meta.get("form") == forms.SCRIPT
    turns = prompting.block_turns(
        path, action.meta.get("collapsed", ()), blocks.ACTION, forms.SCRIPT
    )
    return backend.render_chat(turns) + prompting.prefill(blocks.ACTION), action


def test_a_coder_adapter_taught_on_three_sessions_prefers_held_out_tasks_right_actions(
    qwen_dir: Path, tmp_path: Path
) -> None:
    trained, found, adapter = taught_and_asked(qwen_dir, CODER_SESSIONS, tmp_path, first_action)
    started = time.monotonic()
    fence = prompting.prefill(blocks.ACTION)
    right = [
        prompting.reply(blocks.ACTION, v.blocks_for(forms.SCRIPT)[0])[len(fence) :]
        for v in HELD_OUT
    ]
    executed = [a.status is NodeStatus.EXECUTED for _, a in found]
    base, after = scores(
        qwen_dir, adapter, [(p, c) for (p, _), c in zip(found, right, strict=True)]
    )
    gains = [a - b for a, b in zip(after, base, strict=True)]
    report = f"trained in {trained:.0f} s; " + "; ".join(
        f"{v.task.name}: base {b:.2f}, adapter {a:.2f} nats/token (the base's action ran: {r})"
        for v, b, a, r in zip(HELD_OUT, base, after, executed, strict=True)
    )
    print(report, f"; scored in {time.monotonic() - started:.0f} s")
    assert all(g >= CODER_EACH for g in gains), report
    assert sum(gains) / len(gains) >= CODER_MARGIN, report
