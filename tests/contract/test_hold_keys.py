"""A hold of several keys, all or none (``provider.hold([...], owner, ttl_ms)``), on every
provider that has ``acquire_leases``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sql_lease import HeldLeases, LeaseAlreadyHeld, LeaseLost, LeaseNotAcquired

LONG = 30_000
KEYS = ["k:b", "k:a", "k:c"]


async def owners(provider: Any, keys: list[str]) -> list[str | None]:
    return [await provider.get_lease_owner(key) for key in keys]


async def test_hold_of_several_keys_takes_all_renews_them_and_releases_all(
    provider: Any,
) -> None:
    async with provider.hold(KEYS, "me", 300) as held:
        assert isinstance(held, HeldLeases)
        assert held.keys == tuple(KEYS) and held.held
        assert set(held.fences) == set(KEYS)
        fences = held.fences
        assert all(isinstance(f, int) for f in fences.values())
        await asyncio.sleep(0.8)  # past the TTL: only renewals keep them
        assert await owners(provider, KEYS) == ["me"] * 3
        for key in KEYS:
            lease = await provider.get_lease(key)
            assert lease is not None and lease.fence == fences[key]
        assert all(h.renewals > 0 for h in held.holds.values())
    assert not held.held and not held.lost
    assert await owners(provider, KEYS) == [None] * 3


async def test_hold_of_several_keys_with_one_taken_takes_none_and_names_it(
    provider: Any,
) -> None:
    await provider.acquire_lease("k:c", "other", LONG)
    with pytest.raises(LeaseNotAcquired) as caught:
        async with provider.hold(KEYS, "me", LONG):
            pytest.fail("entered")
    assert (caught.value.key, caught.value.holder) == ("k:c", "other")
    assert await owners(provider, KEYS) == [None, None, "other"]


async def test_wait_ms_waits_for_all_keys(provider: Any) -> None:
    await provider.acquire_lease("k:a", "x", LONG)
    await provider.acquire_lease("k:c", "y", LONG)

    async def free_later() -> None:
        await asyncio.sleep(0.3)
        await provider.release_lease("k:a", "x")
        await asyncio.sleep(0.3)
        await provider.release_lease("k:c", "y")

    freeing = asyncio.create_task(free_later())
    async with provider.hold(KEYS, "me", LONG, wait_ms=20_000) as held:
        assert held.held
        assert await owners(provider, KEYS) == ["me"] * 3
    await freeing


async def test_wait_ms_runs_out_and_takes_none(provider: Any) -> None:
    await provider.acquire_lease("k:b", "x", LONG)
    with pytest.raises(LeaseNotAcquired):
        async with provider.hold(KEYS, "me", LONG, wait_ms=300):
            pytest.fail("entered")
    assert await owners(provider, KEYS) == ["x", None, None]


async def test_losing_one_key_loses_the_whole_hold(provider: Any) -> None:
    reached_end = False
    hold = provider.hold(KEYS, "me", 300)
    lost_seen: list[asyncio.Task[bool]] = []

    async def body() -> None:
        nonlocal reached_end
        async with hold:
            lost_seen.append(asyncio.create_task(hold.wait_lost()))
            assert await provider.force_release("k:a")
            await provider.acquire_lease("k:a", "thief", LONG)
            await asyncio.sleep(5)  # cancelled by the loss, long before this ends
            reached_end = True

    with pytest.raises(LeaseLost) as caught:
        await body()
    assert await asyncio.wait_for(lost_seen[0], 5)  # wait_lost saw the loss
    held = hold
    assert not reached_end
    assert caught.value.key == "k:a"
    assert held.lost and held.lost_reason is not None and "'k:a'" in held.lost_reason
    # The other keys were released on the way out; the thief keeps its own.
    assert await owners(provider, KEYS) == [None, "thief", None]


async def test_a_key_held_by_another_hold_of_the_owner_is_refused(provider: Any) -> None:
    async with provider.hold("k:a", "me", LONG) as one:
        with pytest.raises(LeaseAlreadyHeld):
            async with provider.hold(KEYS, "me", LONG):
                pytest.fail("entered")
        assert one.held
        assert await owners(provider, KEYS) == [None, "me", None]
    assert await owners(provider, KEYS) == [None] * 3


@pytest.mark.parametrize(
    ("keys", "kwargs", "exc"),
    [
        ([], {}, ValueError),
        (("a", "a"), {}, ValueError),
        (["a", 5], {}, TypeError),
        (["a", ""], {}, ValueError),
        (["a", "b"], {"limit": 2}, ValueError),
        (["a", "b"], {"renew_every_ms": 0}, ValueError),
        (["a", "b"], {"cancel_on_loss": "yes"}, TypeError),
        (["a", "b"], {"on_lost": 3}, TypeError),
        ({"a", "b"}, {}, TypeError),  # a set: not a list or tuple, not a key
    ],
)
async def test_bad_keys_or_options_are_refused_before_any_change(
    provider: Any, keys: Any, kwargs: dict[str, Any], exc: type[Exception]
) -> None:
    with pytest.raises(exc):
        provider.hold(keys, "me", LONG, **kwargs)
    assert await owners(provider, ["a", "b"]) == [None, None]


async def test_a_str_is_never_taken_as_several_keys(provider: Any) -> None:
    with pytest.raises(TypeError):
        HeldLeases(provider, "ab", "me", LONG)  # type: ignore[arg-type]
    async with provider.hold("ab", "me", LONG) as one:  # through hold(): one key
        assert one.key == "ab"
