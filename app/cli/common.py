"""What the headless subcommands share: opening the store and the model, each failure one
line through the command's own `fail` and an exit code."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from app import exit_codes
from app.cli.failing import Fail

if TYPE_CHECKING:
    from agents.backends import Backend
    from agents.settings import Settings
    from storage import TraceStore

UNSAFE_WARNING = (
    "WARNING: --unsafe-no-sandbox: model-written code runs WITHOUT the sandbox, as you, "
    "with your files and network. Only rlimits and timeouts apply."
)


def refuse_without_sandbox(unsafe: bool, fail: Fail) -> int | None:
    """Exit code 1 after one line (why, and how to fix it) when model-written code cannot
    run sandboxed here; with `--unsafe-no-sandbox`, the loud warning instead. None: go on."""
    if unsafe:
        print(UNSAFE_WARNING, file=sys.stderr)
        return None
    from agents.sandbox import sandbox_status

    status = sandbox_status()
    if not status.ok:
        return fail(f"the sandbox is unavailable: {status.detail}. {status.fix}", 1)
    return None


def open_store(settings: Settings, fail: Fail) -> TraceStore | int:
    """The trace store the settings name, or exit code 5 after one line."""
    from storage import StoreError, TraceStore

    try:
        return TraceStore(settings.database())
    except StoreError as exc:
        return fail(str(exc), exit_codes.STORE)


def open_model(
    settings: Settings, store: TraceStore, adapter_name: str | None, fail: Fail
) -> Backend | int:
    """The model backend for a headless run, with the registered adapter `adapter_name`
    in use (`agents.adapters.open_model`; sessions record the backend's active adapter
    when they start); an exit code after one line when that cannot be."""
    from agents.adapters import AdapterLookupError
    from agents.adapters import open_model as open_with_adapter
    from agents.backends import BackendError

    if adapter_name:
        from agents.adapters import find_adapter

        try:  # a wrong name is a usage error, found before the model loads
            find_adapter(store, adapter_name)
        except AdapterLookupError as exc:
            return fail(str(exc), exit_codes.USAGE)
    print("loading the model...", file=sys.stderr, flush=True)
    try:
        backend = open_with_adapter(
            settings,
            store,
            adapter_name or None,
            lambda line: print(line, file=sys.stderr, flush=True),
        )
    except (AdapterLookupError, BackendError) as exc:
        return fail(str(exc), exit_codes.MODEL)
    if adapter_name:
        print(f"using adapter {adapter_name!r}", file=sys.stderr, flush=True)
    return backend
