"""Training from the console, driven by Pilot over a real SQLite store: the confirm
dialog (counts, refusal, queueing a real job that a real worker process trains on the
tiny model), the jobs screen (progress, sparkline and log from `job_event` rows, cancel,
resume, a killed worker), and adapters back in the agent (load from the jobs screen, the
palette's "Use adapter…" and "Base model", `ConsoleApp(adapter=NAME)` at start-up).

Events are the interface between the worker and the console, so most tests write the
events themselves; one test lets a real worker write them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Log, OptionList, Sparkline, Static

from agents.settings import Settings
from app.console import ConsoleApp
from app.dialogs import AdapterPicker, ConfirmScreen
from app.screens.jobs import JobsScreen
from app.screens.label import LabelScreen
from app.screens.train_confirm import TrainConfirmScreen
from app.widgets.status_bar import StatusBar
from storage import Job, JobKind, JobStatus, TraceStore
from tests.support.label_trees import SessionBuilder
from tests.support.pilot import Notes, plain, settle, until
from training.job_files import log_path
from training.jobs import JobOptions, needed_labels_message, queue_job, worker_alive
from training.rules import count_training_data

pytestmark = [pytest.mark.worker, pytest.mark.timeout(300)]
SIZE = (130, 40)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def no_model() -> Settings:
    return Settings(backend="none")


def tiny(model: Path) -> Settings:
    return Settings(backend="transformers", model=str(model))


def status_bar(app: ConsoleApp) -> StatusBar:
    return app.main.query_one(StatusBar)


def label_edits(store: TraceStore, ticks: int = 2) -> None:
    """Each `edited` tick is one SFT example (the edit) and one DPO pair (edit over the
    original); an executed tick labelled good is one more SFT example."""
    builder = SessionBuilder(store, "edits")
    for tick in range(1, ticks + 1):
        builder.edited(tick)
    good = builder.executed(ticks + 1)
    store.add_label(good.action.id, "good")


def jobs_screen(app: ConsoleApp) -> JobsScreen:
    assert isinstance(app.screen, JobsScreen), app.screen
    return app.screen


def row(app: ConsoleApp, job_id: int) -> dict[str, str]:
    table: DataTable[object] = jobs_screen(app).query_one("#jobs-table", DataTable)
    cells = table.get_row(str(job_id))
    keys = [str(column.key.value) for column in table.ordered_columns]
    return {key: str(cell) for key, cell in zip(keys, cells, strict=True)}


def progress(step: int, loss: float, total: int = 10) -> dict[str, float | int]:
    return {
        "step": step,
        "total_steps": total,
        "loss": loss,
        "learning_rate": 2e-4,
        "tokens_per_second": 1500.0,
        "eta_seconds": float(total - step) * 2,
        "epoch": step / total,
    }


def fake_job(store: TraceStore, tmp_path: Path, name: str = "fixed") -> Job:
    """A job row as `queue_job` writes it, with no worker started."""
    label_edits(store)
    model = tmp_path / "base"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    options = JobOptions(kind=JobKind.SFT, base_model=str(model), name=name, epochs=2.0, lora_r=4)
    return queue_job(store, options, data_dir=tmp_path / "data", spawn=False)


@pytest.fixture
def worker_stand_in() -> Iterator[Callable[[int], subprocess.Popen[bytes]]]:
    """A live process whose command line reads as job N's worker (`python -m
    training.worker N`), for a running job that must not be reaped; killed afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def start(job_id: int) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import time; time.sleep(300)",
                "-m",
                "training.worker",
                str(job_id),
            ]
        )
        started.append(process)
        deadline = time.monotonic() + 10
        while not worker_alive(process.pid, job_id):
            assert time.monotonic() < deadline, "the stand-in did not start"
            time.sleep(0.02)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


# -- the confirm dialog ------------------------------------------------------------------------


async def test_with_no_labels_the_dialog_says_what_is_needed_and_cannot_be_confirmed(
    store: TraceStore,
) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=no_model())
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(pilot)
        await pilot.press("T")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, TrainConfirmScreen)
        assert "0 SFT examples, 0 DPO pairs and 0 KTO examples" in plain(
            dialog.query_one("#train-counts", Static)
        )
        problem = plain(dialog.query_one("#train-problem", Static))
        assert " ".join(needed_labels_message(JobKind.SFT).split()) in " ".join(problem.split())
        assert dialog.check_action("confirm", ()) is None  # greyed in the footer
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert app.screen is dialog and store.list_jobs() == []
        # DPO says what pairs need.
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert dialog.kind is JobKind.DPO
        assert "DPO needs at least 1 pair" in plain(dialog.query_one("#train-problem", Static))
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.main and store.list_jobs() == []


async def test_the_dialog_counts_the_labels_refuses_bad_options_and_opens_from_the_label_screen(
    store: TraceStore,
) -> None:
    label_edits(store)
    counts = count_training_data(store)
    assert counts.sft_examples == 3 and counts.dpo_pairs == 2
    notes = Notes()
    app = ConsoleApp(store=store, settings=no_model(), start="label")
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, LabelScreen)
        await pilot.press("T")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, TrainConfirmScreen)
        assert "The labels make 3 SFT examples, 2 DPO pairs and" in plain(
            dialog.query_one("#train-counts", Static)
        )
        assert dialog.query_one("#train-name", Input).placeholder == "sft-1 (the job's id)"
        assert dialog.check_action("confirm", ()) is True
        dialog.query_one("#train-epochs", Input).value = "0"
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert app.screen is dialog and store.list_jobs() == []
        assert "--epochs 0: must be > 0" in notes.text()
        # The base model must be a model folder (or a hub id): no config.json, no job.
        dialog.query_one("#train-epochs", Input).value = "1"
        dialog.query_one("#train-base", Input).value = "./no-such-model"
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert app.screen is dialog and store.list_jobs() == []
        assert "not a model folder" in plain(dialog.query_one("#train-problem", Static))
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, LabelScreen)


async def test_confirm_queues_a_real_job_whose_adapter_the_jobs_screen_loads(
    store: TraceStore, tiny_model_dir: Path
) -> None:
    """The whole loop from the console: labels, confirm, a detached worker trains on the
    tiny model, the jobs screen follows it to the end, and `l` puts its adapter to use."""
    label_edits(store)
    notes = Notes()
    app = ConsoleApp(store=store, settings=tiny(tiny_model_dir))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await until(pilot, lambda: app.workbench.backend is not None, "the model")
        await pilot.press("T")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, TrainConfirmScreen)
        assert dialog.query_one("#train-base", Input).value == str(tiny_model_dir)
        dialog.query_one("#train-name", Input).value = "console-sft"
        dialog.query_one("#train-epochs", Input).value = "1"
        dialog.query_one("#train-lora-r", Input).value = "4"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: app.screen is app.main, "the dialog to close")
        (job,) = store.list_jobs()
        assert job.kind is JobKind.SFT and job.name == "console-sft"
        assert job.config["epochs"] == 1.0 and job.config["lora_r"] == 4
        assert job.config["learning_rate"] == 2e-4
        assert job.base_model == str(tiny_model_dir.resolve())
        assert job.pid is not None and job.config["rows_at_queue"] == 3
        assert f"job {job.id} queued" in notes.text()

        await pilot.press("j")
        await settle(pilot)
        screen = jobs_screen(app)
        assert screen.selected == job.id

        def completed() -> bool:
            track = screen.tracks.get(job.id)
            return track is not None and track.job.status is JobStatus.COMPLETED

        await until(pilot, completed, "the job to complete", timeout=240)
        await pilot.pause(1.2)  # the last events: read twice after the final status
        await settle(pilot)
        assert row(app, job.id)["status"] == "completed", log_path(job).read_text()[-2000:]
        assert row(app, job.id)["done"] == "100%"
        losses = screen.tracks[job.id].losses
        assert losses and screen.query_one("#jobs-loss", Sparkline).data == losses
        lines = list(screen.query_one("#jobs-log", Log).lines)
        assert any(" done " in line for line in lines), lines
        summary = plain(screen.query_one("#jobs-summary", Static))
        assert "adapter console-sft is registered: l loads it" in summary

        await pilot.press("l")
        await until(
            pilot,
            lambda: (
                app.workbench.backend is not None
                and app.workbench.backend.active_adapter is not None
            ),
            "the adapter",
        )
        assert (
            app.workbench.backend is not None
            and app.workbench.backend.active_adapter == "console-sft"
        )
        # the note is posted after the backend switched (a busy machine shows the gap)
        await until(pilot, lambda: "adapter console-sft in use" in notes.text(), "the note")
        assert status_bar(app).adapter == "console-sft"
        assert job.pid is not None
        deadline = time.monotonic() + 30
        while worker_alive(job.pid, job.id):
            assert time.monotonic() < deadline
            time.sleep(0.05)


# -- the jobs screen, from events the test writes --------------------------------------------------


async def test_the_status_bar_shows_a_queued_job_then_its_progress(
    store: TraceStore, tmp_path: Path, worker_stand_in: Callable[[int], subprocess.Popen[bytes]]
) -> None:
    """A job queued from another terminal shows while its worker starts up, not only once
    it trains; a queued job whose worker died is reaped, not shown as queued forever."""
    job = fake_job(store, tmp_path)
    worker = worker_stand_in(job.id)
    store.update_job(job.id, pid=worker.pid)
    app = ConsoleApp(store=store, settings=no_model())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await until(pilot, lambda: status_bar(app).job == "training fixed queued", "queued")
        store.update_job(job.id, status=JobStatus.RUNNING, progress=0.5)
        await until(pilot, lambda: status_bar(app).job == "training fixed 50%", "running")
        store.update_job(job.id, status=JobStatus.QUEUED)
        worker.kill()
        worker.wait()
        await until(pilot, lambda: status_bar(app).job == "", "the dead worker's job reaped")
        assert store.get_job(job.id).status is JobStatus.FAILED


async def test_the_jobs_screen_follows_progress_events_with_a_loss_sparkline(
    store: TraceStore, tmp_path: Path, worker_stand_in: Callable[[int], subprocess.Popen[bytes]]
) -> None:
    finished = store.create_job(JobKind.DPO, "older", base_model="m")
    store.update_job(finished.id, status=JobStatus.FAILED, error="out of memory")
    job = fake_job(store, tmp_path)
    worker = worker_stand_in(job.id)
    store.update_job(job.id, status=JobStatus.RUNNING, pid=worker.pid, progress=0.3)
    store.add_job_event(job.id, "log", message="dataset: 3 rows")
    losses = [2.5, 2.1, 1.9]
    for step, loss in enumerate(losses, 1):
        store.add_job_event(job.id, "progress", step=step, data=progress(step, loss))

    app = ConsoleApp(store=store, settings=no_model())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await until(pilot, lambda: status_bar(app).job == "training fixed 30%", "the status bar")
        await pilot.press("j")
        await settle(pilot)
        screen = jobs_screen(app)
        assert row(app, job.id) == {
            "id": str(job.id),
            "kind": "sft",
            "name": "fixed",
            "status": "running",
            "done": "30%",
            "step": "3/10",
            "loss": "1.9000",
            "rate": "1.5k",
            "eta": "0:14",
        }
        assert row(app, finished.id)["status"] == "failed"
        assert screen.selected == job.id  # newest first, and the cursor starts there
        assert screen.query_one("#jobs-loss", Sparkline).data == losses
        lines = list(screen.query_one("#jobs-log", Log).lines)
        assert "log dataset: 3 rows" in lines[0] and "step 3/10" in lines[-1]
        summary = plain(screen.query_one("#jobs-summary", Static))
        assert "step 3/10 loss 1.9000" in summary
        assert "epochs 2, learning_rate 0.0002, lora_r 4" in summary  # not "2.0"
        # Keys that apply to a running job: cancel, not resume or load.
        assert screen.check_action("cancel", ()) is True
        assert screen.check_action("resume", ()) is False
        assert screen.check_action("load", ()) is False

        # The worker goes on: the next poll shows it.
        store.add_job_event(job.id, "progress", step=5, data=progress(5, 1.5))
        await until(pilot, lambda: row(app, job.id)["step"] == "5/10", "the next step")
        assert screen.query_one("#jobs-loss", Sparkline).data == [*losses, 1.5]
        assert "step 5/10" in list(screen.query_one("#jobs-log", Log).lines)[-1]
        assert row(app, job.id)["done"] == "50%"

        # The failed job: its error, and resume offered.
        await pilot.press("down")
        await pilot.pause()
        assert screen.selected == finished.id
        assert "out of memory" in plain(screen.query_one("#jobs-summary", Static))
        assert screen.query_one("#jobs-loss", Sparkline).data == []
        assert screen.check_action("resume", ()) is True
        assert screen.check_action("cancel", ()) is False
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.main


async def test_cancel_asks_first_then_sets_the_job_cancelling(
    store: TraceStore, tmp_path: Path, worker_stand_in: Callable[[int], subprocess.Popen[bytes]]
) -> None:
    job = fake_job(store, tmp_path)
    worker = worker_stand_in(job.id)
    store.update_job(job.id, status=JobStatus.RUNNING, pid=worker.pid)
    app = ConsoleApp(store=store, settings=no_model())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("j")
        await settle(pilot)
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # no: nothing happens
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
        assert store.get_job(job.id).status is JobStatus.RUNNING
        await pilot.press("c")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot)
        assert store.get_job(job.id).status is JobStatus.CANCELLING
        assert [e.kind for e in store.job_events(job.id)][-1] == "cancel"
        await until(pilot, lambda: row(app, job.id)["status"] == "cancelling", "the row")
        assert jobs_screen(app).check_action("cancel", ()) is False


async def test_a_running_job_whose_worker_was_killed_shows_failed_and_resumes(
    store: TraceStore, tmp_path: Path, worker_stand_in: Callable[[int], subprocess.Popen[bytes]]
) -> None:
    job = fake_job(store, tmp_path)
    worker = worker_stand_in(job.id)
    store.update_job(job.id, status=JobStatus.RUNNING, pid=worker.pid, progress=0.4)
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    notes = Notes()
    app = ConsoleApp(store=store, settings=no_model())
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(pilot)
        await pilot.press("j")
        await settle(pilot)
        await until(pilot, lambda: row(app, job.id)["status"] == "failed", "the reaped job")
        stored = store.get_job(job.id)
        assert stored.status is JobStatus.FAILED and "died without finishing" in (
            stored.error or ""
        )
        screen = jobs_screen(app)
        assert "died without finishing" in plain(screen.query_one("#jobs-summary", Static))
        assert screen.check_action("resume", ()) is True

        # Resume starts a new worker for it (a real one: it fails on the fake base model).
        await pilot.press("r")
        await settle(pilot)
        resumed = store.get_job(job.id)
        assert resumed.pid is not None and resumed.pid != worker.pid
        assert any("resume requested" in (e.message or "") for e in store.job_events(job.id))
        assert f"job {job.id} (fixed): " in notes.text()
        deadline = time.monotonic() + 120
        while worker_alive(resumed.pid, job.id):
            assert time.monotonic() < deadline, "the resumed worker did not end"
            time.sleep(0.05)


# -- adapters back in the agent ------------------------------------------------------------------


async def test_use_adapter_and_base_model_from_the_palette(
    store: TraceStore, tiny_model_dir: Path, tiny_adapter_dir: Path
) -> None:
    store.register_adapter("tuned", base_model=str(tiny_model_dir), path=tiny_adapter_dir)
    # listed, but not to be picked: before, it was offered as if it fitted
    store.register_adapter("other", base_model="Qwen/Qwen2.5-0.5B", path=tiny_adapter_dir)
    notes = Notes()
    app = ConsoleApp(store=store, settings=tiny(tiny_model_dir))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await until(pilot, lambda: app.workbench.backend is not None, "the model")
        await app.main.run_action("app.use_adapter")
        await settle(pilot)
        picker = app.screen
        assert isinstance(picker, AdapterPicker)
        assert sorted(a.name for a in picker.adapters) == ["other", "tuned"]
        options = picker.query_one("#adapters-list", OptionList)
        enabled = [options.get_option_at_index(i) for i in range(options.option_count)]
        assert {o.id: o.disabled for o in enabled} == {"tuned": False, "other": True}
        assert "another base model" in str(options.get_option("other").prompt)
        options.highlighted = options.get_option_index("tuned")
        await pilot.press("enter")
        await until(
            pilot, lambda: status_bar(app).adapter == "tuned", "the adapter in the status bar"
        )
        assert app.workbench.backend is not None and app.workbench.backend.active_adapter == "tuned"
        await app.main.run_action("app.base_model")
        await until(pilot, lambda: status_bar(app).adapter == "", "the base model")
        assert app.workbench.backend.active_adapter is None
        assert "the base model is in use" in notes.text()


async def test_an_adapter_named_at_start_up_is_loaded_after_the_model(
    store: TraceStore, tiny_model_dir: Path, tiny_adapter_dir: Path
) -> None:
    store.register_adapter("tuned", base_model=str(tiny_model_dir), path=tiny_adapter_dir)
    app = ConsoleApp(store=store, settings=tiny(tiny_model_dir), adapter="tuned")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.workbench.backend is not None, "the model")
        await pilot.pause()
        assert app.workbench.backend is not None and app.workbench.backend.active_adapter == "tuned"
        assert status_bar(app).adapter == "tuned"


async def test_an_unknown_adapter_at_start_up_leaves_the_base_model_with_a_warning(
    store: TraceStore, tiny_model_dir: Path
) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=tiny(tiny_model_dir), adapter="nope")
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await until(pilot, lambda: app.workbench.backend is not None, "the model")
        await pilot.pause()
        assert app.workbench.backend is not None and app.workbench.backend.active_adapter is None
        # the same line as the commands give for the flag (agents.adapters.find_adapter)
        assert "--adapter 'nope': no such adapter (known: none yet); the base model is in use" in (
            notes.text()
        )
        assert status_bar(app).backend == "transformers"
