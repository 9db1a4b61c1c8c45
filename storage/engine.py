"""Engines for the trace store: one for writes, one for short reads.

On SQLite (measured in ../shared/ENVIRONMENT.md): WAL with synchronous=NORMAL loses no
acknowledged transaction to `kill -9`, and `busy_timeout` only keeps writers from failing
with "database is locked" when every write transaction takes the lock up front with
`BEGIN IMMEDIATE`. pysqlite's own transaction handling is switched off so that the
"begin" event decides what BEGIN is sent.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from storage.errors import StoreError

BUSY_TIMEOUT_MS = 30_000


def database_url(db: str | Path) -> str:
    """A path or a SQLAlchemy URL, as `--db` takes it, to a URL."""
    text = str(db).strip()
    if not text:
        raise StoreError("--db is empty: give a file path or a SQLAlchemy URL")
    if "://" in text:
        try:
            url = make_url(text)
        except ArgumentError as exc:
            raise StoreError(f"--db {text!r} is not a valid SQLAlchemy URL: {exc}") from None
        if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
            raise StoreError("an in-memory SQLite store would vanish on exit: give a file path")
        return text
    if text == ":memory:":
        raise StoreError("an in-memory SQLite store would vanish on exit: give a file path")
    path = Path(text).expanduser().resolve()
    return f"sqlite:///{path}"


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str) -> Path | None:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    return Path(parsed.database)


def _empty_or_ours(cursor: sqlite3.Cursor) -> bool:
    tables = {r[0] for r in cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return not tables or "alembic_version" in tables


def _switch_to_wal(cursor: sqlite3.Cursor) -> None:
    """Turn a new database to WAL. Two processes opening a brand-new file at once both try;
    SQLite answers the loser "database is locked" at once, without waiting the busy
    timeout, so wait here, until the file is in WAL (whoever switched it) or time is up."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.02)


def _sqlite_engine(url: str, *, immediate: bool) -> Engine:
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we send BEGIN ourselves, below
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            mode = cursor.execute("PRAGMA journal_mode").fetchone()[0]
            # Switching to WAL rewrites the header: leave someone else's database alone.
            if mode != "wal" and _empty_or_ours(cursor):
                _switch_to_wal(cursor)
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


#: SQLite writes `-wal`, `-shm` and `-journal` files beside the database: its name must
#: leave room for the longest suffix within the file system's NAME_MAX (255 on Linux).
SIDE_FILE_SUFFIX = "-journal"


def _check_sqlite_path(path: Path) -> None:
    """A database path SQLite cannot use, as a StoreError (one line), not as an OSError
    from the file system or SQLite's "unable to open database file"."""
    try:
        name_max = os.pathconf(path.parent, "PC_NAME_MAX") if path.parent.is_dir() else 255
        if len(os.fsencode(path.name + SIDE_FILE_SUFFIX)) > name_max:
            raise StoreError(
                f"cannot open database {path}: its name is too long ({len(path.name)} "
                f"characters; at most {name_max - len(SIDE_FILE_SUFFIX)})"
            )
        if not path.parent.is_dir():
            raise StoreError(f"cannot open database {path}: folder {path.parent} does not exist")
        if path.is_dir():
            raise StoreError(f"cannot open database {path}: it is a folder; give a file path")
        if path.exists() and not path.is_file():
            raise StoreError(f"cannot open database {path}: not a regular file")
    except OSError as exc:  # a path too long in all, a folder we may not look into
        raise StoreError(f"cannot open database {path}: {exc.strerror or exc}") from None


def create_engines(url: str) -> tuple[Engine, Engine]:
    """(writer, reader) engines for `url`."""
    if is_sqlite(url):
        path = sqlite_path(url)
        if path is not None:
            _check_sqlite_path(path)
        return _sqlite_engine(url, immediate=True), _sqlite_engine(url, immediate=False)
    try:
        engine = create_engine(url, pool_pre_ping=True)
    except ModuleNotFoundError as exc:
        raise StoreError(
            f"the driver for {make_url(url).get_backend_name()} is not installed ({exc.name}); "
            "for PostgreSQL install agent-console[postgres]"
        ) from None
    return engine, engine
