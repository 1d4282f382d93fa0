"""A hold of several keys, all or none: ``async with provider.hold(["a", "b"], owner, ttl)``.

Entering takes every key or none through ``acquire_leases`` (one statement, rows locked in
sorted order; ``wait_ms`` waits for all of them: `sql_lease._holding.wait.wait_all`), then
holds each key as an adopted `HeldLease`: the renewal loop renews them together (one
statement per tick for keys of one TTL), and the loss of any one key is the loss of the hold
(its `HeldLease` cancels the body, and the block raises `LeaseLost` naming that key). Leaving
releases every key. The policy is the one-key hold's: nothing here renews or judges a lease.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Self, Unpack

from .._core.contract import LeaseProvider
from .._core.policy import keys_terms
from .._core.validate import Millis
from ..capabilities import AllOrNone
from ..errors import LeaseAlreadyHeld, LeaseDatabaseError, LeaseTypeError
from .held import HeldLease, HoldOptions
from .hooks import in_background
from .keys_record import KeysRecord, check_hooks
from .runtime import runtime_of
from .wait import wait_all

__all__ = ["HeldLeases"]

logger = logging.getLogger("sql_lease.hold")


class HeldLeases(KeysRecord[HeldLease]):
    """Several keys held together for the duration of an ``async with`` block (single use).

    ``keys``: a list or tuple of distinct keys (a str is one key: `HeldLease`). Entering
    acquires all of them or raises `LeaseNotAcquired` naming the key that blocked (after
    waiting up to ``wait_ms`` for all of them); `LeaseAlreadyHeld` when another hold of the
    provider holds one of them for ``owner``. Inside, each key is an adopted `HeldLease`
    (``holds``), renewed together with the provider's other held leases; when one is lost,
    the body is cancelled and the block raises `LeaseLost`. Leaving releases every key. The
    options (``renew_every_ms``, ``cancel_on_loss``, the hooks) are those of `HeldLease` and
    apply to each key's hold (a hook is called with that key's `HeldLease`).

    Attributes: ``keys`` (as given), ``owner``, ``ttl_ms``, ``renew_every_ms``; ``fences``
    (each key's fence), ``holds`` (each key's `HeldLease`), ``held``, ``lost`` and
    ``lost_reason``.
    """

    def __init__(
        self,
        provider: LeaseProvider,
        keys: list[str] | tuple[str, ...],
        owner: str,
        ttl_ms: Millis,
        *,
        wait_ms: Millis = 0,
        limit: int = 1,
        **options: Unpack[HoldOptions],
    ) -> None:
        every = options.get("renew_every_ms")
        names, terms = keys_terms(keys, owner, ttl_ms, every, wait_ms, limit)  # limit: 1 only
        if not isinstance(options.get("cancel_on_loss", True), bool):
            raise LeaseTypeError("cancel_on_loss must be a bool")
        check_hooks(names[0], options)
        if not isinstance(provider, AllOrNone):
            raise LeaseTypeError(
                f"a hold of several keys needs acquire_leases, which {provider!r} has not"
            )
        self._start_record(names, terms)
        self._wait_ms = terms.wait_ms
        self._provider = provider
        self._options = options
        self._runtime = runtime_of(provider)
        self._stack = AsyncExitStack()

    @property
    def lost(self) -> bool:
        """True once any key was found lost."""
        return any(held.lost for held in self._holds.values())

    async def wait_lost(self) -> bool:
        """Wait until a key is lost (True) or the hold ends otherwise (False)."""
        waits = [asyncio.ensure_future(held.wait_lost()) for held in self._holds.values()]
        if waits:
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
        return self.lost

    async def __aenter__(self) -> Self:
        self._enter_once()
        waiting = self._claim_all()
        try:
            result, started = await wait_all(
                self._provider, self.keys, self.owner, self.ttl_ms, self._wait_ms
            )
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) or (
                isinstance(exc, LeaseDatabaseError) and exc.outcome_unknown
            ):
                self._release_in_background(waiting)  # they may have been acquired: undo
            else:
                self._unclaim(waiting)
            raise
        if not result.acquired:
            raise self._refused(result, waiting)
        try:
            for key in self.keys:
                held = HeldLease.adopt(
                    self._provider,
                    result.leases[key],
                    key,
                    self.ttl_ms,
                    started=started,
                    claimed=True,
                    **self._options,
                )
                waiting.remove(key)  # its hold has the claim now, and releases the key
                await self._stack.enter_async_context(held)
                self._holds[key] = held
        except BaseException:
            self._release_in_background(waiting)
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Each key's hold leaves as a one-key hold does (the lost one raises `LeaseLost`).
        await self._stack.__aexit__(exc_type, exc, tb)

    def _claim_all(self) -> list[str]:
        claimed: list[str] = []
        for key in self.keys:
            if not self._runtime.claim(key, self.owner):
                self._unclaim(claimed)
                raise LeaseAlreadyHeld(key, self.owner)
            claimed.append(key)
        return claimed

    def _unclaim(self, keys: list[str]) -> None:
        for key in keys:
            self._runtime.unclaim(key, self.owner)

    def _release_in_background(self, keys: list[str]) -> None:
        """Release ``keys`` (owner-checked: a no-op where not ours), then forget the claims."""
        if keys:
            in_background(self._release(list(keys)))

    async def _release(self, keys: list[str]) -> None:
        try:
            for key in keys:
                await self._provider.release_lease(key, self.owner)
        except Exception as exc:  # best effort: they expire on their own
            logger.warning("releasing leases %r of %r failed (%s)", keys, self.owner, exc)
        finally:
            self._unclaim(keys)
