"""What a held lease shows and reports, shared by the async and the sync `HeldLease`.

Both hold classes drive the same states (`HoldState`) and keep the same public record (key,
owner, TTL, renewal period, fence, expiry, counters, loss reason, new owner); they log and
report the same `LeaseEvent`\\ s at the same moments, through the methods here. What differs
(asyncio tasks or threads, cancelling the body or setting an event) stays in each driver:
`sql_lease._holding.held` and `sql_lease.sync._hold`.
"""

from __future__ import annotations

import enum
import logging
from datetime import datetime
from time import perf_counter

from .._core.policy import HoldTerms
from ..errors import LeaseLost
from ..observer import LeaseEvent, LeaseEventKind, LeaseObserver, observer_of, report_lease_event

__all__ = ["HoldRecord", "HoldState"]

_ENDS = frozenset({LeaseEventKind.RELEASED, LeaseEventKind.LOST, LeaseEventKind.TRANSFERRED})

logger = logging.getLogger("sql_lease.hold")


class HoldState(enum.Enum):
    """Where a hold is in its life (the sync hold never shows ``ACQUIRING``)."""

    CREATED = "created"
    ACQUIRING = "acquiring"
    HELD = "held"
    TRANSFERRING = "transferring"
    LOST = "lost"
    HANDED_OFF = "handed off"
    EXITED = "exited"


class HoldRecord:
    """The record of one hold; a `HeldLease` class inherits it and calls `_start_record`."""

    key: str
    owner: str
    ttl_ms: int
    renew_every_ms: int
    fence: int | None
    expires_at: datetime | None
    renewals: int
    renew_errors: int
    lost_reason: str | None
    handed_to: str | None
    _state: HoldState
    _wait_ms: int
    _observer: LeaseObserver | None

    def _start_record(self, terms: HoldTerms, provider: object) -> None:
        self.key, self.owner, self.ttl_ms = terms.key, terms.owner, terms.ttl_ms
        self.renew_every_ms, self._wait_ms = terms.renew_every_ms, terms.wait_ms
        self.fence = None
        self.expires_at = None
        self.renewals = 0
        self.renew_errors = 0
        self.lost_reason = None
        self.handed_to = None
        self._state = HoldState.CREATED
        self._observer = observer_of(provider)
        self._held_since: float | None = None  # when ACQUIRED was reported (`perf_counter`)

    @property
    def held(self) -> bool:
        """True while the lease is ours: acquired, not lost, not handed on, block not left."""
        return self._state is HoldState.HELD

    def __repr__(self) -> str:
        return (
            f"HeldLease(key={self.key!r}, owner={self.owner!r}, fence={self.fence}, "
            f"state={self._state.value})"
        )

    def _acquired(self, fence: int | None, expires_at: datetime | None) -> None:
        self.fence, self.expires_at = fence, expires_at
        logger.debug("lease %r acquired by %r (fence %s)", self.key, self.owner, fence)

    def _count_renewal(self, expires_at: datetime | None, late: float | None = None) -> None:
        self.renewals += 1
        if expires_at is not None:
            self.expires_at = expires_at
        self._report(LeaseEventKind.RENEWED)
        if late is not None:  # started more than half an interval behind its schedule
            self._report(LeaseEventKind.RENEWED_LATE, seconds=late)

    def _count_failure(self, exc: BaseException) -> None:
        self.renew_errors += 1
        self._report(LeaseEventKind.RENEW_FAILED, str(exc))

    def _log_loss(self, reason: str) -> None:
        logger.warning(
            "lease %r of %r (fence %s) lost: %s", self.key, self.owner, self.fence, reason
        )
        self._report(LeaseEventKind.LOST, reason)

    def _lost_error(self) -> LeaseLost:
        return LeaseLost(self.key, self.owner, self.fence, self.lost_reason or "lost")

    def _not_transferable(self) -> Exception:
        """What `transfer_to` raises when the hold is not held: `LeaseLost` when it was lost."""
        if self.lost_reason is not None:
            return self._lost_error()
        return RuntimeError(f"transfer_to needs a held lease, this one is {self._state.value}")

    def _handed(self, to_owner: str) -> None:
        self.handed_to = to_owner
        self._state = HoldState.HANDED_OFF
        logger.info("lease %r handed from %r to %r", self.key, self.owner, to_owner)
        self._report(LeaseEventKind.TRANSFERRED, to_owner)

    def _release_failed(self, exc: BaseException, quiet: bool) -> None:
        logger.warning(
            "releasing lease %r of %r failed (%s); it expires on its own", self.key, self.owner, exc
        )
        if not quiet and self.lost_reason is None:
            self._report(LeaseEventKind.RELEASED, f"release failed ({exc}); it expires")

    def _released(self) -> None:
        logger.debug("lease %r released by %r", self.key, self.owner)
        if self.lost_reason is None:  # a lost lease was counted out by its LOST event
            self._report(LeaseEventKind.RELEASED)

    def _report(
        self, kind: LeaseEventKind, detail: str | None = None, seconds: float | None = None
    ) -> None:
        if self._observer is not None:
            if kind is LeaseEventKind.ACQUIRED:
                self._held_since = perf_counter()
            elif kind in _ENDS and self._held_since is not None:
                seconds = perf_counter() - self._held_since  # how long it was held
            event = LeaseEvent(kind, self.key, self.owner, self.fence, detail, seconds)
            report_lease_event(self._observer, event)
