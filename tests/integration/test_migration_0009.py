"""Migration 0009 (counting leases, metadata): leases taken before it keep working after it,
the library's plain calls work on a database still before it (a rolling upgrade), offline SQL
names the two columns, and downgrading removes them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from sql_lease import SqlLeaseProvider, migrate
from sql_lease.sync import SqlLeaseProvider as SyncProvider


def _urls(request: pytest.FixtureRequest, tmp_path: Path, kind: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'leases.db'}"
    fixture = "make_mariadb_database" if kind == "mariadb" else "make_database"
    make: Callable[[], str] = request.getfixturevalue(fixture)
    return make()


@pytest.mark.parametrize("kind", ["postgresql", "sqlite", "mariadb"])
def test_leases_from_before_0009_keep_working_after_it(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    url = _urls(request, tmp_path, kind)
    migrate.upgrade(url, "0006")

    async def before() -> int:
        async with SqlLeaseProvider.from_url(url) as p:  # today's statements on 0006
            first = await p.acquire_lease("old", "a", 60_000)
            assert first.acquired and first.fence is not None
            assert await p.renew_lease("old", "a", 60_000)
            return first.fence

    fence = asyncio.run(before())
    migrate.upgrade(url)

    async def after() -> None:
        async with SqlLeaseProvider.from_url(url) as p:
            lease = await p.get_lease("old")
            assert lease is not None and (lease.owner, lease.fence) == ("a", fence)
            assert lease.metadata is None
            assert [h.owner for h in await p.get_lease_holders("old")] == ["a"]
            assert not (await p.acquire_lease("old", "b", 60_000)).acquired
            # The same owner adds metadata to its lease; the fence stays.
            again = await p.acquire_lease("old", "a", 60_000, metadata="m")
            assert again.acquired and again.fence == fence
            assert (await p.acquire_lease("sem", "x", 60_000, limit=2)).acquired
            await p.release_lease("old", "a")
            assert await p.get_lease_owner("old") is None

    asyncio.run(after())
    migrate.downgrade(url, "0006")
    assert migrate.current(url) == "0006"


@pytest.mark.parametrize("kind", ["postgresql", "sqlite", "mariadb"])
def test_plain_calls_that_miss_answer_a_miss_on_a_table_before_0009(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    """A miss asks for a counting grant too; on 0006 that statement meets no columns (a rolling
    upgrade: new code, old schema), and the miss stands instead of a schema error."""
    url = _urls(request, tmp_path, kind)
    migrate.upgrade(url, "0006")

    async def misses() -> None:
        async with SqlLeaseProvider.from_url(url) as p:
            assert (await p.acquire_lease("k", "a", 60_000)).acquired
            await p.release_lease("k", "b")  # not b's: nothing happens
            assert not await p.renew_lease("k", "b", 60_000)
            assert not await p.transfer_lease("k", "b", "c", 60_000)
            assert await p.release("k", "b") is None
            assert await p.renew("k", "b", 60_000) is None
            assert [
                r is not None for r in await p.renew_many([("k", "a"), ("k", "b")], 60_000)
            ] == [
                True,
                False,
            ]
            assert await p.get_lease_owner("k") == "a"
            await p.release_lease("k", "a")
            assert not await p.renew_lease("k", "a", 60_000)  # released: a miss, no error

    asyncio.run(misses())
    with SyncProvider.from_url(url) as p:  # the sync provider's misses alike
        assert p.acquire_lease("s", "a", 60_000).acquired
        p.release_lease("s", "b")
        assert not p.renew_lease("s", "b", 60_000)
        assert not p.transfer_lease("s", "b", "c", 60_000)
        assert p.get_lease_owner("s") == "a"
    assert migrate.current(url) == "0006"


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite", "mariadb"])
def test_offline_sql_of_0009_adds_and_drops_the_columns(dialect: str) -> None:
    url = {
        "postgresql": "postgresql://u@h/db",
        "sqlite": "sqlite:///x.db",
        "mariadb": "mariadb://u@h/db",
    }[dialect]
    up = migrate.upgrade(url, "0006:0009", sql=True) or ""
    assert "slot_limit" in up and "holders" in up, up
    assert ("JSONB" in up) == (dialect == "postgresql"), up
    if dialect == "mariadb":
        assert "ADD COLUMN slot_limit INT NULL" in up and "ADD COLUMN holders JSON NULL" in up, up
    down = migrate.downgrade(url, "0009:0006", sql=True) or ""
    assert "DROP COLUMN holders" in down and "DROP COLUMN slot_limit" in down, down
