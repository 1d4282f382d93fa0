"""How the provider uses an engine's pool: owned engines keep connections, a caller's engine
gets every connection back as soon as no call of the provider is in flight."""

from __future__ import annotations

import asyncio

import psycopg
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from sql_lease import SqlLeaseProvider
from sql_lease.backends._urls import normalize_url

from .._events import eventually


async def test_a_callers_engine_is_shared_only_while_calls_overlap(database_url: str) -> None:
    engine = create_async_engine(normalize_url(database_url), pool_size=4, max_overflow=2)
    pool = engine.sync_engine.pool
    limit = 4 + 2
    checkouts = 0

    def count(*_: object) -> None:
        nonlocal checkouts
        checkouts += 1

    event.listen(pool, "checkout", count)
    provider = SqlLeaseProvider(engine, timeout=60)
    locker = await psycopg.AsyncConnection.connect(**connect_kwargs(database_url))
    try:
        for i in range(5):  # one at a time: each call hands its connection back
            assert (await provider.acquire_lease(f"seq{i}", "a", 30_000)).acquired
            assert pool.checkedout() == 0
        assert checkouts == 5 + 1  # and once before the first: finding the table's schema

        # One call kept in flight on purpose: its renewal waits for a row lock held here, so
        # the calls below overlap with it whatever the scheduling.
        assert (await provider.acquire_lease("anchor", "a", 30_000)).acquired
        await locker.execute("SELECT 1 FROM leases WHERE key = 'anchor'::bytea FOR UPDATE")
        checkouts = 0
        anchor = asyncio.create_task(provider.renew_lease("anchor", "a", 30_000))
        await eventually(lambda: checkouts == 1, "the anchor call's connection")
        calls = 0

        async def worker(w: int) -> None:
            nonlocal calls
            for i in range(40):
                await provider.renew_lease(f"seq{i % 5}", "a", 30_000)
                await provider.get_lease_owner(f"w{w}")
                calls += 2

        await asyncio.gather(*(worker(w) for w in range(8)))
        assert not anchor.done()  # so every call above overlapped with it
        assert calls == 640
        assert checkouts <= limit, checkouts  # reused while calls overlapped, not per call
        await locker.rollback()
        assert await anchor is True
        assert pool.checkedout() == 0  # the last call gave everything back
    finally:
        await locker.close()
        await engine.dispose()  # without provider.aclose(): nothing is left checked out
    assert pool.checkedout() == 0


def connect_kwargs(database_url: str) -> dict[str, object]:
    u = make_url(database_url)
    return {"host": u.host, "port": u.port, "user": u.username, "dbname": u.database}


async def test_an_owned_engine_keeps_its_connections_between_calls(database_url: str) -> None:
    async with SqlLeaseProvider.from_url(database_url, pool_size=2) as provider:
        pool = provider.engine.sync_engine.pool
        for i in range(5):
            await provider.get_lease_owner(f"k{i}")
            assert pool.checkedout() == 1  # kept: no checkout per call
    assert pool.checkedout() == 0  # aclose gave it back
