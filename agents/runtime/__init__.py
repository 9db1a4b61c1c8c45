"""The tick runtime: the agent's loop, every step stored in the trace tree as it happens.

One `Runtime` runs one session. Each tick (see `agents.blocks` for the order) it writes
the runtime's blocks, samples candidates for each block the model writes and ranks them
(`agents.ranking`), asks the approval gate before an action runs (`agents.approval`),
runs the action, the evaluation callbacks and the observation views in the session's
sandboxed kernel (`agents.sandbox`), and stores everything: candidates as sibling nodes,
verdicts as decisions, callback results as evaluations. It reports each step to a
listener as a typed event (`agents.events`: the console turns them into messages;
`--query --json` prints them).

The runtime is synchronous and thread-safe where it has to be: the console runs it in a
worker thread and calls `stop`, `pause`, `unpause` and `post_message` from the UI thread.
It never imports Textual.

`Runtime` (`loop`) is composed of parts it owns, each given the others it uses, one
module each: `control` (`SessionState`, what every part reads and writes, and
`Control`: stop, pause and step from any thread), `recording` (`Recorder`: the store and
the listener), `sampling` (`Sampler`: a model-written block), `kernel_host`
(`KernelHost`: the sandboxed kernels), `gate` (`GateSteps`: the action and the approval
gate), `recall` (`MemoryRecall`: retrieval memory) and `tick` (`TickSteps`: one tick).
Beside them: `options` (what a run uses), `context` (fitting the path into the model),
`results` and `session_task` (helpers).
"""

from __future__ import annotations

from agents.events import Listener, RuntimeEvent
from agents.runtime.context import CONTEXT_MARGIN
from agents.runtime.gate import OPERATOR_CONTEXT_CHARS
from agents.runtime.loop import Outcome, Runtime
from agents.runtime.options import (
    EXAMPLE_CONTEXT,
    TOY_PARAMETERS,
    UNATTENDED,
    RunOptions,
    auto_defaults,
    session_options,
)
from agents.runtime.recall import MEMORY_SYNC_SECONDS
from agents.runtime.results import RUNTIME_TEXT_CHARS, clip
from agents.runtime.sampling import (
    HOT_TEMPERATURE,
    NO_REPEAT_TOKENS,
    STREAM_EVERY,
    STREAM_TEXT_CHARS,
)
from agents.runtime.session_task import (
    REMINDER_CHARS,
    outcome_passed,
    own_check_name,
    resume_options,
    session_solved,
    task_from_snapshot,
    task_snapshot,
    ticks_done,
)

__all__ = [
    "CONTEXT_MARGIN",
    "EXAMPLE_CONTEXT",
    "HOT_TEMPERATURE",
    "MEMORY_SYNC_SECONDS",
    "NO_REPEAT_TOKENS",
    "OPERATOR_CONTEXT_CHARS",
    "REMINDER_CHARS",
    "RUNTIME_TEXT_CHARS",
    "STREAM_EVERY",
    "STREAM_TEXT_CHARS",
    "TOY_PARAMETERS",
    "UNATTENDED",
    "Listener",
    "Outcome",
    "RunOptions",
    "Runtime",
    "RuntimeEvent",
    "auto_defaults",
    "clip",
    "outcome_passed",
    "own_check_name",
    "resume_options",
    "session_options",
    "session_solved",
    "task_from_snapshot",
    "task_snapshot",
    "ticks_done",
]
