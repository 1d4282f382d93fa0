"""SQLite: the embedded backend (one database file shared by several processes).

The same operations as on PostgreSQL, each one statement in autocommit. SQLite serialises
writers on the database file, so a write statement judges its row under the file's write lock;
``now`` is SQLite's clock (this machine's), constant within a statement. Fences come from a
one-row counter table that triggers advance whenever a lease row gets a new fence. Times are
stored as UTC text (``YYYY-MM-DD HH:MM:SS.SSS``), which sorts like the instants it names.

The file runs in WAL mode, set once by the migrations (`ensure_wal`). A connection's own setup
takes no exclusive lock: it reads the journal mode and switches the file only if it is still
in rollback mode (a file an older version created), retrying while other processes use it.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import weakref
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from threading import Thread
from time import monotonic
from typing import Any, Final

import aiosqlite
import asyncpg

from ._statements import Statements
from ._validate import check_identifier
from .errors import LeaseSchemaError
from .schema import notify_channel

__all__ = [
    "MissingDatabaseFile",
    "SqliteDriver",
    "build_sqlite_statements",
    "counter_table_name",
    "ensure_wal",
    "is_busy",
    "open_existing",
    "sqlite_connect_args",
    "sqlite_ddl",
]

NOW: Final = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
MAX_BATCH: Final = 10_000  # pairs per renew statement (SQLite binds at most 32,766 values)


def _plus(param: str) -> str:
    return f"strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', {param} / 1000.0))"


def _minus(param: str) -> str:
    return f"strftime('%Y-%m-%d %H:%M:%f', 'now', printf('-%.3f seconds', {param} / 1000.0))"


def counter_table_name(table_name: str) -> str:
    """The one-row table that stands in for PostgreSQL's fence sequence."""
    return f"{table_name}_fence_seq"


def sqlite_ddl(table_name: str) -> list[str]:
    """The counter table and the triggers that keep it ahead of every fence handed out."""
    t = check_identifier("table_name", table_name)
    c = counter_table_name(t)
    return [
        f'CREATE TABLE "{c}" (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL)',
        f'INSERT INTO "{c}" (id, value) VALUES (1, 0)',
        f'CREATE TRIGGER "{t}_fence_ins" AFTER INSERT ON "{t}" BEGIN '
        f'UPDATE "{c}" SET value = NEW.fence WHERE id = 1 AND NEW.fence > value; END',
        f'CREATE TRIGGER "{t}_fence_upd" AFTER UPDATE OF fence ON "{t}" '
        f"WHEN NEW.fence <> OLD.fence BEGIN "
        f'UPDATE "{c}" SET value = NEW.fence WHERE id = 1 AND NEW.fence > value; END',
    ]


