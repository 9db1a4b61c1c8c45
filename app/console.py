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
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events, on, work
from textual.app import App
from textual.binding import BindingType
from textual.notifications import SeverityLevel
from textual.worker import Worker

from agents.safe_text import escape_controls
from agents.settings import Settings
from agents.workbench import Workbench
from app import collector, exit_codes, shared
from app.actions import APP_ACTIONS, binding_ids, bindings
from app.message_log import MessageLog
from app.messages import UseAdapter
from app.screens.main import MainScreen
from app.themes import load_themes
from app.widgets.trace_tree import TraceTree

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import threading

    from agents.backends import Backend
    from agents.tasks import Task
    from storage import Job, TraceStore

FALLBACK_THEME = "textual-dark"
#: What the operator does (keys, the mouse, a paste): the collector waits while it goes on.
OPERATOR_EVENTS = (events.InputEvent, events.Paste)


#: The row a list, table or tree has selected shows without colour too (NO_COLOR, a
#: monochrome terminal) while the widget has no focus: Textual's default is a tint alone.
#: A theme file that sets the variable keeps its own.
BLURRED_CURSOR_STYLE = "underline"

#: How long quitting or an ending signal waits for the running sessions to store their
#: ends (a stop cuts a forward pass at its next layer: a fraction of a second on a CPU).
ENDING_WAIT_SECONDS = 1.5
#: After an ending signal the process ends this long after, whatever blocks it then
#: (app.signals.exit_after): the sessions' wait, then the terminal's restore.
EXIT_DEADLINE_SECONDS = ENDING_WAIT_SECONDS + 15.0
#: An error's toast stays this long (a week: until clicked, or the message log is opened).
ERROR_TIMEOUT = 7 * 24 * 3600.0


