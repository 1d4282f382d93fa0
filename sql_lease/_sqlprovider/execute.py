"""The execution loop of the SQL provider: one statement, within its deadline, on a pooled
connection, with failures classified by the backend and translated into `LeaseError`s."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection

from .._core.deadlines import Deadlines
from .._core.failures import CONNECTION, DROP, Failure
from ..backends import Backend, Fetch
from ..catalogue import Catalogue
from ..errors import LeaseDatabaseError, LeaseError
from ..observer import LeaseObserver, timed_statement
from .connections import Connections
from .forks import ForkAware
from .schema_home import home_of, renames

__all__ = ["CANCEL_GRACE", "Fetch", "StatementRunner", "Via"]

MAX_CHECKOUTS: Final = 64  # dead pooled connections skipped before giving up (bounded by timeout)
CANCEL_GRACE: Final = 5.0  # seconds a cancelled statement's cancel request may take
RETRY_CHECKOUT: Final = CONNECTION | {Failure.REFUSED}  # failed checkouts worth a second one
#: Instead of one statement: what to run on the connection's fetch (a transaction, say).
Via = Callable[[Fetch], Awaitable[Any]]


class StatementRunner(ForkAware):
    """Runs the catalogue's statements for a provider (its base class); see `_run`."""

    _backend: Backend
    _sql: Catalogue
    _connections: Connections
    _deadlines: Deadlines
    _observer: LeaseObserver | None
    _timeout: float
    _where: str
    _cleanup_tasks: set[asyncio.Task[None]]
    _engine: AsyncEngine
    _owns_engine: bool

    _table_name: str
    #: None when the catalogue names its schema; else old -> new statement texts, empty
    #: until the table's schema is found (`_schema_home`).
    _renames: dict[str, str] | None
    _home_lock: asyncio.Lock | None = None

    async def _find_home(self, operation: str) -> None:
        """Find the table's schema (once: `_schema_home`) and name it in every statement.

        Runs as part of the caller's ``operation`` (its errors name it; observers see only
        that operation)."""
        renamed = self._renames
        if self._home_lock is None:
            self._home_lock = asyncio.Lock()
        async with self._home_lock:
            if renamed is None or renamed:
                return
            home_sql = self._backend.home_sql or ""
            rows = await self._run(operation, False, home_sql, (self._table_name,), None, True)
            home = home_of(rows, self._table_name, operation)
            new = self._backend.catalogue(self._table_name, None, home)
            old, self._sql = self._sql, new  # first: a renamed text finds its catalogue's data
            renamed.update(renames(old, new))

    def _catalogue_now(self) -> Catalogue:
        """The catalogue as it is now (`Connections`' fetches may read its data)."""
        return self._sql

    _loops_seen: int = 1

    def _new_loop(self, loops: int) -> None:
        """Calls now come from another event loop than the connections held (a provider reused
        from a second ``asyncio.run``): start again with a fresh pool, before any I/O. Only an
        engine this provider made is renewed (`Engine.dispose` with ``close=False``: the old
        loop's connections are dropped unclosed); a caller's engine is the caller's."""
        self._loops_seen = loops
        if self._owns_engine:
            self._engine.sync_engine.dispose(close=False)
            self._connections.start_over(self._engine.sync_engine.pool)

    async def _run(
        self,
        operation: str,
        write: bool,
        sql: str,
        args: tuple[object, ...],
        seconds: float | None = None,
        timed: bool = False,
        via: Via | None = None,
    ) -> Any:
        """Run ``sql`` with ``args`` within the timeout (or ``seconds``); return its rows.

        Translates failures into `LeaseError`s. The deadline is enforced by the provider's
        watchdog (see `_deadlines`): past it, the call is cancelled (the driver then cancels
        the statement on the server too) and raises `LeaseTimeoutError`. A connection found
        unusable before the statement was sent is replaced and the call goes on; so is one
        that broke under a read. A write that may have reached the server is not repeated: it
        raises with ``outcome_unknown=True``. The backend's classifier says which is which.
        A statement the server rolled back as a deadlock victim (CONFLICT: nothing applied)
        runs again. ``via`` runs a script on the connection's fetch instead of ``sql``.

        The statement is awaited right here, on the driver's own bound fetch, not in a helper
        coroutine: every coroutine frame between the caller and the driver is paid again on
        each suspension and resumption. With an observer, `_run` calls itself (``timed=True``)
        inside `timed_statement`, which times the call and reports it; without one, observing
        costs one test.
        """
        if self._closed:
            raise self._closed_error(operation)
        if self._observer is not None and not timed:
            return await timed_statement(
                self._observer,
                self._backend.name,
                operation,
                self._run(operation, write, sql, args, seconds, True, via),
            )
        renamed = self._renames
        if renamed is not None:
            if not renamed and sql is not self._backend.home_sql:
                await self._find_home(operation)
            sql = renamed.get(sql, sql)
            if via is not None:
                via = _renaming(via, renamed)
        deadlines = self._deadlines
        task = deadlines.start(self._timeout if seconds is None else seconds)
        if deadlines.loops != self._loops_seen:
            self._new_loop(deadlines.loops)
        connections = self._connections
        sent = False
        try:
            for attempt in range(MAX_CHECKOUTS):
                pair = connections.take()
                if pair is None:
                    try:
                        pair = await connections.get()
                    except Exception as exc:
                        # Nothing was sent yet: one more try on a fresh connection is safe.
                        if attempt == 0 and self._backend.classify(exc) in RETRY_CHECKOUT:
                            continue
                        raise
                fairy, fetch, since = pair
                try:
                    sent = True
                    result = await fetch(sql, *args) if via is None else await via(fetch)
                except (asyncio.CancelledError, TimeoutError):
                    # Cancelled mid-statement: the driver has asked the server to cancel it.
                    # Let that land before the connection is dropped, or the statement
                    # would live on and could still apply after the caller heard "timeout".
                    self._discard_later(fairy)
                    raise
                except Exception as exc:
                    kind = self._backend.classify(exc)
                    if kind is Failure.CONFLICT:
                        await connections.put(fairy, fetch, since)
                        sent = False  # rolled back whole: run it again
                        continue
                    if kind not in DROP:
                        await connections.put(fairy, fetch, since)
                        raise
                    await connections.drop(fairy)
                    if kind is Failure.REFUSED:
                        sent = False  # refused before sending: try the next connection
                        continue
                    if kind in CONNECTION and not write and attempt == 0:
                        continue
                    raise
                except BaseException:
                    await connections.drop(fairy)
                    raise
                if not connections.keep(fairy, fetch, since):
                    await connections.give_back(fairy)
                return result
            raise LeaseDatabaseError("no usable connection", operation=operation)
        except LeaseError:
            raise
        except Exception as exc:
            raise self._backend.translate(
                exc,
                operation=operation,
                where=self._where,
                sent=sent and write,
                table=self._sql.table,
            ) from exc
        except asyncio.CancelledError as exc:
            if not deadlines.timed_out(task):
                raise
            error = self._backend.translate(
                TimeoutError(f"no answer within {self._timeout} s"),
                operation=operation,
                where=self._where,
                sent=sent and write,
                table=self._sql.table,
            )
            raise error from exc
        finally:
            deadlines.finish(task)

    def _discard_later(self, fairy: PoolProxiedConnection) -> None:
        task = asyncio.get_running_loop().create_task(self._discard(fairy))
        self._cleanup_tasks.add(task)
        task.add_done_callback(self._cleanup_tasks.discard)

    async def _discard(self, fairy: PoolProxiedConnection) -> None:
        """Let the backend settle the cancelled statement (bounded), then drop the connection."""
        try:
            await self._backend.settle(fairy)
        finally:
            await self._connections.drop(fairy)


def _renaming(via: Via, renamed: dict[str, str]) -> Via:
    """``via`` sending the statement texts of the catalogue as it is now."""

    def run(fetch: Fetch) -> Awaitable[Any]:
        return via(lambda sql, *args: fetch(renamed.get(sql, sql), *args))

    return run
