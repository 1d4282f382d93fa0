"""OpenTelemetry metrics and spans for sql_lease (extra ``sql-lease[otel]``).

    from sql_lease.otel import OpenTelemetryObserver

    provider = SqlLeaseProvider.from_url(url, observer=OpenTelemetryObserver())

Follows the OpenTelemetry semantic conventions for database clients. Recorded:

* ``db.client.operation.duration`` (histogram, seconds, the conventions' bucket boundaries):
  one measurement per statement, with ``db.system.name`` (``"postgresql"``, ``"sqlite"``,
  ``"mariadb"``, or ``"memory"`` for `InMemoryLeaseProvider`, which has no registered name),
  ``db.operation.name``
  (the provider method: ``"acquire_lease"``, ``"renew_lease"``, ...) and, on failures,
  ``error.type`` (the exception's qualified class name, e.g.
  ``"sql_lease.errors.LeaseTimeoutError"``) and ``db.response.status_code`` (the SQLSTATE,
  when PostgreSQL gave one).
* ``sql_lease.lease.lost`` (counter): held leases (``hold``) found lost.
* ``sql_lease.leases.held`` (up-down counter): leases currently held through ``hold``; +1 when
  one is acquired, -1 when it is released, lost or transferred away.
* With ``spans=True``, one ``CLIENT`` span per statement, named after ``db.operation.name``,
  with the same attributes (and ``db.response.returned_rows``), status ERROR on failure. A span
  is recorded once its statement has finished, in the caller's context: its parent is the
  caller's current span.

Durations are handed to the SDK in batches: on the event loop's next turn after the statement
finished, or as soon as 64 are waiting (at once outside an event loop), each with the context
the statement ran in (so an exemplar links to the caller's span, never to another statement's).
Recording them one by one right after each statement costs about twice as much CPU (the SDK's
code runs cold between statements); `flush` hands over what is waiting now. The SDK's own
work per measurement (checking, copying and hashing the attributes, aggregating) is most of
this observer's cost; the attribute sets are built once per (system, operation) and reused.

Instruments come from ``meter_provider`` and ``tracer_provider`` (default: the global ones
that the application configured with the OpenTelemetry SDK). This module imports
``opentelemetry``; ``import sql_lease`` never imports it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from time import time_ns

from opentelemetry import metrics, trace
from opentelemetry.context import Context, get_current
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider

from . import __version__
from .errors import LeaseTypeError
from .observer import LeaseEvent, LeaseEventKind, StatementEvent

__all__ = ["DURATION_BUCKETS", "OpenTelemetryObserver"]

#: The bucket boundaries (seconds) the conventions recommend for ``db.client.operation.duration``.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)

_SCOPE = "sql_lease"
_BATCH = 64  # durations waiting at most before they are recorded
_HELD = LeaseEventKind.ACQUIRED
_ENDED = frozenset({LeaseEventKind.RELEASED, LeaseEventKind.TRANSFERRED})
_LOST = LeaseEventKind.LOST


def error_type(error: BaseException) -> str:
    """``error.type`` for ``error``: its qualified class name (no module for builtins)."""
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of the driver error that ``error`` chains, if any."""
    seen: list[BaseException] = []
    cur: BaseException | None = error
    while cur is not None and all(cur is not s for s in seen):
        state = getattr(cur, "sqlstate", None)
        if isinstance(state, str) and state:
            return state
        seen.append(cur)
        orig = getattr(cur, "orig", None)
        cur = orig if isinstance(orig, BaseException) else cur.__cause__
    return None


def _failed(backend: str, operation: str, error: BaseException) -> dict[str, str]:
    """The attributes of a failed statement (a new set each time: failures are rare)."""
    attributes = {
        "db.system.name": backend,
        "db.operation.name": operation,
        "error.type": error_type(error),
    }
    state = _sqlstate(error)
    if state is not None:
        attributes["db.response.status_code"] = state
    return attributes


