"""SQLite's start-up rule for a connection, in one async and one sync form, and opening files.

The rule, for every new connection: run the per-connection pragmas (busy timeout, durability),
then make sure the file is in WAL mode. The journal mode belongs to the file, not the
connection, and the migrations set it once; a connection's own setup takes no exclusive lock:
it reads the mode and switches only a file still in rollback mode (one an older version
created), retrying while other processes use it. A provider never creates a database file
(`open_existing`, `connect_existing`): a missing one is `MissingDatabaseFile`.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from pathlib import Path
from threading import Thread
from typing import Any, Final

import aiosqlite

from ..._core.deadlines import server_millis
from .. import MissingDatabaseFile
from .errors import is_busy

__all__ = [
    "MissingDatabaseFile",
    "connect_existing",
    "ensure_wal",
    "ensure_wal_sync",
    "open_existing",
    "pragmas",
    "start",
    "start_sync",
]

_WAL_RETRY_FIRST: Final = 0.002  # seconds before the first retry of a busy switch to WAL
_WAL_RETRY_MAX: Final = 0.05  # longest pause between two tries


def pragmas(timeout: float, synchronous: bool) -> tuple[str, ...]:
    """The per-connection settings for calls bounded by ``timeout`` seconds."""
    busy_ms = server_millis(timeout)
    return (
        f"PRAGMA busy_timeout = {busy_ms}",
        f"PRAGMA synchronous = {'FULL' if synchronous else 'NORMAL'}",
    )


class _WalRetry:
    """When to try the switch to WAL again: short randomised pauses for up to ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self._deadline = time.monotonic() + seconds
        self._pause = _WAL_RETRY_FIRST

    def pause_after(self, exc: sqlite3.Error) -> float:
        """Seconds to wait before the next try; re-raises ``exc`` when it is not worth one."""
        left = self._deadline - time.monotonic()
        if not is_busy(exc) or left <= 0:
            raise exc
        pause = min(left, random.uniform(0.5, 1.0) * self._pause)
        self._pause = min(self._pause * 2, _WAL_RETRY_MAX)
        return pause


async def _one(conn: Any, sql: str) -> Any:
    cursor = await conn.execute(sql)
    try:
        row = await cursor.fetchone()
    finally:
        await cursor.close()
    return None if row is None else row[0]


def _one_sync(conn: sqlite3.Connection, sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    return None if row is None else row[0]


async def ensure_wal(conn: Any, seconds: float) -> str:
    """Put the database of ``conn`` (an aiosqlite connection) in WAL mode; returns the mode.

    On a file already in WAL mode this is one read. The switch from rollback mode needs an
    exclusive lock that SQLite does not wait for (the switching connection has read the file
    first, and a reader that waits for a writer's lock could deadlock), so it fails at once
    while any other connection uses the file: it is retried (see `_WalRetry`), then the busy
    error is raised. Another answer than "wal" means the file cannot use WAL (say, no shared
    memory on its file system): it keeps its mode. Must run outside a transaction.
    """
    mode = str(await _one(conn, "PRAGMA journal_mode")).lower()
    retry = _WalRetry(seconds)
    while mode != "wal":
        try:
            return str(await _one(conn, "PRAGMA journal_mode = WAL")).lower()
        except sqlite3.OperationalError as exc:
            await asyncio.sleep(retry.pause_after(exc))
    return mode


def ensure_wal_sync(conn: sqlite3.Connection, seconds: float) -> str:
    """`ensure_wal` for a `sqlite3` connection (the sync provider's)."""
    mode = str(_one_sync(conn, "PRAGMA journal_mode")).lower()
    retry = _WalRetry(seconds)
    while mode != "wal":
        try:
            return str(_one_sync(conn, "PRAGMA journal_mode = WAL")).lower()
        except sqlite3.OperationalError as exc:
            time.sleep(retry.pause_after(exc))
    return mode


async def start(conn: Any, settings: tuple[str, ...]) -> None:
    """The start-up rule on an aiosqlite connection: ``settings``, then `ensure_wal`."""
    for pragma in settings:
        await _one(conn, pragma)
    busy_ms = await _one(conn, "PRAGMA busy_timeout")
    await ensure_wal(conn, float(busy_ms or 0) / 1000)


def start_sync(conn: sqlite3.Connection, settings: tuple[str, ...]) -> None:
    """The start-up rule on a `sqlite3` connection: ``settings``, then `ensure_wal_sync`."""
    for pragma in settings:
        _one_sync(conn, pragma)
    busy_ms = _one_sync(conn, "PRAGMA busy_timeout")
    ensure_wal_sync(conn, float(busy_ms or 0) / 1000)


def _existing_uri(database: str) -> str:
    path = Path(database).absolute()
    if not path.is_file():
        raise MissingDatabaseFile(str(path))
    # mode=rw: if the file vanishes after the check, opening fails instead of creating it.
    return f"{path.as_uri()}?mode=rw"


def open_existing(database: str, **kwargs: Any) -> Any:
    """``aiosqlite.connect`` for a database file that exists already: never creates one.

    Raises `MissingDatabaseFile` (a `LeaseSchemaError`: run the migrations) when the file is
    missing. A URI filename (``uri=True``) is the caller's choice and is opened as given.
    """
    if kwargs.get("uri"):
        connection = aiosqlite.connect(database, **kwargs)
    else:
        connection = aiosqlite.connect(_existing_uri(database), uri=True, **kwargs)
    # As SQLAlchemy does for its own connect: a daemon thread never holds up interpreter exit.
    thread = connection if isinstance(connection, Thread) else getattr(connection, "_thread", None)
    if isinstance(thread, Thread):
        thread.daemon = True
    return connection


def connect_existing(database: str, **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect`` for a database file that exists already (see `open_existing`)."""
    if kwargs.get("uri"):
        conn: sqlite3.Connection = sqlite3.connect(database, **kwargs)
    else:
        conn = sqlite3.connect(_existing_uri(database), uri=True, **kwargs)
    return conn
