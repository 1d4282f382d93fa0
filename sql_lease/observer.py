"""Observing a provider: one `LeaseObserver` sees every statement and every lease event.

    provider = SqlLeaseProvider.from_url(url, observer=my_observer)

The provider reports one `StatementEvent` per statement it runs (`SqlLeaseProvider`) or per
operation (`InMemoryLeaseProvider`), and held leases (``hold``) and waits (``wait_for_lease``)
report `LeaseEvent`\\ s. Observers are called synchronously, in the task that made the call, right
after the statement or the event: keep them quick (record a metric, append to a buffer). An
observer that raises never breaks a lease call: the failure is logged on the
``sql_lease.observer`` logger, at WARNING the first time for that observer, then at DEBUG.
With no observer, nothing is timed and nothing is built.

`sql_lease.otel.OpenTelemetryObserver` (extra ``sql-lease[otel]``) is a ready-made observer.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from functools import wraps
from time import perf_counter
from typing import Any, ParamSpec, Protocol, TypeVar, runtime_checkable

from ._core.contract import AcquireResult
from ._core.validate import Millis
from .errors import LeaseClosedError, LeaseTypeError, LeaseValueError

__all__ = [
    "OTHER_CLASS",
    "LeaseClasses",
    "LeaseEvent",
    "LeaseEventKind",
    "LeaseObserver",
    "StatementEvent",
    "by_prefix",
]

logger = logging.getLogger("sql_lease.observer")

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StatementEvent:
    """One statement (SQL) or operation (in memory) that a provider ran.

    ``operation`` is the provider method it served (``"acquire_lease"``, ``"renew_lease"``,
    ``"renew_leases"``, ``"transfer_lease"``, ``"release_lease"``, ``"get_lease_owner"``,
    ``"get_lease"``, ``"list_leases"``, ``"purge_expired"``, ``"force_release"``, ``"want"`` (a
    waiter marking a key wanted), ``"now"``); one call may run several statements (an acquire
    that reads a contended key first, a purge in batches). ``backend`` is ``"postgresql"``,
    ``"sqlite"``, ``"mariadb"`` or ``"memory"``. ``seconds`` is the time the statement took as
    the caller saw it (pool checkout and retries on a fresh connection included). ``error`` is
    what the call raised (a `LeaseError` subclass, or `asyncio.CancelledError` when the caller
    was cancelled), else None. ``rows`` is how many rows the statement returned (the
    ``db.response.returned_rows`` of OpenTelemetry): for renew, transfer, release and
    get_lease_owner, 1 when it took effect or found a holder and 0 when not; None on error and
    in memory. How a lease call ended for the caller is the method's return value; for held
    leases it is also a `LeaseEvent`.
    """

    operation: str
    backend: str
    seconds: float
    error: BaseException | None = None
    rows: int | None = None


class LeaseEventKind(enum.Enum):
    """What happened to a held lease (``hold``) or a wait (``wait_for_lease``, ``wait_ms``)."""

    ACQUIRED = "acquired"
    """A hold acquired its key (and its ``on_acquired`` hook ran): the block is entered."""
    RENEWED = "renewed"
    """A renewal of a held lease succeeded."""
    RENEW_FAILED = "renew_failed"
    """A renewal attempt failed on a database error; it is retried. ``detail``: the error."""
    LOST = "lost"
    """A held lease was found lost. ``detail``: the reason."""
    RELEASED = "released"
    """A hold ended and released its lease. ``detail`` is None, or the failure when the
    release itself failed (the lease then expires on its own)."""
    TRANSFERRED = "transferred"
    """A hold handed its lease on (``transfer_to``). ``detail``: the new owner."""
    WAITED = "waited"
    """A wait for a busy key starts sleeping. ``fence`` and ``detail``: the holder's."""
    WOKE = "woke"
    """A sleeping wait woke up. ``detail``: ``"notify"`` (the holder released or transferred),
    ``"reconnect"`` (the listener reconnected), ``"closed"`` or ``"timer"`` (the holder's
    expiry, a poll interval or the wait's deadline)."""
    GRANTED = "granted"
    """An ``acquire_lease`` call (direct, or made by ``hold`` or a wait) took the key, or
    renewed the caller's own live lease. ``fence``: the lease's; ``seconds``: the call's."""
    REFUSED = "refused"
    """An ``acquire_lease`` call found another live holder. ``detail`` and ``fence``: the
    holder's; ``seconds``: the call's."""
    ACQUIRE_FAILED = "acquire_failed"
    """An ``acquire_lease`` call raised (a database error, a timeout, a cancellation; bad
    arguments and a closed provider are not reported). ``error``: what it raised."""
    WAIT_ENDED = "wait_ended"
    """A ``wait_for_lease`` (or ``hold(wait_ms=...)``) ended, including one that acquired at
    the first try. ``detail``: ``"acquired"``, ``"timeout"`` or ``"error"`` (``error``: what it
    raised); ``seconds``: how long it took."""
    RENEWED_LATE = "renewed_late"
    """A renewal of a held lease succeeded late: it started more than half a renewal interval
    after its schedule (the previous good renewal plus the interval), so it ate into the
    margin before expiry (failed attempts, a stalled event loop, a slow database).
    ``seconds``: how far behind its schedule it started. Also reported as ``RENEWED``."""


