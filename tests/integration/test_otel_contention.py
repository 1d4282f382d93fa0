"""Contention made visible: each instrument of `OpenTelemetryObserver` records what happened,
with the real OpenTelemetry SDK (in-memory reader) on real PostgreSQL and SQLite.

Acquire outcomes (acquired, refused, error), the wait of ``wait_for_lease`` and
``hold(wait_ms=)``, how long a hold held and how it ended, late renewals, and the opt-in, capped
lease-class attribute (never raw keys).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sql_lease import LeaseLost, LeaseNotAcquired, LeaseSchemaError, SqlLeaseProvider
from sql_lease.observer import OTHER_CLASS, by_prefix
from sql_lease.otel import HOLD_BUCKETS, INSTRUMENTS, WAIT_BUCKETS, OpenTelemetryObserver

from ._observed import key
from .test_otel import Telemetry, telemetry

ATTEMPTS = "sql_lease.lease.acquire.attempts"
WAIT = "sql_lease.lease.wait.duration"
HOLD = "sql_lease.lease.hold.duration"
LATE = "sql_lease.lease.late_renewals"
CLASS = "sql_lease.lease.class"


@pytest.fixture
def otel() -> Telemetry:
    return telemetry(spans=False)


@pytest.fixture(params=["postgresql", "sqlite"])
def url(request: pytest.FixtureRequest) -> str:
    fixture = "database_url" if request.param == "postgresql" else "sqlite_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
async def provider(url: str, otel: Telemetry) -> AsyncIterator[SqlLeaseProvider]:
    p = SqlLeaseProvider.from_url(url, timeout=10, observer=otel.observer)
    yield p
    await p.aclose()


def by(otel: Telemetry, name: str, attribute: str) -> dict[Any, Any]:
    """The points of ``name`` by the value of ``attribute`` (None when absent)."""
    return {p.attributes.get(attribute): p for p in otel.points(name)}


def counts(otel: Telemetry, name: str, attribute: str) -> dict[Any, int]:
    return {value: int(p.value) for value, p in by(otel, name, attribute).items()}


async def test_an_acquire_counts_as_acquired_and_one_that_finds_a_holder_as_refused(
    provider: SqlLeaseProvider, otel: Telemetry
) -> None:
    k = key()
    assert (await provider.acquire_lease(k, "a", 60_000)).acquired
    assert (await provider.acquire_lease(k, "a", 60_000)).acquired  # own lease: renewed
    assert not (await provider.acquire_lease(k, "b", 60_000)).acquired
    assert counts(otel, ATTEMPTS, "sql_lease.acquire.outcome") == {"acquired": 2, "refused": 1}
    # No key among the attributes unless a lease class is configured.
    for point in otel.points(ATTEMPTS):
        assert set(point.attributes) == {"sql_lease.acquire.outcome"}


async def test_an_acquire_that_raises_counts_as_an_error_with_its_type(
    url: str, otel: Telemetry
) -> None:
    p = SqlLeaseProvider.from_url(url, table_name="no_such_leases", observer=otel.observer)
    try:
        with pytest.raises(LeaseSchemaError):
            await p.acquire_lease(key(), "a", 1_000)
        with pytest.raises(ValueError, match="ttl_ms"):
            await p.acquire_lease(key(), "a", -1)  # bad input: never reported
    finally:
        await p.aclose()
    [point] = otel.points(ATTEMPTS)
    assert dict(point.attributes) == {
        "sql_lease.acquire.outcome": "error",
        "error.type": "sql_lease.errors.LeaseSchemaError",
    }
    assert point.value == 1


async def test_a_wait_that_times_out_records_its_duration_as_timeout(
    provider: SqlLeaseProvider, otel: Telemetry
) -> None:
    k = key()
    await provider.acquire_lease(k, "holder", 60_000)
    started = time.perf_counter()
    assert not (await provider.wait_for_lease(k, "me", 10_000, timeout_ms=300)).acquired
    took = time.perf_counter() - started
    [point] = otel.points(WAIT)
    assert point.attributes["sql_lease.wait.outcome"] == "timeout"
    assert point.count == 1
    assert 0.3 <= point.sum <= took
    assert tuple(point.explicit_bounds) == WAIT_BUCKETS
    attempts = counts(otel, ATTEMPTS, "sql_lease.acquire.outcome")
    assert attempts["refused"] >= 2 and "acquired" in attempts  # the holder's, then the tries


async def test_a_wait_that_gets_the_lease_records_the_time_until_the_release(
    provider: SqlLeaseProvider, otel: Telemetry
) -> None:
    k = key()
    await provider.acquire_lease(k, "holder", 60_000)
    waiting = asyncio.create_task(provider.wait_for_lease(k, "me", 10_000, timeout_ms=20_000))
    await asyncio.sleep(0.25)
    await provider.release_lease(k, "holder")
    assert (await waiting).acquired
    # A free key is a wait too: recorded, short.
    assert (await provider.wait_for_lease(key(), "me", 10_000, timeout_ms=5_000)).acquired
    [point] = otel.points(WAIT)
    assert point.attributes["sql_lease.wait.outcome"] == "acquired"
    assert point.count == 2
    assert point.sum >= 0.25
    assert point.min < 0.25 <= point.max


async def test_hold_with_wait_ms_records_a_wait_and_a_hold_that_ended_released(
    provider: SqlLeaseProvider, otel: Telemetry
) -> None:
    k = key()
    async with provider.hold(k, "a", 10_000, wait_ms=1_000):
        await asyncio.sleep(0.2)
    waits = by(otel, WAIT, "sql_lease.wait.outcome")
    assert set(waits) == {"acquired"} and waits["acquired"].count == 1
    holds = by(otel, HOLD, "sql_lease.hold.end")
    assert set(holds) == {"released"}
    assert holds["released"].count == 1
    assert 0.2 <= holds["released"].sum < 10
    assert tuple(holds["released"].explicit_bounds) == HOLD_BUCKETS


async def test_a_wait_that_raises_records_an_error(url: str, otel: Telemetry) -> None:
    p = SqlLeaseProvider.from_url(url, table_name="no_such_leases", observer=otel.observer)
    try:
        with pytest.raises(LeaseSchemaError):
            await p.wait_for_lease(key(), "a", 1_000, timeout_ms=1_000)
    finally:
        await p.aclose()
    [point] = otel.points(WAIT)
    assert dict(point.attributes) == {
        "sql_lease.wait.outcome": "error",
        "error.type": "sql_lease.errors.LeaseSchemaError",
    }


async def test_holds_record_how_they_ended_transferred_and_lost(
    provider: SqlLeaseProvider, otel: Telemetry
) -> None:
    k1, k2 = key(), key()
    async with provider.hold(k1, "a", 10_000) as lease:
        await lease.transfer_to("b")

    async def lose() -> None:
        async with provider.hold(k2, "a", 1_000, renew_every_ms=100):
            assert await provider.force_release(k2)
            await asyncio.Event().wait()  # cancelled when a renewal finds it gone

    with pytest.raises(LeaseLost):
        await lose()
    holds = by(otel, HOLD, "sql_lease.hold.end")
    assert {end: p.count for end, p in holds.items()} == {"transferred": 1, "lost": 1}
    assert otel.value("sql_lease.lease.lost") == 1
    assert otel.value("sql_lease.leases.held") == 0


async def test_a_hold_that_is_refused_records_no_hold(
    provider: SqlLeaseProvider, otel: Telemetry
) -> None:
    k = key()
    await provider.acquire_lease(k, "other", 60_000)
    with pytest.raises(LeaseNotAcquired):
        async with provider.hold(k, "a", 10_000):
            pass
    assert otel.points(HOLD) == []
    assert counts(otel, ATTEMPTS, "sql_lease.acquire.outcome") == {"acquired": 1, "refused": 1}


async def test_a_renewal_delayed_by_a_stalled_event_loop_counts_as_late(
    provider: SqlLeaseProvider, otel: Telemetry
) -> None:
    k = key()
    # Renewals every 400 ms: late means starting over 200 ms behind schedule.
    async with provider.hold(k, "a", 10_000, renew_every_ms=400) as lease:
        await asyncio.sleep(1.0)  # on time: two renewals, none late
        assert lease.renewals >= 2
        assert otel.value(LATE) == 0
        before = lease.renewals
        time.sleep(1.5)  # noqa: ASYNC251 - the loop stalls: the renewal due meanwhile is late
        for _ in range(1_000):  # it runs as soon as the loop is back
            if lease.renewals > before:
                break
            await asyncio.sleep(0.01)
        assert lease.held
    assert otel.value(LATE) >= 1


async def test_a_lease_class_is_an_opt_in_capped_attribute(url: str) -> None:
    reader = InMemoryMetricReader()
    observer = OpenTelemetryObserver(
        MeterProvider(metric_readers=[reader]), lease_class=by_prefix(":"), max_lease_classes=2
    )
    otel = Telemetry(reader, InMemorySpanExporter(), TracerProvider(), observer)
    p = SqlLeaseProvider.from_url(url, timeout=10, observer=observer)
    try:
        for prefix in ("import", "billing", "mail"):
            k = f"{prefix}:{key()}"
            assert (await p.acquire_lease(k, "a", 60_000)).acquired
            assert not (await p.acquire_lease(k, "b", 60_000)).acquired
        async with p.hold(f"import:{key()}", "a", 10_000):
            pass
    finally:
        await p.aclose()
    seen = {
        (p.attributes[CLASS], p.attributes["sql_lease.acquire.outcome"]): int(p.value)
        for p in otel.points(ATTEMPTS)
    }
    assert seen == {
        ("import", "acquired"): 2,
        ("import", "refused"): 1,
        ("billing", "acquired"): 1,
        ("billing", "refused"): 1,
        (OTHER_CLASS, "acquired"): 1,  # "mail": past the cap of 2
        (OTHER_CLASS, "refused"): 1,
    }
    [hold] = otel.points(HOLD)
    assert dict(hold.attributes) == {"sql_lease.hold.end": "released", CLASS: "import"}
    for name in INSTRUMENTS:  # never a raw key
        for point in otel.points(name):
            assert not any("obs:" in str(v) for v in point.attributes.values())


async def test_outcomes_reach_the_sdk_on_the_loops_next_turn_without_a_flush(
    provider: SqlLeaseProvider, otel: Telemetry
) -> None:
    for _ in range(3):
        await provider.acquire_lease(key(), "a", 60_000)
    await asyncio.sleep(0.01)  # the flush scheduled on the loop runs
    [point] = otel.points(ATTEMPTS, flush=False)
    assert (point.attributes["sql_lease.acquire.outcome"], point.value) == ("acquired", 3)
