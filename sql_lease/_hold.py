"""Held leases: acquire, renew in the background, release on exit (``provider.hold(...)``).

    async with provider.hold("thread:1", run_id, 15_000) as lease:
        ...  # runs while the lease is ours; lease.fence goes to downstream writes

Loss is never silent: when a renewal finds the lease gone (or it could not be renewed before
it expired by the clock that granted it), the body is cancelled and the block raises
`LeaseLost`, the way `asyncio.timeout` turns its cancellation into `TimeoutError`; an outer
cancellation that arrives meanwhile still propagates as `CancelledError`. Renewals are batched
per provider (`_renewer`); waiting for a busy key is `_wait`.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections.abc import Callable
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from . import _renewer, _wait
from ._contract import AcquireResult
from ._per_provider import PerProvider
from ._validate import Millis, check_millis, check_name, check_ttl
from .errors import (
    LeaseClosedError,
    LeaseDatabaseError,
    LeaseError,
    LeaseTypeError,
    LeaseValueError,
)
from .observer import LeaseEvent, LeaseEventKind, observer_of, report_lease_event

__all__ = [
    "HeldLease",
    "LeaseAlreadyHeld",
    "LeaseHook",
    "LeaseLifecycle",
    "LeaseLost",
    "LeaseNotAcquired",
]

logger = logging.getLogger("sql_lease.hold")

#: A lifecycle callback: called with the `HeldLease`; may be sync or return an awaitable.
LeaseHook = Callable[["HeldLease"], object]

_BACKOFF_FIRST = 0.05  # seconds before the first retry of a failed renewal (doubles)
_background: set[asyncio.Task[Any]] = set()  # releases and hooks that outlive their caller
#: Per provider, the (key, owner) pairs that a `HeldLease` of it is entering or holding.
_claims: PerProvider[set[tuple[str, str]]] = PerProvider(lambda _p, _weak: set())
_CLOSED = "its provider was closed"


class LeaseNotAcquired(LeaseError):
    """`hold` could not acquire ``key``: ``holder`` holds it (until ``expires_at``)."""

    def __init__(
        self,
        key: str,
        owner: str,
        holder: str | None,
        fence: int | None = None,
        expires_at: datetime | None = None,
    ) -> None:
        until = f" until {expires_at.isoformat()}" if expires_at is not None else ""
        super().__init__(f"lease {key!r} not acquired by {owner!r}: held by {holder!r}{until}")
        self.key, self.owner, self.holder = key, owner, holder
        self.fence, self.expires_at = fence, expires_at


class LeaseAlreadyHeld(LeaseNotAcquired):
    """`hold` refused: another hold of this provider already holds ``key`` for ``owner``.

    Two overlapping holds of one key by one owner would share one lease, and the first to
    leave would release it under the other. Give each run its own owner (e.g. hostname plus a
    run id). A `LeaseNotAcquired` (``holder`` is ``owner``), so ``except LeaseNotAcquired``
    skips the run as it would for another process's hold.
    """

    def __init__(self, key: str, owner: str) -> None:
        LeaseError.__init__(
            self,
            f"lease {key!r} is already held by {owner!r} through another hold() of this "
            "provider; overlapping holds need distinct owners",
        )
        self.key, self.owner, self.holder = key, owner, owner
        self.fence, self.expires_at = None, None


class LeaseLost(LeaseError):
    """A lease (or a guarded fence) is no longer held; ``reason`` says how it was found out."""

    def __init__(self, key: str, owner: str | None, fence: int | None, reason: str) -> None:
        who = f" of {owner!r}" if owner is not None else ""
        super().__init__(f"lease {key!r}{who} (fence {fence}) was lost: {reason}")
        self.key, self.owner, self.fence, self.reason = key, owner, fence, reason


class _State(enum.Enum):
    CREATED = "created"
    ACQUIRING = "acquiring"
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
    """A lease held for the duration of an ``async with`` block (single use).

    Entering acquires the key (waiting up to ``wait_ms`` for it, see `wait_for_lease`) or raises
    `LeaseNotAcquired`; `LeaseAlreadyHeld` when another hold of the same provider is entering
    or holding the same key for the same owner. While inside, the lease is renewed every
    ``renew_every_ms`` (default a third of the TTL, at most half of it) together with every
    other held lease of the provider.
    Leaving releases it, also when the body raises or is cancelled, unless it was handed on
    with `transfer_to`. If the lease is lost, the body is cancelled (``cancel_on_loss=False``
    leaves it running; watch `lost` or `wait_lost`) and the block raises `LeaseLost`.

    Database errors during renewal are retried with backoff; the lease only counts as lost
    once it has expired by the clock that granted it, measured conservatively from the start
    of the last successful request. The release on exit is best effort: a failure is logged
    (the lease then expires on its own) and does not raise. When the provider is closed while
    the lease is held, the lease counts as lost (the body is cancelled, the block raises
    `LeaseLost`) and is left to expire, not released.

    Durations (``ttl_ms``, ``renew_every_ms``, ``wait_ms``) are ints of milliseconds or
    `timedelta` values (rounded up to a whole millisecond); the attributes hold milliseconds.

    Attributes: ``key``, ``owner``, ``ttl_ms``, ``renew_every_ms``, ``fence`` and ``expires_at``
    (database time, as of the last acquire or renewal; ``expires_at`` may be None for providers
    that do not report it), ``renewals`` (successful renewals), ``renew_errors`` (failed
    attempts), ``lost_reason`` and ``handed_to``.
    """

    def __init__(
        self,
        provider: Any,
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
    ) -> None:
        check_name("key", key)
        check_name("owner", owner)
        ttl_ms = check_ttl(ttl_ms)
        renew_every_ms = (
            max(1, ttl_ms // 3)
            if renew_every_ms is None
            else check_millis("renew_every_ms", renew_every_ms)
        )
        if not 1 <= renew_every_ms <= ttl_ms / 2:
            raise LeaseValueError(
                f"renew_every_ms must be between 1 and half the TTL ({ttl_ms // 2} ms), so that "
                f"a renewal can fail and be retried before the lease expires; not {renew_every_ms}"
            )
        wait_ms = check_millis("wait_ms", wait_ms)
        if not isinstance(cancel_on_loss, bool):
            raise LeaseTypeError("cancel_on_loss must be a bool")
        self._provider = provider
        self.key, self.owner, self.ttl_ms = key, owner, ttl_ms
        self.renew_every_ms = renew_every_ms
        self._wait_ms = wait_ms
        self._cancel_on_loss = cancel_on_loss
        self._hooks = {
            "on_acquired": _check_hook("on_acquired", on_acquired),
            "on_renewed": _check_hook("on_renewed", on_renewed),
            "on_lost": _check_hook("on_lost", on_lost),
            "on_released": _check_hook("on_released", on_released),
        }
        self.fence: int | None = None
        self.expires_at: datetime | None = None
        self.renewals = 0
        self.renew_errors = 0
        self.lost_reason: str | None = None
        self.handed_to: str | None = None
        self._state = _State.CREATED
        self._ended = asyncio.Event()
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = 0
        self._cancel_requested = False
        # Renewal bookkeeping, in event-loop time (monotonic seconds); used by `_renewer`.
        self._interval = renew_every_ms / 1000
        self._due = 0.0  # next renewal
        self._deadline = 0.0  # conservative local expiry: start of last good request + TTL
        self._failures = 0  # consecutive failed renewals
        self._watchdog: asyncio.TimerHandle | None = None
        self._claims: set[tuple[str, str]] | None = None  # our entry in `_claims`, while in it
        self._observer = observer_of(provider)

    # -- public ---------------------------------------------------------------------------

    @property
    def held(self) -> bool:
        """True while the lease is ours: acquired, not lost, not handed on, block not left."""
        return self._state is _State.HELD

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
        check_name("to_owner", to_owner)
        ttl = self.ttl_ms if ttl_ms is None else check_ttl(ttl_ms)
        if to_owner == self.owner:
            raise LeaseValueError("to_owner must differ from the owner (renewal is automatic)")
        if self._state is not _State.HELD:
            if self.lost:
                raise self._lost_error()
            raise RuntimeError(f"transfer_to needs a held lease, this one is {self._state.value}")
        self._state = _State.TRANSFERRING
        self._stop_renewing()
        try:
            await _renewer.renewer_for(self._provider).settle(self)
            done = await self._provider.transfer_lease(self.key, self.owner, to_owner, ttl)
        except LeaseDatabaseError as exc:
            if not await self._transferred_anyway(exc, to_owner):
                if not self._resume():
                    raise self._lost_error() from exc
                raise
            done = True
        except BaseException:
            self._resume()  # cancelled: held (and renewed) until the exit releases it
            raise
        if not done:
            self._mark_lost("it was no longer held when it was to be transferred")
            raise self._lost_error()
        self.handed_to = to_owner
        self._state = _State.HANDED_OFF
        self._unclaim()  # the exit releases nothing: another hold of ours may take the key
        self._ended.set()
        self._notify_waiters()
        logger.info("lease %r handed from %r to %r", self.key, self.owner, to_owner)
        self._report(LeaseEventKind.TRANSFERRED, to_owner)

    # -- context manager ------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state is not _State.CREATED:
            raise RuntimeError("a HeldLease can be entered only once")
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("hold() must be used inside an asyncio task")
        loop = asyncio.get_running_loop()
        self._task = task
        claims = _claims.get(self._provider)
        if (self.key, self.owner) in claims:
            self._state = _State.EXITED
            raise LeaseAlreadyHeld(self.key, self.owner)
        claims.add((self.key, self.owner))
        self._claims = claims
        self._state = _State.ACQUIRING
        try:
            if self._wait_ms:
                result, started = await _wait.wait_for(
                    self._provider, self.key, self.owner, self.ttl_ms, self._wait_ms
                )
            else:
                started = loop.time()
                result = await self._provider.acquire_lease(self.key, self.owner, self.ttl_ms)
        except BaseException as exc:
            self._state = _State.EXITED
            if isinstance(exc, asyncio.CancelledError) or (
                isinstance(exc, LeaseDatabaseError) and exc.outcome_unknown
            ):
                self._release_in_background()  # it may have been acquired: undo (owner-checked)
            else:
                self._unclaim()
            raise
        if not result.acquired:
            self._state = _State.EXITED
            self._unclaim()
            raise LeaseNotAcquired(
                self.key, self.owner, result.owner, result.fence, result.expires_at
            )
        self._granted(result, started)
        try:
            await self._call_hook("on_acquired")
        except BaseException:
            self._state = _State.EXITED
            self._release_in_background()
            raise
        logger.debug("lease %r acquired by %r (fence %s)", self.key, self.owner, self.fence)
        self._cancelling = task.cancelling()
        self._state = _State.HELD
        self._arm_watchdog(loop)
        _renewer.renewer_for(self._provider).add(self)
        self._report(LeaseEventKind.ACQUIRED)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop_renewing()
        if self._state in (_State.HELD, _State.TRANSFERRING):
            self._state = _State.EXITED
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

    def __repr__(self) -> str:
        return (
            f"HeldLease(key={self.key!r}, owner={self.owner!r}, fence={self.fence}, "
            f"state={self._state.value})"
        )

    # -- called by the renewer ------------------------------------------------------------

    def _renewed(self, started: float, expires_at: datetime | None) -> None:
        self._deadline = max(self._deadline, started + self.ttl_ms / 1000)
        self._due = started + self._interval
        self._failures = 0
        self.renewals += 1
        if expires_at is not None:
            self.expires_at = expires_at
        self._arm_watchdog(asyncio.get_running_loop())
        self._report(LeaseEventKind.RENEWED)
        self._spawn_hook("on_renewed")

    def _renew_failed(self, exc: BaseException, now: float) -> None:
        self._failures += 1
        self.renew_errors += 1
        delay = min(self._interval, _BACKOFF_FIRST * 2 ** (self._failures - 1))
        self._due = now + delay
        log = logger.warning if self._failures == 1 else logger.debug
        log(
            "renewing lease %r of %r failed (%s); retrying in %.0f ms, %.0f ms before it expires",
            self.key,
            self.owner,
            exc,
            delay * 1000,
            max(0.0, self._deadline - now) * 1000,
        )
        self._report(LeaseEventKind.RENEW_FAILED, str(exc))

    def _lose(self, reason: str) -> None:
        if self._state is not _State.HELD:
            return
        self._stop_renewing()
        self._mark_lost(reason)
        if self._cancel_on_loss and self._task is not None:
            self._cancel_requested = True
            self._task.cancel(f"lease {self.key!r} lost")

    # -- internals ------------------------------------------------------------------------

    def _granted(self, result: AcquireResult, started: float) -> None:
        self.fence, self.expires_at = result.fence, result.expires_at
        self._deadline = started + self.ttl_ms / 1000
        self._due = started + self._interval

    def _mark_lost(self, reason: str) -> None:
        self._state = _State.LOST
        self.lost_reason = reason
        self._ended.set()
        logger.warning(
            "lease %r of %r (fence %s) lost: %s", self.key, self.owner, self.fence, reason
        )
        self._report(LeaseEventKind.LOST, reason)
        self._spawn_hook("on_lost")

    def _lost_error(self) -> LeaseLost:
        return LeaseLost(self.key, self.owner, self.fence, self.lost_reason or "lost")

    def _arm_watchdog(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = loop.call_at(self._deadline, self._expired)

    def _expired(self) -> None:
        self._watchdog = None
        reason = "it expired before it could be renewed"
        if self._failures:
            reason += f" ({self._failures} renewal attempts failed)"
        self._lose(reason)

    def _stop_renewing(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        _renewer.renewer_for(self._provider).discard(self)

    def _resume(self) -> bool:
        """Back to held and renewing after a failed transfer; False if it expired meanwhile."""
        loop = asyncio.get_running_loop()
        if loop.time() >= self._deadline:
            self._mark_lost("it expired while it was being transferred")
            return False
        self._state = _State.HELD
        self._arm_watchdog(loop)
        _renewer.renewer_for(self._provider).add(self)
        return True

    async def _transferred_anyway(self, exc: LeaseDatabaseError, to_owner: str) -> bool:
        if not exc.outcome_unknown:
            return False
        try:
            holder: str | None = await self._provider.get_lease_owner(self.key)
        except LeaseDatabaseError:
            return False
        return holder == to_owner

    async def _release(self) -> None:
        task = asyncio.get_running_loop().create_task(self._do_release())
        _background.add(task)
        task.add_done_callback(_background.discard)
        await asyncio.shield(task)  # an outer cancellation leaves the release running

    def _release_in_background(self) -> None:
        task = asyncio.get_running_loop().create_task(self._do_release(quiet=True))
        _background.add(task)
        task.add_done_callback(_background.discard)

    def _notify_waiters(self) -> None:
        """Wake a local waiter of the key, unless the provider's release already did."""
        if not _wait.notifies_itself(self._provider):
            _wait.notify_local(self._provider, self.key)

    def _unclaim(self) -> None:
        if self._claims is not None:
            self._claims.discard((self.key, self.owner))
            self._claims = None

    async def _do_release(self, quiet: bool = False) -> None:
        try:
            await _renewer.renewer_for(self._provider).settle(self)  # release after renewals
            await self._provider.release_lease(self.key, self.owner)
        except LeaseClosedError as exc:
            if not self.lost:  # when lost by the close, that was logged (and reported) already
                logger.warning("lease %r of %r expires on its own: %s", self.key, self.owner, exc)
                if not quiet:
                    self._report(LeaseEventKind.RELEASED, f"not released ({exc}); it expires")
            return
        except Exception as exc:
            logger.warning(
                "releasing lease %r of %r failed (%s); it expires on its own",
                self.key,
                self.owner,
                exc,
            )
            if not quiet and not self.lost:
                self._report(LeaseEventKind.RELEASED, f"release failed ({exc}); it expires")
            return
        finally:
            self._unclaim()  # only now: an earlier claim could be released by this release
        self._notify_waiters()
        if not quiet:
            logger.debug("lease %r released by %r", self.key, self.owner)
            if not self.lost:  # a lost lease was counted out by its LOST event
                self._report(LeaseEventKind.RELEASED)
            await self._call_hook("on_released")

    def _report(self, kind: LeaseEventKind, detail: str | None = None) -> None:
        if self._observer is not None:
            event = LeaseEvent(kind, self.key, self.owner, self.fence, detail)
            report_lease_event(self._observer, event)

    async def _call_hook(self, name: str) -> None:
        hook = self._hooks[name]
        if hook is None:
            return
        try:
            result = hook(self)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("%s hook of lease %r failed", name, self.key)

    def _spawn_hook(self, name: str) -> None:
        if self._hooks[name] is None:
            return
        task = asyncio.get_running_loop().create_task(self._call_hook(name))
        _background.add(task)
        task.add_done_callback(_background.discard)


