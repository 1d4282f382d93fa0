"""Waiting for a busy key, sync: ``provider.wait_for_lease(key, owner, ttl_ms, timeout_ms=...)``.

The async algorithm (`sql_lease._holding.wait`) with threads: try to acquire; if the key is taken,
mark it wanted (PostgreSQL: its release or transfer then sends a NOTIFY), make sure the
provider listens (`_listen`), try again (closing the race with a release in between) and sleep
until notified, until the holder's known expiry (plus jitter), or until the timeout; then
retry. Without notifications (SQLite) a waiter re-checks every `POLL_S` seconds; releases made
in this process (the in-memory provider, `hold`) wake a local waiter at once.
"""

from __future__ import annotations

import math
import random
import threading
import time
from datetime import UTC, datetime, timedelta
from time import monotonic
from typing import TYPE_CHECKING, Final

from .._core.contract import AcquireResult
from .._core.validate import Millis, check_millis, check_name, check_ttl
from ._capabilities import SyncDatabaseClock, SyncLeaseProvider, SyncWantMarking, Timed

if TYPE_CHECKING:
    from ..backends import SyncListener as Listener

__all__ = ["POLL_S", "Hub", "wait_for"]

POLL_S: Final = 0.05
_JITTER_S: Final = (0.005, 0.05)
_OFFSET_MAX_AGE_S: Final = 30.0
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


class Hub:
    """The waiters of one provider by key; its `Listener` when the provider can notify."""

    def __init__(self) -> None:
        self._waiters: dict[str, list[Waiter]] = {}
        self._lock = threading.Lock()
        self.listener: Listener | None = None
        #: True when the provider itself wakes waiters on every release (in-memory).
        self.self_notifying = False
        self._offset: timedelta | None = None
        self._offset_at = -math.inf

    @property
    def active(self) -> bool:
        return bool(self._waiters)

    def sleeping(self, key: str) -> int:
        """How many waiters of ``key`` are asleep, in line for a wake-up (diagnostics)."""
        with self._lock:
            return sum(1 for w in self._waiters.get(key, ()) if w.sleeping)

    def arm(self, waiter: Waiter) -> None:
        with self._lock:
            waiter.event.clear()
            waiter.reason = None
            line = self._waiters.setdefault(waiter.key, [])
            if waiter not in line:
                line.append(waiter)

    def remove(self, waiter: Waiter) -> None:
        with self._lock:
            line = self._waiters.get(waiter.key)
            if line is not None and waiter in line:
                line.remove(waiter)
                if not line:
                    del self._waiters[waiter.key]

    def notify(self, key: str) -> None:
        """Wake the first waiter in line for ``key``."""
        with self._lock:
            line = self._waiters.get(key)
            if not line:
                return
            waiter = line.pop(0)
            if not line:
                del self._waiters[key]
        waiter.reason = "notify"
        waiter.event.set()

    def wake_sleepers(self) -> None:
        """Wake every sleeping waiter (the listener reconnected: notifications may be lost)."""
        with self._lock:
            woken = []
            for key in list(self._waiters):
                line = self._waiters[key]
                for waiter in [w for w in line if w.sleeping]:
                    line.remove(waiter)
                    woken.append(waiter)
                if not line:
                    del self._waiters[key]
        for waiter in woken:
            waiter.reason = "reconnect"
            waiter.event.set()

    def generation(self) -> int:
        listener = self.listener
        return listener.generation if listener is not None and listener.connected else -1

    def seconds_until(self, provider: SyncLeaseProvider, when: datetime) -> float:
        """Seconds until ``when`` by the provider's clock (its offset measured and cached;
        the local clock for a provider that is no `SyncDatabaseClock`)."""
        if not isinstance(provider, SyncDatabaseClock):
            return (when - datetime.now(UTC)).total_seconds()
        if self._offset is None or monotonic() - self._offset_at > _OFFSET_MAX_AGE_S:
            before = datetime.now(UTC)
            theirs = provider.now()
            after = datetime.now(UTC)
            self._offset = theirs - (before + (after - before) / 2)
            self._offset_at = monotonic()
        return (when - (datetime.now(UTC) + self._offset)).total_seconds()


def wait_for(
    provider: SyncLeaseProvider,
    hub: Hub,
    key: str,
    owner: str,
    ttl_ms: Millis,
    timeout_ms: Millis,
) -> tuple[AcquireResult, float]:
    """`wait_for_lease`, also returning the `monotonic` time the last acquire started."""
    check_name("key", key)
    check_name("owner", owner)
    ttl = check_ttl(ttl_ms)
    timeout = check_millis("timeout_ms", timeout_ms)
    deadline = monotonic() + timeout / 1000
    started = monotonic()
    result = provider.acquire_lease(key, owner, ttl)
    if result.acquired or timeout == 0:
        return result, started
    waiter = Waiter(key)
    marking = provider if isinstance(provider, SyncWantMarking) and provider.notifies else None
    ready_within = provider.timeout if isinstance(provider, Timed) else _READY_S
    try:
        while True:
            remaining = deadline - monotonic()
            if remaining <= 0:
                return result, started
            wait_ms = max(1, math.ceil(remaining * 1000))
            marked = marking.mark_wanted(key, wait_ms) if marking is not None else None
            hub.arm(waiter)
            if hub.listener is not None:
                hub.listener.ready(min(remaining, ready_within))
            waiter.generation = hub.generation()
            started = monotonic()
            result = provider.acquire_lease(key, owner, ttl)
            if result.acquired:
                return result, started
            # The key was free when it was to be marked wanted, and someone took it since:
            # mark it now, or its holder's release would send nothing (and we would sleep
            # until its expiry). Free again meanwhile: go round and acquire.
            if marking is not None and marked is None and marking.mark_wanted(key, wait_ms) is None:
                continue
            wake_at = deadline
            if result.expires_at is not None:
                until = hub.seconds_until(provider, result.expires_at)
                wake_at = min(wake_at, monotonic() + max(0.0, until) + random.uniform(*_JITTER_S))
            if hub.listener is None and not hub.self_notifying:
                wake_at = min(wake_at, monotonic() + POLL_S)
            if waiter.generation == hub.generation():
                waiter.sleeping = True
                try:
                    waiter.event.wait(max(0.0, wake_at - monotonic()))
                finally:
                    waiter.sleeping = False
                if waiter.reason == "reconnect":
                    time.sleep(random.uniform(*_JITTER_S))
            started = monotonic()
            result = provider.acquire_lease(key, owner, ttl)
            if result.acquired:
                return result, started
    except BaseException:
        if waiter.reason == "notify" and waiter.event.is_set():
            hub.notify(key)  # woken but leaving without acting on it: pass it on
        raise
    finally:
        hub.remove(waiter)
