"""The sync provider's ``observer=``: `OpenTelemetryObserver` on the real OpenTelemetry SDK (an
in-memory metric reader and span exporter), and what a recording observer is told."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from sqlalchemy import create_engine

from sql_lease import LeaseClosedError, LeaseEventKind, LeaseLost, LeaseTypeError, StatementEvent
from sql_lease.otel import OpenTelemetryObserver
from sql_lease.sync import InMemoryLeaseProvider, SqlLeaseProvider

from .._observers import Recorder
from ._events import eventually

DURATION = "db.client.operation.duration"
SYSTEMS = {"postgresql": "postgresql", "sqlite": "sqlite"}


@dataclass
class Telemetry:
    reader: InMemoryMetricReader
    spans: InMemorySpanExporter
    observer: OpenTelemetryObserver

    def points(self, name: str) -> list[Any]:
        self.observer.flush()
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        return list(metric.data.data_points)
        return []

    def durations(self) -> dict[tuple[str, str, str | None], int]:
        out: dict[tuple[str, str, str | None], int] = {}
        for point in self.points(DURATION):
            a = point.attributes
            out[(a["db.system.name"], a["db.operation.name"], a.get("error.type"))] = point.count
        return out

    def value(self, name: str) -> int:
        return sum(int(point.value) for point in self.points(name))


@pytest.fixture
def otel() -> Telemetry:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = OpenTelemetryObserver(
        MeterProvider(metric_readers=[reader]), tracer_provider, spans=True
    )
    return Telemetry(reader, exporter, observer)


@pytest.fixture(params=sorted(SYSTEMS))
def backend(request: pytest.FixtureRequest) -> tuple[str, str]:
    fixture = {"postgresql": "database_url", "sqlite": "sqlite_url"}[request.param]
    url: str = request.getfixturevalue(fixture)
    return request.param, url


@pytest.fixture
def observed(backend: tuple[str, str], otel: Telemetry) -> Iterator[SqlLeaseProvider]:
    _, url = backend
    with SqlLeaseProvider.from_url(url, timeout=10, observer=otel.observer) as provider:
        yield provider


def _key() -> str:
    return f"otel-sync:{uuid.uuid4().hex}"


def test_every_statement_is_one_duration_and_one_client_span(
    observed: SqlLeaseProvider, backend: tuple[str, str], otel: Telemetry
) -> None:
    system = SYSTEMS[backend[0]]
    key = _key()
    assert observed.acquire_lease(key, "me", 60_000).acquired
    assert observed.renew_lease(key, "me", 60_000)
    assert observed.get_lease_owner(key) == "me"
    observed.release_lease(key, "me")
    counts = otel.durations()
    for operation in ("acquire_lease", "renew_lease", "get_lease_owner", "release_lease"):
        assert counts[(system, operation, None)] == 1, operation
    spans = {span.name: span for span in otel.spans.get_finished_spans()}
    assert spans["get_lease_owner"].kind is SpanKind.CLIENT
    assert spans["get_lease_owner"].attributes["db.response.returned_rows"] == 1
    assert spans["renew_lease"].status.status_code is StatusCode.UNSET


def test_held_leases_are_counted_up_and_down_and_losses_counted(
    observed: SqlLeaseProvider, backend: tuple[str, str], otel: Telemetry
) -> None:
    key = _key()
    with observed.hold(key, "me", 60_000) as lease:
        assert otel.value("sql_lease.leases.held") == 1
        assert lease.held
    assert otel.value("sql_lease.leases.held") == 0
    assert otel.value("sql_lease.lease.lost") == 0

    lost = _key()

    def body() -> None:
        with observed.hold(lost, "me", 3_000, renew_every_ms=50) as lease:
            assert observed.force_release(lost)
            assert lease.wait_lost(30)

    with pytest.raises(LeaseLost):
        body()
    assert otel.value("sql_lease.lease.lost") == 1
    assert otel.value("sql_lease.leases.held") == 0
    assert otel.durations()[(SYSTEMS[backend[0]], "renew_leases", None)] >= 1


def test_a_recording_observer_sees_statements_and_the_lease_events_of_a_hold(
    backend: tuple[str, str],
) -> None:
    recorder = Recorder()
    key = _key()
    with SqlLeaseProvider.from_url(backend[1], timeout=10, observer=recorder) as provider:
        assert provider.observer is recorder
        with provider.hold(key, "me", 60_000, renew_every_ms=20) as lease:
            eventually(lambda: lease.renewals >= 1, "a renewal")
            lease.transfer_to("next")
        provider.release_lease(key, "next")
        provider.close()
        with pytest.raises(LeaseClosedError):
            provider.get_lease_owner(key)
    kinds = recorder.kinds()
    assert kinds[0] is LeaseEventKind.ACQUIRED
    assert LeaseEventKind.RENEWED in kinds
    assert kinds[-1] is LeaseEventKind.TRANSFERRED
    assert recorder.events[-1].detail == "next"
    assert all(isinstance(s, StatementEvent) for s in recorder.statements)
    assert recorder.operations()[0] == "acquire_lease"
    assert recorder.operations()[-1] == "release_lease"  # the closed call is not a statement


def test_waits_report_waited_and_woke(backend: tuple[str, str]) -> None:
    recorder = Recorder()
    key = _key()
    with (
        SqlLeaseProvider.from_url(backend[1], timeout=10) as holder,
        SqlLeaseProvider.from_url(backend[1], timeout=10, observer=recorder) as waiter,
    ):
        assert holder.acquire_lease(key, "holder", 60_000).acquired
        got: list[bool] = []
        thread = threading.Thread(
            target=lambda: got.append(
                waiter.wait_for_lease(key, "waiter", 60_000, timeout_ms=30_000).acquired
            )
        )
        thread.start()
        eventually(lambda: waiter.waiters.sleeping(key) == 1, "the waiter asleep")
        holder.release_lease(key, "holder")
        thread.join(30)
        assert got == [True]
    waited = [e for e in recorder.events if e.kind is LeaseEventKind.WAITED]
    assert waited and waited[0].detail == "holder"
    assert any(e.kind is LeaseEventKind.WOKE for e in recorder.events)


def test_an_engine_provider_takes_an_observer_and_checks_it(sqlite_url: str) -> None:
    recorder = Recorder()
    engine = create_engine(sqlite_url)
    try:
        provider = SqlLeaseProvider(engine, observer=recorder)
        assert provider.get_lease_owner(_key()) is None
        assert recorder.operations() == ["get_lease_owner"]
        assert recorder.statements[0].rows == 0
        provider.close()
        with pytest.raises(LeaseTypeError, match="observer"):
            SqlLeaseProvider(engine, observer=object())  # type: ignore[arg-type]
        with pytest.raises(LeaseTypeError, match="observer"):
            SqlLeaseProvider.from_url(sqlite_url, observer=42)  # type: ignore[arg-type]
    finally:
        engine.dispose()


def test_the_sync_in_memory_provider_reports_to_its_observer(otel: Telemetry) -> None:
    provider = InMemoryLeaseProvider(observer=otel.observer)
    assert provider.observer is otel.observer
    with provider.hold("k", "me", 60_000):
        assert otel.value("sql_lease.leases.held") == 1
    assert otel.value("sql_lease.leases.held") == 0
    counts = otel.durations()
    assert counts[("memory", "acquire_lease", None)] == 1
    assert counts[("memory", "release_lease", None)] == 1
    provider.close()
