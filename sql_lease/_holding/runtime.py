"""What held leases and waiting keep per provider: its renewer, its waiter hub, its claims.

Our providers own theirs (the `RuntimeOwner` part of the `LeaseLifecycle` mixin makes it on
first use and closes it in ``aclose``). A provider that someone else wrote gets one too, kept
in one registry keyed weakly by the provider (an unhashable or not weakly referenceable one is
kept for good), so `HeldLease` and `wait_for_lease` work with any `LeaseProvider`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import ClassVar, Protocol, cast, runtime_checkable

from .._core.contract import LeaseProvider
from ..capabilities import NotificationSource
from .hub import Hub
from .renewer import Renewer

__all__ = ["LeaseRuntime", "RuntimeOwner", "runtime_of"]

_READY_S = (
    5.0  # how long a waiter waits for a listener to connect, when the provider has no timeout
)


@runtime_checkable
class _Timed(Protocol):
    @property
    def timeout(self) -> float: ...


class LeaseRuntime:
    """The renewer, waiter hub and hold claims of one provider.

    Claims are the (key, owner) pairs that a `HeldLease` of the provider is entering or
    holding. ``renewer`` and ``hub`` are made on first use; the hub gets the provider's
    notification channel when it is a `NotificationSource`.
    """

    def __init__(self, provider: LeaseProvider, *, self_notifying: bool = False) -> None:
        self._provider: Callable[[], LeaseProvider | None]
        try:
            self._provider = weakref.ref(provider)
        except TypeError:  # not weakly referenceable: it is kept alive by its runtime
            self._provider = lambda: provider
        self._self_notifying = self_notifying
        self._claims: set[tuple[str, str]] = set()
        self._renewer: Renewer | None = None
        self._hub: Hub | None = None

    def claim(self, key: str, owner: str) -> bool:
        """Claim ``(key, owner)`` for a hold; False when another hold has it."""
        if (key, owner) in self._claims:
            return False
        self._claims.add((key, owner))
        return True

    def unclaim(self, key: str, owner: str) -> None:
        """Give up the claim of ``(key, owner)`` (the hold ended or handed its lease on)."""
        self._claims.discard((key, owner))

    @property
    def renewer(self) -> Renewer:
        """The renewal loop of the provider (made now if needed)."""
        if self._renewer is None:
            self._renewer = Renewer(self._provider)
        return self._renewer

    @property
    def hub(self) -> Hub:
        """The waiters of the provider (made now if needed, with its listener if any)."""
        if self._hub is None:
            provider = self._provider()
            within = provider.timeout if isinstance(provider, _Timed) else _READY_S
            hub = Hub(self_notifying=self._self_notifying, ready_within=within)
            if isinstance(provider, NotificationSource):
                hub.listener = provider.wakeup_source(hub)
            self._hub = hub
        return self._hub

    def freed(self, key: str) -> None:
        """This process released or handed on ``key``: wake a local waiter of it, unless the
        provider's notification channel (or the provider itself) does."""
        hub = self._hub
        if hub is not None and hub.polls:
            hub.notify(key)

    def wake(self, key: str) -> None:
        """Wake a waiter of ``key`` (for a provider that wakes its own waiters)."""
        if self._hub is not None:
            self._hub.notify(key)

    async def close(self, reason: str) -> None:
        """The provider closed: its held leases are lost with ``reason``, its waiters wake
        (their next call fails), and its listener stops."""
        if self._renewer is not None:
            self._renewer.close(reason)
        hub = self._hub
        if hub is not None:
            hub.closed = True
            hub.wake_all()
            if hub.listener is not None:
                await hub.listener.close()


class RuntimeOwner:
    """A provider that owns its `LeaseRuntime` (part of `LeaseLifecycle`).

    A subclass that wakes its own waiters on every release, transfer and force-release sets
    ``_wakes_own_waiters`` and calls `_wake_waiters`; its waiters then never poll.
    """

    _wakes_own_waiters: ClassVar[bool] = False
    _lease_runtime: LeaseRuntime | None = None

    def _runtime(self) -> LeaseRuntime:
        runtime = self._lease_runtime
        if runtime is None:
            provider = cast(LeaseProvider, self)  # the classes it is mixed into are providers
            runtime = LeaseRuntime(provider, self_notifying=self._wakes_own_waiters)
            self._lease_runtime = runtime
        return runtime

    def _wake_waiters(self, key: str) -> None:
        """``key`` was freed or handed on by this provider: wake one of its waiters."""
        runtime = self._lease_runtime
        if runtime is not None:
            runtime.wake(key)

    async def _close_lifecycle(self) -> None:
        """For ``aclose``: held leases are lost, waiters wake (and then fail), listening stops."""
        runtime = self._lease_runtime
        if runtime is not None:
            await runtime.close("its provider was closed")


_foreign: weakref.WeakKeyDictionary[LeaseProvider, LeaseRuntime] = weakref.WeakKeyDictionary()
_pinned: dict[int, tuple[LeaseProvider, LeaseRuntime]] = {}


def runtime_of(provider: LeaseProvider) -> LeaseRuntime:
    """The `LeaseRuntime` of ``provider`` (made now if it has none)."""
    if isinstance(provider, RuntimeOwner):
        return provider._runtime()
    try:
        runtime = _foreign.get(provider)
        if runtime is None:
            runtime = _foreign[provider] = LeaseRuntime(provider)
        return runtime
    except TypeError:  # unhashable or not weakly referenceable: kept for good
        pinned = _pinned.get(id(provider))
        if pinned is None:
            pinned = _pinned[id(provider)] = (provider, LeaseRuntime(provider))
        return pinned[1]
