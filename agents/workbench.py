"""What the console's screens share, without Textual: the store and the settings, the model
and its adapter, every session that samples from the model (the operator's live one, an
A/B's sides, a held-out set's current one), the comparison that holds the model, and the
retrieval memory. The screens ask the workbench, never each other; the console app owns
one (`app.console`).

Its rules: one session at a time samples for the operator; nothing else samples while an
A/B comparison holds the model; the adapter changes only while nothing samples.

The store may open after the console's first frame (`open_store`, from a thread: it loads
SQLAlchemy): until then `store_ready` is unset and `store` refuses.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agents.backends import Backend
    from agents.memory import Memory
    from agents.runtime import Runtime
    from agents.settings import Settings
    from agents.tasks import Task
    from storage import TraceStore


class LiveRun(Protocol):
    """The operator's live session, as the workbench sees it."""

    @property
    def task(self) -> Task: ...

    @property
    def session_id(self) -> int: ...


class Workbench:
    def __init__(
        self,
        store: TraceStore | None,
        settings: Settings,
        *,
        task: Task | None = None,
        adapter: str | None = None,
    ) -> None:
        #: the store, once open (see `store`)
        self._store = store
        #: set once the store is open
        self.store_ready = threading.Event()
        if store is not None:
            self.store_ready.set()
        #: whether the workbench opened the store (and closes it)
        self._owns_store = False
        self.settings = settings
        #: the task the console was started with (`--task`), run once the model is up
        self.start_task = task
        #: a registered adapter's name (`--adapter`), to load once the model is up
        self.start_adapter = adapter
        self.backend: Backend | None = None
        #: why there is no model (None while it loads, or once it is up)
        self.model_problem: str | None = None
        #: why the start adapter is not in use, once the model is up
        self.start_adapter_problem: str | None = None
        #: the operator's live session, while one runs
        self.live: LiveRun | None = None
        #: set while an A/B comparison holds the model (see `hold_model`)
        self._holder: threading.Event | None = None
        #: every session running now, which an ending signal stops
        self.sessions = RunningSessions()
        #: semantic search and similar-branch labelling (opened when first used)
        self.memory = SharedMemory(lambda: self.store, settings.memory_model)

    # -- the store -------------------------------------------------------------------------

    @property
    def store(self) -> TraceStore:
        """The trace store; `StoreError` while it is not open yet."""
        if self._store is None:
            from storage import StoreError

            raise StoreError("the trace store is still opening")
        return self._store

    def open_store(self, database: str) -> TraceStore:
        """Open the store at `database` (a path or URL; slow the first time: it loads
        SQLAlchemy, so from a thread) and keep it, to close with the workbench. Raises
        `StoreError` (the command line's exit code 5)."""
        from storage import TraceStore

        store = TraceStore(database)
        self._store, self._owns_store = store, True
        self.store_ready.set()
        return store

    # -- the model -------------------------------------------------------------------------

    def open_model(self, progress: Callable[[str], None]) -> Backend:
        """Load the model the settings name (seconds to minutes: from a thread), with the
        start adapter in use where one was asked for; raises `BackendError`. A start
        adapter that cannot be used is left out: `start_adapter_problem` says why."""
        from agents.backends import open_backend

        backend = open_backend(self.settings, progress)
        self.start_adapter_problem = (
            self.apply_adapter(backend, self.start_adapter) if self.start_adapter else None
        )
        return backend

    def model_ready(self, backend: Backend) -> None:
        self.backend = backend
        self.model_problem = None

    def model_failed(self, reason: str) -> None:
        self.model_problem = reason

    def no_model_reason(self) -> str:
        if self.model_problem is not None:
            return f"no model: {self.model_problem}"
        return "the model is still loading: wait for it in the status bar"

    def require_model(self) -> Backend:
        """The model; RuntimeError (why there is none) while there is none."""
        if self.backend is None:
            raise RuntimeError(self.no_model_reason())
        return self.backend

    # -- who samples from it ---------------------------------------------------------------

    def hold_model(self, running: threading.Event) -> None:
        """An A/B comparison holds the model while `running` is set: no other session may
        sample from it, and the adapter stays."""
        self._holder = running

    @property
    def comparing(self) -> bool:
        return self._holder is not None and self._holder.is_set()

    def model_name(self) -> str | None:
        """The weights in use, where the backend knows them (not behind a server's name)."""
        from agents.adapters import knows_its_model

        backend = self.backend
        return backend.model if backend is not None and knows_its_model(backend) else None

    def session_refusal(self) -> str | None:
        """Why the operator's session cannot start now, or None."""
        if self.live is not None:
            return "a session is running: stop it (x on the main screen) before starting another"
        if self.backend is None:
            return self.no_model_reason()
        if self.comparing:
            return "an A/B comparison is using the model: wait for it"
        return None

    def adapter_busy(self) -> str | None:
        """Why the adapter cannot change now (a session samples from the model), or None."""
        if self.backend is None:
            return self.no_model_reason()
        if self.live is not None:
            return (
                "a session is running: stop it (x on the main screen) before switching the adapter"
            )
        if self.comparing:
            return "an A/B comparison is running: wait for it or stop it"
        return None

    # -- the adapter -----------------------------------------------------------------------

    def apply_adapter(self, backend: Backend, name: str | None) -> str | None:
        """Load (once) and use the registered adapter `name` (None: the base model); the
        problem, or None. Slow for a real model: from a thread."""
        from agents.adapters import AdapterLookupError, use_registered_adapter
        from agents.backends import BackendError

        try:
            use_registered_adapter(self.store, backend, name)
        except (AdapterLookupError, BackendError) as exc:
            return str(exc)
        return None

    def ensure_adapter(self, backend: Backend, name: str) -> None:
        """The registered adapter `name` loaded into `backend` (not put in use)."""
        from agents.adapters import load_registered_adapter

        load_registered_adapter(self.store, backend, name)

    def close(self) -> None:
        self.memory.close()
        if self._owns_store and self._store is not None:
            self._store.close()


