"""Sessions left running by a process that is gone: real processes, a real SQLite store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agents.processes import OWNER, gone, reap_orphan_sessions, this_process
from storage import SessionStatus, TraceStore
from tests.support.processes import dead_owner


@pytest.fixture
def dead() -> dict[str, Any]:
    return dead_owner()


def test_a_process_that_ended_is_gone_and_one_that_runs_is_not(dead: dict[str, Any]) -> None:
    assert gone(dead)
    me = this_process()
    assert me["pid"] == os.getpid() and not gone(me)
    assert gone({**me, "started": me["started"] + 1})  # the pid taken by another process
    assert not gone({**dead, "host": "another-host"})  # not ours to judge
    assert not gone({"host": me["host"]})  # no pid recorded


def test_orphan_sessions_are_marked_aborted_and_nothing_else(
    tmp_path: Path, dead: dict[str, Any]
) -> None:
    with TraceStore(tmp_path / "traces.db") as store:

        def session(status: SessionStatus, owner: dict[str, Any] | None) -> int:
            settings = {OWNER: owner} if owner is not None else {}
            return store.create_session("t", settings=settings, status=status).id

        orphans = [
            session(SessionStatus.RUNNING, dead),
            session(SessionStatus.WAITING, dead),
        ]
        kept = [
            session(SessionStatus.RUNNING, this_process()),  # its process runs
            session(SessionStatus.RUNNING, None),  # no owner recorded
            session(SessionStatus.RUNNING, {**dead, "host": "another-host"}),
            session(SessionStatus.COMPLETED, dead),  # ended as it should
        ]
        assert sorted(reap_orphan_sessions(store)) == orphans
        for session_id in orphans:
            stored = store.get_session(session_id)
            assert stored.status is SessionStatus.ABORTED
            assert stored.settings["status_reason"].startswith(
                f"its process (pid {dead['pid']}) ended without storing the session's end"
            )
        before = {i: store.get_session(i).status for i in kept}
        assert reap_orphan_sessions(store) == []
        assert {i: store.get_session(i).status for i in kept} == before
