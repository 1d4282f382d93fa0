"""Benchmark the sync provider (`sql_lease.sync`) against raw psycopg running the same SQL.

    python benchmarks/bench_sync.py                          # 1 and 16 threads, 5 rounds of 5 s
    python benchmarks/bench_sync.py --duration 2 --rounds 3
    python benchmarks/bench_sync.py --quick                  # smoke run, every path, a few s
    python benchmarks/bench_sync.py --publish                # also results.md + ratios.png

The floor ("raw") is what the provider does minus the provider: a psycopg 3 pool with the
provider's connection settings (autocommit, the same ``statement_timeout``/``lock_timeout``
options, no prepared statements, pool size = threads), a `psycopg.RawCursor` per statement and
the statements of the provider's own catalogue (``provider.statements``) with the same
arguments. Cells: ``lifecycle`` (acquire -> renew -> transfer -> release per key) and ``read``
(``get_lease_owner`` of held keys). Rounds alternate which implementation goes first; the
ratio is the median of the per-round ratios library / raw. Bars: >= 0.9x at 1 thread,
>= 0.8x at 16. Each round also records the client's CPU time per operation (this process, all
threads), which a loaded machine disturbs less than throughput. Writes a table to stdout and
``--json`` (default benchmarks/results/sync_latest.json); ``--publish`` writes
benchmarks/results_sync.json and puts the results in benchmarks/results.md (their own
section) and benchmarks/ratios.png (bars labelled "sync"), next to bench.py's.

PostgreSQL: ``--pg-url``, else ``$SQL_LEASE_BENCH_DSN``, else the local server; the benchmark
creates (and afterwards drops) its own scratch database, migrated by `sql_lease.migrate`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import psycopg
import psycopg_pool
from _report import write_chart, write_json
from _sync_report import HEADING, SYNC_JSON, published_bars, sync_section
from sqlalchemy.engine import make_url

from sql_lease import migrate
from sql_lease.sync import SqlLeaseProvider

HERE = Path(__file__).resolve().parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
TTL_MS = 30_000
HOLDER = "bench-holder"
READ_KEYS = 1_000  # held keys the read cell reads (100 with --quick)
BARS = {1: 0.9, 16: 0.8}
TIMEOUT_S = 10.0


class Leases(Protocol):
    def acquire(self, key: str, owner: str) -> bool: ...
    def renew(self, key: str, owner: str) -> bool: ...
    def transfer(self, key: str, src: str, dst: str) -> bool: ...
    def release(self, key: str, owner: str) -> None: ...
    def owner(self, key: str) -> str | None: ...
    def close(self) -> None: ...


class Library:
    """The sync provider, through its public methods."""

    def __init__(self, dsn: str, threads: int) -> None:
        self.p = SqlLeaseProvider.from_url(dsn, timeout=TIMEOUT_S, pool_size=threads)

    def acquire(self, key: str, owner: str) -> bool:
        return self.p.acquire_lease(key, owner, TTL_MS).acquired

    def renew(self, key: str, owner: str) -> bool:
        return self.p.renew_lease(key, owner, TTL_MS)

    def transfer(self, key: str, src: str, dst: str) -> bool:
        return self.p.transfer_lease(key, src, dst, TTL_MS)

    def release(self, key: str, owner: str) -> None:
        self.p.release_lease(key, owner)

    def owner(self, key: str) -> str | None:
        return self.p.get_lease_owner(key)

    def close(self) -> None:
        self.p.close()


class Raw:
    """The same statements on a plain psycopg pool with the provider's settings."""

    def __init__(self, dsn: str, threads: int, statements: Any) -> None:
        millis = round(TIMEOUT_S * 1000 * 0.8)
        url = make_url(dsn)
        kwargs: dict[str, Any] = {
            "host": url.host,
            "port": url.port,
            "user": url.username,
            "password": url.password,
            "dbname": url.database,
            "options": f"-c statement_timeout={millis} -c lock_timeout={millis} -c TimeZone=UTC",
            "autocommit": True,
            "prepare_threshold": None,
            "application_name": "bench_raw",
        }
        self.pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            kwargs={k: v for k, v in kwargs.items() if v is not None},
            min_size=0,
            max_size=threads,
            timeout=TIMEOUT_S,
            open=True,
        )
        self.sql = statements

    def _rows(self, sql: str, args: tuple[object, ...]) -> list[tuple[Any, ...]]:
        conn = self.pool.getconn()
        try:
            with psycopg.RawCursor(conn) as cur:
                cur.execute(sql, args, prepare=False)
                return cur.fetchall() if cur.description is not None else []
        finally:
            self.pool.putconn(conn)

    def acquire(self, key: str, owner: str) -> bool:
        rows = self._rows(self.sql.acquire, (key.encode(), owner.encode(), TTL_MS))
        return bool(rows and rows[0][0])

    def renew(self, key: str, owner: str) -> bool:
        return bool(self._rows(self.sql.renew, (key.encode(), owner.encode(), TTL_MS)))

    def transfer(self, key: str, src: str, dst: str) -> bool:
        args = (key.encode(), src.encode(), dst.encode(), TTL_MS)
        return bool(self._rows(self.sql.transfer, args))

    def release(self, key: str, owner: str) -> None:
        self._rows(self.sql.release, (key.encode(), owner.encode()))

    def owner(self, key: str) -> str | None:
        rows = self._rows(self.sql.get_owner, (key.encode(),))
        return bytes(rows[0][0]).decode() if rows else None

    def close(self) -> None:
        self.pool.close()


