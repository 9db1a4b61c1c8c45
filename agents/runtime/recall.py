"""Retrieval memory in a session: the blocks of other sessions most like the situation at
the start of a tick, shown as a `memory` observation; the memory kept in sync with the
store a few seconds at a time, and turned off (said once) when it fails."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from agents import blocks
from agents.events import MemoryOff
from agents.memory import MEMORY_TITLE, Memory, render_memory, shared_memory
from agents.runtime.control import Control, SessionState
from agents.runtime.recording import Recorder
from agents.runtime.session_task import task_reminder

log = logging.getLogger(__name__)

#: Seconds a tick may spend embedding new blocks into the memory (the rest waits).
MEMORY_SYNC_SECONDS = 5.0


class MemoryRecall:
    """The retrieval memory as one session uses it (None: off, or it could not load)."""

    def __init__(
        self, state: SessionState, control: Control, recorder: Recorder, memory: Memory | None
    ) -> None:
        self.state = state
        self.control = control
        self.recorder = recorder
        self.memory = memory

    def _open(self) -> Memory | None:
        """The memory to recall from, loaded in this (the runtime's) thread; None when it
        is off or cannot load (said once, as a `MemoryOff` event)."""
        if not self.state.options.memory or self.state.options.memory_k <= 0:
            return None
        if self.memory is None:
            if len(self.state.store.list_sessions(limit=2)) < 2:
                return None  # nothing to recall yet: don't load the model for nothing
            self.memory = shared_memory(self.state.store, model=self.state.options.memory_model)
        return self.memory

    def _failed(self, exc: Exception) -> None:
        self.memory = None
        self.state.options = replace(self.state.options, memory=False)
        log.warning("session %s: retrieval memory is off: %s", self.state.session_id, exc)
        self.state.emit(
            MemoryOff(session_id=self.state.session_id, text=f"retrieval memory is off: {exc}")
        )

    def sync(self, seconds: float) -> None:
        """Embed what the memory lacks, for at most about `seconds` (the rest next time)."""
        memory = self.memory if self.state.options.memory else None
        if memory is None:
            return
        deadline = time.monotonic() + seconds
        try:
            memory.sync(
                should_stop=lambda: time.monotonic() > deadline or self.control.stopped.is_set(),
                batch=64,
            )
        except Exception as exc:  # the model, faiss, the file: memory is optional
            self._failed(exc)

    def recall(self, tick: int) -> None:
        """The blocks of other sessions most like this situation, as a `memory`
        observation (nothing when none is similar enough)."""
        memory = self._open()
        if memory is None:
            return
        self.sync(MEMORY_SYNC_SECONDS)
        if self.memory is None:
            return
        try:
            hits = memory.recall(
                self._situation(tick),
                session_id=self.state.session_id,
                k=self.state.options.memory_k,
            )
        except Exception as exc:  # MemoryUnavailable, or faiss / the store underneath
            self._failed(exc)
            return
        body = render_memory(hits, self.state.options.memory_tokens, self.state.window.count_tokens)
        if body is not None:
            self.recorder.runtime_block(blocks.OBSERVATION, body, tick, title=MEMORY_TITLE)

    def _situation(self, tick: int) -> str:
        """What the agent faces at the start of `tick`: the task, the last outcome, this
        tick's observations."""
        parts = [task_reminder(self.state.task)]
        outcomes = [n for n in self.state.path if n.kind == blocks.OUTCOME]
        if outcomes:
            parts.append(outcomes[-1].text)
        parts += [
            n.text
            for n in self.state.path
            if n.tick == tick
            and n.kind == blocks.OBSERVATION
            and n.meta.get("title") != MEMORY_TITLE
        ]
        return "\n\n".join(parts)[:4000]
