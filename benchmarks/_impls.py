"""The three implementations a cell compares, each opened fresh for one timed run.

* ``raw``: the floor. Bare asyncpg connections in a minimal LIFO list (no pool object, no reset,
  no timeout) running exactly the SQL of ``sql_lease.backends.postgres.catalogue`` as statements
  prepared once per connection, with the same acquire strategy as
  `SqlLeaseProvider.acquire_lease` (read first on contended keys; re-run rule). Nothing a
  library could shave off.
* ``library``: `SqlLeaseProvider.from_url`, used as a user would.
* ``library+otel`` (only with ``--observer otel``): the same with
  `sql_lease.otel.OpenTelemetryObserver` on a real OpenTelemetry SDK `MeterProvider` (an
  in-memory reader: every measurement is aggregated as in production, nothing is exported).
* ``library-single`` (lifecycle, read and contention cells): the library with coalescing off
  (``coalesce=False``), every call its own statement: the figure coalescing is compared with.
* ``redis``: a Redis/Lua reference written the way Mastra's RedisStreamsPubSub leases work
  (``SET NX PX`` and compare-and-act Lua scripts), through redis-py asyncio with hiredis.

All three expose the `sql_lease.LeaseProvider` method names, so workloads call them alike and the
library's provider is measured bare, without a wrapper.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from sql_lease import AcquireResult, LeaseProvider, SqlLeaseProvider
from sql_lease._core.contention import ContentionHints
from sql_lease.backends.postgres.catalogue import build_catalogue
from sql_lease.sync._catalogue import Statements, statements_of

__all__ = [
    "IMPLS",
    "OBSERVED",
    "SINGLE",
    "Impl",
    "RawAsyncpgLeases",
    "RedisLuaLeases",
    "batch_renew_sql",
    "library_relaxed_mode",
    "open_impl",
]


def build_statements(table_name: str, schema: str | None = None) -> Statements:
    """The PostgreSQL statements for ``schema.table_name``, as the sync provider sends them."""
    return statements_of(build_catalogue(table_name, schema))


IMPLS = ("raw", "library", "redis")
#: The library with the OpenTelemetry observer on (lifecycle and read cells, ``--observer otel``).
OBSERVED = "library+otel"
#: The library with coalescing off (``coalesce=False``).
SINGLE = "library-single"

RenewMany = Callable[[Sequence[tuple[str, str]], int], Awaitable[list[bool]]]
RenewManySql = tuple[
    Callable[[int], str], Callable[[list[tuple[bytes, bytes]], int], tuple[object, ...]], str
]


@dataclass
class Impl:
    """One opened implementation: the lease operations plus how to close them."""

    name: str
    label: str
    ops: LeaseProvider
    close: Callable[[], Awaitable[None]]
    #: ``renew_leases(items, ttl_ms)`` when the implementation has a batched renewal.
    renew_many: RenewMany | None = None
    #: What ``renew_many`` runs, or why it is missing, for the report.
    renew_many_note: str = ""
    notes: dict[str, Any] = field(default_factory=dict)


# -- raw asyncpg floor -----------------------------------------------------------------------


def batch_renew_sql(table: str) -> str:
    """Fallback batched renewal while the catalogue has none: one UPDATE over unnest."""
    t = build_statements(table).table
    return (
        f"UPDATE {t} AS l SET expires_at = clock_timestamp() + $3::bigint * interval "
        "'1 millisecond' FROM unnest($1::bytea[], $2::bytea[]) AS r(key, owner)"
        " WHERE l.key = r.key AND l.owner = r.owner AND l.expires_at > clock_timestamp()"
        " RETURNING l.key, l.owner"
    )


def _batch_statement(sql: Statements, table: str) -> RenewManySql:
    """The catalogue's batched renewal when it has one (``renew_many``), else the fallback."""
    renew_many = getattr(sql, "renew_many", None)
    make_args = getattr(sql, "renew_many_args", None)
    if callable(renew_many) and callable(make_args):
        return (lambda n: renew_many(n)), make_args, "the catalogue's renew_many"
    fallback = batch_renew_sql(table)

    def args(pairs: list[tuple[bytes, bytes]], ttl: int) -> tuple[object, ...]:
        return [k for k, _ in pairs], [o for _, o in pairs], ttl

    return (lambda n: fallback), args, "benchmark-local UPDATE ... FROM unnest"


class _Connections:
    """The least a connection pool can do: a LIFO list and a queue of waiting callers."""

    def __init__(self, conns: list[asyncpg.Connection]) -> None:
        self.all = list(conns)
        self._idle = list(conns)
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def get(self) -> asyncpg.Connection:
        while not self._idle:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        return self._idle.pop()

    def put(self, conn: asyncpg.Connection) -> None:
        self._idle.append(conn)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


