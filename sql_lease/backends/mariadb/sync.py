"""MariaDB for the sync provider: PyMySQL, the async backend's statements and session settings.

Connections sit in a small lock-protected pool (`UrlSource`), or are borrowed from a caller's
SQLAlchemy engine (`EngineSource`, ``mariadb+pymysql``). Each runs the backend's session
settings once (`driver.session_sql`: ``SIMULTANEOUS_ASSIGNMENT``, UTC, the server-side
timeouts at 80% of the call's, autocommit). The deadline watchdog kills a statement still
running at 100% (``KILL QUERY`` from a second connection: it fails as cancelled, nothing
applied); the socket's read timeout is a last resort against a silent server. Rows come back as
the async backend's do (aware UTC datetimes, bytes).
"""

from __future__ import annotations

import contextlib
import math
import threading
from time import monotonic
from typing import Any, cast

import pymysql
from sqlalchemy.engine import Engine
from sqlalchemy.pool import PoolProxiedConnection

from ...errors import LeaseDatabaseError, LeaseError
from .._thread_deadlines import Deadlines
from .driver import KILL_GRACE, aware_rows
from .errors import translate
from .placeholders import bound

__all__ = ["EngineSource", "MariadbExecutor", "UrlSource", "connect_kwargs"]

_SESSION = "sql_lease_session"


def connect_kwargs(url: Any, *, connect_timeout: float, timeout: float) -> dict[str, Any]:
    """PyMySQL's ``connect`` arguments for a checked MariaDB URL."""
    return {
        "host": url.host or "localhost",
        "port": url.port or 3306,
        "user": url.username or "root",
        "password": url.password or "",
        "database": url.database,
        "autocommit": True,
        "connect_timeout": max(1, math.ceil(connect_timeout)),
        # A silent server: the socket gives up a little after the watchdog would have.
        "read_timeout": max(1, math.ceil(timeout + KILL_GRACE)),
        "write_timeout": max(1, math.ceil(timeout + KILL_GRACE)),
    }


class UrlSource:
    """Up to ``size`` PyMySQL connections to one server, opened on demand."""

    def __init__(self, kwargs: dict[str, Any], *, settings: str, size: int) -> None:
        self.kwargs = kwargs
        self._settings = settings
        self._idle: list[pymysql.connections.Connection[Any]] = []
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._closed = False

    def get(self, timeout: float) -> tuple[Any, object]:
        if not self._slots.acquire(timeout=max(0.0, timeout)):
            raise TimeoutError("no free MariaDB connection within the timeout")
        with self._lock:
            if self._idle:
                return self._idle.pop(), None
        try:
            conn = pymysql.connect(**self.kwargs)
            try:
                with conn.cursor() as cursor:
                    cursor.execute(self._settings)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            self._slots.release()
            raise
        return conn, None

    def put(self, conn: Any, token: object, broken: bool) -> None:
        with self._lock:
            if broken or self._closed:
                with contextlib.suppress(Exception):
                    conn.close()
            else:
                self._idle.append(conn)
        self._slots.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()


class EngineSource:
    """Connections from a caller's SQLAlchemy `Engine` (mariadb+pymysql); never disposed. The
    session settings (autocommit included) stay on the connection: give the provider an engine
    of its own."""

    def __init__(self, engine: Engine, *, settings: str) -> None:
        self.engine = engine
        self._settings = settings
        url = engine.url
        self.kwargs = connect_kwargs(url, connect_timeout=10, timeout=0)

    def get(self, timeout: float) -> tuple[Any, object]:
        fairy = self.engine.raw_connection()
        conn = fairy.driver_connection
        try:
            if fairy.info.get(_SESSION) != self._settings:  # kept per connection by the pool
                with conn.cursor() as cursor:  # type: ignore[union-attr]
                    cursor.execute(self._settings)
                fairy.info[_SESSION] = self._settings
        except BaseException:
            fairy.invalidate()
            raise
        return conn, fairy

    def put(self, conn: Any, token: object, broken: bool) -> None:
        fairy = cast("PoolProxiedConnection", token)
        if broken:
            fairy.invalidate()
            return
        fairy.close()

    def close(self) -> None:
        pass


def _kill(arg: tuple[dict[str, Any], int], ended: threading.Event) -> None:
    """The watchdog's step for a call past its deadline: ``KILL QUERY`` its statement."""
    kwargs, thread = arg
    params = {**kwargs, "connect_timeout": max(1, math.ceil(KILL_GRACE))}
    params["read_timeout"] = params["write_timeout"] = max(1, math.ceil(KILL_GRACE))
    with contextlib.suppress(Exception):  # it ended meanwhile, or the server is gone
        killer = pymysql.connect(**params)
        try:
            with killer.cursor() as cursor:
                cursor.execute(f"KILL QUERY {int(thread)}")
        finally:
            killer.close()


class MariadbExecutor:
    """Runs catalogue statements on MariaDB within a deadline; failures become LeaseErrors."""

    notifies: bool = False
    listen_kwargs: dict[str, Any] | None = None

    def __init__(self, source: UrlSource | EngineSource, *, where: str, table: str) -> None:
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
        """Run ``sql`` with ``args`` within ``seconds``; return its rows (times aware)."""
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
        text, bind = bound(sql)
        call = self._deadlines.start(deadline, _kill, (self.source.kwargs, conn.thread_id()))
        sent = False
        try:
            with conn.cursor() as cursor:
                sent = True
                cursor.execute(text, bind(args))
                rows = cursor.fetchall()
        except BaseException as exc:
            expired = self._deadlines.finish(call)
            # A call past its deadline may have a KILL QUERY still on its way: never reuse it.
            broken = expired or not isinstance(exc, pymysql.err.MySQLError) or _lost(exc)
            if not broken:
                with contextlib.suppress(Exception):
                    if not conn.get_autocommit():
                        conn.rollback()
            self.source.put(conn, token, broken)
            if not isinstance(exc, Exception):
                raise
            if isinstance(exc, pymysql.err.MySQLError | TimeoutError | OSError):
                # KILL QUERY ended it (1317): the statement was rolled back, nothing applied.
                killed = expired and not _lost(exc) and isinstance(exc, pymysql.err.MySQLError)
                raise translate(
                    exc,
                    operation=operation,
                    where=self.where,
                    sent=sent and write and not killed,
                    table=self._table,
                    timed_out=expired and not killed,
                ) from exc
            raise LeaseDatabaseError(
                f"{operation}: MariaDB failure in {self.where} ({type(exc).__name__}: {exc})",
                operation=operation,
                outcome_unknown=sent and write,
            ) from exc
        self.source.put(conn, token, self._deadlines.finish(call))
        return aware_rows(rows) if rows else []


def _lost(exc: BaseException) -> bool:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    return isinstance(exc, pymysql.err.InterfaceError) or code >= 2000 or code in (1927, 4031)
