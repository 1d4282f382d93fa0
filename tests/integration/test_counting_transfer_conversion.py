"""A plain lease and the counting transfer statement.

``transfer_lease(..., metadata=...)`` hands a plain lease on as a counting row (owner
``\\xff``, ``slot_limit`` 1, one grant): metadata lives in counting rows only. The contract's
calls then see the same lease as after a plain transfer, at one more statement each.

A plain ``transfer_lease`` whose plain statement missed falls through to the counting transfer
(the owner may hold a grant of a counting row). If the owner took the key again as a plain lease
between the two statements, that fall-through must leave the plain lease alone: without
metadata the counting transfer matches counting grants only. Here its statement is sent as the
fall-through sends it, on its own connection, so the outcome is deterministic.

The reporting ``transfer`` falls through to the counting transfer like ``release`` and
``renew``, so it hands on a grant of a counting row too.
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


async def plain_lease(provider: SqlLeaseProvider) -> tuple[str, int]:
    key = f"conv-{uuid.uuid4().hex[:8]}"
    taken = await provider.acquire_lease(key, "a", LONG)
    assert taken.acquired and taken.fence is not None
    return key, taken.fence


async def test_the_fall_through_leaves_a_plain_lease_alone(
    provider: SqlLeaseProvider, database_url: str
) -> None:
    key, fence = await plain_lease(provider)
    counting = backend_named("postgres").catalogue("leases", "public").counting
    assert counting is not None
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(counting.transfer.sql, key.encode(), b"a", b"b", LONG, None, None)
        stored = await conn.fetchrow(
            "SELECT owner, slot_limit FROM public.leases WHERE key = $1", key.encode()
        )
    finally:
        await conn.close()
    assert row is None
    assert stored is not None and (stored["owner"], stored["slot_limit"]) == (b"a", None)
    lease = await provider.get_lease(key)
    assert lease is not None and (lease.owner, lease.fence) == ("a", fence)
    assert (await provider.acquire_leases([key], "a", LONG)).acquired  # still a plain row
    assert await provider.release_leases([key], "a") == 1


async def test_the_contract_sees_a_lease_handed_on_with_metadata_as_a_plain_one(
    provider: SqlLeaseProvider,
) -> None:
    key, first = await plain_lease(provider)
    assert await provider.transfer_lease(key, "a", "b", LONG, metadata=b"x")
    assert await provider.get_lease_owner(key) == "b"
    lease = await provider.get_lease(key)
    assert lease is not None and lease.owner == "b" and lease.fence > first
    assert lease.metadata == b"x"
    blocked = await provider.acquire_leases([key], "b", LONG)  # plain leases only (the docs)
    assert (blocked.acquired, blocked.blocked_key, blocked.blocked_by) == (False, key, "b")
    assert await provider.release_leases([key], "b") == 0
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
    reported = await provider.transfer(key, "c", "d", LONG)  # the reporting form too
    assert reported is not None and reported.fence > handed.fence
    assert await provider.get_lease_owner(key) == "d"
    assert await provider.transfer(key, "c", "e", LONG) is None  # c holds nothing now
    released = await provider.release(key, "d")
    assert released is not None and released.fence == reported.fence
    assert await provider.get_lease_owner(key) is None
    plain = await provider.acquire_lease(key, "f", LONG)  # free again: a plain lease
    assert plain.acquired and plain.fence is not None and plain.fence > reported.fence
