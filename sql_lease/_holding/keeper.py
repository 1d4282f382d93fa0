"""Keeping one held lease alive: its renewal ticket, its conservative deadline, its backoff.

A `Keeper` hands its `Ticket` (`sql_lease._core.policy`, where the rule is written once for
the async and sync holds) to the provider's `Renewer` and judges loss by one rule: the
lease is lost when a renewal finds it gone, when a renewal reports another fence than the one
granted (`fence_moved`: after a lossy failover the new primary can hold an older row of the
same owner), or once it has expired by the clock that granted it, measured conservatively
from the start of the last successful request (a watchdog timer fires at that deadline).
Failed renewals are retried with backoff until then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from .._core.policy import HoldTerms, Ticket, fence_moved, renew_interval
from ..capabilities import Renewal
from .renewer import Renewer, retry_later

__all__ = ["Keeper", "fence_moved", "renew_interval"]


class Keeper:
    """Renews one lease through ``renewer`` and tells its holder what happens.

    ``renewed(expires_at, late)`` after each successful renewal (``late``: how many seconds
    behind its schedule it started, when that is more than half the renewal interval, else
    None), ``failed(exc)`` after a failed attempt (retried), ``lost(reason)`` once the lease is
    gone, expired or its fence moved. Times are event-loop seconds. The rule is the
    ticket's (`sql_lease._core.policy`); the keeper adds the watchdog timer at the deadline.
    """

    def __init__(
        self,
        renewer: Callable[[], Renewer],
        terms: HoldTerms,
        *,
        renewed: Callable[[datetime | None, float | None], None],
        failed: Callable[[BaseException], None],
        lost: Callable[[str], None],
    ) -> None:
        self._renewer = renewer
        self._on_renewed, self._on_failed, self._on_lost = renewed, failed, lost
        self._ticket = Ticket(terms, renewed=self._renewed, failed=self._failed, gone=lost)
        self._watchdog: asyncio.TimerHandle | None = None

    def granted(self, started: float, fence: int | None) -> None:
        """The lease was granted with ``fence`` by a request that started at ``started``."""
        self._ticket.grant(started, fence)

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
        if not self._ticket.alive(asyncio.get_running_loop().time()):
            return False
        self.start()
        return True

    async def settle(self) -> None:
        """Wait until no renewal of this lease is in flight (after `stop`)."""
        await self._renewer().settle(self._ticket)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = loop.call_at(self._ticket.deadline, self._expired)

    def _expired(self) -> None:
        self._watchdog = None
        self._on_lost(self._ticket.expiry_reason())

    def _renewed(self, started: float, renewal: Renewal | None) -> None:
        late = self._ticket.kept(started)
        self._arm(asyncio.get_running_loop())
        self._on_renewed(None if renewal is None else renewal.expires_at, late)

    def _failed(self, exc: BaseException, now: float) -> None:
        retry_later(self._ticket, exc, now)
        self._on_failed(exc)
