"""Waiting for a busy key (`wait_for_lease`, `hold(wait_ms=...)`), per provider."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sql_lease import LeaseNotAcquired
from sql_lease._holding.wait import hub_for

from .._events import acquired_at, eventually

LONG = 30_000
PATIENT = 2 * LONG  # a waiter's timeout past the holder's expiry: only a wake-up beats both


async def asleep(provider: Any, key: str, waiters: int = 1) -> None:
    """Wait until ``waiters`` waiters of ``key`` are asleep (in line for a wake-up)."""
    hub = hub_for(provider)
    await eventually(lambda: hub.sleeping(key) == waiters, f"{waiters} waiter(s) of {key!r} asleep")


async def test_a_free_key_is_acquired_at_once(provider: Any) -> None:
    got = await provider.wait_for_lease("k", "a", LONG, timeout_ms=5_000)
    assert (got.acquired, got.owner) == (True, "a")


async def test_the_timeout_returns_the_last_result_naming_the_holder(provider: Any) -> None:
    held = await provider.acquire_lease("k", "x", LONG)
    started = time.monotonic()
    got = await provider.wait_for_lease("k", "a", LONG, timeout_ms=300)
    elapsed = time.monotonic() - started
    # It gave up at its timeout (x's 30 s lease is far from over), not before.
    assert (got.acquired, got.owner, got.fence) == (False, "x", held.fence)
    assert elapsed >= 0.25
    assert (await provider.wait_for_lease("k", "a", LONG, timeout_ms=0)).owner == "x"


async def test_a_waiter_gets_the_key_soon_after_the_holder_releases(provider: Any) -> None:
    held = await provider.acquire_lease("k\0t", "x", LONG)
    waiter = asyncio.create_task(provider.wait_for_lease("k\0t", "a", LONG, timeout_ms=PATIENT))
    await asleep(provider, "k\0t")
    assert not waiter.done()
    await provider.release_lease("k\0t", "x")
    got = await waiter
    assert got.acquired and got.owner == "a"
    assert acquired_at(got.expires_at, LONG) < held.expires_at  # before x's lease would expire


async def test_a_waiter_gets_the_key_when_the_holder_expires(provider: Any) -> None:
    held = await provider.acquire_lease("k", "x", 700)  # never released: no notification
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LONG / 1000
    got = await provider.wait_for_lease("k", "a", LONG, timeout_ms=LONG)
    assert got.acquired
    assert acquired_at(got.expires_at, LONG) >= held.expires_at  # not before x's expiry...
    assert loop.time() < deadline  # ...and at it, not at the waiter's own timeout


async def test_waiters_take_turns_one_holder_at_a_time(provider: Any) -> None:
    await provider.acquire_lease("k", "first", LONG)
    inside: list[str] = []
    overlaps = 0
    late = 0
    loop = asyncio.get_running_loop()

    async def worker(name: str) -> None:
        nonlocal overlaps, late
        deadline = loop.time() + 15
        async with provider.hold("k", name, LONG, wait_ms=15_000):
            late += loop.time() >= deadline  # entered when it gave up waiting, not when woken
            inside.append(name)
            if len(inside) > 1:
                overlaps += 1
            await asyncio.sleep(0.02)
            inside.remove(name)

    tasks = [asyncio.create_task(worker(f"w{i}")) for i in range(5)]
    await asleep(provider, "k", 5)
    await provider.release_lease("k", "first")
    await asyncio.gather(*tasks)
    assert overlaps == 0
    assert late == 0  # each was woken by the one before it leaving, long before a timeout
    assert await provider.get_lease_owner("k") is None


async def test_hold_with_wait_ms_gives_up_with_not_acquired(provider: Any) -> None:
    await provider.acquire_lease("k", "x", LONG)
    started = time.monotonic()
    with pytest.raises(LeaseNotAcquired) as info:
        async with provider.hold("k", "a", LONG, wait_ms=200):
            pytest.fail("must not run")
    assert info.value.holder == "x"
    assert time.monotonic() - started >= 0.15


async def test_a_cancelled_waiter_leaves_nothing_behind(provider: Any) -> None:
    await provider.acquire_lease("k", "x", LONG)
    waiter = asyncio.create_task(provider.wait_for_lease("k", "a", LONG, timeout_ms=10_000))
    await asleep(provider, "k")
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await provider.release_lease("k", "x")
    assert await provider.get_lease_owner("k") is None


@pytest.mark.parametrize(("timeout_ms", "exc"), [(-1, ValueError), (1.5, TypeError)])
async def test_wait_for_lease_validates_its_timeout(
    provider: Any, timeout_ms: object, exc: type[Exception]
) -> None:
    with pytest.raises(exc):
        await provider.wait_for_lease("k", "a", LONG, timeout_ms=timeout_ms)
    assert await provider.get_lease_owner("k") is None