@dataclass(frozen=True, slots=True)
class LeaseEvent:
    """A `LeaseEventKind` that happened to ``key`` held (or waited for) by ``owner``.

    ``fence`` is the hold's fence (None before it was acquired); for waits, the holder's. Every
    ``ACQUIRED`` is followed by exactly one of ``LOST``, ``RELEASED`` or ``TRANSFERRED``, so
    acquired minus those three is the number of leases held through ``hold``; those three
    carry in ``seconds`` how long the lease was held (from ``ACQUIRED``). ``seconds`` is
    otherwise a call's or a wait's duration, or a renewal's delay (see each kind), else None;
    ``error`` is the exception of ``ACQUIRE_FAILED`` and of a ``WAIT_ENDED`` that raised.
    """

    kind: LeaseEventKind
    key: str
    owner: str
    fence: int | None
    detail: str | None = None
    seconds: float | None = None
    error: BaseException | None = None


@runtime_checkable
class LeaseObserver(Protocol):
    """Receives a provider's events; pass one as ``observer=`` to a provider.

    Both methods are called synchronously from the event loop and must not block; exceptions
    they raise are logged and swallowed.
    """

    def on_statement(self, event: StatementEvent) -> None:
        """One statement ran (see `StatementEvent`)."""

    def on_lease_event(self, event: LeaseEvent) -> None:
        """Something happened to a held lease or a wait (see `LeaseEvent`)."""


@runtime_checkable
class Observed(Protocol):
    """A provider that reports to an observer (what ``hold`` and waiting look for)."""

    @property
    def observer(self) -> LeaseObserver | None:
        """The provider's observer, or None."""


# -- for providers, held leases and waiting ---------------------------------------------------


def check_observer(observer: object) -> LeaseObserver | None:
    """``observer`` if it is None or a `LeaseObserver`; else `LeaseTypeError` (before any I/O)."""
    if observer is None or isinstance(observer, LeaseObserver):
        return observer
    raise LeaseTypeError(
        "observer must have on_statement(event) and on_lease_event(event) methods, not "
        f"{type(observer).__name__}"
    )


def observer_of(provider: object) -> LeaseObserver | None:
    """The observer of ``provider``, or None (also for providers that have no ``observer``)."""
    return provider.observer if isinstance(provider, Observed) else None


_warned: set[int] = set()  # observers (by id) whose failure was logged at WARNING


def _failed(observer: LeaseObserver, method: str) -> None:
    first = id(observer) not in _warned
    _warned.add(id(observer))
    logger.log(
        logging.WARNING if first else logging.DEBUG,
        "observer %r raised in %s; ignored%s",
        observer,
        method,
        " (later failures of this observer are logged at DEBUG)" if first else "",
        exc_info=True,
    )


