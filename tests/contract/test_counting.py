"""Counting leases (``limit=N``), metadata and all-or-none calls, on every provider."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sql_lease import LeaseLimitMismatchError

LONG = 30_000
SHORT = 200


async def test_limit_3_admits_exactly_3_and_lists_them(provider: Any) -> None:
    results = [await provider.acquire_lease("sem", f"w{i}", LONG, limit=3) for i in range(5)]
    assert [r.acquired for r in results] == [True, True, True, False, False]
    refused = results[3]
    assert refused.owner in {"w0", "w1", "w2"}
    assert refused.expires_at is not None
    holders = await provider.get_lease_holders("sem")
    assert [h.owner for h in holders] == ["w0", "w1", "w2"]
    assert all(h.key == "sem" for h in holders)
    fences = [r.fence for r in results[:3]]
    assert fences == sorted(fences) and len(set(fences)) == 3
    assert [h.fence for h in holders] == fences


async def test_a_released_slot_is_taken_with_a_higher_fence(provider: Any) -> None:
    granted = [await provider.acquire_lease("sem", f"w{i}", LONG, limit=3) for i in range(3)]
    assert not (await provider.acquire_lease("sem", "late", LONG, limit=3)).acquired
    await provider.release_lease("sem", "w1")
    assert [h.owner for h in await provider.get_lease_holders("sem")] == ["w0", "w2"]
    late = await provider.acquire_lease("sem", "late", LONG, limit=3)
    assert late.acquired
    assert late.fence > max(g.fence for g in granted)
    assert [h.owner for h in await provider.get_lease_holders("sem")] == ["w0", "w2", "late"]


async def test_an_expired_slot_is_taken(provider: Any) -> None:
    await provider.acquire_lease("sem", "short", SHORT, limit=2)
    await provider.acquire_lease("sem", "long", LONG, limit=2)
    assert not (await provider.acquire_lease("sem", "x", LONG, limit=2)).acquired
    await asyncio.sleep(0.4)
    assert (await provider.acquire_lease("sem", "x", LONG, limit=2)).acquired
    assert [h.owner for h in await provider.get_lease_holders("sem")] == ["long", "x"]


async def test_same_owner_reacquire_renews_and_keeps_its_fence(provider: Any) -> None:
    first = await provider.acquire_lease("sem", "a", 1_000, limit=2)
    await provider.acquire_lease("sem", "b", LONG, limit=2)
    again = await provider.acquire_lease("sem", "a", LONG, limit=2)
    assert again.acquired and again.fence == first.fence
    assert again.expires_at > first.expires_at
    assert len(await provider.get_lease_holders("sem")) == 2


async def test_renew_release_and_transfer_work_per_owner(provider: Any) -> None:
    a = await provider.acquire_lease("sem", "a", 1_000, limit=3)
    await provider.acquire_lease("sem", "b", 1_000, limit=3)
    assert await provider.renew_lease("sem", "a", LONG)
    assert not await provider.renew_lease("sem", "nobody", LONG)
    holders = {h.owner: h for h in await provider.get_lease_holders("sem")}
    assert holders["a"].expires_at > holders["b"].expires_at
    assert holders["a"].fence == a.fence
    assert await provider.transfer_lease("sem", "b", "c", LONG)
    assert not await provider.transfer_lease("sem", "b", "d", LONG)
    assert not await provider.transfer_lease("sem", "a", "c", LONG)  # c holds one already
    owners = {h.owner: h for h in await provider.get_lease_holders("sem")}
    assert set(owners) == {"a", "c"}
    assert owners["c"].fence > a.fence
    await provider.release_lease("sem", "a")
    await provider.release_lease("sem", "nobody")
    assert [h.owner for h in await provider.get_lease_holders("sem")] == ["c"]
    await provider.release_lease("sem", "c")
    assert await provider.get_lease_holders("sem") == []
    assert await provider.get_lease_owner("sem") is None
    # Free again: a plain lease may take it.
    assert (await provider.acquire_lease("sem", "plain", LONG)).acquired


async def test_get_lease_and_owner_of_a_counting_key_name_its_oldest_holder(
    provider: Any,
) -> None:
    await provider.acquire_lease("sem", "first", LONG, limit=2)
    await provider.acquire_lease("sem", "second", LONG, limit=2)
    assert await provider.get_lease_owner("sem") == "first"
    lease = await provider.get_lease("sem")
    assert lease is not None and lease.owner == "first"


async def test_metadata_round_trips_through_get_lease(provider: Any) -> None:
    result = await provider.acquire_lease("job", "me", LONG, metadata="host-1 pid 42 \0 ü")
    assert result.acquired
    lease = await provider.get_lease("job")
    assert lease is not None
    assert (lease.owner, lease.metadata, lease.fence) == ("me", "host-1 pid 42 \0 ü", result.fence)
    assert await provider.get_lease_owner("job") == "me"
    await provider.acquire_lease("blob", "me", LONG, metadata=b"\x00\xff")
    assert (await provider.get_lease("blob")).metadata == b"\x00\xff"


async def test_a_lease_with_metadata_behaves_as_a_plain_lease(provider: Any) -> None:
    first = await provider.acquire_lease("job", "me", LONG, metadata=b"x")
    refused = await provider.acquire_lease("job", "other", LONG)
    assert not refused.acquired and refused.owner == "me" and refused.fence == first.fence
    again = await provider.acquire_lease("job", "me", LONG)
    assert again.acquired and again.fence == first.fence
    assert (await provider.get_lease("job")).metadata == b"x"  # kept when not given
    assert await provider.renew_lease("job", "me", LONG)
    assert await provider.transfer_lease("job", "me", "next", LONG)
    moved = await provider.get_lease("job")
    assert (moved.owner, moved.metadata) == ("next", b"x")
    assert moved.fence > first.fence
    assert await provider.transfer_lease("job", "next", "last", LONG, metadata="new")
    assert (await provider.get_lease("job")).metadata == "new"
    await provider.release_lease("job", "last")
    assert await provider.get_lease("job") is None


async def test_metadata_on_a_plain_lease_of_the_same_owner_is_added(provider: Any) -> None:
    first = await provider.acquire_lease("job", "me", LONG)
    again = await provider.acquire_lease("job", "me", LONG, metadata="m")
    assert again.acquired and again.fence == first.fence
    assert (await provider.get_lease("job")).metadata == "m"
    assert (await provider.get_lease("plain-none")) is None
    await provider.acquire_lease("plain", "p", LONG)
    assert (await provider.get_lease("plain")).metadata is None


async def test_mixing_limits_on_one_key_is_refused(provider: Any) -> None:
    await provider.acquire_lease("sem", "a", LONG, limit=3)
    with pytest.raises(LeaseLimitMismatchError) as caught:
        await provider.acquire_lease("sem", "b", LONG, limit=2)
    assert (caught.value.limit, caught.value.held_limit) == (2, 3)
    with pytest.raises(LeaseLimitMismatchError):
        await provider.acquire_lease("sem", "a", LONG, limit=1, metadata="m")
    await provider.acquire_lease("plain", "a", LONG)
    with pytest.raises(LeaseLimitMismatchError) as caught:
        await provider.acquire_lease("plain", "b", LONG, limit=2)
    assert caught.value.held_limit == 1
    # A plain acquire is limit=1: on a key held with limit=3, refused as well.
    with pytest.raises(LeaseLimitMismatchError):
        await provider.acquire_lease("sem", "b", LONG)
    assert [h.owner for h in await provider.get_lease_holders("sem")] == ["a"]


async def test_all_or_none_with_one_key_held_takes_none_and_names_it(provider: Any) -> None:
    await provider.acquire_lease("k2", "other", LONG)
    result = await provider.acquire_leases(["k3", "k1", "k2"], "me", LONG)
    assert not result.acquired
    assert (result.blocked_key, result.blocked_by) == ("k2", "other")
    assert result.leases == {}
    for key in ("k1", "k3"):
        assert await provider.get_lease_owner(key) is None
    assert await provider.get_lease_owner("k2") == "other"


async def test_all_or_none_with_all_free_takes_all(provider: Any) -> None:
    await provider.acquire_lease("k1", "me", LONG)  # already mine: kept
    result = await provider.acquire_leases(["k1", "k2", "k3"], "me", LONG)
    assert result.acquired and result.blocked_key is None
    assert sorted(result.leases) == ["k1", "k2", "k3"]
    for key in ("k1", "k2", "k3"):
        assert await provider.get_lease_owner(key) == "me"
    again = await provider.acquire_leases(["k1", "k2", "k3"], "me", LONG)
    assert {k: r.fence for k, r in again.leases.items()} == {
        k: r.fence for k, r in result.leases.items()
    }
    assert await provider.release_leases(["k1", "k2", "k3", "k4"], "me") == 3
    for key in ("k1", "k2", "k3"):
        assert await provider.get_lease_owner(key) is None


async def test_all_or_none_blocked_by_a_counting_key_names_a_holder(provider: Any) -> None:
    await provider.acquire_lease("sem", "c1", LONG, limit=2)
    result = await provider.acquire_leases(["a", "sem"], "me", LONG)
    assert not result.acquired
    assert (result.blocked_key, result.blocked_by) == ("sem", "c1")
    assert await provider.get_lease_owner("a") is None


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"limit": 0}, ValueError),
        ({"limit": 1001}, ValueError),
        ({"limit": True}, TypeError),
        ({"limit": 2.0}, TypeError),
        ({"metadata": 5}, TypeError),
        ({"metadata": b"x" * 1025}, ValueError),
        ({"metadata": "é" * 513}, ValueError),
    ],
)
async def test_bad_counting_arguments_are_refused_before_any_change(
    provider: Any, kwargs: dict[str, Any], exc: type[Exception]
) -> None:
    with pytest.raises(exc):
        await provider.acquire_lease("k", "o", LONG, **kwargs)
    assert await provider.get_lease_owner("k") is None


@pytest.mark.parametrize(("keys", "exc"), [("ab", TypeError), ([], ValueError), ([""], ValueError)])
async def test_bad_keys_of_all_or_none_are_refused(
    provider: Any, keys: Any, exc: type[Exception]
) -> None:
    with pytest.raises(exc):
        await provider.acquire_leases(keys, "o", LONG)


async def test_a_released_slot_wakes_a_waiter(provider: Any) -> None:
    await provider.acquire_lease("sem", "a", LONG, limit=2)
    await provider.acquire_lease("sem", "b", LONG, limit=2)
    waiter = asyncio.create_task(
        provider.wait_for_lease("sem", "c", LONG, timeout_ms=20_000, limit=2)
    )
    await asyncio.sleep(0.3)
    assert not waiter.done()
    await provider.release_lease("sem", "a")
    # Woken by the release (NOTIFY, the in-memory wake-up, or SQLite's 50 ms poll), not by
    # the holders' expiry 30 s away.
    result = await asyncio.wait_for(waiter, 10)
    assert result.acquired and result.owner == "c"
    assert [h.owner for h in await provider.get_lease_holders("sem")] == ["b", "c"]


async def test_waiting_for_a_full_counting_key_times_out_naming_a_holder(provider: Any) -> None:
    await provider.acquire_lease("sem", "a", LONG, limit=1, metadata="m")
    result = await provider.wait_for_lease("sem", "c", LONG, timeout_ms=300, limit=1)
    assert not result.acquired and result.owner == "a"


async def test_hold_keeps_a_slot_renewed_and_releases_it(provider: Any) -> None:
    await provider.acquire_lease("sem", "other", LONG, limit=2)
    async with provider.hold("sem", "me", 300, limit=2) as held:
        assert held.fence is not None
        await asyncio.sleep(0.8)  # past the TTL: only renewals keep it
        holders = {h.owner: h for h in await provider.get_lease_holders("sem")}
        assert set(holders) == {"other", "me"} and holders["me"].fence == held.fence
        assert held.renewals > 0
    assert [h.owner for h in await provider.get_lease_holders("sem")] == ["other"]


async def test_force_release_ends_every_grant_of_a_counting_key(provider: Any) -> None:
    await provider.acquire_lease("sem", "a", LONG, limit=2)
    await provider.acquire_lease("sem", "b", LONG, limit=2)
    assert await provider.force_release("sem")
    assert await provider.get_lease_holders("sem") == []
    assert not await provider.renew_lease("sem", "a", LONG)
    assert (await provider.acquire_lease("sem", "c", LONG, limit=3)).acquired
    assert [h.owner for h in await provider.get_lease_holders("sem")] == ["c"]
