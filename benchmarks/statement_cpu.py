"""PostgreSQL server CPU per call of each catalogue statement, beside a plain upsert and read.

    python benchmarks/statement_cpu.py                 # a few minutes: 500 calls a cell, 5 rounds
    python benchmarks/statement_cpu.py --quick         # ~10 s (plus the scratch migration)
    python benchmarks/statement_cpu.py --candidate acquire.sql   # + a candidate acquire text

Every cell runs ``--calls`` calls of one statement, one after another, from one asyncpg
connection (statements prepared once, as the library runs them), each call on its own key, the
keys put in the cell's state beforehand (outside the timing). The server CPU is that
connection's backend process: ``/proc/<pg_backend_pid()>/schedstat`` (nanoseconds on CPU) read
before and after, with ``/proc/<pid>/stat`` (utime + stime, clock ticks) as a coarse
cross-check; so the server must run on this machine. Wall time is the client's, per call.
Durable commits (``synchronous_commit = on``) and ``off`` each have their own connection.
Rounds alternate the cells (each round starts one cell later, and the two modes swap order);
the table shows medians over rounds, and each ratio is the median of per-round ratios.

The cells: ``acquire_absent`` (a key never seen), ``acquire_expired`` (another owner's expired
row), ``acquire_own`` (the caller's live lease: a re-acquire), ``acquire_held`` (another
owner's live lease: a failed acquire), ``renew``, ``transfer``, ``release``, ``get_owner``,
``holder``; the four acquire cells again on a trigger-free copy of the table (``@plain``: what
the fence trigger of migration 0004 costs). References: ``upsert_insert`` / ``upsert_update``,
the plain upsert ``INSERT ... VALUES ($1, $2, 1, expiry, now) ON CONFLICT (key) DO UPDATE SET
owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at`` on the trigger-free copy, on absent /
present keys; ``lease_upsert_*``, the same with ``nextval`` of the fence sequence on the lease
table (its BEFORE INSERT trigger fires on every call); ``select``, a plain single-row read.
``--candidate FILE ...`` adds the four acquire cells for each SQL text (``{table}`` and
``{fence_sequence}`` as in ``sql-lease sql --json``), to compare candidates side by side in
one run. Every answer is checked against what the cell's state must give, fences included
(kept by a re-acquire or renewal, drawn anew for a new tenure or a transfer; ``unexpected``).

The scratch database (``--db-name``, default ``sql_lease_stmt_cpu``) is dropped and recreated,
migrated with `sql_lease.migrate`, and dropped at the end unless ``--keep-db``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from _setup import drop_database, migrate_tables, recreate_database, redact, scratch_dsns

from sql_lease.backends.postgres.catalogue import build_catalogue, quote_ident
from sql_lease.schema import fence_sequence_name

HERE = Path(__file__).resolve().parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
TABLE = "leases_cpu"
#: The plain upsert's table: the lease table's columns, key and checks, no triggers.
PLAIN = "plain_cpu"
TTL_MS = 3_600_000
ME, OTHER, NEXT = b"me", b"other", b"next"
MODES = ("on", "off")

Args = tuple[object, ...]
#: Whether a call's rows are what the key's state must give; the int is the key's fence before
#: the call (None for a key never seen).
Check = Callable[[list[asyncpg.Record], int | None], bool]


@dataclass(frozen=True)
class Cell:
    """One statement in one starting state: ``state`` is (owner, live) of the keys beforehand,
    or None for keys never seen; ``args`` builds a call's arguments from its key."""

    name: str
    sql: str
    state: tuple[bytes, bool] | None
    args: Callable[[bytes], Args]
    check: Check
    group: str = "catalogue"
    table: str = TABLE


def _acquired(rows: list[asyncpg.Record], _: int | None) -> bool:
    return any(r[0] for r in rows)


def _new_tenure(rows: list[asyncpg.Record], fence: int | None) -> bool:
    return any(r[0] and r[1] > (fence or 0) for r in rows)


def _same_tenure(rows: list[asyncpg.Record], fence: int | None) -> bool:
    return any(r[0] and r[1] == fence for r in rows)


def _held_by_other(rows: list[asyncpg.Record], fence: int | None) -> bool:
    return (
        bool(rows) and not any(r[0] for r in rows) and rows[0][3] == OTHER and rows[0][1] == fence
    )


def _one_row(rows: list[asyncpg.Record], _: int | None) -> bool:
    return len(rows) == 1


def _kept(rows: list[asyncpg.Record], fence: int | None) -> bool:
    return len(rows) == 1 and rows[0][0] == fence


