"""The in-process backend: a Hugging Face causal LM run with transformers (+ peft adapters).

It is the embedded default, so it must work on a laptop CPU with nothing else running;
for many agents or big models, serve with vLLM and use the openai backend instead.

torch, transformers and peft are imported only when a backend is constructed, so importing
this module costs nothing (they take seconds to import; the console must start in a blink).

Prompts are tokenized as given, without adding special tokens (the runtime renders any
BOS or chat markup into the text itself); special-token text such as `<|im_start|>` in a
prompt becomes the special token.

How it samples a block's candidates (its own loop, not `model.generate`, which ran every
row to the longest one's end and prefilled the prompt once per row: 8 x 256 tokens of
Gemma 3 270M took 53-58 s on 2 cores):
- One prefill (batch 1) for all `n` candidates; its KV cache is repeated `n` times and
  the rows decode together, one forward per step, each computing the vocabulary head for
  the last position only.
- A row that ends (end-of-sequence token, stop string, grammar complete, `max_tokens`)
  leaves the batch and the cache at once, so the rows still running cost less.
- Each row draws from its own random generator (all derived from `seed`), so a row's
  tokens do not depend on which other rows are still running. Its logprobs do, in the
  last bits: a smaller batch can take another matmul kernel.

How it keeps the conventions of `base.Backend`:
- Logprobs are taken from the very distribution tokens are sampled from: the raw logits
  divided by the temperature (masked by the grammar, when there is one), nothing else;
  the checkpoint's own generation defaults (top_k, top_p, repetition_penalty) are never
  applied.
- Stop strings are searched in each row's newly decoded text after every token; the text
  is cut before the first one, the ids keep the tokens that spelled it.
- Streaming (`on_token`) hands out a row's text as it settles, holding back anything that
  could still become a stop string: a row's pieces add up to exactly its `Candidate.text`.
- One lock serialises all model use: a worker thread owns generation, the UI thread may
  still call `tokenize` (which takes only the tokenizer's lock, never held while
  `on_token` runs).
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agents.backends.base import (
    AdapterError,
    Backend,
    BackendError,
    Candidate,
    ModelNotFoundError,
    Prompt,
    Sampling,
    check_interrupted,
    log_odds,
    one_line,
    yes_no_token_ids,
)
from agents.backends.lora import read_adapter
from agents.backends.transformers_sampling import (
    SHARED_PREFIX_TOKENS,
    _SamplingMixin,
    _shared_prefix,
)

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
#: On a CPU with native bf16, models at least this big run in bf16 (see `_pick_dtype`).
BF16_CPU_MIN_PARAMETERS = 100_000_000
#: Below this a tokenizer's `model_max_length` is a real limit; above it, a placeholder.
_SANE_MAX_LENGTH = 10_000_000


def _env_offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it, but read now: the hub reads it once at
    import, so a value set later (tests, a CLI flag) would otherwise be ignored."""
    value = os.environ.get("HF_HUB_OFFLINE", "") or os.environ.get("TRANSFORMERS_OFFLINE", "")
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def cpu_has_bf16(torch: Any) -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX tiles)."""
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(getattr(torch, "cpu", None), probe, None)
        with contextlib.suppress(Exception):
            if check is not None and check():
                return True
    return False


def _parameter_count(torch: Any, config: Any) -> int:
    """The parameters a model of `config` has, from an instance on the meta device (no
    memory, ~0.02 s); 0 when that fails."""
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            shell = AutoModelForCausalLM.from_config(config)
        return int(sum(p.numel() for p in shell.parameters()))
    except Exception:  # an exotic model: fall back to the safe dtype
        return 0


def _between_layers(_module: Any, _inputs: Any) -> None:
    """Before each decoder layer: a stopped caller's forward pass ends here (a CPU takes
    seconds for one over a long prompt; see `base.interruptible`)."""
    check_interrupted()


def _looks_like_path(model: str) -> bool:
    """A hub id is `name` or `owner/name`; anything else the user typed is a path."""
    return (
        model.startswith(("/", ".", "~"))
        or "\\" in model
        or model.count("/") > 1
        or Path(model).expanduser().exists()
    )


class TransformersBackend(_SamplingMixin, Backend):
    """A causal LM from a local folder, the Hugging Face cache or the hub, in process."""

    name = "transformers"
    features = frozenset({"grammar", "stream", "no-repeat"})
    batches_greedy = True

    def __init__(
        self,
        model: str,
        *,
        device: str | None = None,
        dtype: str | None = None,
        local_files_only: bool | None = None,
        keep_prompt: bool = True,
    ) -> None:
        self.model = model
        #: keep the last block prompt's cache for the prompts that start with it (off:
        #: every prompt is encoded whole, as the speed benchmarks time it)
        self.keep_prompt = keep_prompt
        self._lock = threading.Lock()  # all model use
        self._tokenizer_lock = threading.Lock()  # taken after _lock, never before
        self._adapter_paths: dict[str, str] = {}
        self._active: str | None = None
        self._peft: Any = None
        self._yes_no: tuple[list[int], list[int]] | None = None
        self._grammars: dict[str, Any] = {}  # grammar text -> xgrammar CompiledGrammar
        self._prompt_cache = None  # the last generation prompt's encoding (_prefill)
        self._grammar_compiler: Any = None  # built with the first grammar
        self._other_than_stop: Any = None  # bitmask of every token but end-of-sequence
        self._grammar_scratch: Any = None

        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        self._device = self._pick_device(torch, device)
        requested = self._requested_dtype(torch, dtype)
        offline = _env_offline() if local_files_only is None else local_files_only
        source, local = self._locate(model)
        if not local and not offline:
            offline = self._cached_or_unreachable(model)
        try:
            tokenizer: Any = AutoTokenizer.from_pretrained(source, local_files_only=offline)
            config: Any = AutoConfig.from_pretrained(source, local_files_only=offline)
            self._dtype = (
                requested
                if requested is not None
                else self._pick_dtype(torch, self._device, config)
            )
            base: Any = AutoModelForCausalLM.from_pretrained(
                source, config=config, dtype=self._dtype, local_files_only=offline
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
        for layer in getattr(base.get_decoder(), "layers", ()):
            layer.register_forward_pre_hook(_between_layers)
        self._base: Any = base
        self._tokenizer: Any = tokenizer
        self._lead_ids = self._leading_special_ids(tokenizer)
        self._vocab_size = int(base.get_input_embeddings().weight.shape[0])
        self._context = self._context_length(base, tokenizer)
        self.device = str(self._device).split(":")[0]
        self.parameters = int(sum(p.numel() for p in base.parameters()))

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
    def _requested_dtype(torch: Any, dtype: str | None) -> Any:
        """The dtype the user named, or None to choose one; an unknown name fails before
        anything loads."""
        if not dtype:
            return None
        key = _DTYPES.get(dtype.strip().lower())
        if key is None:
            raise BackendError(f"unknown dtype {dtype!r} (use float32, bfloat16 or float16)")
        return getattr(torch, key)

    @staticmethod
    def _pick_dtype(torch: Any, device: str, config: Any) -> Any:
        """bf16 on CUDA (fast, and the dtype Qwen2.5 is trained in).

        On a CPU, bf16 only where it pays and is safe: the CPU has native bf16 matmuls
        (AVX512-BF16 or AMX; elsewhere they are emulated), the model has 100M parameters
        or more, and its checkpoint is bf16 or float32. Measured on Gemma 3 270M (2-core
        EPYC with AVX512-BF16, one thread, 830-token agent prompt, both dtypes in one
        process): prefill 1.6 s against 3.4 s in float32, 8 candidates decoded at 52
        tokens/s against 30, and `score_yes_no` on 13 evaluator prompts within 0.15
        log-odds of float32 (median 0.04), every one the same sign. Smaller models stay
        float32: there the bf16 gain is small, and the tests' tiny model (~0.7M
        parameters) compares logprobs exactly. float16 checkpoints stay float32 (bf16
        would drop 3 of their 10 mantissa bits), and so does MPS: fp16 (MPS's fast
        dtype) can overflow in models trained in bf16, corrupting exactly the logprobs
        the evaluator relies on."""
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if device == "cpu" and cpu_has_bf16(torch):
            saved = str(getattr(config, "dtype", None) or "float32").removeprefix("torch.")
            if saved in ("float32", "bfloat16") and (
                _parameter_count(torch, config) >= BF16_CPU_MIN_PARAMETERS
            ):
                return torch.bfloat16
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

    def _generate(self, prompt: Prompt, request: Sampling) -> list[Candidate]:
        ids = self._prompt_ids(prompt)
        self.check_fits(len(ids), request.max_tokens)
        on_token = request.on_token

        def emit(row: int, piece: str) -> None:
            if on_token is not None and piece:
                on_token(row, piece)

        import torch

        with self._lock, torch.inference_mode(), self._adapter_scope():
            model = self._live_model()
            grammar = request.grammar
            compiled = self._compiled_grammar(grammar) if grammar is not None else None
            return self._sample(
                model,
                ids,
                rows=request.n,
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                stops=list(request.stop),
                seed=request.seed,
                compiled=compiled,
                emit=emit,
                no_repeat=request.no_repeat,
                greedy_first=request.greedy_first,
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

        with self._lock, torch.inference_mode(), self._adapter_scope():
            model = self._live_model()
            shared = _shared_prefix(encoded)
            if len(encoded) == 1:
                _, logits = self._prefill(model, encoded[0], keep=False)
            elif shared >= SHARED_PREFIX_TOKENS:
                logits = self._last_logits_after_prefix(model, encoded, shared)
            else:
                logits = self._last_logits(model, encoded)
            logprobs = logits.float().log_softmax(dim=-1)
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
            self._prompt_cache = None
            self._peft = None
            self._base = None
            gc.collect()
            if self._device.startswith("cuda"):
                import torch

                torch.cuda.empty_cache()
