"""What `hold` and `wait_for_lease` keep per sync provider: renewer, waiters, claims.

`Lifecycle` is the small seam that `HeldLease` and the waiting code use (never the provider's
private names); the `SyncLifecycle` mixin of both sync providers owns one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .._core.contract import AcquireResult
from .._core.counting import AcquireAllResult
from .._core.policy import HoldTerms
from ..errors import LeaseAlreadyHeld, LeaseClosedError
from ._capabilities import SyncAllOrNone, SyncLeaseProvider
from ._renewer import Renewer
from ._wait import Hub, wait_all, wait_for

__all__ = ["Lifecycle"]


class Lifecycle:
    """The renewal thread, waiter hub and claimed (key, owner) pairs of one provider."""

    def __init__(self, provider: SyncLeaseProvider) -> None:
        self.renewer = Renewer(provider)
        self.hub = Hub()
        self.closed = False
        self._claims: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def claim(self, key: str, owner: str) -> None:
        """Refuse a second hold of ``key`` by ``owner`` in this provider (`LeaseAlreadyHeld`)."""
        with self._lock:
            if self.closed:
                raise LeaseClosedError("hold")
            if (key, owner) in self._claims:
                raise LeaseAlreadyHeld(key, owner)
            self._claims.add((key, owner))

    def unclaim(self, key: str, owner: str) -> None:
        with self._lock:
            self._claims.discard((key, owner))

    def notify_local(self, key: str) -> None:
        """Wake a local waiter of ``key`` (when no NOTIFY or the provider itself does it)."""
        if self.hub.polls:
            self.hub.notify(key)

    def wait_for(
        self,
        provider: SyncLeaseProvider,
        terms: HoldTerms,
        limit: int = 1,
        acquire: Callable[[], AcquireResult] | None = None,
    ) -> tuple[AcquireResult, float]:
        """`_wait.wait_for` on this provider's waiter hub (checked ``terms``)."""
        return wait_for(provider, self.hub, terms, limit, acquire)

    def wait_all(
        self, provider: SyncAllOrNone, keys: tuple[str, ...], terms: HoldTerms
    ) -> tuple[AcquireAllResult, float]:
        """`_wait.wait_all` on this provider's waiter hub (checked ``keys`` and ``terms``)."""
        return wait_all(provider, self.hub, keys, terms)

    def close(self) -> None:
        """The provider closes: held leases count as lost (left to expire), listening ends."""
        self.closed = True
        for ticket in self.renewer.stop():
            ticket.gone("its provider was closed")
        if self.hub.listener is not None:
            self.hub.listener.close()
