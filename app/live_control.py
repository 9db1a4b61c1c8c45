"""The operator's live session as the main screen drives it, with no Textual in it:
starting one (with the options `--query` would build), stepping, running on, pausing,
stopping, chatting, and the status bar's mode line and working count. The screen turns
keys into these calls and shows what they return."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from agents.events import candidates

if TYPE_CHECKING:
    from pathlib import Path

    from agents.events import BlockSampled, SessionStarted
    from agents.runtime import RunOptions
    from agents.tasks import Task
    from agents.workbench import Workbench
    from app.live import LiveSession
    from storage import Session

#: Seconds without a word from a running agent before the status bar counts how long it
#: has worked (a real model on a CPU takes tens of seconds a block: the screen must not
#: look stuck).
QUIET_AFTER = 2.0
#: The blocks of a tick that the model samples (orientation, action, expectation,
#: evaluation): until a tick is whole, what a tick costs is the first block's time and
#: this many more blocks of the planned tokens at the first block's speed.
BLOCKS_A_TICK = 4
#: A tick slower than this (seconds) is worth telling the operator how to speed up.
SLOW_TICK = 60.0
STEP_HOW = {
    "block": "step mode: s writes one block, S one tick, c runs on",
    "tick": "step mode by tick: S runs one tick, c runs on",
}


class LiveControl:
    def __init__(self, bench: Workbench) -> None:
        self.bench = bench
        #: the live session, while one runs
        self.session: LiveSession | None = None
        #: step mode asked for before a session runs: the next session starts in it
        self.armed: str | None = None
        #: what the status bar says of a decision waiting off screen
        self.pending_note = ""
        #: when the live session last said anything, and whether it now waits for a key
        self.quiet_since = 0.0
        self.awaiting_operator = False
        #: what a tick costs at this machine's speed: the last measured here until the
        #: session's first block is in (`measured`), then what its planned tokens take at
        #: that block's speed, then what its first whole tick took
        self.tick_cost = ""
        self.measured = False
        #: the live session's tokens a block, and the model's seconds of each tick so far
        self.block_tokens: int | None = None
        self.tick_seconds: dict[int, float] = {}

    def start(self, task: Task, target: Any) -> RunOptions:
        """A new live session of `task`, its messages posted to `target` (the screen);
        RuntimeError (why, one line) when none can start now. Run it with `session.run`."""
        refusal = self.bench.session_refusal()
        if refusal is not None:
            raise RuntimeError(refusal)
        from agents.runtime import session_options

        options = session_options(self.bench.settings, self.bench.require_model(), task)
        return self._open(task, options, target)  # as `--query` builds them

    def resume(self, session: Session, target: Any) -> tuple[RunOptions, str | None]:
        """Go on with stored `session` as it was started (its own options: approval,
        candidates, tokens, ...; the ticks it ran count against its limit), its messages
        posted to `target`; RuntimeError (why) when it cannot. With it, what the operator
        should know: the adapter it was started with, when the console samples another."""
        from agents.runtime import resume_options, session_options, task_from_snapshot
        from storage import SessionStatus

        refusal = self.bench.session_refusal()
        if refusal is None and session.status is SessionStatus.COMPLETED:
            refusal = f"session {session.id} is completed: nothing to resume"
        elif refusal is None and session.status in (SessionStatus.RUNNING, SessionStatus.WAITING):
            refusal = f"session {session.id} is {session.status.value}: another process runs it"
        if refusal is not None:
            raise RuntimeError(refusal)
        backend = self.bench.require_model()
        task = task_from_snapshot(session.settings.get("task", {}))
        fallback = session_options(self.bench.settings, backend, task)
        options = resume_options(self.bench.store, session, fallback, {})
        self._open(task, options, target, resume=session.id)
        note = None
        if session.adapter != backend.active_adapter:
            started = f"adapter {session.adapter}" if session.adapter else "the base model"
            now = (
                f"adapter {backend.active_adapter}" if backend.active_adapter else "the base model"
            )
            note = f"session {session.id} was started with {started}; it goes on with {now}"
        return options, note

    def _open(
        self, task: Task, options: RunOptions, target: Any, resume: int | None = None
    ) -> RunOptions:
        from app.live import LiveSession

        self.session = self.bench.live = LiveSession(
            self.bench.store,
            self.bench.require_model(),
            task,
            options,
            sessions_dir=self.bench.settings.sessions_dir(),
            target=target,
            resume=resume,
        )
        self.tick_cost, self.measured = "", False
        self.block_tokens, self.tick_seconds = options.block_tokens, {}
        if self.armed is not None:
            self.session.runtime.set_stepping(self.armed)
            self.armed = None
        self.heard(waiting=False)
        return options

    def ended(self) -> None:
        self.session = self.bench.live = None

    # -- the operator's keys ------------------------------------------------------------

    def step(self, unit: str) -> str | None:
        """One more block or tick (`unit`); with no session, the next one starts in step
        mode. What to tell the operator, if anything."""
        how = STEP_HOW[unit]
        if self.session is None:
            self.armed = unit
            return f"the next session starts in step mode; {how}"
        switched = not self.session.step(unit)  # this press only switched into step mode
        self.heard(waiting=False)
        return how if switched else None

    def run_freely(self) -> None:
        if self.session is not None:
            self.session.run_freely()
        self.heard(waiting=False)

    def toggle_pause(self) -> None:
        if self.session is not None:
            self.session.toggle_pause()
        self.heard(waiting=False)

    def stop(self) -> bool:
        """Stop the session at once (see `Runtime.stop`); False when none runs."""
        if self.session is None:
            return False
        self.session.stop()
        return True

    def chat(self, text: str) -> bool:
        """The operator's message to the running agent; False when none runs."""
        if self.session is None:
            return False
        self.session.runtime.post_message(text)
        return True

    def started(self, event: SessionStarted) -> str:
        """The session's first line, with what a tick will cost on this machine as the
        model's last measured tick (or block) here says (the status bar says it too, until
        the session's own first block is in), or when that will be known."""
        from agents import speed

        measured = None
        backend = self.bench.backend
        where = self._speed_file()
        if backend is not None and where is not None:
            measured = speed.recalled(where, backend.model, backend.device)
        if measured is None:
            return f"{event.text}. What a tick costs here shows once its first block is written."
        if measured.tick_seconds is not None:
            tick = duration(measured.tick_seconds)
            self.tick_cost = f"a tick ≈ {tick} (last time)"
            return f"{event.text}. A tick took about {tick} of the model's time here on {measured.day}."
        tick = duration(BLOCKS_A_TICK * measured.seconds)
        self.tick_cost = f"a tick ≈ {tick} (last time)"
        return (
            f"{event.text}. A tick takes about {tick} here: {candidates(measured.candidates)} "
            f"of a block took {measured.seconds:.0f} s on {measured.day}."
        )

    def _speed_file(self) -> Path | None:
        from agents import speed

        if not self.bench.store_ready.is_set():
            return None
        return speed.speed_file(self.bench.store.url)

    def sampled(self, event: BlockSampled) -> str | None:
        """A round of a block's candidates is in. From the session's first: what a tick
        will cost at this machine's speed, its planned tokens counted (the status bar
        says it from now on, the next session's first line too) and, when a tick takes
        over a minute, the line that tells the operator how to make it faster (once).
        From the first block of its second tick: what its first tick took."""
        first = min(self.tick_seconds, default=event.tick)
        self.tick_seconds[event.tick] = self.tick_seconds.get(event.tick, 0.0) + event.seconds
        if event.tick > first and len(self.tick_seconds) == 2:
            took = self.tick_seconds[first]
            self.tick_cost = f"a tick ≈ {duration(took)}"
            self._remember(event, took)
            return None
        if self.measured:
            return None
        self.measured = True
        self._remember(event)
        tick, planned_tokens = self.tick_estimate(event)
        self.tick_cost = f"a tick ≈ {duration(tick)}"
        if tick < SLOW_TICK:
            return None
        speed = f"{event.tokens_per_second:.0f} tokens/s" if event.tokens_per_second else "slowly"
        planned = (
            f"{BLOCKS_A_TICK} blocks of up to {self.block_tokens} tokens a candidate"
            if planned_tokens
            else f"{BLOCKS_A_TICK} blocks"
        )
        return (
            f"the model writes {speed} here: {candidates(event.candidates)} of a block took "
            f"{event.seconds:.0f} s, so a tick ({planned}, one try each) takes about "
            f"{duration(tick)}. Faster: fewer candidates "
            "(--candidates 2), shorter blocks (--block-tokens 256), or a model server "
            "(agent-console serve, then --base-url)"
        )

    def tick_estimate(self, event: BlockSampled) -> tuple[float, bool]:
        """What a tick will cost, from the session's first block: that block's time and
        the rest's planned tokens (each candidate's `block_tokens`, one try each) at its
        speed (True); without the speed or the plan, BLOCKS_A_TICK such blocks (False)."""
        if not event.tokens_per_second or not self.block_tokens:
            return BLOCKS_A_TICK * event.seconds, False
        rest = (BLOCKS_A_TICK - 1) * event.candidates * self.block_tokens
        return event.seconds + rest / event.tokens_per_second, True

    def _remember(self, event: BlockSampled, tick_seconds: float | None = None) -> None:
        """Keep the session's first block (`tick_seconds` None) or its first tick as the
        model's speed here; what was kept of the other stays."""
        from dataclasses import replace

        from agents import speed

        backend = self.bench.backend
        where = self._speed_file()
        if backend is None or where is None:
            return
        kept = speed.recalled(where, backend.model, backend.device)
        if tick_seconds is not None and kept is not None:
            measured = replace(kept, tick_seconds=tick_seconds)
        else:
            measured = speed.Measured(
                event.candidates,
                event.seconds,
                event.tokens_per_second,
                speed.today(),
                tick_seconds if kept is None or tick_seconds is not None else kept.tick_seconds,
            )
        speed.remember(where, backend.model, backend.device, measured)

    # -- what the status bar says -------------------------------------------------------

    @property
    def paused(self) -> bool:
        return self.session is not None and self.session.paused

    def heard(self, *, waiting: bool) -> None:
        """The agent said something (`waiting`: it waits for a step key), or the operator
        set it going again: the working count starts over."""
        self.quiet_since = time.monotonic()
        self.awaiting_operator = waiting

    def mode_line(self, decision_waits: bool) -> str:
        """The live session's mode, and the decision that waits off screen, if one does."""
        if self.session is None:
            return ""
        mode = self.session.mode
        return f"{mode} · {self.pending_note}" if decision_waits and self.pending_note else mode

    def working_line(self, asking: bool) -> str | None:
        """While the agent works on a block and nothing has come for a while: the mode
        with the seconds it has worked; None when there is nothing to count (no session,
        paused, waiting for a key or a decision, or it spoke a moment ago)."""
        session = self.session
        quiet = time.monotonic() - self.quiet_since
        if session is None or session.paused or self.awaiting_operator or asking:
            return None
        if quiet < QUIET_AFTER:
            return None
        cost = f" · {self.tick_cost}" if self.tick_cost else ""
        return f"{session.mode} · working {quiet:.0f} s{cost}"


def duration(seconds: float) -> str:
    """90 s and over in minutes, else seconds."""
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
