"""The workbench (agents/workbench.py): what the console's screens share, without Textual.
Its rules, on a real store and the tiny model: who may start a session or change the
adapter, and why not; the A/B hold on the model; the store that opens late, refused
until then, and closed with the workbench that opened it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agents.backends.transformers_backend import TransformersBackend
from agents.settings import Settings
from agents.tasks import prompt_task
from agents.workbench import RunningSessions, Workbench
from storage import StoreError, TraceStore


class Live:
    """The operator's live session, as the workbench sees it (`LiveRun`)."""

    task = prompt_task("say hello")
    session_id = 1


def test_the_store_is_refused_until_open_and_closed_with_the_workbench(tmp_path: Path) -> None:
    bench = Workbench(None, Settings(backend="none"))
    assert not bench.store_ready.is_set()
    with pytest.raises(StoreError, match="still opening"):
        bench.store  # noqa: B018
    with pytest.raises(StoreError, match="does not exist"):
        bench.open_store(str(tmp_path / "no" / "traces.db"))
    assert not bench.store_ready.is_set()

    db = tmp_path / "traces.db"
    store = bench.open_store(str(db))
    assert bench.store_ready.is_set() and bench.store is store
    store.create_session("hello")
    wal = db.with_name(db.name + "-wal")
    assert wal.exists()
    bench.close()
    assert not wal.exists()  # every connection closed: the log folded back


def test_a_store_given_open_is_the_callers_to_close(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    with TraceStore(db) as store:
        bench = Workbench(store, Settings(backend="none"))
        assert bench.store_ready.is_set()
        bench.close()
        assert store.list_sessions() == []  # still open: the workbench did not close it


def test_who_may_sample_and_change_the_adapter_and_why_not(
    tmp_path: Path, tiny_model_dir: Path, tiny_adapter_dir: Path
) -> None:
    with TraceStore(tmp_path / "traces.db") as store:
        bench = Workbench(store, Settings(backend="none"))
        assert bench.session_refusal() == bench.adapter_busy() == bench.no_model_reason()
        assert "still loading" in bench.no_model_reason()
        bench.model_failed("not found")
        assert bench.session_refusal() == "no model: not found"
        with pytest.raises(RuntimeError, match="no model: not found"):
            bench.require_model()

        backend = TransformersBackend(str(tiny_model_dir))
        try:
            bench.model_ready(backend)
            assert bench.session_refusal() is None and bench.adapter_busy() is None

            bench.live = Live()
            assert "a session is running" in (bench.session_refusal() or "")
            # said on the jobs screen and the palette too: it names where x stops it
            assert (bench.adapter_busy() or "").endswith(
                "stop it (x on the main screen) before switching the adapter"
            )
            bench.live = None

            running = threading.Event()
            bench.hold_model(running)
            assert not bench.comparing and bench.session_refusal() is None
            running.set()
            assert bench.comparing
            assert "A/B comparison" in (bench.session_refusal() or "")
            assert "A/B comparison" in (bench.adapter_busy() or "")
            running.clear()
            assert bench.adapter_busy() is None

            assert "tuned" in (bench.apply_adapter(backend, "tuned") or "")  # not registered
            assert backend.active_adapter is None
            # trained on another model: refused before it is loaded (it was loaded before)
            store.register_adapter("other", base_model="Qwen/Qwen2.5-0.5B", path=tiny_adapter_dir)
            said = bench.apply_adapter(backend, "other") or ""
            assert said.endswith(
                f"adapter 'other' was trained on Qwen/Qwen2.5-0.5B, not on the model in use "
                f"({tiny_model_dir})"
            ), said
            assert "other" not in backend.adapters()
            assert bench.model_name() == str(tiny_model_dir)
            store.register_adapter("tuned", base_model=str(tiny_model_dir), path=tiny_adapter_dir)
            assert bench.apply_adapter(backend, "tuned") is None
            assert backend.active_adapter == "tuned" and "tuned" in backend.adapters()
            assert bench.apply_adapter(backend, None) is None
            assert backend.active_adapter is None
        finally:
            backend.close()


def test_an_ending_stops_every_running_session_and_starts_none() -> None:
    sessions = RunningSessions()

    class Run:
        def __init__(self) -> None:
            self.stopped: str | None = None

        def stop(self, reason: str | None = None) -> None:
            self.stopped = reason

    run = Run()
    entered = threading.Event()
    release = threading.Event()

    def session() -> None:
        with sessions.running(run) as may_run:  # type: ignore[arg-type]
            assert may_run
            entered.set()
            release.wait(5)

    thread = threading.Thread(target=session)
    thread.start()
    assert entered.wait(5)
    threading.Timer(0.2, release.set).start()
    assert sessions.stop_all("stopped by SIGTERM", timeout=5) == 0
    thread.join(5)
    assert run.stopped == "stopped by SIGTERM"
    with sessions.running(Run()) as may_run:  # type: ignore[arg-type]
        assert not may_run
