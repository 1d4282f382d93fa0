"""Two overlapping holds of one key by one owner in one provider: the second is refused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sql_lease import LeaseAlreadyHeld, LeaseError, LeaseNotAcquired

LONG = 30_000


async def test_a_second_hold_of_the_same_key_and_owner_is_refused(provider: Any) -> None:
    async with provider.hold("cron\0daily", "host-1", LONG) as outer:
        with pytest.raises(LeaseAlreadyHeld) as info:
            async with provider.hold("cron\0daily", "host-1", LONG):
                pytest.fail("must not run")
        err = info.value
        assert isinstance(err, LeaseNotAcquired) and isinstance(err, LeaseError)
        assert (err.key, err.owner, err.holder) == ("cron\0daily", "host-1", "host-1")
        assert "distinct owners" in str(err)
        # The refused hold released nothing: the outer one still holds the lease.
        assert outer.held
        assert await provider.get_lease_owner("cron\0daily") == "host-1"
    assert await provider.get_lease_owner("cron\0daily") is None
    async with provider.hold("cron\0daily", "host-1", LONG) as again:  # free once left
        assert again.held


async def test_of_two_holds_entering_at_once_exactly_one_enters(provider: Any) -> None:
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def run() -> str:
        async with provider.hold("k", "same", LONG):
            inside.set()
            await leave.wait()
        return "entered"

    first, second = asyncio.create_task(run()), asyncio.create_task(run())
    await inside.wait()
    leave.set()
    outcomes = await asyncio.gather(first, second, return_exceptions=True)
    assert sorted(type(o).__name__ for o in outcomes) == ["LeaseAlreadyHeld", "str"]
    assert await provider.get_lease_owner("k") is None


async def test_other_owners_and_other_keys_are_not_refused(provider: Any) -> None:
    async with (
        provider.hold("k", "a", LONG),
        provider.hold("other", "a", LONG),
    ):
        with pytest.raises(LeaseNotAcquired) as info:  # a real conflict, not a refusal
            async with provider.hold("k", "b", LONG):
                pytest.fail("must not run")
        assert not isinstance(info.value, LeaseAlreadyHeld)
        assert info.value.holder == "a"


async def test_a_failed_hold_leaves_no_claim_behind(provider: Any) -> None:
    await provider.acquire_lease("k", "x", LONG)
    with pytest.raises(LeaseNotAcquired):
        async with provider.hold("k", "a", LONG):
            pytest.fail("must not run")
    await provider.release_lease("k", "x")
    async with provider.hold("k", "a", LONG) as lease:
        assert lease.held


async def test_after_a_hand_off_the_owner_may_hold_the_key_again(provider: Any) -> None:
    async with provider.hold("k", "a", LONG) as lease:
        await lease.transfer_to("b")
        with pytest.raises(LeaseNotAcquired) as info:  # b holds it now: a plain conflict
            async with provider.hold("k", "a", LONG):
                pytest.fail("must not run")
        assert not isinstance(info.value, LeaseAlreadyHeld)
    assert await provider.get_lease_owner("k") == "b"
