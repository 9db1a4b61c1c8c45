"""The starter adapter: an offline model taught on the teaching sessions that ship with
the project.

The starter sessions are what the learning bench's scripted operator (`training.teach`)
does on the first teaching variants of the taught families: it approves, rejects with a
reason, rewrites and labels, through the runtime's approval gate, on the offline model,
in the model's own form of blocks (Gemma 3 270M base: callbacks; the coder: scripts).
They ship with the project as a trace store per model (`SESSIONS_BY_MODEL`, one small
SQLite file each); `agent-console train starter` trains the starter adapter from the
base model's sessions (an SFT job reading a private copy, `JobOptions.labels_from`), and
on the offline model the console offers to load it.

Regenerate a model's file (a few minutes a session on a 2-core CPU):

    .venv/bin/python -m training.starter [--model qwen2.5-coder-0.5b] [--sessions 20]

Held-out variants are never in it: `check_sessions` refuses a store with one, both when
the file is made and before a job trains on it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from agents.backends.registry import MODELS
from agents.tasks.families import Variant, parse_name
from training.teach import TAUGHT, HeldOutError, check_teaching

if TYPE_CHECKING:
    from storage import TraceStore
    from training.jobs import JobOptions
    from training.teach import Tally


def made_for(model: str) -> Path:
    """Where the sessions of an offline model are made (Gemma's, the first, have no suffix)."""
    return Path(__file__).with_name(f"starter_sessions_{model}.db")


#: the offline models' shipped teaching sessions, a trace store each, made on that model
#: (its prompts, its form of blocks, its defaults)
SESSIONS_BY_MODEL = {
    "gemma-3-270m": Path(__file__).with_name("starter_sessions.db"),
    "qwen2.5-coder-0.5b": made_for("qwen2.5-coder-0.5b"),
}
#: the adapter's name in the registry
NAME = "starter"
#: the model `agent-console train starter` trains for when not told: the default
MODEL = "qwen2.5-coder-0.5b"
#: ... and its sessions
SESSIONS = SESSIONS_BY_MODEL[MODEL]
#: teaching sessions in a shipped file
COUNT = 20
#: how a model's sessions were sampled where not by its defaults (Gemma's: the learning
#: bench's settings for it)
SESSION_OPTIONS: dict[str, dict[str, int]] = {
    "gemma-3-270m": {"candidates": 2, "block_tokens": 192},
}
#: how the starter adapter is trained (the learning bench's settings)
EPOCHS = 2.0
#: the longest row, by model (the coder's chat rows with the work directory's files run
#: to about 1,300 tokens)
MAX_LENGTH = {"gemma-3-270m": 1024, "qwen2.5-coder-0.5b": 2048}


def session_variants(store: TraceStore) -> list[Variant]:
    """The family variant each session of `store` ran; HeldOutError for a session that
    ran no family variant or a held-out one."""
    found = []
    for session in sorted(store.list_sessions(limit=1_000_000), key=lambda s: s.id):
        task = session.settings.get("task")
        name = task.get("name") if isinstance(task, dict) else None
        parsed = parse_name(str(name or ""))
        if parsed is None:
            raise HeldOutError(f"session {session.id} ran {name!r}, not a family variant")
        found.append(parsed)
    return check_teaching(found)


def check_sessions(path: Path | str = SESSIONS) -> list[Variant]:
    """The variants of the sessions in the trace store at `path`, read from a copy (the
    shipped file is never opened for writing); HeldOutError if any is held out."""
    from storage import TraceStore
    from training.jobs import copy_sqlite

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "sessions.db"
        copy_sqlite(Path(path), copy)
        with TraceStore(copy) as store:
            return session_variants(store)


def sessions_for(model: str) -> Path:
    """The shipped sessions of the offline model named `model` (a registry name, or its
    converted folder); the default's for any other model."""
    return SESSIONS_BY_MODEL.get(Path(model).name, SESSIONS)


def job_options(base_model: str, *, name: str = NAME) -> JobOptions:
    """The starter adapter's training job on `base_model`, from its sessions."""
    from storage import JobKind
    from training.jobs import JobOptions

    return JobOptions(
        kind=JobKind.SFT,
        base_model=base_model,
        name=name,
        epochs=EPOCHS,
        max_length=MAX_LENGTH.get(Path(base_model).name, 2048),
        labels_from=str(sessions_for(base_model)),
    )


def make(
    out: Path, count: int = COUNT, *, model: str = MODEL, say: Callable[[str], None] = print
) -> Tally:
    """Teach `count` sessions on the offline model `model` into a fresh trace store at
    `out`, in the model's own form and defaults."""
    from agents.backends.offline import ensure_model
    from agents.backends.transformers_backend import TransformersBackend
    from agents.runtime import Runtime, session_solved
    from storage import TraceStore
    from training.teach import teach_sessions, teaching_order, variant_options

    backend = TransformersBackend(str(ensure_model(say, name=model)))
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        work = Path(tmp)
        staging = work / "sessions.db"
        with TraceStore(staging) as store:

            def runtime_for(found: Variant, operator: object) -> Runtime:
                say(f"teaching {found.family}:{found.seed}")
                return Runtime(
                    store,
                    backend,
                    found.task,
                    variant_options(
                        backend,
                        seed=1000 + found.seed,
                        teaching=True,
                        **SESSION_OPTIONS.get(model, {}),
                    ),
                    sessions_dir=work / "work",
                    asker=operator,  # type: ignore[arg-type]
                )

            tally = teach_sessions(
                teaching_order(TAUGHT, count),
                runtime_for,
                lambda outcome: session_solved(store, outcome.session_id),
            )
            session_variants(store)
        backend.close()
        with contextlib.closing(sqlite3.connect(staging)) as conn:
            conn.execute("PRAGMA journal_mode=DELETE")
            conn.execute("VACUUM")
        os.replace(staging, out)
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.starter",
        description="Regenerate the starter sessions: the scripted operator teaches the "
        "offline model on the first teaching variants of the taught families.",
    )
    parser.add_argument("--model", default=MODEL, choices=sorted(MODELS))
    parser.add_argument("--sessions", type=int, default=COUNT, help=f"(default {COUNT})")
    parser.add_argument("--out", type=Path, help="the trace store to write (default: the model's)")
    args = parser.parse_args(argv)
    out = args.out or SESSIONS_BY_MODEL.get(args.model) or made_for(args.model)
    tally = make(out, args.sessions, model=args.model)
    print(f"{out}: {len(tally.sessions)} sessions; operator {tally.as_json()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
