"""A plain lease handed on by the counting transfer statement becomes a counting row (owner
``\\xff``, ``slot_limit`` 1, one grant): what plain callers see of it afterwards.

Two routes lead there: ``transfer_lease(..., metadata=...)`` (metadata lives in counting rows
only), and a plain ``transfer_lease`` whose plain statement missed and whose fall-through, the
counting transfer, found a live plain lease of ``from_owner`` (its ``WHERE`` also matches
``l.owner = from``): the owner took the key again between the two statements. The second route
is a race; here its statement is sent as the fall-through sends it (no metadata), on its own
connection, so the outcome is deterministic.

The contract's calls see the same lease as after a plain transfer (owner, fence, expiry,
re-acquire, refusal, renewal, release, the listing), at one more statement each. The
all-or-none calls and the reporting ``transfer`` take plain rows only, so they do not: the
second test pins what they do today.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from sql_lease import SqlLeaseProvider
from sql_lease.backends import backend_named

LONG = 30_000


@pytest.fixture
async def provider(database_url: str) -> AsyncIterator[SqlLeaseProvider]:
    async with SqlLeaseProvider.from_url(database_url, timeout=10, schema="public") as made:
        yield made


async def converted(provider: SqlLeaseProvider, url: str, route: str) -> tuple[str, int]:
    """A plain lease of ``a`` handed to ``b`` by the counting transfer; the key and a's fence."""
    key = f"conv-{uuid.uuid4().hex[:8]}"
    taken = await provider.acquire_lease(key, "a", LONG)
    assert taken.acquired and taken.fence is not None
    if route == "metadata":
        assert await provider.transfer_lease(key, "a", "b", LONG, metadata=b"x")
    else:
        counting = backend_named("postgres").catalogue("leases", "public").counting
        assert counting is not None
        conn = await asyncpg.connect(url)
        try:
            row = await conn.fetchrow(
                counting.transfer.sql, key.encode(), b"a", b"b", LONG, None, None
            )
        finally:
            await conn.close()
        assert row is not None and counting.transfer.decode(row).slot_limit == 1
    return key, taken.fence


@pytest.mark.parametrize("route", ["fall-through", "metadata"])
async def test_the_contract_sees_a_converted_lease_as_a_plain_one(
    provider: SqlLeaseProvider, database_url: str, route: str
) -> None:
    key, first = await converted(provider, database_url, route)
    assert await provider.get_lease_owner(key) == "b"
    lease = await provider.get_lease(key)
    assert lease is not None and lease.owner == "b" and lease.fence > first
    assert lease.metadata == (b"x" if route == "metadata" else None)
    again = await provider.acquire_lease(key, "b", LONG)
    assert again.acquired and again.fence == lease.fence  # a re-acquire keeps the fence
    refused = await provider.acquire_lease(key, "c", LONG)
    assert (refused.acquired, refused.owner, refused.fence) == (False, "b", lease.fence)
    renewed = await provider.renew(key, "b", LONG)
    assert renewed is not None and renewed.fence == lease.fence
    assert [(x.owner, x.fence) for x in await provider.list_leases(prefix=key)] == [
        ("b", lease.fence)
    ]
    assert await provider.transfer_lease(key, "b", "c", LONG)  # the plain call falls through
    handed = await provider.get_lease(key)
    assert handed is not None and handed.owner == "c" and handed.fence > lease.fence
    released = await provider.release(key, "c")
    assert released is not None and released.fence == handed.fence
    assert await provider.get_lease_owner(key) is None
    plain = await provider.acquire_lease(key, "d", LONG)  # free again: a plain lease
    assert plain.acquired and plain.fence is not None and plain.fence > handed.fence


@pytest.mark.parametrize("route", ["fall-through", "metadata"])
async def test_the_all_or_none_calls_and_the_reporting_transfer_take_plain_rows_only(
    provider: SqlLeaseProvider, database_url: str, route: str
) -> None:
    """Where a converted lease differs from a plain one (after a plain transfer each of these
    would see b's lease): b's own all-or-none acquire is blocked by it, b's all-or-none release
    leaves it held, and the reporting transfer finds nothing to renew or hand on."""
    key, _ = await converted(provider, database_url, route)
    blocked = await provider.acquire_leases([key], "b", LONG)
    assert (blocked.acquired, blocked.blocked_key, blocked.blocked_by) == (False, key, "b")
    assert await provider.release_leases([key], "b") == 0
    assert await provider.get_lease_owner(key) == "b"
    assert await provider.transfer(key, "b", "b", LONG) is None
    assert await provider.transfer(key, "b", "c", LONG) is None
    assert await provider.get_lease_owner(key) == "b"
