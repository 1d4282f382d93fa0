"""Counting leases: what an acquire with ``limit=N`` costs beside a plain one.

    python benchmarks/bench_counting.py            # ~1 min
    python benchmarks/bench_counting.py --quick    # smoke run, a few seconds

Each worker loops over its own keys: acquire then release, with ``limit=1`` (the plain
statements, today's hot path) and with ``limit=3`` (the counting statements: one locked
``INSERT ... ON CONFLICT DO UPDATE`` rewriting the key's JSON grants, and its release), in
alternating rounds on one provider per turn; and a contended cell: ``concurrency`` workers on
one ``limit=3`` key (each acquire is a grant, a renewal or a refusal under the row lock). The
scratch database (``--db-name``) is created, migrated, and dropped at the end. Numbers move
between runs on a shared machine: read the ratios, which come from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

import asyncpg

from sql_lease import SqlLeaseProvider, migrate

TTL = 30_000


async def _run(
    concurrency: int, seconds: float, op: Callable[[int, int], Awaitable[None]]
) -> tuple[float, float]:
    """ops/s and p50 (µs) of ``op(worker, i)`` run by ``concurrency`` workers."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        i = 0
        while time.perf_counter() < stop:
            t = time.perf_counter()
            await op(w, i)
            latencies.append(time.perf_counter() - t)
            i += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, statistics.median(latencies) * 1e6


async def _cell(
    url: str, concurrency: int, limit: int, seconds: float, tag: str
) -> tuple[float, float]:
    async with SqlLeaseProvider.from_url(url, pool_size=concurrency) as provider:

        async def op(w: int, i: int) -> None:
            key = f"{tag}:{w}:{i % 20}"
            result = await provider.acquire_lease(key, f"o{w}", TTL, limit=limit)
            assert result.acquired, result
            await provider.release_lease(key, f"o{w}")

        await _run(concurrency, seconds / 4, op)  # warm-up
        return await _run(concurrency, seconds, op)


async def _contended(url: str, concurrency: int, seconds: float) -> tuple[float, float]:
    async with SqlLeaseProvider.from_url(url, pool_size=concurrency) as provider:

        async def op(w: int, i: int) -> None:
            await provider.acquire_lease("hot", f"o{w}", TTL, limit=3)

        return await _run(concurrency, seconds, op)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--db-name", default="sql_lease_bench_counting")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=2.0)
    args = parser.parse_args()
    seconds, rounds = (0.3, 1) if args.quick else (args.duration, args.rounds)
    admin = await asyncpg.connect(args.pg_url)
    await admin.execute(f'DROP DATABASE IF EXISTS "{args.db_name}"')
    await admin.execute(f'CREATE DATABASE "{args.db_name}"')
    url = args.pg_url.rsplit("/", 1)[0] + "/" + args.db_name
    try:
        await asyncio.to_thread(migrate.upgrade, url)
        print(
            f"{'cell':<18} {'plain ops/s':>12} {'limit=3 ops/s':>14} {'ratio':>6}"
            f" {'plain p50 µs':>13} {'limit=3 p50 µs':>15}"
        )
        for concurrency in (1, 16):
            plain: list[tuple[float, float]] = []
            counted: list[tuple[float, float]] = []
            for r in range(rounds):
                plain.append(await _cell(url, concurrency, 1, seconds, f"p{r}"))
                counted.append(await _cell(url, concurrency, 3, seconds, f"c{r}"))
            p = statistics.median(x[0] for x in plain)
            c = statistics.median(x[0] for x in counted)
            print(
                f"{'acquire+release c' + str(concurrency):<18} {p:>12.0f} {c:>14.0f} {c / p:>6.2f}"
                f" {statistics.median(x[1] for x in plain):>13.0f}"
                f" {statistics.median(x[1] for x in counted):>15.0f}"
            )
        ops, p50 = await _contended(url, 16, seconds)
        print(f"one limit=3 key, 16 workers acquiring: {ops:.0f} ops/s, p50 {p50:.0f} µs")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{args.db_name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
