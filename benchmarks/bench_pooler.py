"""Throughput through PgBouncer transaction pooling vs direct, side by side, per concurrency.

    python benchmarks/bench_pooler.py                 # 5 alternating rounds of 2 s, clients 1,16,64
    python benchmarks/bench_pooler.py --quick         # smoke run: 1 round of 0.3 s, clients 1,16
    python benchmarks/bench_pooler.py --rounds 6 --duration 5 --clients 4,32 --json out.json

Every concurrency in ``--clients`` (comma-separated, default ``1,16,64``) is its own set of
cells, named with it (``lifecycle_c1``, ``read_c1``, ``raw_c1``, ``lifecycle_c16``...). In each
cell N concurrent callers work on their own keys (no contention: this measures the pooler's
cost): ``lifecycle_cN`` loops acquire -> renew -> release, ``read_cN`` loops
``get_lease_owner`` on a held key, ``raw_cN`` is the floor without sql_lease (below). Variants
of the lifecycle and read cells (``--variants`` picks a subset; ``direct`` always runs):

- ``direct``: `SqlLeaseProvider.from_url` with its defaults (asyncpg, named statements cached
  per connection, timeouts as startup parameters);
- ``direct-unnamed``: the same with asyncpg's statement cache off (every statement parsed and
  planned again: what any pooler-safe mode costs the server);
- ``direct-psycopg``: ``pooler="transaction"`` straight to the server (the psycopg wire of the
  next variant without the pooler: what the pooler itself costs is the gap between the two);
- ``pgbouncer-tx``: ``pooler="transaction"`` through a PgBouncer started here (transaction
  mode, ``--pool-size`` server connections (default 20), its default settings): psycopg,
  one simple-protocol round trip per call on the connection's libpq handle (`psycopg_wire`),
  the server-side timeouts set inside it, the hot statements as calls of the plpgsql
  functions of revision 0005 (plans kept per server session);
- ``pgbouncer-tx-one-batch``: ``pgbouncer-tx`` with one multi-row statement per coalescer in
  flight at a time, as straight to a server (`sql_lease.backends.postgres`'s
  ``POOLED_READ_BATCHES`` and ``POOLED_WRITE_BATCHES`` taken as 1): what more than one batch
  in flight behind the pooler gains;
- ``pgbouncer-tx-plain``: the same against a database at revision 0004, without the server
  functions of revision 0005 (the provider falls back to the plain statements, each parsed and
  planned by the server on every call): what ``pgbouncer-tx`` cost before 0005;
- ``pgbouncer-tx-asyncpg``: the asyncpg pooler mode (``pooler="session"`` settings: unnamed
  statements, two round trips each, no server-side timeouts) through the same PgBouncer; what
  ``pooler="transaction"`` did before it ran on psycopg;
- ``sync-direct`` and ``sync-pgbouncer-tx``: the sync provider (`sql_lease.sync`, N threads
  sharing one provider with a pool of N connections, `_pooler_sync`) straight to the server
  (its defaults: psycopg, binary, prepared statements) and with ``pooler="transaction"``
  through the same PgBouncer (one ``PQexec`` per call: the server functions' calls with the
  ``SET LOCAL`` prefix): ``sync-pgbouncer-tx / sync-direct`` is the sync pooler mode's cost;
- ``redis``: the Redis/Lua reference of ``bench.py`` (``_impls.RedisLuaLeases``: ``SET NX PX``
  and compare-and-act Lua scripts as Mastra's provider, redis-py asyncio with hiredis, a pool
  of N connections) on ``--redis-url``; its ``server`` CPU column is the ``redis-server``
  process's.

The ``raw_cN`` cells (always run) measure the bare driver cost of one round trip of the read
statement, the catalogue's ``get_owner`` SQL, on keys held for the whole run:

- ``raw-direct``: N asyncpg connections straight to the server, each looping the statement
  prepared on it (one Bind/Execute/Sync round trip per call);
- ``raw-pgbouncer``: N psycopg connections (autocommit, ``prepare_threshold=None``) through the
  same PgBouncer, each looping the same read as one simple-protocol query, the key bound client
  side as psycopg's literal (what ``psycopg.AsyncClientCursor`` would send) and the query sent
  straight on the libpq handle (``PQsendQuery``, one wait for the socket; psycopg's cursor
  would add its own client CPU: ~10% fewer reads at one caller here);
- ``raw-direct-simple``: the loop of ``raw-pgbouncer`` straight to the server. It splits the
  gap in two: ``raw-direct-simple / raw-direct`` is what the pooler-safe form costs without a
  pooler (psycopg over libpq instead of asyncpg, and the server parsing and planning the
  statement text on every call: PgBouncer 1.18 keeps no prepared statements in transaction
  mode), ``raw-pgbouncer / raw-direct-simple`` what the pooler's hop itself costs.

The ratio ``raw-pgbouncer / raw-direct`` (an ``info`` line per concurrency, next to the hop
alone and the ``pgbouncer-tx`` ratios of the library cells) is the ceiling of what any client
reaches through this pooler at that concurrency for unbatched round trips of a plain
statement: at one caller the pooler's own work on every round trip (its CPU, its wake-ups, one
more loopback hop each way) sits on the serial path of every call, and no client library can
hide it. It is not a bound on the library everywhere: at 16 and 64 callers the library
coalesces concurrent calls into shared statements, so ``pgbouncer-tx`` can beat it there, and
the plpgsql functions of revision 0005 spare the server part of the planning the plain
statement costs on every call.

The headline (printed last, and ``headline`` in the JSON) is the issue's table: per lifecycle
and read cell, ``pgbouncer-tx`` ops/s, ``pgbouncer-tx / direct`` and ``pgbouncer-tx / redis``,
each the median of the per-round ratios (each round against that round's run of the other
variant, the same moment's machine noise; ``round_median`` in the JSON) and their range.

Rounds alternate the variants within each cell (reversed every other round) so machine noise
hits them alike. Prints a table per cell and variant: median ops/s over the rounds, ``x
direct`` (that median over the median of the cell's base: ``direct``, or ``raw-direct`` in the
raw cells) and its range over the rounds (each round against that round's base: the same
moment's machine noise), and the median CPU per operation of the client process, of the bench
databases' server backends and of the PgBouncer process, from ``/proc``. With ``--json``,
writes the same keyed ``cell/variant`` plus the ``info`` lines. Under a saturated machine (2
cores shared by all three) a ratio follows the total CPU per operation. Needs the
``pgbouncer`` binary and the local server (``--pg-url``; trust auth). Opens at most the largest
concurrency plus ``--pool-size`` server connections per database plus one.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
import redis
from psycopg import pq
from psycopg.adapt import Transformer
from redis.exceptions import RedisError
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _impls import RedisLuaLeases
from _pooler_sync import measure_sync

from sql_lease import LeaseError, SqlLeaseProvider, migrate
from sql_lease.backends import postgres as postgres_backend
from sql_lease.backends.postgres.catalogue import build_catalogue
from tests.infra.pgbouncer import PgBouncer

CELLS = ("lifecycle", "read")
VARIANTS = (
    "direct",
    "direct-unnamed",
    "direct-psycopg",
    "pgbouncer-tx",
    "pgbouncer-tx-one-batch",
    "pgbouncer-tx-plain",
    "pgbouncer-tx-asyncpg",
    "sync-direct",
    "sync-pgbouncer-tx",
    "redis",
)
RAW = ("raw-direct", "raw-direct-simple", "raw-pgbouncer")
GET_OWNER = build_catalogue("leases", None).get_owner.sql
RAW_TTL_MS = 24 * 3600 * 1000  # the raw keys stay held for the whole run
FAILURES = (LeaseError, asyncpg.PostgresError, psycopg.Error, OSError, RedisError)
REDIS_PREFIX = f"sql_lease_bench_pooler:{uuid.uuid4().hex[:8]}:"  # this run's Redis keys

Costs = tuple[float, float, float]  # CPU us per operation: client, server, pooler
Measured = tuple[float, Costs]  # ops/s, CPU per operation
Target = tuple[str, dict[str, Any]]  # URL or libpq DSN, provider options
Call = Callable[[], Awaitable[object]]


def _ticks(pids: list[int]) -> dict[tuple[int, int], int]:
    """User + system CPU (clock ticks) so far of processes ``pids``, keyed by (pid, start
    time): a pid reused by a new process is another key. Processes gone are left out."""
    found = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[(pid, int(fields[19]))] = int(fields[11]) + int(fields[12])  # utime + stime
    return found


Ticks = tuple[float, dict[tuple[int, int], int], dict[tuple[int, int], int]]


class Cpu:
    """CPU of the client (this process), the server backends of the bench databases and the
    pooler (its pid file), read around each measurement. A backend started during the run
    counts whole; one that ended during it loses its share (PgBouncer closes idle server
    connections), never more."""

    def __init__(
        self,
        admin: dict[str, Any],
        dbs: list[str],
        bouncer_pid: int | None,
        redis_pid: int | None = None,
    ) -> None:
        self.admin, self.dbs = admin, dbs
        self.pooler = [bouncer_pid] if bouncer_pid else []
        self.redis = [redis_pid] if redis_pid else []

    def backends(self) -> list[int]:
        """The bench databases' server backends, and ``redis-server`` (idle but in its runs)."""
        with psycopg.connect(**self.admin, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = ANY(%s)", (self.dbs,)
            ).fetchall()
        return [int(pid) for (pid,) in rows] + self.redis

    def snapshot(self) -> Ticks:
        return time.process_time(), _ticks(self.backends()), _ticks(self.pooler)

    def since(self, before: Ticks) -> tuple[float, float, float]:
        """CPU seconds (client, server, pooler) since ``before``."""
        client, server, pooler = before
        now_pooler, now_server = _ticks(self.pooler), _ticks(self.backends())
        tick = os.sysconf("SC_CLK_TCK")
        return (
            time.process_time() - client,
            sum(t - server.get(key, 0) for key, t in now_server.items()) / tick,
            sum(t - pooler.get(key, 0) for key, t in now_pooler.items()) / tick,
        )


