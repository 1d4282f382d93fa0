"""Held leases: acquire (or adopt), renew in the background, release on exit.

    async with provider.hold("thread:1", run_id, 15_000) as lease:
        ...  # runs while the lease is ours; lease.fence goes to downstream writes

Loss is never silent: when a renewal finds the lease gone (or it could not be renewed before
it expired by the clock that granted it), the body is cancelled and the block raises
`LeaseLost`, the way `asyncio.timeout` turns its cancellation into `TimeoutError`; an outer
cancellation that arrives meanwhile still propagates as `CancelledError`. Renewals are batched
per provider (`_renewer`, through the provider's `_runtime`); waiting for a busy key is `_wait`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from time import perf_counter
from types import TracebackType
from typing import Self, TypedDict, Unpack

from .._core.contract import AcquireResult, LeaseProvider
from .._core.policy import hold_terms
from .._core.validate import Millis
from ..errors import (
    LeaseAlreadyHeld,
    LeaseClosedError,
    LeaseDatabaseError,
    LeaseNotAcquired,
    LeaseTypeError,
)
from ..observer import LeaseEventKind
from .handoff import check_adoptable, check_transfer, transfer_settled
from .hooks import Hooks, in_background
from .keeper import Keeper
from .record import HoldRecord, HoldState
from .runtime import runtime_of
from .wait import acquirer, wait_checked

__all__ = ["HeldLease", "HoldArgs", "HoldOptions", "LeaseHook"]

#: The events that end a hold: they carry how long the lease was held.
_ENDS = frozenset({LeaseEventKind.RELEASED, LeaseEventKind.LOST, LeaseEventKind.TRANSFERRED})

logger = logging.getLogger("sql_lease.hold")

#: A lifecycle callback: called with the `HeldLease`; may be sync or return an awaitable.
LeaseHook = Callable[["HeldLease"], object]


class HoldOptions(TypedDict, total=False):
    """The keyword options of a hold besides ``wait_ms`` (see `HeldLease`)."""

    renew_every_ms: Millis | None
    cancel_on_loss: bool
    on_acquired: LeaseHook | None
    on_renewed: LeaseHook | None
    on_lost: LeaseHook | None
    on_released: LeaseHook | None


class HoldArgs(HoldOptions, total=False):
    """Every keyword option of ``provider.hold(...)``."""

    wait_ms: Millis
    limit: int


class HeldLease(HoldRecord):
    """A lease held for the duration of an ``async with`` block (single use).

    Entering acquires the key (waiting up to ``wait_ms`` for it, see `wait_for_lease`) or raises
    `LeaseNotAcquired`; `LeaseAlreadyHeld` when another hold of the same provider is entering
    or holding the same key for the same owner. A lease acquired already can be held with
    `adopt`. While inside, the lease is renewed every ``renew_every_ms`` (default a third of
    the TTL, at most half of it) together with every other held lease of the provider.
    Leaving releases it, also when the body raises or is cancelled, unless it was handed on
    with `transfer_to`. If the lease is lost, the body is cancelled (``cancel_on_loss=False``
    leaves it running; watch `lost` or `wait_lost`) and the block raises `LeaseLost`.

    Database errors during renewal are retried with backoff; the lease counts as lost when a
    renewal finds it gone or reports another fence than the one granted (after a lossy
    failover), or once it has expired by the clock that granted it, measured conservatively
    from the start of the last successful request. The release on exit is best effort: a
    failure is logged (the lease then expires on its own) and does not raise. When the
    provider is closed while the lease is held, the lease counts as lost (the body is
    cancelled, the block raises `LeaseLost`) and is left to expire, not released. Works with
    any `LeaseProvider`.

    Durations (``ttl_ms``, ``renew_every_ms``, ``wait_ms``) are ints of milliseconds or
    `timedelta` values (rounded up to a whole millisecond); the attributes hold milliseconds.

    Attributes: ``key``, ``owner``, ``ttl_ms``, ``renew_every_ms``, ``fence`` and ``expires_at``
    (database time, as of the last acquire or renewal; ``expires_at`` may be None for providers
    that do not report it), ``renewals`` (successful renewals), ``renew_errors`` (failed
    attempts), ``lost_reason`` and ``handed_to``.
    """

    def __init__(
        self,
        provider: LeaseProvider,
        key: str,
        owner: str,
        ttl_ms: Millis,
        *,
        renew_every_ms: Millis | None = None,
        wait_ms: Millis = 0,
        cancel_on_loss: bool = True,
        on_acquired: LeaseHook | None = None,
        on_renewed: LeaseHook | None = None,
        on_lost: LeaseHook | None = None,
        on_released: LeaseHook | None = None,
        limit: int = 1,
    ) -> None:
        terms = hold_terms(key, owner, ttl_ms, renew_every_ms, wait_ms)  # checked once
        self._limit = limit  # a slot of a counting lease (checked by `acquire_lease`)
        if not isinstance(cancel_on_loss, bool):
            raise LeaseTypeError("cancel_on_loss must be a bool")
        hooks = {"on_acquired": on_acquired, "on_renewed": on_renewed, "on_lost": on_lost}
        self._hooks: Hooks[HeldLease] = Hooks(key, {**hooks, "on_released": on_released})
        self._start_record(terms, provider)
        self._terms = terms
        self._provider = provider
        self._runtime = runtime_of(provider)
        self._cancel_on_loss = cancel_on_loss
        self._adopted: tuple[AcquireResult, float] | None = None
        self._ended = asyncio.Event()
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self._cancel_requested = False
        self._keeper = Keeper(
            lambda: self._runtime.renewer,
            terms,
            renewed=self._renewed,
            failed=self._count_failure,
            lost=self._lose,
        )
        self._claimed = False  # our (key, owner) is in the provider's claims

    @classmethod
    def adopt(
        cls,
        provider: LeaseProvider,
        result: AcquireResult,
        key: str,
        ttl_ms: Millis,
        *,
        started: float,
        claimed: bool = False,
        **options: Unpack[HoldOptions],
    ) -> HeldLease:
        """A hold of a lease that ``result`` (of an acquire or transfer of ``key`` for
        ``result.owner`` with ``ttl_ms``, started at event-loop time ``started``) granted.

        Entering it does not acquire: it renews (the lease counts as lost at ``started`` plus
        the TTL unless renewed by then) and leaving releases, as for any hold. ``claimed``:
        the caller claimed ``(key, owner)`` in the provider's runtime already (a hold of
        several keys claims them all before it acquires); this hold takes the claim over.
        """
        owner, since = check_adoptable(result, started)
        held = cls(provider, key, owner, ttl_ms, **options)
        held._adopted = (result, since)
        held._claimed = claimed
        return held

    # -- public ---------------------------------------------------------------------------

    @property
    def lost(self) -> bool:
        """True once the lease was found lost (see ``lost_reason``)."""
        return self.lost_reason is not None

    async def wait_lost(self) -> bool:
        """Wait until the lease is lost (True) or the hold ends otherwise (False)."""
        await self._ended.wait()
        return self.lost

    async def transfer_to(self, to_owner: str, ttl_ms: Millis | None = None) -> None:
        """Hand the lease to ``to_owner`` for ``ttl_ms`` (default: this TTL), gap-free.

        Uses ``transfer_lease``: the key is never free in between. Renewal stops and the block
        exits without releasing. Raises `LeaseLost` when the lease was no longer ours (the block
        then raises it too). On a database error the lease stays held and renewing, and the
        error propagates; when the outcome was unknown the current owner is checked first, so
        a transfer that did happen counts as done.
        """
        ttl = check_transfer(self.owner, to_owner, ttl_ms, self.ttl_ms)
        if self._state is not HoldState.HELD:
            raise self._not_transferable()
        self._state = HoldState.TRANSFERRING
        self._keeper.stop()
        try:
            await self._keeper.settle()
            done = await transfer_settled(self._provider, self.key, self.owner, to_owner, ttl)
        except LeaseDatabaseError as exc:
            if not self._resume():
                raise self._lost_error() from exc
            raise
        except BaseException:
            self._resume()  # cancelled: held (and renewed) until the exit releases it
            raise
        if not done:
            self._mark_lost("it was no longer held when it was to be transferred")
            raise self._lost_error()
        self._handed(to_owner)
        self._unclaim()  # the exit releases nothing: another hold of ours may take the key
        self._ended.set()
        self._runtime.freed(self.key)

    # -- context manager ------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state is not HoldState.CREATED:
            raise RuntimeError("a HeldLease can be entered only once")
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("hold() must be used inside an asyncio task")
        loop = asyncio.get_running_loop()
        self._task = task
        if not self._claimed and not self._runtime.claim(self.key, self.owner):
            self._state = HoldState.EXITED
            raise LeaseAlreadyHeld(self.key, self.owner)
        self._claimed = True
        self._state = HoldState.ACQUIRING
        result, started = self._adopted or await self._acquire(loop)
        if not result.acquired:
            self._state = HoldState.EXITED
            self._unclaim()
            raise LeaseNotAcquired(
                self.key, self.owner, result.owner, result.fence, result.expires_at
            )
        self._acquired(result.fence, result.expires_at)
        self._keeper.granted(started, result.fence)
        try:
            await self._hooks.call("on_acquired", self)
        except BaseException:
            self._state = HoldState.EXITED
            self._release_in_background()
            raise
        self._cancelling = task.cancelling()
        self._state = HoldState.HELD
        self._keeper.start()
        self._held_since = perf_counter()
        self._report(LeaseEventKind.ACQUIRED)
        return self

    async def _acquire(self, loop: asyncio.AbstractEventLoop) -> tuple[AcquireResult, float]:
        try:
            if self._wait_ms:
                return await wait_checked(self._provider, self._terms, self._limit)
            started = loop.time()
            return await acquirer(self._provider, self._terms, self._limit)(), started
        except BaseException as exc:
            self._state = HoldState.EXITED
            if isinstance(exc, asyncio.CancelledError) or (
                isinstance(exc, LeaseDatabaseError) and exc.outcome_unknown
            ):
                self._release_in_background()  # it may have been acquired: undo (owner-checked)
            else:
                self._unclaim()
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._keeper.stop()
        if self._state in (HoldState.HELD, HoldState.TRANSFERRING):
            self._state = HoldState.EXITED
        others = False
        if self._cancel_requested:
            assert self._task is not None
            others = self._task.uncancel() > self._cancelling
        try:
            if self.handed_to is None:
                await self._release()  # forgets the claim once done
        finally:
            self._ended.set()
        ours = exc_type is None or (
            issubclass(exc_type, asyncio.CancelledError) and self._cancel_requested and not others
        )
        if self.lost and ours:
            raise self._lost_error() from exc

    # -- told by the keeper ---------------------------------------------------------------

    def _renewed(self, expires_at: datetime | None, late: float | None) -> None:
        self._count_renewal(expires_at, late)
        self._hooks.spawn("on_renewed", self)

    def _lose(self, reason: str) -> None:
        if self._state is not HoldState.HELD:
            return
        self._keeper.stop()
        self._mark_lost(reason)
        if self._cancel_on_loss and self._task is not None:
            self._cancel_requested = True
            self._task.cancel(f"lease {self.key!r} lost")

    # -- internals ------------------------------------------------------------------------

    def _mark_lost(self, reason: str) -> None:
        self._state = HoldState.LOST
        self.lost_reason = reason
        self._ended.set()
        self._log_loss(reason)
        self._hooks.spawn("on_lost", self)

    def _resume(self) -> bool:
        """Back to held and renewing after a failed transfer; False if it expired meanwhile."""
        if not self._keeper.resume():
            self._mark_lost("it expired while it was being transferred")
            return False
        self._state = HoldState.HELD
        return True

    async def _release(self) -> None:
        await asyncio.shield(in_background(self._do_release()))  # a cancel leaves it running

    def _release_in_background(self) -> None:
        in_background(self._do_release(quiet=True))

    def _unclaim(self) -> None:
        if self._claimed:
            self._runtime.unclaim(self.key, self.owner)
            self._claimed = False

    async def _do_release(self, quiet: bool = False) -> None:
        try:
            await self._keeper.settle()  # release after renewals
            await self._provider.release_lease(self.key, self.owner)
        except LeaseClosedError as exc:
            if not self.lost:  # when lost by the close, that was logged (and reported) already
                logger.warning("lease %r of %r expires on its own: %s", self.key, self.owner, exc)
                if not quiet:
                    self._report(LeaseEventKind.RELEASED, f"not released ({exc}); it expires")
            return
        except Exception as exc:
            self._release_failed(exc, quiet)
            return
        finally:
            self._unclaim()  # only now: an earlier claim could be released by this release
        self._runtime.freed(self.key)
        if not quiet:
            self._released()
            await self._hooks.call("on_released", self)
