"""Worker processes for the race tests: each runs its own engine and records what it saw.

Every success is recorded with database times and fences (from the statements' own results), so
the parent can check the invariants in one clock: the database's.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sql_lease import SqlLeaseProvider


@dataclass(frozen=True)
class Event:
    """One completed operation. ``t`` is the database time it took effect (successes)."""

    op: str
    key: str
    owner: str
    ok: bool
    fence: int | None = None
    t: datetime | None = None
    expires: datetime | None = None
    to_owner: str | None = None
    from_fence: int | None = None
    holder: str | None = None
    holder_fence: int | None = None


def hammer(url: str, worker: int, keys: list[str], seconds: float, seed: int) -> dict[str, Any]:
    """Random acquire/renew/transfer/release on hot keys with short TTLs."""
    return asyncio.run(_hammer(url, worker, keys, seconds, seed))


async def _hammer(
    url: str, worker: int, keys: list[str], seconds: float, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    provider = SqlLeaseProvider.from_url(url, timeout=10, pool_size=4)
    events: list[Event] = []
    held: dict[str, tuple[str, int]] = {}  # key -> (owner, fence) as this worker believes
    serial = 0
    deadline = time.monotonic() + seconds

    def new_owner() -> str:
        nonlocal serial
        serial += 1
        return f"w{worker}\0{serial}"

    try:
        while time.monotonic() < deadline:
            key = rng.choice(keys)
            ttl = rng.choice([15, 40, 80, 200])
            mine = held.get(key)
            roll = rng.random()
            if mine is None or roll < 0.1:
                owner = mine[0] if mine is not None else new_owner()
                res = await provider.acquire_lease(key, owner, ttl)
                if res.acquired:
                    assert res.expires_at is not None and res.fence is not None
                    events.append(
                        Event(
                            "acquire",
                            key,
                            owner,
                            True,
                            res.fence,
                            res.expires_at - timedelta(milliseconds=ttl),
                            res.expires_at,
                        )
                    )
                    held[key] = (owner, res.fence)
                else:
                    events.append(
                        Event(
                            "acquire", key, owner, False, holder=res.owner, holder_fence=res.fence
                        )
                    )
                    held.pop(key, None)
                continue
            owner, fence = mine
            if roll < 0.5:
                if roll < 0.13:
                    await asyncio.sleep(0.25)  # a paused owner: its lease expires meanwhile
                renewed = await provider.renew(key, owner, ttl)
                if renewed is None:
                    held.pop(key, None)
                    events.append(Event("renew", key, owner, False, fence))
                else:
                    events.append(
                        Event(
                            "renew",
                            key,
                            owner,
                            True,
                            renewed[0],
                            renewed[1] - timedelta(milliseconds=ttl),
                            renewed[1],
                        )
                    )
            elif roll < 0.7:
                to = new_owner()
                moved = await provider.transfer(key, owner, to, ttl)
                if moved is None:
                    held.pop(key, None)
                    events.append(Event("transfer", key, owner, False, fence, to_owner=to))
                else:
                    events.append(
                        Event(
                            "transfer",
                            key,
                            owner,
                            True,
                            moved[0],
                            moved[1] - timedelta(milliseconds=ttl),
                            moved[1],
                            to_owner=to,
                            from_fence=fence,
                        )
                    )
                    held[key] = (to, moved[0])
            elif roll < 0.9:
                released = await provider.release(key, owner)
                held.pop(key, None)
                if released is not None:
                    events.append(Event("release", key, owner, True, released[0], released[1]))
            else:
                held.pop(key, None)  # walk away: let it expire
                await asyncio.sleep(rng.choice([0, 0.01, 0.05]))
    finally:
        await provider.aclose()
    return {"events": events, "reruns": provider.acquire_reruns, "reads": provider.acquire_reads}


def chain_holder(url: str, key: str, first: str, transfers: int, ttl: int) -> list[str]:
    """Hand ``key`` along a chain of owners with `transfer_lease`; returns the chain."""

    async def run() -> list[str]:
        async with SqlLeaseProvider.from_url(url, timeout=10) as provider:
            chain = [first]
            for i in range(1, transfers + 1):
                nxt = f"chain-{i}"
                assert await provider.transfer_lease(key, chain[-1], nxt, ttl), i
                chain.append(nxt)
                await asyncio.sleep(0)
            return chain

    return asyncio.run(run())


def racer(url: str, worker: int, key: str, seconds: float) -> dict[str, Any]:
    """Hammer ``acquire_lease`` on ``key``; report wins and every holder it was shown."""

    async def run() -> dict[str, Any]:
        wins: list[str] = []
        holders: set[str | None] = set()
        attempts = 0
        deadline = time.monotonic() + seconds
        async with SqlLeaseProvider.from_url(url, timeout=10) as provider:
            while time.monotonic() < deadline:
                attempts += 1
                owner = f"racer-{worker}-{attempts}"
                res = await provider.acquire_lease(key, owner, 60_000)
                if res.acquired:
                    wins.append(owner)
                    await provider.release_lease(key, owner)
                else:
                    holders.add(res.owner)
        return {"wins": wins, "holders": holders, "attempts": attempts}

    return asyncio.run(run())
