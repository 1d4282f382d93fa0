"""What `hold` and `wait_for_lease` keep per sync provider: renewer, waiters, claims.

`SyncLifecycle` is mixed into both sync providers; its `Lifecycle` object is the small seam
that `HeldLease` and the waiting code use (never the provider's private names).
"""

from __future__ import annotations

import threading
from typing import Any

from .._contract import AcquireResult
from .._validate import Millis
from ..errors import LeaseAlreadyHeld, LeaseClosedError
from ._hold import HeldLease, LeaseHook
from ._renewer import Renewer
from ._wait import Hub, wait_for

__all__ = ["Lifecycle", "SyncLifecycle"]


class Lifecycle:
    """The renewal thread, waiter hub and claimed (key, owner) pairs of one provider."""

    def __init__(self, provider: Any) -> None:
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
        hub = self.hub
        if hub.listener is None and not hub.self_notifying:
            hub.notify(key)

    def wait_for(
        self, provider: Any, key: str, owner: str, ttl_ms: Millis, timeout_ms: Millis
    ) -> tuple[AcquireResult, float]:
        return wait_for(provider, self.hub, key, owner, ttl_ms, timeout_ms)

    def close(self) -> None:
        """The provider closes: held leases count as lost (left to expire), listening ends."""
        self.closed = True
        for lease in self.renewer.stop():
            lease._lose("its provider was closed")
        if self.hub.listener is not None:
            self.hub.listener.close()


class SyncLifecycle:
    """`hold` and `wait_for_lease` for the sync providers."""

    _life: Lifecycle

    def __init__(self) -> None:
        self._life = Lifecycle(self)

    def _listen_on(self, channel: str, connect_kwargs: dict[str, Any]) -> None:
        # Imported here: the LISTEN thread needs psycopg (the `sync` extra), which a provider
        # on SQLite, or the CLI, does not.
        from ._listen import Listener

        self._life.hub.listener = Listener(channel, connect_kwargs, self._life.hub)

    def _self_notifying(self) -> None:
        self._life.hub.self_notifying = True

    def _end_lifecycle(self) -> None:
        self._life.close()

    @property
    def closed(self) -> bool:
        """True once ``close`` was called: every call then raises `LeaseClosedError`."""
        return self._life.closed

    @property
    def waiters(self) -> Hub:
        """The waiter registry (diagnostics: ``sleeping(key)``, its ``listener``)."""
        return self._life.hub

    @property
    def renewer(self) -> Renewer:
        """The renewal scheduler (diagnostics: ``ticks``, ``statements``, ``len()``)."""
        return self._life.renewer

    def hold(
        self,
        key: str,
        owner: str,
        ttl_ms: Millis,
        *,
        renew_every_ms: Millis | None = None,
        wait_ms: Millis = 0,
        on_acquired: LeaseHook | None = None,
        on_renewed: LeaseHook | None = None,
        on_lost: LeaseHook | None = None,
        on_released: LeaseHook | None = None,
    ) -> HeldLease:
        """Hold ``key`` for a ``with`` block: renewed while inside, released on exit.

        See `HeldLease`: raises `LeaseNotAcquired` when the key stays taken (after waiting up
        to ``wait_ms``); on loss sets ``lease.lost`` and raises `LeaseLost` on exit.
        """
        if self._life.closed:
            raise LeaseClosedError("hold")
        return HeldLease(
            self,
            self._life,
            key,
            owner,
            ttl_ms,
            renew_every_ms=renew_every_ms,
            wait_ms=wait_ms,
            on_acquired=on_acquired,
            on_renewed=on_renewed,
            on_lost=on_lost,
            on_released=on_released,
        )

    def wait_for_lease(
        self, key: str, owner: str, ttl_ms: Millis, *, timeout_ms: Millis
    ) -> AcquireResult:
        """Acquire ``key``, waiting up to ``timeout_ms`` for it to become free.

        Returns the acquired result, or after the timeout the last one (naming the holder).
        PostgreSQL waiters wake on NOTIFY (polling as the fallback at the holder's expiry);
        SQLite waiters re-check every 50 ms; in memory a release wakes a waiter at once.
        """
        if self._life.closed:
            raise LeaseClosedError("wait_for_lease")
        result, _ = self._life.wait_for(self, key, owner, ttl_ms, timeout_ms)
        return result
