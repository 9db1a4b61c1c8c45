"""The in-process backend: a Hugging Face causal LM run with transformers (+ peft adapters).

It is the embedded default, so it must work on a laptop CPU with nothing else running;
for many agents or big models, serve with vLLM and use the openai backend instead.

torch, transformers and peft are imported only when a backend is constructed, so importing
this module costs nothing (they take seconds to import; the console must start in a blink).

Prompts are tokenized as given, without adding special tokens (the runtime renders any
BOS or chat markup into the text itself); special-token text such as `<|im_start|>` in a
prompt becomes the special token.

How it keeps the conventions of `base.Backend`:
- Logprobs are taken from the very distribution tokens are sampled from: a logits
  processor divides the raw logits by the temperature, records their log-softmax, and is
  the only thing that touches the scores (the model's own generation defaults, e.g. a
  checkpoint's top_k/top_p/repetition_penalty, are replaced by neutral ones at load).
  Recording per step keeps one (n x vocab) row in memory instead of every step's logits,
  which `output_logits=True` would hold (gigabytes for n=64, 256 tokens, 150k vocab).
- Stop strings are matched on decoded text per sequence by a stopping criterion that
  also records the step at which each sequence stopped, so padding after a finished
  sequence is never mistaken for output.
- One lock serialises all model use: a worker thread owns generation, the UI thread may
  still call `tokenize` (which takes only the tokenizer's lock).
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from agents.backends.base import (
    AdapterError,
    Backend,
    BackendError,
    Candidate,
    ModelNotFoundError,
    Prompt,
    log_odds,
    one_line,
    yes_no_token_ids,
)
from agents.backends.lora import read_adapter

#: The model used when none is named. Qwen2.5-0.5B-Instruct: small enough to run on a
#: laptop CPU (0.5B parameters, ~1 GB in bf16), instruct-tuned so it follows the block
#: format from a prompt alone, Apache-2.0, the same Qwen2 architecture as the tiny model
#: the tests build (so the tests exercise the real code path), supported by vLLM with
#: LoRA, and weave-style Python code blocks are within its reach.
DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"

_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}
#: Below this a tokenizer's `model_max_length` is a real limit; above it, a placeholder.
_SANE_MAX_LENGTH = 10_000_000


def _env_offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it, but read now: the hub reads it once at
    import, so a value set later (tests, a CLI flag) would otherwise be ignored."""
    value = os.environ.get("HF_HUB_OFFLINE", "") or os.environ.get("TRANSFORMERS_OFFLINE", "")
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def _looks_like_path(model: str) -> bool:
    """A hub id is `name` or `owner/name`; anything else the user typed is a path."""
    return (
        model.startswith(("/", ".", "~"))
        or "\\" in model
        or model.count("/") > 1
        or Path(model).expanduser().exists()
    )


class _LogprobRecorder:
    """Logits processor: scales the raw logits by 1/temperature and records the
    log-probability of each token the sampler then picks (known one step later, from the
    next call's `input_ids`; the last one from the final sequences)."""

    def __init__(self, temperature: float, *, sampling: bool) -> None:
        self.scale = temperature if temperature > 0 else 1.0
        self.sampling = sampling
        self.picked: list[Any] = []  # one (batch,) tensor per generated token
        self._last: Any = None  # (batch, vocab) log-softmax of the latest step

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self._last is not None:
            self.picked.append(self._last.gather(-1, input_ids[:, -1:]).squeeze(-1))
        scaled = scores.float() / self.scale
        self._last = scaled.log_softmax(dim=-1)
        return scaled if self.sampling else scores

    def finish(self, sequences: Any) -> list[list[float]]:
        """Per sequence, the logprob of every generated token."""
        if self._last is not None:
            self.picked.append(self._last.gather(-1, sequences[:, -1:]).squeeze(-1))
            self._last = None
        if not self.picked:
            return [[] for _ in range(sequences.shape[0])]
        import torch

        return [[float(v) for v in row] for row in torch.stack(self.picked, dim=1).tolist()]


