"""The model a run samples from and the registered adapter it uses: found, checked,
loaded and put in use here, by every command (`--query`, `batch`, `improve`) and by the
console, so an adapter refused in one place is refused in all."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agents.backends import Backend
    from agents.settings import Settings
    from storage import Adapter
    from storage.views import Adapters


class AdapterLookupError(Exception):
    """A registered adapter that is not there or cannot be loaded; `str()` is one line
    for the user."""


def adapter_problem(adapter: Adapter) -> str | None:
    """Why the registered adapter's folder cannot be loaded (gone, not a LoRA adapter,
    weights missing or cut short), in one line; None when it is whole."""
    from agents.backends.base import AdapterError
    from agents.backends.lora import read_adapter

    try:
        read_adapter(adapter.name, adapter.path)
    except AdapterError as exc:
        return str(exc)
    return None


def find_adapter(store: Adapters, name: str) -> Adapter:
    """The registered adapter `name`, whole; AdapterLookupError (one line, listing the
    known names) when there is none, or its files are gone or broken."""
    from storage import NotFoundError

    try:
        adapter = store.get_adapter(name)
    except NotFoundError:
        known = ", ".join(a.name for a in store.list_adapters()) or "none yet"
        raise AdapterLookupError(f"--adapter {name!r}: no such adapter (known: {known})") from None
    if not Path(adapter.path).is_dir():
        raise AdapterLookupError(f"--adapter {name!r}: its files are gone ({adapter.path})")
    problem = adapter_problem(adapter)
    if problem is not None:
        raise AdapterLookupError(f"--adapter {name!r} cannot be used: {problem}")
    return adapter


def trained_on(adapter: Adapter, model: str) -> bool:
    """Whether `adapter` was trained on `model`: a folder or a hub id, compared by its last
    part (a converted offline model's folder is named as the registry names the model)."""

    def name(model: str) -> str:
        return model.rstrip("/").rsplit("/", 1)[-1].casefold()

    return name(adapter.base_model) == name(model)


def knows_its_model(backend: Backend) -> bool:
    """Whether `backend.model` names the weights (in process), not a server's name for them."""
    return backend.name != "openai"


def load_registered_adapter(store: Adapters, backend: Backend, name: str) -> None:
    """The registered adapter `name` loaded into `backend` once (not put in use), after
    `find_adapter` found it whole and trained on the backend's model; a model server that
    already holds it is not asked again."""
    if name not in backend.adapters():
        adapter = find_adapter(store, name)
        if knows_its_model(backend) and not trained_on(adapter, backend.model):
            raise AdapterLookupError(
                f"adapter {name!r} was trained on {adapter.base_model}, not on the model in "
                f"use ({backend.model})"
            )
        backend.load_adapter(adapter.name, adapter.path)


def use_registered_adapter(store: Adapters, backend: Backend, name: str | None) -> None:
    """`backend` samples with the registered adapter `name` (loaded first if new), or with
    the base model (None)."""
    if name is not None:
        load_registered_adapter(store, backend, name)
    backend.use_adapter(name)


def open_model(
    settings: Settings,
    store: Adapters,
    adapter: str | None,
    progress: Callable[[str], None] | None = None,
) -> Backend:
    """The model the settings name, with the registered adapter `adapter` in use (None:
    the base model). The adapter is looked up before the model loads, so a wrong name
    costs no load. Raises AdapterLookupError or `BackendError`; a model whose adapter
    cannot be loaded is closed first. Slow: call it from a thread or a command."""
    from agents.backends import open_backend

    if adapter is not None:
        find_adapter(store, adapter)
    backend = open_backend(settings, progress)
    try:
        use_registered_adapter(store, backend, adapter)
    except BaseException:
        backend.close()
        raise
    return backend
