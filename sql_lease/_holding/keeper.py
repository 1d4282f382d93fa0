"""Keeping one held lease alive: its renewal ticket, its conservative deadline, its backoff.

A `Keeper` hands its `Ticket` to the provider's `Renewer` and judges loss by one rule: the
lease is lost when a renewal finds it gone, when a renewal reports another fence than the one
granted (`fence_moved`: after a lossy failover the new primary can hold an older row of the
same owner), or once it has expired by the clock that granted it, measured conservatively
from the start of the last successful request (a watchdog timer fires at that deadline).
Failed renewals are retried with backoff until then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from .._core.validate import Millis, check_millis, check_name, check_ttl
from ..capabilities import Renewal
from ..errors import LeaseValueError
from .renewer import Renewer, Ticket

__all__ = ["Keeper", "check_hold", "fence_moved", "renew_interval"]

logger = logging.getLogger("sql_lease.hold")

_BACKOFF_FIRST = 0.05  # seconds before the first retry of a failed renewal (doubles)


def renew_interval(ttl_ms: int, renew_every_ms: Millis | None) -> int:
    """The renewal period for ``ttl_ms`` (default a third of it); `LeaseValueError` unless it
    is between 1 ms and half the TTL."""
    every = (
        max(1, ttl_ms // 3)
        if renew_every_ms is None
        else check_millis("renew_every_ms", renew_every_ms)
    )
    if not 1 <= every <= ttl_ms / 2:
        raise LeaseValueError(
            f"renew_every_ms must be between 1 and half the TTL ({ttl_ms // 2} ms), so that "
            f"a renewal can fail and be retried before the lease expires; not {every}"
        )
    return every


def check_hold(
    key: str, owner: str, ttl_ms: Millis, renew_every_ms: Millis | None, wait_ms: Millis
) -> tuple[int, int, int]:
    """A hold's arguments checked (the async and sync ones alike): the TTL, renewal period
    and wait in ms."""
    check_name("key", key)
    check_name("owner", owner)
    ttl = check_ttl(ttl_ms)
    return ttl, renew_interval(ttl, renew_every_ms), check_millis("wait_ms", wait_ms)


def fence_moved(held: int | None, renewal: Renewal | None) -> str | None:
    """Why a successful renewal still loses the lease held with fence ``held``: it reported
    another fence (this is no longer the lease that was granted); None when it did not, or
    when either fence is unknown (a provider whose renewal tells only whether it held)."""
    if held is None or renewal is None or renewal.fence == held:
        return None
    return (
        f"a renewal reported fence {renewal.fence}, not {held}: the store holds another lease "
        "of this owner (an older row, as after a failover that lost writes)"
    )


class Keeper:
    """Renews one lease through ``renewer`` and tells its holder what happens.

    ``renewed(expires_at, late)`` after each successful renewal (``late``: how many seconds
    behind its schedule it started, when that is more than half the renewal interval, else
    None), ``failed(exc)`` after a failed attempt (retried), ``lost(reason)`` once the lease is
    gone, expired or its fence moved. Times are event-loop seconds.
    """

    def __init__(
        self,
        renewer: Callable[[], Renewer],
        key: str,
        owner: str,
        ttl_ms: int,
        renew_every_ms: int,
        *,
        renewed: Callable[[datetime | None, float | None], None],
        failed: Callable[[BaseException], None],
        lost: Callable[[str], None],
    ) -> None:
        self._renewer = renewer
        self._ttl = ttl_ms / 1000
        self._on_renewed, self._on_failed, self._on_lost = renewed, failed, lost
        self._ticket = Ticket(
            key,
            owner,
            ttl_ms,
            renew_every_ms / 1000,
            renewed=self._renewed,
            failed=self._failed,
            gone=lost,
        )
        self._deadline = 0.0  # conservative local expiry: start of last good request + TTL
        self._failures = 0  # consecutive failed renewals
        self._fence: int | None = None
        self._watchdog: asyncio.TimerHandle | None = None

    def granted(self, started: float, fence: int | None) -> None:
        """The lease was granted with ``fence`` by a request that started at ``started``."""
        self._fence = fence
        self._deadline = started + self._ttl
        self._ticket.due = started + self._ticket.interval

    def start(self) -> None:
        """Renew from now on, and watch the deadline."""
        self._arm(asyncio.get_running_loop())
        self._renewer().add(self._ticket)

    def stop(self) -> None:
        """Stop renewing and watching (a renewal in flight may finish: see `settle`)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._renewer().discard(self._ticket)

    def resume(self) -> bool:
        """`start` again after a `stop`, unless the deadline passed meanwhile (False)."""
        if asyncio.get_running_loop().time() >= self._deadline:
            return False
        self.start()
        return True

    async def settle(self) -> None:
        """Wait until no renewal of this lease is in flight (after `stop`)."""
        await self._renewer().settle(self._ticket)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = loop.call_at(self._deadline, self._expired)

    def _expired(self) -> None:
        self._watchdog = None
        reason = "it expired before it could be renewed"
        if self._failures:
            reason += f" ({self._failures} renewal attempts failed)"
        self._on_lost(reason)

    def _renewed(self, started: float, renewal: Renewal | None) -> None:
        moved = fence_moved(self._fence, renewal)
        if moved is not None:
            self._on_lost(moved)
            return
        interval = self._ticket.interval
        # Its schedule: the start of the last good request (or the grant) plus the interval.
        behind = started - (self._deadline - self._ttl) - interval
        self._deadline = max(self._deadline, started + self._ttl)
        self._ticket.due = started + interval
        self._failures = 0
        self._arm(asyncio.get_running_loop())
        late = behind if behind > interval / 2 else None
        self._on_renewed(None if renewal is None else renewal.expires_at, late)

    def _failed(self, exc: BaseException, now: float) -> None:
        self._failures += 1
        delay = min(self._ticket.interval, _BACKOFF_FIRST * 2 ** (self._failures - 1))
        self._ticket.due = now + delay
        log = logger.warning if self._failures == 1 else logger.debug
        log(
            "renewing lease %r of %r failed (%s); retrying in %.0f ms, %.0f ms before it expires",
            self._ticket.key,
            self._ticket.owner,
            exc,
            delay * 1000,
            max(0.0, self._deadline - now) * 1000,
        )
        self._on_failed(exc)