class SharedMemory:
    """The retrieval memory (agents/memory.py) as the console's screens use it. Opening
    it loads the embedding model (seconds): it is opened on first use, from a thread
    worker, never the UI thread. One screen worker holds it at a time, so a search typed
    while the index syncs waits, and gives up as soon as a newer search takes over."""

    def __init__(self, store: Callable[[], TraceStore], model: str | None = None) -> None:
        #: the store (called when the memory first opens)
        self.store = store
        #: the embedding model; None: the core's default (the bundled MiniLM)
        self.model = model
        self._memory: Memory | None = None
        self._lock = threading.Lock()

    @contextmanager
    def use(self, should_stop: Callable[[], bool]) -> Iterator[Memory | None]:
        """The memory, once no other screen worker holds it; None when `should_stop()`
        turns true while waiting (a newer search took over, or the screen closed)."""
        while not self._lock.acquire(timeout=0.05):
            if should_stop():
                yield None
                return
        try:
            if self._memory is None:
                from agents.memory import DEFAULT_EMBEDDING_MODEL, shared_memory

                # The one the runtime recalls from too: the model is loaded once.
                self._memory = shared_memory(
                    self.store(), model=self.model or DEFAULT_EMBEDDING_MODEL
                )
            yield self._memory
        finally:
            self._lock.release()

    def close(self) -> None:
        if self._memory is not None:
            self._memory.close()
            self._memory = None


class RunningSessions:
    """Every session the console runs now: the live one, an A/B's two sides, a held-out
    comparison's current one. An ending signal stops them all with its reason and waits
    for their ends to be stored; once it has, no new one starts (`running` refuses)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._runs: set[Runtime] = set()
        self._closed = False

    @contextlib.contextmanager
    def running(self, runtime: Runtime) -> Iterator[bool]:
        """While the body runs `runtime`, it is one of the console's sessions. Yields
        False (and the body should not run it) once the console is ending."""
        with self._changed:
            if self._closed:
                yield False
                return
            self._runs.add(runtime)
        try:
            yield True
        finally:
            with self._changed:
                self._runs.discard(runtime)
                self._changed.notify_all()

    def stop_all(self, reason: str, timeout: float) -> int:
        """Stop every running session with `reason` and wait (up to `timeout` seconds)
        until each has stored its end; no session starts afterwards. Returns how many
        were still running at the deadline."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self._closed = True
            runs = list(self._runs)
        for runtime in runs:
            runtime.stop(reason)
        with self._changed:
            while self._runs and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            return len(self._runs)
