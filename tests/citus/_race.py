"""A racing worker process for the shard-move, crash and failover tests: hot keys, acquire /
hold / release; and the wait for a race to start."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from sql_lease import SqlLeaseProvider

#: One tenure: key, owner, fence, monotonic start (after the grant) and end (before the release).
Tenure = tuple[str, str, int, float, float]


def race(url: str, owner: str, keys: list[str], seconds: float) -> tuple[list[Tenure], int]:
    """Acquire, hold a moment and release the ``keys`` in turn for ``seconds``: the tenures
    whose release found the lease still ours (so it was ours throughout), and the errors."""
    return asyncio.run(_race(url, owner, keys, seconds))


async def _race(url: str, owner: str, keys: list[str], seconds: float) -> tuple[list[Tenure], int]:
    provider = SqlLeaseProvider.from_url(url, timeout=30)
    tenures: list[Tenure] = []
    errors = 0
    end = time.monotonic() + seconds
    i = 0
    try:
        while time.monotonic() < end:
            key = keys[i % len(keys)]
            i += 1
            try:
                got = await provider.acquire_lease(key, owner, 60_000)
                if not got.acquired:
                    await asyncio.sleep(0.001)
                    continue
                start = time.monotonic()
                await asyncio.sleep(0.002)
                stop = time.monotonic()
                if await provider.release(key, owner):
                    assert got.fence is not None
                    tenures.append((key, owner, got.fence, start, stop))
            except Exception:
                errors += 1
    finally:
        await provider.aclose()
    return tenures, errors


def await_taken(db: psycopg.Connection[tuple[Any, ...]], key: str) -> None:
    """Until ``key`` has been taken (the racing processes have started)."""
    for _ in range(300):
        found = db.execute("SELECT count(*) FROM leases WHERE key = %s", (key.encode(),))
        if found.fetchone() == (1,):
            return
        time.sleep(0.1)
    raise AssertionError(f"nobody took {key} in 30 s")


@dataclass
class Verdict:
    """The racers' tenures judged per key: ``overlaps`` (a tenure starting before the previous
    one of its key ended) and ``backwards`` (a fence not above the previous one's)."""

    tenures: list[Tenure]
    errors: int
    by_key: dict[str, list[Tenure]] = field(default_factory=dict)
    overlaps: int = 0
    backwards: int = 0

    def counts(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.by_key.items()}


def judge(results: list[tuple[list[Tenure], int]]) -> Verdict:
    """The `race` results of every process, judged."""
    verdict = Verdict([t for ts, _ in results for t in ts], sum(e for _, e in results))
    for t in verdict.tenures:
        verdict.by_key.setdefault(t[0], []).append(t)
    for ts in verdict.by_key.values():
        ts.sort(key=lambda t: t[3])
        for a, b in itertools.pairwise(ts):
            verdict.overlaps += b[3] < a[4]
            verdict.backwards += b[2] <= a[2]
    return verdict