class Clock:
    """The deadline and the operation count shared by the client loops of one run."""

    def __init__(self) -> None:
        self.stop = 0.0
        self.done = 0

    def running(self) -> bool:
        return time.monotonic() < self.stop


async def timed(
    clients: int,
    seconds: float,
    cpu: Cpu | None,
    client: Callable[[int, Clock], Awaitable[None]],
) -> Measured:
    """A warm-up (every connection opened), then ``client(n, clock)`` for every caller until
    the deadline: operations per second and CPU per operation of the timed part."""
    clock = Clock()
    clock.stop = time.monotonic() + min(0.5, seconds)
    await asyncio.gather(*(client(n, clock) for n in range(clients)))
    clock.done = 0
    before = cpu.snapshot() if cpu else None
    started = time.monotonic()
    clock.stop = started + seconds
    await asyncio.gather(*(client(n, clock) for n in range(clients)))
    rate = clock.done / (time.monotonic() - started)
    if cpu is None or before is None or not clock.done:
        return rate, (0.0, 0.0, 0.0)
    client_s, server_s, pooler_s = cpu.since(before)
    done = clock.done
    return rate, (client_s * 1e6 / done, server_s * 1e6 / done, pooler_s * 1e6 / done)


async def measure(
    cell: str,
    url: str,
    options: dict[str, Any],
    clients: int,
    seconds: float,
    cpu: Cpu | None = None,
) -> Measured:
    """One run of a library cell (``lifecycle`` or ``read``) on a fresh provider (the
    Redis/Lua reference for a ``redis://`` URL)."""
    provider: SqlLeaseProvider | RedisLuaLeases
    if url.startswith("redis"):
        provider = RedisLuaLeases.open(url, REDIS_PREFIX, clients)
    else:
        options = dict(options)
        pg = postgres_backend
        usual = pg.POOLED_READ_BATCHES, pg.POOLED_WRITE_BATCHES
        batches = options.pop("batches_in_flight", usual)
        pg.POOLED_READ_BATCHES, pg.POOLED_WRITE_BATCHES = batches  # type: ignore[misc]
        try:  # the plan reads them as the provider is built
            provider = SqlLeaseProvider.from_url(
                url, timeout=10, pool_size=clients, max_overflow=0, **options
            )
        finally:
            pg.POOLED_READ_BATCHES, pg.POOLED_WRITE_BATCHES = usual  # type: ignore[misc]

    async def client(n: int, clock: Clock) -> None:
        key, owner = f"bench-{cell}-{n}", f"owner-{n}"
        if cell == "read":
            await provider.acquire_lease(key, owner, 600_000)
        while clock.running():
            if cell == "lifecycle":
                await provider.acquire_lease(key, owner, 10_000)
                await provider.renew_lease(key, owner, 10_000)
                await provider.release_lease(key, owner)
                clock.done += 3
            else:
                await provider.get_lease_owner(key)
                clock.done += 1

    try:
        return await timed(clients, seconds, cpu, client)
    finally:
        await provider.aclose()


