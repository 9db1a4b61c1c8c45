"""Schema versions: creation, upgrade with data, refusal of newer schemas, and the
migrations agreeing with `storage.models`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine, insert, inspect, select, text
from sqlalchemy.pool import NullPool

from storage import NewNode, SchemaTooNewError, TraceStore
from storage.engine import create_engines, database_url, is_sqlite, sqlite_path
from storage.migrate import MIGRATIONS_DIR, SCHEMA_HEAD, upgrade
from storage.models import Base
from tests.storage import processes

ALL_TABLES = {*Base.metadata.tables, "alembic_version"}
FIRST_REVISION_TABLES = {"session", "node", "decision", "label", "evaluation", "alembic_version"}


@contextmanager
def _connect(db: str) -> Iterator[Connection]:
    """A plain connection that bypasses `TraceStore` (and its open-time upgrade)."""
    engine = create_engine(database_url(db), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _revision(db: str) -> str:
    with _connect(db) as conn:
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()


def _tables(db: str) -> set[str]:
    with _connect(db) as conn:
        return set(inspect(conn).get_table_names())


def test_schema_head_is_the_newest_migration() -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    script = ScriptDirectory.from_config(config)
    assert script.get_heads() == [SCHEMA_HEAD]  # one head, no forgotten branch
    assert script.get_current_head() == SCHEMA_HEAD


def test_new_store_is_created_at_the_latest_schema(db_url: str) -> None:
    TraceStore(db_url).close()
    assert _revision(db_url) == SCHEMA_HEAD
    assert _tables(db_url) == ALL_TABLES


def test_empty_file_is_created_at_the_latest_schema(tmp_path: Path) -> None:
    target = tmp_path / "empty.db"
    target.touch()
    with TraceStore(target) as store:
        store.create_job("sft", "works")
    assert _revision(str(target)) == SCHEMA_HEAD
    assert _tables(str(target)) == ALL_TABLES


def test_migrations_produce_exactly_the_models_schema(db_url: str) -> None:
    TraceStore(db_url).close()
    with _connect(db_url) as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        diff = compare_metadata(context, Base.metadata)
    assert diff == []


def _insert(conn: Connection, table: str, **values: object) -> int:
    """One row through Core (the store would upgrade first); the database picks the id."""
    t = Base.metadata.tables[table]
    return conn.execute(insert(t).values(**values).returning(t.c.id)).scalar_one()


def test_upgrade_from_first_revision_keeps_data(db_url: str) -> None:
    writer, reader = create_engines(database_url(db_url))
    try:
        upgrade(writer, "0001")
        now = time.time()
        with writer.begin() as conn:
            assert set(inspect(conn).get_table_names()) == FIRST_REVISION_TABLES
            sessions = [
                _insert(
                    conn,
                    "session",
                    title=f"s{i}",
                    task="old task",
                    settings={"k": i},
                    status="completed",
                    created_at=now + i,
                    updated_at=now + i,
                )
                for i in (1, 2)
            ]
            node: dict[str, object] = {
                "session_id": sessions[0],
                "tick": 0,
                "kind": "action",
                "author": "model",
                "status": "chosen",
                "score_parts": {},
                "sampling": {},
                "truncated": False,
                "meta": {},
                "created_at": now,
                "updated_at": now,
            }
            root = _insert(conn, "node", **node, text="root")
            child = _insert(
                conn,
                "node",
                **node,
                parent_id=root,
                text="child",
                token_ids=[1, 2, 3],
                logprobs=[-0.5, -0.25, -1.0],
            )
            leaf = _insert(conn, "node", **node, parent_id=child, text="grandchild")
            for value, scope, at in (("bad", "block", now), ("good", "path", now + 1)):
                _insert(conn, "label", node_id=child, value=value, scope=scope, created_at=at)
            _insert(
                conn, "decision", node_id=leaf, verdict="approve", actor="policy", created_at=now
            )
            _insert(
                conn,
                "evaluation",
                node_id=leaf,
                name="check",
                kind="callback",
                result={"ok": [1, 2]},
                passed=True,
                created_at=now,
            )
    finally:
        writer.dispose()
        reader.dispose()
    assert _revision(db_url) == "0001"

    with TraceStore(db_url) as store:
        assert [s.title for s in store.list_sessions()] == ["s2", "s1"]
        assert store.get_session(sessions[0]).settings == {"k": 1}
        assert [n.text for n in store.tree(sessions[0])] == ["root", "child", "grandchild"]
        assert [n.id for n in store.path(leaf)] == [root, child, leaf]
        got = store.get_node(child)
        assert (got.token_ids, got.logprobs) == ([1, 2, 3], [-0.5, -0.25, -1.0])
        label = store.label_of(child)
        assert label is not None and label.value == "good" and label.scope == "path"
        assert len(store.label_history(child)) == 2
        assert [d.verdict for d in store.decisions(leaf)] == ["approve"]
        assert store.evaluations(leaf)[0].result == {"ok": [1, 2]}

        # The tables the upgrade added work, and new rows don't collide with old ids.
        job = store.create_job("sft", "after upgrade", config={"from": "0001"})
        store.update_job(job.id, status="running")
        event = store.add_job_event(job.id, "log", message="hello")
        assert store.job_events(job.id) == [event]
        store.register_adapter("a1", base_model="m", path="/x", job_id=job.id)
        assert store.get_adapter("a1").job_id == job.id
        new = store.add_node(sessions[0], NewNode(kind="action", text="new", parent_id=leaf))
        assert new.id not in (root, child, leaf)
        assert store.count_nodes(sessions[0]) == 4

    assert _revision(db_url) == SCHEMA_HEAD
    assert _tables(db_url) == ALL_TABLES


@pytest.mark.parametrize("revision", ["0006", "0099", "zz-from-a-fork"])
def test_newer_schema_is_refused_and_left_untouched(db_url: str, revision: str) -> None:
    with TraceStore(db_url) as store:
        store.add_node(store.create_session("keep me").id, NewNode(kind="a", text="x"))
    with _connect(db_url) as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": revision})
        conn.commit()

    path = sqlite_path(database_url(db_url))
    before = path.read_bytes() if path else None
    with pytest.raises(SchemaTooNewError, match=revision):
        TraceStore(db_url)
    with pytest.raises(SchemaTooNewError):  # and again: the first attempt changed nothing
        TraceStore(db_url)

    if path is not None:
        assert path.read_bytes() == before
    assert _revision(db_url) == revision
    assert _tables(db_url) == ALL_TABLES
    with _connect(db_url) as conn:
        assert conn.execute(select(Base.metadata.tables["node"].c.text)).scalars().all() == ["x"]


def test_two_processes_opening_a_brand_new_store_both_succeed(db_url: str, tmp_path: Path) -> None:
    locations = [db_url]
    if is_sqlite(database_url(db_url)):  # files are cheap: try the race a few times
        locations += [str(tmp_path / f"race{i}.db") for i in range(2)]
    for location in locations:
        openers = [processes.start("open", location) for _ in range(2)]
        processes.release(*openers)
        for result in map(processes.finish, openers):
            assert result.returncode == 0, result.describe()
            assert result.report == {"errors": {}}, result.describe()
        assert _revision(location) == SCHEMA_HEAD
        with TraceStore(location) as store:
            assert len(store.list_sessions()) == 2
