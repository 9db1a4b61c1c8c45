"""Everything a session does, stored in the trace tree as it happens and reported to the
listener: blocks (runtime-written ones join the path), status changes, decisions and
evaluation results."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agents.blocks import Header
from agents.events import DecisionRecorded, EvaluationRecorded, NodeChanged, StatusChanged
from agents.processes import OWNER, this_process
from agents.runtime.control import Control, SessionState
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


class Recorder:
    """Writes to the store and emits the matching event."""

    def __init__(self, state: SessionState, control: Control) -> None:
        self.state = state
        self.control = control

    def header(self, kind: str, tick: int, title: str | None = None) -> Header:
        return Header(
            kind, index=len(self.state.path), tick=tick, timestamp=self.state.clock(), title=title
        )

    def runtime_block(
        self,
        kind: str,
        text: str,
        tick: int,
        *,
        title: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Node:
        self.control.await_step("block", kind)
        header = self.header(kind, tick, title)
        return self.store_block(
            NewNode(
                kind=kind,
                text=clip(text),
                tick=tick,
                author=Author.RUNTIME,
                status=NodeStatus.CHOSEN,
                meta={**header.meta(), **(meta or {})},
            )
        )

    def store_block(self, new: NewNode) -> Node:
        """Add a runtime block under the path's last node; it joins the path."""
        self.control.checkpoint()
        if self.state.path:
            new = replace(new, parent_id=self.state.path[-1].id)
        node = self.state.store.add_node(self.state.session_id, new)
        self.state.path.append(node)
        self.emit_node(node)
        return node

    def update(
        self,
        node: Node,
        status: NodeStatus,
        result: CallResult | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Node:
        meta = {**(result_meta(result) if result is not None else {}), **(meta or {})}
        updated = self.state.store.update_node(node.id, status=status, meta=meta)
        for i, on_path in enumerate(self.state.path):
            if on_path.id == node.id:
                self.state.path[i] = updated
        self.emit_node(updated)
        return updated

    def decision(
        self,
        node: Node,
        verdict: Verdict,
        actor: Actor,
        *,
        reason: str | None = None,
        result: Node | None = None,
    ) -> None:
        stored = self.state.store.record_decision(
            node.id,
            verdict,
            actor=actor,
            reason=reason,
            result_node_id=result.id if result is not None else None,
        )
        self.state.emit(
            DecisionRecorded(
                session_id=self.state.session_id,
                node_id=node.id,
                verdict=stored.verdict,
                actor=stored.actor,
                reason=reason,
                result_node_id=stored.result_node_id,
            )
        )

    def record_evaluation(
        self, node: Node, name: str, kind: EvaluationKind, result: CallResult
    ) -> None:
        verdict = passed(result) if kind is EvaluationKind.CALLBACK else None
        self.record(
            node,
            name,
            kind,
            result=result.value if result.ok else None,
            passed=verdict,
            error=None if result.ok else (result.error or result.killed or "failed"),
            duration=result.duration,
        )

    def record(
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
        stored = self.state.store.record_evaluation(
            node.id, name, kind=kind, result=result, passed=passed, error=error, duration=duration
        )
        self.state.emit(
            EvaluationRecorded(
                session_id=self.state.session_id,
                node_id=node.id,
                name=name,
                kind=kind,
                result=stored.result,
                passed=passed,
                error=error,
                duration=duration,
            )
        )

    def set_status(self, status: SessionStatus, reason: str | None, *, claim: bool = False) -> None:
        """`claim`: this process runs the session now (a resume), with these options, as
        its settings then say."""
        if not self.state.session_id:
            return
        now = {OWNER: this_process(), "run": self.state.options.snapshot()} if claim else None
        self.state.store.set_session_status(
            self.state.session_id, status, reason=reason or "", settings=now
        )
        self.state.emit(
            StatusChanged(session_id=self.state.session_id, status=status, reason=reason)
        )

    def emit_node(self, node: Node) -> None:
        self.state.emit(NodeChanged(session_id=self.state.session_id, node=node))
