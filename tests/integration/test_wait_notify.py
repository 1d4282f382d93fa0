"""Waiting on PostgreSQL: NOTIFY wake-up latency, and the fallbacks when notifications are lost."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import SqlLeaseProvider
from sql_lease._holding.wait import hub_for
from sql_lease.backends.postgres.listen import Listener

from .._events import acquired_at, eventually

LONG = 30_000  # the holder's TTL: an expiry-based re-check would come after 30 s
PATIENT = 2 * LONG  # a waiter's timeout: past the holder's expiry, so only a wake-up beats it


@pytest.fixture
async def waiting_side(database_url: str) -> AsyncIterator[SqlLeaseProvider]:
    """A second provider (its own engine and listener), as another process would have."""
    provider = SqlLeaseProvider.from_url(database_url, timeout=10)
    yield provider
    await provider.aclose()  # closes its listener too


def run_sql(database_url: str, sql: str, *args: object) -> list[tuple[object, ...]]:
    u = make_url(database_url)
    with psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    ) as conn:
        cursor = conn.execute(sql, args)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


async def asleep(provider: SqlLeaseProvider, key: str, waiter: asyncio.Task[Any]) -> Listener:
    """Wait until ``waiter`` has marked ``key``, its LISTEN is in place and it sleeps."""
    hub = hub_for(provider)
    listener = hub.listener
    assert isinstance(listener, Listener)
    await eventually(
        lambda: (hub.sleeping(key) == 1 and listener.connected) or waiter.done(),
        f"a waiter of {key!r} asleep with LISTEN in place",
    )
    assert not waiter.done(), waiter.result()
    return listener


async def test_a_notified_waiter_acquires_within_milliseconds_of_the_release(
    sql_provider: SqlLeaseProvider, waiting_side: SqlLeaseProvider
) -> None:
    latencies = []
    for i in range(25):
        key = f"thread\0{i}"
        held = await sql_provider.acquire_lease(key, "holder", LONG)
        waiter = asyncio.create_task(
            waiting_side.wait_for_lease(key, "waiter", LONG, timeout_ms=PATIENT)
        )
        listener = await asleep(waiting_side, key, waiter)
        generation, notified = listener.generation, listener.notifications
        await sql_provider.release_lease(key, "holder")
        released = time.perf_counter()
        got = await waiter
        latency = time.perf_counter() - released
        assert got.acquired and got.owner == "waiter"
        # It would have slept until the holder's expiry: it was woken, by the notification
        # (one arrived, and the listener did not reconnect meanwhile).
        assert acquired_at(got.expires_at, LONG) < held.expires_at
        assert listener.notifications > notified and listener.generation == generation
        latencies.append(latency * 1000)
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
    waiter = asyncio.create_task(waiting_side.wait_for_lease("k", "w", LONG, timeout_ms=PATIENT))
    listener = await asleep(waiting_side, "k", waiter)
    notified = listener.notifications
    assert await sql_provider.transfer_lease("k", "a", "b", LONG)
    moved = await sql_provider.get_lease("k")
    assert moved is not None and moved.owner == "b"
    # The notification takes the waiter out of line; it looks, sees b, and sleeps again.
    await eventually(lambda: listener.notifications > notified, "the transfer's notification")
    await asleep(waiting_side, "k", waiter)
    await sql_provider.release_lease("k", "b")
    got = await waiter
    assert got.acquired and got.owner == "w"
    assert acquired_at(got.expires_at, LONG) < moved.expires_at  # woken, not b's expiry


async def test_a_waiter_recovers_when_the_listener_connection_is_killed(
    database_url: str, sql_provider: SqlLeaseProvider, waiting_side: SqlLeaseProvider
) -> None:
    held = await sql_provider.acquire_lease("k", "holder", LONG)
    waiter = asyncio.create_task(waiting_side.wait_for_lease("k", "w", LONG, timeout_ms=PATIENT))
    listener = await asleep(waiting_side, "k", waiter)
    generation, pid = listener.generation, listener.server_pid
    assert pid is not None
    # Kill the listening backend and release once it is gone: the notification goes nowhere.
    run_sql(database_url, "SELECT pg_terminate_backend(%s)", pid)
    await eventually(
        lambda: not run_sql(database_url, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", pid),
        "the listening backend gone",
    )
    await sql_provider.release_lease("k", "holder")
    got = await waiter
    assert got.acquired
    assert acquired_at(got.expires_at, LONG) < held.expires_at  # not the holder's expiry
    assert listener.generation > generation  # it reconnected, and re-checked on reconnect


async def test_a_lost_notification_is_made_up_for_at_the_holders_expiry(
    database_url: str, sql_provider: SqlLeaseProvider, waiting_side: SqlLeaseProvider
) -> None:
    await sql_provider.acquire_lease("k", "holder", 2_000)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LONG / 1000  # the waiter's own deadline is no earlier than this
    waiter = asyncio.create_task(waiting_side.wait_for_lease("k", "w", LONG, timeout_ms=LONG))
    listener = await asleep(waiting_side, "k", waiter)
    generation = listener.generation
    # A release that sends no notification (as if a pooler had swallowed it): the row is
    # shortened to expire in 0.5 s, behind the sleeping waiter's back.
    run_sql(
        database_url,
        "UPDATE leases SET expires_at = clock_timestamp() + interval '500 milliseconds'"
        " WHERE key = %s",
        b"k",
    )
    got = await waiter
    assert got.acquired
    # Woken at the expiry it knew of (2 s after the holder's acquire), not at its own
    # timeout, and not by a reconnect.
    assert loop.time() < deadline
    assert listener.generation == generation


async def test_the_listener_stays_out_of_the_pool(
    sql_provider: SqlLeaseProvider, waiting_side: SqlLeaseProvider
) -> None:
    await sql_provider.acquire_lease("k", "holder", LONG)
    pool = waiting_side.engine.sync_engine.pool
    assert await waiting_side.get_lease_owner("k") == "holder"
    before = pool.checkedout()  # type: ignore[attr-defined]
    waiter = asyncio.create_task(waiting_side.wait_for_lease("k", "w", LONG, timeout_ms=PATIENT))
    await asleep(waiting_side, "k", waiter)  # the listener is connected
    assert pool.checkedout() == before  # type: ignore[attr-defined]
    await sql_provider.release_lease("k", "holder")
    assert (await waiter).acquired


async def test_a_key_taken_between_marking_and_the_retry_is_marked_again(
    sql_provider: SqlLeaseProvider, waiting_side: SqlLeaseProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is free when the waiter marks it wanted, and a competitor takes it before the
    waiter's retry: the competitor's lease is marked too, so its release wakes the waiter
    (which would otherwise sleep until the competitor's expiry)."""
    await sql_provider.acquire_lease("k", "first", LONG)
    real_acquire = waiting_side.acquire_lease
    calls = 0
    taken: list[Any] = []

    async def acquire(key: str, owner: str, ttl_ms: int) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # the retry after marking: the competitor takes the free key first
            taken.append(await sql_provider.acquire_lease(key, "competitor", LONG))
        result = await real_acquire(key, owner, ttl_ms)
        if calls == 1:  # the first try failed; the holder leaves before the key is marked
            await sql_provider.release_lease(key, "first")
        return result

    monkeypatch.setattr(waiting_side, "acquire_lease", acquire)
    waiter = asyncio.create_task(waiting_side.wait_for_lease("k", "w", LONG, timeout_ms=PATIENT))
    listener = await asleep(waiting_side, "k", waiter)
    [competitor] = taken
    assert competitor.acquired and calls == 2
    notified = listener.notifications
    await sql_provider.release_lease("k", "competitor")
    got = await waiter
    assert got.acquired and got.owner == "w"
    assert listener.notifications > notified  # woken by the competitor's release
    assert acquired_at(got.expires_at, LONG) < competitor.expires_at