def raw_key(n: int) -> bytes:
    """The raw cells' key of caller ``n`` as stored (``bytea``: the key's UTF-8)."""
    return f"bench-raw-{n}".encode()


async def seed_raw(url: str, clients: int) -> None:
    """Hold the keys the raw cells read, one per caller, for the whole run."""
    provider = SqlLeaseProvider.from_url(url, timeout=10)
    try:
        for n in range(clients):
            await provider.acquire_lease(raw_key(n).decode(), f"owner-{n}", RAW_TTL_MS)
    finally:
        await provider.aclose()


async def _ready(fd: int, write: bool) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    (loop.add_writer if write else loop.add_reader)(fd, ready.set_result, None)
    try:
        await ready
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def simple_query(pgconn: pq.abc.PGconn, query: bytes) -> bytes | None:
    """One simple-protocol round trip on a non-blocking libpq handle: the first column of
    the first row of the last result, or None when it has no row."""
    pgconn.send_query(query)
    while pgconn.flush():
        await _ready(pgconn.socket, write=True)
    value: bytes | None = None
    while True:
        while pgconn.is_busy():
            await _ready(pgconn.socket, write=False)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            return value
        if result.status != pq.ExecStatus.TUPLES_OK:
            raise psycopg.OperationalError((result.error_message or b"").decode(errors="replace"))
        value = result.get_value(0, 0) if result.ntuples else None


