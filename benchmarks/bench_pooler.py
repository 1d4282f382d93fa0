"""Throughput through PgBouncer transaction pooling vs direct, side by side.

    python benchmarks/bench_pooler.py                    # 3 alternating rounds of 2 s per cell
    python benchmarks/bench_pooler.py --rounds 6 --duration 5 --clients 32 --json out.json

Two cells, each with ``--clients`` concurrent callers on their own keys (no contention: this
measures the pooler's cost): ``lifecycle`` loops acquire -> renew -> release, ``read`` loops
``get_lease_owner`` on a held key. Variants, alternated round by round so machine noise hits
them alike:

- ``direct``: `SqlLeaseProvider.from_url` with its defaults (asyncpg, named statements cached
  per connection, timeouts as startup parameters);
- ``direct-unnamed``: the same with asyncpg's statement cache off (every statement parsed and
  planned again: what any pooler-safe mode costs the server);
- ``direct-psycopg``: ``pooler="transaction"`` straight to the server (the psycopg wire of the
  next variant without the pooler: what the pooler itself costs is the gap between the two);
- ``pgbouncer-tx``: ``pooler="transaction"`` through a PgBouncer started here (transaction
  mode, ``--pool-size`` server connections, its default settings): psycopg, one simple-protocol
  round trip per call on the connection's libpq handle (`psycopg_wire`), the server-side
  timeouts set inside it, the hot statements as calls of the plpgsql functions of revision
  0005 (plans kept per server session);
- ``pgbouncer-tx-plain``: the same against a database at revision 0004, without the server
  functions of revision 0005 (the provider falls back to the plain statements, each parsed and
  planned by the server on every call): what ``pgbouncer-tx`` cost before 0005;
- ``pgbouncer-tx-asyncpg``: the asyncpg pooler mode (``pooler="session"`` settings: unnamed
  statements, two round trips each, no server-side timeouts) through the same PgBouncer; what
  ``pooler="transaction"`` did before it ran on psycopg.

Prints a table (median ops/s per variant and cell, ratio to ``direct`` and its range over the
rounds, each round against that round's ``direct``; CPU per operation of the client process,
of the bench database's server backends, and of the PgBouncer process, from ``/proc``) and,
with ``--json``, writes it. Under a saturated machine (2 cores shared by all three) the ratio
follows the total CPU per operation. Needs the ``pgbouncer`` binary and the local server
(``--pg-url``; trust auth).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sql_lease import LeaseError, SqlLeaseProvider, migrate
from tests.infra.pgbouncer import PgBouncer

CELLS = ("lifecycle", "read")


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of processes ``pids`` so far (those gone since count as nothing)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


class Cpu:
    """CPU per operation of the client (this process), the server backends of the bench
    database, and the pooler (its pid file), read around each measurement."""

    def __init__(self, admin: dict[str, Any], dbs: list[str], bouncer_pid: int | None) -> None:
        self.admin, self.dbs, self.bouncer_pid = admin, dbs, bouncer_pid

    def backends(self) -> list[int]:
        with psycopg.connect(**self.admin, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = ANY(%s)", (self.dbs,)
            ).fetchall()
        return [int(pid) for (pid,) in rows]

    def snapshot(self) -> tuple[float, float, float, list[int]]:
        pids = self.backends()
        pooler = _cpu_seconds([self.bouncer_pid]) if self.bouncer_pid else 0.0
        return time.process_time(), _cpu_seconds(pids), pooler, pids

    def since(self, before: tuple[float, float, float, list[int]]) -> tuple[float, float, float]:
        """CPU seconds (client, server, pooler) since ``before``, on the same backends."""
        client, server, pooler, pids = before
        now_pooler = _cpu_seconds([self.bouncer_pid]) if self.bouncer_pid else 0.0
        return (
            time.process_time() - client,
            _cpu_seconds(pids) - server,
            now_pooler - pooler,
        )


async def measure(
    cell: str,
    url: str,
    options: dict[str, Any],
    clients: int,
    seconds: float,
    cpu: Cpu | None = None,
) -> tuple[float, tuple[float, float, float]]:
    provider = SqlLeaseProvider.from_url(
        url, timeout=10, pool_size=clients, max_overflow=0, **options
    )
    done = 0
    stop = 0.0

    async def client(n: int) -> None:
        nonlocal done
        key, owner = f"bench-{cell}-{n}", f"owner-{n}"
        if cell == "read":
            await provider.acquire_lease(key, owner, 600_000)
        while time.monotonic() < stop:
            if cell == "lifecycle":
                await provider.acquire_lease(key, owner, 10_000)
                await provider.renew_lease(key, owner, 10_000)
                await provider.release_lease(key, owner)
                done += 3
            else:
                await provider.get_lease_owner(key)
                done += 1

    try:
        stop = time.monotonic() + min(0.5, seconds)  # warm-up: every connection opened
        await asyncio.gather(*(client(n) for n in range(clients)))
        done = 0
        before = cpu.snapshot() if cpu else None
        started = time.monotonic()
        stop = started + seconds
        await asyncio.gather(*(client(n) for n in range(clients)))
        rate = done / (time.monotonic() - started)
        per_op = (0.0, 0.0, 0.0)
        if cpu is not None and before is not None:
            client_s, server_s, pooler_s = cpu.since(before)
            per_op = (client_s * 1e6 / done, server_s * 1e6 / done, pooler_s * 1e6 / done)
        return rate, per_op
    finally:
        await provider.aclose()


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--pool-size", type=int, default=10)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--variants", help="comma-separated subset of the variants ('direct' first)")
    args = ap.parse_args()
    server = make_url(args.pg_url)
    db = f"sql_lease_bench_pooler_{uuid.uuid4().hex[:8]}"
    admin = {
        "host": server.host,
        "port": server.port,
        "user": server.username,
        "dbname": server.database,
    }
    old = f"{db}_0004"  # without the server functions (revision 0005)
    with psycopg.connect(**admin, autocommit=True) as conn:  # type: ignore[arg-type]
        conn.execute(f'CREATE DATABASE "{db}"')
        conn.execute(f'CREATE DATABASE "{old}"')
    direct = server.set(database=db).render_as_string(hide_password=False)
    bouncer = PgBouncer(
        server_host=server.host or "127.0.0.1",
        server_port=server.port or 5432,
        pool_mode="transaction",
        pool_size=args.pool_size,
    )
    results: dict[tuple[str, str], list[float]] = {}
    costs: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    failures: dict[str, list[str]] = {}
    try:
        migrate.upgrade(direct)
        migrate.upgrade(server.set(database=old).render_as_string(hide_password=False), "0004")
        bouncer.start()
        pooled = bouncer.url(db)
        pid_file = bouncer.base / "pgbouncer.pid"
        bouncer_pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
        cpu = Cpu(admin, [db, old], bouncer_pid)
        variants: dict[str, tuple[str, dict[str, Any]]] = {
            "direct": (direct, {}),
            "direct-unnamed": (direct, {"connect_args": {"statement_cache_size": 0}}),
            "direct-psycopg": (direct, {"pooler": "transaction"}),
            "pgbouncer-tx": (pooled, {"pooler": "transaction"}),
            "pgbouncer-tx-plain": (bouncer.url(old), {"pooler": "transaction"}),
            "pgbouncer-tx-asyncpg": (pooled, {"pooler": "session"}),
        }
        if args.variants:
            chosen = ["direct", *(v for v in args.variants.split(",") if v != "direct")]
            variants = {name: variants[name] for name in chosen}
        for r in range(args.rounds):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for cell in CELLS:
                for name in order:
                    url, options = variants[name]
                    try:
                        rate, per_op = asyncio.run(
                            measure(cell, url, options, args.clients, args.duration, cpu)
                        )
                    except LeaseError as exc:  # counted, not hidden: the table shows it
                        failures.setdefault(f"{cell}/{name}", []).append(str(exc))
                        print(f"round {r + 1} {cell:9s} {name:21s} FAILED: {exc}", flush=True)
                        continue
                    results.setdefault((cell, name), []).append(rate)
                    costs.setdefault((cell, name), []).append(per_op)
                    print(
                        f"round {r + 1} {cell:9s} {name:21s} {rate:9.0f} ops/s  "
                        "CPU us/op client {:5.0f} server {:5.0f} pooler {:5.0f}".format(*per_op),
                        flush=True,
                    )
    finally:
        bouncer.stop()
        with psycopg.connect(**admin, autocommit=True) as conn:  # type: ignore[arg-type]
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            conn.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
    table: dict[str, dict[str, Any]] = {}
    print(
        f"\n{'cell':9s} {'variant':21s} {'ops/s (median)':>15s} {'x direct':>9s} {'range':>11s}"
        "  CPU us/op (median): client server pooler"
    )
    for (cell, name), rates in results.items():
        base = statistics.median(results[(cell, "direct")])
        cpu_median = [statistics.median(c[i] for c in costs[(cell, name)]) for i in range(3)]
        # Per round, against that round's direct (paired: the same moment's machine noise).
        ratios = [a / b for a, b in zip(rates, results[(cell, "direct")], strict=False)]
        row = {
            "median_ops_per_s": statistics.median(rates),
            "ratio_to_direct": statistics.median(rates) / base,
            "ratio_range": [min(ratios), max(ratios)],
            "cpu_us_per_op": dict(zip(("client", "server", "pooler"), cpu_median, strict=True)),
            "rounds": rates,
            "failed_rounds": len(failures.get(f"{cell}/{name}", [])),
        }
        table[f"{cell}/{name}"] = row
        print(
            f"{cell:9s} {name:21s} {row['median_ops_per_s']:15.0f} {row['ratio_to_direct']:9.2f}"
            f" {min(ratios):5.2f}-{max(ratios):4.2f}"
            "  {:6.0f} {:6.0f} {:6.0f}".format(*cpu_median)
        )
    meta = {"clients": args.clients, "pool_size": args.pool_size, "duration_s": args.duration}
    if args.json:
        args.json.write_text(
            json.dumps({"settings": meta, "results": table, "failures": failures}, indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