class LeaseLifecycle:
    """`hold`, `wait_for_lease` and the closed state for a provider class (mixed into the
    InMemory and SQL ones, which set ``_closed`` and call `_end_holds` in ``aclose``)."""

    __slots__ = ()
    _closed: bool

    @property
    def closed(self) -> bool:
        """True once ``aclose`` was called: every call then raises `LeaseClosedError`."""
        return self._closed

    def _end_holds(self) -> None:
        """For ``aclose``: leases held through `hold` are lost, waiters wake (and then fail)."""
        _renewer.close_for(self, _CLOSED)
        _wait.wake_all(self)

    def hold(
        self,
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
    ) -> HeldLease:
        """Hold ``key`` for an ``async with`` block: renewed while inside, released on exit.

        See `HeldLease`: raises `LeaseNotAcquired` when the key stays taken (after waiting up
        to ``wait_ms``), `LeaseAlreadyHeld` when another hold of this provider holds ``key``
        for ``owner``, and `LeaseLost` (after cancelling the body) when the lease is lost.
        Durations are ints of milliseconds or `timedelta` values.
        """
        if self._closed:
            raise LeaseClosedError("hold")
        return HeldLease(
            self,
            key,
            owner,
            ttl_ms,
            renew_every_ms=renew_every_ms,
            wait_ms=wait_ms,
            cancel_on_loss=cancel_on_loss,
            on_acquired=on_acquired,
            on_renewed=on_renewed,
            on_lost=on_lost,
            on_released=on_released,
        )

    async def wait_for_lease(
        self, key: str, owner: str, ttl_ms: Millis, *, timeout_ms: Millis
    ) -> AcquireResult:
        """Acquire ``key``, waiting up to ``timeout_ms`` (ms or `timedelta`) for it to be free.

        Returns the acquired result, or after the timeout the last one (naming the holder).
        On PostgreSQL a waiter sleeps until the holder's release or transfer is notified (or
        the holder's expiry), so it does not poll; in memory and on SQLite it re-checks every
        50 ms and at the holder's expiry. See `sql_lease._wait`.
        """
        return await _wait.wait_for_lease(self, key, owner, ttl_ms, timeout_ms=timeout_ms)