def simple_reader(conn: psycopg.AsyncConnection[Any], key: bytes) -> Call:
    """The read as one simple-protocol query, the key bound client side on every call."""
    head, tail = (part.encode() for part in GET_OWNER.split("$1"))
    pgconn, literal = conn.pgconn, Transformer(conn).as_literal

    async def call() -> bytes | None:
        return await simple_query(pgconn, head + literal(key) + tail)

    return call


async def run_calls(calls: list[Call], seconds: float, cpu: Cpu | None) -> Measured:
    """Caller ``n`` loops ``calls[n]`` (after checking that it finds its row)."""
    for n, call in enumerate(calls):
        if await call() is None:
            raise RuntimeError(f"raw key {raw_key(n)!r} is not held: the read found no row")

    async def client(n: int, clock: Clock) -> None:
        call = calls[n]
        while clock.running():
            await call()
            clock.done += 1

    return await timed(len(calls), seconds, cpu, client)


async def measure_raw(
    name: str, target: str, clients: int, seconds: float, cpu: Cpu | None = None
) -> Measured:
    """One run of a raw cell: ``clients`` connections of the bare driver, one per caller
    (``raw-direct``: asyncpg, prepared; the others: psycopg, simple-protocol queries)."""
    if name == "raw-direct":
        direct: list[asyncpg.Connection] = []
        try:
            for _ in range(clients):
                direct.append(await asyncpg.connect(target))
            statements = [await conn.prepare(GET_OWNER) for conn in direct]
            calls: list[Call] = [
                functools.partial(s.fetchval, raw_key(n)) for n, s in enumerate(statements)
            ]
            return await run_calls(calls, seconds, cpu)
        finally:
            await asyncio.gather(*(conn.close() for conn in direct))
    pooled: list[psycopg.AsyncConnection[Any]] = []
    try:
        for _ in range(clients):
            pooled.append(
                await psycopg.AsyncConnection.connect(
                    target, autocommit=True, prepare_threshold=None
                )
            )
        calls = [simple_reader(conn, raw_key(n)) for n, conn in enumerate(pooled)]
        return await run_calls(calls, seconds, cpu)
    finally:
        for conn in pooled:
            await conn.close()


@dataclass
class Results:
    """Per (cell, variant): ops/s by round, CPU per operation per run; failures by name."""

    rates: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)
    costs: dict[tuple[str, str], list[Costs]] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)


