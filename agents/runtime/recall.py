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
from agents.runtime.recording import Recording
from agents.runtime.session_task import task_reminder

log = logging.getLogger(__name__)

#: Seconds a tick may spend embedding new blocks into the memory (the rest waits).
MEMORY_SYNC_SECONDS = 5.0


class MemoryRecall(Recording):
    def _open_memory(self) -> Memory | None:
        """The memory to recall from, loaded in this (the runtime's) thread; None when it
        is off or cannot load (said once, as a `MemoryOff` event)."""
        if not self.options.memory or self.options.memory_k <= 0:
            return None
        if self.memory is None:
            if len(self.store.list_sessions(limit=2)) < 2:
                return None  # nothing to recall yet: don't load the model for nothing
            self.memory = shared_memory(self.store, model=self.options.memory_model)
        return self.memory

    def _memory_failed(self, exc: Exception) -> None:
        self.memory = None
        self.options = replace(self.options, memory=False)
        log.warning("session %s: retrieval memory is off: %s", self.session_id, exc)
        self._emit(MemoryOff(session_id=self.session_id, text=f"retrieval memory is off: {exc}"))

    def _sync_memory(self, seconds: float) -> None:
        """Embed what the memory lacks, for at most about `seconds` (the rest next time)."""
        memory = self.memory if self.options.memory else None
        if memory is None:
            return
        deadline = time.monotonic() + seconds
        try:
            memory.sync(
                should_stop=lambda: time.monotonic() > deadline or self._stop.is_set(),
                batch=64,
            )
        except Exception as exc:  # the model, faiss, the file: memory is optional
            self._memory_failed(exc)

    def _recall(self, tick: int) -> None:
        """The blocks of other sessions most like this situation, as a `memory`
        observation (nothing when none is similar enough)."""
        memory = self._open_memory()
        if memory is None:
            return
        self._sync_memory(MEMORY_SYNC_SECONDS)
        if self.memory is None:
            return
        try:
            hits = memory.recall(
                self._situation(tick), session_id=self.session_id, k=self.options.memory_k
            )
        except Exception as exc:  # MemoryUnavailable, or faiss / the store underneath
            self._memory_failed(exc)
            return
        body = render_memory(hits, self.options.memory_tokens, self._window.count_tokens)
        if body is not None:
            self._runtime_block(blocks.OBSERVATION, body, tick, title=MEMORY_TITLE)

    def _situation(self, tick: int) -> str:
        """What the agent faces at the start of `tick`: the task, the last outcome, this
        tick's observations."""
        parts = [task_reminder(self.task)]
        outcomes = [n for n in self.path if n.kind == blocks.OUTCOME]
        if outcomes:
            parts.append(outcomes[-1].text)
        parts += [
            n.text
            for n in self.path
            if n.tick == tick
            and n.kind == blocks.OBSERVATION
            and n.meta.get("title") != MEMORY_TITLE
        ]
        return "\n\n".join(parts)[:4000]
