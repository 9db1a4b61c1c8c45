"""Schema versions: Alembic migrations shipped in the package, applied on open.

Opening a store at the latest schema costs one small query; Alembic is imported only when
there is something to upgrade. A database written by a newer agent-console is refused
before anything is written to it.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import DatabaseError, OperationalError

from storage.errors import NotATraceStoreError, SchemaTooNewError, StoreError

#: The newest revision in storage/migrations/versions (a test keeps the two in step).
SCHEMA_HEAD = "0005"
MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_PG_MIGRATION_LOCK = 0x61676E74  # any constant; serialises concurrent upgrades


def current_revision(conn: Connection) -> str | None:
    """The schema revision stamped in the database, or None when it has none."""
    tables = set(inspect(conn).get_table_names())
    if "alembic_version" not in tables:
        if tables:
            listed = ", ".join(sorted(tables)[:5])
            raise NotATraceStoreError(
                f"this database is not an agent-console trace store (it has tables {listed})"
            )
        return None
    row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
    return row[0] if row else None


def check_revision(revision: str | None) -> None:
    if revision is None or revision == SCHEMA_HEAD:
        return
    if not revision.isdigit() or int(revision) > int(SCHEMA_HEAD):
        raise SchemaTooNewError(
            f"the trace store has schema {revision}, newer than this agent-console knows "
            f"({SCHEMA_HEAD}); upgrade agent-console to open it (the file was not modified)"
        )


def alembic_config(conn: Connection):  # -> alembic.config.Config
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = conn
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision` in one write transaction."""
    from alembic import command

    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
        # Re-read inside the lock: another process may have upgraded meanwhile.
        check_revision(current_revision(conn))
        command.upgrade(alembic_config(conn), revision)


def ensure_schema(engine: Engine, *, where: str) -> None:
    """Open-time check: create or upgrade to the latest schema, or refuse."""
    try:
        with engine.connect() as conn:
            revision = current_revision(conn)
    except (DatabaseError, OperationalError) as exc:
        raise _explain(exc, where) from None
    check_revision(revision)
    if revision != SCHEMA_HEAD:
        try:
            upgrade(engine)
        except (DatabaseError, OperationalError) as exc:
            raise _explain(exc, where) from None


def _explain(exc: DatabaseError, where: str) -> StoreError:
    detail = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
    if "file is not a database" in detail or "malformed" in detail:
        return NotATraceStoreError(f"{where} is not a SQLite database ({detail})")
    if "readonly" in detail or "unable to open database file" in detail:
        detail += " (the store writes to its file and, beside it, -wal and -shm files: is the "
        detail += "file or its folder read-only?)"
    return StoreError(f"cannot open trace store {where}: {detail}")
