"""PostgreSQL for the sync provider: psycopg 3, one autocommit statement per call.

Statements come from the shared catalogue with ``$1`` placeholders and run through psycopg's
`RawCursor`, unprepared (``prepare=False``), so nothing is rewritten and a transaction pooler
(PgBouncer) is safe; parameters and results are binary (`psycopg_values.pinned_cursor`), so no
session setting (``standard_conforming_strings``, ``DateStyle``, ...) changes them.
Connections come from a `psycopg_pool.ConnectionPool` that the provider
owns (`from_url`) or from a caller's SQLAlchemy `Engine` (then the connection's own settings
are restored before it goes back). A connection of the provider's own pool keeps its cursor
from one call to the next (`PooledConnection`): a fresh cursor per statement costs several
µs of client CPU (it sets up its adapters and row loaders again). Each call is bounded end to
end: pool checkout, connect (``connect_timeout``), and the statement, which the server
cancels itself at 80% of the timeout (``statement_timeout``/``lock_timeout``, set at connect
for owned pools) and the provider's deadline watchdog cancels from the client at 100% (by a
cancel request, then by shutting the socket if the network is stalled).

Behind a pooler (``from_url(..., pooler=...)``) nothing is set at connect: each call is one
simple-protocol query that sets the timeouts for itself (``SET LOCAL``) and calls the table's
server function, its values bound on the client (`pooler_text`, as the async pooler mode),
sent without a cursor (`psycopg_wire.Blocking`: libpq's ``PQexec``; a cursor's generators
and result bookkeeping cost more client CPU than the call itself).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from time import monotonic
from typing import Any, Final, cast

import psycopg
import psycopg_pool
from psycopg.pq import ExecStatus
from sqlalchemy.engine import Engine
from sqlalchemy.pool import PoolProxiedConnection

from ..._core.failures import Failure
from ...errors import LeaseDatabaseError, LeaseError
from .._thread_deadlines import Deadlines
from .errors import classify, translate
from .pooler_text import PoolerStatements
from .psycopg_values import pinned_cursor
from .psycopg_wire import Blocking, render
from .sync_citus import SyncCitus
from .sync_pool_report import POOL_NAME, PROBE_S, ConnectReport, quiet_pool_log, reporting_class

__all__ = [
    "EnginePgSource",
    "PgExecutor",
    "PoolPgSource",
    "PooledConnection",
    "is_broken",
    "open_pool",
]

_MAX_CHECKOUTS: Final = 64  # dead pooled connections skipped before giving up
_CANCEL_S: Final = 1.0  # how long a cancel request may take before the socket is shut
_TUPLES_OK: Final = int(ExecStatus.TUPLES_OK)
_CURSOR: Final = "sql_lease.cursor"  # where a caller's engine connection keeps its cursor
_WIRE: Final = "sql_lease.wire"  # and its libpq handle (pooler mode)


class PooledConnection(psycopg.Connection[Any]):
    """A connection of the provider's own pool: it keeps one cursor for the statements.

    Only the thread that checked the connection out uses the cursor; a call that fails drops
    it (the next call makes a new one).
    """

    statement_cursor: psycopg.RawCursor[Any] | None = None
    #: Pooler mode: the connection's libpq handle, used without a cursor.
    statement_wire: Blocking | None = None


def is_broken(exc: BaseException) -> bool:
    """True when ``exc`` says the connection it ran on is unusable (the backend's classifier)."""
    return classify(exc) in (Failure.BROKEN, Failure.REFUSED, Failure.UNREACHABLE)


def open_pool(kwargs: dict[str, Any], *, size: int, timeout: float) -> PoolPgSource:
    """A started `psycopg_pool.ConnectionPool` (connecting in the background) as a source;
    why its connections fail is reported to the callers (`sync_pool_report`)."""
    quiet_pool_log()
    report = ConnectReport()
    pool: psycopg_pool.ConnectionPool[PooledConnection] = psycopg_pool.ConnectionPool(
        kwargs=kwargs,
        connection_class=reporting_class(PooledConnection, report),
        min_size=0,
        max_size=size,
        open=False,
        timeout=timeout,
        name=POOL_NAME,
        reconnect_timeout=max(timeout, 30.0),
    )
    pool.open(wait=False)
    return PoolPgSource(pool, report)


class PoolPgSource:
    """Connections from a pool that the provider owns (and closes); each keeps its cursor."""

    def __init__(
        self, pool: psycopg_pool.ConnectionPool[PooledConnection], report: ConnectReport
    ) -> None:
        self.pool = pool
        self.report = report

    def get(self, timeout: float) -> tuple[psycopg.Connection[Any], object]:
        """A connection within ``timeout``; while the pool has none that works, the reason
        its connecting failed (`psycopg.OperationalError`) as soon as it is known."""
        deadline = monotonic() + timeout
        report = self.report
        while True:
            left = deadline - monotonic()
            try:
                conn = self.pool.getconn(timeout=left if report.settled else min(left, PROBE_S))
            except psycopg_pool.PoolTimeout:
                report.check()
                if monotonic() >= deadline:
                    raise
                continue
            return conn, None

    def cursor(self, conn: psycopg.Connection[Any], token: object) -> psycopg.RawCursor[Any]:
        """The cursor kept by ``conn`` (made on first use)."""
        pooled = cast(PooledConnection, conn)
        cur = pooled.statement_cursor
        if cur is None:
            cur = pooled.statement_cursor = pinned_cursor(conn)
        return cur

    def wire(self, conn: psycopg.Connection[Any], token: object) -> Blocking:
        """Pooler mode: ``conn``'s libpq handle (made on first use)."""
        pooled = cast(PooledConnection, conn)
        wire = pooled.statement_wire
        if wire is None:
            wire = pooled.statement_wire = Blocking(conn)
        return wire

    def forget(self, conn: psycopg.Connection[Any], token: object) -> None:
        """Drop the cursor of ``conn`` after a failed statement (the next call makes one)."""
        cast(PooledConnection, conn).statement_cursor = None

    def put(self, conn: psycopg.Connection[Any], token: object, broken: bool) -> None:
        if broken and not conn.closed:
            conn.close()  # the pool sees it closed and replaces it
        self.pool.putconn(cast(PooledConnection, conn))

    def close(self) -> None:
        self.pool.close(timeout=_CANCEL_S)


class EnginePgSource:
    """Connections from a caller's SQLAlchemy `Engine` (postgresql+psycopg); never disposed.

    A borrowed connection is switched to autocommit for the call and switched back before it
    returns to the engine's pool. Its cursor is kept in the pool entry's ``info``, which
    SQLAlchemy clears when the connection is replaced.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def get(self, timeout: float) -> tuple[psycopg.Connection[Any], object]:
        fairy = self.engine.raw_connection()
        conn: psycopg.Connection[Any] = fairy.driver_connection  # type: ignore[assignment]
        previous = conn.autocommit
        try:
            if not previous:
                conn.autocommit = True
        except BaseException:
            fairy.invalidate()
            raise
        return conn, (fairy, previous)

    def cursor(self, conn: psycopg.Connection[Any], token: object) -> psycopg.RawCursor[Any]:
        info = cast("tuple[PoolProxiedConnection, Any]", token)[0].info
        cur: psycopg.RawCursor[Any] | None = info.get(_CURSOR)
        if cur is None or cur.connection is not conn:
            cur = info[_CURSOR] = pinned_cursor(conn)
        return cur

    def wire(self, conn: psycopg.Connection[Any], token: object) -> Blocking:
        info = cast("tuple[PoolProxiedConnection, Any]", token)[0].info
        found: tuple[psycopg.Connection[Any], Blocking] | None = info.get(_WIRE)
        if found is None or found[0] is not conn:
            found = info[_WIRE] = (conn, Blocking(conn))
        return found[1]

    def forget(self, conn: psycopg.Connection[Any], token: object) -> None:
        cast("tuple[PoolProxiedConnection, Any]", token)[0].info.pop(_CURSOR, None)

    def put(self, conn: psycopg.Connection[Any], token: object, broken: bool) -> None:
        fairy, previous = cast("tuple[PoolProxiedConnection, Any]", token)
        if broken or conn.closed or conn.broken:
            fairy.invalidate()
            return
        try:
            if not previous:
                conn.autocommit = False
        except psycopg.Error:
            fairy.invalidate()
            return
        fairy.close()

    def close(self) -> None:
        pass


def _dead(conn: psycopg.Connection[Any]) -> bool:
    """True when an idle connection is unusable: closed, or the server spoke or hung up.

    An idle autocommit connection (not listening) has nothing to read: a readable socket
    holds a termination notice or the end of the stream (libpq would only see the notice
    when it next reads a result). Costs one non-blocking ``select``.
    """
    if conn.closed or conn.broken:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


def _interrupt(conn: psycopg.Connection[Any], ended: threading.Event) -> None:
    """The watchdog's step at a call's deadline: cancel (then shut the socket) off its thread."""
    threading.Thread(
        target=_cancel, args=(conn, ended), name="sql_lease cancel", daemon=True
    ).start()


def _cancel(conn: psycopg.Connection[Any], ended: threading.Event) -> None:
    with contextlib.suppress(Exception):
        conn.cancel_safe(timeout=_CANCEL_S)
    if not ended.wait(_CANCEL_S):
        # The cancel request did not end the call (a stalled network): fail its socket.
        with contextlib.suppress(OSError, ValueError, psycopg.Error):
            sock = socket.socket(fileno=socket.dup(conn.fileno()))
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.close()


def _run_text(
    wire: Blocking, statements: PoolerStatements, sql: str, args: tuple[object, ...]
) -> list[tuple[Any, ...]]:
    """Pooler mode: ``sql`` with ``args`` bound on the client, as one simple query with the
    server-side timeouts set inside it; the rows of the statement itself."""
    encoding = wire.encoding
    cache = statements.cache(encoding)
    found = cache.get(sql) or statements.template(cache, sql, encoding)
    try:
        return wire.run(render(found, args, wire.literal))
    except (psycopg.errors.UndefinedFunction, psycopg.errors.FeatureNotSupported) as exc:
        # Raised while resolving the function call (or planning a statement Citus refuses),
        # before anything ran (the implicit transaction is rolled back whatever ran): the
        # plain statement (or Citus's call) is safe to send.
        if not (statements.fall_back(sql, exc) or statements.to_citus(sql, exc)):
            raise
        return wire.run(render(statements.template(cache, sql, encoding), args, wire.literal))


class PgExecutor:
    """Runs catalogue statements on PostgreSQL within a deadline; failures become LeaseErrors."""

    notifies: bool = True

    def __init__(
        self,
        source: PoolPgSource | EnginePgSource,
        *,
        where: str,
        table: str,
        listen_kwargs: dict[str, Any] | None,
        statements: PoolerStatements | None = None,
        citus: SyncCitus | None = None,
    ) -> None:
        self.source = source
        self.where = where
        self._table = table
        #: Pooler mode (`pooler_text`): each call one simple query, timeouts set inside it.
        self._statements = statements
        #: Each statement as Citus takes it, once its first connection said it is Citus.
        self._citus = citus
        #: How the dedicated LISTEN connection connects (see `_listen`).
        self.listen_kwargs: dict[str, Any] | None = listen_kwargs
        self._deadlines = Deadlines()

    def close(self) -> None:
        self._deadlines.close()
        self.source.close()

    def run(
        self, operation: str, write: bool, sql: str, args: tuple[object, ...], seconds: float
    ) -> list[tuple[Any, ...]]:
        """Run ``sql`` with ``args`` within ``seconds``; return its rows.

        A write first checks that its connection is alive (a dead one is replaced: nothing was
        sent); a read finds out from the failure instead, and then runs once more on a
        connection checked the same way. A write that may have reached the server is never
        repeated: it raises with ``outcome_unknown=True``.
        """
        deadline = monotonic() + seconds
        source = self.source
        pooled = self._statements
        citus = self._citus
        deadlines = self._deadlines
        check = write  # reads skip the check until a connection has failed under one
        rerun = not write
        for attempt in range(_MAX_CHECKOUTS):
            left = deadline - monotonic()
            try:
                if left <= 0:
                    raise TimeoutError(f"no answer within {seconds:.3f} s")
                conn, token = source.get(left)
            except LeaseError:
                raise
            except Exception as exc:
                if attempt == 0 and isinstance(exc, psycopg.OperationalError):
                    continue  # nothing was sent: one more try on a fresh connection
                raise translate(
                    exc,
                    operation=operation,
                    where=self.where,
                    sent=False,
                    table=self._table,
                    timed_out=isinstance(exc, TimeoutError),
                ) from exc
            if check and _dead(conn):
                source.put(conn, token, True)
                continue
            call = deadlines.start(deadline, _interrupt, conn)
            try:
                if pooled is not None:
                    rows = _run_text(source.wire(conn, token), pooled, sql, args)
                else:
                    cur = source.cursor(conn, token)
                    if citus is not None and citus.detected.citus is not False:
                        rows = citus.run(cur, sql, args)  # Citus, or not asked yet
                    else:
                        cur.execute(sql, args, prepare=False, binary=True)
                        # `description` would build column objects: the result's status
                        # says as much.
                        res = cur.pgresult
                        if res is not None and (res.nfields or res.status == _TUPLES_OK):
                            rows = cur.fetchall()
                        else:
                            rows = []
            except BaseException as exc:
                expired = deadlines.finish(call)
                source.forget(conn, token)
                broken = expired or conn.broken or is_broken(exc)
                source.put(conn, token, broken)
                if not isinstance(exc, Exception):
                    raise
                if broken and rerun and not expired:
                    # Other pooled connections may have died alike (a server restart).
                    rerun = False
                    check = True
                    continue
                raise translate(
                    exc,
                    operation=operation,
                    where=self.where,
                    sent=write,
                    table=self._table,
                    timed_out=expired,
                ) from exc
            # Past the deadline a cancel request may be on its way: never reuse the connection.
            source.put(conn, token, deadlines.finish(call))
            return rows
        raise LeaseDatabaseError(f"{operation}: no usable connection", operation=operation)
