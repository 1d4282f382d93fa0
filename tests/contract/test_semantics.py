"""SPEC §3, row by row, for every provider."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sql_lease import AcquireResult, Lease, LeaseProvider

SHORT = 150  # ms: leases that the test lets expire
WAIT = 0.3  # s: comfortably past SHORT
LONG = 30_000


async def expire() -> None:
    await asyncio.sleep(WAIT)


def near(when: datetime | None, ms: int, slack_ms: int = 2_000) -> bool:
    assert when is not None
    assert when.tzinfo is not None
    delta = when - datetime.now(UTC)
    return timedelta(milliseconds=ms - slack_ms) <= delta <= timedelta(milliseconds=ms + slack_ms)


def test_provider_satisfies_the_protocol(provider: Any) -> None:
    assert isinstance(provider, LeaseProvider)


async def test_acquire_free_key_wins_with_a_fence_and_database_expiry(provider: Any) -> None:
    result = await provider.acquire_lease("k", "a", LONG)
    assert isinstance(result, AcquireResult)
    assert result.acquired is True
    assert result.owner == "a"
    assert isinstance(result.fence, int)
    assert near(result.expires_at, LONG)
    assert await provider.get_lease_owner("k") == "a"


async def test_acquire_expired_key_wins_with_a_new_fence(provider: Any) -> None:
    first = await provider.acquire_lease("k", "a", SHORT)
    await expire()
    second = await provider.acquire_lease("k", "b", LONG)
    assert second.acquired and second.owner == "b"
    assert second.fence > first.fence


async def test_reacquire_by_holder_resets_expiry_and_keeps_fence(provider: Any) -> None:
    first = await provider.acquire_lease("k", "a", 2_000)
    again = await provider.acquire_lease("k", "a", LONG)
    assert again.acquired and again.owner == "a"
    assert again.fence == first.fence
    assert again.expires_at > first.expires_at
    lease = await provider.get_lease("k")
    assert lease.acquired_at <= first.expires_at


async def test_acquire_held_key_fails_and_names_the_holder(provider: Any) -> None:
    held = await provider.acquire_lease("k", "a", LONG)
    result = await provider.acquire_lease("k", "b", LONG)
    assert result.acquired is False
    assert result.owner == "a"
    assert result.fence == held.fence
    assert result.expires_at == held.expires_at
    assert await provider.get_lease_owner("k") == "a"


async def test_failed_acquire_does_not_extend_the_holders_lease(provider: Any) -> None:
    held = await provider.acquire_lease("k", "a", SHORT)
    await provider.acquire_lease("k", "b", LONG)
    await expire()
    assert await provider.get_lease_owner("k") is None
    assert held.acquired


async def test_get_owner_of_absent_and_expired_keys_is_none(provider: Any) -> None:
    assert await provider.get_lease_owner("nobody") is None
    await provider.acquire_lease("k", "a", SHORT)
    assert await provider.get_lease_owner("k") == "a"
    await expire()
    assert await provider.get_lease_owner("k") is None
    assert await provider.get_lease("k") is None


async def test_get_lease_returns_the_live_record(provider: Any) -> None:
    held = await provider.acquire_lease("k", "a", LONG)
    lease = await provider.get_lease("k")
    assert isinstance(lease, Lease)
    assert (lease.key, lease.owner, lease.fence) == ("k", "a", held.fence)
    assert lease.expires_at == held.expires_at
    assert lease.acquired_at.tzinfo is not None
    assert lease.acquired_at < lease.expires_at
    assert await provider.get_lease("other") is None


async def test_release_by_holder_frees_the_key(provider: Any) -> None:
    await provider.acquire_lease("k", "a", LONG)
    assert await provider.release_lease("k", "a") is None
    assert await provider.get_lease_owner("k") is None
    result = await provider.acquire_lease("k", "b", LONG)
    assert result.acquired and result.owner == "b"


async def test_release_of_own_expired_lease_is_quiet(provider: Any) -> None:
    await provider.acquire_lease("k", "a", SHORT)
    await expire()
    await provider.release_lease("k", "a")
    assert await provider.get_lease_owner("k") is None


async def test_release_by_non_holder_or_of_absent_key_changes_nothing(provider: Any) -> None:
    held = await provider.acquire_lease("k", "a", LONG)
    await provider.release_lease("k", "b")
    await provider.release_lease("absent", "a")
    lease = await provider.get_lease("k")
    assert (lease.owner, lease.fence, lease.expires_at) == ("a", held.fence, held.expires_at)


async def test_release_of_a_lease_taken_over_after_expiry_spares_the_new_holder(
    provider: Any,
) -> None:
    await provider.acquire_lease("k", "a", SHORT)
    await expire()
    await provider.acquire_lease("k", "b", LONG)
    await provider.release_lease("k", "a")
    assert await provider.get_lease_owner("k") == "b"


async def test_renew_by_holder_extends_expiry(provider: Any) -> None:
    held = await provider.acquire_lease("k", "a", 2_000)
    assert await provider.renew_lease("k", "a", LONG) is True
    lease = await provider.get_lease("k")
    assert lease.fence == held.fence
    assert lease.expires_at > held.expires_at
    assert near(lease.expires_at, LONG)


async def test_renew_can_shorten_the_lease(provider: Any) -> None:
    await provider.acquire_lease("k", "a", LONG)
    assert await provider.renew_lease("k", "a", SHORT) is True
    await expire()
    assert await provider.get_lease_owner("k") is None


async def test_renew_after_expiry_returns_false_even_if_nobody_took_it(provider: Any) -> None:
    await provider.acquire_lease("k", "a", SHORT)
    await expire()
    assert await provider.renew_lease("k", "a", LONG) is False
    assert await provider.get_lease_owner("k") is None


async def test_renew_of_absent_or_foreign_lease_returns_false(provider: Any) -> None:
    held = await provider.acquire_lease("k", "a", LONG)
    assert await provider.renew_lease("k", "b", LONG) is False
    assert await provider.renew_lease("absent", "a", LONG) is False
    lease = await provider.get_lease("k")
    assert (lease.owner, lease.expires_at) == ("a", held.expires_at)


async def test_renew_after_release_returns_false(provider: Any) -> None:
    await provider.acquire_lease("k", "a", LONG)
    await provider.release_lease("k", "a")
    assert await provider.renew_lease("k", "a", LONG) is False


async def test_transfer_moves_a_live_lease_with_a_new_fence(provider: Any) -> None:
    held = await provider.acquire_lease("k", "a", 2_000)
    assert await provider.transfer_lease("k", "a", "b", LONG) is True
    lease = await provider.get_lease("k")
    assert lease.owner == "b"
    assert lease.fence > held.fence
    assert near(lease.expires_at, LONG)
    assert await provider.renew_lease("k", "a", LONG) is False
    assert await provider.renew_lease("k", "b", LONG) is True


async def test_transfer_leaves_no_moment_where_the_key_is_free(provider: Any) -> None:
    await provider.acquire_lease("k", "a", LONG)
    assert await provider.transfer_lease("k", "a", "b", LONG)
    taken = await provider.acquire_lease("k", "c", LONG)
    assert taken.acquired is False and taken.owner == "b"


async def test_transfer_to_self_is_a_renew(provider: Any) -> None:
    held = await provider.acquire_lease("k", "a", 2_000)
    assert await provider.transfer_lease("k", "a", "a", LONG) is True
    lease = await provider.get_lease("k")
    assert (lease.owner, lease.fence) == ("a", held.fence)
    assert lease.expires_at > held.expires_at


async def test_transfer_of_expired_absent_or_foreign_lease_fails_and_changes_nothing(
    provider: Any,
) -> None:
    await provider.acquire_lease("gone", "a", SHORT)
    await expire()
    assert await provider.transfer_lease("gone", "a", "b", LONG) is False
    assert await provider.get_lease_owner("gone") is None
    assert await provider.transfer_lease("absent", "a", "b", LONG) is False
    assert await provider.get_lease_owner("absent") is None
    held = await provider.acquire_lease("k", "x", LONG)
    assert await provider.transfer_lease("k", "a", "b", LONG) is False
    lease = await provider.get_lease("k")
    assert (lease.owner, lease.fence, lease.expires_at) == ("x", held.fence, held.expires_at)


async def test_fences_increase_across_release_expiry_and_transfer(provider: Any) -> None:
    fences = [(await provider.acquire_lease("k", "a", LONG)).fence]
    await provider.release_lease("k", "a")
    fences.append((await provider.acquire_lease("k", "b", SHORT)).fence)
    await expire()
    fences.append((await provider.acquire_lease("k", "b", LONG)).fence)
    await provider.transfer_lease("k", "b", "c", LONG)
    fences.append((await provider.get_lease("k")).fence)
    await provider.release_lease("k", "c")
    fences.append((await provider.acquire_lease("k", "a", LONG)).fence)
    assert fences == sorted(set(fences)), fences


async def test_fences_are_ordered_across_keys_too(provider: Any) -> None:
    one = await provider.acquire_lease("k1", "a", LONG)
    two = await provider.acquire_lease("k2", "a", LONG)
    assert two.fence > one.fence


@pytest.mark.parametrize(
    "key",
    ["a\0b", "\0", "a\0", "\0\0\0", "thread\0\u00e9\u4e2d\U0001f600", "x" * 1024, "\u00e9" * 512],
)
async def test_keys_and_owners_round_trip_losslessly(provider: Any, key: str) -> None:
    owner = "run\0" + key[:100]
    result = await provider.acquire_lease(key, owner, LONG)
    assert result.acquired and result.owner == owner
    assert await provider.get_lease_owner(key) == owner
    lease = await provider.get_lease(key)
    assert (lease.key, lease.owner) == (key, owner)
    other = await provider.acquire_lease(key, "other", LONG)
    assert other.owner == owner


async def test_nul_escape_lookalikes_are_three_different_keys(provider: Any) -> None:
    keys = ["a\0b", "a", "a\\0b", "ab", "a\0"]
    for i, key in enumerate(keys):
        assert (await provider.acquire_lease(key, f"o{i}", LONG)).acquired, key
    for i, key in enumerate(keys):
        assert await provider.get_lease_owner(key) == f"o{i}"
    await provider.release_lease("a\0b", "o0")
    assert [await provider.get_lease_owner(k) for k in keys] == [None, "o1", "o2", "o3", "o4"]


async def test_owner_comparison_is_exact(provider: Any) -> None:
    await provider.acquire_lease("k", "a\0", LONG)
    assert await provider.renew_lease("k", "a", LONG) is False
    assert await provider.renew_lease("k", "A\0", LONG) is False
    assert (await provider.acquire_lease("k", "a", LONG)).acquired is False
    assert await provider.renew_lease("k", "a\0", LONG) is True


async def test_ttl_of_one_millisecond_and_365_days_are_accepted(provider: Any) -> None:
    assert (await provider.acquire_lease("short", "a", 1)).acquired
    year = 365 * 24 * 3600 * 1000
    result = await provider.acquire_lease("long", "a", year)
    assert result.acquired
    assert near(result.expires_at, year, slack_ms=60_000)


async def test_concurrent_acquires_in_one_process_elect_one_owner(provider: Any) -> None:
    results = await asyncio.gather(
        *(provider.acquire_lease("hot", f"o{i}", LONG) for i in range(20))
    )
    winners = [r for r in results if r.acquired]
    assert len(winners) == 1
    assert all(r.owner == winners[0].owner for r in results)


async def test_a_key_seen_held_is_still_won_as_soon_as_it_is_free(provider: Any) -> None:
    # A SQL provider answers repeated acquires of a key seen held by reading the holder first
    # (sql_lease._core.contention); every row of §3 must still hold on that path.
    held = await provider.acquire_lease("k", "a", 2_000)
    for _ in range(3):
        lost = await provider.acquire_lease("k", "b", LONG)
        assert (lost.acquired, lost.owner, lost.fence) == (False, "a", held.fence)
        assert lost.expires_at == held.expires_at
    again = await provider.acquire_lease("k", "a", LONG)  # the holder re-acquires: same fence
    assert again.acquired and again.fence == held.fence and again.expires_at > held.expires_at
    await provider.release_lease("k", "a")
    won = await provider.acquire_lease("k", "b", SHORT)  # released: free at once
    assert won.acquired and won.owner == "b" and won.fence > held.fence
    assert not (await provider.acquire_lease("k", "c", LONG)).acquired
    await expire()
    taken = await provider.acquire_lease("k", "c", LONG)  # expired: free
    assert taken.acquired and taken.fence > won.fence
    assert await provider.transfer_lease("k", "c", "d", LONG)
    moved = await provider.acquire_lease("k", "c", LONG)  # transferred away: d holds it
    assert not moved.acquired and moved.owner == "d"
    if hasattr(provider, "acquire_reads"):
        assert provider.acquire_reads == 2  # the 2nd and 3rd failures only read
