"""`sql_lease.sync.SqlLeaseProvider`: the SQL provider for threads, blocking and thread-safe.

The same statements (`_catalogue`), results, semantics and errors as the async provider; the
backend's sync executor (`sql_lease.backends.SyncExecutor`) runs them through psycopg 3 or
`sqlite3`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from time import monotonic
from typing import Any, Self

from sqlalchemy.engine import URL, Engine

from .._core.contention import ContentionHints
from .._core.contract import AcquireResult, Lease
from .._core.provider_args import check_bool, check_pooler, check_seconds, check_table
from .._core.validate import (
    Millis,
    check_items,
    check_limit,
    check_millis,
    check_name,
    check_prefix,
    check_ttl,
)
from .._sqlprovider.forks import ForkAware
from ..backends import Backend, SyncExecutor
from ..backends._urls import redact
from ..capabilities import Holder, Released, Renewal
from ..catalogue import decode_list_live, label, name_of
from ..schema import DEFAULT_TABLE
from ._catalogue import Statements, statements_of
from ._connect import engine_target, parse
from ._guard import guard
from ._home import SyncHome
from ._lifecycle import SyncLifecycle
from ._wait import POLL_S

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_TIMEOUT", "SqlLeaseProvider"]

DEFAULT_TIMEOUT = 5.0
DEFAULT_CONNECT_TIMEOUT = 5.0

logger = logging.getLogger("sql_lease")
_wait_logger = logging.getLogger("sql_lease.wait")


#: What runs a statement: the backend's sync executor.
Executor = SyncExecutor


class SqlLeaseProvider(SyncLifecycle, SyncHome, ForkAware):
    """Leases in PostgreSQL (psycopg 3) or SQLite (`sqlite3`), for threads; blocking calls.

    Takes a caller's SQLAlchemy `Engine` (``postgresql+psycopg`` or ``sqlite``), which it never
    disposes of, or a URL through `from_url` (then it owns a connection pool and closes it in
    `close`). ``timeout`` (seconds) bounds each call end to end. Thread-safe: share one
    provider per process. After `close`, every call raises `LeaseClosedError`.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        table_name: str = DEFAULT_TABLE,
        schema: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        check_table(table_name, schema)
        seconds = check_seconds("timeout", timeout)
        backend = engine_target(engine)
        check_table(table_name, schema, backend)
        sql = statements_of(backend.catalogue(table_name, schema))
        executor = backend.sync_engine_executor(
            engine, sql.table, where=redact(engine.url), timeout=seconds
        )
        self._setup(executor, sql, table_name, schema, seconds, engine, backend)

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
        a server crash for faster writes (see the README's "Durability").

        ``pooler="transaction"`` or ``"session"``: ``url`` reaches PostgreSQL through a
        connection pooler (PgBouncer...): no startup parameter but ``application_name`` is sent,
        each call is one simple query that sets the server-side timeouts for itself and calls
        the table's server function, ``synchronous_commit=False`` is refused (startup).
        ``listen_url``: the URL of `wait_for_lease`'s LISTEN connection (direct to the server
        or through a session pooler); without it, waiters behind ``pooler="transaction"`` poll.
        """
        check_pooler(pooler, synchronous_commit)
        check_bool("synchronous_commit", synchronous_commit)
        seconds = check_seconds("timeout", timeout)
        connect_seconds = check_seconds("connect_timeout", connect_timeout)
        check_limit(pool_size, what="pool_size", most=1_000)
        check_table(table_name, schema)
        target = parse(url)
        listen = None if listen_url is None else parse(listen_url)
        check_table(table_name, schema, target.backend)
        sql = statements_of(target.backend.catalogue(table_name, schema))
        provider = cls.__new__(cls)
        executor = target.executor(
            sql.table,
            timeout=seconds,
            connect_timeout=connect_seconds,
            synchronous_commit=synchronous_commit,
            pool_size=pool_size,
            pooler=pooler,
            listen=listen,
            catalogue=provider._catalogue_now,
        )
        if listen is not None:
            _wait_logger.info("waiters listen for notifications on %s", listen.where)
        elif pooler == "transaction":
            _wait_logger.info(
                "behind a transaction pooler without listen_url: waiters poll every %s s", POLL_S
            )
        provider._setup(executor, sql, table_name, schema, seconds, None, target.backend)
        return provider

    def _setup(
        self,
        executor: Executor,
        sql: Statements,
        table_name: str,
        schema: str | None,
        timeout: float,
        engine: Engine | None,
        backend: Backend,
    ) -> None:
        self._exec = executor
        self._sql = sql
        self._init_home(backend, schema)
        self._table_name = table_name
        self._schema = schema
        self._timeout = timeout
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
    def statements(self) -> Statements:
        """The statement catalogue this provider runs (shared with the async provider)."""
        return self._sql

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
        self,
        operation: str,
        write: bool,
        sql: str,
        args: tuple[object, ...],
        seconds: float | None = None,
    ) -> list[tuple[Any, ...]]:
        if self._closed:
            raise self._closed_error(operation)
        if self._renames is not None:
            sql = self._renamed(sql, operation)
        return self._exec.run(
            operation, write, sql, args, self._timeout if seconds is None else seconds
        )

    # -- the contract --------------------------------------------------------------------

    def acquire_lease(self, key: str, owner: str, ttl_ms: Millis) -> AcquireResult:
        k = check_name("key", key)
        o = check_name("owner", owner)
        ttl = check_ttl(ttl_ms)
        sql = self._sql
        hints = self._hints
        started = monotonic()
        seconds = None
        if hints.contended(k):
            rows = self._run("acquire_lease", False, sql.holder, (k,))
            if rows and rows[0][0] != o:
                hints.held(k)
                self.acquire_reads += 1
                holder, fence, expires_at = rows[0]
                return AcquireResult(False, name_of(bytes(holder), "owner", k), fence, expires_at)
            seconds = self._left(started)
        while True:
            rows = self._run("acquire_lease", True, sql.acquire, (k, o, ttl), seconds)
            for row in rows:
                if row[0]:
                    hints.free(k)
                    return AcquireResult(True, owner, row[1], row[2])
            if rows and rows[0][3] != o:
                hints.held(k)
                row = rows[0]
                return AcquireResult(False, name_of(bytes(row[3]), "owner", k), row[1], row[2])
            # A concurrent writer committed after this statement's snapshot: run it again.
            self.acquire_reruns += 1
            seconds = self._left(started)

    def _left(self, started: float) -> float:
        return self._timeout - (monotonic() - started)

    def get_lease_owner(self, key: str) -> str | None:
        k = check_name("key", key)
        rows = self._run("get_lease_owner", False, self._sql.get_owner, (k,))
        return name_of(bytes(rows[0][0]), "owner", k) if rows else None

    def get_lease(self, key: str) -> Lease | None:
        """The live lease of ``key`` (owner, fence, times), or None."""
        k = check_name("key", key)
        rows = self._run("get_lease", False, self._sql.get_lease, (k,))
        if not rows:
            return None
        owner, fence, expires_at, acquired_at = rows[0]
        return Lease(key, name_of(bytes(owner), "owner", k), fence, expires_at, acquired_at)

    def release_lease(self, key: str, owner: str) -> None:
        self.release(key, owner)

    def renew_lease(self, key: str, owner: str, ttl_ms: Millis) -> bool:
        return self.renew(key, owner, ttl_ms) is not None

    def transfer_lease(self, key: str, from_owner: str, to_owner: str, ttl_ms: Millis) -> bool:
        return self.transfer(key, from_owner, to_owner, ttl_ms) is not None

    # -- forms that return what the statement reports (database time) --------------------

    def release(self, key: str, owner: str) -> Released | None:
        """Release; the `Released` fence and database time it took effect, or None when it
        was a no-op (as the async provider's ``release``)."""
        args = (check_name("key", key), check_name("owner", owner))
        rows = self._run("release_lease", True, self._sql.release, args)
        return Released(rows[0][0], rows[0][1]) if rows else None

    def renew(self, key: str, owner: str, ttl_ms: Millis) -> Renewal | None:
        """Renew; the `Renewal` (fence, new expiry), or None when the lease was not held."""
        args = (check_name("key", key), check_name("owner", owner), check_ttl(ttl_ms))
        rows = self._run("renew_lease", True, self._sql.renew, args)
        return Renewal(rows[0][0], rows[0][1]) if rows else None

    def transfer(self, key: str, from_owner: str, to_owner: str, ttl_ms: Millis) -> Renewal | None:
        """Transfer; the new owner's `Renewal` (fence, expiry), or None when it was not held."""
        args = (
            check_name("key", key),
            check_name("from_owner", from_owner),
            check_name("to_owner", to_owner),
            check_ttl(ttl_ms),
        )
        rows = self._run("transfer_lease", True, self._sql.transfer, args)
        return Renewal(rows[0][0], rows[0][1]) if rows else None

    # -- extensions ----------------------------------------------------------------------

    def renew_leases(self, items: Iterable[tuple[str, str]], ttl_ms: Millis) -> list[bool]:
        """Renew many ``(key, owner)`` leases in one statement; one bool per item, in order."""
        return [r is not None for r in self.renew_many(items, ttl_ms)]

    def renew_many(self, items: Iterable[tuple[str, str]], ttl_ms: Millis) -> list[Renewal | None]:
        """`renew_leases` returning the `Renewal` (fence, new expiry) per renewed item, None
        per lost one."""
        pairs = check_items(items)
        ttl = check_ttl(ttl_ms)
        if not pairs:
            return []
        unique = list(dict.fromkeys(pairs))
        renewed: dict[tuple[bytes, bytes], Renewal] = {}
        step = self._sql.max_batch
        for start in range(0, len(unique), step):
            chunk = unique[start : start + step]
            sql = self._sql.renew_many(len(chunk))
            args = self._sql.renew_many_args(chunk, ttl)
            for key, owner, fence, expires in self._run("renew_leases", True, sql, args):
                renewed[(bytes(key), bytes(owner))] = Renewal(fence, expires)
        return [renewed.get(pair) for pair in pairs]

    def force_release(self, key: str) -> bool:
        """Break-glass: end the live lease of ``key`` whoever holds it; logged at WARNING."""
        k = check_name("key", key)
        rows = self._run("force_release", True, self._sql.force_release, (k,))
        if not rows:
            return False
        owner, fence = label(bytes(rows[0][0])), rows[0][1]  # released: never raise now
        logger.warning("force-released lease %r held by %r (fence %d)", key, owner, fence)
        return True

    def list_leases(
        self, prefix: str | None = None, *, limit: int = 100, after: str | None = None
    ) -> list[Lease]:
        """Live leases in key order, optionally by key prefix; page with ``after``."""
        low, high = check_prefix(prefix)
        count = check_limit(limit)
        if after is not None:
            low = max(low, check_name("after", after) + b"\0")
        rows = self._run("list_leases", False, self._sql.list_live, (low, high, count))
        return [decode_list_live(row) for row in rows]

    def purge_expired(
        self,
        *,
        min_age_ms: Millis = 60_000,
        batch_size: int = 1_000,
        max_batches: int | None = None,
    ) -> int:
        """Delete rows expired for at least ``min_age_ms``, in short batches; how many."""
        age = check_millis("min_age_ms", min_age_ms)
        batch = check_limit(batch_size, what="batch_size", most=100_000)
        batches = None if max_batches is None else check_limit(max_batches, "max_batches", 10**9)
        total = done = 0
        while batches is None or done < batches:
            deleted = len(self._run("purge_expired", True, self._sql.purge_batch, (age, batch)))
            total += deleted
            done += 1
            if deleted < batch:
                break
        return total

    def mark_wanted(self, key: str, wait_ms: Millis) -> Holder | None:
        """Mark ``key`` wanted for ``wait_ms`` (its release then notifies); its live `Holder`,
        or None if free (as the async provider's ``mark_wanted``)."""
        k = check_name("key", key)
        wait = check_ttl(wait_ms, "wait_ms")
        rows = self._run("want", True, self._sql.want, (k, wait))
        if not rows:
            return None
        return Holder(name_of(bytes(rows[0][0]), "owner", k), rows[0][1], rows[0][2])

    def now(self) -> datetime:
        """The database server's clock (the clock that judges expiry)."""
        rows = self._run("now", False, self._sql.now, ())
        value: datetime = rows[0][0]
        return value

    def guard(self, conn: Any, key: str, fence: int) -> None:
        """In ``conn``'s transaction, lock the live lease of ``key`` with ``fence`` or raise.

        ``conn`` is the caller's SQLAlchemy sync `Connection` (PostgreSQL). See `_guard`.
        """
        if self._closed:
            raise self._closed_error("guard")
        self._renamed("", "guard")  # the statements name the table's schema from now on
        guard(self._sql.catalogue, self._backend, conn, key, fence)
