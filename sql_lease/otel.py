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

Contention (the how-to "See contention" says what each answers):

* ``sql_lease.lease.acquire.attempts`` (counter, ``{attempt}``): ``acquire_lease`` calls,
  direct or made by ``hold`` and waits, by ``sql_lease.acquire.outcome``: ``acquired``,
  ``refused`` (another owner holds the key) or ``error`` (with ``error.type``). A wait that
  retries counts each try.
* ``sql_lease.lease.wait.duration`` (histogram, seconds, `WAIT_BUCKETS`): each
  ``wait_for_lease`` and ``hold(wait_ms=...)`` from start to end, by ``sql_lease.wait.outcome``:
  ``acquired``, ``timeout`` or ``error`` (with ``error.type``); an immediate acquire counts too.
* ``sql_lease.lease.hold.duration`` (histogram, seconds, `HOLD_BUCKETS`): how long each
  ``hold`` held its lease, by ``sql_lease.hold.end``: ``released``, ``lost`` or ``transferred``.
* ``sql_lease.lease.late_renewals`` (counter, ``{renewal}``): renewals of held leases that
  succeeded but started more than half a renewal interval behind schedule: the margin before
  expiry is being eaten (failed attempts, a stalled event loop, a slow database).

Keys are never attributes (each would be a time series). ``lease_class=`` opts in to one more
attribute on the lease instruments, ``sql_lease.lease.class``: a function from key to class
(`sql_lease.observer.by_prefix`, or your own), at most ``max_lease_classes`` distinct values,
the rest counted as ``"_other"``.

Durations are handed to the SDK in batches: on the event loop's next turn after the statement
finished, or as soon as 64 are waiting (at once outside an event loop), each with the context
the statement ran in (so an exemplar links to the caller's span, never to another statement's).
Recording them one by one right after each statement costs about twice as much CPU (the SDK's
code runs cold between statements); `flush` hands over what is waiting now. The SDK's own
work per measurement (checking, copying and hashing the attributes, aggregating) is most of
this observer's cost; the attribute sets are built once per (system, operation) and reused.
Acquire outcomes are counted the same way: queued, then one ``add`` per attribute set when
the durations are handed over (`flush` counts them too).

Instruments come from ``meter_provider`` and ``tracer_provider`` (default: the global ones
that the application configured with the OpenTelemetry SDK). This module imports
``opentelemetry``; ``import sql_lease`` never imports it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Callable
from time import time_ns

from opentelemetry import metrics, trace
from opentelemetry.context import Context, get_current
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider

from . import __version__
from .errors import LeaseTypeError
from .observer import LeaseClasses, LeaseEvent, LeaseEventKind, StatementEvent

__all__ = [
    "DURATION_BUCKETS",
    "HOLD_BUCKETS",
    "INSTRUMENTS",
    "WAIT_BUCKETS",
    "OpenTelemetryObserver",
]

#: The bucket boundaries (seconds) the conventions recommend for ``db.client.operation.duration``.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
#: Bucket boundaries (seconds) of ``sql_lease.lease.wait.duration``: from a free key's one
#: statement to waits of minutes.
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: Bucket boundaries (seconds) of ``sql_lease.lease.hold.duration``: from a short critical
#: section to a leader's hours.
HOLD_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)

#: Every instrument this observer creates: name -> (kind, unit). The Grafana dashboard in
#: ``docs/grafana`` is checked against these names as Prometheus renders them.
INSTRUMENTS = {
    "db.client.operation.duration": ("histogram", "s"),
    "sql_lease.lease.lost": ("counter", "{lease}"),
    "sql_lease.leases.held": ("updowncounter", "{lease}"),
    "sql_lease.lease.acquire.attempts": ("counter", "{attempt}"),
    "sql_lease.lease.wait.duration": ("histogram", "s"),
    "sql_lease.lease.hold.duration": ("histogram", "s"),
    "sql_lease.lease.late_renewals": ("counter", "{renewal}"),
}

