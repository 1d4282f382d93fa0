"""`hold`, `wait_for_lease` and the closed state, mixed into both sync providers.

The mixin owns the provider's `Lifecycle` (`_runtime`: renewal thread, waiter hub, claims).
"""

from __future__ import annotations

from typing import Any, Unpack, cast, overload

from .._core.contract import AcquireResult
from .._core.policy import HoldKeywords, wait_terms
from .._core.validate import Millis
from .._sqlprovider.forks import closed_error
from ..backends import Backend
from ._capabilities import SyncLeaseProvider
from ._hold import HeldLease
from ._hold_keys import HeldLeases
from ._renewer import Renewer
from ._runtime import Lifecycle
from ._wait import Hub

__all__ = ["SyncLifecycle"]


class SyncLifecycle:
    """`hold` and `wait_for_lease` for the sync providers."""

    _life: Lifecycle

    def __init__(self) -> None:
        self._life = Lifecycle(self._as_provider())

    def _as_provider(self) -> SyncLeaseProvider:
        return cast(SyncLeaseProvider, self)  # the classes it is mixed into are providers

    def _listen_on(self, backend: Backend, channel: str, connect_kwargs: dict[str, Any]) -> None:
        # The backend imports its LISTEN thread's driver (psycopg: the `sync` extra) only now.
        self._life.hub.listener = backend.sync_listener(channel, connect_kwargs, self._life.hub)

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

    @overload
    def hold(
        self, key: str, owner: str, ttl_ms: Millis, **options: Unpack[HoldKeywords]
    ) -> HeldLease: ...

    @overload
    def hold(
        self,
        key: list[str] | tuple[str, ...],
        owner: str,
        ttl_ms: Millis,
        **options: Unpack[HoldKeywords],
    ) -> HeldLeases: ...

    def hold(
        self,
        key: str | list[str] | tuple[str, ...],
        owner: str,
        ttl_ms: Millis,
        **options: Unpack[HoldKeywords],
    ) -> HeldLease | HeldLeases:
        """Hold ``key`` for a ``with`` block: renewed while inside, released on exit.

        Options (keywords; see `HeldLease`): ``renew_every_ms`` (default a third of the TTL),
        ``wait_ms`` (default 0), ``limit`` (a slot of a counting lease), and the hooks
        ``on_acquired``, ``on_renewed``, ``on_lost``, ``on_released``. Raises
        `LeaseNotAcquired` when the key stays taken (after waiting up to ``wait_ms``); on
        loss sets ``lease.lost`` and raises `LeaseLost` on exit. ``key`` a list or tuple of
        keys: hold all of them or none (`HeldLeases`).
        """
        if self._life.closed:
            raise closed_error(self, "hold")
        if isinstance(key, list | tuple):
            return HeldLeases(self._as_provider(), self._life, key, owner, ttl_ms, **options)
        return HeldLease(self._as_provider(), self._life, key, owner, ttl_ms, **options)

    def wait_for_lease(
        self, key: str, owner: str, ttl_ms: Millis, *, timeout_ms: Millis, limit: int = 1
    ) -> AcquireResult:
        """Acquire ``key``, waiting up to ``timeout_ms`` for it to become free.

        Returns the acquired result, or after the timeout the last one (naming the holder).
        PostgreSQL waiters wake on NOTIFY (polling as the fallback at the holder's expiry);
        SQLite waiters re-check every 50 ms; in memory a release wakes a waiter at once.
        ``limit=N``: wait for a slot of a counting lease (a release of one wakes a waiter).
        """
        if self._life.closed:
            raise closed_error(self, "wait_for_lease")
        terms = wait_terms(key, owner, ttl_ms, timeout_ms)
        result, _ = self._life.wait_for(self._as_provider(), terms, limit)
        return result
