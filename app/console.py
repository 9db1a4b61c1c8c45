"""The console app: themes, keys, the model (loaded in a worker after the first frame),
the retrieval memory (opened in a worker when first searched), and the screens: main
(trace tree, live session), approval, labelling, help, search, similar branches, training
jobs, batch runs.

No heavy import happens before the first frame: the model backend, the runtime and the
screens that are not shown yet are imported when they are first needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import events, on, work
from textual.app import App
from textual.binding import BindingType
from textual.worker import Worker, WorkerState

from agents.settings import Settings
from app import collector, exit_codes
from app.actions import APP_ACTIONS, binding_ids, bindings
from app.screens.main import MainScreen
from app.signals import RunningSessions
from app.themes import load_themes
from app.widgets.status_bar import StatusBar
from storage import TraceStore

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from agents.backends import Backend
    from agents.memory import Memory
    from agents.tasks import Task
    from app.screens.compare import CompareScreen
    from app.screens.held_out import HeldOutScreen
    from storage import Job

FALLBACK_THEME = "textual-dark"
#: What the operator does (keys, the mouse, a paste): the collector waits while it goes on.
OPERATOR_EVENTS = (events.InputEvent, events.Paste)


class SharedMemory:
    """The retrieval memory (agents/memory.py) as the console's screens use it. Opening
    it loads the embedding model (seconds): it is opened on first use, from a thread
    worker, never the UI thread. One screen worker holds it at a time, so a search typed
    while the index syncs waits, and gives up as soon as a newer search takes over."""

    def __init__(self, store: TraceStore, model: str | None = None) -> None:
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
                    self.store, model=self.model or DEFAULT_EMBEDDING_MODEL
                )
            yield self._memory
        finally:
            self._lock.release()

    def close(self) -> None:
        if self._memory is not None:
            self._memory.close()
            self._memory = None


#: How long an ending signal waits for the running session to store its end.
ENDING_WAIT_SECONDS = 20.0


class ConsoleApp(App[None]):
    TITLE = "agent-console"
    # Textual reads a screen's CSS_PATH when the screen is pushed, not for the default
    # screen: the main screen's stylesheet (beside its module) is loaded by the app.
    CSS_PATH = "screens/main.tcss"
    BINDINGS: ClassVar[list[BindingType]] = bindings(APP_ACTIONS)

    def __init__(
        self,
        *,
        store: TraceStore,
        settings: Settings,
        start: str = "main",
        label_session: int | None = None,
        task: Task | None = None,
        adapter: str | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.settings = settings
        self.start = start
        self.label_session = label_session
        self.start_task = task
        #: a registered adapter's name (`--adapter`), to load once the model is up
        self.start_adapter = adapter
        self.backend: Backend | None = None
        self.model_problem: str | None = None
        #: the A/B comparison on screen or last run; see `comparing`
        self.comparison: CompareScreen | HeldOutScreen | None = None
        #: semantic search and similar-branch labelling (opened when first used)
        self.memory = SharedMemory(store, settings.memory_model)
        self.sub_title = store.where
        # Animated scrolling costs ~230 ms a jump on a big tree: the console does not animate.
        self.animation_level = "none"
        #: full garbage collections wait for a quiet moment (see app.collector)
        self.collector = collector.IdleCollector()
        #: a SIGTERM or SIGHUP is ending the console (see `end_by_signal`)
        self.ending = False
        #: every session running now, which an ending signal stops
        self.sessions = RunningSessions()

    def get_default_screen(self) -> MainScreen:
        return MainScreen(self.store)

    @property
    def main(self) -> MainScreen:
        screen = self.screen_stack[0]
        assert isinstance(screen, MainScreen)
        return screen

    def on_ready(self) -> None:
        """The first frame is up: the collector (off during start-up, see app.cli) comes
        back, with everything loaded so far out of its way; its full collections wait for
        the operator to be quiet (`app.collector`)."""
        gc.freeze()
        gc.enable()
        self.collector.start()
        self.set_interval(collector.EVERY, self.collector.tick)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, OPERATOR_EVENTS):
            self.collector.touched()
        await super().on_event(event)

    def on_unmount(self) -> None:
        self.collector.stop()
        self.memory.close()

    def on_mount(self) -> None:
        self.catch_ending_signals()
        self.apply_theme()
        self.apply_keymap()
        if self.settings.backend != "none":
            # after the first frame: the load's imports (torch, seconds) would hold the
            # GIL while the screen is composed
            self.call_after_refresh(self.load_model)
        else:
            self.model_failed("the backend setting is `none`")
        if self.start == "label":
            from app.screens.label import LabelScreen

            self.push_screen(LabelScreen(self.store, self.label_session))

    def catch_ending_signals(self) -> None:
        """SIGTERM and SIGHUP (the terminal went away) end the console as quitting does,
        with the running session stored `aborted`, the signal as its reason; without
        this the process died where it stood and the session stayed `running`."""
        from app.signals import ENDING_SIGNALS

        loop = asyncio.get_running_loop()
        for signum in ENDING_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, self.end_by_signal, signum)

    def end_by_signal(self, signum: int) -> None:
        if not self.ending:
            self.ending = True
            self.run_worker(self._end(f"stopped by {signal.Signals(signum).name}"))

    async def _end(self, reason: str) -> None:
        # the live session, an A/B's sides, a held-out comparison's current one: each
        # stored aborted before the process goes (a forward pass may take seconds)
        await asyncio.to_thread(self.sessions.stop_all, reason, ENDING_WAIT_SECONDS)
        self.exit(return_code=exit_codes.INTERRUPTED)

    def show_model_state(self) -> None:
        """The status bar's model part (the main screen calls it once it is composed)."""
        found = self.main.query(StatusBar)
        if not found:
            return
        status = found.first()
        status.policy = self.settings.approval
        backend = self.backend
        if backend is not None:
            status.backend, status.model = backend.name, backend.model
            status.adapter = backend.active_adapter or ""
        elif self.model_problem is not None:
            status.backend = "no model"
        else:
            status.backend = "loading model…"

    @work(thread=True, exclusive=True, exit_on_error=False, group="model")
    def load_model(self) -> None:
        """After the first frame: a real model takes seconds to minutes to load."""
        from agents.backends import BackendError, open_backend

        try:
            backend = open_backend(self.settings, self.model_progress)
        except BackendError as exc:
            self.call_from_thread(self.model_failed, str(exc))
            return
        if self.start_adapter:
            problem = self.apply_adapter(backend, self.start_adapter)
            if problem is not None:
                self.call_from_thread(
                    self.notify,
                    f"--adapter {self.start_adapter}: {problem}; the base model is in use",
                    severity="warning",
                    timeout=15,
                    markup=False,
                )
        self.call_from_thread(self.model_ready, backend)

    def model_progress(self, line: str) -> None:
        """A step of a slow model load (the offline model's first conversion), from the
        loading worker: shown in the status bar, and kept in the log."""
        log.info("model: %s", line)
        self.call_from_thread(self._show_loading, line)

    def _show_loading(self, line: str) -> None:
        found = self.main.query(StatusBar)
        if found and self.backend is None:
            found.first().backend = f"loading model: {line}"

    def model_ready(self, backend: Backend) -> None:
        self.backend = backend
        self.show_model_state()
        if self.start_task is not None:
            self.main.start_session(self.start_task)
        else:
            self.offer_starter(backend)

    def offer_starter(self, backend: Backend) -> None:
        """On the offline model with no adapter in use: offer its starter adapter, or say
        how to train one (the base writes almost no valid block)."""
        from agents.backends.offline import is_offline
        from storage import NotFoundError
        from training.starter import NAME

        if backend.active_adapter or not is_offline(backend.model):
            return
        try:
            adapter = self.store.get_adapter(NAME)
        except NotFoundError:
            self.notify(
                "The offline model is a small base model: it writes few valid blocks until "
                "taught. `agent-console train starter` trains its starter adapter from the "
                "teaching sessions that ship with the project.",
                title="starter adapter",
                timeout=20,
                markup=False,
            )
            return
        if Path(adapter.base_model).resolve() != Path(backend.model).resolve():
            return
        from app.screens.jobs import ConfirmScreen

        self.push_screen(
            ConfirmScreen(
                f"Load the starter adapter {NAME!r}?",
                "Trained from the teaching sessions that ship with the project; without it "
                "the offline base model writes almost no valid block. The palette's "
                "'adapter' commands switch back at any time.",
            ),
            lambda yes: self.switch_adapter(NAME) if yes else None,
        )

    def model_failed(self, reason: str) -> None:
        self.model_problem = reason
        self.show_model_state()
        self.notify(
            f"no model: {reason}. Browsing, labelling and training still work.",
            severity="warning",
            timeout=15,
            markup=False,
        )

    def no_model_reason(self) -> str:
        if self.model_problem is not None:
            return f"no model: {self.model_problem}"
        return "the model is still loading: wait for it in the status bar"

    def apply_theme(self) -> None:
        themes, problems = load_themes()
        for theme in themes:
            self.register_theme(theme)
        for problem in problems:
            self.notify(problem, severity="warning", timeout=10, markup=False)
        wanted = self.settings.theme
        if wanted in self.available_themes:
            self.theme = wanted
        else:
            self.notify(
                f"unknown theme {wanted!r}; using {FALLBACK_THEME}",
                severity="error",
                timeout=10,
                markup=False,
            )
            self.theme = FALLBACK_THEME

    def apply_keymap(self) -> None:
        """The `keys` setting: binding id -> keys. An id no binding has is named in a
        warning (a typo would otherwise go unnoticed) and the rest still apply."""
        if not self.settings.keys:
            return
        known = binding_ids()
        unknown = sorted(set(self.settings.keys) - known)
        if unknown:
            self.notify(
                f"unknown key binding id {', '.join(unknown)} in the keys setting "
                f"(known: {', '.join(sorted(known))})",
                severity="warning",
                timeout=10,
                markup=False,
            )
        self.set_keymap({k: v for k, v in self.settings.keys.items() if k in known})

    def action_refresh(self) -> None:
        self.main.load_sessions()

    # -- training and adapters ------------------------------------------------------------

    @property
    def comparing(self) -> bool:
        """An A/B comparison holds the model: no other session may sample from it."""
        return self.comparison is not None and self.comparison.running.is_set()

    def action_train(self, kind: str = "sft") -> None:
        """The confirm dialog; confirming queues the job in a worker process."""
        from agents.backends import default_model
        from agents.settings import data_dir
        from app.screens.train_confirm import TrainConfirmScreen

        base = self.backend.model if self.backend is not None else self.settings.model
        dialog = TrainConfirmScreen(
            self.store,
            kind=kind,
            base_model=base or default_model(convert=False),
            data_dir=data_dir(),
        )
        self.push_screen(dialog, self.job_queued)

    def job_queued(self, job: Job | None) -> None:
        if job is None:
            return
        self.notify(
            f"job {job.id} queued: {job.kind.value} → adapter {job.name}. j shows its progress.",
            markup=False,
        )
        self.main.load_jobs()

    def action_jobs(self) -> None:
        from app.screens.jobs import JobsScreen

        self.push_screen(JobsScreen(self.store))

    def action_batches(self) -> None:
        """Batch runs (often running in another process): a task's session opens in the tree."""
        from app.screens.batches import BatchesScreen

        def opened(block: tuple[int, int] | None) -> None:
            if block is not None:
                self.main.reveal(*block)

        self.push_screen(BatchesScreen(self.store), opened)

    def action_use_adapter(self) -> None:
        from app.screens.jobs import AdapterPicker

        if self.backend is None:
            self.notify(self.no_model_reason(), severity="warning", markup=False)
            return
        picker = AdapterPicker(self.store, "Use adapter", self.backend.active_adapter)
        self.push_screen(picker, lambda name: self.switch_adapter(name) if name else None)

    def action_base_model(self) -> None:
        self.switch_adapter(None)

    def adapter_busy(self) -> str | None:
        """Why the adapter cannot change now (a session samples from the model)."""
        if self.backend is None:
            return self.no_model_reason()
        if self.main.live is not None:
            return "a session is running: stop it (x) before switching the adapter"
        if self.comparing:
            return "an A/B comparison is running: wait for it or stop it"
        return None

    def switch_adapter(self, name: str | None) -> None:
        """Use the registered adapter `name` (None: the base model), loading it first."""
        busy = self.adapter_busy()
        if busy is not None:
            self.notify(busy, severity="warning", markup=False)
            return
        self.load_adapter(name)

    @work(thread=True, exclusive=True, exit_on_error=False, group="adapter",
          name="loading the adapter")  # fmt: skip
    def load_adapter(self, name: str | None) -> None:
        backend = self.backend
        if backend is None:
            return
        problem = self.apply_adapter(backend, name)
        if problem is not None:
            self.call_from_thread(self.notify, problem, severity="error", markup=False)
            return
        self.call_from_thread(self.adapter_ready, name)

    def apply_adapter(self, backend: Backend, name: str | None) -> str | None:
        """Load (once) and use the registered adapter `name`; the problem, or None.
        Slow for a real model: from a worker."""
        from agents.backends import BackendError
        from storage import NotFoundError

        try:
            if name is not None and name not in backend.adapters():
                backend.load_adapter(name, self.store.get_adapter(name).path)
            backend.use_adapter(name)
        except (BackendError, NotFoundError) as exc:
            return str(exc)
        return None

    def adapter_ready(self, name: str | None) -> None:
        self.show_model_state()
        self.notify(f"adapter {name} in use" if name else "the base model is in use", markup=False)

    @on(Worker.StateChanged)
    def report_failure(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            # Database errors carry the SQL and its parameters: the first line says enough.
            cause = getattr(event.worker.error, "orig", None) or event.worker.error
            reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
            self.notify(
                f"{event.worker.name} failed: {reason}", severity="error", timeout=10, markup=False
            )