def _redrawn(rows: list[asyncpg.Record], fence: int | None) -> bool:
    return len(rows) == 1 and rows[0][0] > (fence or 0)


def _none(rows: list[asyncpg.Record], _: int | None) -> bool:
    return rows == []


def acquire_cells(sql: str, group: str, suffix: str = "", table: str = TABLE) -> list[Cell]:
    def args(key: bytes) -> Args:
        return (key, ME, TTL_MS)

    return [
        Cell(f"acquire_absent{suffix}", sql, None, args, _acquired, group, table),
        Cell(f"acquire_expired{suffix}", sql, (OTHER, False), args, _new_tenure, group, table),
        Cell(f"acquire_own{suffix}", sql, (ME, True), args, _same_tenure, group, table),
        Cell(f"acquire_held{suffix}", sql, (OTHER, True), args, _held_by_other, group, table),
    ]


def upsert_sql(table: str, fence: str) -> str:
    return (
        f"INSERT INTO {table} (key, owner, fence, expires_at, acquired_at) VALUES ($1, $2,"
        f" {fence}, clock_timestamp() + $3::bigint * interval '1 millisecond',"
        " clock_timestamp()) ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner,"
        " expires_at = EXCLUDED.expires_at"
    )


def build_cells(candidates: Sequence[Path]) -> list[Cell]:
    c = build_catalogue(TABLE)
    seq = quote_ident(fence_sequence_name(TABLE))
    plain = quote_ident(PLAIN)
    lease_upsert = upsert_sql(c.table, f"nextval('{seq}')")
    select = f"SELECT owner, fence, expires_at FROM {c.table} WHERE key = $1"

    def k(key: bytes) -> Args:
        return (key,)

    def ko(key: bytes) -> Args:
        return (key, ME)

    def kot(key: bytes) -> Args:
        return (key, ME, TTL_MS)

    def transfer(key: bytes) -> Args:
        return (key, ME, NEXT, TTL_MS)

    cells = acquire_cells(c.acquire.sql, "catalogue")
    cells += [
        Cell("renew", c.renew.sql, (ME, True), kot, _kept),
        Cell("transfer", c.transfer.sql, (ME, True), transfer, _redrawn),
        Cell("release", c.release.sql, (ME, True), ko, _one_row),
        Cell("get_owner", c.get_owner.sql, (ME, True), k, _one_row),
        Cell("holder", c.holder.sql, (OTHER, True), k, _one_row),  # (owner, fence, expiry)
        Cell("upsert_insert", upsert_sql(plain, "1"), None, kot, _none, "reference", PLAIN),
        Cell(
            "upsert_update",
            upsert_sql(plain, "1"),
            (OTHER, True),
            kot,
            _none,
            "reference",
            PLAIN,
        ),
        Cell("lease_upsert_insert", lease_upsert, None, kot, _none, "reference"),
        Cell("lease_upsert_update", lease_upsert, (OTHER, True), kot, _none, "reference"),
        Cell("select", select, (ME, True), k, _one_row, "reference"),
    ]
    # The same acquire on the trigger-free table: what migration 0004's fence trigger costs.
    cells += acquire_cells(build_catalogue(PLAIN).acquire.sql, "diagnostic", "@plain", PLAIN)
    for path in candidates:
        text = path.read_text().replace("{table}", c.table).replace("{fence_sequence}", seq)
        cells += acquire_cells(text, "candidate", "+" + path.stem)
    return cells


def chosen(cells: list[Cell], prefixes: Sequence[str] | None) -> list[Cell]:
    """The cells named by ``prefixes`` (all without), the references always included."""
    if not prefixes:
        return cells
    return [c for c in cells if c.group == "reference" or c.name.startswith(tuple(prefixes))]


def cpu_of(pid: int) -> tuple[int, int]:
    """(nanoseconds on CPU from schedstat, utime + stime in clock ticks) of process ``pid``."""
    with open(f"/proc/{pid}/schedstat") as f:
        ns = int(f.read().split()[0])
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return ns, int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)