Work = Callable[[Leases, int, float], tuple[int, int]]  # (ops done, anomalies)


def lifecycle(ops: Leases, worker: int, deadline: float) -> tuple[int, int]:
    a, b = f"w{worker}-a", f"w{worker}-b"
    keys = [f"cycle:{worker}:{i}" for i in range(64)]
    done = bad = i = 0
    while time.perf_counter() < deadline:
        k = keys[i % len(keys)]
        i += 1
        bad += not ops.acquire(k, a)
        bad += not ops.renew(k, a)
        bad += not ops.transfer(k, a, b)
        ops.release(k, b)
        done += 4
    return done, bad


def read(ops: Leases, worker: int, deadline: float, keys: int = READ_KEYS) -> tuple[int, int]:
    rng = random.Random(worker)
    done = bad = 0
    while time.perf_counter() < deadline:
        bad += ops.owner(f"held:{rng.randrange(keys)}") != HOLDER
        done += 1
    return done, bad


CELLS = ("lifecycle", "read")


def measure(ops: Leases, work: Work, threads: int, seconds: float) -> tuple[float, float, int]:
    """``threads`` threads running ``work`` for ``seconds``: ops/s, client CPU µs/op, anomalies."""
    results: list[tuple[int, int]] = []
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)
    deadline = [0.0]

    def run(w: int) -> None:
        start.wait()
        out = work(ops, w, deadline[0])
        with lock:
            results.append(out)

    pool = [threading.Thread(target=run, args=(w,)) for w in range(threads)]
    for t in pool:
        t.start()
    deadline[0] = time.perf_counter() + seconds
    began, cpu = time.perf_counter(), time.process_time()
    start.wait()
    for t in pool:
        t.join()
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    done = sum(d for d, _ in results)
    return done / elapsed, cpu / max(done, 1) * 1e6, sum(b for _, b in results)


def scratch(admin: str) -> tuple[str, str]:
    name = f"sql_lease_bench_sync_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(admin).set(drivername="postgresql", database=name)
    return name, url.render_as_string(hide_password=False)