class OpenTelemetryObserver:
    """A `sql_lease.observer.LeaseObserver` that records OpenTelemetry metrics (and spans).

    See the module docstring for the instruments and attributes. ``spans=True`` also records
    one span per statement through ``tracer_provider``.
    """

    def __init__(
        self,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
        *,
        spans: bool = False,
    ) -> None:
        if not isinstance(spans, bool):
            raise LeaseTypeError("spans must be a bool")
        meter = metrics.get_meter(_SCOPE, __version__, meter_provider)
        self._duration = meter.create_histogram(
            "db.client.operation.duration",
            unit="s",
            description="Duration of database client operations.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._lost = meter.create_counter(
            "sql_lease.lease.lost",
            unit="{lease}",
            description="Leases held through hold() that were found lost.",
        )
        self._held = meter.create_up_down_counter(
            "sql_lease.leases.held",
            unit="{lease}",
            description="Leases currently held through hold().",
        )
        self._tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider) if spans else None
        # Attribute sets of successful statements, built once per (backend, operation) and
        # never mutated afterwards (the SDK keeps a reference to what it is given).
        self._ok: dict[tuple[str, str], dict[str, str]] = {}
        # Durations not yet recorded; a deque, so that threads may append while one flushes.
        self._pending: deque[tuple[float, dict[str, str], Context]] = deque()
        self._flush_on: asyncio.AbstractEventLoop | None = None  # loop with a flush scheduled

    def __repr__(self) -> str:
        return f"OpenTelemetryObserver(spans={self._tracer is not None})"

    def on_statement(self, event: StatementEvent) -> None:
        """Record the statement's duration (and its span)."""
        if event.error is None:
            attributes = self._ok.get((event.backend, event.operation)) or self._succeeded(event)
        else:
            attributes = _failed(event.backend, event.operation, event.error)
        if self._tracer is not None:
            self._span(event, attributes)
        pending = self._pending
        pending.append((event.seconds, attributes, get_current()))
        if len(pending) >= _BATCH:
            self.flush()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not in an event loop: nothing would flush later
            self.flush()
            return
        if self._flush_on is not loop:
            self._flush_on = loop
            loop.call_soon(self._flush_soon, loop)

    def _succeeded(self, event: StatementEvent) -> dict[str, str]:
        attributes = {"db.system.name": event.backend, "db.operation.name": event.operation}
        return self._ok.setdefault((event.backend, event.operation), attributes)

    def flush(self) -> None:
        """Record the durations still waiting now (otherwise done on the event loop's next turn)."""
        if self._pending:
            # The SDK replaces an empty (falsy) context with the current one: record in an empty
            # one, so that a statement that ran outside any span never gets the flusher's span.
            contextvars.Context().run(self._record_pending)

    def _record_pending(self) -> None:
        pending = self._pending
        record = self._duration.record
        while pending:
            try:
                seconds, attributes, context = pending.popleft()
            except IndexError:  # another thread took the last one
                return
            record(seconds, attributes, context)

    def _flush_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._flush_on is loop:
            self._flush_on = None
        self.flush()

    def on_lease_event(self, event: LeaseEvent) -> None:
        """Count held leases and lost ones."""
        kind = event.kind
        if kind is _HELD:
            self._held.add(1)
        elif kind in _ENDED:
            self._held.add(-1)
        elif kind is _LOST:
            self._held.add(-1)
            self._lost.add(1)

    def _span(self, event: StatementEvent, attributes: dict[str, str]) -> None:
        assert self._tracer is not None
        end = time_ns()
        span = self._tracer.start_span(
            event.operation,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=end - round(event.seconds * 1e9),
        )
        if event.rows is not None:
            span.set_attribute("db.response.returned_rows", event.rows)
        if event.error is not None:
            span.record_exception(event.error)
            span.set_status(Status(StatusCode.ERROR, str(event.error)))
        span.end(end_time=end)
