"""Benchmark sql_lease against a raw asyncpg floor and a Redis/Lua reference, cell by cell.

    python benchmarks/bench.py                       # full run (a few minutes + scale/bloat)
    python benchmarks/bench.py --quick               # smoke run, every cell and code path, < 30 s
    python benchmarks/bench.py --cells lifecycle read --duration 3
    python benchmarks/bench.py --cells lifecycle read --observer otel   # + library+otel
    python benchmarks/bench.py --publish             # also benchmarks/results.md + ratios.png

PostgreSQL: ``--pg-url``, else ``$SQL_LEASE_BENCH_DSN``, else the local server; the benchmark
creates (and afterwards drops) its own scratch database and migrates it with
`sql_lease.migrate`. Redis: ``--redis-url`` (db 15 by default); only keys under a per-run prefix
are written and deleted, but the relaxed cell switches AOF on for its duration (CONFIG SET) and
restores the previous settings afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from _cells import (
    BLOAT_TABLES,
    MAIN_TABLE,
    SCALE_TABLES,
    CellResult,
    Context,
    Sizes,
    contention_cell,
    lifecycle_cell,
    read_cell,
    relaxed_cell,
)
from _impls import IMPLS, library_relaxed_mode
from _report import compute_bars, render_bars, render_table, write_chart, write_json, write_md
from _setup import (
    delete_redis_prefix,
    drop_database,
    environment_facts,
    migrate_tables,
    recreate_database,
    redact,
    scratch_dsns,
)
from _volume import batch_cell, bloat_cell, scale_cells

HERE = Path(__file__).resolve().parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS = "redis://127.0.0.1:6379/15"

Runner = Callable[[Context], Awaitable[dict[str, CellResult]]]

#: Runner groups in run order, and the cells each produces.
GROUPS: dict[str, tuple[Runner, tuple[str, ...]]] = {
    "lifecycle_c1": (lambda c: lifecycle_cell(c, 1), ("lifecycle_c1",)),
    "lifecycle_c16": (lambda c: lifecycle_cell(c, 16), ("lifecycle_c16",)),
    "lifecycle_c64": (lambda c: lifecycle_cell(c, 64), ("lifecycle_c64",)),
    "read_c1": (lambda c: read_cell(c, 1), ("read_c1",)),
    "read_c16": (lambda c: read_cell(c, 16), ("read_c16",)),
    "read_c64": (lambda c: read_cell(c, 64), ("read_c64",)),
    "contention_c64": (contention_cell, ("contention_c64",)),
    "relaxed_lifecycle_c16": (relaxed_cell, ("relaxed_lifecycle_c16",)),
    "relaxed_lifecycle_c64": (lambda c: relaxed_cell(c, 64), ("relaxed_lifecycle_c64",)),
    "batch_renew": (batch_cell, ("batch_renew",)),
    "scale": (scale_cells, ("scale_1k", "scale_1m")),
    "bloat": (bloat_cell, ("bloat",)),
}
CELLS: tuple[str, ...] = tuple(c for _, cells in GROUPS.values() for c in cells)


def tables_for(groups: Sequence[str]) -> list[str]:
    """The lease tables the chosen groups need migrated."""
    tables = [MAIN_TABLE]
    if "scale" in groups:
        tables += list(SCALE_TABLES.values())
    if "bloat" in groups:
        tables += list(BLOAT_TABLES.values())
    return tables


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pg-url", default=os.environ.get("SQL_LEASE_BENCH_DSN", DEFAULT_PG))
    p.add_argument("--redis-url", default=DEFAULT_REDIS)
    p.add_argument("--db-name", default="sql_lease_bench", help="scratch database (recreated)")
    p.add_argument("--keep-db", action="store_true", help="keep the scratch database afterwards")
    p.add_argument("--quick", action="store_true", help="smoke mode: tiny sizes, short cells")
    p.add_argument("--duration", type=float, help="seconds per timed run (default 1.5, quick 0.1)")
    p.add_argument("--rounds", type=int, help="alternating rounds per cell (default 4, quick 1)")
    p.add_argument(
        "--cells",
        nargs="+",
        metavar="CELL",
        help="cells or prefixes (e.g. lifecycle, read, scale); default: all. Known: "
        + ", ".join(CELLS),
    )
    p.add_argument(
        "--impls",
        nargs="+",
        choices=IMPLS,
        default=list(IMPLS),
        help="implementations to run (default all; fewer only for profiling)",
    )
    p.add_argument(
        "--observer",
        choices=("none", "otel"),
        default="none",
        help="otel: the lifecycle and read cells also run the library with"
        " sql_lease.otel.OpenTelemetryObserver on the OpenTelemetry SDK (library+otel,"
        " bar 1 at 0.8x raw); needs opentelemetry-sdk",
    )
    p.add_argument(
        "--no-single",
        action="store_true",
        help="skip library-single (the library with coalescing off) in the lifecycle, read"
        " and contention cells",
    )
    p.add_argument("--bloat-renewals", type=int, help="renewals in the bloat cell")
    p.add_argument("--scale-rows", type=int, help="filler rows of the big scale table")
    p.add_argument("--json", type=Path, default=HERE / "results" / "latest.json")
    p.add_argument("--chart", type=Path, help="write a PNG chart of the ratios (needs matplotlib)")
    p.add_argument(
        "--replay", type=Path, metavar="JSON", help="re-render an earlier --json without measuring"
    )
    p.add_argument(
        "--publish",
        action="store_true",
        help="also write benchmarks/results.md and benchmarks/ratios.png",
    )
    return p.parse_args(argv)


def select_groups(wanted: list[str] | None) -> list[str]:
    if not wanted:
        return list(GROUPS)
    chosen: list[str] = []
    for word in wanted:
        hits = [
            g
            for g, (_, cells) in GROUPS.items()
            if g.startswith(word) or any(c.startswith(word) for c in cells)
        ]
        if not hits:
            raise SystemExit(f"unknown cell {word!r}; known: {', '.join(CELLS)}")
        chosen += [g for g in hits if g not in chosen]
    return [g for g in GROUPS if g in chosen]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    groups = select_groups(args.cells)
    sizes = Sizes.for_mode(args.quick)
    if args.bloat_renewals:
        sizes = Sizes(**{**sizes.__dict__, "bloat_renewals": args.bloat_renewals})
    if args.scale_rows:
        sizes = Sizes(**{**sizes.__dict__, "scale_big": args.scale_rows})
    duration = args.duration or (0.1 if args.quick else 1.5)
    rounds = args.rounds or (1 if args.quick else 4)
    admin_dsn, dsn = scratch_dsns(args.pg_url, args.db_name)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.perf_counter()

    await recreate_database(admin_dsn, args.db_name)
    await migrate_tables(dsn, tables_for(groups))
    admin = await asyncpg.connect(dsn)
    client = aioredis.Redis.from_url(args.redis_url)
    prefix = f"sql_lease_bench:{uuid.uuid4().hex[:8]}:"
    cells: dict[str, Any] = {}
    try:
        env = await environment_facts(admin, client)
        ctx = Context(
            pg_dsn=dsn,
            redis_url=args.redis_url,
            prefix=prefix,
            duration=duration,
            warmup=min(0.5, max(0.03, duration / 4)),
            rounds=rounds,
            impls=tuple(args.impls),
            sizes=sizes,
            admin=admin,
            redis=client,
            observer=args.observer,
            coalescing=not args.no_single,
        )
        for group in groups:
            runner, _ = GROUPS[group]
            start = time.perf_counter()
            cells.update(await runner(ctx))
            ctx.log(f"{group} done in {time.perf_counter() - start:.1f}s")
    finally:
        await delete_redis_prefix(client, prefix)
        await client.aclose()
        await admin.close()
        if not args.keep_db:
            await drop_database(admin_dsn, args.db_name)
    env["loadavg_end"] = list(os.getloadavg())
    return {
        "meta": {
            "started": started,
            "total_s": round(time.perf_counter() - t0, 1),
            "quick": args.quick,
            "duration_s": duration,
            "rounds": rounds,
            "sizes": sizes.__dict__,
            "pg": redact(dsn),
            "redis": args.redis_url,
            "library_relaxed_mode": library_relaxed_mode(),
            "observer": args.observer,
            "single": not args.no_single,
            "environment": env,
        },
        "cells": cells,
        "bars": compute_bars(cells),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replay:
        # Re-render an earlier run (e.g. after a change to the report) without measuring.
        report = json.loads(args.replay.read_text())
        report["bars"] = compute_bars(report["cells"])
    else:
        report = asyncio.run(run(args))
    print(render_table(report["cells"]))
    print()
    print(render_bars(report["bars"], report["meta"]["quick"]))
    print(f"\ntotal {report['meta']['total_s']} s")
    if not args.replay:
        write_json(args.json, report)
        print(f"wrote {args.json}")

    def log(message: str) -> None:
        print(message, file=sys.stderr)

    if args.chart and write_chart(args.chart, report["bars"], log):
        print(f"wrote {args.chart}")
    if args.publish:
        write_md(HERE / "results.md", report)
        print(f"wrote {HERE / 'results.md'}")
        if write_chart(HERE / "ratios.png", report["bars"], log):
            print(f"wrote {HERE / 'ratios.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
