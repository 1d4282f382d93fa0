"""Waiting for a busy key, sync: ``provider.wait_for_lease(key, owner, ttl_ms, timeout_ms=...)``.

The async algorithm (`sql_lease._holding.wait`) with threads: try to acquire; if the key is taken,
mark it wanted (PostgreSQL: its release or transfer then sends a NOTIFY), make sure the
provider listens (`_listen`), try again (closing the race with a release in between) and sleep
until notified, until the holder's known expiry (plus jitter), or until the timeout; then
retry. Without notifications (SQLite) a waiter re-checks every `POLL_S` seconds; releases made
in this process (the in-memory provider, `hold`) wake a local waiter at once. The loop is
`sql_lease._core.waiting.wait_steps`, the async waiter's own; this module performs its steps
with threads.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from time import monotonic
from typing import Final, cast

from .._core.contract import AcquireResult
from .._core.counting import AcquireAllResult
from .._core.policy import HoldTerms, SyncCheckedCalls, acquire_call, wait_terms
from .._core.waiting import (
    JITTER_S,
    POLL_S,
    HubBase,
    StepKind,
    advance,
    wait_steps,
    wake_at,
)
from ..backends import SyncListener
from ..observer import LeaseEventKind, observer_of, report_wait
from ._capabilities import (
    SyncAllOrNone,
    SyncDatabaseClock,
    SyncLeaseProvider,
    SyncWantMarking,
    Timed,
)

__all__ = ["POLL_S", "Hub", "acquirer", "wait_all", "wait_for"]

_READY_S: Final = 5.0  # how long to wait for the listener of a provider without a timeout


class Waiter:
    """One waiting call: its key and the event that wakes it."""

    __slots__ = ("event", "generation", "key", "reason", "sleeping")

    def __init__(self, key: str) -> None:
        self.key = key
        self.event = threading.Event()
        self.reason: str | None = None
        self.generation = -1
        self.sleeping = False


class Hub(HubBase[Waiter, SyncListener]):
    """The waiters of one provider by key (`HubBase`, under a lock); its `Listener` when the
    provider can notify."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def sleeping(self, key: str) -> int:
        """How many waiters of ``key`` are asleep, in line for a wake-up (diagnostics)."""
        with self._lock:
            return self._lines.sleeping(key)

    def arm(self, waiter: Waiter) -> None:
        with self._lock:
            waiter.event.clear()
            waiter.reason = None
            self._lines.add(waiter)

    def remove(self, waiter: Waiter) -> None:
        with self._lock:
            self._lines.remove(waiter)

    def notify(self, key: str) -> None:
        """Wake the first waiter in line for ``key``."""
        with self._lock:
            waiter = self._lines.first(key)
        if waiter is not None:
            _wake(waiter, "notify")

    def wake_sleepers(self) -> None:
        """Wake every sleeping waiter (the listener reconnected: notifications may be lost)."""
        with self._lock:
            woken = self._lines.sleepers()
        for waiter in woken:
            _wake(waiter, "reconnect")

    def seconds_until(self, provider: SyncLeaseProvider, when: datetime) -> float:
        """Seconds until ``when`` by the provider's clock (its offset measured and cached;
        the local clock for a provider that is no `SyncDatabaseClock`)."""
        clock = self._clock
        now = monotonic()
        if clock.stale(now):
            before = datetime.now(UTC)
            theirs = provider.now() if isinstance(provider, SyncDatabaseClock) else None
            clock.measured(now, before, theirs, datetime.now(UTC))
        return clock.seconds_until(when, datetime.now(UTC))


def _wake(waiter: Waiter, reason: str) -> None:
    waiter.reason = reason
    waiter.event.set()


def acquirer(
    provider: SyncLeaseProvider, terms: HoldTerms, limit: int = 1
) -> Callable[[], AcquireResult]:
    """The acquire of checked ``terms`` (`sql_lease._core.policy.acquire_call`): our providers
    take them as they are (`SyncCheckedCalls`), others get ``acquire_lease``; ``limit`` other
    than 1: a slot of a counting lease."""
    call: Callable[[], AcquireResult] = acquire_call(
        provider, terms, limit, isinstance(provider, SyncCheckedCalls)
    )
    return call


