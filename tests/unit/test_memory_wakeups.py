"""The in-memory provider wakes its waiters itself: no polling, one waiter per change."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from sql_lease import AcquireResult, InMemoryLeaseProvider
from sql_lease._holding import wait as _wait

from .._events import EVENT_S, eventually

LONG = 30_000


class Counting(InMemoryLeaseProvider):
    """Counts acquire calls (the only way a waiter shows that it woke up)."""

    def __init__(self) -> None:
        super().__init__()
        self.acquires = 0

    async def acquire_lease(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        self.acquires += 1
        return await super().acquire_lease(key, owner, ttl_ms)


@pytest.fixture(autouse=True)
def no_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_wait, "POLL_S", 3600.0)  # a wake-up can only come from a change


async def _settle(p: Counting, asleep: int) -> int:
    """Wait until ``asleep`` waiters of "k" sleep and stay asleep; the acquire count then."""
    hub = _wait.hub_for(p)
    while True:
        await eventually(lambda: hub.sleeping("k") == asleep, f"{asleep} waiter(s) asleep")
        before = p.acquires
        await asyncio.sleep(0.05)  # room for a wrong extra wake-up to show
        if p.acquires == before and hub.sleeping("k") == asleep:
            return before


@pytest.mark.parametrize(
    "free",
    [
        lambda p: p.release_lease("k", "x"),
        lambda p: p.transfer_lease("k", "x", "a", LONG),  # handed to the first waiter
        lambda p: p.force_release("k"),
    ],
    ids=["release", "transfer", "force_release"],
)
async def test_a_change_wakes_one_waiter(free: Callable[[Counting], Awaitable[object]]) -> None:
    p = Counting()
    await p.acquire_lease("k", "x", LONG)
    first = asyncio.create_task(p.wait_for_lease("k", "a", LONG, timeout_ms=60_000))
    second = asyncio.create_task(p.wait_for_lease("k", "b", LONG, timeout_ms=60_000))
    calls = await _settle(p, 2)
    await asyncio.sleep(0.002)
    await free(p)
    got = await asyncio.wait_for(first, EVENT_S)
    assert (got.acquired, got.owner) == (True, "a")
    assert await _settle(p, 1) == calls + 1  # the second waiter was not woken
    assert not second.done()
    await p.release_lease("k", "a")  # its turn now
    assert (await asyncio.wait_for(second, EVENT_S)).owner == "b"


async def test_a_held_lease_ending_wakes_exactly_one_waiter() -> None:
    p = Counting()
    held = p.hold("k", "x", LONG)
    await held.__aenter__()
    waiters = [
        asyncio.create_task(p.wait_for_lease("k", name, LONG, timeout_ms=60_000))
        for name in ("a", "b")
    ]
    calls = await _settle(p, 2)
    await held.__aexit__(None, None, None)
    done, pending = await asyncio.wait(
        waiters, timeout=EVENT_S, return_when=asyncio.FIRST_COMPLETED
    )
    assert len(done) == 1 and len(pending) == 1
    assert await _settle(p, 1) == calls + 1  # one wake-up, not one from hold and one from release
    for task in pending:
        task.cancel()
