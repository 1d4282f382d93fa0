"""Timed workloads and the tallies they feed.

A workload runs ``concurrency`` worker coroutines until a deadline; every call is timed on its
own (``perf_counter_ns``) and counted as one operation. Workers finish the cycle they are in, so
lifecycle keys are always released between runs. Results that contradict the contract (a
lifecycle acquire that fails, a read that does not see the holder) are counted as anomalies.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns, process_time
from typing import Any

from sql_lease import LeaseProvider

__all__ = [
    "TTL_MS",
    "Measurement",
    "Tally",
    "contention_acquire",
    "contention_read",
    "hold",
    "lifecycle",
    "read",
    "renew_round_robin",
    "sequential_renewals",
]

TTL_MS = 30_000
HOLD_TTL_MS = 3_600_000
HOLDER = "holder"

Ops = dict[str, list[int]]
Worker = Callable[[int, int], Awaitable[tuple[Ops, int]]]


@dataclass
class Measurement:
    """One timed run of one implementation."""

    elapsed_s: float
    latencies_ns: Ops
    anomalies: int = 0
    #: CPU time this process spent during the run (client cost: event loop, driver, library).
    cpu_s: float = 0.0

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.latencies_ns.values())


def _percentile(ordered: Sequence[int], q: float) -> float:
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return float(ordered[index])


@dataclass
class Tally:
    """Measurements of one implementation in one cell, pooled over rounds."""

    elapsed_s: float = 0.0
    cpu_s: float = 0.0
    count: int = 0
    anomalies: int = 0
    round_ops_per_s: list[float] = field(default_factory=list)
    op_elapsed_s: dict[str, float] = field(default_factory=dict)
    op_latencies_ns: Ops = field(default_factory=dict)
    #: Per op, one entry per timed run (round): ops_per_s, mean_us, p99_us, elapsed_s.
    op_rounds: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, m: Measurement) -> None:
        self.elapsed_s += m.elapsed_s
        self.cpu_s += m.cpu_s
        self.count += m.count
        self.anomalies += m.anomalies
        if m.elapsed_s > 0:
            self.round_ops_per_s.append(m.count / m.elapsed_s)
        for op, lat in m.latencies_ns.items():
            self.op_elapsed_s[op] = self.op_elapsed_s.get(op, 0.0) + m.elapsed_s
            self.op_latencies_ns.setdefault(op, []).extend(lat)
            if lat and m.elapsed_s > 0:
                self.op_rounds.setdefault(op, []).append(
                    {
                        "ops_per_s": len(lat) / m.elapsed_s,
                        "mean_us": sum(lat) / len(lat) / 1000,
                        "p99_us": _percentile(sorted(lat), 0.99) / 1000,
                        "elapsed_s": m.elapsed_s,
                    }
                )

    def summary(self) -> dict[str, Any]:
        ops: dict[str, Any] = {}
        for op, lat in self.op_latencies_ns.items():
            ordered = sorted(lat)
            elapsed = self.op_elapsed_s[op]
            ops[op] = {
                "count": len(ordered),
                "ops_per_s": len(ordered) / elapsed if elapsed > 0 else 0.0,
                "mean_us": sum(ordered) / len(ordered) / 1000 if ordered else 0.0,
                "p50_us": _percentile(ordered, 0.50) / 1000,
                "p99_us": _percentile(ordered, 0.99) / 1000,
                "rounds": self.op_rounds.get(op, []),
            }
        return {
            "status": "ok",
            "ops_per_s": self.count / self.elapsed_s if self.elapsed_s > 0 else 0.0,
            "count": self.count,
            "elapsed_s": self.elapsed_s,
            "anomalies": self.anomalies,
            "client_cpu_us_per_op": self.cpu_s / self.count * 1e6 if self.count else 0.0,
            "round_ops_per_s": self.round_ops_per_s,
            "ops": ops,
            **({"extra": self.extra} if self.extra else {}),
        }


async def run_workers(concurrency: int, duration_s: float, worker: Worker) -> Measurement:
    """Run ``worker(index, deadline_ns)`` ``concurrency`` times at once; merge what they timed."""
    cpu = process_time()
    start = perf_counter_ns()
    deadline = start + int(duration_s * 1e9)
    results = await asyncio.gather(*(worker(w, deadline) for w in range(concurrency)))
    elapsed = (perf_counter_ns() - start) / 1e9
    cpu = process_time() - cpu
    merged: Ops = {}
    anomalies = 0
    for ops, bad in results:
        anomalies += bad
        for op, lat in ops.items():
            merged.setdefault(op, []).extend(lat)
    return Measurement(elapsed, merged, anomalies, cpu)


def lifecycle(
    ops: LeaseProvider,
    keys_for: Callable[[int], Sequence[str]],
    read_range: int = 0,
) -> Worker:
    """acquire -> renew -> transfer -> release (by the new owner) over each worker's keys.

    With ``read_range`` (the scale cell) every cycle also reads the owner of a random filler key
    ``fill:<1..read_range>``, which ``HOLDER`` holds.
    """

    async def worker(w: int, deadline: int) -> tuple[Ops, int]:
        keys = keys_for(w)
        a, b = f"w{w}-a", f"w{w}-b"
        acq: list[int] = []
        ren: list[int] = []
        tra: list[int] = []
        rel: list[int] = []
        get: list[int] = []
        rng = random.Random(w)
        bad = 0
        i = 0
        now = perf_counter_ns
        while now() < deadline:
            k = keys[i % len(keys)]
            i += 1
            t0 = now()
            got = await ops.acquire_lease(k, a, TTL_MS)
            t1 = now()
            renewed = await ops.renew_lease(k, a, TTL_MS)
            t2 = now()
            moved = await ops.transfer_lease(k, a, b, TTL_MS)
            t3 = now()
            await ops.release_lease(k, b)
            t4 = now()
            acq.append(t1 - t0)
            ren.append(t2 - t1)
            tra.append(t3 - t2)
            rel.append(t4 - t3)
            bad += (not got.acquired) + (not renewed) + (not moved)
            if read_range:
                fill_key = f"fill:{rng.randint(1, read_range)}"
                t0 = now()
                holder = await ops.get_lease_owner(fill_key)
                get.append(now() - t0)
                bad += holder != HOLDER
        out = {
            "acquire_lease": acq,
            "renew_lease": ren,
            "transfer_lease": tra,
            "release_lease": rel,
        }
        if read_range:
            out["get_lease_owner"] = get
        return out, bad

    return worker


async def hold(ops: LeaseProvider, keys: Sequence[str], concurrency: int = 16) -> int:
    """Make ``HOLDER`` hold ``keys`` for an hour; returns how many acquires failed."""
    failed = 0

    async def one(chunk: Sequence[str]) -> None:
        nonlocal failed
        for k in chunk:
            failed += not (await ops.acquire_lease(k, HOLDER, HOLD_TTL_MS)).acquired

    await asyncio.gather(*(one(keys[i::concurrency]) for i in range(concurrency)))
    return failed


def read(ops: LeaseProvider, keys: Sequence[str]) -> Worker:
    """get_lease_owner over held keys; every read must see ``HOLDER``."""

    async def worker(w: int, deadline: int) -> tuple[Ops, int]:
        lat: list[int] = []
        bad = 0
        i = w
        now = perf_counter_ns
        while now() < deadline:
            t0 = now()
            holder = await ops.get_lease_owner(keys[i % len(keys)])
            lat.append(now() - t0)
            bad += holder != HOLDER
            i += 1
        return {"get_lease_owner": lat}, bad

    return worker


def contention_acquire(ops: LeaseProvider, hot_key: str) -> Worker:
    """Everyone tries to acquire a key ``HOLDER`` holds; each attempt must report the holder."""

    async def worker(w: int, deadline: int) -> tuple[Ops, int]:
        lat: list[int] = []
        bad = 0
        me = f"contender-{w}"
        now = perf_counter_ns
        while now() < deadline:
            t0 = now()
            got = await ops.acquire_lease(hot_key, me, TTL_MS)
            lat.append(now() - t0)
            bad += got.acquired or got.owner != HOLDER
        return {"acquire_lease": lat}, bad

    return worker


def contention_read(ops: LeaseProvider, hot_key: str) -> Worker:
    """The same crowd reading the hot key's owner instead."""
    return read(ops, [hot_key])


