"""A hold of several keys for threads, all or none: ``with provider.hold(["a", "b"], ...)``.

As the async hold of several keys (`sql_lease._holding.held_keys`): entering takes every key
or none through ``acquire_leases`` (``wait_ms`` waits for all: `_wait.wait_all`), then holds
each key as an adopted `HeldLease`, renewed together by the provider's renewal thread; the
loss of any one key is the loss of the hold (``lost`` is set, ``check()`` and leaving the
block raise `LeaseLost` naming that key). Leaving releases every key.
"""

from __future__ import annotations

import logging
import threading
from contextlib import ExitStack
from types import TracebackType
from typing import Self, Unpack, cast

from .._core.counting import check_hold_keys
from .._core.policy import HoldKeywords, keyword_terms
from .._core.validate import Millis
from .._holding.hooks import HOOK_NAMES, Hooks
from ..errors import LeaseDatabaseError, LeaseNotAcquired, LeaseTypeError
from ._capabilities import SyncAllOrNone, SyncLeaseProvider
from ._hold import HeldLease, LeaseHook
from ._runtime import Lifecycle

__all__ = ["HeldLeases"]

logger = logging.getLogger("sql_lease.hold")


class HeldLeases:
    """Several keys held together for the duration of a ``with`` block (single use).

    ``keys``: a list or tuple of distinct keys (a str is one key: `HeldLease`). Entering
    acquires all of them or raises `LeaseNotAcquired` naming the key that blocked (after
    waiting up to ``wait_ms`` for all of them); `LeaseAlreadyHeld` when another hold of the
    provider holds one of them for ``owner``. Inside, each key is an adopted `HeldLease`
    (``holds``) renewed by the provider's renewal thread; when one is lost, ``lost`` (an
    `Event`) is set and ``check()`` and the block's exit raise `LeaseLost`. Leaving releases
    every key. The options (``renew_every_ms``, the hooks) apply to each key's hold (a hook is
    called with that key's `HeldLease`).

    Attributes: ``keys`` (as given), ``owner``, ``ttl_ms``, ``renew_every_ms``; ``fences``
    (each key's fence), ``holds``, ``lost`` and ``lost_reason``.
    """

    def __init__(
        self,
        provider: SyncLeaseProvider,
        lifecycle: Lifecycle,
        keys: list[str] | tuple[str, ...],
        owner: str,
        ttl_ms: Millis,
        **options: Unpack[HoldKeywords],
    ) -> None:
        self.keys = check_hold_keys(keys, options.get("limit", 1))
        terms = keyword_terms(self.keys[0], owner, ttl_ms, options)  # unknown keywords too
        hooks = {name: options.get(name) for name in HOOK_NAMES}
        Hooks(self.keys[0], cast(dict[str, LeaseHook | None], hooks))  # callables? (raises)
        if not isinstance(provider, SyncAllOrNone):
            raise LeaseTypeError(
                f"a hold of several keys needs acquire_leases, which {provider!r} has not"
            )
        self.owner, self.ttl_ms = terms.owner, terms.ttl_ms
        self.renew_every_ms = terms.renew_every_ms
        self._terms = terms
        self._provider = provider
        self._life = lifecycle
        user_lost = options.get("on_lost")

        def on_lost(held: HeldLease) -> None:
            self.lost.set()
            if user_lost is not None:
                user_lost(held)

        self._options: HoldKeywords = {**options, "on_lost": on_lost, "wait_ms": 0}
        self._options.pop("limit", None)
        self._holds: dict[str, HeldLease] = {}
        self._stack = ExitStack()
        self._entered = False
        self.lost = threading.Event()

    @property
    def holds(self) -> dict[str, HeldLease]:
        """Each key's `HeldLease` (empty until entered)."""
        return dict(self._holds)

    @property
    def fences(self) -> dict[str, int | None]:
        """Each key's fence (empty until entered)."""
        return {key: held.fence for key, held in self._holds.items()}

    @property
    def held(self) -> bool:
        """True while every key is ours."""
        return bool(self._holds) and all(held.held for held in self._holds.values())

    @property
    def lost_reason(self) -> str | None:
        """Which key was lost first, and why; None while none was."""
        for key, held in self._holds.items():
            if held.lost_reason is not None:
                return f"{key!r}: {held.lost_reason}"
        return None

    def check(self) -> None:
        """Raise `LeaseLost` if a key was lost (call it between steps of long work)."""
        for held in self._holds.values():
            held.check()

    def __repr__(self) -> str:
        return f"HeldLeases(keys={self.keys!r}, owner={self.owner!r}, fences={self.fences})"

    def __enter__(self) -> Self:
        if self._entered:
            raise RuntimeError("a HeldLeases can be entered only once")
        self._entered = True
        waiting = self._claim_all()
        try:
            result, started = self._life.wait_all(self._provider, self.keys, self._terms)
        except BaseException as exc:
            if not isinstance(exc, Exception) or (
                isinstance(exc, LeaseDatabaseError) and exc.outcome_unknown
            ):
                self._release(waiting)  # they may have been acquired: undo (owner-checked)
            self._unclaim(waiting)
            raise
        if not result.acquired:
            self._unclaim(waiting)
            raise LeaseNotAcquired(
                result.blocked_key or self.keys[0], self.owner, result.blocked_by, None, None
            )
        try:
            for key in self.keys:
                held = HeldLease.adopt(
                    self._provider,
                    self._life,
                    result.leases[key],
                    key,
                    self.ttl_ms,
                    started=started,
                    claimed=True,
                    **self._options,
                )
                waiting.remove(key)  # its hold has the claim now, and releases the key
                self._stack.enter_context(held)
                self._holds[key] = held
        except BaseException:
            self._release(waiting)
            self._unclaim(waiting)
            self._stack.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Each key's hold leaves as a one-key hold does (a lost one raises `LeaseLost`).
        self._stack.__exit__(exc_type, exc, tb)

    def _claim_all(self) -> list[str]:
        claimed: list[str] = []
        try:
            for key in self.keys:
                self._life.claim(key, self.owner)
                claimed.append(key)
        except BaseException:
            self._unclaim(claimed)
            raise
        return claimed

    def _unclaim(self, keys: list[str]) -> None:
        for key in keys:
            self._life.unclaim(key, self.owner)

    def _release(self, keys: list[str]) -> None:
        """Release ``keys`` (owner-checked: a no-op where not ours); best effort."""
        for key in keys:
            try:
                self._provider.release_lease(key, self.owner)
            except Exception as exc:  # they expire on their own
                logger.warning("releasing lease %r of %r failed (%s)", key, self.owner, exc)
