"""The timed cells and what every cell shares (context, sizes, the alternating-rounds runner).

Each cell runs every implementation in alternating rounds (A B C A B C ...), opening a fresh
pool per turn so that at most one pool of ``concurrency`` PostgreSQL connections is open at a
time, and so drift on a noisy machine hits every implementation alike. With ``--observer otel``
the lifecycle and read cells also run ``library+otel`` (right after ``library``) in the same
rounds.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from _impls import OBSERVED, SINGLE, Impl, open_impl
from _setup import (
    aof_everysec,
)
from _workloads import (
    Tally,
    Worker,
    contention_acquire,
    contention_read,
    hold,
    lifecycle,
    read,
    run_workers,
)

__all__ = [
    "BLOAT_TABLES",
    "MAIN_TABLE",
    "SCALE_TABLES",
    "CellResult",
    "Context",
    "Phases",
    "Sizes",
    "cell_result",
    "contention_cell",
    "lifecycle_cell",
    "read_cell",
    "relaxed_cell",
    "timed",
]

KEYS_PER_WORKER = 20
READ_KEYS = 256
CONTENDERS = 64
MAIN_TABLE = "leases"
SCALE_TABLES = {"scale_1k": "leases_s1k", "scale_1m": "leases_s1m"}
BLOAT_TABLES = {"raw": "leases_bloat_raw", "library": "leases_bloat_lib"}


@dataclass(frozen=True)
class Sizes:
    batch: int
    scale_small: int
    scale_big: int
    bloat_leases: int
    bloat_renewals: int
    bloat_chunks: int

    @classmethod
    def for_mode(cls, quick: bool) -> Sizes:
        if quick:
            return cls(200, 100, 2_000, 100, 1_000, 2)
        return cls(10_000, 1_000, 1_000_000, 10_000, 1_000_000, 9)


@dataclass
class Context:
    pg_dsn: str
    redis_url: str
    prefix: str
    duration: float
    warmup: float
    rounds: int
    impls: tuple[str, ...]
    sizes: Sizes
    admin: asyncpg.Connection
    redis: aioredis.Redis
    #: ``"otel"``: the lifecycle and read cells also run the library with its OTel observer.
    observer: str = "none"
    #: The lifecycle, read and contention cells also run the library with coalescing off.
    coalescing: bool = True

    def observed_impls(self) -> tuple[str, ...]:
        """The implementations of the cells that measure the observer's and coalescing's
        cost: ``library-single`` (coalescing off) and, with ``--observer otel``,
        ``library+otel`` run right after ``library``."""
        if "library" not in self.impls:
            return self.impls
        extra = (SINGLE,) if self.coalescing else ()
        if self.observer == "otel":
            extra = (OBSERVED, *extra)
        at = self.impls.index("library") + 1
        return (*self.impls[:at], *extra, *self.impls[at:])

    def log(self, message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    async def open(
        self,
        name: str,
        *,
        concurrency: int,
        table: str = MAIN_TABLE,
        relaxed: bool = False,
        space: str = "",
    ) -> Impl:
        return await open_impl(
            name,
            pg_dsn=self.pg_dsn,
            redis_url=self.redis_url,
            redis_prefix=self.prefix + space,
            table=table,
            concurrency=concurrency,
            relaxed=relaxed,
        )


CellResult = dict[str, Any]
Phases = Callable[[Impl], Awaitable[list[Worker]]]


async def timed(
    ctx: Context,
    cell: str,
    concurrency: int,
    phases: Phases,
    *,
    table: str = MAIN_TABLE,
    relaxed: bool = False,
    space: str = "",
    first_round: int = 0,
    impls: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Every implementation (default ``ctx.impls``) in alternating rounds: set up, warm up,
    then time each phase."""
    names = ctx.impls if impls is None else impls
    tallies = {name: Tally() for name in names}
    labels: dict[str, str] = {}
    notes: dict[str, dict[str, Any]] = {}
    for rnd in range(ctx.rounds):
        for name in names:
            impl = await ctx.open(
                name, concurrency=concurrency, table=table, relaxed=relaxed, space=space
            )
            labels[name], notes[name] = impl.label, impl.notes
            try:
                await _prewarm(impl, concurrency)
                for worker in await phases(impl):
                    await run_workers(concurrency, ctx.warmup, worker)
                    m = await run_workers(concurrency, ctx.duration, worker)
                    tallies[name].add(m)
                    rate = m.count / m.elapsed_s
                    ctx.log(f"{cell} round {first_round + rnd + 1} {name}: {rate:,.0f} ops/s")
            finally:
                await impl.close()
    out: dict[str, Any] = {}
    for name, tally in tallies.items():
        tally.extra.update(notes[name])
        out[name] = {"label": labels[name], **tally.summary()}
    return out


