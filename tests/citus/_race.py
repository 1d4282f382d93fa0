"""Racing worker processes for the Citus tests: hot keys, acquire / hold / release (the
shard-move, crash and failover races), a counting key's slots (`count_race`) and all-or-none
sets of keys (`all_or_none_race`); the wait for a race to start; the judges of their tenures.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
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


#: A counting grant by database time: key, owner, fence, granted (its expiry less the TTL: the
#: clock the grant read) and released (the time the release reported).
DbTenure = tuple[str, str, int, datetime, datetime]
COUNT_TTL_MS = 30_000


def count_race(
    url: str, process: str, key: str, limit: int, clients: int, seconds: float
) -> tuple[list[DbTenure], int]:
    """``clients`` owners of this process take a slot of ``key`` (``limit``), hold it a few
    milliseconds and release it, for ``seconds``: the grants whose release found them (so they
    were held throughout, from grant to release by database time), and the errors."""
    return asyncio.run(_count_race(url, process, key, limit, clients, seconds))


async def _count_race(
    url: str, process: str, key: str, limit: int, clients: int, seconds: float
) -> tuple[list[DbTenure], int]:
    provider = SqlLeaseProvider.from_url(url, timeout=30)
    tenures: list[DbTenure] = []
    errors = 0
    end = time.monotonic() + seconds
    ttl = timedelta(milliseconds=COUNT_TTL_MS)

    async def client(owner: str) -> None:
        nonlocal errors
        rng = random.Random(owner)
        while time.monotonic() < end:
            try:
                got = await provider.acquire_lease(key, owner, COUNT_TTL_MS, limit=limit)
                if not got.acquired:
                    await asyncio.sleep(0.002)
                    continue
                await asyncio.sleep(rng.uniform(0.005, 0.03))
                released = await provider.release(key, owner)
                if released is not None:
                    assert got.fence is not None and got.expires_at is not None
                    assert released.fence == got.fence, (released, got)
                    start = got.expires_at - ttl
                    tenures.append((key, owner, got.fence, start, released.released_at))
            except Exception:
                errors += 1

    try:
        await asyncio.gather(*(client(f"{process}-{c}") for c in range(clients)))
    finally:
        await provider.aclose()
    return tenures, errors


def most_at_once(tenures: list[DbTenure]) -> int:
    """The most tenures live at one instant of database time (each live from its grant up
    to, not including, its release)."""
    events = [(t[3], 1) for t in tenures] + [(t[4], -1) for t in tenures]
    events.sort(key=lambda e: (e[0], e[1]))  # a release before a grant at the same instant
    live = most = 0
    for _, step in events:
        live += step
        most = max(most, live)
    return most


@dataclass
class AllOrNone:
    """One process's all-or-none race: ``tenures`` (per key, as `race`'s: `judge` them),
    ``errors``, ``refused`` acquires, and ``partial``: refused acquires after which one of the
    set's keys was the process's (a partial grant)."""

    tenures: list[Tenure] = field(default_factory=list)
    errors: int = 0
    refused: int = 0
    partial: int = 0


def all_or_none_race(url: str, owner: str, sets: list[list[str]], seconds: float) -> AllOrNone:
    """Take the ``sets`` of keys in turn with ``acquire_leases`` (each set in a shuffled
    order), hold them a moment and release them with ``release_leases``, for ``seconds``."""
    return asyncio.run(_all_or_none_race(url, owner, sets, seconds))


async def _all_or_none_race(
    url: str, owner: str, sets: list[list[str]], seconds: float
) -> AllOrNone:
    provider = SqlLeaseProvider.from_url(url, timeout=30)
    out = AllOrNone()
    rng = random.Random(owner)
    end = time.monotonic() + seconds
    i = 0
    try:
        while time.monotonic() < end:
            keys = list(sets[i % len(sets)])
            i += 1
            rng.shuffle(keys)
            try:
                got = await provider.acquire_leases(keys, owner, 60_000)
                if not got.acquired:
                    out.refused += 1
                    owners = [await provider.get_lease_owner(k) for k in keys]
                    out.partial += owner in owners
                    await asyncio.sleep(0.001)
                    continue
                assert sorted(got.leases) == sorted(keys), got
                start = time.monotonic()
                await asyncio.sleep(0.002)
                stop = time.monotonic()
                if await provider.release_leases(keys, owner) == len(keys):
                    for k in keys:
                        fence = got.leases[k].fence
                        assert fence is not None
                        out.tenures.append((k, owner, fence, start, stop))
            except Exception:
                out.errors += 1
    finally:
        await provider.aclose()
    return out