class Bench:
    """The two connections (one per commit mode) and the key states of the scratch table."""

    def __init__(self, conns: dict[str, asyncpg.Connection], admin: asyncpg.Connection) -> None:
        self.conns = conns
        self.admin = admin
        self.pids: dict[str, int] = {}
        self.fresh = 0

    async def start(self) -> None:
        await self.admin.execute(
            f"CREATE TABLE {quote_ident(PLAIN)} (LIKE {quote_ident(TABLE)} INCLUDING DEFAULTS"
            " INCLUDING CONSTRAINTS INCLUDING INDEXES) WITH (fillfactor = 70)"
        )
        await self.admin.execute(f"CREATE SEQUENCE {quote_ident(fence_sequence_name(PLAIN))}")
        for mode, conn in self.conns.items():
            await conn.execute(f"SET synchronous_commit = {mode}")
            self.pids[mode] = await conn.fetchval("SELECT pg_backend_pid()")
            cpu_of(self.pids[mode])  # fails early when the server is not on this machine

    async def keys_for(self, cell: Cell, calls: int) -> list[tuple[bytes, int | None]]:
        """``calls`` keys in the cell's starting state (fresh keys when they must be absent),
        each with its fence."""
        if cell.state is None:
            self.fresh += 1
            return [(f"{cell.name}:{self.fresh}:{i}".encode(), None) for i in range(calls)]
        keys = [f"{cell.name}:{i}".encode() for i in range(calls)]
        owner, live = cell.state
        ms = TTL_MS if live else -60_000
        rows = await self.admin.fetch(
            f"INSERT INTO {quote_ident(cell.table)} AS l"
            " (key, owner, fence, expires_at, acquired_at)"
            f" SELECT k, $2, nextval('{quote_ident(fence_sequence_name(cell.table))}'),"
            " clock_timestamp() + $3::bigint * interval '1 millisecond', clock_timestamp()"
            " FROM unnest($1::bytea[]) AS k ON CONFLICT (key) DO UPDATE SET owner ="
            " EXCLUDED.owner, expires_at = EXCLUDED.expires_at RETURNING l.key, l.fence",
            keys,
            owner,
            ms,
        )
        fences: dict[bytes, int] = {r[0]: r[1] for r in rows}
        return [(key, fences[key]) for key in keys]

    async def run(self, cell: Cell, mode: str, calls: int) -> dict[str, float]:
        conn, pid = self.conns[mode], self.pids[mode]
        keys = await self.keys_for(cell, calls)
        calls_args = [(cell.args(key), fence) for key, fence in keys]
        fetch = conn.fetch
        walls: list[float] = []
        unexpected = 0
        clock = time.perf_counter
        ns0, ticks0 = cpu_of(pid)
        t0 = clock()
        for args, fence in calls_args:
            t = clock()
            rows = await fetch(cell.sql, *args)
            walls.append(clock() - t)
            if not cell.check(rows, fence):
                unexpected += 1
        total = clock() - t0
        ns1, ticks1 = cpu_of(pid)
        tick = 1e6 / os.sysconf("SC_CLK_TCK")
        return {
            "cpu_us": (ns1 - ns0) / 1e3 / calls,
            "cpu_stat_us": (ticks1 - ticks0) * tick / calls,
            "wall_us": total * 1e6 / calls,
            "wall_p50_us": statistics.median(walls) * 1e6,
            "unexpected": unexpected,
        }

    async def warm(self, cells: Sequence[Cell]) -> None:
        """Prepare every statement and get past the plan cache's first custom plans."""
        for mode in self.conns:
            for cell in cells:
                await self.run(cell, mode, 7)

    async def plans(self) -> dict[str, dict[str, int]]:
        """generic_plans / custom_plans of each prepared statement, by statement text."""
        found: dict[str, dict[str, int]] = {}
        for mode, conn in self.conns.items():
            rows = await conn.fetch(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            )
            for r in rows:
                found[f"{mode}:{r['statement']}"] = {
                    "generic": r["generic_plans"],
                    "custom": r["custom_plans"],
                }
        return found


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _ratios(runs: list[dict[str, float]], ref: list[dict[str, float]], m: str) -> float:
    return _median([a[m] / b[m] for a, b in zip(runs, ref, strict=True) if b[m]])


def summarise(samples: dict[str, dict[str, list[dict[str, float]]]]) -> dict[str, Any]:
    """Medians per cell and mode, and ratios to the references (medians of per-round ratios):
    ``x_upsert`` to the plain upsert (trigger-free table), ``x_lease_upsert`` to the same upsert
    on the lease table; an insert for ``acquire_absent*``, an update for every other cell."""
    out: dict[str, Any] = {}
    for mode, cells in samples.items():
        rows: dict[str, Any] = {}
        for name, runs in cells.items():
            row: dict[str, Any] = {
                m: _median([r[m] for r in runs])
                for m in ("cpu_us", "cpu_stat_us", "wall_us", "wall_p50_us")
            }
            row["unexpected"] = sum(int(r["unexpected"]) for r in runs)
            path = "insert" if name.startswith(("acquire_absent", "upsert_insert")) else "update"
            for label, ref in (
                ("upsert", f"upsert_{path}"),
                ("lease_upsert", f"lease_upsert_{path}"),
            ):
                row[f"cpu_x_{label}"] = _ratios(runs, cells[ref], "cpu_us")
                row[f"wall_x_{label}"] = _ratios(runs, cells[ref], "wall_us")
            row["rounds"] = runs
            rows[name] = row
        out[mode] = rows
    return out


