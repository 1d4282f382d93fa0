"""Durations: ints of milliseconds or timedeltas, rounded up to whole milliseconds (no database)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sql_lease import NOOP_LEASE_PROVIDER, InMemoryLeaseProvider, LeaseTypeError, LeaseValueError
from sql_lease._core.validate import MAX_TTL_MS, check_millis, check_ttl


@pytest.mark.parametrize(
    ("value", "millis"),
    [
        (15_000, 15_000),
        (timedelta(seconds=15), 15_000),
        (timedelta(milliseconds=1), 1),
        (timedelta(microseconds=1), 1),  # rounded up: never shorter than asked
        (timedelta(microseconds=1_500), 2),
        (timedelta(seconds=1 / 3), 334),
        (timedelta(days=365), MAX_TTL_MS),
    ],
)
def test_a_ttl_is_milliseconds_rounded_up(value: int | timedelta, millis: int) -> None:
    assert check_ttl(value) == millis
    assert type(check_ttl(value)) is int


@pytest.mark.parametrize(
    "value", [timedelta(0), timedelta(microseconds=-1), timedelta(days=365, microseconds=1)]
)
def test_a_ttl_out_of_range_is_a_value_error_in_the_callers_units(value: timedelta) -> None:
    with pytest.raises(LeaseValueError, match="ttl_ms must be between 1 and") as info:
        check_ttl(value)
    assert str(value) in str(info.value)


@pytest.mark.parametrize("value", [1.5, "15s", None, True])
def test_a_ttl_of_another_type_is_a_type_error_naming_both_forms(value: object) -> None:
    with pytest.raises(LeaseTypeError, match="int of milliseconds or a timedelta"):
        check_ttl(value)


def test_other_durations_take_timedeltas_and_may_be_zero() -> None:
    assert check_millis("wait_ms", timedelta(0)) == 0
    assert check_millis("wait_ms", timedelta(seconds=2, microseconds=1)) == 2_001
    with pytest.raises(LeaseValueError, match="wait_ms"):
        check_millis("wait_ms", timedelta(milliseconds=-1))
    with pytest.raises(LeaseTypeError, match="wait_ms"):
        check_millis("wait_ms", 2.0)


def test_hold_keeps_milliseconds_whatever_it_was_given() -> None:
    lease = InMemoryLeaseProvider().hold("k", "o", timedelta(seconds=9))
    assert (lease.ttl_ms, lease.renew_every_ms) == (9_000, 3_000)
    with pytest.raises(LeaseValueError, match=r"half the TTL \(4500 ms\)"):
        InMemoryLeaseProvider().hold("k", "o", timedelta(seconds=9), renew_every_ms=5_000)


async def test_the_noop_provider_takes_timedeltas_too() -> None:
    assert (await NOOP_LEASE_PROVIDER.acquire_lease("k", "o", timedelta(seconds=1))).acquired
    assert await NOOP_LEASE_PROVIDER.renew_lease("k", "o", timedelta(seconds=1))
    with pytest.raises(LeaseValueError):
        await NOOP_LEASE_PROVIDER.transfer_lease("k", "o", "p", timedelta(0))
