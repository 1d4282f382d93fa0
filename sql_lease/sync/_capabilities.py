"""What the sync `hold` and `wait_for_lease` need from a provider, as small typed protocols.

The blocking counterparts of `sql_lease._core.contract.LeaseProvider` and
`sql_lease.capabilities`, detected with ``isinstance`` (never by looking for names): a provider
with only the five contract methods works with a per-lease renewal and polling; one with
`SyncBatchRenewal` is renewed in one statement per TTL, one that is `SyncWantMarking` (with
``notifies`` True) wakes its waiters by notification.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from .._core.contract import AcquireResult, Lease
from .._core.counting import AcquireAllResult
from ..capabilities import Holder

__all__ = [
    "SyncAllOrNone",
    "SyncBatchRenewal",
    "SyncBoolBatchRenewal",
    "SyncDatabaseClock",
    "SyncLeaseProvider",
    "SyncWantMarking",
    "Timed",
]


@runtime_checkable
class SyncLeaseProvider(Protocol):
    """The lease contract, blocking: what `sql_lease.sync.HeldLease` runs on."""

    def acquire_lease(self, key: str, owner: str, ttl_ms: int) -> AcquireResult: ...

    def get_lease_owner(self, key: str) -> str | None: ...

    def release_lease(self, key: str, owner: str) -> None: ...

    def renew_lease(self, key: str, owner: str, ttl_ms: int) -> bool: ...

    def transfer_lease(self, key: str, from_owner: str, to_owner: str, ttl_ms: int) -> bool: ...


@runtime_checkable
class SyncBatchRenewal(Protocol):
    """Renews many leases in as few statements as the store allows."""

    def renew_many(
        self, items: Sequence[tuple[str, str]], ttl_ms: int
    ) -> Sequence[tuple[int, datetime] | None]:
        """Per ``(key, owner)``, in order: (fence, new expiry) (a `Renewal`), or None when
        that owner no longer holds that key."""
        ...


@runtime_checkable
class SyncBoolBatchRenewal(Protocol):
    """Renews many leases at once, telling only which are still held."""

    def renew_leases(self, items: Sequence[tuple[str, str]], ttl_ms: int) -> list[bool]: ...


@runtime_checkable
class SyncAllOrNone(Protocol):
    """Takes several keys at once, all or none (what a hold of several keys needs)."""

    def acquire_leases(self, keys: Iterable[str], owner: str, ttl_ms: int) -> AcquireAllResult:
        """Every key for ``owner``, or none (naming the key that blocked)."""
        ...

    def get_lease(self, key: str) -> Lease | None:
        """The live lease of ``key`` (its expiry: when a blocked hold looks again)."""
        ...


@runtime_checkable
class SyncWantMarking(Protocol):
    """Marks a key as waited for; its release or transfer then notifies (when ``notifies``)."""

    @property
    def notifies(self) -> bool:
        """True when releases and transfers of wanted keys send a notification."""
        ...

    def mark_wanted(self, key: str, wait_ms: int) -> Holder | None:
        """Mark ``key`` wanted for ``wait_ms``; its live `Holder` (owner, fence, expiry)."""
        ...


@runtime_checkable
class SyncDatabaseClock(Protocol):
    """Reads the clock that judges expiry."""

    def now(self) -> datetime: ...


@runtime_checkable
class Timed(Protocol):
    """A provider whose calls are bounded by ``timeout`` seconds."""

    @property
    def timeout(self) -> float: ...
