"""Citus cell: the library through a Citus coordinator (2 workers) beside plain PostgreSQL.

    python benchmarks/bench_citus.py                 # 5 s per cell, 1/16/64 callers
    python benchmarks/bench_citus.py --quick         # 1 s per cell, 1 and 16 callers

Needs a running Citus cluster (``../shared/citus/cluster.sh start DIR 57001``: coordinator
``--citus-url``, workers ``--workers``, all on this machine) and the plain server
(``--pg-url``). Each target gets a scratch database (on Citus: on every node, ``CREATE
EXTENSION citus``, the workers registered), migrated with `sql_lease.migrate` (on Citus that
distributes ``leases`` by key, migrations 0008 and 0010), dropped at the end.

Targets: ``postgresql`` (plain, the library's defaults), ``citus`` (the defaults: lone calls
delegated to the key's worker, coalesced batches as one delegated call per worker, migration
0010), ``citus-alone`` (``coalesce=False``: every call delegated on its own). Cells:
``lifecycle`` (acquire, renew, transfer, release of each caller's own keys, `_workloads`) and
``read`` (``get_lease_owner`` of held keys) at 1, 16 and 64 callers. Server CPU per operation:
the CPU time (``/proc/<pid>/schedstat``) of the backends of the scratch database on each node
(coordinator and each worker; plain: the one server), summed over the run, divided by the
operations: so the servers must run on this machine. Prints a table and writes JSON
(``--json``, default ``benchmarks/results_citus.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
from _workloads import hold, lifecycle, read, run_workers

from sql_lease import SqlLeaseProvider, migrate

HERE = Path(__file__).resolve().parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_CITUS = "postgresql://postgres@127.0.0.1:57001/postgres"
#: The client talks to both servers without TLS (the plain one has none); the coordinator
#: talks to its workers as Citus does by default (``citus.node_conninfo = sslmode=require``).
NO_TLS = "?sslmode=disable"


def _url(base: str, port: int | None = None, db: str | None = None) -> str:
    head, _, tail = base.rpartition("/")
    if port is not None:
        host, _, _ = head.rpartition(":")
        head = f"{host}:{port}"
    return f"{head}/{db or tail}"


def _port(url: str) -> int:
    return int(url.rpartition("/")[0].rpartition(":")[2])


async def _admin(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for s in statements:
            await conn.execute(s)
    finally:
        await conn.close()


async def make_db(base: str, workers: list[int], name: str) -> str:
    """A scratch database on the server of ``base`` (and on ``workers``: a Citus database)."""
    for port in [_port(base), *workers]:
        await _admin(_url(base, port), f'CREATE DATABASE "{name}"')
    if workers:
        for port in [_port(base), *workers]:
            await _admin(_url(base, port, name), "CREATE EXTENSION citus")
        adds = [f"SELECT citus_add_node('127.0.0.1', {p})" for p in workers]
        await _admin(_url(base, None, name), *adds)
    url = _url(base, None, name)
    await asyncio.to_thread(migrate.upgrade, url)
    return url + NO_TLS


async def drop_db(base: str, workers: list[int], name: str) -> None:
    for port in [_port(base), *workers]:
        await _admin(_url(base, port), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _cpu_ns(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


class ServerCpu:
    """CPU of the backends of one database on each node, by node port."""

    def __init__(self, url: str, ports: list[int]) -> None:
        self.url, self.ports = url, ports
        self.db = url.rpartition("/")[2].split("?")[0]

    async def sample(self) -> dict[int, dict[int, int]]:
        found: dict[int, dict[int, int]] = {}
        for port in self.ports:
            conn = await asyncpg.connect(_url(self.url, port, self.db))
            try:
                rows = await conn.fetch(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid()"
                )
            finally:
                await conn.close()
            found[port] = {r["pid"]: _cpu_ns(r["pid"]) for r in rows}
        return found

    @staticmethod
    def used(before: dict[int, dict[int, int]], after: dict[int, dict[int, int]]) -> dict[int, int]:
        return {
            port: sum(ns - before.get(port, {}).get(pid, 0) for pid, ns in pids.items())
            for port, pids in after.items()
        }


async def run_cell(
    url: str, ports: list[int], cell: str, callers: int, seconds: float, coalesce: bool
) -> dict[str, Any]:
    provider = SqlLeaseProvider.from_url(
        url, timeout=30, coalesce=coalesce, pool_size=20, max_overflow=10
    )
    tag = uuid.uuid4().hex[:6]
    try:
        if cell == "lifecycle":
            worker = lifecycle(provider, lambda w: [f"lc:{tag}:{w}:{i}" for i in range(64)])
        else:
            keys = [f"rd:{tag}:{i}" for i in range(1000)]
            await hold(provider, keys)
            worker = read(provider, keys)
        await run_workers(callers, min(1.0, seconds / 4), worker)  # warm the connections
        cpu = ServerCpu(url, ports)
        before = await cpu.sample()
        m = await run_workers(callers, seconds, worker)
        used = ServerCpu.used(before, await cpu.sample())
    finally:
        await provider.aclose()
    ops = m.count
    return {
        "ops_per_s": ops / m.elapsed_s if m.elapsed_s else 0.0,
        "ops": ops,
        "anomalies": m.anomalies,
        "mean_us": sum(sum(v) for v in m.latencies_ns.values()) / ops / 1000 if ops else 0.0,
        "server_cpu_us_per_op": {str(p): ns / ops / 1000 if ops else 0.0 for p, ns in used.items()},
        "client_cpu_us_per_op": m.cpu_s / ops * 1e6 if ops else 0.0,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    workers = [int(p) for p in args.workers.split(",")]
    callers = [1, 16] if args.quick else [int(c) for c in args.callers.split(",")]
    seconds = 1.0 if args.quick else args.duration
    name = f"sql_lease_bench_citus_{uuid.uuid4().hex[:8]}"
    plain = await make_db(args.pg_url, [], name)
    citus = await make_db(args.citus_url, workers, name)
    targets = [
        ("postgresql", plain, [_port(args.pg_url)], True),
        ("citus", citus, [_port(args.citus_url), *workers], True),
        ("citus-alone", citus, [_port(args.citus_url), *workers], False),
    ]
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "seconds_per_cell": seconds,
        "cells": [],
    }
    try:
        for cell in ("lifecycle", "read"):
            for n in callers:
                for target, url, ports, coalesce in targets:
                    r = await run_cell(url, ports, cell, n, seconds, coalesce)
                    row = {"cell": cell, "callers": n, "target": target, **r}
                    results["cells"].append(row)
                    print(_line(row), flush=True)
    finally:
        await drop_db(args.pg_url, [], name)
        await drop_db(args.citus_url, workers, name)
    return results


def _line(row: dict[str, Any]) -> str:
    cpu = " ".join(f"{p}:{v:6.0f}" for p, v in row["server_cpu_us_per_op"].items())
    return (
        f"{row['cell']:<9} {row['callers']:>3} {row['target']:<12} {row['ops_per_s']:>8.0f} ops/s"
        f" {row['mean_us']:>8.0f} us/op  server CPU us/op {cpu}"
        f"  client {row['client_cpu_us_per_op']:.0f}  anomalies {row['anomalies']}"
    )


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pg-url", default=DEFAULT_PG)
    p.add_argument("--citus-url", default=DEFAULT_CITUS)
    p.add_argument("--workers", default="57002,57003", help="the workers' ports")
    p.add_argument("--callers", default="1,16,64")
    p.add_argument("--duration", type=float, default=5.0, help="seconds per cell")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", type=Path, default=HERE / "results_citus.json")
    return p.parse_args(argv)


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    out = asyncio.run(main(arguments))
    arguments.json.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {arguments.json}")
