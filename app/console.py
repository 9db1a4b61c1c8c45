"""The console app: themes, keys, the model (loaded in a worker after the first frame),
and the screens: main (trace tree, live session), approval, labelling, help.

No heavy import happens before the first frame: the model backend, the runtime and the
screens that are not shown yet are imported when they are first needed.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, ClassVar

from textual import on, work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.worker import Worker, WorkerState

from agents.settings import Settings
from app.screens.main import MainScreen
from app.themes import load_themes
from app.widgets.status_bar import StatusBar
from storage import TraceStore

if TYPE_CHECKING:
    from agents.backends import Backend
    from agents.tasks import Task

FALLBACK_THEME = "textual-dark"


def binding_ids() -> set[str]:
    """Every binding id the keys setting can remap, across the console's screens."""
    from app.screens.approval import ApprovalScreen
    from app.screens.help import HelpScreen
    from app.screens.label import LabelScreen
    from app.widgets.trace_tree import TraceTree

    owners = (ConsoleApp, MainScreen, ApprovalScreen, LabelScreen, HelpScreen, TraceTree)
    return {b.id for owner in owners for b in owner.BINDINGS if isinstance(b, Binding) and b.id}


class ConsoleApp(App[None]):
    TITLE = "agent-console"
    # Textual reads a screen's CSS_PATH when the screen is pushed, not for the default
    # screen: the main screen's stylesheet (beside its module) is loaded by the app.
    CSS_PATH = "screens/main.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit", id="app.quit", tooltip="Leave the console"),
        Binding(
            "r", "refresh", "Refresh", id="app.refresh", tooltip="Reload sessions from the store"
        ),
    ]

    def __init__(
        self,
        *,
        store: TraceStore,
        settings: Settings,
        start: str = "main",
        label_session: int | None = None,
        task: Task | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.settings = settings
        self.start = start
        self.label_session = label_session
        self.start_task = task
        self.backend: Backend | None = None
        self.model_problem: str | None = None
        self.sub_title = store.where
        # Animated scrolling costs ~230 ms a jump on a big tree: the console does not animate.
        self.animation_level = "none"

    def get_default_screen(self) -> MainScreen:
        return MainScreen(self.store)

    @property
    def main(self) -> MainScreen:
        screen = self.screen_stack[0]
        assert isinstance(screen, MainScreen)
        return screen

    def on_ready(self) -> None:
        """The first frame is up: the collector (off during start-up, see app.cli) comes
        back, with everything loaded so far out of its way."""
        gc.freeze()
        gc.enable()

    def on_mount(self) -> None:
        self.apply_theme()
        self.apply_keymap()
        if self.settings.backend != "none":
            self.load_model()
        else:
            self.model_failed("the backend setting is `none`")
        if self.start == "label":
            from app.screens.label import LabelScreen

            self.push_screen(LabelScreen(self.store, self.label_session))

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
            backend = open_backend(self.settings)
        except BackendError as exc:
            self.call_from_thread(self.model_failed, str(exc))
            return
        self.call_from_thread(self.model_ready, backend)

    def model_ready(self, backend: Backend) -> None:
        self.backend = backend
        self.show_model_state()
        if self.start_task is not None:
            self.main.start_session(self.start_task)

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
            return  # nothing to remap: the other screens need not be imported yet
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

    @on(Worker.StateChanged)
    def report_failure(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            # Database errors carry the SQL and its parameters: the first line says enough.
            cause = getattr(event.worker.error, "orig", None) or event.worker.error
            reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
            self.notify(
                f"{event.worker.name} failed: {reason}", severity="error", timeout=10, markup=False
            )
