"""Held leases for threads: ``with provider.hold(key, owner, ttl_ms) as lease: ...``.

Entering acquires (waiting up to ``wait_ms``) or raises `LeaseNotAcquired`; inside, the
provider's renewal thread (`_renewer`) keeps the lease alive; leaving releases it. A thread
cannot be cancelled, so loss is reported instead: ``lease.lost`` (a `threading.Event`) is set,
the ``on_lost`` callback runs (in the renewal thread), ``lease.check()`` raises `LeaseLost`,
and so does leaving the block when the body itself raised nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import monotonic
from typing import Self, Unpack, cast

from .._core.contract import AcquireResult
from .._core.policy import HoldKeywords, Ticket, keyword_terms
from .._core.validate import Millis
from .._holding.handoff import check_adoptable, check_transfer
from .._holding.hooks import HOOK_NAMES, Hooks
from .._holding.record import HoldRecord, HoldState
from .._holding.renewer import retry_later
from ..capabilities import Renewal
from ..errors import LeaseDatabaseError, LeaseNotAcquired, LeaseValueError
from ..observer import LeaseEventKind
from ._capabilities import SyncLeaseProvider
from ._runtime import Lifecycle
from ._wait import acquirer

__all__ = ["HeldLease", "LeaseHook"]

#: A lifecycle callback, called with the `HeldLease`.
LeaseHook = Callable[["HeldLease"], object]


class HeldLease(HoldRecord):
    """A lease held for the duration of a ``with`` block (single use).

    Renewed every ``renew_every_ms`` (default a third of the TTL, at most half of it) with
    every other held lease of the provider. Database errors while renewing are retried with
    backoff; the lease counts as lost when a renewal finds it gone or reports another fence
    than the one granted, or once it expired by the clock that granted it, measured
    conservatively from the start of the last successful request. Leaving releases the lease
    (best effort: a failure is logged, the lease then expires on its own), unless it was handed
    on with `transfer_to`. ``on_acquired``/``on_released`` run in the caller's thread,
    ``on_renewed``/``on_lost`` in the renewal thread (keep them short); a failing hook is
    logged and ignored.

    Attributes: ``key``, ``owner``, ``ttl_ms``, ``renew_every_ms``, ``fence``, ``expires_at``
    (database time of the last acquire or renewal), ``renewals``, ``renew_errors``,
    ``lost`` (an `Event`, set on loss: test it with ``lease.lost.is_set()``), ``lost_reason``
    and ``handed_to``.
    """

    def __init__(
        self,
        provider: SyncLeaseProvider,
        lifecycle: Lifecycle,
        key: str,
        owner: str,
        ttl_ms: Millis,
        **options: Unpack[HoldKeywords],
    ) -> None:
        terms = keyword_terms(key, owner, ttl_ms, options)  # checked once
        self._limit = options.get("limit", 1)  # a counting lease's (checked by acquire_lease)
        hooks = {name: options.get(name) for name in HOOK_NAMES}
        self._hooks: Hooks[HeldLease] = Hooks(key, cast(dict[str, LeaseHook | None], hooks))
        self._start_record(terms, provider)
        self._terms = terms
        self._provider = provider
        self._life = lifecycle
        self.lost = threading.Event()
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._ticket = Ticket(
            terms, renewed=self._renewed, failed=self._renew_failed, gone=self._lose
        )
        self._adopted: tuple[AcquireResult, float] | None = None
        self._claimed = False  # True: the caller claimed (key, owner) for this hold

    def adopting(self, result: AcquireResult, started: float, *, claimed: bool = False) -> Self:
        """This hold (not entered yet) made the hold of the lease that ``result`` (an acquire
        of this key for this owner with this TTL, started at `monotonic` time ``started``)
        granted: entering renews, leaving releases, as for any hold. ``claimed``: the caller
        claimed (key, owner) in the provider's lifecycle already (a hold of several keys);
        this hold takes the claim over. Returns this hold."""
        owner, since = check_adoptable(result, started)
        if owner != self.owner or self._state is not HoldState.CREATED:
            raise LeaseValueError(f"{result!r} is no lease of {self.owner!r} to adopt here")
        self._adopted = (result, since)
        self._claimed = claimed
        return self

    # -- public ---------------------------------------------------------------------------

    def check(self) -> None:
        """Raise `LeaseLost` if the lease was lost (call it between steps of long work)."""
        if self.lost.is_set():
            raise self._lost_error()

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until the lease is lost (True) or the hold ends otherwise or times out."""
        self._ended.wait(timeout)
        return self.lost.is_set()

    def transfer_to(self, to_owner: str, ttl_ms: Millis | None = None) -> None:
        """Hand the lease to ``to_owner`` for ``ttl_ms`` (default: this TTL), gap-free.

        Renewal stops and the block exits without releasing. Raises `LeaseLost` when the lease
        was no longer ours. On a database error the lease stays held and renewing and the error
        propagates; when the outcome was unknown the owner is read first, so a transfer that
        did happen counts as done.
        """
        ttl = check_transfer(self.owner, to_owner, ttl_ms, self.ttl_ms)
        with self._lock:
            if self._state is not HoldState.HELD:
                raise self._not_transferable()
            self._state = HoldState.TRANSFERRING
        self._life.renewer.discard(self._ticket)
        try:
            done = self._provider.transfer_lease(self.key, self.owner, to_owner, ttl)
        except LeaseDatabaseError as exc:
            if not self._transferred_anyway(exc, to_owner):
                if not self._resume():
                    raise self._lost_error() from exc
                raise
            done = True
        except BaseException:
            self._resume()
            raise
        if not done:
            self._mark_lost("it was no longer held when it was to be transferred")
            raise self._lost_error()
        self._handed(to_owner)
        self._ended.set()
        self._life.notify_local(self.key)

    # -- context manager ------------------------------------------------------------------

    def __enter__(self) -> Self:
        if self._state is not HoldState.CREATED:
            raise RuntimeError("a HeldLease can be entered only once")
        provider = self._provider
        if not self._claimed:
            self._life.claim(self.key, self.owner)
        try:
            started = monotonic()
            if self._adopted is not None:
                result, started = self._adopted
            elif self._wait_ms:
                result, started = self._life.wait_for(provider, self._terms, self._limit)
            else:
                result = acquirer(provider, self._terms, self._limit)()
        except BaseException as exc:
            self._state = HoldState.EXITED
            self._life.unclaim(self.key, self.owner)
            if not isinstance(exc, Exception) or (
                isinstance(exc, LeaseDatabaseError) and exc.outcome_unknown
            ):
                self._release(quiet=True)  # it may have been acquired: undo (owner-checked)
            raise
        if not result.acquired:
            self._state = HoldState.EXITED
            self._life.unclaim(self.key, self.owner)
            raise LeaseNotAcquired(
                self.key, self.owner, result.owner, result.fence, result.expires_at
            )
        self._granted(result, started)
        self._state = HoldState.HELD
        self._hooks.call_now("on_acquired", self)
        self._report(LeaseEventKind.ACQUIRED)  # before the renewal thread may report a loss
        self._life.renewer.add(self._ticket)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self._life.renewer.discard(self._ticket)
        with self._lock:
            state = self._state
            if state in (HoldState.HELD, HoldState.TRANSFERRING):
                self._state = HoldState.EXITED
        try:
            if self.handed_to is None and not self._life.closed:
                self._release(quiet=state is not HoldState.HELD)
        finally:
            self._life.unclaim(self.key, self.owner)
            self._ended.set()
        if self.lost.is_set() and exc_type is None:
            raise self._lost_error()

    # -- called by the renewer ------------------------------------------------------------

    def _renewed(self, started: float, renewal: Renewal | None) -> None:
        late = self._ticket.kept(started)
        self._count_renewal(None if renewal is None else renewal.expires_at, late)
        self._hooks.call_now("on_renewed", self)

    def _renew_failed(self, exc: BaseException, now: float) -> None:
        retry_later(self._ticket, exc, now)
        self._count_failure(exc)

    def _lose(self, reason: str) -> None:
        with self._lock:
            if self._state is not HoldState.HELD:
                return
        self._mark_lost(reason)

    # -- internals ------------------------------------------------------------------------

    def _granted(self, result: AcquireResult, started: float) -> None:
        self._acquired(result.fence, result.expires_at)
        self._ticket.grant(started, result.fence)

    def _mark_lost(self, reason: str) -> None:
        with self._lock:
            self._state = HoldState.LOST
            self.lost_reason = reason
        self._log_loss(reason)
        self.lost.set()
        self._ended.set()
        self._hooks.call_now("on_lost", self)

    def _resume(self) -> bool:
        """Back to held and renewing after a failed transfer; False if it expired meanwhile."""
        if not self._ticket.alive(monotonic()):
            self._mark_lost("it expired while it was being transferred")
            return False
        with self._lock:
            self._state = HoldState.HELD
        self._life.renewer.add(self._ticket)
        return True

    def _transferred_anyway(self, exc: LeaseDatabaseError, to_owner: str) -> bool:
        if not exc.outcome_unknown:
            return False
        try:
            holder = self._provider.get_lease_owner(self.key)
        except LeaseDatabaseError:
            return False
        return holder == to_owner

    def _release(self, quiet: bool) -> None:
        try:
            self._provider.release_lease(self.key, self.owner)
        except Exception as exc:
            self._release_failed(exc, quiet)
            return
        self._life.notify_local(self.key)
        if not quiet:
            self._released()
            self._hooks.call_now("on_released", self)
