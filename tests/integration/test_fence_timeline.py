"""Revision 0004: fences carry the server's timeline (``timeline << 40 | sequence value``).

On the shared server (timeline 1 unless it was ever promoted: the tests read it). Fences are
drawn by the database trigger only when ownership changes; renewals, releases and same-owner
re-acquires keep theirs; upgrade and downgrade keep fences ordered; the least-privilege runtime
role draws them too. The failover itself is `tests/infra/test_failover_fences.py`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import SqlLeaseProvider, migrate
from sql_lease.sync import SqlLeaseProvider as SyncLeaseProvider

SEQUENCE_BITS = 40
MASK = (1 << SEQUENCE_BITS) - 1
LONG = 60_000
SHORT = 100  # ms: leases the test lets expire


def admin(url: str) -> psycopg.Connection[tuple[object, ...]]:
    u = make_url(url)
    return psycopg.connect(
        host=u.host,
        port=u.port,
        user=u.username,
        password=u.password,
        dbname=u.database,
        autocommit=True,
    )


def scalar(url: str, sql: str) -> int:
    with admin(url) as conn:
        row = conn.execute(sql.encode()).fetchone()
    assert row is not None
    return int(str(row[0]))


def timeline(url: str) -> int:
    return scalar(
        url,
        "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint",
    )


async def until_expired(p: SqlLeaseProvider, key: str) -> None:
    """Until the database says the key is free (an event, not a sleep of a guessed length)."""
    for _ in range(1_000):
        if await p.get_lease_owner(key) is None:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{key!r} did not expire")


async def fence_of(p: SqlLeaseProvider, key: str, owner: str, ttl: int = LONG) -> int:
    got = await p.acquire_lease(key, owner, ttl)
    assert got.acquired and got.fence is not None, got
    return got.fence


async def test_fences_carry_the_timeline_and_grow_only_when_ownership_changes(
    sql_provider: SqlLeaseProvider, database_url: str
) -> None:
    p = sql_provider
    tl = timeline(database_url)
    first = await fence_of(p, "k", "a")
    assert first >= 1 << SEQUENCE_BITS
    assert first >> SEQUENCE_BITS == tl
    # The low bits are the sequence's value: the trigger rewrote what the statement drew.
    assert first & MASK == scalar(database_url, "SELECT last_value FROM leases_fence_seq")
    lease = await p.get_lease("k")
    assert lease is not None and lease.fence == first  # RETURNING and SELECT agree
    assert [le.fence for le in await p.list_leases("k")] == [first]
    assert scalar(database_url, "SELECT fence FROM leases WHERE key = 'k'::bytea") == first

    # Unchanged: renewal, same-owner re-acquire, batch renewal, release.
    assert await p.renew_lease("k", "a", LONG)
    assert await fence_of(p, "k", "a") == first
    assert await p.renew_leases([("k", "a")], LONG) == [True]
    assert await p.transfer_lease("k", "a", "a", LONG)  # same owner: a renewal
    lease = await p.get_lease("k")
    assert lease is not None and lease.fence == first

    fences = [first]
    assert await p.transfer_lease("k", "a", "b", LONG)
    lease = await p.get_lease("k")
    assert lease is not None and lease.owner == "b"
    fences.append(lease.fence)
    await p.release_lease("k", "b")
    fences.append(await fence_of(p, "k", "c", SHORT))
    await until_expired(p, "k")
    fences.append(await fence_of(p, "k", "d"))
    assert await p.force_release("k")
    fences.append(await fence_of(p, "k", "d"))  # the same owner, but a new tenure
    assert fences == sorted(set(fences)), fences  # strictly increasing
    assert {f >> SEQUENCE_BITS for f in fences} == {tl}


def test_the_sync_provider_sees_the_same_fences(database_url: str) -> None:
    key = f"sync-{uuid.uuid4().hex[:8]}"
    with SyncLeaseProvider.from_url(database_url, timeout=10) as p:
        got = p.acquire_lease(key, "a", LONG)
        assert got.fence is not None and got.fence >= 1 << SEQUENCE_BITS
        lease = p.get_lease(key)
        assert lease is not None and lease.fence == got.fence
        assert p.transfer_lease(key, "a", "b", LONG)
        moved = p.get_lease(key)
        assert moved is not None and moved.fence > got.fence
        p.release_lease(key, "b")


async def test_upgrade_keeps_existing_fences_below_every_new_one(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    await migrate.upgrade_async(url, "0003")
    async with SqlLeaseProvider.from_url(url, timeout=10) as p:
        plain = [await fence_of(p, f"k{i}", "a") for i in range(3)]
        assert max(plain) < 1 << SEQUENCE_BITS
        await migrate.upgrade_async(url)
        # A lease held across the upgrade keeps its fence on renewal and re-acquire (the update
        # trigger fires only when the fence changes).
        assert await p.renew_lease("k0", "a", LONG)
        assert await fence_of(p, "k0", "a") == plain[0]
        assert await p.transfer_lease("k1", "a", "b", LONG)
        moved = await p.get_lease("k1")
        assert moved is not None and moved.fence >= 1 << SEQUENCE_BITS
        fresh = await fence_of(p, "new", "a")
        assert fresh > moved.fence > max(plain)


async def test_downgrade_keeps_fences_ordered_even_for_purged_keys(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    await migrate.upgrade_async(url)
    async with SqlLeaseProvider.from_url(url, timeout=10) as p:
        kept = await fence_of(p, "kept", "a")
        gone = await fence_of(p, "gone", "a", SHORT)
        assert gone > kept >= 1 << SEQUENCE_BITS
        await until_expired(p, "gone")
        assert await p.purge_expired(min_age_ms=1) == 1  # its fence is no longer in the table
        await migrate.downgrade_async(url, "0003")
        # Without the trigger: plain sequence values, above every timeline fence handed out,
        # the purged key's included (the table's max(fence) alone would not cover it).
        again = await fence_of(p, "gone", "b")
        assert again > gone
        assert await p.transfer_lease("kept", "a", "b", LONG)
        moved = await p.get_lease("kept")
        assert moved is not None and moved.fence > again
        # Upgrading again continues above the plain values.
        await migrate.upgrade_async(url)
        assert await p.transfer_lease("kept", "b", "c", LONG)
        back = await p.get_lease("kept")
        assert back is not None and back.fence > moved.fence


async def test_a_sequence_set_above_the_timeline_stays_in_charge(
    make_database: Callable[[], str],
) -> None:
    """After a restore into a new cluster (timeline 1), setting the sequence past the restored
    fences is the whole re-base: the trigger never lowers what the sequence draws."""
    url = make_database()
    await migrate.upgrade_async(url)
    tl = timeline(url)
    restored = (tl + 2) << SEQUENCE_BITS | 500  # as if handed out on a later timeline
    with admin(url) as conn:
        conn.execute(
            "INSERT INTO leases (key, owner, fence, expires_at, acquired_at)"
            " VALUES ('r'::bytea, 'a'::bytea, %s, now() - interval '1 s', now() - interval '2 s')",
            (restored,),
        )
        assert conn.execute("SELECT fence FROM leases").fetchone() == (restored,)
        conn.execute("SELECT setval('leases_fence_seq', (SELECT max(fence) FROM leases))")
    async with SqlLeaseProvider.from_url(url, timeout=10) as p:
        nxt = await fence_of(p, "r", "b")
        assert nxt == restored + 1


# -- the least-privilege runtime role -------------------------------------------------------


@pytest.fixture
def runtime_url(make_database: Callable[[], str]) -> Iterator[str]:
    """A migrated database and a role with only the DML rights the README lists (as in
    tests/reliability/test_security.py): the trigger function needs no grant of its own."""
    owner_url = make_database()
    migrate.upgrade(owner_url)
    role = f"lease_runtime_{uuid.uuid4().hex[:10]}"
    db = make_url(owner_url).database
    with admin(owner_url) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN NOINHERIT'.encode())
        conn.execute(f'REVOKE ALL ON DATABASE "{db}" FROM PUBLIC'.encode())
        conn.execute(b"REVOKE ALL ON SCHEMA public FROM PUBLIC")
        conn.execute(f'GRANT CONNECT ON DATABASE "{db}" TO "{role}"'.encode())
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"'.encode())
        conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON leases TO "{role}"'.encode())
        conn.execute(f'GRANT USAGE ON SEQUENCE leases_fence_seq TO "{role}"'.encode())
    try:
        yield make_url(owner_url).set(username=role).render_as_string(hide_password=False)
    finally:
        with admin(owner_url) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute(f'DROP OWNED BY "{role}"'.encode())
            conn.execute(f'DROP ROLE "{role}"'.encode())


async def test_the_least_privilege_role_draws_timeline_fences(runtime_url: str) -> None:
    tl = timeline(runtime_url)
    async with SqlLeaseProvider.from_url(runtime_url, timeout=10) as p:
        first = await fence_of(p, "k", "a")
        assert first >> SEQUENCE_BITS == tl
        assert await p.transfer_lease("k", "a", "b", LONG)
        moved = await p.get_lease("k")
        assert moved is not None and moved.fence > first
        assert moved.fence >> SEQUENCE_BITS == tl
        await p.release_lease("k", "b")
        assert await fence_of(p, "k", "c") > moved.fence
