"""Shared fixtures: real SQLite files in `tmp_path` and, when a server is configured, a
fresh PostgreSQL database per test.

PostgreSQL tests run when `AGENT_CONSOLE_TEST_PG_URL` names a role with CREATEDB, e.g.
`postgresql+psycopg://agentconsole:agentconsole@127.0.0.1:5432/postgres`; otherwise they
skip, unless `AGENT_CONSOLE_REQUIRE_PG=1` (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.pool import NullPool

from agents.backends.offline import ensure_model, models_dir
from storage import TraceStore
from tests.backends.vllm_server import (
    SHARED_MAX_MODEL_LEN,
    VLLMServer,
    running_vllm_server,
    vllm_python_or_skip,
)
from tests.support.tiny_model import build_tiny_adapter, build_tiny_model

#: What a test needs, as markers (pyproject.toml describes each). A module names what it
#: needs in `pytestmark`; a test that takes one of these fixtures gets the marker by itself,
#: so nothing that starts a server or loads a model can end up in the wrong tier.
#: The tiers are marker expressions (Makefile): `make test-fast` runs what needs none of
#: them, `make test` everything but `slow`, `make test-all` everything.
FIXTURE_NEEDS = {
    "vllm_server": "server",
    "gemma_dir": "real",
    "qwen_dir": "real",
    "pg_url": "postgres",
    "tiny_model_dir": "model",
    "tiny_learner_dir": "model",
    "tiny_adapter_dir": "model",
    "tiny_adapter2_dir": "model",
    "backend": "model",
}
#: Tests sharing one expensive thing run on one xdist worker (`--dist loadgroup`, with the
#: scheduler below): one vLLM server per run, not one per worker.
FIXTURE_GROUPS = {"vllm_server": "vllm-server"}
#: What runs first, so that the longest work does not start last on a worker: a module's
#: rank is its most expensive test's.
RANK = ("real", "server", "worker", "tmux", "cli", "model")


def _rank(item: pytest.Item) -> int:
    return next((i for i, name in enumerate(RANK) if item.get_closest_marker(name)), len(RANK))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        for fixture, marker in FIXTURE_NEEDS.items():
            if fixture in names:
                item.add_marker(marker)
        for fixture, group in FIXTURE_GROUPS.items():
            if fixture in names:
                item.add_marker(pytest.mark.xdist_group(group))
    module_rank: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        module_rank[module] = min(module_rank.get(module, len(RANK)), _rank(item))
    items.sort(key=lambda item: module_rank[item.nodeid.split("::", 1)[0]])


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under `--dist loadgroup`: a group's tests on one worker, every other module whole
    on one worker (its module-scoped fixtures are built once), modules in collection order
    (the expensive first, see `RANK`)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class GroupOrFile(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = super()._split_scope(nodeid)
            return group if group != nodeid else nodeid.split("::", 1)[0]

    config.option.loadscopereorder = False
    return GroupOrFile(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """Two xdist workers on two cores: torch in each (and in every process a test starts)
    gets one thread, or two-thread torch beside a busy neighbour runs 3-4x slower (the
    real model's tick: 140 s alone, 580 s beside another worker)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        threads = os.environ.get("AGENT_CONSOLE_TEST_THREADS", "1")
        os.environ["OMP_NUM_THREADS"] = threads
        if "torch" in sys.modules:  # imported before this hook: the variable came too late
            sys.modules["torch"].set_num_threads(int(threads))
    # A run started in the background by a script (`make test &`) ignores SIGINT, and so
    # would every process a test starts: a test's Ctrl-C would never arrive. A handler (not
    # "ignore") becomes the default in a child, which Python turns into KeyboardInterrupt.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty work dir for a sandbox kernel."""
    work = tmp_path / "work"
    work.mkdir()
    return work


PG_URL_ENV = "AGENT_CONSOLE_TEST_PG_URL"
REQUIRE_PG_ENV = "AGENT_CONSOLE_REQUIRE_PG"

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a brand-new, uniquely named PostgreSQL database, dropped afterwards."""
    admin_url = os.environ.get(PG_URL_ENV, "").strip()
    if not admin_url:
        if os.environ.get(REQUIRE_PG_ENV) == "1":
            pytest.fail(f"{REQUIRE_PG_ENV}=1 but {PG_URL_ENV} is not set", pytrace=False)
        pytest.skip(
            f"PostgreSQL tests need a server: set {PG_URL_ENV}="
            "postgresql+psycopg://USER:PASSWORD@127.0.0.1:5432/postgres (a role with CREATEDB)"
        )
    url = make_url(admin_url)
    name = f"agent_console_test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield url.set(database=name).render_as_string(hide_password=False)
        finally:
            _drop_database(admin, name)
    finally:
        admin.dispose()


def _drop_database(admin: Engine, name: str) -> None:
    """Drop a test database even if a failed test left a connection open to it.

    FORCE terminates other sessions, but it needs pg_signal_backend to terminate an autovacuum
    worker that happens to be in the new database; plain DROP DATABASE stops autovacuum by
    itself, so that is the fallback (retried, since a worker can start again meanwhile).
    """
    for attempt in range(5):
        with admin.connect() as conn:
            try:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                return
            except ProgrammingError:
                pass
            try:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
                return
            except OperationalError:
                if attempt == 4:
                    raise
        time.sleep(0.5)


@pytest.fixture
def sqlite_file(tmp_path: Path) -> Path:
    return tmp_path / "traces.db"


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A location for a brand-new store: a SQLite file path, or a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "traces.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(db_url: str) -> Iterator[TraceStore]:
    with TraceStore(db_url) as opened:
        yield opened


# -- the tiny real model and adapters, built once per test session ------------------------
# Built, not downloaded (no hub is reachable on the build machines): see
# `tests/support/tiny_model.py`. A few seconds for the model, well under one per adapter.


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a random-init Qwen2ForCausalLM, its tokenizer and chat template."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model")


#: Where the tests keep the converted offline model between runs (default: the models
#: folder of the user's data dir, where the console keeps it too).
TEST_MODELS_ENV = "AGENT_CONSOLE_TEST_MODELS"

#: That folder, read when the tests start: the console tests' isolation
#: (tests/app/conftest.py) later points the data dir at an empty tmp folder, where a model
#: first asked for inside a test would be converted again (75-90 s each).
MODELS_ROOT = Path(os.environ.get(TEST_MODELS_ENV) or models_dir())


@pytest.fixture(scope="session")
def gemma_dir() -> Path:
    """The real model, Gemma 3 270M base, converted from its PyPI package once (about a
    minute) and reused by every later run on this machine."""
    return ensure_model(root=MODELS_ROOT, name="gemma-3-270m")


@pytest.fixture(scope="session")
def qwen_dir() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct, converted from its PyPI chunk packages once (about a
    minute, 2.5 GB) and reused by every later run on this machine."""
    return ensure_model(root=MODELS_ROOT, name="qwen2.5-coder-0.5b")


@pytest.fixture(scope="session")
def vllm_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VLLMServer]:
    """One vLLM server for the tiny model, served as `tiny` (LoRA on, runtime loading on),
    for every test that needs a server but does not stop it: starting one takes 25-40 s on
    two cores. Its context is a whole batch session's; it runs as many sequences at once as
    the most batch workers here. A test that kills its server starts its own."""
    vllm_python_or_skip()
    with running_vllm_server(
        tiny_model_dir,
        tmp_path_factory.mktemp("vllm"),
        max_model_len=SHARED_MAX_MODEL_LEN,
        extra_args=("--max-num-seqs", "16"),
    ) as server:
        yield server


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Path) -> Iterator[object]:
    """The tiny model in process, one per test module (a module may load adapters into
    it); modules that need another model define their own `backend`."""
    from agents.backends.transformers_backend import TransformersBackend

    loaded = TransformersBackend(str(tiny_model_dir))
    yield loaded
    loaded.close()


@pytest.fixture(scope="session")
def tiny_learner_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with a trained checkpoint's final-norm scale: the same noise, but
    logits with the range to learn something (see `build_tiny_model`'s `norm_scale`)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-learner") / "model", norm_scale=8.0)


@pytest.fixture(scope="session")
def tiny_adapter_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A LoRA adapter for `tiny_model_dir` that changes its outputs (seed 1)."""
    return build_tiny_adapter(tiny_model_dir, tmp_path_factory.mktemp("tiny-adapter") / "a1")


@pytest.fixture(scope="session")
def tiny_adapter2_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A second, different adapter (seed 2), for switching between adapters."""
    return build_tiny_adapter(
        tiny_model_dir, tmp_path_factory.mktemp("tiny-adapter") / "a2", seed=2
    )
