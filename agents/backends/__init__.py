"""Model backends behind one interface (`base.Backend`). Each is imported only when
chosen: opening the console or the store never loads torch, transformers or vLLM."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.backends.base import (
    AdapterError,
    Backend,
    BackendError,
    Candidate,
    ContextOverflowError,
    ModelNotFoundError,
    ServerUnreachableError,
)

if TYPE_CHECKING:
    from agents.settings import Settings

from agents.backends.transformers_backend import DEFAULT_MODEL  # light: torch loads lazily


def resolve(settings: Settings) -> tuple[str, str, str]:
    """(backend, base URL, model) the settings ask for: `auto` resolved, and a server
    that `agent-console serve` announced used when no URL is given."""
    from agents.serving import read_server_file
    from agents.settings import data_dir

    url, model = settings.base_url.strip(), settings.model.strip()
    if settings.backend in ("auto", "openai") and not url:
        announced = read_server_file(data_dir())
        if announced is not None:
            url, model = str(announced["url"]), model or str(announced["model"])
    if settings.backend != "auto":
        return settings.backend, url, model
    return ("openai" if url else "transformers"), url, model


def open_backend(settings: Settings) -> Backend:
    """Load or connect to the model the settings name. Slow (seconds to minutes for a
    real model): call it from a worker, never from the UI thread."""
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

        return VLLMBackend(model or DEFAULT_MODEL)
    from agents.backends.transformers_backend import TransformersBackend

    return TransformersBackend(model or DEFAULT_MODEL)


__all__ = [
    "DEFAULT_MODEL",
    "AdapterError",
    "Backend",
    "BackendError",
    "Candidate",
    "ContextOverflowError",
    "ModelNotFoundError",
    "ServerUnreachableError",
    "open_backend",
    "resolve",
]