def report_statement(observer: LeaseObserver, event: StatementEvent) -> None:
    """Give ``event`` to ``observer``; what it raises is logged, never propagated."""
    try:
        observer.on_statement(event)
    except Exception:
        _failed(observer, "on_statement")


def report_lease_event(observer: LeaseObserver, event: LeaseEvent) -> None:
    """Give ``event`` to ``observer``; what it raises is logged, never propagated."""
    try:
        observer.on_lease_event(event)
    except Exception:
        _failed(observer, "on_lease_event")


def report_wait(
    observer: LeaseObserver | None,
    kind: LeaseEventKind,
    key: str,
    owner: str,
    result: AcquireResult,
    reason: str | None = None,
) -> None:
    """A waiter's ``WAITED`` (detail: the holder of ``result``) or ``WOKE`` (detail: what woke
    it, ``reason``, else the timer) event, for the async and sync waiters alike; nothing
    without an observer."""
    if observer is not None:
        detail = result.owner if kind is LeaseEventKind.WAITED else (reason or "timer")
        report_lease_event(observer, LeaseEvent(kind, key, owner, result.fence, detail))


async def timed_statement(
    observer: LeaseObserver, backend: str, operation: str, statement: Awaitable[list[Any]]
) -> list[Any]:
    """Await ``statement`` (rows) and report it to ``observer`` as one `StatementEvent`."""
    started = perf_counter()
    try:
        rows = await statement
    except BaseException as exc:
        report_statement(
            observer, StatementEvent(operation, backend, perf_counter() - started, exc)
        )
        raise
    seconds = perf_counter() - started
    try:  # `report_statement` inlined: this runs once per statement
        observer.on_statement(StatementEvent(operation, backend, seconds, None, len(rows)))
    except Exception:
        _failed(observer, "on_statement")
    return rows


def timed_call(
    observer: LeaseObserver, backend: str, operation: str, run: Callable[[], list[Any]]
) -> list[Any]:
    """``run()`` (a blocking statement: rows), reported to ``observer`` as one `StatementEvent`
    (the sync provider's `timed_statement`)."""
    started = perf_counter()
    try:
        rows = run()
    except BaseException as exc:
        report_statement(
            observer, StatementEvent(operation, backend, perf_counter() - started, exc)
        )
        raise
    seconds = perf_counter() - started
    report_statement(observer, StatementEvent(operation, backend, seconds, None, len(rows)))
    return rows


#: Errors a provider raises before touching its store: not statements, never reported.
_BEFORE_IO = (LeaseTypeError, LeaseValueError, LeaseClosedError)


def timed_operation(
    observer: LeaseObserver,
    backend: str,
    operation: str,
    method: Callable[P, Awaitable[T]],
) -> Callable[P, Awaitable[T]]:
    """``method`` reporting each call to ``observer`` as one `StatementEvent` (``rows`` None).

    Calls rejected before the store was touched (bad input, a closed provider) are not
    reported, as on the SQL provider, where they never reach a statement.
    """

    @wraps(method)
    async def call(*args: P.args, **kwargs: P.kwargs) -> T:
        started = perf_counter()
        try:
            result = await method(*args, **kwargs)
        except _BEFORE_IO:
            raise
        except BaseException as exc:
            seconds = perf_counter() - started
            report_statement(observer, StatementEvent(operation, backend, seconds, exc))
            raise
        report_statement(observer, StatementEvent(operation, backend, perf_counter() - started))
        return result

    return call


# -- acquire outcomes and waits (contention) --------------------------------------------------


Acquire = Callable[..., Coroutine[Any, Any, AcquireResult]]  # key, owner, ttl_ms, **counting


