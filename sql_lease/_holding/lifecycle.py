"""`hold`, `wait_for_lease` and the closed state, mixed into our provider classes.

The mixin owns what held leases and waiting keep per provider (its `LeaseRuntime`: renewer,
waiter hub, claims), made on first use; the provider's ``aclose`` calls `_close_lifecycle`.
"""

from __future__ import annotations

from typing import Unpack, cast, overload

from .._core.contract import AcquireResult, LeaseProvider
from .._core.validate import Millis
from .._sqlprovider.forks import closed_error
from .held import HeldLease, HoldArgs
from .held_keys import HeldLeases
from .runtime import RuntimeOwner
from .wait import wait_for_lease

__all__ = ["LeaseLifecycle"]


class LeaseLifecycle(RuntimeOwner):
    """`hold`, `wait_for_lease` and the closed state for a provider class (mixed into the
    InMemory and SQL ones, which set ``_closed`` and await `_close_lifecycle` in ``aclose``)."""

    _closed: bool

    @property
    def closed(self) -> bool:
        """True once ``aclose`` was called: every call then raises `LeaseClosedError`."""
        return self._closed

    @overload
    def hold(
        self, key: str, owner: str, ttl_ms: Millis, **options: Unpack[HoldArgs]
    ) -> HeldLease: ...

    @overload
    def hold(
        self,
        key: list[str] | tuple[str, ...],
        owner: str,
        ttl_ms: Millis,
        **options: Unpack[HoldArgs],
    ) -> HeldLeases: ...

    def hold(
        self,
        key: str | list[str] | tuple[str, ...],
        owner: str,
        ttl_ms: Millis,
        **options: Unpack[HoldArgs],
    ) -> HeldLease | HeldLeases:
        """Hold ``key`` for an ``async with`` block: renewed while inside, released on exit.

        See `HeldLease` for the keyword options (``renew_every_ms``, ``wait_ms``,
        ``cancel_on_loss``, ``limit``, the hooks ``on_acquired``, ``on_renewed``, ``on_lost``,
        ``on_released``): raises `LeaseNotAcquired` when the key stays taken (after waiting
        up to ``wait_ms``), `LeaseAlreadyHeld` when another hold of this provider holds
        ``key`` for ``owner``, and `LeaseLost` (after cancelling the body) when the lease is
        lost. Durations are ints of milliseconds or `timedelta` values. ``limit=N``: hold a
        slot of a counting lease (see `acquire_lease`). ``key`` a list or tuple of keys: hold
        all of them or none (`HeldLeases`).
        """
        if self._closed:
            raise closed_error(self, "hold")
        provider = cast(LeaseProvider, self)  # our provider classes implement the contract
        if isinstance(key, list | tuple):
            return HeldLeases(provider, key, owner, ttl_ms, **options)
        return HeldLease(provider, key, owner, ttl_ms, **options)

    async def wait_for_lease(
        self, key: str, owner: str, ttl_ms: Millis, *, timeout_ms: Millis, limit: int = 1
    ) -> AcquireResult:
        """Acquire ``key``, waiting up to ``timeout_ms`` (ms or `timedelta`) for it to be free.

        Returns the acquired result, or after the timeout the last one (naming the holder).
        On PostgreSQL a waiter sleeps until the holder's release or transfer is notified (or
        the holder's expiry), so it does not poll; in memory a release wakes it at once; on
        SQLite it re-checks every 50 ms and at the holder's expiry. See `sql_lease._holding.wait`.
        ``limit=N``: wait for a slot of a counting lease (a release of one wakes a waiter).
        """
        provider = cast(LeaseProvider, self)
        return await wait_for_lease(
            provider, key, owner, ttl_ms, timeout_ms=timeout_ms, limit=limit
        )
