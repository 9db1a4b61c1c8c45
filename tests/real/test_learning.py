"""A small version of the learning bench (bench/learning.py) on the real model: an adapter
trained by the product's own job on the first starter sessions (one per taught family),
against the base, on held-out variants it was never shown.

What is compared is how likely each model finds the right orientation for a held-out
variant (the operator's, naming the variant's own files and goal), after exactly the
context the agent sees: the runtime renders it (a real session on the base, stopped as
its first orientation is stored) and the stored prompt hash vouches for it. The base
finds these orientations unlikely and writes others (it names the files in about 1 of 30
held-out sessions: docs/benchmarks.md, "Learning"); the taught adapter finds them far
likelier.

With the learning rate at 1e-12 the adapter is the base and the test fails: the margin
below is not met (the learning issue's closing note).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from agents import blocks
from agents.backends.transformers_backend import TransformersBackend, cpu_has_bf16
from agents.events import NodeChanged, RuntimeEvent
from agents.runtime import Runtime
from agents.tasks.families import Variant, split, variant
from storage import JobStatus, Node, TraceStore
from training import starter
from training.jobs import JobOptions, follow, queue_job
from training.teach import TAUGHT, names_the_task, variant_options

pytestmark = [pytest.mark.real, pytest.mark.worker, pytest.mark.slow, pytest.mark.timeout(900)]

#: Gemma's starter sessions (the coder's are script blocks in chat turns)
GEMMA_SESSIONS = starter.SESSIONS_BY_MODEL["gemma-3-270m"]
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


def context(store: TraceStore, backend: TransformersBackend, found: Variant, tmp: Path) -> str:
    """The prompt of `found`'s first orientation, as the runtime renders it: a session on
    `backend` stopped once its first orientation (a few tokens) is stored."""
    runtime: Runtime

    def listen(event: RuntimeEvent) -> None:
        if isinstance(event, NodeChanged) and event.node.kind == blocks.ORIENTATION:
            runtime.stop()

    runtime = Runtime(
        store,
        backend,
        found.task,
        variant_options(backend, seed=found.seed, teaching=False, candidates=1, block_tokens=24),
        sessions_dir=tmp / "sessions",
        listener=listen,
    )
    tree = store.tree(runtime.run().session_id)
    first: Node = next(n for n in tree if n.kind == blocks.ORIENTATION)
    by_id = {n.id: n for n in tree}
    path: list[Node] = []
    parent = first.parent_id
    while parent is not None:
        path.insert(0, by_id[parent])
        parent = by_id[parent].parent_id
    prompt = blocks.block_prompt(path, first)
    assert blocks.prompt_hash(prompt) == first.prompt_hash  # what the model saw
    return prompt


def mean_logprob(model: object, tokenizer: object, prompt: str, completion: str) -> float:
    """Mean log-probability of `completion`'s tokens after `prompt`."""
    import torch

    ids = tokenizer(prompt + completion, return_tensors="pt").input_ids  # type: ignore[operator]
    start = len(tokenizer(prompt).input_ids)  # type: ignore[operator]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, start - 1 : -1].float()  # type: ignore[operator]
    picked = torch.log_softmax(logits, -1).gather(1, ids[0, start:, None])
    return float(picked.mean())


def test_an_adapter_taught_on_three_sessions_prefers_held_out_tasks_right_orientations(
    gemma_dir: Path, tmp_path: Path
) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    taught = starter.check_sessions(GEMMA_SESSIONS)[: len(TAUGHT_SESSIONS)]
    assert {v.family for v in taught} == set(TAUGHT)
    assert not {(v.family, v.seed) for v in taught} & {(v.family, v.seed) for v in HELD_OUT}

    store = TraceStore(tmp_path / "traces.db")
    started = time.monotonic()
    options = JobOptions(
        kind=starter.job_options(str(gemma_dir)).kind,
        base_model=str(gemma_dir),
        name="taught",
        epochs=2,
        learning_rate=LR,
        max_length=1024,
        labels_from=str(GEMMA_SESSIONS),
        sessions=TAUGHT_SESSIONS,
        save_steps=10_000,
        # the test waits idle for the job: every core (the console keeps one by default)
        cpu_threads=os.cpu_count(),
    )
    job = queue_job(store, options, data_dir=tmp_path / "data")
    for _ in follow(store, job.id, poll=0.5):
        pass
    job = store.get_job(job.id)
    assert job.status is JobStatus.COMPLETED, job.error
    trained = time.monotonic() - started

    backend = TransformersBackend(str(gemma_dir))
    try:
        prompts = [context(store, backend, v, tmp_path) for v in HELD_OUT]
        written = [
            next(n for n in store.tree(s.id) if n.kind == blocks.ORIENTATION)
            for s in reversed(store.list_sessions())
        ]
    finally:
        backend.close()
    tokenizer = AutoTokenizer.from_pretrained(gemma_dir)
    # bf16 where the CPU multiplies it natively; emulated elsewhere it is several times
    # slower than float32 (a 2-core AVX2 machine)
    dtype = torch.bfloat16 if cpu_has_bf16(torch) else torch.float32
    model = AutoModelForCausalLM.from_pretrained(gemma_dir, dtype=dtype)
    right = [
        blocks.block_completion(dataclasses.replace(node, text=v.orientation))
        for node, v in zip(written, HELD_OUT, strict=True)
    ]
    base = [mean_logprob(model, tokenizer, p, c) for p, c in zip(prompts, right, strict=True)]
    taught_model = PeftModel.from_pretrained(model, store.get_adapter("taught").path)
    after = [
        mean_logprob(taught_model, tokenizer, p, c) for p, c in zip(prompts, right, strict=True)
    ]
    store.close()
    gains = [a - b for a, b in zip(after, base, strict=True)]
    report = f"trained in {trained:.0f} s; " + "; ".join(
        f"{v.task.name}: base {b:.2f}, adapter {a:.2f} nats/token"
        f" (the base's own orientation names the files: {names_the_task(n.text, v)})"
        for v, b, a, n in zip(HELD_OUT, base, after, written, strict=True)
    )
    print(report, f"; scored in {time.monotonic() - started - trained:.0f} s")
    assert all(g >= EACH for g in gains), report
    assert sum(gains) / len(gains) >= MARGIN, report
