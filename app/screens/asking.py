"""The live session's approval requests, as the operator meets them.

One request is asked at a time, in the approval panel (`ApprovalScreen`). The operator
may set it aside with escape to look around; it stays pending, the status bar says so,
and `d` brings it back. The next request waits while one is asked, and while the session
is paused: pausing holds the next proposal until the session resumes (or `d` asks for it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from textual.app import App

    from agents.approval import Answer, ApprovalRequest


class AskingOwner(Protocol):
    """What the queue needs of the screen that owns it."""

    app: App[None]

    @property
    def paused(self) -> bool: ...

    def decision_pending(self, note: str) -> None:
        """Say in the status bar that a request waits, and why it is not on screen."""

    def decided(self, *, stop: bool) -> None:
        """A request was answered (or the panel was closed to stop the session)."""


class Asking:
    def __init__(self, owner: AskingOwner) -> None:
        self.owner = owner
        #: requests not yet shown, oldest first
        self.waiting: list[ApprovalRequest] = []
        #: the request being asked: on screen, or set aside
        self.current: ApprovalRequest | None = None
        #: the current request's panel was closed with escape
        self.set_aside = False

    @property
    def busy(self) -> bool:
        """A request is asked or waits: the agent is not working, it waits for the operator."""
        return self.current is not None or bool(self.waiting)

    @property
    def can_take_up(self) -> bool:
        """`d` has something to show: a request set aside, or one held by the pause."""
        return (self.current is not None and self.set_aside) or (
            self.current is None and bool(self.waiting)
        )

    def arrived(self, request: ApprovalRequest) -> None:
        self.waiting.append(request)
        self.next()

    def next(self, *, even_paused: bool = False) -> None:
        """Show the oldest waiting request, unless one is asked or the session is paused."""
        if self.current is not None:
            return
        self.waiting = [r for r in self.waiting if not r.future.done()]
        if not self.waiting:
            return
        if self.owner.paused and not even_paused:
            action = self.waiting[0].action
            self.owner.decision_pending(f"action #{action.id} waits: p resumes, d decides now")
            return
        self.current = self.waiting.pop(0)
        self.show()

    def take_up(self) -> bool:
        """`d`: the request set aside (or held by the pause) back on screen."""
        if self.current is not None and self.set_aside:
            self.show()
            return True
        if self.current is None and self.waiting:
            self.next(even_paused=True)
            return self.current is not None
        return False

    def show(self) -> None:
        from app.screens.approval import ApprovalScreen

        request = self.current
        assert request is not None
        self.set_aside = False
        screen = ApprovalScreen(request)

        def answered(decision: Answer | None) -> None:
            if self.current is not request:
                return  # the session ended while the panel was up (`close`)
            if screen.set_aside:
                self.set_aside = True
                self.owner.decision_pending(f"action #{request.action.id} waits: d decides")
                return
            self.current = None
            if decision is not None and not request.future.done():
                request.future.set_result(decision)
            self.owner.decided(stop=screen.stop_requested)
            if not screen.stop_requested:
                self.next()

        self.owner.app.push_screen(screen, answered)

    def close(self) -> None:
        """The session ended (or was stopped): nothing of it is asked any more."""
        from app.screens.approval import ApprovalScreen

        self.waiting.clear()
        asked, self.current, self.set_aside = self.current, None, False
        screen = self.owner.app.screen
        if asked is not None and isinstance(screen, ApprovalScreen) and screen.request is asked:
            screen.dismiss(None)
