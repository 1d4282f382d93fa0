"""Waiting on PostgreSQL: NOTIFY wake-up latency, and the fallbacks when notifications are lost."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import SqlLeaseProvider
from sql_lease._wait import close_listener, hub_for

LONG = 30_000  # the holder's TTL: an expiry-based re-check would come after 30 s


@pytest.fixture
async def waiting_side(database_url: str) -> AsyncIterator[SqlLeaseProvider]:
    """A second provider (its own engine and listener), as another process would have."""
    provider = SqlLeaseProvider.from_url(database_url, timeout=10)
    yield provider
    await close_listener(provider)
    await provider.aclose()


def run_sql(database_url: str, sql: str, *args: object) -> list[tuple[object, ...]]:
    u = make_url(database_url)
    with psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    ) as conn:
        cursor = conn.execute(sql, args)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


async def test_a_notified_waiter_acquires_within_milliseconds_of_the_release(
    sql_provider: SqlLeaseProvider, waiting_side: SqlLeaseProvider
) -> None:
    latencies = []
    for i in range(25):
        key = f"thread\0{i}"
        await sql_provider.acquire_lease(key, "holder", LONG)
        waiter = asyncio.create_task(
            waiting_side.wait_for_lease(key, "waiter", LONG, timeout_ms=10_000)
        )
        await asyncio.sleep(0.05)  # the waiter is asleep: marked the key, listening
        assert not waiter.done()
        await sql_provider.release_lease(key, "holder")
        released = time.perf_counter()
        got = await asyncio.wait_for(waiter, 5)
        latency = time.perf_counter() - released
        assert got.acquired and got.owner == "waiter"
        assert latency < 2.0  # far before the holder's expiry: woken by the notification
        latencies.append(latency * 1000)
    listener = hub_for(waiting_side).listener
    assert listener is not None and listener.notifications >= 25
    cuts = statistics.quantiles(latencies, n=20)
    print(
        f"\nrelease -> waiter acquired, {len(latencies)} samples: median "
        f"{statistics.median(latencies):.1f} ms, p95 {cuts[18]:.1f} ms, "
        f"min {min(latencies):.1f} ms, max {max(latencies):.1f} ms"
    )


async def test_a_transfer_wakes_a_waiter_that_goes_back_to_sleep(
    sql_provider: SqlLeaseProvider, waiting_side: SqlLeaseProvider
) -> None:
    await sql_provider.acquire_lease("k", "a", LONG)
    waiter = asyncio.create_task(waiting_side.wait_for_lease("k", "w", LONG, timeout_ms=10_000))
    await asyncio.sleep(0.1)
    assert await sql_provider.transfer_lease("k", "a", "b", LONG)
    await asyncio.sleep(0.3)
    assert not waiter.done()  # woke, saw b, sleeps again
    await sql_provider.release_lease("k", "b")
    assert (await asyncio.wait_for(waiter, 2)).owner == "w"


async def test_a_waiter_recovers_when_the_listener_connection_is_killed(
    database_url: str, sql_provider: SqlLeaseProvider, waiting_side: SqlLeaseProvider
) -> None:
    await sql_provider.acquire_lease("k", "holder", LONG)
    waiter = asyncio.create_task(waiting_side.wait_for_lease("k", "w", LONG, timeout_ms=10_000))
    await asyncio.sleep(0.1)
    listener = hub_for(waiting_side).listener
    assert listener is not None and listener.connected and listener.server_pid is not None
    generation = listener.generation
    # Kill the listening backend and release at once: the notification goes nowhere.
    run_sql(database_url, "SELECT pg_terminate_backend(%s)", listener.server_pid)
    await sql_provider.release_lease("k", "holder")
    released = time.monotonic()
    got = await asyncio.wait_for(waiter, 5)
    assert got.acquired and time.monotonic() - released < 2.0  # not the holder's expiry
    assert listener.generation > generation  # it reconnected, and re-checked on reconnect


async def test_a_lost_notification_is_made_up_for_at_the_holders_expiry(
    database_url: str, sql_provider: SqlLeaseProvider, waiting_side: SqlLeaseProvider
) -> None:
    await sql_provider.acquire_lease("k", "holder", 1_200)
    waiter = asyncio.create_task(waiting_side.wait_for_lease("k", "w", LONG, timeout_ms=10_000))
    await asyncio.sleep(0.2)
    # A release that sends no notification (as if a pooler had swallowed it): the row is
    # shortened to expire in 0.5 s, behind the waiter's back.
    run_sql(
        database_url,
        "UPDATE leases SET expires_at = clock_timestamp() + interval '500 milliseconds'"
        " WHERE key = %s",
        b"k",
    )
    started = time.monotonic()
    got = await asyncio.wait_for(waiter, 5)
    waited = time.monotonic() - started
    assert got.acquired
    assert 0.5 <= waited < 2.0  # at the expiry it knew of (1.2 s after acquire), plus jitter


async def test_the_listener_stays_out_of_the_pool(
    sql_provider: SqlLeaseProvider, waiting_side: SqlLeaseProvider
) -> None:
    await sql_provider.acquire_lease("k", "holder", LONG)
    pool = waiting_side.engine.sync_engine.pool
    assert await waiting_side.get_lease_owner("k") == "holder"
    before = pool.checkedout()  # type: ignore[attr-defined]
    waiter = asyncio.create_task(waiting_side.wait_for_lease("k", "w", LONG, timeout_ms=10_000))
    await asyncio.sleep(0.1)
    listener = hub_for(waiting_side).listener
    assert listener is not None and listener.connected
    assert pool.checkedout() == before  # type: ignore[attr-defined]
    await sql_provider.release_lease("k", "holder")
    assert (await waiter).acquired