def observed_acquire(observer: LeaseObserver, method: Acquire) -> Acquire:
    """``method`` (a provider's bound ``acquire_lease``) reporting each call's outcome to
    ``observer``: ``GRANTED``, ``REFUSED`` or ``ACQUIRE_FAILED``, with its duration.

    A provider wraps its own method with this on its instance only when it has an observer, so
    that calls without one pay nothing. Calls rejected before any I/O are not reported.
    """

    @wraps(method)
    async def acquire_lease(key: str, owner: str, ttl_ms: Millis, **counting: Any) -> AcquireResult:
        started = perf_counter()
        try:
            result = await method(key, owner, ttl_ms, **counting)  # limit=, metadata=: as given
        except _BEFORE_IO:
            raise
        except BaseException as exc:
            event = LeaseEvent(
                LeaseEventKind.ACQUIRE_FAILED,
                key,
                owner,
                None,
                None,
                perf_counter() - started,
                exc,
            )
            report_lease_event(observer, event)
            raise
        seconds = perf_counter() - started
        if result.acquired:
            event = LeaseEvent(LeaseEventKind.GRANTED, key, owner, result.fence, None, seconds)
        else:
            event = LeaseEvent(
                LeaseEventKind.REFUSED, key, owner, result.fence, result.owner, seconds
            )
        report_lease_event(observer, event)
        return result

    return acquire_lease


async def observed_wait(
    observer: LeaseObserver, key: str, owner: str, wait: Awaitable[tuple[AcquireResult, float]]
) -> tuple[AcquireResult, float]:
    """Await ``wait`` (a wait for ``key``: its result and when its last acquire started) and
    report it to ``observer`` as one ``WAIT_ENDED`` event with its duration."""
    started = perf_counter()
    try:
        outcome = await wait
    except _BEFORE_IO:
        raise
    except BaseException as exc:
        seconds = perf_counter() - started
        event = LeaseEvent(LeaseEventKind.WAIT_ENDED, key, owner, None, "error", seconds, exc)
        report_lease_event(observer, event)
        raise
    result = outcome[0]
    detail = "acquired" if result.acquired else "timeout"
    event = LeaseEvent(
        LeaseEventKind.WAIT_ENDED, key, owner, result.fence, detail, perf_counter() - started
    )
    report_lease_event(observer, event)
    return outcome


# -- lease name classes: a bounded attribute for metrics -------------------------------------

#: The class of every key once ``LeaseClasses`` has seen its cap of distinct classes.
OTHER_CLASS = "_other"


def by_prefix(separator: str = ":", parts: int = 1) -> Callable[[str], str]:
    """A key's class by its first ``parts`` fields: ``by_prefix(":")("tenant:42:import")`` is
    ``"tenant"``; a key without ``separator`` is its own class (the cap of `LeaseClasses`
    bounds how many there are)."""
    if not isinstance(separator, str) or not separator:
        raise LeaseValueError("separator must be a non-empty string")
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise LeaseValueError("parts must be an int of at least 1")

    def lease_class(key: str) -> str:
        return separator.join(key.split(separator, parts)[:parts])

    return lease_class


class LeaseClasses:
    """Keys mapped to at most ``cap`` distinct classes by ``classify`` (key -> class name);
    the classes seen after the cap is reached count as `OTHER_CLASS`.

    A metric attribute must take few values (each one is a time series): raw keys never are
    one, a class (``"import"``, ``"tenant"``) can be. A class once admitted stays admitted, so
    a key always gets the same class from one `LeaseClasses` (an up-down counter's +1 and -1
    meet). ``classify`` must return a string; what it raises propagates (an observer's
    failure is logged, not raised, by the provider).
    """

    def __init__(self, classify: Callable[[str], str], cap: int = 100) -> None:
        if not callable(classify):
            raise LeaseTypeError("the lease class must be a callable: key -> class name")
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise LeaseValueError("the cap of lease classes must be an int of at least 1")
        self._classify = classify
        self._cap = cap
        self._seen: set[str] = set()

    def __call__(self, key: str) -> str:
        name = self._classify(key)
        if name in self._seen:
            return name
        if not isinstance(name, str):
            raise LeaseTypeError(f"a lease class must be a str, not {type(name).__name__}")
        if len(self._seen) >= self._cap:
            return OTHER_CLASS
        self._seen.add(name)
        return name