def wait_all(
    provider: SyncAllOrNone,
    hub: Hub,
    keys: tuple[str, ...],
    terms: HoldTerms,
) -> tuple[AcquireAllResult, float]:
    """``acquire_leases`` of ``keys`` (checked) for ``terms.owner`` and ``terms.ttl_ms``,
    waiting up to ``terms.wait_ms`` for all of them, as the async `wait_all`: while refused,
    wait on the key that blocked (its release, its holder's expiry, the next poll), each
    attempt taking all keys or none. The last result and the `monotonic` time its attempt
    started."""
    owner, ttl_ms = terms.owner, terms.ttl_ms
    deadline = monotonic() + terms.wait_ms / 1000
    last: list[tuple[AcquireAllResult, float]] = []

    def attempt() -> AcquireAllResult:
        started = monotonic()
        result = provider.acquire_leases(keys, owner, ttl_ms)
        last[:] = [(result, started)]
        return result

    result = attempt()
    while not result.acquired and result.blocked_key is not None:
        left = math.ceil((deadline - monotonic()) * 1000)
        if left <= 0:
            break
        blocked = result.blocked_key

        def on_blocked(blocked: str = blocked) -> AcquireResult:
            again = attempt()
            if again.acquired or again.blocked_key != blocked:
                return AcquireResult(True, owner)  # done, or another key to wait on
            lease = provider.get_lease(blocked)  # its expiry: when to look again
            expiry = None if lease is None else lease.expires_at
            return AcquireResult(False, again.blocked_by, None, expiry)

        on_key = wait_terms(blocked, owner, ttl_ms, left)
        wait_for(cast(SyncLeaseProvider, provider), hub, on_key, acquire=on_blocked)
        result = last[0][0]
    return last[0]


def wait_for(
    provider: SyncLeaseProvider,
    hub: Hub,
    terms: HoldTerms,
    limit: int = 1,
    acquire: Callable[[], AcquireResult] | None = None,
) -> tuple[AcquireResult, float]:
    """`wait_for_lease` of checked ``terms`` (``terms.wait_ms`` is the timeout; a hold's are
    checked once, not again here), also returning the `monotonic` time the last acquire
    started. ``limit`` other than 1: a slot of a counting lease. ``acquire``: the attempt
    instead of acquiring ``terms.key`` (a hold of several keys: all of them)."""
    key, owner, timeout_ms = terms.key, terms.owner, terms.wait_ms
    acquire = acquire or acquirer(provider, terms, limit)
    deadline = monotonic() + timeout_ms / 1000
    started = monotonic()
    result = acquire()
    if result.acquired or timeout_ms == 0:
        return result, started
    waiter = Waiter(key)
    marking = provider if isinstance(provider, SyncWantMarking) and provider.notifies else None
    ready_within = provider.timeout if isinstance(provider, Timed) else _READY_S
    observer = observer_of(provider)
    steps = wait_steps(deadline, monotonic, marking is not None)
    answer: object = None
    try:
        while (step := advance(steps, answer)) is not None:
            kind = step.kind
            if kind is StepKind.ACQUIRE:
                started = monotonic()
                result = acquire()
                answer = result.acquired
            elif kind is StepKind.MARK:
                assert marking is not None
                answer = marking.mark_wanted(key, step.wait_ms)
            elif kind is StepKind.LISTEN:
                hub.arm(waiter)
                if hub.listener is not None:
                    hub.listener.ready(min(step.remaining, ready_within))
                waiter.generation = hub.generation()
                answer = None
            else:
                until = None
                if result.expires_at is not None:
                    until = hub.seconds_until(provider, result.expires_at)
                jitter = random.uniform(*JITTER_S)
                wake = wake_at(monotonic(), deadline, until, POLL_S if hub.polls else None, jitter)
                if waiter.generation == hub.generation():
                    report_wait(observer, LeaseEventKind.WAITED, key, owner, result)
                    waiter.sleeping = True
                    try:
                        waiter.event.wait(max(0.0, wake - monotonic()))
                    finally:
                        waiter.sleeping = False
                    report_wait(observer, LeaseEventKind.WOKE, key, owner, result, waiter.reason)
                    if waiter.reason == "reconnect":
                        time.sleep(random.uniform(*JITTER_S))
                answer = None
        return result, started
    except BaseException:
        if waiter.reason == "notify" and waiter.event.is_set():
            hub.notify(key)  # woken but leaving without acting on it: pass it on
        raise
    finally:
        steps.close()
        hub.remove(waiter)
