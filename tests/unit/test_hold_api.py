"""The public surface of held leases, waiting and fencing (no database)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

import sql_lease
from sql_lease import (
    NOOP_LEASE_PROVIDER,
    HeldLease,
    InMemoryLeaseProvider,
    LeaseError,
    LeaseLost,
    LeaseNotAcquired,
    SqlLeaseProvider,
)
from sql_lease._sqlprovider.guard import guard_clause
from sql_lease.backends import backend_named


def test_hold_names_are_exported() -> None:
    for name in ("HeldLease", "LeaseHook", "LeaseLost", "LeaseNotAcquired"):
        assert name in sql_lease.__all__ and hasattr(sql_lease, name)
    assert issubclass(LeaseLost, LeaseError) and issubclass(LeaseNotAcquired, LeaseError)


def test_both_providers_offer_hold_and_wait_and_sql_offers_guard() -> None:
    engine = create_async_engine("postgresql+asyncpg://u@127.0.0.1:1/db")
    for provider in (InMemoryLeaseProvider(), SqlLeaseProvider(engine)):
        assert isinstance(provider.hold("k", "o", 1_000), HeldLease)
        assert callable(provider.wait_for_lease)
    assert callable(SqlLeaseProvider.guard)


def test_errors_carry_their_data_in_attributes() -> None:
    busy = LeaseNotAcquired("k\0t", "me", "them", 7)
    assert (busy.key, busy.owner, busy.holder, busy.fence) == ("k\0t", "me", "them", 7)
    assert "'them'" in str(busy)
    lost = LeaseLost("k", "me", 7, "taken over")
    assert (lost.key, lost.owner, lost.fence, lost.reason) == ("k", "me", 7, "taken over")
    assert "taken over" in str(lost)


def test_guard_statement_locks_the_live_row_with_the_fence() -> None:
    statement = backend_named("postgres").catalogue("leases", "coord").guard
    assert statement is not None
    sql = str(guard_clause(statement.sql))
    assert 'FROM "coord"."leases"' in sql
    assert ":key" in sql and ":fence" in sql
    assert "clock_timestamp()" in sql and sql.endswith("FOR SHARE")


async def test_a_hold_checks_its_arguments_when_made_not_when_entered() -> None:
    lease = InMemoryLeaseProvider().hold("k", "o", 1_000)
    with pytest.raises(ValueError, match="half the TTL"):
        InMemoryLeaseProvider().hold("k", "o", 1_000, renew_every_ms=600)
    assert not lease.held and not lease.lost


async def test_the_noop_provider_can_be_held_too() -> None:
    async with HeldLease(NOOP_LEASE_PROVIDER, "k", "o", 300, renew_every_ms=50) as lease:
        await asyncio.sleep(0.2)
        assert lease.held and lease.renewals >= 2
    assert not lease.lost