class ConsoleApp(App[None]):
    TITLE = "agent-console"
    # Textual reads a screen's CSS_PATH when the screen is pushed, not for the default
    # screen: the main screen's stylesheet (beside its module) is loaded by the app.
    CSS_PATH = "screens/main.tcss"
    BINDINGS: ClassVar[list[BindingType]] = bindings(APP_ACTIONS)

    def __init__(
        self,
        *,
        store: TraceStore | None = None,
        database: str | None = None,
        settings: Settings,
        start: str = "main",
        label_session: int | None = None,
        task: Task | None = None,
        adapter: str | None = None,
    ) -> None:
        """`store`, open; or `database`, to open after the first frame (a store that
        cannot be opened then ends the console with exit code 5, `store_problem` saying
        why)."""
        super().__init__()
        #: every notification of the session, in full (the `m` key shows it)
        self.message_log = MessageLog()
        if store is None and database is None:
            raise ValueError("ConsoleApp needs a store or a database to open")
        self.database = database
        self.settings = settings
        self.start = start
        self.label_session = label_session
        #: the model, its adapter, the running sessions and the memory, which every
        #: screen asks (`app.shared.workbench`)
        self.workbench = Workbench(store, settings, task=task, adapter=adapter)
        #: why the store did not open (the console ended with exit code 5)
        self.store_problem: str | None = None
        self.sub_title = store.where if store is not None else "opening the store…"
        # Animated scrolling costs ~230 ms a jump on a big tree: the console does not animate.
        self.animation_level = "none"
        #: full garbage collections wait for a quiet moment (see app.collector)
        self.collector = collector.IdleCollector()
        #: a SIGTERM or SIGHUP is ending the console (see `end_by_signal`)
        self.ending = False
        #: ends the process if the app has not ended in time (see `end_by_signal`)
        self.exit_deadline: threading.Timer | None = None

    @property
    def store(self) -> TraceStore:
        return self.workbench.store

    def get_default_screen(self) -> MainScreen:
        return MainScreen()

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

    def get_css_variables(self) -> dict[str, str]:
        variables = super().get_css_variables()
        if "block-cursor-blurred-text-style" not in self.current_theme.variables:
            variables["block-cursor-blurred-text-style"] = BLURRED_CURSOR_STYLE
        return variables

    def on_unmount(self) -> None:
        self.collector.stop()
        self.workbench.close()

    def on_mount(self) -> None:
        self.catch_ending_signals()
        self.apply_theme()
        self.apply_keymap()
        if self.workbench.store_ready.is_set():
            self.start_work()
        else:
            # after the first frame: the store's imports (SQLAlchemy) take half a second
            self.call_after_refresh(self.open_store)

    @work(thread=True, exclusive=True, exit_on_error=False, group="store",
          name="opening the store")  # fmt: skip
    def open_store(self) -> None:
        from storage import StoreError

        assert self.database is not None
        try:
            self.workbench.open_store(self.database)
        except StoreError as exc:
            self.call_from_thread(self.store_failed, str(exc))
            return
        self.call_from_thread(self.store_opened)

    def store_opened(self) -> None:
        self.sub_title = self.store.where
        self.main.store_opened()
        self.start_work()

    def store_failed(self, reason: str) -> None:
        """The store cannot be opened: the console ends with exit code 5 and the command
        line prints `reason` as its one line."""
        self.store_problem = reason
        self.exit(return_code=exit_codes.STORE)

    def start_work(self) -> None:
        """The store is open: the model starts loading (after the first frame: its
        imports, torch, take seconds), and the labelling screen opens where asked for."""
        self.refresh_bindings()
        self.reap_orphans()
        if self.settings.backend != "none":
            self.call_after_refresh(self.load_model)
        else:
            self.model_failed("the backend setting is `none`")
        if self.start == "label":
            from app.screens.label import LabelScreen

            self.push_screen(LabelScreen(self.store, self.label_session))

    @work(thread=True, exit_on_error=False, group="store", name="aborting orphan sessions")
    def reap_orphans(self) -> None:
        """Sessions still stored running or waiting whose process on this host is gone
        (killed, crashed) are marked aborted, with the reason, and the tree shows it."""
        from agents.processes import reap_orphan_sessions

        reaped = reap_orphan_sessions(self.store)
        if reaped:
            self.call_from_thread(self.orphans_reaped, reaped)

    def orphans_reaped(self, reaped: list[int]) -> None:
        names = ", ".join(str(session_id) for session_id in reaped)
        self.notify(
            f"session{'s' if len(reaped) > 1 else ''} {names}: left running by a process "
            "that is gone; marked aborted (resumable)",
            severity="warning",
            markup=False,
        )
        self.main.query_one(TraceTree).load(self.store)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Until the store is open (a moment after the first frame) only leaving and the
        # message log work.
        return action in ("quit", "messages") or self.workbench.store_ready.is_set()

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
        if not self.ending and not self.is_headless:  # a test's app shares its process
            from app.signals import exit_after

            # after SIGHUP the terminal is gone, and restoring it can block for ever
            self.exit_deadline = exit_after(EXIT_DEADLINE_SECONDS, exit_codes.INTERRUPTED)
        self.end(f"stopped by {signal.Signals(signum).name}", exit_codes.INTERRUPTED)

    async def action_quit(self) -> None:
        """Leaving the console stops every session it runs, whatever it was doing
        (working, waiting for a decision or a step key, paused): stored aborted, quitting
        the reason. A session's thread left waiting would keep the process from ending."""
        self.end("the operator quit the console", exit_codes.OK)

    def end(self, reason: str, code: int) -> None:
        if not self.ending:
            self.ending = True
            self.run_worker(self._end(reason, code))

    def run(self, *args: Any, **kwargs: Any) -> None:
        try:
            return super().run(*args, **kwargs)
        finally:
            if self.exit_deadline is not None:
                self.exit_deadline.cancel()

    async def _end(self, reason: str, code: int) -> None:
        # the live session, an A/B's sides, a held-out comparison's current one: each
        # stored aborted before the process goes
        left = await asyncio.to_thread(
            self.workbench.sessions.stop_all, reason, ENDING_WAIT_SECONDS
        )
        if left:
            log.warning("%d session(s) still running at exit", left)
        self.exit(return_code=code)

    @work(thread=True, exclusive=True, exit_on_error=False, group="model")
    def load_model(self) -> None:
        """After the first frame: a real model takes seconds to minutes to load."""
        from agents.backends import BackendError

        bench = self.workbench
        try:
            backend = bench.open_model(self.model_progress)
        except BackendError as exc:
            self.call_from_thread(self.model_failed, str(exc))
            return
        problem = bench.start_adapter_problem
        if problem is not None:
            if not problem.startswith("--adapter"):  # a lookup's line names it already
                problem = f"--adapter {bench.start_adapter}: {problem}"
            self.call_from_thread(
                self.notify,
                f"{problem}; the base model is in use",
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
        if self.workbench.backend is None:
            self.main.show_model_state(loading=line)

    def model_ready(self, backend: Backend) -> None:
        self.workbench.model_ready(backend)
        self.main.show_model_state()
        if self.workbench.start_task is not None:
            self.main.start_session(self.workbench.start_task)
        else:
            self.offer_starter(backend)

    def offer_starter(self, backend: Backend) -> None:
        """On an offline model with no adapter in use: offer its starter adapter where one
        is registered for it, or, on a base model (which writes almost no valid block
        untaught), say how to train one."""
        from agents.backends.offline import offline_entry
        from storage import NotFoundError
        from training.starter import NAME

        offline = offline_entry(backend.model)
        if backend.active_adapter or offline is None:
            return
        try:
            adapter = self.store.get_adapter(NAME)
        except NotFoundError:
            if offline.instruction_tuned:
                return
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
        from app.dialogs import ConfirmScreen

        self.push_screen(
            ConfirmScreen(
                f"Load the starter adapter {NAME!r}?",
                "Trained from the teaching sessions that ship with the project"
                + (
                    "."
                    if offline.instruction_tuned
                    else "; without it the offline base model writes almost no valid block."
                )
                + " The palette's 'adapter' commands switch back at any time.",
            ),
            lambda yes: self.switch_adapter(NAME) if yes else None,
        )

    def model_failed(self, reason: str) -> None:
        self.workbench.model_failed(reason)
        self.main.show_model_state()
        self.notify(
            f"no model: {reason}. Browsing, labelling and training still work.",
            severity="warning",
            timeout=15,
            markup=False,
        )

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
        self.main.query_one(TraceTree).load_sessions()

    # -- notifications and the message log --------------------------------------------------

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every notification (a screen's or a widget's comes here too) is kept in the
        message log in full; an error's toast stays until dismissed. Either may quote the
        model (a session's last message, an error), so its controls are shown escaped."""
        message, title = escape_controls(message), escape_controls(title)
        self.message_log.add(message, title=title, severity=severity, markup=markup)
        if severity == "error":
            timeout = ERROR_TIMEOUT
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def action_messages(self) -> None:
        """Open the message log (dismissing the toasts), or close it when it is open."""
        from app.screens.messages import MessagesScreen

        if isinstance(self.screen, MessagesScreen):
            self.screen.action_back()
        else:
            self.push_screen(MessagesScreen(self.message_log))

    # -- training and adapters ------------------------------------------------------------

    def action_train(self, kind: str = "sft") -> None:
        """The confirm dialog; confirming queues the job in a worker process."""
        from agents.backends import default_model
        from agents.settings import data_dir
        from app.screens.train_confirm import TrainConfirmScreen

        backend = self.workbench.backend
        base = backend.model if backend is not None else self.settings.model
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
        self.main.jobs.load_jobs()

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

    def action_improve(self) -> None:
        """The runs of `agent-console improve` (often running in another process)."""
        from app.screens.improve import ImproveScreen

        self.push_screen(ImproveScreen(self.store))

    def action_use_adapter(self) -> None:
        from app.dialogs import AdapterPicker

        backend = self.workbench.backend
        if backend is None:
            self.notify(self.workbench.no_model_reason(), severity="warning", markup=False)
            return
        picker = AdapterPicker(
            self.store, "Use adapter", backend.active_adapter, self.workbench.model_name()
        )
        self.push_screen(picker, lambda name: self.switch_adapter(name) if name else None)

    def action_base_model(self) -> None:
        self.switch_adapter(None)

    def switch_adapter(self, name: str | None) -> None:
        """Use the registered adapter `name` (None: the base model), loading it first."""
        busy = self.workbench.adapter_busy()
        if busy is not None:
            self.notify(busy, severity="warning", markup=False)
            return
        self.load_adapter(name)

    @work(thread=True, exclusive=True, exit_on_error=False, group="adapter",
          name="loading the adapter")  # fmt: skip
    def load_adapter(self, name: str | None) -> None:
        backend = self.workbench.backend
        if backend is None:
            return
        problem = self.workbench.apply_adapter(backend, name)
        if problem is not None:
            self.call_from_thread(self.notify, problem, severity="error", markup=False)
            return
        self.call_from_thread(self.adapter_ready, name)

    def on_use_adapter(self, message: UseAdapter) -> None:
        """A screen asks for an adapter (the jobs screen's "load")."""
        self.switch_adapter(message.name)

    def adapter_ready(self, name: str | None) -> None:
        self.main.show_model_state()
        self.notify(f"adapter {name} in use" if name else "the base model is in use", markup=False)

    @on(Worker.StateChanged)
    def report_failure(self, event: Worker.StateChanged) -> None:
        shared.report_failure(self, event)
