"""`SqlLeaseProvider`: leases in a database table (PostgreSQL or SQLite), one autocommit statement
per operation; what differs between the databases is behind `sql_lease.backends`."""

from __future__ import annotations

import asyncio
import logging
from time import monotonic
from typing import Any, Self

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import NullPool

from .._core.calls import key_owner, transfer_args
from .._core.contention import ContentionHints
from .._core.contract import AcquireResult, Lease
from .._core.counting import RESERVED_OWNER, Metadata
from .._core.deadlines import Deadlines
from .._core.provider_args import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    ProviderSettings,
    check_seconds,
    check_url_options,
    log_wake_ups,
)
from .._core.validate import Millis, check_identifier, check_name, check_ttl
from .._holding.lifecycle import LeaseLifecycle
from ..backends import Plan, PlanOptions, backend_for, backend_for_url
from ..backends._urls import build_engine, normalize_url, redact
from ..capabilities import WakeupSink, WakeupSource
from ..catalogue import decode_row
from ..errors import LeaseForeignRowError, LeaseTypeError, LeaseValueError
from ..observer import LeaseObserver, check_observer, observed_acquire
from ..schema import DEFAULT_TABLE
from .batch_senders import Coalesce, check_coalesce
from .connections import Connections
from .counting import check_count_args
from .execute import CANCEL_GRACE
from .extensions import SqlExtensions

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_TIMEOUT", "SqlLeaseProvider"]

logger = logging.getLogger("sql_lease")


