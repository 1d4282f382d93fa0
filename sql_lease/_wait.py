"""Waiting for a busy key without busy polling (``provider.wait_for_lease(...)``).

A waiter tries to acquire; if the key is taken it marks the key wanted (``provider.mark_wanted``,
so the holder's release, transfer or force-release sends a notification), makes sure this
process listens, tries again (closing the race with a release in between) and sleeps until
notified, until the holder's known expiry (plus jitter), or until its timeout, then retries.

Notifications are hints, never needed for correctness: on PostgreSQL they come through one
LISTEN connection per provider (`_listen`), which can drop them (lost connection, poolers), so
a waiter also re-checks at the holder's expiry and after the listener reconnects. A
notification wakes one local waiter of the key (the first in line), not all of them; the
expiry re-checks are jittered. The in-memory provider wakes a waiter itself on every release,
transfer or force-release. Other providers without notifications (SQLite) are re-checked every
`POLL_S` seconds, and releases made through `hold` in this process wake a waiter at once.
"""

from __future__ import annotations

import asyncio
import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from ._contract import AcquireResult
from ._listen import Listener
from ._per_provider import PerProvider
from ._validate import Millis, check_millis, check_name, check_ttl
from .errors import LeaseClosedError
from .observer import LeaseEvent, LeaseEventKind, observer_of, report_lease_event

__all__ = [
    "POLL_S",
    "Hub",
    "close_listener",
    "hub_for",
    "notifies_itself",
    "notify_local",
    "wait_for",
    "wait_for_lease",
    "wake_all",
]

#: Re-check interval for providers that cannot notify (SQLite), in seconds.
POLL_S = 0.05
_JITTER_S = (0.005, 0.05)  # added to expiry re-checks and reconnect wake-ups
_OFFSET_MAX_AGE_S = 30.0  # how long a measured provider clock offset is trusted

_hubs: PerProvider[Hub] = PerProvider(lambda p, _weak: Hub(p))


def _can_notify(provider: Any) -> bool:
    engine = getattr(provider, "engine", None)
    dialect = getattr(engine, "dialect", None)
    return getattr(dialect, "name", None) == "postgresql" and hasattr(provider, "_sql")


def hub_for(provider: Any) -> Hub:
    """The waiter registry of ``provider`` (created on first use)."""
    return _hubs.get(provider)


def notifies_itself(provider: Any) -> bool:
    """True for providers whose own release/transfer wakes local waiters (in-memory)."""
    return bool(getattr(provider, "_notifies_waiters", False))


def notify_local(provider: Any, key: str) -> None:
    """Wake one local waiter of ``key`` after this process freed or handed it on.

    Only for providers without a notification channel: on PostgreSQL the NOTIFY does it.
    """
    hub = _hubs.find(provider)
    if hub is not None and hub.listener is None:
        hub.notify(key)


def wake_all(provider: Any) -> None:
    """Wake every waiter of ``provider`` (it was closed: their next call fails at once)."""
    hub = _hubs.find(provider)
    if hub is not None:
        hub.wake_all()


async def close_listener(provider: Any) -> None:
    """Close ``provider``'s LISTEN connection now (for its ``aclose``)."""
    hub = _hubs.find(provider)
    if hub is not None and hub.listener is not None:
        await hub.listener.close()


class Waiter:
    """One waiting call: its key, its loop, and the event that wakes it."""

    __slots__ = ("event", "generation", "key", "loop", "reason", "sleeping")

    def __init__(self, key: str, loop: asyncio.AbstractEventLoop) -> None:
        self.key = key
        self.loop = loop
        self.event = asyncio.Event()
        self.reason: str | None = None
        self.generation = -1  # listener connection that covers this waiter (-1: none)
        self.sleeping = False