def run_one(
    results: Results,
    round_: int,
    cell: str,
    clients: int,
    name: str,
    target: Target,
    seconds: float,
    cpu: Cpu,
) -> None:
    """One run of ``name`` in ``cell`` at ``clients``, recorded (a failure too)."""
    label = f"{cell}_c{clients}"
    url, options = target
    try:
        if cell == "raw":
            rate, per_op = asyncio.run(measure_raw(name, url, clients, seconds, cpu))
        elif name.startswith("sync-"):
            rate, per_op = measure_sync(cell, url, options, clients, seconds, cpu)
        else:
            rate, per_op = asyncio.run(measure(cell, url, options, clients, seconds, cpu))
    except FAILURES as exc:  # counted, not hidden: the table shows it
        results.failures.setdefault(f"{label}/{name}", []).append(str(exc))
        print(f"round {round_ + 1} {label:14s} {name:21s} FAILED: {exc}", flush=True)
        return
    results.rates.setdefault((label, name), {})[round_] = rate
    results.costs.setdefault((label, name), []).append(per_op)
    print(
        f"round {round_ + 1} {label:14s} {name:21s} {rate:9.0f} ops/s  "
        "CPU us/op client {:5.0f} server {:5.0f} pooler {:5.0f}".format(*per_op),
        flush=True,
    )


def cell_plan(
    concurrencies: list[int], variants: list[str], raw: bool = True
) -> list[tuple[int, str, list[str]]]:
    """(clients, cell, variants) in the order of a round (``raw``: the raw cells too)."""
    cells = [*((cell, variants) for cell in CELLS), *([("raw", list(RAW))] if raw else [])]
    return [(clients, cell, names) for clients in concurrencies for cell, names in cells]


def run_rounds(
    args: argparse.Namespace, variants: list[str], targets: dict[str, Target], cpu: Cpu
) -> Results:
    results = Results()
    for r in range(args.rounds):
        for clients, cell, names in cell_plan(args.clients, variants, not args.no_raw):
            for name in names if r % 2 == 0 else names[::-1]:
                run_one(results, r, cell, clients, name, targets[name], args.duration, cpu)
    return results


def paired(results: Results, cell: str, name: str, base: str) -> dict[str, Any]:
    """``name`` over ``base`` in ``cell``: the ratio of their medians and its range over the
    rounds, each round against that round's ``base`` (None without a base)."""
    rates, bases = results.rates.get((cell, name), {}), results.rates.get((cell, base), {})
    ratios = [rate / bases[r] for r, rate in rates.items() if r in bases]
    if not ratios:
        return {"ratio_to_direct": None, "ratio_range": None, "round_median": None}
    ratio = statistics.median(rates.values()) / statistics.median(bases.values())
    return {
        "ratio_to_direct": ratio,
        "ratio_range": [min(ratios), max(ratios)],
        "round_median": statistics.median(ratios),
    }


def row(results: Results, cell: str, name: str) -> dict[str, Any]:
    """A table row: medians, the ratio to the cell's base and its range over the rounds."""
    rates = results.rates[(cell, name)]
    base = "raw-direct" if cell.startswith("raw_") else "direct"
    costs = results.costs[(cell, name)]
    cpu_median = [statistics.median(c[i] for c in costs) for i in range(3)]
    return {
        "median_ops_per_s": statistics.median(rates.values()),
        **paired(results, cell, name, base),
        "cpu_us_per_op": dict(zip(("client", "server", "pooler"), cpu_median, strict=True)),
        "rounds": [rates[r] for r in sorted(rates)],
        "failed_rounds": len(results.failures.get(f"{cell}/{name}", [])),
    }


def _ratio(entry: dict[str, Any], key: str = "ratio_to_direct") -> str:
    """``0.85 0.80-0.90`` (or ``n/a`` without a base)."""
    if entry[key] is None:
        return f"{'n/a':>5s} {'':11s}"
    low, high = entry["ratio_range"]
    return f"{entry[key]:5.2f} {low:5.2f}-{high:4.2f}"


def report(
    results: Results, concurrencies: list[int], variants: list[str], raw: bool = True
) -> dict[str, Any]:
    """Print the table (canonical order) and return it keyed ``cell/variant``."""
    table: dict[str, dict[str, Any]] = {}
    print(
        f"\n{'cell':14s} {'variant':21s} {'ops/s (median)':>15s} {'x direct':>9s} {'range':>11s}"
        "  CPU us/op (median): client server pooler"
    )
    for clients, cell, names in cell_plan(concurrencies, variants, raw):
        label = f"{cell}_c{clients}"
        for name in names:
            if (label, name) not in results.rates:
                print(f"{label:14s} {name:21s} {'all rounds failed':>15s}")
                continue
            entry = table[f"{label}/{name}"] = row(results, label, name)
            print(
                f"{label:14s} {name:21s} {entry['median_ops_per_s']:15.0f}     {_ratio(entry)}"
                "  {client:6.0f} {server:6.0f} {pooler:6.0f}".format(**entry["cpu_us_per_op"])
            )
    return table