def render(summary: dict[str, Any], cells: Sequence[Cell]) -> str:
    width = 8 * 5 + 4
    head = f"{'statement':<26}" + "".join(f" | {'commit ' + m:^{width}}" for m in summary)
    cols = " | {:>8}{:>8}{:>8}{:>8}{:>8}".format(
        "cpu µs", "stat µs", "wall µs", "x plain", "x lease"
    )
    lines = [head, f"{'':<26}" + cols * len(summary), "-" * len(head)]
    for cell in cells:
        line = f"{cell.name:<26}"
        for mode in summary:
            r = summary[mode][cell.name]
            line += (
                f" | {r['cpu_us']:8.1f}{r['cpu_stat_us']:8.1f}{r['wall_us']:8.1f}"
                f"{r['cpu_x_upsert']:8.2f}{r['cpu_x_lease_upsert']:8.2f}"
            )
            if r["unexpected"]:
                line += f" !{r['unexpected']} unexpected"
        lines.append(line)
    lines.append(
        "cpu: server CPU per call (schedstat; stat: utime+stime, 10 ms ticks); x plain, x lease:"
        " cpu ÷ that of the upsert on the trigger-free / the lease table (an insert for"
        " acquire_absent*, else an update), medians of per-round ratios"
    )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pg-url", default=os.environ.get("SQL_LEASE_BENCH_DSN", DEFAULT_PG))
    p.add_argument("--db-name", default="sql_lease_stmt_cpu", help="scratch database (recreated)")
    p.add_argument("--keep-db", action="store_true", help="keep the scratch database afterwards")
    p.add_argument("--quick", action="store_true", help="smoke mode: 20 calls, 1 round")
    p.add_argument("--calls", type=int, help="calls per cell and round (default 500, quick 20)")
    p.add_argument("--rounds", type=int, help="alternating rounds (default 5, quick 1)")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument(
        "--candidate",
        type=Path,
        nargs="+",
        default=[],
        help="candidate acquire SQL texts to run beside the catalogue's",
    )
    p.add_argument(
        "--cells", nargs="+", metavar="PREFIX", help="only the cells whose names start so"
    )
    p.add_argument("--json", type=Path, default=HERE / "results" / "statement_cpu.json")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    calls = args.calls or (20 if args.quick else 500)
    rounds = args.rounds or (1 if args.quick else 5)
    cells = chosen(build_cells(args.candidate), args.cells)
    admin_dsn, dsn = scratch_dsns(args.pg_url, args.db_name)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.perf_counter()
    await recreate_database(admin_dsn, args.db_name)
    await migrate_tables(dsn, [TABLE])
    admin = await asyncpg.connect(dsn)
    conns = {mode: await asyncpg.connect(dsn) for mode in args.modes}
    samples: dict[str, dict[str, list[dict[str, float]]]] = {
        m: {c.name: [] for c in cells} for m in args.modes
    }
    try:
        bench = Bench(conns, admin)
        await bench.start()
        await bench.warm(cells)
        for r in range(rounds):
            modes = list(args.modes) if r % 2 == 0 else list(reversed(args.modes))
            for mode in modes:
                for i in range(len(cells)):
                    cell = cells[(i + r) % len(cells)]
                    samples[mode][cell.name].append(await bench.run(cell, mode, calls))
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
        plans = await bench.plans()
        server = {
            name: await admin.fetchval(f"SHOW {name}")
            for name in ("server_version", "fsync", "wal_sync_method", "plan_cache_mode")
        }
    finally:
        for conn in conns.values():
            await conn.close()
        await admin.close()
        if not args.keep_db:
            await drop_database(admin_dsn, args.db_name)
    return {
        "meta": {
            "started": started,
            "total_s": round(time.perf_counter() - t0, 1),
            "quick": args.quick,
            "calls": calls,
            "rounds": rounds,
            "pg": redact(dsn),
            "server": server,
            "loadavg_end": list(os.getloadavg()),
            "cpus": os.cpu_count(),
        },
        "sql": {c.name: c.sql for c in cells},
        "plans": plans,
        "cells": summarise(samples),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(run(args))
    print(render(report["cells"], chosen(build_cells(args.candidate), args.cells)))
    print(
        f"\n{report['meta']['calls']} calls x {report['meta']['rounds']} rounds per cell,"
        f" total {report['meta']['total_s']} s"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
