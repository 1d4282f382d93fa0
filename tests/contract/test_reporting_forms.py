"""`release`, `renew` and `transfer`: the contract's operations reporting what they did."""

from __future__ import annotations

from sql_lease import InMemoryLeaseProvider, SqlLeaseProvider
from sql_lease.capabilities import Released, Renewal

LONG = 30_000


async def test_renew_reports_the_fence_and_the_new_expiry_or_none_when_not_held(
    provider: InMemoryLeaseProvider | SqlLeaseProvider,
) -> None:
    won = await provider.acquire_lease("r\0k", "a", 1_000)
    renewed = await provider.renew("r\0k", "a", LONG)
    assert isinstance(renewed, Renewal)
    assert renewed.fence == won.fence and renewed.expires_at > won.expires_at
    lease = await provider.get_lease("r\0k")
    assert lease is not None and lease.expires_at == renewed.expires_at
    assert await provider.renew("r\0k", "b", LONG) is None  # someone else's
    assert await provider.renew("absent", "a", LONG) is None


async def test_transfer_reports_the_new_owners_fence_or_none_when_not_held(
    provider: InMemoryLeaseProvider | SqlLeaseProvider,
) -> None:
    won = await provider.acquire_lease("t\0k", "a", LONG)
    moved = await provider.transfer("t\0k", "a", "b", LONG)
    assert isinstance(moved, Renewal) and moved.fence > won.fence
    lease = await provider.get_lease("t\0k")
    assert lease is not None and (lease.owner, lease.fence) == ("b", moved.fence)
    assert await provider.transfer("t\0k", "a", "c", LONG) is None  # a no longer holds it
    assert await provider.get_lease_owner("t\0k") == "b"


async def test_release_reports_the_fence_it_ended_and_when_or_none_for_a_no_op(
    provider: InMemoryLeaseProvider | SqlLeaseProvider,
) -> None:
    won = await provider.acquire_lease("l\0k", "a", LONG)
    assert await provider.release("l\0k", "b") is None  # not the owner: nothing changes
    released = await provider.release("l\0k", "a")
    assert isinstance(released, Released)
    assert released.fence == won.fence and released.released_at <= await provider.now()
    assert await provider.get_lease_owner("l\0k") is None
    assert await provider.release("l\0k", "a") is None  # already released