class RawAsyncpgLeases:
    """The library's SQL on bare asyncpg connections: the floor the library is measured against.

    Statements are prepared on each connection when it opens; `fetch` finds them in asyncpg's
    per-connection statement cache.
    """

    def __init__(self, conns: _Connections, table: str) -> None:
        self._conns = conns
        sql = build_statements(table)
        self._batch_sql, self._batch_args, self.batch_source = _batch_statement(sql, table)
        self._acquire = sql.acquire
        self._holder = sql.holder
        self._hints = ContentionHints()
        self._get_owner = sql.get_owner
        self._release = sql.release
        self._renew = sql.renew
        self._transfer = sql.transfer
        self.acquire_reruns = 0

    @classmethod
    async def open(
        cls, dsn: str, table: str, size: int, server_settings: dict[str, str]
    ) -> RawAsyncpgLeases:
        sql = build_statements(table)
        texts = (sql.acquire, sql.holder, sql.get_owner, sql.release, sql.renew, sql.transfer)
        conns = []
        for _ in range(size):
            conn = await asyncpg.connect(dsn, server_settings=server_settings)
            for text in texts:
                await conn.prepare(text)
            conns.append(conn)
        return cls(_Connections(conns), table)

    async def aclose(self) -> None:
        for conn in self._conns.all:
            await conn.close()

    async def _fetch(self, sql: str, *args: object) -> list[Any]:
        conn = await self._conns.get()
        try:
            return await conn.fetch(sql, *args)
        finally:
            self._conns.put(conn)

    async def acquire_lease(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        k = key.encode()
        o = owner.encode()
        hints = self._hints
        conn = await self._conns.get()
        try:
            if hints.contended(k):
                rows = await conn.fetch(self._holder, k)
                if rows and rows[0][0] != o:
                    hints.held(k)
                    holder, fence, expires_at = rows[0]
                    return AcquireResult(False, holder.decode(), fence, expires_at)
            sql = self._acquire
            while True:
                rows = await conn.fetch(sql, k, o, ttl_ms)
                for row in rows:
                    if row[0]:
                        hints.free(k)
                        return AcquireResult(True, owner, row[1], row[2])
                if rows and rows[0][3] != o:
                    hints.held(k)
                    row = rows[0]
                    return AcquireResult(False, row[3].decode(), row[1], row[2])
                self.acquire_reruns += 1
        finally:
            self._conns.put(conn)

    async def get_lease_owner(self, key: str) -> str | None:
        rows = await self._fetch(self._get_owner, key.encode())
        return rows[0][0].decode() if rows else None

    async def release_lease(self, key: str, owner: str) -> None:
        await self._fetch(self._release, key.encode(), owner.encode())

    async def renew_lease(self, key: str, owner: str, ttl_ms: int) -> bool:
        return bool(await self._fetch(self._renew, key.encode(), owner.encode(), ttl_ms))

    async def transfer_lease(self, key: str, from_owner: str, to_owner: str, ttl_ms: int) -> bool:
        rows = await self._fetch(
            self._transfer, key.encode(), from_owner.encode(), to_owner.encode(), ttl_ms
        )
        return bool(rows)

    async def renew_leases(self, items: Sequence[tuple[str, str]], ttl_ms: int) -> list[bool]:
        pairs = [(k.encode(), o.encode()) for k, o in items]
        rows = await self._fetch(self._batch_sql(len(pairs)), *self._batch_args(pairs, ttl_ms))
        renewed = {(row[0], row[1]) for row in rows}
        return [pair in renewed for pair in pairs]


# -- Redis/Lua reference ---------------------------------------------------------------------

_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, ARGV[1]} end
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, cur}
end
return {0, cur}
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""
_TRANSFER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLuaLeases:
    """Leases in Redis, Mastra style: ``SET NX PX`` plus compare-and-act Lua scripts."""

    def __init__(self, client: aioredis.Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._transfer = client.register_script(_TRANSFER)
        self._release = client.register_script(_RELEASE)

    @classmethod
    def open(cls, url: str, prefix: str, size: int) -> RedisLuaLeases:
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=size, timeout=30)
        return cls(aioredis.Redis(connection_pool=pool), prefix)

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.client.connection_pool.disconnect()

    async def acquire_lease(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        won, holder = await self._acquire(keys=[self.prefix + key], args=[owner, ttl_ms])
        return AcquireResult(bool(won), holder.decode(), None, None)

    async def get_lease_owner(self, key: str) -> str | None:
        value: bytes | None = await self.client.get(self.prefix + key)  # type: ignore[assignment]
        return None if value is None else value.decode()

    async def release_lease(self, key: str, owner: str) -> None:
        await self._release(keys=[self.prefix + key], args=[owner])

    async def renew_lease(self, key: str, owner: str, ttl_ms: int) -> bool:
        return bool(await self._renew(keys=[self.prefix + key], args=[owner, ttl_ms]))

    async def transfer_lease(self, key: str, from_owner: str, to_owner: str, ttl_ms: int) -> bool:
        return bool(
            await self._transfer(keys=[self.prefix + key], args=[from_owner, to_owner, ttl_ms])
        )

    async def renew_leases(self, items: Sequence[tuple[str, str]], ttl_ms: int) -> list[bool]:
        """Reference batch: every renew script in one pipeline (one round trip)."""
        pipe: Pipeline = self.client.pipeline(transaction=False)
        for key, owner in items:
            await self._renew(keys=[self.prefix + key], args=[owner, ttl_ms], client=pipe)
        return [bool(r) for r in await pipe.execute()]


# -- opening ---------------------------------------------------------------------------------


def _otel_observer() -> tuple[Any, Any]:
    """An `OpenTelemetryObserver` on a real SDK meter provider, and its in-memory reader."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        from sql_lease.otel import OpenTelemetryObserver
    except ImportError as exc:
        raise SystemExit(
            f"--observer otel needs the OpenTelemetry SDK ({exc}):"
            " pip install -e '.[otel]' opentelemetry-sdk (in this checkout)"
        ) from exc
    reader = InMemoryMetricReader()
    return OpenTelemetryObserver(MeterProvider(metric_readers=[reader])), reader


def _closing_with_count(
    provider: SqlLeaseProvider, reader: Any, notes: dict[str, Any]
) -> Callable[[], Awaitable[None]]:
    """``provider.aclose`` that first notes how many durations the observer recorded."""

    async def close() -> None:
        data = reader.get_metrics_data()
        count = 0
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == "db.client.operation.duration":
                        count += sum(point.count for point in metric.data.data_points)
        # This turn's count (prewarm and warm-up included); the report keeps the last turn's.
        notes["otel_durations_recorded"] = count
        await provider.aclose()

    return close


def library_relaxed_mode() -> str:
    """How the library is put in relaxed durability: its own option once it has one."""
    if "synchronous_commit" in inspect.signature(SqlLeaseProvider.from_url).parameters:
        return "from_url(synchronous_commit=False)"
    return "from_url(connect_args={'server_settings': {'synchronous_commit': 'off'}})"


async def open_impl(
    name: str,
    *,
    pg_dsn: str,
    redis_url: str,
    redis_prefix: str,
    table: str,
    concurrency: int,
    relaxed: bool = False,
) -> Impl:
    """Open implementation ``name`` with a pool of ``concurrency`` connections."""
    if name == "raw":
        # The same session settings `from_url` gives the library's connections.
        settings = {
            "application_name": "sql_lease_bench_raw",
            "statement_timeout": "5000",
            "lock_timeout": "5000",
        }
        if relaxed:
            settings["synchronous_commit"] = "off"
        raw = await RawAsyncpgLeases.open(pg_dsn, table, concurrency, settings)
        label = "asyncpg prepared" + (", synchronous_commit=off" if relaxed else "")
        return Impl(name, label, raw, raw.aclose, raw.renew_leases, raw.batch_source)
    if name in ("library", OBSERVED, SINGLE):
        kwargs: dict[str, Any] = {"table_name": table, "pool_size": concurrency, "max_overflow": 0}
        if name == SINGLE:
            kwargs["coalesce"] = False
        reader = None
        if name == OBSERVED:
            observer, reader = _otel_observer()
            kwargs["observer"] = observer
        mode = "default (durable)"
        if relaxed:
            mode = library_relaxed_mode()
            if mode.startswith("from_url(synchronous_commit"):
                kwargs["synchronous_commit"] = False
            else:
                kwargs["connect_args"] = {"server_settings": {"synchronous_commit": "off"}}
        provider = SqlLeaseProvider.from_url(pg_dsn, **kwargs)
        renew_many: RenewMany | None = getattr(provider, "renew_leases", None)
        notes: dict[str, Any] = {"durability": mode}
        close = provider.aclose
        if reader is not None:
            close = _closing_with_count(provider, reader, notes)
        return Impl(
            name,
            "SqlLeaseProvider"
            + (", relaxed" if relaxed else "")
            + (", coalesce=False" if name == SINGLE else "")
            + (", OpenTelemetryObserver" if reader is not None else ""),
            provider,
            close,
            renew_many,
            "SqlLeaseProvider.renew_leases"
            if renew_many
            else "n/a: SqlLeaseProvider has no renew_leases yet",
            notes,
        )
    if name == "redis":
        red = RedisLuaLeases.open(redis_url, redis_prefix, concurrency)
        note = "reference: the renew script for every item in one pipeline"
        label = "Redis/Lua" + (", appendonly everysec" if relaxed else "")
        return Impl(name, label, red, red.aclose, red.renew_leases, note)
    raise ValueError(f"unknown implementation {name!r}")
