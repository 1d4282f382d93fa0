"""MariaDB cells: lifecycle, read and hot key at 1/16/64 callers, beside PostgreSQL and Redis,
and the library against raw asyncmy calls of the same SQL (bar: library >= 0.9x raw).

    python benchmarks/bench_mariadb.py                      # published run (about 4 minutes)
    python benchmarks/bench_mariadb.py --quick              # smoke mode (tests/integration)

Implementations, each with a pool of as many connections as callers:

- ``library``: ``SqlLeaseProvider.from_url("mariadb://...")`` (asyncmy, coalescing on: calls
  that find a statement in flight go out together, as one transaction of one-row statements);
- ``single``: the same with ``coalesce=False`` (every call its own statement);
- ``raw``: asyncmy's own pool running the catalogue's very statement texts, one per call, with
  the same session settings: what the library costs over its driver;
- ``postgresql``: the library on PostgreSQL (asyncpg); ``redis``: ``SET NX PX`` and Lua scripts
  (the main benchmark's reference).

Cells: ``lifecycle`` (acquire, renew, transfer, release on each caller's own keys), ``read``
(``get_lease_owner`` of held keys), ``hotkey`` (every caller tries to acquire one held key).
Each cell alternates the implementations for ``--rounds`` rounds of ``--duration`` seconds and
reports the median throughput. Scratch databases ``sql_lease_bench_mariadb`` (MariaDB) and
``sql_lease_bench_m`` (PostgreSQL) are recreated and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncmy
import pymysql
import redis.asyncio as aioredis
from sqlalchemy.engine import make_url

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _impls import RedisLuaLeases  # noqa: E402
from _setup import delete_redis_prefix  # noqa: E402
from _workloads import (  # noqa: E402
    TTL_MS,
    Worker,
    contention_acquire,
    hold,
    lifecycle,
    read,
    run_workers,
)

from sql_lease import SqlLeaseProvider, migrate  # noqa: E402
from sql_lease._core.contract import AcquireResult  # noqa: E402
from sql_lease.backends import backend_named  # noqa: E402
from sql_lease.backends.mariadb.placeholders import compiled  # noqa: E402
from sql_lease.backends.mariadb.sessions import session_sql  # noqa: E402

CALLERS = (1, 16, 64)
IMPLS = ("library", "single", "raw", "postgresql", "redis")


class RawAsyncmy:
    """The catalogue's statements on asyncmy's own pool, one statement per call."""

    def __init__(self, pool: Any) -> None:
        sql = backend_named("mariadb").catalogue("leases", None)
        self.pool = pool
        self._acquire = compiled(sql.acquire.sql)
        self._owner = compiled(sql.get_owner.sql)
        self._renew = compiled(sql.renew.sql)
        self._transfer = compiled(sql.transfer.sql)
        self._release = compiled(sql.release.sql)

    @classmethod
    async def open(cls, url: str, size: int) -> RawAsyncmy:
        u = make_url(url)
        pool = await asyncmy.create_pool(
            host=u.host,
            port=u.port or 3306,
            user=u.username,
            password=u.password or "",
            db=u.database,
            autocommit=True,
            init_command=session_sql(10.0),
            minsize=size,
            maxsize=size,
        )
        return cls(pool)

    async def aclose(self) -> None:
        self.pool.close()
        await self.pool.wait_closed()

    async def _rows(self, statement: tuple[str, tuple[int, ...]], *args: object) -> Any:
        text, order = statement
        async with self.pool.acquire() as conn, conn.cursor() as cursor:
            await cursor.execute(text, tuple([args[i] for i in order]))
            return await cursor.fetchall()

    async def acquire_lease(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        row = (await self._rows(self._acquire, key.encode(), owner.encode(), ttl_ms))[0]
        return AcquireResult(bool(row[0]), row[3].decode(), row[1], row[2])

    async def get_lease_owner(self, key: str) -> str | None:
        rows = await self._rows(self._owner, key.encode())
        return rows[0][0].decode() if rows else None

    async def renew_lease(self, key: str, owner: str, ttl_ms: int) -> bool:
        return bool(await self._rows(self._renew, key.encode(), owner.encode(), ttl_ms))

    async def transfer_lease(self, key: str, from_owner: str, to_owner: str, ttl_ms: int) -> bool:
        args = (key.encode(), from_owner.encode(), to_owner.encode(), ttl_ms)
        return bool(await self._rows(self._transfer, *args))

    async def release_lease(self, key: str, owner: str) -> None:
        await self._rows(self._release, key.encode(), owner.encode())


def _admin(url: str, database: str | None = None) -> Any:
    u = make_url(url)
    return pymysql.connect(
        host=u.host,
        port=u.port or 3306,
        user=u.username,
        password=u.password or "",
        database=database,
        autocommit=True,
    )


def recreate_mariadb(server: str, name: str) -> str:
    with _admin(server) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cursor.execute(f"CREATE DATABASE `{name}`")
    url = make_url(server).set(drivername="mariadb", database=name)
    text = url.render_as_string(hide_password=False)
    migrate.upgrade(text)
    return text


def drop_mariadb(server: str, name: str) -> None:
    with _admin(server) as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")


def recreate_pg(server: str, name: str) -> str:
    import psycopg

    u = make_url(server)
    with psycopg.connect(str(u.set(drivername="postgresql")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"'.encode())
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    text = u.set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(text)
    return text


def drop_pg(server: str, name: str) -> None:
    import psycopg

    u = make_url(server)
    with psycopg.connect(str(u.set(drivername="postgresql")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


async def open_impl(
    name: str, urls: dict[str, str], size: int
) -> tuple[Any, Callable[[], Awaitable[None]]]:
    if name == "library":
        p = SqlLeaseProvider.from_url(urls["mariadb"], pool_size=size, max_overflow=0)
        return p, p.aclose
    if name == "single":  # coalescing off: every call its own statement, as raw
        p = SqlLeaseProvider.from_url(
            urls["mariadb"], pool_size=size, max_overflow=0, coalesce=False
        )
        return p, p.aclose
    if name == "raw":
        raw = await RawAsyncmy.open(urls["mariadb"], size)
        return raw, raw.aclose
    if name == "postgresql":
        p = SqlLeaseProvider.from_url(urls["postgresql"], pool_size=size, max_overflow=0)
        return p, p.aclose
    r = RedisLuaLeases.open(urls["redis"], urls["prefix"], size)
    return r, r.aclose


def worker_for(cell: str, ops: Any, run: str) -> Worker:
    if cell == "lifecycle":
        return lifecycle(ops, lambda w: [f"{run}:life:{w}:{i}" for i in range(4)])
    if cell == "read":
        return read(ops, [f"{run}:held:{i}" for i in range(256)])
    return contention_acquire(ops, f"{run}:hot")


async def measure(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    results: dict[str, Any] = {}
    impls = [i for i in IMPLS if i in args.impls]
    for name in impls:  # the held keys of the read and hot-key cells
        ops, close = await open_impl(name, urls, 16)
        try:
            held = [f"{run}:held:{i}" for i in range(256)] + [f"{run}:hot"]
            assert await hold(ops, held) == 0, name
        finally:
            await close()
    for cell in ("lifecycle", "read", "hotkey"):
        for callers in args.callers:
            label = f"{cell}_c{callers}"
            per: dict[str, list[float]] = {name: [] for name in impls}
            cpu: dict[str, list[float]] = {name: [] for name in impls}
            anomalies = 0
            for _ in range(args.rounds):
                for name in impls:
                    # One implementation's pool open at a time (MariaDB's max_connections is
                    # 151 by default); a short warm-up run opens its connections first.
                    ops, close = await open_impl(name, urls, callers)
                    try:
                        await run_workers(callers, 0.05, worker_for(cell, ops, run))
                        m = await run_workers(callers, args.duration, worker_for(cell, ops, run))
                    finally:
                        await close()
                    per[name].append(m.count / m.elapsed_s)
                    cpu[name].append(m.cpu_s / max(1, m.count) * 1e6)
                    anomalies += m.anomalies
            results[label] = {
                "ops_per_s": {n: round(statistics.median(v), 1) for n, v in per.items()},
                # This process's CPU per call (client cost: event loop, driver, library): far
                # less sensitive than throughput to a loaded machine.
                "cpu_us_per_op": {n: round(statistics.median(v), 1) for n, v in cpu.items()},
                "anomalies": anomalies,
            }
            for name in ("library", "single"):
                if name in per and "raw" in per:
                    ratio = statistics.median(per[name]) / statistics.median(per["raw"])
                    results[label][f"{name}_vs_raw"] = round(ratio, 3)
            print(label, json.dumps(results[label]), flush=True)
    return results


def table(results: dict[str, Any]) -> str:
    names = [n for n in IMPLS if any(n in r["ops_per_s"] for r in results.values())]
    lines = [
        "| cell | " + " | ".join(names) + " | library / raw | single / raw |",
        "| --- | " + " | ".join("---:" for _ in names) + " | ---: | ---: |",
    ]
    for label, r in results.items():
        cells = [f"{r['ops_per_s'].get(n, 0):,.0f}" for n in names]
        ratios = [r.get(f"{n}_vs_raw", "-") for n in ("library", "single")]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {ratios[0]} | {ratios[1]} |")
    lines += [
        "",
        "CPU of this process per call, microseconds:",
        "",
        "| cell | " + " | ".join(names) + " |",
        "| --- | " + " | ".join("---:" for _ in names) + " |",
    ]
    for label, r in results.items():
        cells = [f"{r['cpu_us_per_op'].get(n, 0):,.0f}" for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mariadb-url", default="mariadb://root@127.0.0.1:3306/test")
    p.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    p.add_argument("--quick", action="store_true", help="smoke mode: short runs, one round")
    p.add_argument("--duration", type=float, help="seconds per timed run (default 2, quick 0.1)")
    p.add_argument("--rounds", type=int, help="alternating rounds per cell (default 3, quick 1)")
    p.add_argument("--impls", default=",".join(IMPLS), help="comma-separated implementations")
    p.add_argument("--json", type=Path, help="write the results as JSON here")
    args = p.parse_args(argv)
    args.duration = args.duration or (0.1 if args.quick else 2.0)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.callers = (1, 16) if args.quick else CALLERS
    args.impls = tuple(args.impls.split(","))
    suffix = uuid.uuid4().hex[:6]
    maria_db, pg_db = f"sql_lease_bench_mariadb_{suffix}", f"sql_lease_bench_m_{suffix}"
    urls = {
        "mariadb": recreate_mariadb(args.mariadb_url, maria_db),
        "redis": args.redis_url,
        "prefix": f"sql_lease_bench_m:{suffix}:",
    }
    try:
        if "postgresql" in args.impls:
            urls["postgresql"] = recreate_pg(args.pg_url, pg_db)
        results = asyncio.run(measure(args, urls))
    finally:
        drop_mariadb(args.mariadb_url, maria_db)
        if "postgresql" in urls:
            drop_pg(args.pg_url, pg_db)
        if "redis" in args.impls:

            async def clean() -> None:
                client = aioredis.Redis.from_url(args.redis_url)
                await delete_redis_prefix(client, urls["prefix"])
                await client.aclose()

            asyncio.run(clean())
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps({"cells": results, "ttl_ms": TTL_MS}, indent=2) + "\n")
    bad = sum(r["anomalies"] for r in results.values())
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
