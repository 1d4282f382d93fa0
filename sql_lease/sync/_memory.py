"""`sql_lease.sync.InMemoryLeaseProvider`: the in-memory provider for threads.

It runs the async `sql_lease.InMemoryLeaseProvider`'s own methods, so the semantics, results
and errors are the same by construction: those coroutines never suspend (everything happens
under a `threading.Lock`), so each is driven to completion directly, without an event loop.
A release, transfer or force-release wakes a local waiter of the key at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Iterable
from datetime import datetime
from typing import Any, Self, TypeVar

from .._core.contract import AcquireResult, Lease
from .._core.counting import AcquireAllResult, Metadata
from .._core.validate import Millis
from .._memory import InMemoryLeaseProvider as _AsyncMemory
from ..capabilities import Renewal
from ..errors import LeaseClosedError
from ..observer import LeaseObserver
from ._lifecycle import SyncLifecycle

__all__ = ["InMemoryLeaseProvider"]

T = TypeVar("T")


def _drive(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its result."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("the in-memory provider suspended: it cannot run without a loop")


class InMemoryLeaseProvider(SyncLifecycle):
    """Leases in a dict, judged by a monotonic clock; thread-safe; one process only.

    ``clock`` returns seconds (default `time.monotonic`); tests can inject a fake one.
    ``observer`` (a `sql_lease.observer.LeaseObserver`) sees each operation and lease event,
    as on the async in-memory provider.
    """

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic, observer: LeaseObserver | None = None
    ) -> None:
        self._inner = _AsyncMemory(clock=clock, observer=observer)
        self._is_closed = False
        SyncLifecycle.__init__(self)
        self._self_notifying()

    @property
    def observer(self) -> LeaseObserver | None:
        """The observer given at construction, or None."""
        return self._inner.observer

    def _call(self, operation: str, coro: Coroutine[Any, Any, T]) -> T:
        if self._is_closed:
            coro.close()
            raise LeaseClosedError(operation)
        return _drive(coro)

    def acquire_lease(
        self, key: str, owner: str, ttl_ms: Millis, *, limit: int = 1, metadata: Metadata = None
    ) -> AcquireResult:
        """As the async provider's: ``limit=N`` a slot of a counting lease, ``metadata``
        stored with the lease."""
        acquire = self._inner.acquire_lease(key, owner, ttl_ms, limit=limit, metadata=metadata)
        return self._call("acquire_lease", acquire)

    def get_lease_holders(self, key: str) -> list[Lease]:
        """The live holders of ``key``, oldest grant first (a plain lease: its one holder)."""
        return self._call("get_lease_holders", self._inner.get_lease_holders(key))

    def acquire_leases(self, keys: Iterable[str], owner: str, ttl_ms: Millis) -> AcquireAllResult:
        """Take every key for ``owner`` as plain leases, or none (see the SQL provider's)."""
        return self._call("acquire_leases", self._inner.acquire_leases(keys, owner, ttl_ms))

    def release_leases(self, keys: Iterable[str], owner: str) -> int:
        """Release ``owner``'s live plain leases among ``keys``; how many were released."""
        names = list(keys) if not isinstance(keys, str) else keys
        released = self._call("release_leases", self._inner.release_leases(names, owner))
        if released:
            for key in set(names):  # a spurious wake-up only makes a waiter look again
                self._life.hub.notify(key)
        return released

    def get_lease_owner(self, key: str) -> str | None:
        return self._call("get_lease_owner", self._inner.get_lease_owner(key))

    def get_lease(self, key: str) -> Lease | None:
        """The live lease of ``key`` with its fence and times, or None."""
        return self._call("get_lease", self._inner.get_lease(key))

    def release_lease(self, key: str, owner: str) -> None:
        self._call("release_lease", self._inner.release_lease(key, owner))
        self._life.hub.notify(key)

    def renew_lease(self, key: str, owner: str, ttl_ms: Millis) -> bool:
        return self._call("renew_lease", self._inner.renew_lease(key, owner, ttl_ms))

    def transfer_lease(
        self, key: str, from_owner: str, to_owner: str, ttl_ms: Millis, *, metadata: Metadata = None
    ) -> bool:
        moved = self._call(
            "transfer_lease",
            self._inner.transfer_lease(key, from_owner, to_owner, ttl_ms, metadata=metadata),
        )
        if moved and to_owner != from_owner:
            self._life.hub.notify(key)
        return moved

    def renew_leases(self, items: Iterable[tuple[str, str]], ttl_ms: Millis) -> list[bool]:
        """Renew many ``(key, owner)`` leases at once; one bool per item, in order."""
        return self._call("renew_leases", self._inner.renew_leases(items, ttl_ms))

    def renew_many(self, items: Iterable[tuple[str, str]], ttl_ms: Millis) -> list[Renewal | None]:
        """`renew_leases` returning the `Renewal` per renewed item, None per lost one."""
        return self._call("renew_leases", self._inner.renew_many(items, ttl_ms))

    def force_release(self, key: str) -> bool:
        """End the live lease of ``key`` whoever holds it; logged at WARNING."""
        ended = self._call("force_release", self._inner.force_release(key))
        if ended:
            self._life.hub.notify(key)
        return ended

    def list_leases(
        self, prefix: str | None = None, *, limit: int = 100, after: str | None = None
    ) -> list[Lease]:
        """Live leases in key order (by UTF-8 bytes, as in SQL), optionally by key prefix."""
        return self._call("list_leases", self._inner.list_leases(prefix, limit=limit, after=after))

    def purge_expired(
        self, *, min_age_ms: Millis = 0, batch_size: int = 1_000, max_batches: int | None = None
    ) -> int:
        """Drop entries expired for at least ``min_age_ms``; returns how many were dropped."""
        return self._call(
            "purge_expired",
            self._inner.purge_expired(
                min_age_ms=min_age_ms,
                batch_size=batch_size,
                max_batches=max_batches,
            ),
        )

    def now(self) -> datetime:
        """This provider's clock as an aware datetime (the clock that judges expiry)."""
        return self._call("now", self._inner.now())

    def close(self) -> None:
        """End held leases' renewal and waiting; every later call raises `LeaseClosedError`."""
        if self._is_closed:
            return
        self._is_closed = True
        self._end_lifecycle()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"sql_lease.sync.InMemoryLeaseProvider(closed={self._is_closed})"
