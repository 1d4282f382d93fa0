"""The waiters of one provider, by key, and what wakes them (see `sql_lease._holding.wait`).

A `Hub` is the `WakeupSink` of its provider's notification channel (``listener``, a
`WakeupSource`, when the provider is a `NotificationSource` that has one), and of the
provider itself when it wakes its own waiters (``self_notifying``: the in-memory provider).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from .._core.contract import LeaseProvider
from .._core.waiting import HubBase
from ..capabilities import DatabaseClock, WakeupSource

__all__ = ["Hub", "Waiter"]


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


class Hub(HubBase[Waiter, WakeupSource]):
    """Waiters of one provider by key (a `WakeupSink`; see `HubBase`).

    ``listener`` is the provider's notification channel or None; ``self_notifying`` is True
    when the provider wakes a waiter itself on every release, transfer and force-release (then
    nobody polls); ``ready_within`` bounds the wait for the listener to connect, in seconds;
    ``closed`` turns True when the provider closes (waiters then stop).
    """

    def __init__(self, *, self_notifying: bool = False, ready_within: float = 5.0) -> None:
        super().__init__(self_notifying=self_notifying)
        self.ready_within = ready_within
        self.closed = False

    def arm(self, waiter: Waiter) -> None:
        """Put ``waiter`` in line for its key with a cleared event."""
        waiter.event.clear()
        waiter.reason = None
        self._lines.add(waiter)

    def remove(self, waiter: Waiter) -> None:
        """Take ``waiter`` out of line (it is done waiting)."""
        self._lines.remove(waiter)
        if not self._lines and self.listener is not None:
            self.listener.poke()

    def notify(self, key: str) -> None:
        """Wake the first waiter in line for ``key``."""
        waiter = self._lines.first(key)
        if waiter is not None:
            _wake(waiter, "notify")

    def wake_sleepers(self) -> None:
        """Wake every sleeping waiter (the listener reconnected: notifications may be lost)."""
        for waiter in self._lines.sleepers():
            _wake(waiter, "reconnect")

    def wake_all(self) -> None:
        """Wake every waiter, sleeping or not."""
        for waiter in self._lines.everyone():
            _wake(waiter, "closed")

    def sleeping(self, key: str) -> int:
        """How many waiters of ``key`` are asleep in line, waiting for a wake-up (diagnostics;
        tests wait on it instead of sleeping). With a listener, a waiter only sleeps once it
        tried to listen; ``listener.connected`` tells whether it is in place."""
        return self._lines.sleeping(key)

    async def seconds_until(self, provider: LeaseProvider, when: datetime) -> float:
        """Seconds until ``when`` by the provider's clock (its offset measured and cached; the
        local clock for a provider that is not a `DatabaseClock`)."""
        clock = self._clock
        now = asyncio.get_running_loop().time()
        if clock.stale(now):
            before = datetime.now(UTC)
            theirs = await provider.now() if isinstance(provider, DatabaseClock) else None
            clock.measured(now, before, theirs, datetime.now(UTC))
        return clock.seconds_until(when, datetime.now(UTC))


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
