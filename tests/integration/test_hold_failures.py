"""Held leases through database trouble: transient errors are retried, only expiry is loss."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import HeldLease, LeaseLost, LeaseTimeoutError, SqlLeaseProvider

from .._events import eventually
from .._pg import terminate_backends


def connect(database_url: str) -> psycopg.Connection:
    u = make_url(database_url)
    return psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database)


@pytest.fixture
def row_locker(database_url: str) -> Iterator[psycopg.Connection]:
    conn = connect(database_url)
    yield conn
    conn.rollback()
    conn.close()


@pytest.fixture
async def quick(
    database_url: str, sql_provider: SqlLeaseProvider
) -> AsyncIterator[SqlLeaseProvider]:
    """A provider whose statements give up after 0.3 s, on the emptied table."""
    provider = SqlLeaseProvider.from_url(database_url, timeout=0.3)
    yield provider
    await provider.aclose()


async def test_renewal_survives_terminated_backends_without_reporting_loss(
    database_url: str, sql_provider: SqlLeaseProvider
) -> None:
    async with sql_provider.hold("k", "a", 2_000, renew_every_ms=200) as lease:
        for _ in range(4):
            # Kill its connection once it renewed (on it) since the last kill.
            renewals = lease.renewals
            await eventually(lambda: lease.renewals > renewals, "a renewal")  # noqa: B023
            assert terminate_backends(database_url) >= 1
        renewals = lease.renewals
        await eventually(lambda: lease.renewals > renewals, "a renewal after the last kill")
        assert lease.held and not lease.lost
        assert await sql_provider.get_lease_owner("k") == "a"
    assert await sql_provider.get_lease_owner("k") is None


async def test_failed_renewals_are_retried_until_the_database_answers(
    quick: SqlLeaseProvider, row_locker: psycopg.Connection
) -> None:
    async with quick.hold("k", "a", 3_000, renew_every_ms=200) as lease:
        row_locker.execute("SELECT * FROM leases WHERE key = 'k'::bytea FOR UPDATE")
        # Renewals time out on the row lock, and are retried with backoff.
        await eventually(lambda: lease.renew_errors >= 2, "two failed renewals")
        row_locker.rollback()
        renewals = lease.renewals
        await eventually(lambda: lease.renewals > renewals, "a renewal once the row is free")
        assert lease.held and not lease.lost
        renewed = await quick.get_lease("k")
        assert renewed is not None and renewed.owner == "a"

        async def agreed() -> bool:  # read again if a renewal landed in between
            renewed = await quick.get_lease("k")
            return renewed is not None and renewed.expires_at == lease.expires_at

        await eventually(agreed, "the held lease's expiry matches the database")


async def test_renewals_failing_until_expiry_are_a_loss(
    quick: SqlLeaseProvider, row_locker: psycopg.Connection
) -> None:
    reached = False
    box: list[HeldLease] = []

    async def body() -> None:
        nonlocal reached
        async with quick.hold("k", "a", 2_000, renew_every_ms=200) as lease:
            box.append(lease)
            row_locker.execute("SELECT * FROM leases WHERE key = 'k'::bytea FOR UPDATE")
            await asyncio.Event().wait()  # only the loss ends this
            reached = True

    with pytest.raises(LeaseLost, match="expired before it could be renewed") as info:
        await body()
    row_locker.rollback()
    assert not reached
    assert box[0].renew_errors >= 2 and box[0].lost
    assert "renewal attempts failed" in info.value.reason


async def test_a_transfer_that_fails_in_the_database_leaves_the_lease_held(
    quick: SqlLeaseProvider, row_locker: psycopg.Connection
) -> None:
    async with quick.hold("k", "a", 3_000, renew_every_ms=300) as lease:
        row_locker.execute("SELECT * FROM leases WHERE key = 'k'::bytea FOR UPDATE")
        with pytest.raises(LeaseTimeoutError):
            await lease.transfer_to("b")
        row_locker.rollback()
        assert lease.held and lease.handed_to is None
        renewals = lease.renewals
        await eventually(lambda: lease.renewals > renewals, "renewing again")
        assert await quick.get_lease_owner("k") == "a"
    assert await quick.get_lease_owner("k") is None