async def sequential_renewals(
    ops: LeaseProvider, items: Sequence[tuple[str, str]], ttl_ms: int
) -> Measurement:
    """Renew every (key, owner) one call after another (concurrency 1)."""
    lat: list[int] = []
    bad = 0
    now = perf_counter_ns
    cpu = process_time()
    start = now()
    for key, owner in items:
        t0 = now()
        ok = await ops.renew_lease(key, owner, ttl_ms)
        lat.append(now() - t0)
        bad += not ok
    elapsed = (now() - start) / 1e9
    return Measurement(elapsed, {"renew_lease": lat}, bad, process_time() - cpu)


async def renew_round_robin(
    ops: LeaseProvider, keys: Sequence[str], owner: str, total: int, concurrency: int
) -> Measurement:
    """Exactly ``total`` renewals spread over ``keys`` by ``concurrency`` workers."""
    lat: list[int] = []
    bad = 0
    now = perf_counter_ns

    async def worker(w: int) -> None:
        nonlocal bad
        for i in range(w, total, concurrency):
            t0 = now()
            ok = await ops.renew_lease(keys[i % len(keys)], owner, HOLD_TTL_MS)
            lat.append(now() - t0)
            bad += not ok

    cpu = process_time()
    start = now()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = (now() - start) / 1e9
    return Measurement(elapsed, {"renew_lease": lat}, bad, process_time() - cpu)
