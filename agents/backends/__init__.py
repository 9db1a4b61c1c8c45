"""Model backends behind one interface (`base.Backend`). Each is imported only when
chosen: opening the console or the store never loads torch, transformers or vLLM."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agents.backends.base import (
    AdapterError,
    Backend,
    BackendError,
    Candidate,
    ContextOverflowError,
    Interrupted,
    ModelNotFoundError,
    Progress,
    ServerUnreachableError,
    interruptible,
)

if TYPE_CHECKING:
    from agents.settings import Settings

from agents.backends.transformers_backend import DEFAULT_MODEL  # light: torch loads lazily


def hub_default_cached() -> bool:
    """Whether the hub's default model is in the Hugging Face cache (no download needed)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(DEFAULT_MODEL, "config.json"), str)
    except Exception:  # a cache it cannot read is a cache without the model
        return False


def default_model(progress: Progress | None = None, *, convert: bool = True) -> str:
    """The model used when none is named: DEFAULT_MODEL where the Hugging Face cache has
    it, else the default offline model's folder (`registry.DEFAULT`; converted first when
    `convert`; with `convert=False` its folder is named whether or not it exists yet)."""
    if hub_default_cached():
        return DEFAULT_MODEL
    from agents.backends import offline

    if not convert:
        return str(offline.model_folder())
    return str(offline.ensure_model(progress))


def model_or_default(named: str, progress: Progress | None = None) -> str:
    """`named` when given, else the default model (converted when needed). An offline
    model's name (`agent-console models` lists them) gives its folder, converted first
    when needed, unless a folder of that name is where the name points."""
    named = named.strip()
    if not named:
        return default_model(progress)
    from agents.backends.registry import MODELS

    if named in MODELS and not Path(named).exists():
        from agents.backends import offline

        return str(offline.ensure_model(progress, name=named))
    return named


def resolve(settings: Settings) -> tuple[str, str, str]:
    """(backend, base URL, model) the settings ask for: `auto` resolved, and a server
    that `agent-console serve` announced used when no URL is given."""
    from agents.backends.serving import read_server_file
    from agents.settings import data_dir

    url, model = settings.base_url.strip(), settings.model.strip()
    if settings.backend in ("auto", "openai") and not url:
        announced = read_server_file(data_dir())
        if announced is not None:
            url, model = str(announced["url"]), model or str(announced["model"])
    if settings.backend != "auto":
        return settings.backend, url, model
    return ("openai" if url else "transformers"), url, model


def open_backend(settings: Settings, progress: Progress | None = None) -> Backend:
    """Load or connect to the model the settings name. Slow (seconds to minutes for a
    real model, a minute more the first time the offline model is converted, reported
    line by line to `progress`): call it from a worker, never from the UI thread."""
    kind, url, model = resolve(settings)
    if kind == "none":
        raise BackendError("no model: the backend setting is `none`")
    if kind == "openai":
        if not url:
            raise BackendError("the openai backend needs --base-url (an OpenAI-compatible server)")
        from agents.backends.openai_backend import OpenAIBackend

        return OpenAIBackend(
            url,
            model,
            api_key=settings.api_key or None,
            timeout=settings.request_timeout,
        )
    if kind == "vllm":
        from agents.backends.vllm_backend import VLLMBackend

        return VLLMBackend(model_or_default(model, progress))
    from agents.backends.transformers_backend import TransformersBackend

    return TransformersBackend(model_or_default(model, progress))


__all__ = [
    "DEFAULT_MODEL",
    "AdapterError",
    "Backend",
    "BackendError",
    "Candidate",
    "ContextOverflowError",
    "Interrupted",
    "ModelNotFoundError",
    "ServerUnreachableError",
    "default_model",
    "interruptible",
    "model_or_default",
    "open_backend",
    "resolve",
]