def build_sqlite_statements(table_name: str) -> Statements:
    """The SQLite statements for ``table_name``; result rows match the PostgreSQL ones."""
    t = f'"{check_identifier("table_name", table_name)}"'
    next_fence = f'(SELECT value + 1 FROM "{counter_table_name(table_name)}" WHERE id = 1)'
    live = f"expires_at > {NOW}"
    # A failed acquire rewrites the row with its own values so that RETURNING names the
    # holder: the write lock makes that the same statement, and SQLite cannot return a row
    # from an upsert that chose not to update.
    mine_live = f"l.owner = excluded.owner AND l.expires_at > {NOW}"
    takes = f"(l.owner = excluded.owner OR l.expires_at <= {NOW})"
    acquire = f"""
INSERT INTO {t} AS l (key, owner, fence, expires_at, acquired_at)
VALUES (?1, ?2, {next_fence}, {_plus("?3")}, {NOW})
ON CONFLICT (key) DO UPDATE SET
    owner = CASE WHEN {takes} THEN excluded.owner ELSE l.owner END,
    fence = CASE WHEN {mine_live} THEN l.fence WHEN {takes} THEN excluded.fence
                 ELSE l.fence END,
    acquired_at = CASE WHEN {mine_live} THEN l.acquired_at WHEN {takes}
                       THEN excluded.acquired_at ELSE l.acquired_at END,
    expires_at = CASE WHEN {takes} THEN excluded.expires_at ELSE l.expires_at END
RETURNING owner = ?2, fence, expires_at, owner
""".strip()
    return Statements(
        table=t,
        channel=notify_channel(table_name),
        acquire=acquire,
        get_owner=f"SELECT owner FROM {t} WHERE key = ?1 AND {live}",
        get_lease=(
            f"SELECT owner, fence, expires_at, acquired_at FROM {t} WHERE key = ?1 AND {live}"
        ),
        holder=f"SELECT owner, fence, expires_at FROM {t} WHERE key = ?1 AND {live}",
        release=(
            f"UPDATE {t} SET expires_at = {NOW} WHERE key = ?1 AND owner = ?2 AND {live}"
            " RETURNING fence, expires_at"
        ),
        renew=(
            f"UPDATE {t} SET expires_at = {_plus('?3')} WHERE key = ?1 AND owner = ?2 AND {live}"
            " RETURNING fence, expires_at"
        ),
        transfer=f"""
UPDATE {t} SET
    owner = ?3,
    fence = CASE WHEN owner = ?3 THEN fence ELSE {next_fence} END,
    acquired_at = CASE WHEN owner = ?3 THEN acquired_at ELSE {NOW} END,
    expires_at = {_plus("?4")}
WHERE key = ?1 AND owner = ?2 AND {live}
RETURNING fence, expires_at
""".strip(),
        renew_many=lambda n: _renew_many(t, n),
        renew_many_args=_renew_many_args,
        force_release=(
            f"UPDATE {t} SET expires_at = {NOW} WHERE key = ?1 AND {live}"
            " RETURNING owner, fence, expires_at"
        ),
        list_live=f"""
SELECT key, owner, fence, expires_at, acquired_at, {NOW} FROM {t}
WHERE key >= ?1 AND (?2 IS NULL OR key < ?2) AND {live}
ORDER BY key LIMIT ?3
""".strip(),
        purge_batch=f"""
DELETE FROM {t} WHERE key IN (
    SELECT key FROM {t} WHERE expires_at < {_minus("?1")} LIMIT ?2
) AND expires_at < {_minus("?1")}
RETURNING 1
""".strip(),
        want=(
            f"UPDATE {t} SET wanted_until = max(coalesce(wanted_until, ''), {_plus('?2')})"
            f" WHERE key = ?1 AND {live} RETURNING owner, fence, expires_at"
        ),
        now=f"SELECT {NOW}",
        max_batch=MAX_BATCH,
    )


@lru_cache(maxsize=64)
def _renew_many(t: str, n: int) -> str:
    values = ", ".join(f"(?{2 * i + 2}, ?{2 * i + 3})" for i in range(n))
    return f"""
WITH i(key, owner) AS (VALUES {values})
UPDATE {t} AS l SET expires_at = {_plus("?1")}
FROM i WHERE l.key = i.key AND l.owner = i.owner AND l.expires_at > {NOW}
RETURNING key, owner, fence, expires_at
""".strip()


def _renew_many_args(pairs: list[tuple[bytes, bytes]], ttl: int) -> tuple[object, ...]:
    return (ttl, *(part for pair in pairs for part in pair))


def _parse(value: object) -> object:
    if isinstance(value, str):
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    return value


_prepared: weakref.WeakSet[Any] = weakref.WeakSet()

_WAL_RETRY_FIRST: Final = 0.002  # seconds before the first retry of a busy switch to WAL
_WAL_RETRY_MAX: Final = 0.05  # longest pause between two tries


def _sets_journal_mode(pragma: str) -> bool:
    return pragma.replace(" ", "").lower().startswith("pragmajournal_mode=")


