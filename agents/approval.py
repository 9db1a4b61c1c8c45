"""The approval gate: who decides whether a proposed action runs.

Before an action runs, the runtime builds an `ApprovalRequest` and asks the policy:

- `auto` approves; `deny` rejects (a dry run: the agent plans, nothing runs);
- `evaluated` approves when the action's score clears the threshold, else asks;
- `ask` asks the operator.

Asking means handing the request to whoever speaks for the operator (the console posts
it to the UI as a message; the request carries a `Future`) and waiting for an `Answer`.
With nobody to ask (headless runs), the action is rejected with the reason. This module
never imports Textual: the console resolves the Future from its own thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from storage import Actor, Verdict

if TYPE_CHECKING:
    from storage import Node


class Policy(StrEnum):
    ASK = "ask"
    AUTO = "auto"
    EVALUATED = "evaluated"
    DENY = "deny"


class Aborted(Exception):
    """The session was stopped while it waited."""


@dataclass(frozen=True, slots=True)
class Answer:
    """The operator's (or the policy's) answer to an approval request."""

    verdict: Verdict
    #: the operator's new text, for `edit`
    text: str | None = None
    #: why, for `reject` (it enters the agent's next context as feedback)
    reason: str | None = None
    #: the sibling to run instead, for `pick_alternate`
    alternate_id: int | None = None

    @classmethod
    def approve(cls) -> Answer:
        return cls(Verdict.APPROVE)

    @classmethod
    def edit(cls, text: str) -> Answer:
        return cls(Verdict.EDIT, text=text)

    @classmethod
    def reject(cls, reason: str) -> Answer:
        return cls(Verdict.REJECT, reason=reason)

    @classmethod
    def pick(cls, alternate_id: int) -> Answer:
        return cls(Verdict.PICK_ALTERNATE, alternate_id=alternate_id)

    @classmethod
    def regenerate(cls, reason: str = "") -> Answer:
        """Sample the action (and its expectation) again; nothing runs this time."""
        return cls(Verdict.REGENERATE, reason=reason or None)


@dataclass(slots=True)
class ApprovalRequest:
    """A proposed action waiting for a verdict. Resolve `future` with an `Answer`."""

    session_id: int
    action: Node
    expectation: Node | None
    alternates: Sequence[Node]
    #: why the operator is asked (the policy, or the score under the threshold)
    why: str
    #: set when this is the tick's second (or later) try: which try, and why the last
    #: one did not do (`try 2 of 3: action #12 failed: NameError: ...`)
    retry: str | None = None
    #: the session's last outcome before this action (what the checks said), if any
    last_outcome: Node | None = None
    future: Future[Answer] = field(default_factory=Future)

    @property
    def score(self) -> float | None:
        return self.action.score


#: Called with each request that needs the operator; it must not block.
Asker = Callable[[ApprovalRequest], None]


class Gate:
    """Applies the policy; asks the operator through `asker` when there is one."""

    def __init__(self, policy: Policy | str, threshold: float, asker: Asker | None = None):
        self.policy = Policy(policy)
        self.threshold = threshold
        self.asker = asker

    def needs_operator(self, request: ApprovalRequest) -> bool:
        if self.policy is Policy.ASK:
            return True
        if self.policy is Policy.EVALUATED:
            return (request.action.score or 0.0) < self.threshold
        return False

    def decide(self, request: ApprovalRequest, stopped: threading.Event) -> tuple[Answer, Actor]:
        """The verdict and who gave it; raises `Aborted` if `stopped` is set while the
        operator is being waited for."""
        if self.policy is Policy.AUTO:
            return Answer.approve(), Actor.POLICY
        if self.policy is Policy.DENY:
            return Answer.reject("the approval policy is `deny`: actions never run"), Actor.POLICY
        if not self.needs_operator(request):
            return Answer.approve(), Actor.POLICY
        if self.asker is None:
            return Answer.reject(f"{request.why}, and no operator is here to ask"), Actor.POLICY
        self.asker(request)
        while True:
            if stopped.is_set():
                request.future.cancel()
                raise Aborted("stopped while waiting for the operator")
            try:
                decision = request.future.result(timeout=0.1)
            except TimeoutError:
                continue
            return decision, Actor.OPERATOR
