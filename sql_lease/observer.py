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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import wraps
from time import perf_counter
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, runtime_checkable

from .errors import LeaseClosedError, LeaseTypeError, LeaseValueError

if TYPE_CHECKING:
    from ._core.contract import AcquireResult

__all__ = ["LeaseEvent", "LeaseEventKind", "LeaseObserver", "StatementEvent"]

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


@dataclass(frozen=True, slots=True)
class LeaseEvent:
    """A `LeaseEventKind` that happened to ``key`` held (or waited for) by ``owner``.

    ``fence`` is the hold's fence (None before it was acquired); for waits, the holder's. Every
    ``ACQUIRED`` is followed by exactly one of ``LOST``, ``RELEASED`` or ``TRANSFERRED``, so
    acquired minus those three is the number of leases held through ``hold``.
    """

    kind: LeaseEventKind
    key: str
    owner: str
    fence: int | None
    detail: str | None = None


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
