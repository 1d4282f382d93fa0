"""A counting release reports the fence of the grant it removed, even when the row changed
while the release waited for its lock (PostgreSQL, MariaDB; SQLite has one writer at a time, and
its release reads the grant in the statement that holds the write lock).

The race, made deterministic on real PostgreSQL: owner ``a``'s grant has expired, a second
transaction holds the row's lock, ``a``'s release starts (its snapshot still shows the expired
grant) and waits; the second transaction re-grants ``a`` a slot with the library's own counting
acquire (a new grant, a new fence) and commits. The release then removes that new grant, so the
fence it reports must be the new one, not the one its snapshot showed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import asyncmy
import asyncpg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import SqlLeaseProvider, migrate
from sql_lease.backends import backend_named
from sql_lease.backends.mariadb.placeholders import compiled
from sql_lease.backends.mariadb.sessions import session_sql

WAITING = """
SELECT count(*) FROM pg_catalog.pg_stat_activity
WHERE datname = pg_catalog.current_database() AND wait_event_type = 'Lock'
  AND query LIKE '%holders%'
"""


async def wait_until_blocked(conn: asyncpg.Connection) -> None:
    """Until the counting release waits for the row lock. ``conn`` is inside a transaction,
    where PostgreSQL keeps the first reading of ``pg_stat_activity`` until the transaction
    ends: each poll clears it (else a first reading taken while the plain release statement
    was running stays, and the counting release is never seen waiting)."""
    for _ in range(500):
        await conn.execute("SELECT pg_catalog.pg_stat_clear_snapshot()")
        if await conn.fetchval(WAITING):
            return
        await asyncio.sleep(0.01)
    seen = await conn.fetch(
        "SELECT state, wait_event_type, wait_event, pg_catalog.left(query, 60) AS q"
        " FROM pg_catalog.pg_stat_activity WHERE datname = pg_catalog.current_database()"
    )
    pytest.fail(f"the release never waited for the row lock: {[tuple(r) for r in seen]}")


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


@pytest.mark.timeout(60)
async def test_mariadbs_release_that_waited_reports_the_fence_of_the_grant_it_removed(
    make_mariadb_database: Callable[[], str],
) -> None:
    """The same race on MariaDB, with the catalogue's statements on plain connections: its
    release reads the fence in the update part, on the row its ``FOR UPDATE`` locked."""
    url = make_mariadb_database()
    await migrate.upgrade_async(url)
    counting = backend_named("mariadb").catalogue("leases", None).counting
    assert counting is not None
    u = make_url(url)

    async def connect() -> Any:
        return await asyncmy.connect(
            host=u.host,
            port=u.port or 3306,
            user=u.username,
            password=u.password or "",
            db=u.database,
            autocommit=True,
            init_command=session_sql(20.0),
        )

    async def run(conn: Any, sql: str, *args: object) -> list[Any]:
        text, order = compiled(sql)
        async with conn.cursor() as cursor:
            await cursor.execute(text, tuple(args[i] for i in order))
            return list(await cursor.fetchall())

    key = f"rel-{uuid.uuid4().hex[:8]}".encode()
    holder, releaser = await connect(), await connect()
    try:
        first = counting.acquire.decode(
            (await run(holder, counting.acquire.sql, key, b"a", 30, 2, None, None))[0]
        )
        await asyncio.sleep(0.1)  # a's grant expires (it stays in the row until a write)
        await holder.begin()
        await run(holder, "SELECT 1 FROM leases WHERE `key` = ?1 FOR UPDATE", key)
        release = asyncio.create_task(run(releaser, counting.release.sql, key, b"a"))
        waiting = (
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST"
            " WHERE info LIKE 'INSERT INTO%' AND info LIKE ?1"
        )
        for _ in range(500):  # the release runs (its row is locked: it waits)
            if (await run(holder, waiting, "%@sql_lease_fence :=%"))[0][0]:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the release never started")
        await asyncio.sleep(0.2)
        assert not release.done(), "the release did not wait for the row lock"
        row = (await run(holder, counting.acquire.sql, key, b"a", 30_000, 2, None, None))[0]
        await holder.commit()
        regranted = [g for g in counting.acquire.decode(row).grants if g.owner == b"a"]
        assert len(regranted) == 1 and regranted[0].fence > first.grants[0].fence
        rows = await asyncio.wait_for(release, 20)
        assert len(rows) == 1
        assert counting.release.decode(rows[0]).fence == regranted[0].fence
        assert await run(releaser, counting.holders.sql, key) == []  # no live grant left
    finally:
        holder.close()
        releaser.close()
