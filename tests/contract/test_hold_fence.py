"""`hold()` compares the fence each renewal reports with the fence it was granted.

After a lossy asynchronous failover the new primary can hold an older row of the same owner:
renewing it succeeds, but with another fence. Simulated here on real tables by changing the
row's fence behind the hold's back; the hold must count the lease as lost at that renewal
(`LeaseLost`, ``on_lost``, a LOST event). A provider whose renewal reports no fence (only a
bool) cannot tell, and keeps holding.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import text

from sql_lease import (
    HeldLease,
    InMemoryLeaseProvider,
    LeaseEventKind,
    LeaseLost,
    SqlLeaseProvider,
)
from sql_lease._core.contract import AcquireResult
from sql_lease._holding.keeper import fence_moved
from sql_lease.capabilities import Renewal

from .._events import eventually
from .._observers import Recorder

TTL = 3_000
EVERY = 100


async def _move_fence(provider: SqlLeaseProvider, key: str, fence: int) -> int:
    """Give the row of ``key`` another fence, as the older row of a failover would have."""
    other = fence - 1 if fence > 1 else fence + 1
    column = provider.engine.dialect.identifier_preparer.quote("key")  # reserved on MariaDB
    async with provider.engine.connect() as conn:
        done = await conn.execute(
            text(f"UPDATE leases SET fence = :f WHERE {column} = :k"),
            {"f": other, "k": key.encode()},
        )
        await conn.commit()
    assert done.rowcount == 1
    return other


@pytest.fixture(params=["postgresql", "sqlite", "mariadb"])
def sql_url(request: pytest.FixtureRequest) -> str:
    name = {"postgresql": "database_url", "sqlite": "sqlite_url", "mariadb": "mariadb_url"}[
        request.param
    ]
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture
async def sql(sql_url: str) -> Any:
    recorder = Recorder()
    provider = SqlLeaseProvider.from_url(sql_url, timeout=10, observer=recorder)
    async with provider.engine.connect() as conn:
        plain = sql_url.startswith(("sqlite", "mariadb"))
        await conn.exec_driver_sql("DELETE FROM leases" if plain else "TRUNCATE leases")
        await conn.commit()
    yield provider, recorder
    await provider.aclose()


async def test_a_renewal_with_another_fence_loses_the_hold(sql: Any) -> None:
    provider, recorder = sql
    lost_hooks: list[str | None] = []
    held: list[HeldLease] = []
    moved: list[int] = []

    async def body() -> None:
        async with provider.hold(
            "fenced",
            "me",
            TTL,
            renew_every_ms=EVERY,
            on_lost=lambda lease: lost_hooks.append(lease.lost_reason),
        ) as lease:
            held.append(lease)
            assert lease.fence is not None
            await eventually(lambda: lease.renewals >= 1, "a first renewal")
            moved.append(await _move_fence(provider, "fenced", lease.fence))
            await asyncio.Event().wait()  # cancelled by the loss

    with pytest.raises(LeaseLost) as info:
        await asyncio.wait_for(body(), 30)
    lease, other = held[0], moved[0]
    granted = lease.fence
    assert info.value.fence == granted
    assert lease.lost and not lease.held
    assert lease.lost_reason is not None and f"fence {other}, not {granted}" in lease.lost_reason
    await eventually(lambda: lost_hooks, "the on_lost hook")
    assert lost_hooks == [lease.lost_reason]
    lost = await recorder.when(lambda e: e.kind is LeaseEventKind.LOST)
    assert (lost.key, lost.fence) == ("fenced", granted)
    # Until the fence moved, the renewals reported the granted one: no false loss.
    assert lease.renewals >= 1


async def test_renewals_that_keep_the_fence_keep_the_hold(sql: Any) -> None:
    provider, _ = sql
    async with provider.hold("steady", "me", TTL, renew_every_ms=EVERY) as lease:
        await eventually(lambda: lease.renewals >= 3, "three renewals")
        assert lease.held and not lease.lost


class _BoolOnly:
    """A foreign provider: the five contract methods, renewal answering only a bool."""

    def __init__(self) -> None:
        self.inner = InMemoryLeaseProvider()

    async def acquire_lease(self, key: str, owner: str, ttl_ms: int) -> AcquireResult:
        return await self.inner.acquire_lease(key, owner, ttl_ms)

    async def get_lease_owner(self, key: str) -> str | None:
        return await self.inner.get_lease_owner(key)

    async def release_lease(self, key: str, owner: str) -> None:
        await self.inner.release_lease(key, owner)

    async def renew_lease(self, key: str, owner: str, ttl_ms: int) -> bool:
        return await self.inner.renew_lease(key, owner, ttl_ms)

    async def transfer_lease(self, key: str, from_owner: str, to_owner: str, ttl_ms: int) -> bool:
        return await self.inner.transfer_lease(key, from_owner, to_owner, ttl_ms)


async def test_a_provider_whose_renewal_reports_no_fence_keeps_holding() -> None:
    provider = _BoolOnly()
    async with HeldLease(provider, "k", "me", TTL, renew_every_ms=EVERY) as lease:
        await eventually(lambda: lease.renewals >= 3, "three renewals")
        assert lease.held
    assert await provider.get_lease_owner("k") is None
    await provider.inner.aclose()


def test_fence_moved_names_both_fences_and_ignores_unknown_ones() -> None:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    assert fence_moved(7, Renewal(7, now)) is None
    assert fence_moved(None, Renewal(7, now)) is None
    assert fence_moved(7, None) is None
    reason = fence_moved(83, Renewal(67, now))
    assert reason is not None and "fence 67, not 83" in reason
