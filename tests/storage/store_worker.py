"""A child process for the concurrency and migration tests: run as a script.

Every mode prints `ready` once imports are done and then waits for one line on stdin, so
the test can start several processes and release them together. Results go to stdout as
one JSON line; errors are counted by message so the test can say what went wrong.

    store_worker.py write DB SESSION_ID PARENT_ID COUNT TAG
    store_worker.py read DB SESSION_ID DONE_FILE
    store_worker.py ack DB SESSION_ID BATCH
    store_worker.py open DB
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from storage import NewNode, TraceStore


def _wait_for_go() -> None:
    print("ready", flush=True)
    sys.stdin.readline()


def _summary(exc: Exception) -> str:
    """The exception's first line: SQLAlchemy appends the statement and its parameters,
    which would make every occurrence a different key."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"


def _report(errors: Counter[str], **extra: object) -> int:
    print(json.dumps({"errors": dict(errors), **extra}), flush=True)
    return 1 if errors else 0


def write(db: str, session_id: int, parent_id: int, count: int, tag: str) -> int:
    """`count` read-then-write transactions: each checks the session and the parent, then
    inserts a node, all inside one write transaction."""
    errors: Counter[str] = Counter()
    with TraceStore(db) as store:
        _wait_for_go()
        for i in range(count):
            try:
                store.add_node(
                    session_id,
                    NewNode(kind="action", text=f"{tag}-{i}", parent_id=parent_id),
                )
            except Exception as exc:
                errors[_summary(exc)] += 1
    return _report(errors)


def read(db: str, session_id: int, done_file: str) -> int:
    """Short reads in a loop until the test says the writers are done."""
    errors: Counter[str] = Counter()
    done = Path(done_file)
    reads = 0
    last_count = 0
    with TraceStore(db) as store:
        _wait_for_go()
        while True:
            finished = done.exists()  # checked first, so one full pass follows the writers
            try:
                count = store.count_nodes(session_id)
                if count < last_count:
                    errors[f"node count went back from {last_count} to {count}"] += 1
                last_count = count
                store.get_session(session_id)
                store.list_sessions(limit=5)
                newest = store.tree(session_id)[-1]
                store.path(newest.id)
                reads += 5
            except Exception as exc:
                errors[_summary(exc)] += 1
            if finished:
                break
    return _report(errors, reads=reads, last_count=last_count)


def ack(db: str, session_id: int, batch: int) -> int:
    """Commit batches of `batch` nodes (a chain) forever, printing each node id only once
    its transaction has committed. The test kills this process with SIGKILL."""
    with TraceStore(db) as store:
        _wait_for_go()
        k = 0
        while True:
            nodes = [NewNode(kind="action", text=f"{k}-0", meta={"batch": k})]
            nodes += [
                NewNode(kind="action", text=f"{k}-{j}", parent_index=j - 1, meta={"batch": k})
                for j in range(1, batch)
            ]
            added = store.add_nodes(session_id, nodes)
            sys.stdout.write("".join(f"{n.id}\n" for n in added))
            sys.stdout.flush()
            k += 1


def open_store(db: str) -> int:
    errors: Counter[str] = Counter()
    _wait_for_go()
    try:
        with TraceStore(db) as store:
            store.create_session("opened concurrently")
    except Exception as exc:
        errors[_summary(exc)] += 1
    return _report(errors)


def main(argv: list[str]) -> int:
    mode, db, *rest = argv
    if mode == "write":
        return write(db, int(rest[0]), int(rest[1]), int(rest[2]), rest[3])
    if mode == "read":
        return read(db, int(rest[0]), rest[1])
    if mode == "ack":
        return ack(db, int(rest[0]), int(rest[1]))
    if mode == "open":
        return open_store(db)
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
