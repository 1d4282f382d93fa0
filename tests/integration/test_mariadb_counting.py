"""Counting leases and all-or-none calls on MariaDB beyond the contract suite: what the
statements keep in session variables is right on a connection's very first statement, and
all-or-none acquires racing on overlapping keys (some without a row yet) never deadlock and
never leave a caller with only part of its keys. The limit=3 race by database time is
tests/integration/test_counting_race.py (with MariaDB among its backends)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable

import asyncmy
import pytest
from sqlalchemy.engine import make_url

from sql_lease import SqlLeaseProvider, migrate
from sql_lease.backends import backend_named
from sql_lease.backends.mariadb.placeholders import compiled
from sql_lease.backends.mariadb.sessions import session_sql

from .. import _mariadb

LONG = 30_000


@pytest.fixture
def url(make_mariadb_database: Callable[[], str]) -> str:
    made = make_mariadb_database()
    migrate.upgrade(made)
    return made


async def test_a_fresh_connections_first_counting_statements_report_right(url: str) -> None:
    async with SqlLeaseProvider.from_url(url, timeout=10) as first:
        granted = await first.acquire_lease("sem", "a", LONG, limit=2)
        assert granted.acquired and granted.fence is not None
        assert (await first.acquire_lease("x", "a", LONG)).acquired
    # Each call below is the first statement of a new provider's new connection.
    async with SqlLeaseProvider.from_url(url, timeout=10) as p:
        released = await p.release("sem", "a")
        assert released is not None and released.fence == granted.fence
    async with SqlLeaseProvider.from_url(url, timeout=10) as p:
        refused = await p.acquire_leases(["w", "x", "y"], "b", LONG)
        assert (refused.acquired, refused.blocked_key, refused.blocked_by) == (False, "x", "a")
    async with SqlLeaseProvider.from_url(url, timeout=10) as p:
        taken = await p.acquire_leases(["v", "w"], "b", LONG)
        assert taken.acquired and set(taken.leases) == {"v", "w"}
        fences = [r.fence for r in taken.leases.values()]
        assert all(f is not None and f > granted.fence for f in fences)
    async with SqlLeaseProvider.from_url(url, timeout=10) as p:
        again = await p.acquire_lease("sem", "c", LONG, limit=2, metadata=b"\x00m")
        assert again.acquired and again.fence is not None and again.fence > granted.fence
        [holder] = await p.get_lease_holders("sem")
        assert (holder.owner, holder.metadata) == ("c", b"\x00m")


@pytest.mark.timeout(120)
async def test_all_or_none_acquires_on_overlapping_keys_never_deadlock(url: str) -> None:
    keys = [f"k{i}" for i in range(6)]
    errors: list[BaseException] = []
    wins = 0

    async def client(p: SqlLeaseProvider, name: str, rng: random.Random) -> None:
        nonlocal wins
        stop = time.monotonic() + 3.0
        serial = 0
        while time.monotonic() < stop:
            serial += 1
            owner = f"{name}-{serial}"
            want = rng.sample(keys, 3)  # in any order: the library sorts them
            try:
                result = await p.acquire_leases(want, owner, 5_000)
                if result.acquired:
                    wins += 1
                    owners = [await p.get_lease_owner(k) for k in want]
                    assert owners == [owner] * 3, (owner, owners)
                    await asyncio.sleep(rng.random() * 0.005)
                    assert await p.release_leases(want, owner) == 3
                else:
                    assert result.blocked_key in want and result.blocked_by, result
            except Exception as exc:  # every failure is collected and reported
                errors.append(exc)
                return

    providers = [SqlLeaseProvider.from_url(url, timeout=10) for _ in range(2)]
    try:
        rng = random.Random(7)
        await asyncio.gather(
            *(client(providers[c % 2], f"c{c}", random.Random(rng.random())) for c in range(8))
        )
    finally:
        for p in providers:
            await p.aclose()
    assert errors == []
    assert wins > 10


@pytest.mark.timeout(120)
async def test_the_all_or_none_statements_themselves_never_deadlock(url: str) -> None:
    """The catalogue's all-or-none statements on plain asyncmy connections, without the
    provider (which runs a deadlock victim's statement again, hiding it): clients racing on
    overlapping sorted key sets, some keys without a row, never get error 1213."""
    counting = backend_named("mariadb").catalogue("leases", None).counting
    assert counting is not None and counting.ensure is not None
    u = make_url(url)
    keys = [f"d{i}".encode() for i in range(8)]
    failures: list[BaseException] = []
    taken = 0

    async def client(rng: random.Random, name: str) -> None:
        nonlocal taken
        conn = await asyncmy.connect(
            host=u.host,
            port=u.port or 3306,
            user=u.username,
            password=u.password or "",
            db=u.database,
            autocommit=True,
            init_command=session_sql(10.0),
        )
        cursor = conn.cursor()

        async def run(sql: str, args: tuple[object, ...]) -> list[tuple[object, ...]]:
            text, order = compiled(sql)
            await cursor.execute(text, tuple(args[i] for i in order))
            return list(await cursor.fetchall())

        try:
            stop = time.monotonic() + 3.0
            while time.monotonic() < stop:
                want = sorted(rng.sample(keys, 3))
                owner = name.encode()
                acquire = counting.acquire_all(3)
                rows = await run(acquire.sql, (*want, owner, 2_000))
                if not rows or any(row[1] is None for row in rows):
                    await run(counting.ensure(3).sql, tuple(want))
                    rows = await run(acquire.sql, (*want, owner, 2_000))
                if rows and all(row[1] == 1 for row in rows):
                    taken += 1
                    assert len(await run(counting.release_all(3).sql, (*want, owner))) == 3
        except Exception as exc:  # every failure is collected and reported
            failures.append(exc)
        finally:
            conn.close()

    rng = random.Random(11)
    await asyncio.gather(*(client(random.Random(rng.random()), f"r{c}") for c in range(8)))
    assert failures == []
    assert taken > 10


async def test_the_stored_grants_carry_numbers_and_the_rows_newest_fence(url: str) -> None:
    async with SqlLeaseProvider.from_url(url, timeout=10) as p:
        assert (await p.acquire_lease("sem", "a", LONG, limit=3)).acquired
        assert (await p.acquire_lease("sem", "b", LONG, limit=3)).acquired
        assert await p.transfer_lease("sem", "a", "c", LONG)
        fences = [h.fence for h in await p.get_lease_holders("sem")]
    u = make_url(url)
    with _mariadb.admin_connect(u, u.database) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT fence, holders FROM leases WHERE `key` = 'sem'")
        [(fence, holders)] = cursor.fetchall()
    grants = json.loads(holders)
    assert all(type(g[f]) is int for g in grants for f in ("f", "e", "a")), grants
    assert sorted(g["f"] for g in grants) == sorted(fences)
    assert fence == max(fences)
