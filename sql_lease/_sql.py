"""`SqlLeaseProvider`: leases in a PostgreSQL table, one autocommit statement per operation."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Iterable
from datetime import datetime
from time import monotonic
from typing import Any, Self

import asyncpg
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection

from ._connections import Connections
from ._contention import ContentionHints
from ._contract import AcquireResult, Lease
from ._dberrors import is_connection_failure, translate
from ._deadlines import Deadlines
from ._guard import guard
from ._hold import LeaseLifecycle
from ._listen import Listener
from ._sqlite import build_sqlite_statements, sqlite_connect_args
from ._statements import Statements, build_statements
from ._urls import build_engine, normalize_url, redact
from ._validate import (
    Millis,
    check_identifier,
    check_items,
    check_limit,
    check_millis,
    check_name,
    check_prefix,
    check_ttl,
)
from ._wait import close_listener
from .capabilities import Holder, Renewal, WakeupSink, WakeupSource
from .errors import (
    LeaseClosedError,
    LeaseDatabaseError,
    LeaseError,
    LeaseTypeError,
    LeaseValueError,
)
from .observer import LeaseObserver, check_observer, timed_statement
from .schema import DEFAULT_TABLE

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_TIMEOUT", "SqlLeaseProvider"]

DEFAULT_TIMEOUT = 5.0
DEFAULT_CONNECT_TIMEOUT = 5.0
_MAX_CHECKOUTS = 64  # dead pooled connections skipped before giving up (bounded by timeout too)
_CANCEL_GRACE = 5.0  # seconds a cancelled statement's cancel request may take in the background
_SERVER_SHARE = 0.8  # server-side statement/lock timeout as a share of the client-side timeout
_MAX_SECONDS = 86_400.0  # a day; PostgreSQL's statement_timeout tops out at about 24 days

logger = logging.getLogger("sql_lease")


def _check_seconds(what: str, value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise LeaseTypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not (0 < value <= _MAX_SECONDS):
        raise LeaseValueError(
            f"{what} must be a number of seconds above 0 and at most {_MAX_SECONDS:.0f} "
            f"(one day), not {value!r}"
        )
    return float(value)


class SqlLeaseProvider(LeaseLifecycle):
    """Leases stored in PostgreSQL through a SQLAlchemy `AsyncEngine` on asyncpg.

    Every operation is one conditional statement in autocommit, judged by the database clock.
    ``timeout`` (seconds) bounds each call end to end: pool checkout, connection and statement.
    A provider built with `from_url` owns its engine and disposes of it in `aclose`; one given
    an engine never disposes of it. After `aclose` every call raises `LeaseClosedError`.
    Durations (``ttl_ms`` and the like) are ints of milliseconds or `timedelta` values, rounded up
    to a whole millisecond.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        table_name: str = DEFAULT_TABLE,
        schema: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        observer: LeaseObserver | None = None,
    ) -> None:
        check_identifier("table_name", table_name)
        if schema is not None:
            check_identifier("schema", schema)
        self._timeout = _check_seconds("timeout", timeout)
        self._observer = check_observer(observer)
        if not isinstance(engine, AsyncEngine):
            raise LeaseTypeError(f"engine must be an AsyncEngine, not {type(engine).__name__}")
        dialect = engine.dialect
        kind = (dialect.name, dialect.driver)
        if kind not in (("postgresql", "asyncpg"), ("sqlite", "aiosqlite")):
            raise LeaseValueError(
                "SqlLeaseProvider needs a postgresql+asyncpg or sqlite+aiosqlite engine, not "
                f"{dialect.name}+{dialect.driver}"
            )
        self._sqlite = dialect.name == "sqlite"
        self._backend = dialect.name  # "postgresql" or "sqlite", as observers see it
        if self._sqlite and schema is not None:
            raise LeaseValueError("SQLite has no schemas: leave schema=None")
        self._engine = engine
        self._owns_engine = False
        self._table_name = table_name
        self._schema = schema
        self._sql: Statements = (
            build_sqlite_statements(table_name)
            if self._sqlite
            else build_statements(table_name, schema)
        )
        busy_ms = max(1, round(self._timeout * 1000 * _SERVER_SHARE))
        self._sqlite_pragmas = (
            f"PRAGMA busy_timeout = {busy_ms}",
            "PRAGMA journal_mode = WAL",
            "PRAGMA synchronous = FULL",
        )
        self._where = redact(engine.url)
        self._connections = Connections(
            engine.sync_engine.pool,
            shared=True,
            sqlite_pragmas=self._sqlite_pragmas if self._sqlite else None,
        )
        self._cleanup_tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._closing: asyncio.Task[None] | None = None
        self._deadlines = Deadlines()
        self._hints = ContentionHints()
        #: How often acquire ran its statement again because a concurrent writer committed
        #: between its snapshot and its write (diagnostics; see `_statements`).
        self.acquire_reruns = 0
        #: How many acquires were answered by reading the holder of a contended key, without
        #: the full statement (diagnostics; see `_contention`).
        self.acquire_reads = 0

    @classmethod
    def from_url(
        cls,
        url: str | URL,
        *,
        table_name: str = DEFAULT_TABLE,
        schema: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        synchronous_commit: bool = True,
        observer: LeaseObserver | None = None,
        **engine_kwargs: Any,
    ) -> SqlLeaseProvider:
        """Create a provider that owns an engine for ``url``.

        Accepts ``postgresql://``, ``postgres://`` and ``postgresql+asyncpg://`` URLs, and
        ``sqlite:///path.db`` / ``sqlite+aiosqlite:///path.db`` for the embedded backend. Sets the
        server-side ``statement_timeout`` and ``lock_timeout`` to 80% of ``timeout`` (so the
        server cancels a stuck statement cleanly before the client-side deadline) and the
        connect timeout to ``connect_timeout``; ``engine_kwargs`` go to `create_async_engine`.

        ``synchronous_commit=False`` runs the provider's statements (its engine serves nothing
        else) with ``synchronous_commit = off``: faster writes, but a server crash can forget
        the last fraction of a second of lease changes (see the README's "Durability").

        ``observer`` (a `sql_lease.observer.LeaseObserver`) sees every statement and lease event.
        """
        if not isinstance(synchronous_commit, bool):
            raise LeaseTypeError("synchronous_commit must be a bool")
        check_observer(observer)
        parsed = normalize_url(url)
        seconds = _check_seconds("timeout", timeout)
        connect_seconds = _check_seconds("connect_timeout", connect_timeout)
        check_identifier("table_name", table_name)
        if schema is not None:
            check_identifier("schema", schema)
        connect_args = dict(engine_kwargs.pop("connect_args", {}))
        if parsed.drivername == "sqlite+aiosqlite":
            connect_args = sqlite_connect_args(connect_args, seconds * _SERVER_SHARE)
            engine_kwargs.setdefault("pool_size", 5)
            engine_kwargs.setdefault("max_overflow", 5)
            engine_kwargs.setdefault("pool_timeout", seconds)
            engine = build_engine(parsed, connect_args=connect_args, **engine_kwargs)
            provider = cls(
                engine, table_name=table_name, schema=schema, timeout=seconds, observer=observer
            )
            if not synchronous_commit:
                provider._sqlite_pragmas = (
                    *provider._sqlite_pragmas[:-1],
                    "PRAGMA synchronous = NORMAL",
                )
            provider._own_engine()
            return provider
        # The server gives up first, so a statement stuck behind a lock ends in a clean error
        # (nothing applied); the client-side deadline is the backstop for a stalled network.
        millis = str(max(1, round(seconds * 1000 * _SERVER_SHARE)))
        connect_args["server_settings"] = {
            "application_name": "sql_lease",
            "statement_timeout": millis,
            "lock_timeout": millis,
            **({} if synchronous_commit else {"synchronous_commit": "off"}),
            **connect_args.get("server_settings", {}),
        }
        connect_args.setdefault("timeout", connect_seconds)
        engine_kwargs.setdefault("pool_size", 10)
        engine_kwargs.setdefault("max_overflow", 10)
        engine_kwargs.setdefault("pool_timeout", seconds)
        engine = build_engine(parsed, connect_args=connect_args, **engine_kwargs)
        provider = cls(
            engine, table_name=table_name, schema=schema, timeout=seconds, observer=observer
        )
        provider._own_engine()
        return provider

    def _own_engine(self) -> None:
        # Nobody else uses this engine: keep idle connections too (see `_connections`).
        self._owns_engine = True
        self._connections = Connections(
            self._engine.sync_engine.pool,
            shared=False,
            sqlite_pragmas=self._sqlite_pragmas if self._sqlite else None,
        )

    @property
    def engine(self) -> AsyncEngine:
        """The engine this provider runs on."""
        return self._engine

    @property
    def table_name(self) -> str:
        return self._table_name

    @property
    def schema(self) -> str | None:
        return self._schema

    @property
    def timeout(self) -> float:
        """Seconds that bound each call end to end."""
        return self._timeout

    @property
    def observer(self) -> LeaseObserver | None:
        """The observer given at construction, or None."""
        return self._observer

    async def aclose(self) -> None:
        """Close the provider; idempotent. Every later call raises `LeaseClosedError`.

        Leases held through `hold` count as lost (their bodies are cancelled) and are left to
        expire. Calls in flight finish first (each within its timeout); then every connection
        goes back to the pool, and the engine is disposed of if this provider created it
        (`from_url`); an engine the caller gave is left open.
        """
        if self._closing is None:
            self._closed = True
            self._closing = asyncio.get_running_loop().create_task(self._shut_down())
        # Shielded: a cancelled (or self-cancelling, from inside a hold) caller does not stop
        # the shutdown half-way; a second aclose waits for the same one.
        await asyncio.shield(self._closing)

    async def _shut_down(self) -> None:
        self._end_holds()
        await self._connections.shutdown(self._timeout + _CANCEL_GRACE)
        if self._cleanup_tasks:
            await asyncio.wait(list(self._cleanup_tasks), timeout=_CANCEL_GRACE)
        await close_listener(self)
        if self._owns_engine:
            await self._engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (
            f"SqlLeaseProvider(url={self._where!r}, table={self._sql.table!r}, "
            f"timeout={self._timeout})"
        )

    # -- execution -----------------------------------------------------------------------

    async def _run(
        self,
        operation: str,
        write: bool,
        sql: str,
        args: tuple[object, ...],
        seconds: float | None = None,
        timed: bool = False,
    ) -> list[Any]:
        """Run ``sql`` with ``args`` within the timeout (or ``seconds``); return its rows.

        Translates failures into `LeaseError`s. The deadline is enforced by the provider's
        watchdog (see `_deadlines`): past it, the call is cancelled (asyncpg then cancels the
        statement on the server too) and raises `LeaseTimeoutError`. A connection found broken
        before the statement was sent is replaced and the call goes on; so is one that broke
        under a read. A write that may have reached the server is not repeated: it raises with
        ``outcome_unknown=True``.

        The statement is awaited right here, not in a helper coroutine: every coroutine frame
        between the caller and the driver is paid again on each suspension and resumption.
        With an observer, `_run` calls itself (``timed=True``) inside `timed_statement`,
        which times the call and reports it; without one, observing costs one test.
        """
        if self._closed:
            raise LeaseClosedError(operation)
        if self._observer is not None and not timed:
            return await timed_statement(
                self._observer,
                self._backend,
                operation,
                self._run(operation, write, sql, args, seconds, True),
            )
        deadlines = self._deadlines
        task = deadlines.start(self._timeout if seconds is None else seconds)
        connections = self._connections
        sent = False
        try:
            for attempt in range(_MAX_CHECKOUTS):
                pair = connections.take()
                if pair is None:
                    try:
                        pair = await connections.get()
                    except Exception as exc:
                        # Nothing was sent yet: one more try on a fresh connection is safe.
                        if attempt == 0 and is_connection_failure(exc):
                            continue
                        raise
                fairy, driver, since = pair
                try:
                    sent = True
                    result: list[Any] = await driver.fetch(sql, *args)
                except sqlite3.Error:
                    await connections.put(fairy, driver, since)
                    raise
                except asyncpg.PostgresError as exc:
                    broken = _connection_broken(exc)
                    if broken:
                        await connections.drop(fairy)
                    else:
                        await connections.put(fairy, driver, since)
                    if broken and not write and attempt == 0:
                        continue
                    raise
                except (asyncpg.InterfaceError, asyncpg.InternalClientError):
                    # Refused before sending: the connection died while idle (server restart,
                    # killed backend). The driver checks that itself, so we do not check first.
                    await connections.drop(fairy)
                    sent = False
                    continue
                except (asyncio.CancelledError, TimeoutError):
                    # Cancelled mid-statement: asyncpg has asked the server to cancel it.
                    # Let that land before the connection is dropped, or the statement
                    # would live on and could still apply after the caller heard "timeout".
                    self._discard_later(fairy, driver)
                    raise
                except BaseException as exc:
                    await connections.drop(fairy)
                    if isinstance(exc, OSError) and not write and attempt == 0:
                        continue
                    raise
                if not connections.keep(fairy, driver, since):
                    await connections.give_back(fairy)
                return result
            raise LeaseDatabaseError("no usable connection", operation=operation)
        except LeaseError:
            raise
        except Exception as exc:
            raise translate(
                exc,
                operation=operation,
                where=self._where,
                sent=sent and write,
                table=self._sql.table,
            ) from exc
        except asyncio.CancelledError as exc:
            if not deadlines.timed_out(task):
                raise
            error = translate(
                TimeoutError(f"no answer within {self._timeout} s"),
                operation=operation,
                where=self._where,
                sent=sent and write,
                table=self._sql.table,
            )
            raise error from exc
        finally:
            deadlines.finish(task)

    def _discard_later(self, fairy: PoolProxiedConnection, driver: asyncpg.Connection) -> None:
        task = asyncio.get_running_loop().create_task(self._discard(fairy, driver))
        self._cleanup_tasks.add(task)
        task.add_done_callback(self._cleanup_tasks.discard)

    async def _discard(self, fairy: PoolProxiedConnection, driver: asyncpg.Connection) -> None:
        """Wait (bounded) for asyncpg's pending cancel request, then drop the connection."""
        pending = list(getattr(driver, "_cancellations", ()))
        try:
            if pending:
                await asyncio.wait(pending, timeout=_CANCEL_GRACE)
        finally:
            await self._connections.drop(fairy)

    # -- the contract --------------------------------------------------------------------

    async def acquire_lease(self, key: str, owner: str, ttl_ms: Millis) -> AcquireResult:
        """Claim ``key`` for ``owner`` for ``ttl_ms`` if free, expired or already ``owner``'s
        (then only the expiry moves; the fence stays); else report the live holder."""
        k = check_name("key", key)
        o = check_name("owner", owner)
        ttl = check_ttl(ttl_ms)
        sql = self._sql
        hints = self._hints
        started = monotonic()
        seconds = None  # the first statement gets the whole timeout, a second what is left
        if hints.contended(k):
            # Look before writing (see `_contention`): a live other holder is the answer.
            rows = await self._run("acquire_lease", False, sql.holder, (k,))
            if rows and rows[0][0] != o:
                hints.held(k)
                self.acquire_reads += 1
                holder, fence, expires_at = rows[0]
                return AcquireResult(False, holder.decode(), fence, expires_at)
            seconds = self._left(started)
        while True:
            rows = await self._run("acquire_lease", True, sql.acquire, (k, o, ttl), seconds)
            for row in rows:
                if row[0]:
                    hints.free(k)
                    return AcquireResult(True, owner, row[1], row[2])
            if rows and rows[0][3] != o:
                hints.held(k)
                row = rows[0]
                return AcquireResult(False, row[3].decode(), row[1], row[2])
            # A concurrent writer committed after this statement's snapshot: neither won nor
            # saw the winner. Run again; the next snapshot sees it.
            self.acquire_reruns += 1
            seconds = self._left(started)

    def _left(self, started: float) -> float:
        """Seconds left of a call's timeout that started at ``started`` (`monotonic`)."""
        return self._timeout - (monotonic() - started)

    async def get_lease_owner(self, key: str) -> str | None:
        """The owner of the live lease of ``key``, or None if it is absent or expired."""
        k = check_name("key", key)
        rows = await self._run("get_lease_owner", False, self._sql.get_owner, (k,))
        return rows[0][0].decode() if rows else None

    async def get_lease(self, key: str) -> Lease | None:
        """The live lease of ``key`` (owner, fence, times), or None."""
        k = check_name("key", key)
        rows = await self._run("get_lease", False, self._sql.get_lease, (k,))
        if not rows:
            return None
        owner, fence, expires_at, acquired_at = rows[0]
        return Lease(key, owner.decode(), fence, expires_at, acquired_at)

    # Each contract method below awaits `_run` itself rather than its underscored form: one
    # coroutine frame less on every suspension of the hot path.

    async def release_lease(self, key: str, owner: str) -> None:
        """End the lease of ``key`` if ``owner`` holds it (live or expired); else do nothing."""
        await self._run("release_lease", True, self._sql.release, _key_owner(key, owner))

    async def renew_lease(self, key: str, owner: str, ttl_ms: Millis) -> bool:
        """Set the expiry of ``owner``'s live lease of ``key`` to now + ``ttl_ms``; False (and
        nothing changed) when it is expired, absent or someone else's."""
        args = (*_key_owner(key, owner), check_ttl(ttl_ms))
        return bool(await self._run("renew_lease", True, self._sql.renew, args))

    async def transfer_lease(
        self, key: str, from_owner: str, to_owner: str, ttl_ms: Millis
    ) -> bool:
        """Hand ``from_owner``'s live lease of ``key`` to ``to_owner`` for ``ttl_ms`` with a
        new fence, in one statement (the key is never free); False when not held by
        ``from_owner``."""
        args = _transfer_args(key, from_owner, to_owner, ttl_ms)
        return bool(await self._run("transfer_lease", True, self._sql.transfer, args))

    # The forms below return what the statement reports (fence and database times). Tests
    # use them to check invariants in database time.

    async def _release(self, key: str, owner: str) -> tuple[int, datetime] | None:
        """Release; (fence, database time it took effect), or None when it was a no-op."""
        rows = await self._run("release_lease", True, self._sql.release, _key_owner(key, owner))
        return (rows[0][0], rows[0][1]) if rows else None

    async def _renew(self, key: str, owner: str, ttl_ms: Millis) -> tuple[int, datetime] | None:
        """Renew; (fence, new expiry), or None when the lease was lost."""
        args = (*_key_owner(key, owner), check_ttl(ttl_ms))
        rows = await self._run("renew_lease", True, self._sql.renew, args)
        return (rows[0][0], rows[0][1]) if rows else None

    async def _transfer(
        self, key: str, from_owner: str, to_owner: str, ttl_ms: Millis
    ) -> tuple[int, datetime] | None:
        """Transfer; (fence of the new owner, new expiry), or None when it was not held."""
        args = _transfer_args(key, from_owner, to_owner, ttl_ms)
        rows = await self._run("transfer_lease", True, self._sql.transfer, args)
        return (rows[0][0], rows[0][1]) if rows else None

    # -- extensions ----------------------------------------------------------------------

    async def renew_leases(self, items: Iterable[tuple[str, str]], ttl_ms: Millis) -> list[bool]:
        """Renew many ``(key, owner)`` leases in one statement; one bool per item, in order."""
        return [r is not None for r in await self.renew_many(items, ttl_ms)]

    async def renew_many(
        self, items: Iterable[tuple[str, str]], ttl_ms: Millis
    ) -> list[Renewal | None]:
        """Renew many ``(key, owner)`` leases; per item its `Renewal`, or None when not held."""
        pairs = check_items(items)
        ttl = check_ttl(ttl_ms)
        if not pairs:
            if self._closed:
                raise LeaseClosedError("renew_leases")
            return []
        # Duplicates would match one row twice; send each pair once and fan the answer out.
        unique = list(dict.fromkeys(pairs))
        renewed: dict[tuple[bytes, bytes], Renewal] = {}
        step = self._sql.max_batch
        for start in range(0, len(unique), step):
            chunk = unique[start : start + step]
            sql = self._sql.renew_many(len(chunk))
            args = self._sql.renew_many_args(chunk, ttl)
            for key, owner, fence, expires in await self._run("renew_leases", True, sql, args):
                renewed[(key, owner)] = Renewal(fence, expires)
        return [renewed.get(pair) for pair in pairs]

    async def force_release(self, key: str) -> bool:
        """Break-glass: end the live lease of ``key`` whoever holds it; logged at WARNING."""
        k = check_name("key", key)
        rows = await self._run("force_release", True, self._sql.force_release, (k,))
        if not rows:
            return False
        owner, fence = rows[0][0].decode(), rows[0][1]
        logger.warning("force-released lease %r held by %r (fence %d)", key, owner, fence)
        return True

    async def list_leases(
        self, prefix: str | None = None, *, limit: int = 100, after: str | None = None
    ) -> list[Lease]:
        """Live leases in key order, optionally those whose key starts with ``prefix``.

        ``limit`` caps the page (1 to 10,000); pass the last key seen as ``after`` for the next.
        """
        low, high = check_prefix(prefix)
        count = check_limit(limit)
        if after is not None:
            low = max(low, check_name("after", after) + b"\0")
        rows = await self._run("list_leases", False, self._sql.list_live, (low, high, count))
        return [Lease(k.decode(), o.decode(), f, e, a) for k, o, f, e, a, _ in rows]

    async def purge_expired(
        self,
        *,
        min_age_ms: Millis = 60_000,
        batch_size: int = 1_000,
        max_batches: int | None = None,
    ) -> int:
        """Delete rows expired for at least ``min_age_ms``, ``batch_size`` rows per statement.

        Each batch is its own short statement that skips locked rows, so purging never blocks
        lease traffic for long. Returns how many rows were deleted.
        """
        age = check_millis("min_age_ms", min_age_ms)
        batch = check_limit(batch_size, what="batch_size", most=100_000)
        batches = None if max_batches is None else check_limit(max_batches, "max_batches", 10**9)
        total = 0
        done = 0
        while batches is None or done < batches:
            rows = await self._run("purge_expired", True, self._sql.purge_batch, (age, batch))
            deleted = len(rows)
            total += deleted
            done += 1
            if deleted < batch:
                break
        return total

    async def mark_wanted(self, key: str, wait_ms: Millis) -> Holder | None:
        """Mark ``key`` wanted for ``wait_ms``; returns its live holder, or None if free."""
        k = check_name("key", key)
        wait = check_ttl(wait_ms)
        rows = await self._run("want", True, self._sql.want, (k, wait))
        if not rows:
            return None
        return Holder(rows[0][0].decode(), rows[0][1], rows[0][2])

    def wakeup_source(self, sink: WakeupSink) -> WakeupSource | None:
        """A LISTEN connection feeding ``sink`` (PostgreSQL); None on SQLite (waiters poll)."""
        return None if self._sqlite else Listener(self, sink)

    async def now(self) -> datetime:
        """The database server's clock (the clock that judges expiry)."""
        rows = await self._run("now", False, self._sql.now, ())
        value: datetime = rows[0][0]
        return value

    # -- held leases, waiting and fencing (sql_lease._hold, _wait, _guard) ---------------

    async def guard(self, conn: Any, key: str, fence: int) -> None:
        """In ``conn``'s transaction, lock the live lease of ``key`` with ``fence`` or raise.

        ``conn`` is the caller's SQLAlchemy `AsyncConnection` (PostgreSQL). The row is read
        ``FOR SHARE``, so the fence stays live until that transaction ends; raises `LeaseLost`
        when ``fence`` is not the live fence. See `sql_lease._guard`.
        """
        if self._closed:
            raise LeaseClosedError("guard")
        await guard(self, conn, key, fence)


def _key_owner(key: str, owner: str) -> tuple[bytes, bytes]:
    return check_name("key", key), check_name("owner", owner)


def _transfer_args(
    key: str, from_owner: str, to_owner: str, ttl_ms: Millis
) -> tuple[bytes, bytes, bytes, int]:
    k = check_name("key", key)
    return (
        k,
        check_name("from_owner", from_owner),
        check_name("to_owner", to_owner),
        check_ttl(ttl_ms),
    )


def _connection_broken(exc: asyncpg.PostgresError) -> bool:
    state = getattr(exc, "sqlstate", "") or ""
    return state.startswith(("08", "57P"))
