"""Throughput of the lease lifecycle through PgBouncer transaction pooling vs direct.

    python benchmarks/bench_pooler.py                    # 4 alternating rounds of 3 s each
    python benchmarks/bench_pooler.py --rounds 6 --duration 5 --clients 32 --json out.json

Each client loops acquire -> renew -> release on its own key (no contention: this measures the
pooler's cost). Variants, alternated round by round so machine noise hits them alike:

- ``direct``: `SqlLeaseProvider.from_url` with its defaults (asyncpg's statement cache on);
- ``direct-nocache``: the same with ``statement_cache_size=0`` (what a pooler needs);
- ``pgbouncer-tx``: through a PgBouncer (started here, transaction mode, pool of
  ``--pool-size`` server connections) with the cache off and the pooler told to ignore the
  ``statement_timeout``/``lock_timeout`` startup parameters: the only settings that make today's
  `from_url` work behind it (and then the server-side timeouts are off; see tests/infra).

Prints a table (median ops/s per variant, ratio to ``direct``) and, with ``--json``, writes it.
Needs the ``pgbouncer`` binary and the local server (``--pg-url``; trust auth for the pooler).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sql_lease import SqlLeaseProvider, migrate
from tests.infra.pgbouncer import PgBouncer


async def lifecycle(
    url: str, connect_args: dict[str, object], clients: int, duration: float
) -> float:
    provider = SqlLeaseProvider.from_url(
        url, timeout=10, connect_args=connect_args, pool_size=clients, max_overflow=0
    )
    done = 0
    stop = time.monotonic() + duration

    async def client(n: int) -> None:
        nonlocal done
        key, owner = f"bench-{n}", f"owner-{n}"
        while time.monotonic() < stop:
            await provider.acquire_lease(key, owner, 10_000)
            await provider.renew_lease(key, owner, 10_000)
            await provider.release_lease(key, owner)
            done += 3

    try:
        await asyncio.gather(*(client(n) for n in range(clients)))  # warm-up connections too
        done = 0
        stop = time.monotonic() + duration
        started = time.monotonic()
        await asyncio.gather(*(client(n) for n in range(clients)))
        return done / (time.monotonic() - started)
    finally:
        await provider.aclose()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--pool-size", type=int, default=10)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    server = make_url(args.pg_url)
    db = f"sql_lease_bench_pooler_{uuid.uuid4().hex[:8]}"
    admin = {
        "host": server.host,
        "port": server.port,
        "user": server.username,
        "dbname": server.database,
    }
    with psycopg.connect(**admin, autocommit=True) as conn:  # type: ignore[arg-type]
        conn.execute(f'CREATE DATABASE "{db}"')
    direct = server.set(database=db).render_as_string(hide_password=False)
    bouncer = PgBouncer(
        server_host=server.host or "127.0.0.1",
        server_port=server.port or 5432,
        pool_mode="transaction",
        pool_size=args.pool_size,
        ignore_startup_parameters=("statement_timeout", "lock_timeout"),
    )
    results: dict[str, list[float]] = {"direct": [], "direct-nocache": [], "pgbouncer-tx": []}
    try:
        migrate.upgrade(direct)
        bouncer.start()
        variants: dict[str, tuple[str, dict[str, object]]] = {
            "direct": (direct, {}),
            "direct-nocache": (direct, {"statement_cache_size": 0}),
            "pgbouncer-tx": (bouncer.url(db), {"statement_cache_size": 0}),
        }
        for r in range(args.rounds):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in order:
                url, connect_args = variants[name]
                rate = asyncio.run(lifecycle(url, connect_args, args.clients, args.duration))
                results[name].append(rate)
                print(f"round {r + 1} {name:15s} {rate:9.0f} ops/s", flush=True)
    finally:
        bouncer.stop()
        with psycopg.connect(**admin, autocommit=True) as conn:  # type: ignore[arg-type]
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    base = statistics.median(results["direct"])
    table = {
        name: {
            "median_ops_per_s": statistics.median(v),
            "ratio_to_direct": statistics.median(v) / base,
            "rounds": v,
        }
        for name, v in results.items()
    }
    print(f"\n{'variant':15s} {'ops/s (median)':>15s} {'x direct':>9s}")
    for name, row in table.items():
        print(f"{name:15s} {row['median_ops_per_s']:15.0f} {row['ratio_to_direct']:9.2f}")
    meta = {"clients": args.clients, "pool_size": args.pool_size, "duration_s": args.duration}
    if args.json:
        args.json.write_text(json.dumps({"settings": meta, "results": table}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
