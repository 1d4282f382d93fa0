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
from typing import Any, Self, Unpack

from .._core.counting import check_hold_keys
from .._core.policy import HoldKeywords, keyword_terms
from .._core.validate import Millis
from .._holding.keys_record import KeysRecord, check_hooks
from ..errors import LeaseDatabaseError, LeaseTypeError
from ._capabilities import SyncAllOrNone, SyncLeaseProvider
from ._hold import HeldLease
from ._runtime import Lifecycle

__all__ = ["HeldLeases"]

logger = logging.getLogger("sql_lease.hold")


class HeldLeases(KeysRecord[HeldLease]):
    """The keys of a ``with`` block (single use), all or none, as the async
    `sql_lease.HeldLeases` holds them for ``async with``: the same keys, options, errors and
    attributes, except that a thread is not cancelled on loss: ``lost`` (an `Event`) is set,
    and ``check()`` and the block's exit raise `LeaseLost` (unless the body raised).
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
        names = check_hold_keys(keys, options.get("limit", 1))
        terms = keyword_terms(names[0], owner, ttl_ms, options)  # unknown keywords too
        check_hooks(names[0], options)
        if not isinstance(provider, SyncAllOrNone):
            raise LeaseTypeError(
                f"a hold of several keys needs acquire_leases, which {provider!r} has not"
            )
        self._start_record(names, terms)
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
        self._stack = ExitStack()
        self.lost = threading.Event()

    def check(self) -> None:
        """Raise `LeaseLost` if a key was lost (call it between steps of long work)."""
        for held in self._holds.values():
            held.check()

    def __enter__(self) -> Self:
        self._enter_once()
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
            raise self._refused(result, waiting)
        try:
            for key in self.keys:
                held = HeldLease(
                    self._provider, self._life, key, self.owner, self.ttl_ms, **self._options
                ).adopting(result.leases[key], started, claimed=True)
                waiting.remove(key)  # its hold has the claim now, and releases the key
                self._stack.enter_context(held)
                self._holds[key] = held
        except BaseException:
            self._release(waiting)
            self._unclaim(waiting)
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        # Each key's hold leaves as a one-key hold does (a lost one raises `LeaseLost`).
        self._stack.__exit__(*exc_info)

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