class SqliteDriver:
    """Gives an aiosqlite connection the small part of asyncpg's interface the provider uses.

    Times come back as datetimes (the only text SQLite returns here: keys and owners are
    blobs). The first use of a connection runs ``pragmas`` (per-connection settings: busy
    timeout, durability), then `ensure_wal` within the busy timeout. A ``journal_mode``
    pragma among them is not run as such: the journal mode belongs to the file, not the
    connection, and setting it on every connection would take an exclusive lock each time.
    """

    __slots__ = ("_conn", "_pragmas")

    def __init__(self, conn: Any, pragmas: tuple[str, ...]) -> None:
        self._conn = conn
        self._pragmas = tuple(p for p in pragmas if not _sets_journal_mode(p))

    def is_closed(self) -> bool:
        return getattr(self._conn, "_connection", True) is None

    async def fetch(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        if self.is_closed():  # as asyncpg does: the provider then takes another connection
            raise asyncpg.InterfaceError("connection is closed")
        if self._conn not in _prepared:
            await self._prepare()
        cursor = await self._conn.execute(sql, args)
        try:
            rows = await cursor.fetchall()
        finally:
            await cursor.close()
        return [tuple(_parse(v) for v in row) for row in rows]

    async def _prepare(self) -> None:
        conn = self._conn
        for pragma in self._pragmas:
            await _fetch_one(conn, pragma)
        busy_ms = await _fetch_one(conn, "PRAGMA busy_timeout")
        await ensure_wal(conn, float(busy_ms or 0) / 1000)
        _prepared.add(conn)


async def _fetch_one(conn: Any, sql: str) -> Any:
    cursor = await conn.execute(sql)
    try:
        row = await cursor.fetchone()
    finally:
        await cursor.close()
    return None if row is None else row[0]


async def ensure_wal(conn: Any, seconds: float) -> str:
    """Put the database of ``conn`` (an aiosqlite connection) in WAL mode; returns the mode.

    On a file already in WAL mode this is one read. The switch from rollback mode needs an
    exclusive lock that SQLite does not wait for (the switching connection has read the file
    first, and a reader that waits for a writer's lock could deadlock), so it fails at once
    while any other connection uses the file: it is retried with short randomised pauses for
    up to ``seconds``, then the busy error is raised. WAL mode is persistent: once switched,
    the file stays in WAL for every connection. Must run outside a transaction.
    """
    mode = str(await _fetch_one(conn, "PRAGMA journal_mode")).lower()
    deadline = monotonic() + seconds
    pause = _WAL_RETRY_FIRST
    while mode != "wal":
        try:
            # Another answer than "wal" means this file cannot use WAL (e.g. its file system
            # has no shared memory): it keeps its mode, which works, only with less overlap.
            return str(await _fetch_one(conn, "PRAGMA journal_mode = WAL")).lower()
        except sqlite3.OperationalError as exc:
            left = deadline - monotonic()
            if not is_busy(exc) or left <= 0:
                raise
        await asyncio.sleep(min(left, random.uniform(0.5, 1.0) * pause))
        pause = min(pause * 2, _WAL_RETRY_MAX)
    return mode


class MissingDatabaseFile(LeaseSchemaError):
    """The SQLite database file does not exist: the migrations create it."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"the SQLite database {path} does not exist: create it and its leases table with "
            f"the migrations (`sql-lease migrate --url sqlite:///{path}` or "
            "`sql_lease.migrate.upgrade(url)`)"
        )
        self.path = path


def open_existing(database: str, **kwargs: Any) -> Any:
    """``aiosqlite.connect`` for a database file that exists already: never creates one.

    Raises `MissingDatabaseFile` (a `LeaseSchemaError`: run the migrations) when the file is
    missing. A URI filename (``uri=True``) is the caller's choice and is opened as given.
    """
    if kwargs.get("uri"):
        connection = aiosqlite.connect(database, **kwargs)
    else:
        path = Path(database).absolute()
        if not path.is_file():
            raise MissingDatabaseFile(str(path))
        # mode=rw: if the file vanishes after the check, opening fails instead of creating it.
        connection = aiosqlite.connect(f"{path.as_uri()}?mode=rw", uri=True, **kwargs)
    # As SQLAlchemy does for its own connect: a daemon thread never holds up interpreter exit.
    thread = connection if isinstance(connection, Thread) else getattr(connection, "_thread", None)
    if isinstance(thread, Thread):
        thread.daemon = True
    return connection


def sqlite_connect_args(connect_args: dict[str, Any], busy_seconds: float) -> dict[str, Any]:
    """``connect_args`` for a provider's own SQLite engine (the caller's entries win).

    Autocommit (every statement its own transaction, as on PostgreSQL), SQLite's busy timeout
    of ``busy_seconds``, and `open_existing`: a provider never creates a database file.
    """
    return {
        "isolation_level": None,
        "timeout": busy_seconds,
        "async_creator_fn": open_existing,
        **connect_args,
    }


def is_busy(exc: BaseException) -> bool:
    """True for SQLite's "database is locked" family (the busy timeout ran out)."""
    name = getattr(exc, "sqlite_errorname", "")
    return isinstance(exc, sqlite3.OperationalError) and (
        name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc)
    )
