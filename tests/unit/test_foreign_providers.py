"""Held leases, waiting and adoption with providers we did not write (no database).

A `LeaseProvider` with only the five contract methods gets a per-lease renewal loop and
polling; one that also implements a capability protocol (here `BatchRenewal`) gets it used.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from sql_lease import (
    NOOP_LEASE_PROVIDER,
    AcquireResult,
    HeldLease,
    InMemoryLeaseProvider,
    LeaseLost,
    LeaseValueError,
)
from sql_lease._holding.runtime import runtime_of
from sql_lease._holding.wait import hub_for, wait_for_lease
from sql_lease.capabilities import Renewal

from .._events import eventually

TTL = 300  # renewed every 100 ms by default


class Plain:
    """The five contract methods over a dict, judged by the local monotonic clock."""

    def __init__(self) -> None:
        self.leases: dict[str, tuple[str, float]] = {}
        self.renew_calls = 0

    def _live(self, key: str) -> tuple[str, float] | None:
        found = self.leases.get(key)
        return found if found is not None and found[1] > time.monotonic() else None

    async def acquire_lease(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        live = self._live(key)
        if live is not None and live[0] != owner:
            return AcquireResult(False, live[0])
        self.leases[key] = (owner, time.monotonic() + ttl_ms / 1000)
        return AcquireResult(True, owner)

    async def get_lease_owner(self, key: str) -> str | None:
        live = self._live(key)
        return None if live is None else live[0]

    async def release_lease(self, key: str, owner: str) -> None:
        if key in self.leases and self.leases[key][0] == owner:
            del self.leases[key]

    async def renew_lease(self, key: str, owner: str, ttl_ms: int) -> bool:
        self.renew_calls += 1
        live = self._live(key)
        if live is None or live[0] != owner:
            return False
        self.leases[key] = (owner, time.monotonic() + ttl_ms / 1000)
        return True

    async def transfer_lease(self, key: str, from_owner: str, to_owner: str, ttl_ms: int) -> bool:
        live = self._live(key)
        if live is None or live[0] != from_owner:
            return False
        self.leases[key] = (to_owner, time.monotonic() + ttl_ms / 1000)
        return True


class Batching(Plain):
    """A provider that also renews in batches (the `BatchRenewal` capability)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    async def renew_many(
        self, items: Sequence[tuple[str, str]], ttl_ms: int
    ) -> list[Renewal | None]:
        self.batches.append(len(items))
        out: list[Renewal | None] = []
        for key, owner in items:
            ok = await Plain.renew_lease(self, key, owner, ttl_ms)
            out.append(
                Renewal(1, datetime.now(UTC) + timedelta(milliseconds=ttl_ms)) if ok else None
            )
        return out


async def test_a_plain_provider_is_renewed_lease_by_lease_and_released() -> None:
    provider = Plain()
    async with HeldLease(provider, "k", "a", TTL) as lease:
        await eventually(lambda: lease.renewals >= 2, "two renewals")
        assert provider.renew_calls >= 2 and await provider.get_lease_owner("k") == "a"
    assert await provider.get_lease_owner("k") is None
    assert len(runtime_of(provider).renewer) == 0


async def test_a_plain_provider_loses_a_stolen_lease() -> None:
    provider = Plain()

    async def body() -> None:
        async with HeldLease(provider, "k", "a", TTL):
            provider.leases["k"] = ("thief", time.monotonic() + 60)
            await asyncio.Event().wait()  # cancelled by the loss

    with pytest.raises(LeaseLost):
        await body()


async def test_a_batching_provider_gets_one_call_for_its_leases() -> None:
    provider = Batching()
    async with HeldLease(provider, "a", "me", TTL) as a, HeldLease(provider, "b", "me", TTL) as b:
        await eventually(lambda: a.renewals >= 2 and b.renewals >= 2, "both renewed twice")
    assert provider.batches and max(provider.batches) == 2
    assert a.expires_at is not None  # reported by renew_many


async def test_a_waiter_of_a_plain_provider_is_woken_by_a_local_release() -> None:
    provider = Plain()
    hub = hub_for(provider)
    assert hub.listener is None and not hub.self_notifying  # it polls
    async with HeldLease(provider, "k", "a", 60_000):
        waiter = asyncio.create_task(wait_for_lease(provider, "k", "w", TTL, timeout_ms=60_000))
        await eventually(lambda: hub.sleeping("k") == 1, "the waiter asleep")
    got = await waiter
    assert got.acquired and got.owner == "w"


async def test_the_noop_provider_can_be_held() -> None:
    async with HeldLease(NOOP_LEASE_PROVIDER, "k", "a", TTL) as lease:
        await eventually(lambda: lease.renewals >= 1, "a renewal")
        assert lease.held and lease.fence is None


async def test_an_adopted_lease_is_renewed_and_released_without_acquiring() -> None:
    provider = InMemoryLeaseProvider()
    started = asyncio.get_running_loop().time()
    result = await provider.acquire_lease("k", "a", TTL)
    async with HeldLease.adopt(provider, result, "k", TTL, started=started) as lease:
        assert (lease.owner, lease.fence) == ("a", result.fence)
        await eventually(lambda: lease.renewals >= 2, "two renewals")
        assert await provider.get_lease_owner("k") == "a"
    assert await provider.get_lease_owner("k") is None


async def test_only_an_acquired_lease_can_be_adopted() -> None:
    provider = InMemoryLeaseProvider()
    await provider.acquire_lease("k", "x", TTL)
    lost = await provider.acquire_lease("k", "a", TTL)
    with pytest.raises(LeaseValueError, match="adopted"):
        HeldLease.adopt(provider, lost, "k", TTL, started=0.0)
