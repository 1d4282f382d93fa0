"""Held leases for threads: ``with provider.hold(key, owner, ttl_ms) as lease: ...``.

Entering acquires (waiting up to ``wait_ms``) or raises `LeaseNotAcquired`; inside, the
provider's renewal thread (`_renewer`) keeps the lease alive; leaving releases it. A thread
cannot be cancelled, so loss is reported instead: ``lease.lost`` (a `threading.Event`) is set,
the ``on_lost`` callback runs (in the renewal thread), ``lease.check()`` raises `LeaseLost`,
and so does leaving the block when the body itself raised nothing.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from time import monotonic
from types import TracebackType
from typing import Self

from .._core.contract import AcquireResult
from .._core.validate import Millis
from .._holding.handoff import check_transfer
from .._holding.keeper import check_hold
from ..capabilities import Renewal
from ..errors import (
    LeaseDatabaseError,
    LeaseLost,
    LeaseNotAcquired,
    LeaseTypeError,
)
from ._capabilities import SyncLeaseProvider
from ._renewer import Ticket
from ._runtime import Lifecycle

__all__ = ["HeldLease", "LeaseHook"]

logger = logging.getLogger("sql_lease.hold")

#: A lifecycle callback, called with the `HeldLease`.
LeaseHook = Callable[["HeldLease"], object]

_BACKOFF_FIRST = 0.05  # seconds before the first retry of a failed renewal (doubles)


class _State(enum.Enum):
    CREATED = "created"
    HELD = "held"
    TRANSFERRING = "transferring"
    LOST = "lost"
    HANDED_OFF = "handed off"
    EXITED = "exited"


def _check_hook(name: str, hook: object) -> LeaseHook | None:
    if hook is not None and not callable(hook):
        raise LeaseTypeError(f"{name} must be callable, not {type(hook).__name__}")
    return hook


class HeldLease:
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
        *,
        renew_every_ms: Millis | None = None,
        wait_ms: Millis = 0,
        on_acquired: LeaseHook | None = None,
        on_renewed: LeaseHook | None = None,
        on_lost: LeaseHook | None = None,
        on_released: LeaseHook | None = None,
    ) -> None:
        ttl, every, self._wait_ms = check_hold(key, owner, ttl_ms, renew_every_ms, wait_ms)
        self._hooks = {
            "on_acquired": _check_hook("on_acquired", on_acquired),
            "on_renewed": _check_hook("on_renewed", on_renewed),
            "on_lost": _check_hook("on_lost", on_lost),
            "on_released": _check_hook("on_released", on_released),
        }
        self._provider = provider
        self._life = lifecycle
        self.key, self.owner, self.ttl_ms, self.renew_every_ms = key, owner, ttl, every
        self.fence: int | None = None
        self.expires_at: datetime | None = None
        self.renewals = 0
        self.renew_errors = 0
        self.lost = threading.Event()
        self.lost_reason: str | None = None
        self.handed_to: str | None = None
        self._state = _State.CREATED
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._ticket = Ticket(
            key,
            owner,
            ttl,
            every / 1000,
            renewed=self._renewed,
            failed=self._renew_failed,
            gone=self._lose,
            expired=self._expired,
        )
        self._failures = 0  # consecutive failed renewals

    # -- public ---------------------------------------------------------------------------

    @property
    def held(self) -> bool:
        """True while the lease is ours: acquired, not lost, not handed on, block not left."""
        return self._state is _State.HELD

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
            if self._state is not _State.HELD:
                if self.lost.is_set():
                    raise self._lost_error()
                raise RuntimeError(
                    f"transfer_to needs a held lease, this one is {self._state.value}"
                )
            self._state = _State.TRANSFERRING
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
        self.handed_to = to_owner
        self._state = _State.HANDED_OFF
        self._ended.set()
        self._life.notify_local(self.key)
        logger.info("lease %r handed from %r to %r", self.key, self.owner, to_owner)

    # -- context manager ------------------------------------------------------------------

    def __enter__(self) -> Self:
        if self._state is not _State.CREATED:
            raise RuntimeError("a HeldLease can be entered only once")
        provider = self._provider
        self._life.claim(self.key, self.owner)
        try:
            started = monotonic()
            if self._wait_ms:
                result, started = self._life.wait_for(
                    provider, self.key, self.owner, self.ttl_ms, self._wait_ms
                )
            else:
                result = provider.acquire_lease(self.key, self.owner, self.ttl_ms)
        except BaseException as exc:
            self._state = _State.EXITED
            self._life.unclaim(self.key, self.owner)
            if not isinstance(exc, Exception) or (
                isinstance(exc, LeaseDatabaseError) and exc.outcome_unknown
            ):
                self._release(quiet=True)  # it may have been acquired: undo (owner-checked)
            raise
        if not result.acquired:
            self._state = _State.EXITED
            self._life.unclaim(self.key, self.owner)
            raise LeaseNotAcquired(
                self.key, self.owner, result.owner, result.fence, result.expires_at
            )
        self._granted(result, started)
        self._state = _State.HELD
        self._call_hook("on_acquired")
        self._life.renewer.add(self._ticket)
        logger.debug("lease %r acquired by %r (fence %s)", self.key, self.owner, self.fence)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._life.renewer.discard(self._ticket)
        with self._lock:
            state = self._state
            if state in (_State.HELD, _State.TRANSFERRING):
                self._state = _State.EXITED
        try:
            if self.handed_to is None and not self._life.closed:
                self._release(quiet=state is not _State.HELD)
        finally:
            self._life.unclaim(self.key, self.owner)
            self._ended.set()
        if self.lost.is_set() and exc_type is None:
            raise self._lost_error()

    def __repr__(self) -> str:
        return (
            f"HeldLease(key={self.key!r}, owner={self.owner!r}, fence={self.fence}, "
            f"state={self._state.value})"
        )

    # -- called by the renewer ------------------------------------------------------------

    def _renewed(self, started: float, renewal: Renewal | None) -> None:
        ticket = self._ticket
        ticket.deadline = max(ticket.deadline, started + self.ttl_ms / 1000)
        ticket.due = started + ticket.interval
        self._failures = 0
        self.renewals += 1
        if renewal is not None:
            self.expires_at = renewal.expires_at
        self._call_hook("on_renewed")

    def _renew_failed(self, exc: BaseException, now: float) -> None:
        self._failures += 1
        self.renew_errors += 1
        delay = min(self._ticket.interval, _BACKOFF_FIRST * 2 ** (self._failures - 1))
        self._ticket.due = now + delay
        log = logger.warning if self._failures == 1 else logger.debug
        log(
            "renewing lease %r of %r failed (%s); retrying in %.0f ms, %.0f ms before it expires",
            self.key,
            self.owner,
            exc,
            delay * 1000,
            max(0.0, self._ticket.deadline - now) * 1000,
        )

    def _expired(self) -> None:
        reason = "it expired before it could be renewed"
        if self._failures:
            reason += f" ({self._failures} renewal attempts failed)"
        self._lose(reason)

    def _lose(self, reason: str) -> None:
        with self._lock:
            if self._state is not _State.HELD:
                return
        self._mark_lost(reason)

    # -- internals ------------------------------------------------------------------------

    def _granted(self, result: AcquireResult, started: float) -> None:
        self.fence, self.expires_at = result.fence, result.expires_at
        ticket = self._ticket
        ticket.fence = result.fence
        ticket.deadline = started + self.ttl_ms / 1000
        ticket.due = started + ticket.interval

    def _mark_lost(self, reason: str) -> None:
        with self._lock:
            self._state = _State.LOST
            self.lost_reason = reason
        logger.warning(
            "lease %r of %r (fence %s) lost: %s", self.key, self.owner, self.fence, reason
        )
        self.lost.set()
        self._ended.set()
        self._call_hook("on_lost")

    def _lost_error(self) -> LeaseLost:
        return LeaseLost(self.key, self.owner, self.fence, self.lost_reason or "lost")

    def _resume(self) -> bool:
        """Back to held and renewing after a failed transfer; False if it expired meanwhile."""
        if monotonic() >= self._ticket.deadline:
            self._mark_lost("it expired while it was being transferred")
            return False
        with self._lock:
            self._state = _State.HELD
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
            logger.warning(
                "releasing lease %r of %r failed (%s); it expires on its own",
                self.key,
                self.owner,
                exc,
            )
            return
        self._life.notify_local(self.key)
        if not quiet:
            logger.debug("lease %r released by %r", self.key, self.owner)
            self._call_hook("on_released")

    def _call_hook(self, name: str) -> None:
        hook = self._hooks[name]
        if hook is None:
            return
        try:
            hook(self)
        except Exception:
            logger.exception("%s hook of lease %r failed", name, self.key)