class _StopStrings:
    """Stopping criterion: a sequence is done once the text decoded from its newest
    tokens contains a stop string. Records the step (index into the generated tokens)
    at which each sequence first stopped."""

    def __init__(
        self,
        decode: Callable[[Sequence[int]], str],
        stops: Sequence[str],
        prompt_len: int,
        batch: int,
    ) -> None:
        self.decode = decode
        self.stops = [s for s in stops if s]
        self.prompt_len = prompt_len
        # A token carries at least one byte, so this many newest tokens cover any stop
        # string, plus slack for a character split across tokens.
        self.window = max(len(s.encode("utf-8")) for s in self.stops) + 3
        self.stopped_at: list[int | None] = [None] * batch

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        length = input_ids.shape[1]
        step = length - self.prompt_len - 1
        tails = input_ids[:, max(self.prompt_len, length - self.window) :].tolist()
        for row, tail in enumerate(tails):
            if self.stopped_at[row] is None:
                text = self.decode(tail)
                if any(stop in text for stop in self.stops):
                    self.stopped_at[row] = step
        done = [at is not None for at in self.stopped_at]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class TransformersBackend(Backend):
    """A causal LM from a local folder, the Hugging Face cache or the hub, in process."""

    name = "transformers"

    def __init__(
        self,
        model: str,
        *,
        device: str | None = None,
        dtype: str | None = None,
        local_files_only: bool | None = None,
    ) -> None:
        self.model = model
        self._lock = threading.Lock()  # all model use
        self._tokenizer_lock = threading.Lock()  # taken after _lock, never before
        self._adapter_paths: dict[str, str] = {}
        self._active: str | None = None
        self._peft: Any = None
        self._yes_no: tuple[list[int], list[int]] | None = None

        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        self._device = self._pick_device(torch, device)
        self._dtype = self._pick_dtype(torch, self._device, dtype)
        offline = _env_offline() if local_files_only is None else local_files_only
        source, local = self._locate(model)
        if not local and not offline:
            offline = self._cached_or_unreachable(model)
        try:
            tokenizer: Any = AutoTokenizer.from_pretrained(source, local_files_only=offline)
            base: Any = AutoModelForCausalLM.from_pretrained(
                source, dtype=self._dtype, local_files_only=offline
            )
        except OSError as exc:
            if local:  # a model folder transformers cannot read
                raise self._not_found(model, one_line(exc, 200)) from exc
            raise self._hub_not_found(model, offline, exc) from exc
        except ValueError as exc:
            # An id the hub rejects as malformed is a name nobody can find.
            from huggingface_hub.errors import HFValidationError

            if isinstance(exc, HFValidationError):
                raise self._hub_not_found(model, offline, exc) from exc
            raise BackendError(f"cannot load {model!r} as a causal LM: {one_line(exc)}") from exc
        except (ImportError, KeyError, RuntimeError) as exc:
            raise BackendError(f"cannot load {model!r} as a causal LM: {one_line(exc)}") from exc

        try:
            base.to(self._device).eval()
        except (AssertionError, RuntimeError, ValueError) as exc:  # no such device, no memory
            raise BackendError(
                f"cannot put {model!r} on device {self._device!r}: {one_line(exc)}"
            ) from exc
        self._eos_ids = self._eos_token_ids(base, tokenizer)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.convert_ids_to_tokens(self._eos_ids[0])
        # The checkpoint's sampling defaults (top_k, top_p, repetition_penalty, ...) fill
        # whatever a call leaves unset; replace them so only what `generate` asks for
        # shapes the distribution, and the recorded logprobs are the true ones.
        base.generation_config = GenerationConfig(
            eos_token_id=self._eos_ids,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=base.generation_config.bos_token_id,
        )
        self._base: Any = base
        self._tokenizer: Any = tokenizer
        self._lead_ids = self._leading_special_ids(tokenizer)
        self._vocab_size = int(base.get_input_embeddings().weight.shape[0])
        self._context = self._context_length(base, tokenizer)

    # ---- loading ---------------------------------------------------------------------

    @staticmethod
    def _pick_device(torch: Any, device: str | None) -> str:
        if device:
            return device
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return "mps"
        return "cpu"

    @staticmethod
    def _pick_dtype(torch: Any, device: str, dtype: str | None) -> Any:
        """bf16 on CUDA (fast, and the dtype Qwen2.5 is trained in); float32 elsewhere:
        CPUs lack fast bf16 matmuls, and fp16 (MPS's fast dtype) can overflow in models
        trained in bf16, corrupting exactly the logprobs the evaluator relies on."""
        if dtype:
            key = _DTYPES.get(dtype.strip().lower())
            if key is None:
                raise BackendError(f"unknown dtype {dtype!r} (use float32, bfloat16 or float16)")
            return getattr(torch, key)
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32

    @staticmethod
    def _not_found(model: str, why: str) -> ModelNotFoundError:
        return ModelNotFoundError(
            f"model {model!r} not found: {why.rstrip('.')}. Give --model PATH (a local model folder) "
            "or --base-url URL (an OpenAI-compatible server)"
        )

    def _hub_not_found(self, model: str, offline: bool, exc: BaseException) -> ModelNotFoundError:
        if offline:
            switch = "HF_HUB_OFFLINE is set" if _env_offline() else "local files only"
            why = f"not in the Hugging Face cache, and downloads are off ({switch})"
        else:
            why = f"not in the Hugging Face cache and not downloadable ({one_line(exc)[:160]})"
        return self._not_found(model, why)

    def _cached_or_unreachable(self, model: str) -> bool:
        """True when `model` is already in the Hugging Face cache (then load it without
        asking the hub); a ModelNotFoundError at once when it is not and the hub can't be
        reached, where huggingface_hub's retries would take most of a minute to say so."""
        import socket
        from urllib.parse import urlsplit

        from huggingface_hub import constants, try_to_load_from_cache

        if isinstance(try_to_load_from_cache(model, "config.json"), str):
            return True
        endpoint = urlsplit(constants.ENDPOINT)
        port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
        try:
            socket.create_connection((endpoint.hostname or "", port), timeout=5).close()
        except OSError as exc:
            why = (
                f"not in the Hugging Face cache, and {endpoint.hostname} cannot be reached ({exc})"
            )
            raise self._not_found(model, why) from None
        return False

    def _locate(self, model: str) -> tuple[str, bool]:
        """The local folder `model` names, or `model` itself as a hub id; and which."""
        if not model.strip():
            raise self._not_found(model, "no model named")
        if _looks_like_path(model):
            folder = Path(model).expanduser()
            if not folder.is_dir():
                raise self._not_found(model, f"no folder {folder}")
            if not (folder / "config.json").is_file():
                raise self._not_found(model, f"{folder} has no config.json (not a model folder)")
            return str(folder), True
        return model, False

    @staticmethod
    def _eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
        """Every id that ends a turn: the tokenizer's eos and the checkpoint's generation
        eos list (Qwen2.5-Instruct stops on both <|im_end|> and <|endoftext|>)."""
        ids: list[int] = []
        configured = model.generation_config.eos_token_id
        if isinstance(configured, int):
            configured = [configured]
        for value in [tokenizer.eos_token_id, *(configured or [])]:
            if isinstance(value, int) and value not in ids:
                ids.append(value)
        if not ids:
            raise BackendError(f"model {model.name_or_path!r} has no end-of-sequence token")
        return ids

    @staticmethod
    def _leading_special_ids(tokenizer: Any) -> list[int]:
        """The special tokens the tokenizer puts before any text (Gemma's `<bos>`; none
        for Qwen). Prompts are tokenized without special tokens, so these go in front of
        every prompt that does not already start with them: a Gemma model without its
        `<bos>` writes garbage."""
        plain = list(tokenizer.encode("a", add_special_tokens=False))
        full = list(tokenizer.encode("a", add_special_tokens=True))
        if len(full) > len(plain) and full[len(full) - len(plain) :] == plain:
            return full[: len(full) - len(plain)]
        return []

    @staticmethod
    def _context_length(model: Any, tokenizer: Any) -> int:
        limit = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        from_tokenizer = int(getattr(tokenizer, "model_max_length", 0) or 0)
        if 0 < from_tokenizer < _SANE_MAX_LENGTH and (limit == 0 or from_tokenizer < limit):
            limit = from_tokenizer
        if limit <= 0:
            raise BackendError("the model declares no context length (max_position_embeddings)")
        return limit

    # ---- the interface ---------------------------------------------------------------

    @property
    def context_length(self) -> int:
        return self._context

    def tokenize(self, text: str) -> list[int]:
        with self._tokenizer_lock:
            return list(self._tokenizer.encode(text, add_special_tokens=False))

    def _decode(self, ids: Sequence[int]) -> str:
        with self._tokenizer_lock:
            return str(self._tokenizer.decode(list(ids), skip_special_tokens=True))

    def render_chat(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        with self._tokenizer_lock:
            if not getattr(self._tokenizer, "chat_template", None):
                raise BackendError(f"model {self.model!r} has no chat template")
            rendered = self._tokenizer.apply_chat_template(
                [dict(m) for m in messages],
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
            )
        return str(rendered)

    def _prompt_ids(self, prompt: Prompt) -> list[int]:
        ids = self.tokenize(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        if not ids:
            raise BackendError("the prompt is empty")
        lead = self._lead_ids
        if lead and ids[: len(lead)] != lead:
            ids = lead + ids
        bad = [t for t in ids if not 0 <= t < self._vocab_size]
        if bad:
            raise BackendError(
                f"prompt token id {bad[0]} is outside the model's vocabulary (0..{self._vocab_size - 1})"
            )
        return ids

    def _live_model(self) -> Any:
        if self._base is None:
            raise BackendError(f"the backend for {self.model!r} is closed")
        return self._peft if self._peft is not None else self._base

    @contextlib.contextmanager
    def _adapter_scope(self) -> Iterator[None]:
        """The base model while no adapter is in use: peft's switch, no reload."""
        if self._peft is not None and self._active is None:
            with self._peft.disable_adapter():
                yield
        else:
            yield

    def generate(
        self,
        prompt: Prompt,
        *,
        n: int = 1,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[Candidate]:
        if n < 1:
            raise BackendError(f"n must be at least 1, not {n}")
        if max_tokens < 1:
            raise BackendError(f"max_tokens must be at least 1, not {max_tokens}")
        if temperature < 0:
            raise BackendError(f"temperature must be 0 or more, not {temperature}")
        ids = self._prompt_ids(prompt)
        self.check_fits(len(ids), max_tokens)
        stops = [s for s in stop if s]

        import torch
        from transformers import GenerationConfig

        sampling = temperature > 0
        # Greedy candidates are all the same sequence: compute it once.
        rows = n if sampling else 1
        config = GenerationConfig(
            max_new_tokens=max_tokens,
            do_sample=sampling,
            num_return_sequences=rows,
            eos_token_id=self._eos_ids,
            pad_token_id=self._tokenizer.pad_token_id,
            **({"temperature": 1.0, "top_k": 0, "top_p": 1.0} if sampling else {}),
        )
        recorder = _LogprobRecorder(temperature, sampling=sampling)
        stopper = _StopStrings(self._decode, stops, len(ids), rows) if stops else None

        with self._lock, torch.inference_mode(), self._adapter_scope():
            if seed is not None:
                torch.manual_seed(seed)
            input_ids = torch.tensor([ids], dtype=torch.long, device=self._device)
            sequences = self._live_model().generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                generation_config=config,
                logits_processor=[recorder],
                stopping_criteria=[stopper] if stopper else [],
            )
            logprobs = recorder.finish(sequences)
            generated = sequences[:, len(ids) :].tolist()

        candidates = [
            self._candidate(
                generated[row],
                logprobs[row],
                stopper.stopped_at[row] if stopper else None,
                stops,
            )
            for row in range(rows)
        ]
        return candidates if sampling else candidates * n

    def _candidate(
        self,
        tokens: list[int],
        logprobs: list[float],
        stopped_at: int | None,
        stops: Sequence[str],
    ) -> Candidate:
        """One sequence cut where it ended (what follows is generate's padding). The text
        leaves out the end-of-sequence token and the stop string; the ids keep them."""
        eos_at = next((i for i, t in enumerate(tokens) if t in self._eos_ids), None)
        if eos_at is not None and (stopped_at is None or eos_at <= stopped_at):
            return Candidate(
                text=self._decode(tokens[:eos_at]),
                token_ids=tokens[: eos_at + 1],
                logprobs=logprobs[: eos_at + 1],
                finish_reason="stop",
            )
        if stopped_at is None:
            return Candidate(
                text=self._decode(tokens),
                token_ids=tokens,
                logprobs=logprobs,
                finish_reason="length",
            )
        end = stopped_at + 1
        text = self._decode(tokens[:end])
        found = [i for i in (text.find(s) for s in stops) if i >= 0]
        return Candidate(
            text=text[: min(found)] if found else text,
            token_ids=tokens[:end],
            logprobs=logprobs[:end],
            finish_reason="stop",
        )

    def score_yes_no(self, prompts: Sequence[str]) -> list[float]:
        if not prompts:
            return []
        encoded = [self._prompt_ids(p) for p in prompts]
        for ids in encoded:
            self.check_fits(len(ids), 0)
        if self._yes_no is None:
            self._yes_no = yes_no_token_ids(self.tokenize)
        yes_ids, no_ids = self._yes_no

        import torch

        # Left padding puts every prompt's last token in the last column; positions count
        # from each prompt's first real token, so a padded row computes what it would alone.
        width = max(len(ids) for ids in encoded)
        pad = int(self._tokenizer.pad_token_id)
        input_ids = torch.tensor(
            [[pad] * (width - len(ids)) + ids for ids in encoded], dtype=torch.long
        )
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded])
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with self._lock, torch.inference_mode(), self._adapter_scope():
            out = self._live_model()(
                input_ids=input_ids.to(self._device),
                attention_mask=mask.to(self._device),
                position_ids=positions.to(self._device),
                logits_to_keep=1,
                use_cache=False,
            )
            logprobs = out.logits[:, -1, :].float().log_softmax(dim=-1)
            yes = logprobs[:, yes_ids].tolist()
            no = logprobs[:, no_ids].tolist()
        return [log_odds(y, q) for y, q in zip(yes, no, strict=True)]

    # ---- adapters --------------------------------------------------------------------

    def load_adapter(self, name: str, path: str) -> None:
        if not name or not name.strip():
            raise AdapterError("an adapter needs a non-empty name")
        info = read_adapter(name, path)
        with self._lock:
            if name in self._adapter_paths:
                raise AdapterError(
                    f"adapter {name!r} is already loaded (from {self._adapter_paths[name]})"
                )
            try:
                if self._peft is None:
                    self._load_first_adapter(name, str(info.path))
                else:
                    self._load_more_adapter(name, str(info.path))
            except AdapterError:
                raise
            except Exception as exc:  # peft raises many kinds; all mean "won't load"
                raise AdapterError(
                    f"adapter {name!r} at {info.path} does not fit model {self.model!r}: "
                    f"{one_line(exc)}"
                ) from exc
            self._adapter_paths[name] = str(info.path)

    def _load_first_adapter(self, name: str, path: str) -> None:
        from peft import PeftModel

        try:
            peft = PeftModel.from_pretrained(self._base, path, adapter_name=name)
        except Exception:
            # peft injects LoRA layers into the base model in place before it loads the
            # weights: put the original layers back so a failed load leaves no trace.
            self._strip_lora_layers()
            raise
        peft.eval()
        self._peft = peft

    def _load_more_adapter(self, name: str, path: str) -> None:
        peft = self._peft
        try:
            peft.load_adapter(path, adapter_name=name)
        except Exception:
            if name in peft.peft_config:
                with contextlib.suppress(Exception):
                    peft.delete_adapter(name)
            raise
        finally:
            # peft may switch the active adapter while loading; keep ours.
            if self._active is not None:
                peft.set_adapter(self._active)
        peft.eval()

    def _strip_lora_layers(self) -> None:
        from peft.tuners.tuners_utils import BaseTunerLayer

        for module_name, module in list(self._base.named_modules()):
            if isinstance(module, BaseTunerLayer) and module_name:
                parent_name, _, child = module_name.rpartition(".")
                parent = self._base.get_submodule(parent_name) if parent_name else self._base
                setattr(parent, child, module.get_base_layer())
        for attribute in ("peft_config", "_hf_peft_config_loaded"):
            if attribute in self._base.__dict__:
                delattr(self._base, attribute)

    def use_adapter(self, name: str | None) -> None:
        with self._lock:
            if name is None:
                self._active = None
                return
            if name not in self._adapter_paths:
                known = ", ".join(sorted(self._adapter_paths)) or "none"
                raise AdapterError(f"unknown adapter {name!r} (loaded: {known})")
            self._peft.set_adapter(name)
            self._active = name

    def adapters(self) -> list[str]:
        return list(self._adapter_paths)

    @property
    def active_adapter(self) -> str | None:
        return self._active

    def close(self) -> None:
        with self._lock:
            self._peft = None
            self._base = None
            gc.collect()
            if self._device.startswith("cuda"):
                import torch

                torch.cuda.empty_cache()
