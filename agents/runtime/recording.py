"""Everything a session does, stored in the trace tree as it happens and reported to the
listener: blocks (runtime-written ones join the path), status changes, decisions and
evaluation results."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agents.blocks import Header
from agents.events import DecisionRecorded, EvaluationRecorded, NodeChanged, StatusChanged
from agents.runtime.control import RuntimeControl
from agents.runtime.results import clip, passed, result_meta
from agents.sandbox import CallResult
from storage import (
    Actor,
    Author,
    EvaluationKind,
    NewNode,
    Node,
    NodeStatus,
    SessionStatus,
    Verdict,
)


class Recording(RuntimeControl):
    """Writes to the store and emits the matching event."""

    def _header(self, kind: str, tick: int, title: str | None = None) -> Header:
        return Header(kind, index=len(self.path), tick=tick, timestamp=self.clock(), title=title)

    def _runtime_block(
        self,
        kind: str,
        text: str,
        tick: int,
        *,
        title: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Node:
        self._await_step("block", kind)
        header = self._header(kind, tick, title)
        return self._store_block(
            NewNode(
                kind=kind,
                text=clip(text),
                tick=tick,
                author=Author.RUNTIME,
                status=NodeStatus.CHOSEN,
                meta={**header.meta(), **(meta or {})},
            )
        )

    def _store_block(self, new: NewNode) -> Node:
        """Add a runtime block under the path's last node; it joins the path."""
        self._checkpoint()
        if self.path:
            new = replace(new, parent_id=self.path[-1].id)
        node = self.store.add_node(self.session_id, new)
        self.path.append(node)
        self._emit_node(node)
        return node

    def _update(self, node: Node, status: NodeStatus, result: CallResult | None = None) -> Node:
        meta = result_meta(result) if result is not None else None
        updated = self.store.update_node(node.id, status=status, meta=meta)
        for i, on_path in enumerate(self.path):
            if on_path.id == node.id:
                self.path[i] = updated
        self._emit_node(updated)
        return updated

    def _decision(
        self,
        node: Node,
        verdict: Verdict,
        actor: Actor,
        *,
        reason: str | None = None,
        result: Node | None = None,
    ) -> None:
        stored = self.store.record_decision(
            node.id,
            verdict,
            actor=actor,
            reason=reason,
            result_node_id=result.id if result is not None else None,
        )
        self._emit(
            DecisionRecorded(
                session_id=self.session_id,
                node_id=node.id,
                verdict=stored.verdict,
                actor=stored.actor,
                reason=reason,
                result_node_id=stored.result_node_id,
            )
        )

    def _record_evaluation(
        self, node: Node, name: str, kind: EvaluationKind, result: CallResult
    ) -> None:
        verdict = passed(result) if kind is EvaluationKind.CALLBACK else None
        self._record(
            node,
            name,
            kind,
            result=result.value if result.ok else None,
            passed=verdict,
            error=None if result.ok else (result.error or result.killed or "failed"),
            duration=result.duration,
        )

    def _record(
        self,
        node: Node,
        name: str,
        kind: EvaluationKind,
        *,
        result: Any,
        passed: bool | None,
        error: str | None = None,
        duration: float | None = None,
    ) -> None:
        stored = self.store.record_evaluation(
            node.id, name, kind=kind, result=result, passed=passed, error=error, duration=duration
        )
        self._emit(
            EvaluationRecorded(
                session_id=self.session_id,
                node_id=node.id,
                name=name,
                kind=kind,
                result=stored.result,
                passed=passed,
                error=error,
                duration=duration,
            )
        )

    def _set_status(self, status: SessionStatus, reason: str | None) -> None:
        if not self.session_id:
            return
        self.store.set_session_status(self.session_id, status, reason=reason or "")
        self._emit(StatusChanged(session_id=self.session_id, status=status, reason=reason))

    def _emit_node(self, node: Node) -> None:
        self._emit(NodeChanged(session_id=self.session_id, node=node))
