"""A counting release reports the fence of the grant it removed, even when the row changed
while the release waited for its lock.

The race, made deterministic on real PostgreSQL: owner ``a``'s grant has expired, a second
transaction holds the row's lock, ``a``'s release starts (its snapshot still shows the expired
grant) and waits; the second transaction re-grants ``a`` a slot with the library's own counting
acquire (a new grant, a new fence) and commits. The release then removes that new grant, so the
fence it reports must be the new one, not the one its snapshot showed.
"""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from sql_lease import SqlLeaseProvider
from sql_lease.backends import backend_named

WAITING = """
SELECT count(*) FROM pg_catalog.pg_stat_activity
WHERE datname = pg_catalog.current_database() AND wait_event_type = 'Lock'
  AND query LIKE '%holders%'
"""


async def wait_until_blocked(conn: asyncpg.Connection) -> None:
    for _ in range(500):
        if await conn.fetchval(WAITING):
            return
        await asyncio.sleep(0.01)
    pytest.fail("the release never waited for the row lock")


@pytest.mark.timeout(60)
async def test_a_release_that_waited_reports_the_fence_of_the_grant_it_removed(
    database_url: str,
) -> None:
    counting = backend_named("postgres").catalogue("leases", "public").counting
    assert counting is not None
    key = f"rel-{uuid.uuid4().hex[:8]}"
    provider = SqlLeaseProvider.from_url(database_url, timeout=20, schema="public")
    holder = await asyncpg.connect(database_url)
    try:
        first = await provider.acquire_lease(key, "a", 30, limit=2)
        assert first.acquired
        await asyncio.sleep(0.1)  # a's grant expires (it stays in the row until a write)
        async with holder.transaction():
            await holder.execute(
                "SELECT 1 FROM public.leases WHERE key = $1 FOR UPDATE", key.encode()
            )
            release = asyncio.create_task(provider.release(key, "a"))
            await wait_until_blocked(holder)
            # In the lock holder's transaction: a takes a slot again, a new grant.
            row = await holder.fetchrow(
                counting.acquire.sql, key.encode(), b"a", 30_000, 2, None, None
            )
            again = counting.acquire.decode(row)
        regranted = [g for g in again.grants if g.owner == b"a"]
        assert len(regranted) == 1 and regranted[0].fence > first.fence
        released = await asyncio.wait_for(release, 20)
        assert released is not None
        assert await provider.get_lease_holders(key) == []  # the new grant is what it removed
        assert released.fence == regranted[0].fence, (
            f"the release removed the grant of fence {regranted[0].fence} but reported"
            f" {released.fence} (the expired grant its snapshot showed)"
        )
    finally:
        await holder.close()
        await provider.aclose()
