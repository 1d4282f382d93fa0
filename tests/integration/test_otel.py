"""`OpenTelemetryObserver` with the real OpenTelemetry SDK (in-memory reader and exporter)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from sql_lease import (
    InMemoryLeaseProvider,
    LeaseLost,
    LeaseObserver,
    LeaseSchemaError,
    LeaseTimeoutError,
    LeaseTypeError,
    SqlLeaseProvider,
    StatementEvent,
)
from sql_lease.otel import DURATION_BUCKETS, OpenTelemetryObserver

from ._observed import key, row_locked

LONG = 60_000
DURATION = "db.client.operation.duration"


@dataclass
class Telemetry:
    reader: InMemoryMetricReader
    spans: InMemorySpanExporter
    tracer_provider: TracerProvider
    observer: OpenTelemetryObserver

    def metric(self, name: str, flush: bool = True) -> Any:
        if flush:
            self.observer.flush()
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        assert scope.scope.name == "sql_lease"
                        return metric
        return None

    def points(self, name: str, flush: bool = True) -> list[Any]:
        metric = self.metric(name, flush)
        return [] if metric is None else list(metric.data.data_points)

    def durations(self) -> dict[tuple[str, str, str | None], int]:
        """Histogram counts by (db.system.name, db.operation.name, error.type)."""
        out: dict[tuple[str, str, str | None], int] = {}
        for point in self.points(DURATION):
            a = point.attributes
            out[(a["db.system.name"], a["db.operation.name"], a.get("error.type"))] = point.count
        return out

    def value(self, name: str) -> int:
        return sum(int(point.value) for point in self.points(name))


def telemetry(spans: bool) -> Telemetry:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = OpenTelemetryObserver(
        MeterProvider(metric_readers=[reader]), tracer_provider, spans=spans
    )
    return Telemetry(reader, exporter, tracer_provider, observer)


@pytest.fixture
def otel() -> Telemetry:
    return telemetry(spans=False)


@pytest.fixture(params=["postgresql", "sqlite", "mariadb"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(backend: str, request: pytest.FixtureRequest) -> str:
    fixture = {"postgresql": "database_url", "sqlite": "sqlite_url", "mariadb": "mariadb_url"}
    return str(request.getfixturevalue(fixture[backend]))


@pytest.fixture
async def provider(url: str, otel: Telemetry) -> AsyncIterator[SqlLeaseProvider]:
    p = SqlLeaseProvider.from_url(url, timeout=10, observer=otel.observer)
    yield p
    await p.aclose()


def test_the_observer_is_a_lease_observer_and_works_with_the_global_no_op_providers() -> None:
    observer = OpenTelemetryObserver()
    assert isinstance(observer, LeaseObserver)
    assert InMemoryLeaseProvider(observer=observer).observer is observer
    observer.on_statement(StatementEvent("now", "memory", 0.001))
    with pytest.raises(LeaseTypeError):
        OpenTelemetryObserver(spans=1)  # type: ignore[arg-type]


def test_outside_an_event_loop_a_duration_is_recorded_at_once(otel: Telemetry) -> None:
    otel.observer.on_statement(StatementEvent("now", "sqlite", 0.002))
    [point] = otel.points(DURATION, flush=False)
    assert (point.count, point.sum) == (1, 0.002)


async def test_durations_are_recorded_on_the_loops_next_turn_or_when_64_wait(
    otel: Telemetry,
) -> None:
    for _ in range(10):
        otel.observer.on_statement(StatementEvent("now", "postgresql", 0.001))
    assert otel.points(DURATION, flush=False) == []  # waiting for the loop's next turn
    await asyncio.sleep(0)
    assert otel.durations() == {("postgresql", "now", None): 10}
    for _ in range(64):
        otel.observer.on_statement(StatementEvent("now", "postgresql", 0.001))
    assert [p.count for p in otel.points(DURATION, flush=False)] == [74]


async def test_an_exemplar_comes_from_its_own_statements_context_not_the_flushers() -> None:
    # The flush of the loop's next turn runs in the context of the statement that scheduled it
    # (inside a span here); a later statement outside any span must not get that span.
    t = telemetry(spans=False)
    tracer = t.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("request") as span:
        t.observer.on_statement(StatementEvent("now", "postgresql", 0.0005))
    t.observer.on_statement(StatementEvent("now", "postgresql", 0.002))
    await asyncio.sleep(0)
    [point] = t.points(DURATION, flush=False)
    assert point.count == 2
    [exemplar] = point.exemplars
    assert exemplar.value == 0.0005
    assert exemplar.span_id == span.get_span_context().span_id


async def test_every_statement_is_one_measurement_of_the_duration_histogram(
    provider: SqlLeaseProvider, otel: Telemetry, backend: str
) -> None:
    k = key()
    await provider.acquire_lease(k, "a", LONG)
    for _ in range(3):
        assert await provider.get_lease_owner(k) == "a"
    assert await provider.renew_lease(k, "a", LONG)
    assert await provider.transfer_lease(k, "a", "b", LONG)
    await provider.release_lease(k, "b")
    assert otel.durations() == {
        (backend, "acquire_lease", None): 1,
        (backend, "get_lease_owner", None): 3,
        (backend, "renew_lease", None): 1,
        (backend, "transfer_lease", None): 1,
        (backend, "release_lease", None): 1,
    }
    metric = otel.metric(DURATION)
    assert metric.unit == "s"
    for point in metric.data.data_points:
        assert tuple(point.explicit_bounds) == DURATION_BUCKETS
        assert set(point.attributes) == {"db.system.name", "db.operation.name"}
        assert 0 < point.sum < 10
    assert otel.spans.get_finished_spans() == ()  # spans are off by default


async def test_a_lock_timeout_is_recorded_with_its_error_type(
    url: str, backend: str, otel: Telemetry
) -> None:
    k = key()
    provider = SqlLeaseProvider.from_url(url, timeout=0.5, observer=otel.observer)
    try:
        await provider.acquire_lease(k, "a", LONG)
        with row_locked(url, backend, k), pytest.raises(LeaseTimeoutError):
            await provider.renew_lease(k, "a", LONG)
    finally:
        await provider.aclose()
    assert otel.durations()[(backend, "renew_lease", "sql_lease.errors.LeaseTimeoutError")] == 1
    [failed] = [p for p in otel.points(DURATION) if "error.type" in p.attributes]
    if backend == "postgresql":
        # lock_timeout and statement_timeout are equal: either may cancel the statement.
        assert failed.attributes["db.response.status_code"] in {"55P03", "57014"}
    elif backend == "mariadb":
        # max_statement_time (70100, interrupted) or innodb_lock_wait_timeout (HY000).
        assert failed.attributes["db.response.status_code"] in {"70100", "HY000"}
    else:
        assert "db.response.status_code" not in failed.attributes


async def test_a_missing_table_is_recorded_as_a_schema_error(
    url: str, backend: str, otel: Telemetry
) -> None:
    provider = SqlLeaseProvider.from_url(url, table_name="no_such_leases", observer=otel.observer)
    try:
        with pytest.raises(LeaseSchemaError):
            await provider.get_lease_owner("k")
    finally:
        await provider.aclose()
    [point] = otel.points(DURATION)
    assert point.attributes["error.type"] == "sql_lease.errors.LeaseSchemaError"
    assert point.attributes["db.operation.name"] == "get_lease_owner"
    assert point.attributes["db.system.name"] == backend


async def test_held_leases_count_up_while_held_and_back_to_zero_after_release(
    provider: SqlLeaseProvider, otel: Telemetry
) -> None:
    async with provider.hold(key(), "a", LONG), provider.hold(key(), "a", LONG):
        assert otel.value("sql_lease.leases.held") == 2
    assert otel.value("sql_lease.leases.held") == 0
    assert otel.metric("sql_lease.leases.held").unit == "{lease}"
    assert otel.value("sql_lease.lease.lost") == 0


async def test_a_lost_lease_is_counted_and_leaves_the_held_count(
    provider: SqlLeaseProvider, otel: Telemetry, url: str
) -> None:
    k = key()
    other = SqlLeaseProvider.from_url(url, timeout=10)

    async def body() -> None:
        async with provider.hold(k, "a", 3_000, renew_every_ms=100):
            assert otel.value("sql_lease.leases.held") == 1
            assert await other.force_release(k)
            await asyncio.Event().wait()  # cancelled once the renewal finds it gone

    try:
        with pytest.raises(LeaseLost):
            await body()
    finally:
        await other.aclose()
    assert otel.value("sql_lease.lease.lost") == 1
    assert otel.value("sql_lease.leases.held") == 0


async def test_a_transferred_lease_leaves_the_held_count(
    provider: SqlLeaseProvider, otel: Telemetry
) -> None:
    async with provider.hold(key(), "a", LONG) as lease:
        await lease.transfer_to("b")
        assert otel.value("sql_lease.leases.held") == 0
    assert otel.value("sql_lease.leases.held") == 0
    assert otel.value("sql_lease.lease.lost") == 0


async def test_spans_when_enabled_one_per_statement_under_the_callers_span(
    url: str, backend: str
) -> None:
    t = telemetry(spans=True)
    provider = SqlLeaseProvider.from_url(url, timeout=0.5, observer=t.observer)
    k = key()
    tracer = t.tracer_provider.get_tracer("test")
    try:
        with tracer.start_as_current_span("request") as parent:
            await provider.acquire_lease(k, "a", LONG)
            assert await provider.get_lease_owner(k) == "a"
        with row_locked(url, backend, k), pytest.raises(LeaseTimeoutError):
            await provider.renew_lease(k, "a", LONG)
    finally:
        await provider.aclose()
    spans = {s.name: s for s in t.spans.get_finished_spans()}
    assert set(spans) == {"request", "acquire_lease", "get_lease_owner", "renew_lease"}
    for name in ("acquire_lease", "get_lease_owner"):
        span = spans[name]
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None
        assert span.parent.span_id == parent.get_span_context().span_id
        assert span.attributes is not None
        assert span.attributes["db.system.name"] == backend
        assert span.attributes["db.operation.name"] == name
        assert span.attributes["db.response.returned_rows"] == 1
        assert span.status.status_code is StatusCode.UNSET
        assert span.start_time is not None and span.end_time is not None
        assert 0 < span.end_time - span.start_time < 10**10
    failed = spans["renew_lease"]
    assert failed.parent is None
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None
    assert failed.attributes["error.type"] == "sql_lease.errors.LeaseTimeoutError"
    assert [e.name for e in failed.events] == ["exception"]


async def test_the_in_memory_provider_is_recorded_as_the_memory_system(otel: Telemetry) -> None:
    provider = InMemoryLeaseProvider(observer=otel.observer)
    async with provider.hold("k", "a", LONG):
        assert otel.value("sql_lease.leases.held") == 1
    assert otel.durations() == {
        ("memory", "acquire_lease", None): 1,
        ("memory", "release_lease", None): 1,
    }
    assert otel.value("sql_lease.leases.held") == 0
