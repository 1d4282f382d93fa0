"""Fencing inside the database: `provider.guard(conn, key, fence)` in the caller's transaction."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from sql_lease import LeaseError, LeaseLost, SqlLeaseProvider

from .._events import eventually

LONG = 30_000


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[AsyncEngine]:
    """The application's own engine, with a table that the lease holder writes to."""
    engine = create_async_engine(database_url.replace("postgresql://", "postgresql+asyncpg://"))
    async with engine.begin() as conn:
        await conn.execute(text("DROP TABLE IF EXISTS guarded_writes"))
        await conn.execute(text("CREATE TABLE guarded_writes (writer text, fence bigint)"))
    yield engine
    async with engine.begin() as conn:
        await conn.execute(text("DROP TABLE guarded_writes"))
    await engine.dispose()


async def write(engine: AsyncEngine, provider: SqlLeaseProvider, writer: str, fence: int) -> None:
    async with engine.begin() as conn:
        await provider.guard(conn, "k", fence)
        await conn.execute(
            text("INSERT INTO guarded_writes VALUES (:w, :f)"), {"w": writer, "f": fence}
        )


async def writers(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT writer FROM guarded_writes ORDER BY fence"))
        return [row[0] for row in rows]


async def test_a_stale_owner_cannot_commit_a_guarded_write(
    app: AsyncEngine, sql_provider: SqlLeaseProvider
) -> None:
    stale = await sql_provider.acquire_lease("k", "a", 200)
    await asyncio.sleep(0.3)  # a pauses past its TTL...
    current = await sql_provider.acquire_lease("k", "b", LONG)  # ...and b takes over
    assert stale.fence is not None and current.fence is not None
    with pytest.raises(LeaseLost) as info:
        await write(app, sql_provider, "a", stale.fence)
    assert isinstance(info.value, LeaseError) and info.value.fence == stale.fence
    await write(app, sql_provider, "b", current.fence)
    assert await writers(app) == ["b"]


async def test_an_expired_or_released_fence_is_rejected_even_without_a_successor(
    app: AsyncEngine, sql_provider: SqlLeaseProvider
) -> None:
    held = await sql_provider.acquire_lease("k", "a", LONG)
    assert held.fence is not None
    await sql_provider.release_lease("k", "a")
    with pytest.raises(LeaseLost):
        await write(app, sql_provider, "a", held.fence)
    assert await writers(app) == []


async def test_a_guard_holds_off_a_takeover_until_the_transaction_ends(
    app: AsyncEngine, sql_provider: SqlLeaseProvider
) -> None:
    held = await sql_provider.acquire_lease("k", "a", 300)
    assert held.fence is not None
    async with app.begin() as conn:
        await sql_provider.guard(conn, "k", held.fence)
        await asyncio.sleep(0.4)  # a's lease expires while its guarded transaction is open
        takeover = asyncio.create_task(sql_provider.acquire_lease("k", "b", LONG))
        await eventually(lambda: lock_waits(app), "b's acquire waiting for a row lock")
        assert not takeover.done()  # FOR SHARE blocks b's acquire until a commits
        await conn.execute(text("INSERT INTO guarded_writes VALUES ('a', :f)"), {"f": held.fence})
    got = await takeover
    assert got.acquired and got.fence is not None and got.fence > held.fence
    assert await writers(app) == ["a"]


async def lock_waits(engine: AsyncEngine) -> int:
    """How many statements on the test database wait for a lock."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
        return int(rows.scalar_one())


async def test_guard_needs_a_transaction_and_checks_its_arguments(
    app: AsyncEngine, sql_provider: SqlLeaseProvider
) -> None:
    held = await sql_provider.acquire_lease("k", "a", LONG)
    assert held.fence is not None
    auto = app.execution_options(isolation_level="AUTOCOMMIT")
    async with auto.connect() as conn:
        with pytest.raises(ValueError, match="transaction"):
            await sql_provider.guard(conn, "k", held.fence)
    async with app.begin() as conn:
        with pytest.raises(TypeError):
            await sql_provider.guard(conn, "k", True)
        with pytest.raises(TypeError):
            await sql_provider.guard(conn, 3, held.fence)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await sql_provider.guard(object(), "k", held.fence)
        await sql_provider.guard(conn, "k", held.fence)
