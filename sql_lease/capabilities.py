"""What a provider can do beyond the five contract methods, as small typed protocols.

Held leases (`hold`), waiting (`wait_for_lease`) and the coordinator feature-detect these with
``isinstance`` against the runtime-checkable protocols below, never by looking for private
names: a provider that a user wrote (or one that wraps ours, for metrics say) gets batched
renewal and notifications by implementing the matching protocol, and a plain `LeaseProvider`
still works with a per-lease renewal loop and polling.

Both of our providers implement every protocol here except `NotificationSource`, which only
backends with a notification channel (PostgreSQL's LISTEN/NOTIFY) provide. `Observed` (a
provider with an observer) lives in `sql_lease.observer` and is re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import NamedTuple, Protocol, runtime_checkable

from ._core.contract import Lease
from ._core.counting import AcquireAllResult
from .observer import Observed

__all__ = [
    "AllOrNone",
    "BatchRenewal",
    "DatabaseClock",
    "Holder",
    "NotificationSource",
    "Observed",
    "Released",
    "Renewal",
    "WakeupSink",
    "WakeupSource",
    "WantMarking",
]


class Renewal(NamedTuple):
    """A lease as a successful renewal (or transfer) left it, in database time."""

    fence: int
    expires_at: datetime


class Released(NamedTuple):
    """A release that took effect: the fence it ended and when, in database time."""

    fence: int
    released_at: datetime


class Holder(NamedTuple):
    """The live holder of a key."""

    owner: str
    fence: int
    expires_at: datetime


@runtime_checkable
class BatchRenewal(Protocol):
    """Renews many leases in as few statements as the store allows."""

    async def renew_many(
        self, items: Sequence[tuple[str, str]], ttl_ms: int
    ) -> list[Renewal | None]:
        """Renew each ``(key, owner)`` with ``ttl_ms``; per item, in order, its `Renewal` or
        None when that owner no longer holds that key."""
        ...


@runtime_checkable
class AllOrNone(Protocol):
    """Takes several keys at once, all or none (what a hold of several keys needs)."""

    async def acquire_leases(
        self, keys: Iterable[str], owner: str, ttl_ms: int
    ) -> AcquireAllResult:
        """Every key for ``owner``, or none (naming the key that blocked)."""
        ...

    async def get_lease(self, key: str) -> Lease | None:
        """The live lease of ``key`` (its expiry: when a blocked hold looks again)."""
        ...


@runtime_checkable
class WantMarking(Protocol):
    """Marks a key as waited for, so that its release or transfer sends a notification."""

    async def mark_wanted(self, key: str, wait_ms: int) -> Holder | None:
        """Mark ``key`` wanted for ``wait_ms``; its live `Holder`, or None when it is free."""
        ...


@runtime_checkable
class DatabaseClock(Protocol):
    """Reads the clock that judges expiry."""

    async def now(self) -> datetime:
        """The store's current time (timezone-aware)."""
        ...


class WakeupSink(Protocol):
    """Receives what a `WakeupSource` hears: the waiter registry of a provider."""

    @property
    def active(self) -> bool:
        """True while anyone waits (a source stops listening when it turns False)."""
        ...

    def notify(self, key: str) -> None:
        """``key`` was released, transferred or force-released: wake one waiter of it."""
        ...

    def wake_sleepers(self) -> None:
        """Notifications may have been missed (a reconnect): wake every sleeping waiter."""
        ...


class WakeupSource(Protocol):
    """A notification channel (one connection per provider) feeding a `WakeupSink`.

    ``generation`` counts successful connections, ``connected`` tells whether one is up,
    ``notifications`` counts what arrived.
    """

    connected: bool
    generation: int
    notifications: int

    async def ready(self, within: float) -> bool:
        """Start listening if needed; True once it listens (False after ``within`` seconds)."""
        ...

    def poke(self) -> None:
        """Re-check whether anyone still waits (the sink's ``active`` changed)."""
        ...

    async def close(self) -> None:
        """Stop listening now; a later `ready` starts again."""
        ...


@runtime_checkable
class NotificationSource(Protocol):
    """Can tell waiters when a wanted key is freed (see `WantMarking`)."""

    def wakeup_source(self, sink: WakeupSink) -> WakeupSource | None:
        """A new (not yet connected) notification channel that feeds ``sink``, or None when
        this provider's store has none (SQLite): its waiters then poll."""
        ...