def info(results: Results, table: dict[str, Any], concurrencies: list[int]) -> dict[str, Any]:
    """Print and return, per concurrency, the ceiling raw-pgbouncer / raw-direct, the pooler's
    hop alone (raw-pgbouncer / raw-direct-simple), and the library's pgbouncer-tx / direct."""
    lines: dict[str, Any] = {}
    print(
        "\ninfo: ceiling through the pooler for unbatched round trips (raw-pgbouncer / "
        "raw-direct), the hop alone (/ raw-direct-simple), the library's pgbouncer-tx / direct"
    )
    for clients in concurrencies:
        cell = f"raw_c{clients}"
        ceiling = paired(results, cell, "raw-pgbouncer", "raw-direct")
        if ceiling["ratio_to_direct"] is None:
            print(f"info {cell:9s} n/a (a raw variant failed in every round)")
            continue
        hop = paired(results, cell, "raw-pgbouncer", "raw-direct-simple")
        library = {
            f"{kind}_c{clients}": table[key]["ratio_to_direct"]
            for kind in CELLS
            if (key := f"{kind}_c{clients}/pgbouncer-tx") in table
            and table[key]["ratio_to_direct"] is not None
        }
        lines[cell] = {"ceiling": ceiling, "pooler_hop": hop, "pgbouncer-tx": library}
        shown = "  ".join(f"{name} {ratio:.2f}" for name, ratio in library.items())
        print(f"info {cell:9s} ceiling {_ratio(ceiling)}  hop {_ratio(hop)}  pgbouncer-tx: {shown}")
    return lines


def headline(results: Results, concurrencies: list[int]) -> dict[str, Any]:
    """Print and return the issue's table: per lifecycle and read cell, ``pgbouncer-tx``'s
    median ops/s, its ratio to ``direct`` and to ``redis``: the median of the per-round
    ratios (each round against the same round's run: the same moment's machine noise), and
    their range."""
    lines: dict[str, Any] = {}
    print(f"\n{'cell':14s} {'pooled ops/s':>12s}  {'pooled / direct':>17s}", end="")
    print(f"  {'pooled / redis':>17s}")
    for clients in concurrencies:
        for kind in CELLS:
            cell = f"{kind}_c{clients}"
            rates = results.rates.get((cell, "pgbouncer-tx"))
            if not rates:
                continue
            entry = {
                "pooled_ops_per_s": statistics.median(rates.values()),
                "pooled_direct": paired(results, cell, "pgbouncer-tx", "direct"),
                "pooled_redis": paired(results, cell, "pgbouncer-tx", "redis"),
            }
            lines[cell] = entry
            print(
                f"{cell:14s} {entry['pooled_ops_per_s']:12.0f}"
                f"  {_ratio(entry['pooled_direct'], 'round_median')}"
                f"  {_ratio(entry['pooled_redis'], 'round_median')}"
            )
    return lines


def sync_pooled(results: Results, concurrencies: list[int]) -> dict[str, Any]:
    """Print and return, per cell, ``sync-pgbouncer-tx / sync-direct`` (the sync provider's
    pooler mode against its direct mode; medians of the per-round ratios, as `headline`)."""
    lines: dict[str, Any] = {}
    for clients in concurrencies:
        for kind in CELLS:
            cell = f"{kind}_c{clients}"
            if (cell, "sync-pgbouncer-tx") not in results.rates:
                continue
            lines[cell] = entry = paired(results, cell, "sync-pgbouncer-tx", "sync-direct")
            if entry["round_median"] is not None:
                print(f"sync {cell:14s} pooled / direct {_ratio(entry, 'round_median')}")
    return lines


def redis_pid(url: str) -> int | None:
    """The ``redis-server`` process id (for its CPU column), None when Redis is not there."""
    try:
        client = redis.Redis.from_url(url, socket_timeout=2)
        try:
            return int(client.info("server")["process_id"])
        finally:
            client.close()
    except RedisError:
        return None


def forget_redis_keys(url: str) -> None:
    """Delete this run's Redis keys (the read cells hold theirs for 10 minutes)."""
    try:
        client = redis.Redis.from_url(url, socket_timeout=5)
        try:
            for key in client.scan_iter(match=REDIS_PREFIX + "*", count=1000):
                client.delete(key)
        finally:
            client.close()
    except RedisError:
        pass


