"""The LISTEN connection of `wait_for_lease` never needs a slot of the provider's pool.

A `from_url` provider keeps the connections its calls used checked out of its pool
(`sql_lease._sqlprovider.connections`): while 40 callers are busy, every slot is out. The
listener used to check its connection out of that same pool and time out there, so waiters
polled instead of being notified, and "listener could not connect" was logged. Two pools: the
default 10 + 10 (with coalescing off, so that 40 concurrent calls need 20 connections) and one of
2 slots.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from sql_lease import SqlLeaseProvider
from sql_lease._holding.wait import hub_for
from sql_lease.backends.postgres.listen import Listener

from .._events import acquired_at, eventually

LONG = 30_000  # the holder's TTL: a waiter not woken would sleep towards its expiry
CALLERS = 40


@pytest.mark.parametrize(
    ("options", "slots"),
    [({"coalesce": False}, 20), ({"pool_size": 2, "max_overflow": 0}, 2)],
    ids=["default-pool", "two-slots"],
)
async def test_the_listener_connects_while_every_pool_slot_is_taken(
    database_url: str, caplog: pytest.LogCaptureFixture, options: dict[str, Any], slots: int
) -> None:
    caplog.set_level(logging.WARNING, logger="sql_lease.wait")
    provider = SqlLeaseProvider.from_url(database_url, timeout=10, **options)
    pool = provider.engine.sync_engine.pool
    try:
        async with provider.engine.connect() as conn:
            await conn.exec_driver_sql("TRUNCATE leases")
            await conn.commit()
        held = await provider.acquire_lease("wanted", "holder", LONG)

        stop = asyncio.Event()

        async def caller(i: int) -> None:
            while not stop.is_set():
                await provider.acquire_lease(f"c{i}", "caller", LONG)
                await provider.renew_lease(f"c{i}", "caller", LONG)
                # A breath between rounds: a tight loop lets the busiest callers take every
                # connection handed back before a queued caller gets one (not tested here).
                await asyncio.sleep(0.005)

        callers = [asyncio.create_task(caller(i)) for i in range(CALLERS)]
        try:
            await eventually(lambda: pool.checkedout() == slots, "every pool slot checked out")
            waiter = asyncio.create_task(
                provider.wait_for_lease("wanted", "waiter", LONG, timeout_ms=2 * LONG)
            )
            hub = hub_for(provider)
            await eventually(lambda: hub.listener is not None, "a listener")
            listener = hub.listener
            assert isinstance(listener, Listener)
            await eventually(
                lambda: (hub.sleeping("wanted") == 1 and listener.connected) or waiter.done(),
                "the waiter asleep with LISTEN in place",
            )
            assert not waiter.done(), waiter.result()
            assert pool.checkedout() == slots  # the listener took no slot of the pool
            notified = listener.notifications
            await provider.release_lease("wanted", "holder")
            got = await waiter
        finally:
            stop.set()
            await asyncio.gather(*callers)
        assert got.acquired and got.owner == "waiter"
        assert listener.notifications > notified  # woken by the release's NOTIFY
        assert acquired_at(got.expires_at, LONG) < held.expires_at
        assert listener.generation == 1  # one connection, never lost nor retried
        assert [r.getMessage() for r in caplog.records if r.name == "sql_lease.wait"] == []
    finally:
        await provider.aclose()