async def _prewarm(impl: Impl, concurrency: int) -> None:
    """Open every pooled connection before timing (the library's pool connects lazily)."""
    for _ in range(2):
        await asyncio.gather(*(impl.ops.get_lease_owner("warm") for _ in range(concurrency)))


async def _lifecycle_phases(impl: Impl) -> list[Worker]:
    def keys_for(w: int) -> list[str]:
        return [f"lc:{impl.name}:{w}:{j}" for j in range(KEYS_PER_WORKER)]

    return [lifecycle(impl.ops, keys_for)]


async def _read_phases(impl: Impl) -> list[Worker]:
    keys = [f"rd:{impl.name}:{j}" for j in range(READ_KEYS)]
    await hold(impl.ops, keys)
    return [read(impl.ops, keys)]


async def _contention_phases(impl: Impl) -> list[Worker]:
    hot = f"hot:{impl.name}"
    await hold(impl.ops, [hot], 1)
    return [contention_acquire(impl.ops, hot), contention_read(impl.ops, hot)]


def cell_result(
    description: str, concurrency: int, impls: dict[str, Any], **extra: Any
) -> CellResult:
    return {"description": description, "concurrency": concurrency, "impls": impls, **extra}


async def lifecycle_cell(ctx: Context, concurrency: int) -> dict[str, CellResult]:
    name = f"lifecycle_c{concurrency}"
    impls = await timed(ctx, name, concurrency, _lifecycle_phases, impls=ctx.observed_impls())
    text = "acquire -> renew -> transfer -> release by the new owner, each worker on its own keys"
    return {name: cell_result(text, concurrency, impls)}


async def read_cell(ctx: Context, concurrency: int) -> dict[str, CellResult]:
    name = f"read_c{concurrency}"
    impls = await timed(ctx, name, concurrency, _read_phases, impls=ctx.observed_impls())
    return {name: cell_result("get_lease_owner on held keys", concurrency, impls)}


async def contention_cell(ctx: Context) -> dict[str, CellResult]:
    name = f"contention_c{CONTENDERS}"
    impls = await timed(ctx, name, CONTENDERS, _contention_phases, impls=ctx.observed_impls())
    text = (
        f"{CONTENDERS} workers acquire one key held by another owner (acquire_lease), then the"
        " same crowd reads its owner (get_lease_owner)"
    )
    return {name: cell_result(text, CONTENDERS, impls)}


async def relaxed_cell(ctx: Context, concurrency: int = 16) -> dict[str, CellResult]:
    name = f"relaxed_lifecycle_c{concurrency}"
    async with aof_everysec(ctx.redis) as aof:
        ctx.log(f"{name}: redis persistence during the cell {aof['during']}")
        impls = await timed(ctx, name, concurrency, _lifecycle_phases, relaxed=True)
    text = (
        "lifecycle with synchronous_commit=off for PostgreSQL, Redis with appendonly yes,"
        " appendfsync everysec"
    )
    return {name: cell_result(text, concurrency, impls, redis_aof=aof)}
