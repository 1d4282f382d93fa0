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


@dataclass(frozen=True)
class Step:
    """What a hammering client does next: sleep ``pause`` seconds, then ``call`` (a provider
    method named by its reporting form) with ``args``, or nothing when ``call`` is None."""

    call: str | None
    args: tuple[Any, ...] = ()
    pause: float = 0.0


class Hammer:
    """One client's random acquire/renew/transfer/release on hot keys with short TTLs.

    The same script serves the async and the sync race tests: `step` says what to do next,
    `record` takes the call's result and keeps the `Event`s (database times and fences from
    the statements' own results).
    """

    def __init__(self, rng: random.Random, keys: list[str], prefix: str) -> None:
        self._rng, self._keys, self._prefix = rng, keys, prefix
        self.events: list[Event] = []
        self._held: dict[str, tuple[str, int]] = {}  # key -> (owner, fence) as believed
        self._serial = 0
        self._ttl = 0

    def _new_owner(self) -> str:
        self._serial += 1
        return f"{self._prefix}{self._serial}"

    def step(self) -> Step:
        rng = self._rng
        key = rng.choice(self._keys)
        ttl = self._ttl = rng.choice([15, 40, 80, 200])
        mine = self._held.get(key)
        roll = rng.random()
        if mine is None or roll < 0.1:
            owner = mine[0] if mine is not None else self._new_owner()
            return Step("acquire_lease", (key, owner, ttl))
        owner, _ = mine
        if roll < 0.5:  # a paused owner (0.25 s): its lease expires meanwhile
            return Step("renew", (key, owner, ttl), 0.25 if roll < 0.13 else 0.0)
        if roll < 0.7:
            return Step("transfer", (key, owner, self._new_owner(), ttl))
        if roll < 0.9:
            return Step("release", (key, owner))
        self._held.pop(key, None)  # walk away: let it expire
        return Step(None, pause=rng.choice([0, 0.01, 0.05]))

    def record(self, step: Step, result: Any) -> None:
        key, owner = step.args[0], step.args[1]
        ttl = timedelta(milliseconds=self._ttl)
        fence = self._held[key][1] if key in self._held else None
        events = self.events
        if step.call == "acquire_lease":
            if result.acquired:
                assert result.expires_at is not None and result.fence is not None
                start = result.expires_at - ttl
                events.append(
                    Event("acquire", key, owner, True, result.fence, start, result.expires_at)
                )
                self._held[key] = (owner, result.fence)
            else:
                events.append(
                    Event(
                        "acquire", key, owner, False, holder=result.owner, holder_fence=result.fence
                    )
                )
                self._held.pop(key, None)
        elif step.call == "renew":
            if result is None:
                self._held.pop(key, None)
                events.append(Event("renew", key, owner, False, fence))
            else:
                events.append(
                    Event("renew", key, owner, True, result[0], result[1] - ttl, result[1])
                )
        elif step.call == "transfer":
            to = step.args[2]
            if result is None:
                self._held.pop(key, None)
                events.append(Event("transfer", key, owner, False, fence, to_owner=to))
            else:
                start = result[1] - ttl
                events.append(
                    Event(
                        "transfer",
                        key,
                        owner,
                        True,
                        result[0],
                        start,
                        result[1],
                        to_owner=to,
                        from_fence=fence,
                    )
                )
                self._held[key] = (to, result[0])
        else:
            self._held.pop(key, None)
            if result is not None:
                events.append(Event("release", key, owner, True, result[0], result[1]))


def hammer(
    url: str, worker: int, keys: list[str], seconds: float, seed: int, pooler: str | None = None
) -> dict[str, Any]:
    """Random acquire/renew/transfer/release on hot keys with short TTLs (``pooler``: as
    `SqlLeaseProvider.from_url`'s)."""
    return asyncio.run(_hammer(url, worker, keys, seconds, seed, pooler))


async def _hammer(
    url: str, worker: int, keys: list[str], seconds: float, seed: int, pooler: str | None
) -> dict[str, Any]:
    script = Hammer(random.Random(seed), keys, f"w{worker}\0")
    provider = SqlLeaseProvider.from_url(url, timeout=10, pool_size=4, pooler=pooler)
    calls = {
        "acquire_lease": provider.acquire_lease,
        "renew": provider.renew,
        "transfer": provider.transfer,
        "release": provider.release,
    }
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            step = script.step()
            if step.pause:
                await asyncio.sleep(step.pause)
            if step.call is not None:
                script.record(step, await calls[step.call](*step.args))
    finally:
        await provider.aclose()
    return {
        "events": script.events,
        "reruns": provider.acquire_reruns,
        "reads": provider.acquire_reads,
    }


def chain_holder(url: str, key: str, first: str, transfers: int, ttl: int) -> list[str]:
    """Hand ``key`` along a chain of owners with `transfer_lease`; returns the chain."""

    async def run() -> list[str]:
        # A transfer may wait for SQLite's write lock behind the racers: it must succeed, late.
        async with SqlLeaseProvider.from_url(url, timeout=60) as provider:
            chain = [first]
            for i in range(1, transfers + 1):
                nxt = f"chain-{i}"
                assert await provider.transfer_lease(key, chain[-1], nxt, ttl), i
                chain.append(nxt)
                await asyncio.sleep(0)
            return chain

    return asyncio.run(run())


def racer(
    url: str, worker: int, key: str, seconds: float, until: str | None = None
) -> dict[str, Any]:
    """Hammer ``acquire_lease`` on ``key`` for ``seconds``, and on while ``until`` (the
    chain's last owner) has not been seen holding it (at most a minute more: a loaded machine
    may start the chain late); report wins and every holder it was shown."""

    async def run() -> dict[str, Any]:
        wins: list[str] = []
        holders: set[str | None] = set()
        attempts = 0
        start = time.monotonic()
        # SQLite's write lock is not fair: a waiter sleeps in its busy handler while a loop
        # that never pauses takes the lock again, so unpaused racers can starve the chain's
        # transfers (one waited past 10 s at load 9). Pausing a millisecond keeps the race.
        yield_writes = url.startswith("sqlite")
        async with SqlLeaseProvider.from_url(url, timeout=10) as provider:
            while time.monotonic() < start + seconds or (
                until is not None and until not in holders and time.monotonic() < start + 60
            ):
                attempts += 1
                owner = f"racer-{worker}-{attempts}"
                res = await provider.acquire_lease(key, owner, 60_000)
                if res.acquired:
                    wins.append(owner)
                    await provider.release_lease(key, owner)
                else:
                    holders.add(res.owner)
                if yield_writes:
                    await asyncio.sleep(0.001)
        return {"wins": wins, "holders": holders, "attempts": attempts}

    return asyncio.run(run())
