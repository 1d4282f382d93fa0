"""`sql_lease.sync.SqlLeaseProvider`: the SQL provider for threads, blocking and thread-safe.

The same statements (`_catalogue`), results, semantics and errors as the async provider; the
backend's sync executor (`sql_lease.backends.SyncExecutor`) runs them through psycopg 3 or
`sqlite3`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from time import monotonic
from typing import Any, Self

from sqlalchemy.engine import URL, Engine

from .._core import calls
from .._core.contention import ContentionHints
from .._core.contract import AcquireResult, Lease
from .._core.count_calls import renewal_of
from .._core.counting import RESERVED_OWNER, Metadata, check_count_args
from .._core.provider_args import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    ProviderSettings,
    check_seconds,
    check_table,
    check_url_options,
    log_wake_ups,
)
from .._core.validate import Millis, check_limit, check_name, check_ttl
from .._sqlprovider.forks import ForkAware
from ..backends import Backend, SyncExecutor
from ..backends._urls import redact
from ..capabilities import Holder, Released, Renewal
from ..catalogue import Catalogue, decode_row, label
from ..errors import LeaseForeignRowError
from ..observer import LeaseObserver, check_observer, timed_call
from ..schema import DEFAULT_TABLE
from ._catalogue import Statements, statements_of
from ._connect import engine_target, parse
from ._counting import SyncCounting
from ._guard import guard
from ._home import SyncHome
from ._lifecycle import SyncLifecycle

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_TIMEOUT", "SqlLeaseProvider"]

logger = logging.getLogger("sql_lease")

#: What runs a statement: the backend's sync executor.
Executor = SyncExecutor
Rows = list[tuple[Any, ...]]


class SqlLeaseProvider(SyncCounting, SyncLifecycle, SyncHome, ForkAware, ProviderSettings):
    """Leases in PostgreSQL (psycopg 3) or SQLite (`sqlite3`), for threads; blocking calls.

    Takes a caller's SQLAlchemy `Engine` (``postgresql+psycopg`` or ``sqlite``), which it never
    disposes of, or a URL through `from_url` (then it owns a connection pool and closes it in
    `close`). ``timeout`` (seconds) bounds each call end to end. ``observer`` (a
    `sql_lease.observer.LeaseObserver`, such as `sql_lease.otel.OpenTelemetryObserver`) sees
    every statement and every lease event of ``hold`` and ``wait_for_lease``, as on the async
    provider (called in the thread that made the call, or the renewal thread). Thread-safe:
    share one provider per process. After `close`, every call raises `LeaseClosedError`.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        table_name: str = DEFAULT_TABLE,
        schema: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        observer: LeaseObserver | None = None,
    ) -> None:
        check_table(table_name, schema)
        seconds = check_seconds("timeout", timeout)
        watcher = check_observer(observer)
        backend = engine_target(engine)
        check_table(table_name, schema, backend)
        sql = backend.catalogue(table_name, schema)
        where = redact(engine.url)
        executor = backend.sync_engine_executor(
            engine, sql.table, where=where, timeout=seconds, catalogue=self._catalogue_now
        )
        self._setup(executor, sql, (table_name, schema, seconds, watcher), engine, backend)

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
        pool_size: int = 10,
        pooler: str | None = None,
        listen_url: str | URL | None = None,
    ) -> SqlLeaseProvider:
        """A provider that owns its connections to ``url``.

        Accepts the async `from_url`'s URLs (``postgresql://``, ``postgres://``, with a driver
        such as ``+asyncpg`` or ``+psycopg``, percent-encoded passwords, libpq parameters such
        as ``sslmode`` in the query; ``sqlite:///path.db``). PostgreSQL: a psycopg pool of up
        to ``pool_size`` connections in autocommit, ``statement_timeout`` and ``lock_timeout``
        at 80% of ``timeout``, ``connect_timeout`` on connecting. SQLite: up to ``pool_size``
        connections in WAL mode with a busy timeout at 80% of ``timeout``.
        ``synchronous_commit=False`` trades the last fraction of a second of lease changes on
        a server crash for faster writes (see the README's "Durability"). ``observer``: as
        for the constructor.

        ``pooler="transaction"`` or ``"session"``: ``url`` reaches PostgreSQL through a
        connection pooler (PgBouncer...): no startup parameter but ``application_name`` is sent,
        each call is one simple query that sets the server-side timeouts for itself and calls
        the table's server function, ``synchronous_commit=False`` is refused (startup).
        ``listen_url``: the URL of `wait_for_lease`'s LISTEN connection (direct to the server
        or through a session pooler); without it, waiters behind ``pooler="transaction"`` poll.
        """
        checked = check_url_options(
            table_name, schema, timeout, connect_timeout, synchronous_commit, pooler, observer
        )
        check_limit(pool_size, what="pool_size", most=1_000)
        target = parse(url)
        listen = None if listen_url is None else parse(listen_url)
        check_table(table_name, schema, target.backend)
        sql = target.backend.catalogue(table_name, schema)
        provider = cls.__new__(cls)
        executor = target.executor(
            sql.table, checked, pool_size, listen, catalogue=provider._catalogue_now
        )
        log_wake_ups(None if listen is None else listen.where, pooler == "transaction")
        settings = (table_name, schema, checked.timeout, checked.observer)
        provider._setup(executor, sql, settings, None, target.backend)
        return provider

    def _setup(
        self,
        executor: Executor,
        sql: Catalogue,
        settings: tuple[str, str | None, float, LeaseObserver | None],
        engine: Engine | None,
        backend: Backend,
    ) -> None:
        self._exec = executor
        self._sql = sql
        self._table_name, self._schema, self._timeout, self._observer = settings
        self._init_home(backend, self._schema)
        self._engine = engine
        self._hints = ContentionHints()
        self._closed = False
        self._watch_forks()
        #: Diagnostics, as on the async provider: acquire statements run again, and failed
        #: acquires answered by a read of the holder (see `sql_lease._core.contention`).
        self.acquire_reruns = 0
        self.acquire_reads = 0
        SyncLifecycle.__init__(self)
        if executor.listen_kwargs is not None:
            self._listen_on(backend, sql.channel, executor.listen_kwargs)

    # -- properties, lifecycle -----------------------------------------------------------

    @property
    def engine(self) -> Engine | None:
        """The caller's engine this provider runs on, or None when it owns its pool."""
        return self._engine

    @property
    def statements(self) -> Statements:
        """The statement texts this provider runs (its catalogue's, the async provider's)."""
        return statements_of(self._sql)

    @property
    def notifies(self) -> bool:
        """True on PostgreSQL: releases and transfers of wanted keys send a NOTIFY."""
        return self._exec.notifies

    @property
    def executor(self) -> Executor:
        return self._exec

    def close(self) -> None:
        """End held leases' renewal and waiting, and close the pool this provider owns.

        Idempotent. Never disposes of a caller's engine. Every later call raises
        `LeaseClosedError`.
        """
        if self._closed:
            return
        self._closed = True
        self._end_lifecycle()
        self._exec.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"sql_lease.sync.SqlLeaseProvider(url={self._exec.where!r}, "
            f"table={self._sql.table!r}, timeout={self._timeout})"
        )

    def _run(
        self, operation: str, write: bool, sql: str, args: tuple[object, ...], *within: float
    ) -> Rows:
        """Run ``sql`` with ``args`` within the timeout (or ``within``); its rows. With an
        observer, timed and reported as one `StatementEvent` (finding the table's schema
        first, when it is not known yet, included)."""
        if self._closed:
            raise self._closed_error(operation)
        seconds = within[0] if within else self._timeout
        if self._observer is None:
            return self._send(operation, write, sql, args, seconds)
        send: Callable[[], Rows] = lambda: self._send(operation, write, sql, args, seconds)  # noqa: E731
        return timed_call(self._observer, self._backend.name, operation, send)

    def _send(
        self, operation: str, write: bool, sql: str, args: tuple[object, ...], seconds: float
    ) -> Rows:
        if self._renames is not None:
            sql = self._renamed(sql, operation)
        return self._exec.run(operation, write, sql, args, seconds)

    # -- the contract --------------------------------------------------------------------

    def acquire_lease(
        self, key: str, owner: str, ttl_ms: Millis, *, limit: int = 1, metadata: Metadata = None
    ) -> AcquireResult:
        """As the async provider's: ``limit=N`` a slot of a counting lease, ``metadata``
        stored with the lease (see `SyncCounting`)."""
        k, o = calls.key_owner(key, owner)
        ttl = check_ttl(ttl_ms)
        if type(limit) is not int or limit != 1 or metadata is not None:
            return self._count_acquire(key, k, o, ttl, check_count_args(limit, metadata))
        return self._acquire_checked(k, o, owner, ttl)

    def _acquire_checked(self, k: bytes, o: bytes, owner: str, ttl: int) -> AcquireResult:
        """`acquire_lease` with its arguments checked (``k``, ``o``: stored forms); a hold's
        checked values come here directly (`sql_lease._core.policy.SyncCheckedCalls`)."""
        catalogue = self._sql
        started = monotonic()
        within: tuple[float, ...] = ()
        if self._hints.contended(k):
            rows = self._run("acquire_lease", False, catalogue.holder.sql, (k,))
            if rows and rows[0][0] == RESERVED_OWNER:  # a counting row
                return self._count_acquire(owner_key(k), k, o, ttl, (1, None, None))
            held = self._hints.seen_held(rows, k, o)
            if held is not None:
                self.acquire_reads += 1
                return held
            within = (self._left(started),)
        while True:
            rows = self._run("acquire_lease", True, catalogue.acquire.sql, (k, o, ttl), *within)
            if rows and rows[0][3] == RESERVED_OWNER and not any(r[0] for r in rows):
                return self._count_acquire(owner_key(k), k, o, ttl, (1, None, None))
            answer = self._hints.answer(rows, k, o, owner, catalogue.acquire.decode)
            if answer is not None:
                return answer
            # A concurrent writer committed after this statement's snapshot: run it again.
            self.acquire_reruns += 1
            within = (self._left(started),)

    def get_lease_owner(self, key: str) -> str | None:
        k = check_name("key", key)
        statement = self._sql.get_owner
        rows = self._run("get_lease_owner", False, statement.sql, (k,))
        try:
            return decode_row(statement, rows[0], k) if rows else None
        except LeaseForeignRowError as exc:
            lease = self._count_lease(key, rows[0][0], exc)  # a counting row: oldest holder
        return None if lease is None else lease.owner

    def get_lease(self, key: str) -> Lease | None:
        """The live lease of ``key`` (owner, fence, times, metadata; counting: the oldest)."""
        k = check_name("key", key)
        statement = self._sql.get_lease
        rows = self._run("get_lease", False, statement.sql, (k,))
        if not rows:
            return None
        try:
            owner, fence, expires_at, acquired_at = decode_row(statement, rows[0], k)
        except LeaseForeignRowError as exc:
            return self._count_lease(key, rows[0][0], exc)  # a counting row: oldest holder
        return Lease(key, owner, fence, expires_at, acquired_at)

    def release_lease(self, key: str, owner: str) -> None:
        self.release(key, owner)

    def renew_lease(self, key: str, owner: str, ttl_ms: Millis) -> bool:
        return self.renew(key, owner, ttl_ms) is not None

    def transfer_lease(
        self, key: str, from_owner: str, to_owner: str, ttl_ms: Millis, *, metadata: Metadata = None
    ) -> bool:
        """As the async provider's: ``metadata`` replaces the lease's when given; a plain
        transfer that matched nothing tries the owner's grant of a counting row."""
        args = calls.transfer_args(key, from_owner, to_owner, ttl_ms)
        if metadata is not None:
            return self._count_transfer(args, *check_count_args(1, metadata)[1:]) is not None
        rows = self._run("transfer_lease", True, self._sql.transfer.sql, args)
        return bool(rows) or self._count_transfer(args, None, None) is not None

    # -- forms that return what the statement reports (database time) --------------------

    def release(self, key: str, owner: str) -> Released | None:
        """Release; the `Released` fence and database time it took effect, or None when it
        was a no-op (as the async provider's ``release``)."""
        statement = self._sql.release
        args = calls.key_owner(key, owner)
        rows = self._run("release_lease", True, statement.sql, args)
        return statement.decode(rows[0]) if rows else self._count_release(*args)

    def renew(self, key: str, owner: str, ttl_ms: Millis) -> Renewal | None:
        """Renew; the `Renewal` (fence, new expiry), or None when the lease was not held."""
        statement = self._sql.renew
        args = (*calls.key_owner(key, owner), check_ttl(ttl_ms))
        rows = self._run("renew_lease", True, statement.sql, args)
        return statement.decode(rows[0]) if rows else renewal_of(self._count_renew(*args))

    def transfer(self, key: str, from_owner: str, to_owner: str, ttl_ms: Millis) -> Renewal | None:
        """Transfer; the new owner's `Renewal` (fence, expiry), or None when it was not held."""
        statement = self._sql.transfer
        args = calls.transfer_args(key, from_owner, to_owner, ttl_ms)
        rows = self._run("transfer_lease", True, statement.sql, args)
        if rows:
            return statement.decode(rows[0])
        return renewal_of(self._count_transfer(args, None, None))  # a counting grant?

    # -- extensions ----------------------------------------------------------------------

    def renew_leases(self, items: Iterable[tuple[str, str]], ttl_ms: Millis) -> list[bool]:
        """Renew many ``(key, owner)`` leases in one statement; one bool per item, in order."""
        return [r is not None for r in self.renew_many(items, ttl_ms)]

    def renew_many(self, items: Iterable[tuple[str, str]], ttl_ms: Millis) -> list[Renewal | None]:
        """`renew_leases` returning the `Renewal` (fence, new expiry) per renewed item, None
        per lost one."""
        pairs, ttl = calls.renew_args(items, ttl_ms)
        return self._renew_checked(pairs, ttl)

    def _renew_checked(self, pairs: list[tuple[bytes, bytes]], ttl: int) -> list[Renewal | None]:
        """`renew_many` with its arguments checked; a renewal tick's come here directly."""
        rows: Rows = []
        for sql, args in calls.renew_chunks(self._sql, pairs, ttl):
            rows += self._run("renew_leases", True, sql, args)
        return self._renew_misses(calls.renewed_in_order(self._sql, rows, pairs), pairs, ttl)

    def force_release(self, key: str) -> bool:
        """Break-glass: end the live lease of ``key`` whoever holds it; logged at WARNING."""
        k = check_name("key", key)
        rows = self._run("force_release", True, self._sql.force_release.sql, (k,))
        if not rows:
            return False
        owner, fence = label(bytes(rows[0][0])), rows[0][1]  # released: never raise now
        logger.warning("force-released lease %r held by %r (fence %d)", key, owner, fence)
        return True

    def list_leases(
        self, prefix: str | None = None, *, limit: int = 100, after: str | None = None
    ) -> list[Lease]:
        """Live leases in key order, optionally by key prefix; page with ``after``."""
        statement = self._sql.list_live
        rows = self._run("list_leases", False, statement.sql, calls.list_args(prefix, limit, after))
        return self._expand_counting([statement.decode(row) for row in rows])

    def purge_expired(
        self,
        *,
        min_age_ms: Millis = 60_000,
        batch_size: int = 1_000,
        max_batches: int | None = None,
    ) -> int:
        """Delete rows expired for at least ``min_age_ms``, in short batches; how many."""
        age, batch, batches = calls.purge_args(min_age_ms, batch_size, max_batches)
        rounds = calls.purge_rounds(batch, batches)
        sql = self._sql.purge_batch.sql
        try:
            next(rounds)
            while True:
                rounds.send(len(self._run("purge_expired", True, sql, (age, batch))))
        except StopIteration as end:
            total: int = end.value
            return total

    def mark_wanted(self, key: str, wait_ms: Millis) -> Holder | None:
        """Mark ``key`` wanted for ``wait_ms`` (its release then notifies); its live `Holder`,
        or None if free (as the async provider's ``mark_wanted``)."""
        args = calls.want_args(key, wait_ms)
        statement = self._sql.want
        rows = self._run("want", True, statement.sql, args)
        if rows and rows[0][0] == RESERVED_OWNER:  # a counting row: (reserved, newest fence)
            return Holder("", rows[0][1], rows[0][2])
        return decode_row(statement, rows[0], args[0]) if rows else None

    def now(self) -> datetime:
        """The database server's clock (the clock that judges expiry)."""
        statement = self._sql.now
        return statement.decode(self._run("now", False, statement.sql, ())[0])

    def guard(self, conn: Any, key: str, fence: int) -> None:
        """In ``conn``'s transaction, lock the live lease of ``key`` with ``fence`` or raise.

        ``conn`` is the caller's SQLAlchemy sync `Connection` (PostgreSQL). See `_guard`.
        """
        if self._closed:
            raise self._closed_error("guard")
        self._renamed("", "guard")  # the statements name the table's schema from now on
        guard(self._sql, self._backend, conn, key, fence)


def owner_key(k: bytes) -> str:
    """The key whose stored form is ``k`` (checked already)."""
    return k.decode("utf-8", "surrogatepass")