def drop(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    admin = make_url(args.pg_url).set(drivername="postgresql").render_as_string(False)
    name, dsn = scratch(admin)
    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    rows: list[dict[str, Any]] = []
    try:
        migrate.upgrade(dsn)
        with SqlLeaseProvider.from_url(dsn, pool_size=16) as setup:
            for i in range(args.read_keys):
                setup.acquire_lease(f"held:{i}", HOLDER, 3_600_000)
            statements = setup.statements
        cells: dict[str, Work] = {
            "lifecycle": lifecycle,
            "read": lambda ops, w, deadline: read(ops, w, deadline, args.read_keys),
        }
        for cell in args.cells:
            for threads in args.threads:
                impls: dict[str, Leases] = {
                    "library": Library(dsn, threads),
                    "raw": Raw(dsn, threads, statements),
                }
                try:
                    for ops in impls.values():  # warm-up: connections open, caches hot
                        measure(ops, cells[cell], threads, min(0.3, args.duration))
                    per: dict[str, list[float]] = {"library": [], "raw": []}
                    cpu: dict[str, list[float]] = {"library": [], "raw": []}
                    anomalies = 0
                    for r in range(args.rounds):
                        order = ["library", "raw"] if r % 2 == 0 else ["raw", "library"]
                        for impl in order:
                            rate, us, bad = measure(
                                impls[impl], cells[cell], threads, args.duration
                            )
                            per[impl].append(rate)
                            cpu[impl].append(us)
                            anomalies += bad
                    ratios = [
                        lib / raw for lib, raw in zip(per["library"], per["raw"], strict=True)
                    ]
                    row = {
                        "cell": cell,
                        "threads": threads,
                        "library_ops_s": per["library"],
                        "raw_ops_s": per["raw"],
                        "cpu_us_per_op": cpu,
                        "ratio": statistics.median(ratios),
                        "bar": BARS.get(threads),
                        "anomalies": anomalies,
                    }
                    rows.append(row)
                    log(
                        f"{cell} x{threads}: ratio {row['ratio']:.3f} (rounds"
                        f" {min(ratios):.2f}-{max(ratios):.2f}), CPU/op library"
                        f" {statistics.median(cpu['library']):.0f} µs, raw"
                        f" {statistics.median(cpu['raw']):.0f} µs"
                    )
                finally:
                    for ops in impls.values():
                        ops.close()
    finally:
        drop(admin, name)
    return {
        "benchmark": "sync provider vs raw psycopg (same SQL)",
        "started": started,
        "quick": args.quick,
        "duration_s": args.duration,
        "rounds": args.rounds,
        "results": rows,
        "environment": {
            "python": platform.python_version(),
            "psycopg": psycopg.__version__,
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        "| cell | threads | library ops/s | raw psycopg ops/s | ratio | rounds | bar |"
        " CPU/op library | CPU/op raw | anomalies |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |",
    ]
    for r in report["results"]:
        bar = r["bar"]
        verdict = "-" if bar is None else f">= {bar}x {'ok' if r['ratio'] >= bar else 'MISSED'}"
        ratios = [a / b for a, b in zip(r["library_ops_s"], r["raw_ops_s"], strict=True)]
        cpu = r["cpu_us_per_op"]
        lines.append(
            f"| {r['cell']} | {r['threads']} | {statistics.median(r['library_ops_s']):,.0f} | "
            f"{statistics.median(r['raw_ops_s']):,.0f} | {r['ratio']:.3f}x | "
            f"{min(ratios):.2f}-{max(ratios):.2f} | {verdict} | "
            f"{statistics.median(cpu['library']):.0f} µs | "
            f"{statistics.median(cpu['raw']):.0f} µs | "
            f"{r['anomalies']} |"
        )
    env = report["environment"]
    load = ", ".join(f"{x:.2f}" for x in env["loadavg_before"])
    after = ", ".join(f"{x:.2f}" for x in env["loadavg_after"])
    lines.append(f"\n{env['cpus']} CPUs; load average before: {load}; after: {after}")
    return "\n".join(lines)


def publish(folder: Path, report: dict[str, Any], log: Callable[[str], None]) -> None:
    """``report`` as SYNC_JSON, its section of results.md and its bars in ratios.png.

    The rest of results.md (bench.py's run) is kept as it is; the chart is redrawn from its
    Bars table plus the sync bars (`_report.write_chart` adds those).
    """
    write_json(folder / SYNC_JSON, report)
    md = folder / "results.md"
    text = md.read_text() if md.is_file() else "# sql_lease benchmark results\n"
    head = text.split(HEADING, 1)[0].rstrip("\n") + "\n\n"
    md.write_text(head + "\n".join(sync_section(folder / SYNC_JSON)))
    log(f"wrote {md}")
    if write_chart(folder / "ratios.png", published_bars(md), log):
        log(f"wrote {folder / 'ratios.png'}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pg-url", default=os.environ.get("SQL_LEASE_BENCH_DSN", DEFAULT_PG))
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per round and cell")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--cells", nargs="+", choices=sorted(CELLS), default=sorted(CELLS))
    ap.add_argument("--quick", action="store_true", help="0.3 s rounds, 2 rounds (a smoke run)")
    ap.add_argument("--json", type=Path, default=HERE / "results" / "sync_latest.json")
    ap.add_argument(
        "--publish",
        action="store_true",
        help="also write benchmarks/results_sync.json, results.md (section) and ratios.png",
    )
    args = ap.parse_args(argv)
    args.read_keys = READ_KEYS
    if args.quick:
        args.duration, args.rounds, args.read_keys = 0.3, 2, 100
    if args.duration <= 0 or args.rounds < 1 or min(args.threads) < 1:
        ap.error("--duration, --rounds and --threads must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    report = run(args, log)
    print(render(report))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    log(f"wrote {args.json}")
    if args.publish:
        if args.quick:
            log("--quick results are not published")
        else:
            publish(HERE, report, log)
    anomalies = sum(r["anomalies"] for r in report["results"])
    return 1 if anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