def concurrency_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,16,64: {text!r}")
    return values


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--rounds", type=int, help="default 5 (1 with --quick)")
    ap.add_argument("--duration", type=float, help="seconds per run: 2 (0.3 with --quick)")
    ap.add_argument("--clients", type=concurrency_list, help="default 1,16,64 (1,16 --quick)")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    ap.add_argument("--pool-size", type=int, default=20)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--variants", help="comma-separated subset of the variants ('direct' first)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 round of 0.3 s, 1,16")
    ap.add_argument("--no-raw", action="store_true", help="leave out the raw_cN cells")
    args = ap.parse_args()
    quick = args.quick
    args.rounds = args.rounds or (1 if quick else 5)
    args.duration = args.duration or (0.3 if quick else 2.0)
    args.clients = args.clients or ([1, 16] if quick else [1, 16, 64])
    chosen = args.variants.split(",") if args.variants else list(VARIANTS)
    if unknown := set(chosen) - set(VARIANTS):
        ap.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    args.variants = ["direct", *(v for v in VARIANTS if v in chosen and v != "direct")]
    return args


def targets(
    direct: str, bouncer: PgBouncer, db: str, old: str, redis_url: str
) -> dict[str, Target]:
    pooled = bouncer.url(db)
    return {
        "redis": (redis_url, {}),
        "direct": (direct, {}),
        "direct-unnamed": (direct, {"connect_args": {"statement_cache_size": 0}}),
        "direct-psycopg": (direct, {"pooler": "transaction"}),
        "pgbouncer-tx": (pooled, {"pooler": "transaction"}),
        "pgbouncer-tx-one-batch": (
            pooled,
            {"pooler": "transaction", "batches_in_flight": (1, 1)},
        ),
        "pgbouncer-tx-plain": (bouncer.url(old), {"pooler": "transaction"}),
        "pgbouncer-tx-asyncpg": (pooled, {"pooler": "session"}),
        "sync-direct": (direct, {}),
        "sync-pgbouncer-tx": (pooled, {"pooler": "transaction"}),
        "raw-direct": (direct, {}),
        "raw-direct-simple": (direct, {}),
        "raw-pgbouncer": (bouncer.dsn(db), {}),
    }


def main() -> int:
    args = parse_args()
    server = make_url(args.pg_url)
    db = f"sql_lease_bench_pooler_{uuid.uuid4().hex[:8]}"
    old = f"{db}_0004"  # without the server functions (revision 0005)
    admin = {
        "host": server.host,
        "port": server.port,
        "user": server.username,
        "dbname": server.database,
    }
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
    load = [os.getloadavg()]
    started = time.monotonic()
    try:
        migrate.upgrade(direct)
        migrate.upgrade(server.set(database=old).render_as_string(hide_password=False), "0004")
        asyncio.run(seed_raw(direct, max(args.clients)))
        bouncer.start()
        pid_file = bouncer.base / "pgbouncer.pid"
        bouncer_pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
        cpu = Cpu(admin, [db, old], bouncer_pid, redis_pid(args.redis_url))
        chosen = targets(direct, bouncer, db, old, args.redis_url)
        results = run_rounds(args, args.variants, chosen, cpu)
    finally:
        bouncer.stop()
        forget_redis_keys(args.redis_url)
        with psycopg.connect(**admin, autocommit=True) as conn:  # type: ignore[arg-type]
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            conn.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
    load.append(os.getloadavg())
    table = report(results, args.clients, args.variants, not args.no_raw)
    lines = {} if args.no_raw else info(results, table, args.clients)
    top = headline(results, args.clients)
    sync = sync_pooled(results, args.clients)
    elapsed = time.monotonic() - started
    print(f"\n{elapsed:.0f} s; load average before {load[0][0]:.2f}, after {load[1][0]:.2f}")
    meta = {
        "clients": args.clients,
        "pool_size": args.pool_size,
        "redis_url": args.redis_url,
        "duration_s": args.duration,
        "rounds": args.rounds,
        "load_average_1min": [load[0][0], load[1][0]],
    }
    if args.json:
        document = {
            "settings": meta,
            "headline": top,
            "sync": sync,
            "results": table,
            "info": lines,
            "failures": results.failures,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