class SqlLeaseProvider(SqlExtensions, LeaseLifecycle, ProviderSettings):
    """Leases stored in PostgreSQL (asyncpg) or SQLite (aiosqlite) through a SQLAlchemy
    `AsyncEngine`; the backend (`sql_lease.backends`) is picked from the engine's dialect.

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
        coalesce: Coalesce = True,
    ) -> None:
        check_identifier("table_name", table_name)
        if schema is not None:
            check_identifier("schema", schema)
        checked = (check_seconds("timeout", timeout), check_observer(observer))
        mode = check_coalesce(coalesce)
        if not isinstance(engine, AsyncEngine):
            raise LeaseTypeError(f"engine must be an AsyncEngine, not {type(engine).__name__}")
        self._construct(engine, table_name, schema, (*checked, mode), None, None)

    def _construct(
        self,
        engine: AsyncEngine,
        table_name: str,
        schema: str | None,
        checked: tuple[float, LeaseObserver | None, Coalesce],
        plan: Plan | None,
        listen_engine: AsyncEngine | None,
    ) -> None:
        """The one construction path, on a caller's engine (``plan`` None) or on the engine
        ``from_url`` built as its backend's ``plan`` says (then the provider owns it);
        ``checked``: the timeout, observer and coalescing mode, already checked."""
        self._timeout, self._observer, mode = checked
        if self._observer is not None:  # acquire outcomes: on this instance only, if observed
            observed = observed_acquire(self._observer, self.acquire_lease)
            self.acquire_lease = observed  # type: ignore[method-assign]
        self._backend = backend = backend_for(engine)
        if schema is not None and not backend.has_schemas:
            raise LeaseValueError(f"{backend.title} has no schemas: leave schema=None")
        self._engine = engine
        # Nobody else uses an engine from_url built: keep idle connections too (`connections`).
        self._owns_engine = plan is not None
        self._pooler = None if plan is None else plan.pooler
        self._listens = True if plan is None else plan.listens
        self._listen_engine = listen_engine
        self._table_name = table_name
        self._schema = schema
        self._sql = backend.catalogue(table_name, schema)
        #: Without a schema, the table's is found before the first statement (`_schema_home`).
        self._renames = {} if schema is None and backend.has_schemas else None
        if plan is None:
            self._init_coalescing(mode)
        else:
            self._init_coalescing(mode, plan.read_batches, plan.write_batches)
        self._where = redact(engine.url)
        self._connections = Connections(
            engine.sync_engine.pool,
            shared=plan is None,
            adapt=backend.adaptor(self._timeout, True) if plan is None else plan.adaptor,
            catalogue=self._catalogue_now,
        )
        self._cleanup_tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._watch_forks()
        self._closing: asyncio.Task[None] | None = None
        self._deadlines = Deadlines()
        self._hints = ContentionHints()
        #: How often acquire ran its statement again because a concurrent writer committed
        #: between its snapshot and its write (diagnostics; see the PostgreSQL catalogue).
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
        pooler: str | None = None,
        listen_url: str | URL | None = None,
        coalesce: Coalesce = True,
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

        ``pooler="transaction"`` or ``"session"``: ``url`` reaches PostgreSQL through a
        connection pooler (PgBouncer and the like). Then only unnamed statements are used and no
        startup parameter but ``application_name`` is sent, so the server-side timeouts are the
        role's (``ALTER ROLE ... SET statement_timeout``; a WARNING on ``sql_lease`` at the first
        connection says when they are off) and the client-side deadline bounds every call;
        ``synchronous_commit=False`` is refused (it is a startup parameter).
        ``listen_url``: the URL of `wait_for_lease`'s LISTEN connection (direct to the server or
        through a session pooler); without it, waiters behind ``pooler="transaction"`` poll.
        """
        checked = check_url_options(
            table_name, schema, timeout, connect_timeout, synchronous_commit, pooler, observer
        )
        mode = check_coalesce(coalesce)
        parsed = normalize_url(url)
        listen_parsed = None if listen_url is None else normalize_url(listen_url)
        given_args = dict(engine_kwargs.pop("connect_args", {}))
        backend = backend_for_url(parsed)
        if listen_parsed is not None and backend_for_url(listen_parsed) is not backend:
            raise LeaseValueError("listen_url must be a URL of the same database kind as url")
        options = PlanOptions(
            checked.timeout,
            checked.connect_timeout,
            checked.synchronous_commit,
            checked.pooler,
            given_args,
            engine_kwargs,
            listen_parsed,
        )
        plan = backend.plan(parsed, options)
        listen_engine = None
        if plan.listen_url is not None:
            # The listener detaches its one connection from the pool: no pool to keep.
            listen_engine = build_engine(
                plan.listen_url, connect_args=plan.listen_connect_args, poolclass=NullPool
            )
        engine = build_engine(plan.engine_url, connect_args=plan.connect_args, **plan.engine_kwargs)
        plan.watch(engine)
        provider = cls.__new__(cls)
        provider._construct(
            engine,
            table_name,
            schema,
            (checked.timeout, checked.observer, mode),
            plan,
            listen_engine,
        )
        return provider

    @property
    def engine(self) -> AsyncEngine:
        """The engine this provider runs on."""
        return self._engine

    async def aclose(self) -> None:
        """Close the provider; idempotent. Every later call raises `LeaseClosedError`.

        Leases held through `hold` count as lost (their bodies are cancelled) and are left to
        expire. Calls in flight finish first (each within its timeout); then every connection
        goes back to the pool, and the engine is disposed of if this provider created it
        (`from_url`); an engine the caller gave is left open.
        """
        if self.forked:
            return  # the connections are the parent's: nothing to release in this process
        if self._closing is None:
            loops = self._deadlines.count_loop()
            if loops != self._loops_seen:  # the connections are an earlier loop's
                self._new_loop(loops)
            self._closed = True
            self._closing = asyncio.get_running_loop().create_task(self._shut_down())
        # Shielded: a cancelled (or self-cancelling, from inside a hold) caller does not stop
        # the shutdown half-way; a second aclose waits for the same one.
        await asyncio.shield(self._closing)

    async def _shut_down(self) -> None:
        await self._close_lifecycle()
        await self._connections.shutdown(self._timeout + CANCEL_GRACE)
        if self._cleanup_tasks:
            await asyncio.wait(list(self._cleanup_tasks), timeout=CANCEL_GRACE)
        if self._owns_engine:
            await self._engine.dispose()
        if self._listen_engine is not None:
            await self._listen_engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (
            f"SqlLeaseProvider(url={self._where!r}, table={self._sql.table!r}, "
            f"timeout={self._timeout})"
        )

    # -- the contract (each method awaits `_run` itself: one coroutine frame less) -------

    async def acquire_lease(
        self, key: str, owner: str, ttl_ms: Millis, *, limit: int = 1, metadata: Metadata = None
    ) -> AcquireResult:
        """Claim ``key`` for ``owner`` for ``ttl_ms`` if free, expired or already ``owner``'s
        (then only the expiry moves; the fence stays); else report the live holder.
        ``limit=N``, ``metadata``: see `SqlCounting` (a counting lease, a lease with data)."""
        k = check_name("key", key)
        o = check_name("owner", owner)
        ttl = check_ttl(ttl_ms)
        if type(limit) is not int or limit != 1 or metadata is not None:
            return await self._count_acquire(key, k, o, ttl, check_count_args(limit, metadata))
        return await self._acquire_checked(k, o, owner, ttl)

    async def _acquire_checked(self, k: bytes, o: bytes, owner: str, ttl: int) -> AcquireResult:
        """`acquire_lease` with its arguments checked (``k``, ``o``: stored forms); a hold's
        checked values come here directly (`sql_lease._core.policy.CheckedCalls`). A plain
        acquire that meets a counting row (its owner reserved) is judged as a counting one."""
        sql = self._sql
        hints = self._hints
        started = monotonic()
        seconds = None  # the first statement gets the whole timeout, a second what is left
        if hints.contended(k):
            # Look before writing (see `_contention`): a live other holder is the answer.
            reads = self._holder_reads
            if reads.enter():  # the fast path of `_one`, inlined
                try:
                    rows = await self._run("acquire_lease", False, sql.holder.sql, (k,))
                finally:
                    reads.leave()
            else:
                rows = await self._queued(reads, "acquire_lease", False, (k,))
            if rows and rows[0][0] == RESERVED_OWNER:  # a counting row
                return await self._count_acquire(_key_of(k), k, o, ttl, (1, None, None))
            held = hints.seen_held(rows, k, o)
            if held is not None:
                self.acquire_reads += 1
                return held
            seconds = self._left(started)
        decode = sql.acquire.decode
        acquires = self._acquires
        while True:
            if acquires.enter():  # the fast path of `_one`, inlined on the hot methods
                try:
                    rows = await self._run(
                        "acquire_lease", True, sql.acquire.sql, (k, o, ttl), seconds
                    )
                finally:
                    acquires.leave()
            else:
                rows = await self._queued(acquires, "acquire_lease", True, (k, o, ttl), seconds)
            if rows and rows[0][3] == RESERVED_OWNER and not any(r[0] for r in rows):
                return await self._count_acquire(_key_of(k), k, o, ttl, (1, None, None))
            answer = hints.answer(rows, k, o, owner, decode)
            if answer is not None:
                return answer
            # A concurrent writer committed after this statement's snapshot: neither won nor
            # saw the winner. Run again; the next snapshot sees it.
            self.acquire_reruns += 1
            seconds = self._left(started)

    async def get_lease_owner(self, key: str) -> str | None:
        """The owner of the live lease of ``key``, or None if it is absent or expired."""
        k = check_name("key", key)
        statement = self._sql.get_owner
        reads = self._owner_reads
        if reads.enter():
            try:
                rows = await self._run("get_lease_owner", False, statement.sql, (k,))
            finally:
                reads.leave()
        else:
            rows = await self._queued(reads, "get_lease_owner", False, (k,))
        try:
            return decode_row(statement, rows[0], k) if rows else None
        except LeaseForeignRowError as exc:
            lease = await self._count_lease(key, rows[0][0], exc)  # a counting row: oldest holder
        return None if lease is None else lease.owner

    async def get_lease(self, key: str) -> Lease | None:
        """The live lease of ``key`` (owner, fence, times, metadata; counting: the oldest)."""
        k = check_name("key", key)
        statement = self._sql.get_lease
        rows = await self._one(self._lease_reads, "get_lease", False, statement.sql, (k,))
        if not rows:
            return None
        try:
            owner, fence, expires_at, acquired_at = decode_row(statement, rows[0], k)
        except LeaseForeignRowError as exc:
            return await self._count_lease(key, rows[0][0], exc)  # a counting row: oldest holder
        return Lease(key, owner, fence, expires_at, acquired_at)

    async def release_lease(self, key: str, owner: str) -> None:
        """End the lease of ``key`` if ``owner`` holds it (live or expired); else do nothing."""
        args = key_owner(key, owner)
        releases = self._releases
        if releases.enter():
            try:
                rows = await self._run("release_lease", True, self._sql.release.sql, args)
            finally:
                releases.leave()
        else:
            rows = await self._queued(releases, "release_lease", True, args)
        if not rows:  # the owner's grant of a counting row?
            await self._count_release(*args)

    async def renew_lease(self, key: str, owner: str, ttl_ms: Millis) -> bool:
        """Set the expiry of ``owner``'s live lease of ``key`` to now + ``ttl_ms``; False (and
        nothing changed) when it is expired, absent or someone else's."""
        args = (*key_owner(key, owner), check_ttl(ttl_ms))
        renews = self._renews
        if renews.enter():
            try:
                rows = await self._run("renew_lease", True, self._sql.renew.sql, args)
            finally:
                renews.leave()
        else:
            rows = await self._queued(renews, "renew_lease", True, args)
        # None, or the owner's grant of a counting row?
        return bool(rows) or await self._count_renew(*args) is not None

    async def transfer_lease(
        self, key: str, from_owner: str, to_owner: str, ttl_ms: Millis, *, metadata: Metadata = None
    ) -> bool:
        """Hand ``from_owner``'s live lease of ``key`` to ``to_owner`` for ``ttl_ms`` with a
        new fence, in one statement (the key is never free); False when not held by
        ``from_owner``. ``metadata``: see `SqlCounting`."""
        args = transfer_args(key, from_owner, to_owner, ttl_ms)
        if metadata is not None:
            data, is_str = check_count_args(1, metadata)[1:]
            return await self._count_transfer(args, data, is_str) is not None
        transfers = self._transfers
        if transfers.enter():
            try:
                rows = await self._run("transfer_lease", True, self._sql.transfer.sql, args)
            finally:
                transfers.leave()
        else:
            rows = await self._queued(transfers, "transfer_lease", True, args)
        # None, or the owner's grant of a counting row?
        return bool(rows) or await self._count_transfer(args, None, None) is not None

    def wakeup_source(self, sink: WakeupSink) -> WakeupSource | None:
        """The backend's notification channel feeding ``sink`` (a LISTEN connection on
        PostgreSQL, on ``listen_url`` when given); None on SQLite and behind a transaction
        pooler without ``listen_url`` (waiters poll: LISTEN needs a session)."""
        listen = self._listen_engine
        log_wake_ups(None if listen is None else redact(listen.url), not self._listens)
        if listen is not None:
            pool = listen.sync_engine.pool
        elif not self._listens:
            return None
        else:
            pool = self._engine.sync_engine.pool
        return self._backend.wakeup_source(pool, self._sql.channel, self._timeout, sink)


def _key_of(k: bytes) -> str:
    """The key whose stored form is ``k`` (checked already: UTF-8 with surrogates passed)."""
    return k.decode("utf-8", "surrogatepass")