class Hub:
    """Waiters of one provider by key, and the provider's listener when it can notify."""

    def __init__(self, provider: Any) -> None:
        self._waiters: dict[str, list[Waiter]] = {}
        self.listener: Listener | None = Listener(provider, self) if _can_notify(provider) else None
        self._offset: timedelta | None = None
        self._offset_at = -math.inf

    @property
    def active(self) -> bool:
        """True while anyone waits."""
        return bool(self._waiters)

    def arm(self, waiter: Waiter) -> None:
        """Put ``waiter`` in line for its key with a cleared event."""
        waiter.event.clear()
        waiter.reason = None
        line = self._waiters.setdefault(waiter.key, [])
        if waiter not in line:
            line.append(waiter)

    def remove(self, waiter: Waiter) -> None:
        line = self._waiters.get(waiter.key)
        if line is not None and waiter in line:
            line.remove(waiter)
            if not line:
                del self._waiters[waiter.key]
        if not self._waiters and self.listener is not None:
            self.listener.poke()

    def notify(self, key: str) -> None:
        """Wake the first waiter in line for ``key``."""
        line = self._waiters.get(key)
        if line:
            waiter = line.pop(0)
            if not line:
                del self._waiters[key]
            _wake(waiter, "notify")

    def wake_sleepers(self) -> None:
        """Wake every sleeping waiter (the listener reconnected: notifications may be lost)."""
        for key in list(self._waiters):
            line = self._waiters[key]
            for waiter in [w for w in line if w.sleeping]:
                line.remove(waiter)
                _wake(waiter, "reconnect")
            if not line:
                del self._waiters[key]

    def wake_all(self) -> None:
        """Wake every waiter, sleeping or not."""
        waiters = [w for line in self._waiters.values() for w in line]
        self._waiters.clear()
        for waiter in waiters:
            _wake(waiter, "closed")

    def sleeping(self, key: str) -> int:
        """How many waiters of ``key`` are asleep in line, waiting for a wake-up (diagnostics;
        tests wait on it instead of sleeping). With a listener, a waiter only sleeps once it
        tried LISTEN; ``listener.connected`` tells whether it is in place."""
        return sum(waiter.sleeping for waiter in self._waiters.get(key, ()))

    def generation(self) -> int:
        """The current listener connection's number, or -1 when not listening."""
        listener = self.listener
        return listener.generation if listener is not None and listener.connected else -1

    async def seconds_until(self, provider: Any, when: datetime) -> float:
        """Seconds until ``when`` by the provider's clock (its offset measured and cached)."""
        loop = asyncio.get_running_loop()
        if self._offset is None or loop.time() - self._offset_at > _OFFSET_MAX_AGE_S:
            now = getattr(provider, "now", None)
            if now is None:
                self._offset = timedelta(0)
            else:
                before = datetime.now(UTC)
                theirs: datetime = await now()
                after = datetime.now(UTC)
                self._offset = theirs - (before + (after - before) / 2)
            self._offset_at = loop.time()
        return (when - (datetime.now(UTC) + self._offset)).total_seconds()


def _wake(waiter: Waiter, reason: str) -> None:
    waiter.reason = reason
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is waiter.loop:
        waiter.event.set()
    else:
        waiter.loop.call_soon_threadsafe(waiter.event.set)


async def wait_for(
    provider: Any, key: str, owner: str, ttl_ms: Millis, timeout_ms: Millis
) -> tuple[AcquireResult, float]:
    """`wait_for_lease`, also returning the loop time at which the last acquire started."""
    check_name("key", key)
    check_name("owner", owner)
    ttl_ms = check_ttl(ttl_ms)
    timeout_ms = check_millis("timeout_ms", timeout_ms)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    started = loop.time()
    result: AcquireResult = await provider.acquire_lease(key, owner, ttl_ms)
    if result.acquired or timeout_ms == 0:
        return result, started
    hub = hub_for(provider)
    waiter = Waiter(key, loop)
    want = getattr(provider, "mark_wanted", None)
    observer = observer_of(provider)
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return result, started
            if want is not None:
                await want(key, max(1, math.ceil(remaining * 1000)))
            hub.arm(waiter)
            if hub.listener is not None:
                if provider.closed:  # closed meanwhile: do not start a listener again
                    raise LeaseClosedError("wait_for_lease")
                await hub.listener.ready(min(remaining, provider.timeout))
            waiter.generation = hub.generation()
            started = loop.time()
            result = await provider.acquire_lease(key, owner, ttl_ms)
            if result.acquired:
                return result, started
            wake_at = deadline
            if result.expires_at is not None:
                until = await hub.seconds_until(provider, result.expires_at)
                wake_at = min(wake_at, loop.time() + max(0.0, until) + random.uniform(*_JITTER_S))
            if hub.listener is None and not notifies_itself(provider):
                wake_at = min(wake_at, loop.time() + POLL_S)
            # A reconnect since arming means notifications may have been missed: look again.
            if waiter.generation == hub.generation():
                if observer is not None:
                    waited = LeaseEvent(
                        LeaseEventKind.WAITED, key, owner, result.fence, result.owner
                    )
                    report_lease_event(observer, waited)
                waiter.sleeping = True
                try:
                    async with asyncio.timeout_at(wake_at):
                        await waiter.event.wait()
                except TimeoutError:
                    pass
                finally:
                    waiter.sleeping = False
                if observer is not None:
                    why = waiter.reason or "timer"
                    woke = LeaseEvent(LeaseEventKind.WOKE, key, owner, result.fence, why)
                    report_lease_event(observer, woke)
                if waiter.reason == "reconnect":
                    await asyncio.sleep(random.uniform(*_JITTER_S))
            started = loop.time()
            result = await provider.acquire_lease(key, owner, ttl_ms)
            if result.acquired:
                return result, started
    except BaseException:
        if waiter.reason == "notify" and waiter.event.is_set():
            hub.notify(key)  # we were woken but leave without acting on it: pass it on
        raise
    finally:
        hub.remove(waiter)


async def wait_for_lease(
    provider: Any, key: str, owner: str, ttl_ms: Millis, *, timeout_ms: Millis
) -> AcquireResult:
    """Acquire ``key`` for ``owner``, waiting up to ``timeout_ms`` for it to become free.

    Returns the acquired result, or after the timeout the last result (naming the holder).
    ``timeout_ms=0`` is a single `acquire_lease`. Database errors propagate.
    """
    result, _ = await wait_for(provider, key, owner, ttl_ms, timeout_ms)
    return result
