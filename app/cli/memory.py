"""`agent-console memory {rebuild,status,sync}`: the retrieval memory's index from the
command line (see agents/memory.py)."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from app import exit_codes
from app.cli.failing import command_fail

if TYPE_CHECKING:
    from agents.settings import Settings


def add_memory_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    memory = commands.add_parser(
        "memory",
        help="rebuild or inspect the retrieval memory's embedding index",
        description="The retrieval memory embeds past blocks (orientations, outcomes, "
        "evaluations, the operator's feedback, actions and labelled blocks) so sessions can "
        "recall them and the console can search them. Sessions and the console keep it up "
        "to date; `rebuild` embeds everything again, `sync` embeds what is missing.",
    )
    memory.add_argument(
        "action",
        choices=("rebuild", "status", "sync"),
        help="rebuild: start the index afresh from the store; status: what it holds; "
        "sync: embed the blocks it lacks",
    )
    memory.add_argument(
        "--embedding-model",
        metavar="ID|PATH",
        help="the embedding model (default: the memory_model setting)",
    )


fail = command_fail("memory")


def run_memory(args: argparse.Namespace, settings: Settings) -> int:
    from agents.memory import Memory, MemoryUnavailable, default_index_path
    from storage import StoreError, TraceStore

    model = args.embedding_model or settings.memory_model
    try:
        store = TraceStore(settings.database())
    except StoreError as exc:
        return fail(str(exc), exit_codes.STORE)
    with store:
        memory = Memory(store, default_index_path(store), model=model)
        if args.action == "status":
            info = memory.status()
            print(f"index file:  {info['file']}" + ("" if info["exists"] else " (not built yet)"))
            if info["exists"]:
                print(f"size:        {info['bytes'] / 1e6:.1f} MB")
                built = info["file_model"] or "(unreadable: it will be rebuilt)"
                print(f"built with:  {built}")
            print(f"model:       {model}")
            for key, used, count in store.memory_indexes():
                mark = " (this file)" if key == info["file_key"] else ""
                print(f"mapping:     {count} vectors, {used}, key {key[:8]}{mark}")
            return exit_codes.OK
        started = time.monotonic()
        try:
            added = memory.rebuild() if args.action == "rebuild" else memory.sync()
        except MemoryUnavailable as exc:
            return fail(str(exc), exit_codes.MODEL)
        except OSError as exc:
            return fail(f"cannot write {memory.path}: {exc.strerror or exc}", exit_codes.USAGE)
        took = time.monotonic() - started
        verb = "rebuilt" if args.action == "rebuild" else "synced"
        print(
            f"{verb} {memory.path}: {added} blocks embedded in {took:.1f} s, {len(memory)} in all"
        )
        memory.close()
    return exit_codes.OK
