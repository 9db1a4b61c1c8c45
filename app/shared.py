"""What every part of the console reaches the same way: the workbench (`agents.workbench`:
the model, its adapter, the running sessions, the memory) and the report of a failed
worker."""

from __future__ import annotations

from textual.dom import DOMNode
from textual.worker import Worker, WorkerState

from agents.workbench import Workbench


def workbench(node: DOMNode) -> Workbench:
    """The console's workbench, from any of its screens or widgets."""
    bench = getattr(node.app, "workbench", None)
    if not isinstance(bench, Workbench):
        raise RuntimeError(f"{type(node.app).__name__} has no workbench: not the console")
    return bench


def report_failure(node: DOMNode, event: Worker.StateChanged) -> None:
    """A worker that failed, in one line (Worker.StateChanged does not bubble: each screen
    passes its own workers' failures here)."""
    if event.state is WorkerState.ERROR and event.worker.error is not None:
        # Database errors carry the SQL and its parameters: the first line says enough.
        cause = getattr(event.worker.error, "orig", None) or event.worker.error
        reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        node.app.notify(
            f"{event.worker.name} failed: {reason}", severity="error", timeout=10, markup=False
        )
