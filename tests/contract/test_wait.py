"""Waiting for a busy key (`wait_for_lease`, `hold(wait_ms=...)`), per provider."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sql_lease import LeaseNotAcquired

LONG = 30_000


async def test_a_free_key_is_acquired_at_once(provider: Any) -> None:
    got = await provider.wait_for_lease("k", "a", LONG, timeout_ms=5_000)
    assert (got.acquired, got.owner) == (True, "a")


async def test_the_timeout_returns_the_last_result_naming_the_holder(provider: Any) -> None:
    held = await provider.acquire_lease("k", "x", LONG)
    started = time.monotonic()
    got = await provider.wait_for_lease("k", "a", LONG, timeout_ms=300)
    elapsed = time.monotonic() - started
    assert (got.acquired, got.owner, got.fence) == (False, "x", held.fence)
    assert 0.25 <= elapsed < 2.0
    assert (await provider.wait_for_lease("k", "a", LONG, timeout_ms=0)).owner == "x"


async def test_a_waiter_gets_the_key_soon_after_the_holder_releases(provider: Any) -> None:
    await provider.acquire_lease("k\0t", "x", LONG)
    waiter = asyncio.create_task(provider.wait_for_lease("k\0t", "a", LONG, timeout_ms=10_000))
    await asyncio.sleep(0.3)
    assert not waiter.done()
    released = time.monotonic()
    await provider.release_lease("k\0t", "x")
    got = await asyncio.wait_for(waiter, 5)
    assert got.acquired and got.owner == "a"
    assert time.monotonic() - released < 2.0  # long before x's lease would have expired


async def test_a_waiter_gets_the_key_when_the_holder_expires(provider: Any) -> None:
    await provider.acquire_lease("k", "x", 700)  # never released: no notification
    started = time.monotonic()
    got = await provider.wait_for_lease("k", "a", LONG, timeout_ms=5_000)
    assert got.acquired
    assert 0.5 <= time.monotonic() - started < 2.5


async def test_waiters_take_turns_one_holder_at_a_time(provider: Any) -> None:
    await provider.acquire_lease("k", "first", LONG)
    inside: list[str] = []
    overlaps = 0

    async def worker(name: str) -> None:
        nonlocal overlaps
        async with provider.hold("k", name, LONG, wait_ms=15_000):
            inside.append(name)
            if len(inside) > 1:
                overlaps += 1
            await asyncio.sleep(0.02)
            inside.remove(name)

    tasks = [asyncio.create_task(worker(f"w{i}")) for i in range(5)]
    await asyncio.sleep(0.2)
    started = time.monotonic()
    await provider.release_lease("k", "first")
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert overlaps == 0
    assert time.monotonic() - started < 5
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
    await asyncio.sleep(0.2)
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