_SCOPE = "sql_lease"
_BATCH = 64  # durations waiting at most before they are recorded
_HELD = LeaseEventKind.ACQUIRED
_LOST = LeaseEventKind.LOST
_OUTCOMES = {
    LeaseEventKind.GRANTED: "acquired",
    LeaseEventKind.REFUSED: "refused",
    LeaseEventKind.ACQUIRE_FAILED: "error",
}
_WAIT_ENDED = LeaseEventKind.WAIT_ENDED
_LATE = LeaseEventKind.RENEWED_LATE
_HOLD_ENDS = {
    LeaseEventKind.RELEASED: "released",
    LeaseEventKind.LOST: "lost",
    LeaseEventKind.TRANSFERRED: "transferred",
}
CLASS = "sql_lease.lease.class"


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
        lease_class: Callable[[str], str] | None = None,
        max_lease_classes: int = 100,
    ) -> None:
        if not isinstance(spans, bool):
            raise LeaseTypeError("spans must be a bool")
        self._classes = (
            None if lease_class is None else LeaseClasses(lease_class, max_lease_classes)
        )
        self._attributes: dict[tuple[str, ...], dict[str, str]] = {}
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
        self._acquires = meter.create_counter(
            "sql_lease.lease.acquire.attempts",
            unit="{attempt}",
            description="acquire_lease calls, by outcome: acquired, refused or error.",
        )
        self._wait = meter.create_histogram(
            "sql_lease.lease.wait.duration",
            unit="s",
            description="Duration of waits for a lease, by outcome: acquired, timeout or error.",
            explicit_bucket_boundaries_advisory=WAIT_BUCKETS,
        )
        self._hold = meter.create_histogram(
            "sql_lease.lease.hold.duration",
            unit="s",
            description="How long leases were held through hold(), by how the hold ended.",
            explicit_bucket_boundaries_advisory=HOLD_BUCKETS,
        )
        self._late = meter.create_counter(
            "sql_lease.lease.late_renewals",
            unit="{renewal}",
            description="Renewals of held leases that started over half an interval late.",
        )
        self._tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider) if spans else None
        # Attribute sets of successful statements, built once per (backend, operation) and
        # never mutated afterwards (the SDK keeps a reference to what it is given).
        self._ok: dict[tuple[str, str], dict[str, str]] = {}
        # Durations not yet recorded; a deque, so that threads may append while one flushes.
        self._pending: deque[tuple[float, dict[str, str], Context]] = deque()
        self._flush_on: asyncio.AbstractEventLoop | None = None  # loop with a flush scheduled
        # Acquire outcomes not yet counted (their attribute sets, cached): counted in batches
        # like the durations, as one add per attribute set.
        self._outcomes: deque[dict[str, str]] = deque()

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
        self._later(len(pending))

    def _later(self, waiting: int) -> None:
        """Flush now when ``waiting`` reached the batch or no event loop runs; else make
        sure a flush is scheduled on this loop's next turn."""
        if waiting >= _BATCH:
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
        if self._pending or self._outcomes:
            # The SDK replaces an empty (falsy) context with the current one: record in an empty
            # one, so that a statement that ran outside any span never gets the flusher's span.
            contextvars.Context().run(self._record_pending)

    def _record_pending(self) -> None:
        outcomes = self._outcomes
        if outcomes:  # counted per attribute set: one SDK call for many acquires
            counts: dict[int, tuple[dict[str, str], int]] = {}
            while outcomes:
                try:
                    attributes = outcomes.popleft()
                except IndexError:  # another thread took the last one
                    break
                _, seen = counts.get(id(attributes), (attributes, 0))
                counts[id(attributes)] = (attributes, seen + 1)
            for attributes, count in counts.values():
                self._acquires.add(count, attributes)
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
        """Count held leases, lost ones, acquire outcomes and late renewals; record waits
        and holds."""
        kind = event.kind
        outcome = _OUTCOMES.get(kind)
        if outcome is not None:
            outcomes = self._outcomes
            outcomes.append(self._lease_attributes(event, "sql_lease.acquire.outcome", outcome))
            self._later(len(outcomes))
        elif kind is _WAIT_ENDED:
            how = event.detail or "error"
            attributes = self._lease_attributes(event, "sql_lease.wait.outcome", how)
            self._wait.record(event.seconds or 0.0, attributes)
        elif kind is _HELD:
            self._held.add(1, self._lease_attributes(event))
        elif kind is _LATE:
            self._late.add(1, self._lease_attributes(event))
        if kind in _HOLD_ENDS:
            plain = self._lease_attributes(event)
            self._held.add(-1, plain)
            if kind is _LOST:
                self._lost.add(1, plain)
            if event.seconds is not None:
                end = _HOLD_ENDS[kind]
                self._hold.record(
                    event.seconds, self._lease_attributes(event, "sql_lease.hold.end", end)
                )

    def _lease_attributes(
        self, event: LeaseEvent, name: str | None = None, value: str | None = None
    ) -> dict[str, str]:
        """The attributes of a lease instrument: ``name`` = ``value`` when given, the key's
        class when configured, ``error.type`` for an event with an error (built once per set
        and reused, never mutated: the SDK keeps what it is given)."""
        lease_class = None if self._classes is None else self._classes(event.key)
        error = None if event.error is None else error_type(event.error)
        cache_key = (name or "", value or "", lease_class or "", error or "")
        attributes = self._attributes.get(cache_key)
        if attributes is None:
            attributes = {}
            if name is not None and value is not None:
                attributes[name] = value
            if lease_class is not None:
                attributes[CLASS] = lease_class
            if error is not None:
                attributes["error.type"] = error
            attributes = self._attributes.setdefault(cache_key, attributes)
        return attributes

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
