"""SQLite for the sync provider: the stdlib `sqlite3`, the async backend's file and statements.

Connections sit in a small lock-protected pool (SQLite connections are cheap, and one per
thread would leak with short-lived threads). Each is in autocommit (``isolation_level=None``)
and goes through the backend's start-up rule (`startup.start_sync`: ``synchronous`` FULL or
NORMAL, a busy timeout at 80% of the call's timeout, WAL checked without an exclusive lock);
the deadline watchdog interrupts a statement still running at 100%. A missing file is never
created (`MissingDatabaseFile`). Times come back as aware datetimes, keys and owners as bytes,
exactly as from the async backend.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from time import monotonic
from typing import Any, cast

from sqlalchemy.engine import Engine
from sqlalchemy.pool import PoolProxiedConnection

from ...errors import LeaseDatabaseError, LeaseError
from .._thread_deadlines import Deadlines
from .driver import parse_time
from .errors import translate
from .startup import connect_existing, pragmas, start_sync

__all__ = ["EngineSqliteSource", "FileSqliteSource", "SqliteExecutor", "pragmas"]


class FileSqliteSource:
    """Up to ``size`` connections to one database file, opened on demand."""

    def __init__(self, path: str, *, settings: tuple[str, ...], size: int) -> None:
        self.path = path
        self._settings = settings
        self._idle: list[sqlite3.Connection] = []
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._closed = False

    def get(self, timeout: float) -> tuple[sqlite3.Connection, object]:
        if not self._slots.acquire(timeout=max(0.0, timeout)):
            raise TimeoutError("no free SQLite connection within the timeout")
        with self._lock:
            if self._idle:
                return self._idle.pop(), None
        try:
            conn = connect_existing(
                self.path, timeout=0, isolation_level=None, check_same_thread=False
            )
            try:
                start_sync(conn, self._settings)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            self._slots.release()
            raise
        return conn, None

    def put(self, conn: sqlite3.Connection, token: object, broken: bool) -> None:
        with self._lock:
            if broken or self._closed:
                conn.close()
            else:
                self._idle.append(conn)
        self._slots.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class EngineSqliteSource:
    """Connections from a caller's SQLAlchemy `Engine` (sqlite/pysqlite); never disposed."""

    def __init__(self, engine: Engine, *, settings: tuple[str, ...]) -> None:
        self.engine = engine
        self._settings = settings

    def get(self, timeout: float) -> tuple[sqlite3.Connection, object]:
        fairy = self.engine.raw_connection()
        conn: sqlite3.Connection = fairy.driver_connection  # type: ignore[assignment]
        previous = conn.isolation_level
        try:
            conn.isolation_level = None
            if not fairy.info.get("sql_lease_prepared"):  # kept per connection by the pool
                start_sync(conn, self._settings)
                fairy.info["sql_lease_prepared"] = True
        except BaseException:
            fairy.invalidate()
            raise
        return conn, (fairy, previous)

    def put(self, conn: sqlite3.Connection, token: object, broken: bool) -> None:
        fairy, previous = cast("tuple[PoolProxiedConnection, Any]", token)
        if broken:
            fairy.invalidate()
            return
        conn.isolation_level = previous
        fairy.close()

    def close(self) -> None:
        pass


def _interrupt(conn: sqlite3.Connection, ended: threading.Event) -> None:
    conn.interrupt()  # the statement fails with "interrupted" and rolls back


class SqliteExecutor:
    """Runs catalogue statements on SQLite within a deadline; failures become LeaseErrors."""

    notifies: bool = False
    listen_kwargs: dict[str, Any] | None = None

    def __init__(
        self, source: FileSqliteSource | EngineSqliteSource, *, where: str, table: str
    ) -> None:
        self.source = source
        self.where = where
        self._table = table
        self._deadlines = Deadlines()

    def close(self) -> None:
        self._deadlines.close()
        self.source.close()

    def run(
        self, operation: str, write: bool, sql: str, args: tuple[object, ...], seconds: float
    ) -> list[tuple[Any, ...]]:
        """Run ``sql`` with ``args`` within ``seconds``; return its rows (times parsed)."""
        deadline = monotonic() + seconds
        try:
            conn, token = self.source.get(deadline - monotonic())
        except LeaseError:
            raise
        except Exception as exc:
            raise translate(
                exc,
                operation=operation,
                where=self.where,
                sent=False,
                table=self._table,
                timed_out=isinstance(exc, TimeoutError),
            ) from exc
        call = self._deadlines.start(deadline, _interrupt, conn)
        try:
            cur = conn.execute(sql, args)
            try:
                rows = cur.fetchall()
            finally:
                cur.close()
        except BaseException as exc:
            expired = self._deadlines.finish(call)
            broken = not isinstance(exc, sqlite3.Error)
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:  # an interrupted statement can leave one open
                    conn.rollback()
            self.source.put(conn, token, broken)
            if not isinstance(exc, Exception):
                raise
            if isinstance(exc, sqlite3.Error | TimeoutError):
                raise translate(
                    exc,
                    operation=operation,
                    where=self.where,
                    sent=False,  # SQLite rolls an interrupted statement back
                    table=self._table,
                    timed_out=expired,
                ) from exc
            raise LeaseDatabaseError(
                f"{operation}: SQLite failure in {self.where} ({type(exc).__name__}: {exc})",
                operation=operation,
            ) from exc
        self.source.put(conn, token, self._deadlines.finish(call))
        return [tuple(parse_time(v) for v in row) for row in rows]
