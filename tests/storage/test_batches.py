"""Batches in the store (SQLite and PostgreSQL): tasks taken up exactly once by workers
claiming at the same time, from threads and from separate processes, and the counts."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from storage import BatchStatus, BatchTaskStatus, NotFoundError, TraceStore


def _batch(store: TraceStore, tasks: int) -> int:
    specs = [{"prompt": f"task {i}"} for i in range(tasks)]
    return store.create_batch(specs, name="t.jsonl", source="/t.jsonl", source_hash="h").id


def _claim_all(url: str, batch_id: int, worker: str, out: list[int]) -> None:
    with TraceStore(url) as store:
        while (task := store.claim_batch_task(batch_id, worker)) is not None:
            out.append(task.line)
            store.finish_batch_task(task.id, BatchTaskStatus.COMPLETED, result={"tokens": 1})


def test_a_batch_and_its_tasks(store: TraceStore) -> None:
    batch_id = _batch(store, 3)
    batch = store.get_batch(batch_id)
    assert batch.status is BatchStatus.RUNNING and batch.finished_at is None
    tasks = store.batch_tasks(batch_id)
    assert [t.line for t in tasks] == [1, 2, 3]
    assert [t.spec for t in tasks] == [
        {"prompt": "task 0"},
        {"prompt": "task 1"},
        {"prompt": "task 2"},
    ]
    assert all(t.status is BatchTaskStatus.PENDING and t.runs == 0 for t in tasks)
    first = store.claim_batch_task(batch_id, "w1")
    assert first is not None and (first.line, first.worker, first.runs) == (1, "w1", 1)
    assert first.status is BatchTaskStatus.RUNNING and first.started_at is not None
    session = store.create_session("task 0")
    store.set_batch_task_session(first.id, session.id)
    store.finish_batch_task(first.id, BatchTaskStatus.ABORTED, result={"tokens": 5})
    # an aborted task is taken up again first, in its session, counted as a second run
    again = store.claim_batch_task(batch_id, "w2")
    assert again is not None and (again.line, again.session_id, again.runs) == (1, session.id, 2)
    assert again.result == {"tokens": 5}
    second = store.claim_batch_task(batch_id, "w2")
    assert second is not None and second.line == 2
    assert store.abort_running_batch_tasks(batch_id) == 2
    counts = store.batch_counts(batch_id)
    assert counts[BatchTaskStatus.ABORTED] == 2 and counts[BatchTaskStatus.PENDING] == 1
    assert counts[BatchTaskStatus.COMPLETED] == 0
    done = store.set_batch_status(batch_id, BatchStatus.ABORTED)
    assert done.status is BatchStatus.ABORTED and done.finished_at is not None
    assert [b.id for b in store.list_batches(source_hash="h")] == [batch_id]
    assert store.list_batches(source_hash="other") == []
    with pytest.raises(NotFoundError):
        store.get_batch(batch_id + 1)


def test_eight_threads_claim_each_task_exactly_once(store: TraceStore) -> None:
    batch_id = _batch(store, 60)
    claimed: list[int] = []
    threads = [
        threading.Thread(target=_claim_all, args=(store.url, batch_id, f"w{i}", claimed))
        for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claimed) == list(range(1, 61))
    assert store.batch_counts(batch_id)[BatchTaskStatus.COMPLETED] == 60
    assert {t.runs for t in store.batch_tasks(batch_id)} == {1}


def _process_claims(url: str, batch_id: int, worker: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out: list[int] = []
    _claim_all(url, batch_id, worker, out)
    queue.put(out)


def test_four_processes_claim_each_task_exactly_once(store: TraceStore) -> None:
    batch_id = _batch(store, 40)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [
        context.Process(target=_process_claims, args=(store.url, batch_id, f"p{i}", queue))
        for i in range(4)
    ]
    for worker in workers:
        worker.start()
    claimed = [line for _ in workers for line in queue.get(timeout=120)]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert sorted(claimed) == list(range(1, 41))
