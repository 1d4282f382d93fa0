"""Durations may be `timedelta`s wherever milliseconds are taken, validated like ints."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sql_lease import LeaseError

THIRTY_S = timedelta(seconds=30)
YEAR = timedelta(days=365)


async def _left(provider: Any, key: str) -> timedelta:
    lease = await provider.get_lease(key)
    assert lease is not None
    left: timedelta = lease.expires_at - await provider.now()
    return left


def _about_thirty_seconds(left: timedelta) -> bool:
    # Read as milliseconds this would be 30 ms; as seconds, 8 hours. Loose below: a busy host.
    return timedelta(seconds=10) < left <= THIRTY_S


async def test_the_contract_methods_take_timedelta_ttls(provider: Any) -> None:
    got = await provider.acquire_lease("k", "a", THIRTY_S)
    assert got.acquired
    assert _about_thirty_seconds(await _left(provider, "k"))
    assert await provider.renew_lease("k", "a", THIRTY_S)
    assert _about_thirty_seconds(await _left(provider, "k"))
    assert await provider.transfer_lease("k", "a", "b", THIRTY_S)
    assert _about_thirty_seconds(await _left(provider, "k"))
    assert await provider.renew_leases([("k", "b")], THIRTY_S) == [True]
    assert _about_thirty_seconds(await _left(provider, "k"))
    assert await provider.acquire_lease("year", "a", YEAR)  # exactly the limit is fine


async def test_hold_and_wait_take_timedelta_durations(provider: Any) -> None:
    lease_of = provider.hold(
        "k", "a", THIRTY_S, renew_every_ms=timedelta(seconds=5), wait_ms=timedelta(seconds=1)
    )
    assert (lease_of.ttl_ms, lease_of.renew_every_ms) == (30_000, 5_000)
    async with lease_of as lease:
        assert _about_thirty_seconds(await _left(provider, "k"))
        busy = await provider.wait_for_lease("k", "b", THIRTY_S, timeout_ms=timedelta(0))
        assert not busy.acquired and busy.owner == "a"
        await lease.transfer_to("b", ttl_ms=THIRTY_S)
    assert await provider.get_lease_owner("k") == "b"
    assert await provider.purge_expired(min_age_ms=timedelta(hours=1)) == 0


BAD = [
    timedelta(0),
    timedelta(milliseconds=-1),
    -THIRTY_S,
    YEAR + timedelta(microseconds=1),  # rounded up to a millisecond over the limit
    timedelta(days=400),
]
CALLS = {
    "acquire_lease": lambda p, t: p.acquire_lease("k", "o", t),
    "renew_lease": lambda p, t: p.renew_lease("k", "o", t),
    "transfer_lease": lambda p, t: p.transfer_lease("k", "o", "p", t),
    "renew_leases": lambda p, t: p.renew_leases([("k", "o")], t),
    "wait_for_lease": lambda p, t: p.wait_for_lease("k", "o", t, timeout_ms=0),
}


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("ttl", BAD, ids=str)
async def test_a_bad_timedelta_is_rejected_and_changes_nothing(
    provider: Any, call: str, ttl: timedelta
) -> None:
    held = await provider.acquire_lease("k", "o", THIRTY_S)
    with pytest.raises(ValueError, match="ttl_ms") as info:
        await CALLS[call](provider, ttl)
    assert isinstance(info.value, LeaseError)
    lease = await provider.get_lease("k")
    assert (lease.owner, lease.fence, lease.expires_at) == ("o", held.fence, held.expires_at)


async def test_a_bad_timedelta_is_rejected_by_hold(provider: Any) -> None:
    with pytest.raises(ValueError, match="ttl_ms"):
        provider.hold("k", "o", timedelta(0))
    with pytest.raises(ValueError, match="renew_every_ms"):
        provider.hold("k", "o", THIRTY_S, renew_every_ms=timedelta(seconds=16))
    with pytest.raises(ValueError, match="wait_ms"):
        provider.hold("k", "o", THIRTY_S, wait_ms=timedelta(seconds=-1))
    with pytest.raises(ValueError, match="timeout_ms"):
        await provider.wait_for_lease("k", "o", THIRTY_S, timeout_ms=timedelta(days=366))
    assert await provider.get_lease_owner("k") is None
