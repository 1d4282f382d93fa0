"""One renewal thread per provider: every held lease renewed together, in batches.

Like the async renewer (`sql_lease._holding.renewer`): the thread sleeps until the earliest lease is
due, then renews every lease that has used at least half of its interval, one statement per
distinct TTL (`SyncBatchRenewal.renew_many` where the provider has it, else ``renew_leases``,
else one ``renew_lease`` per lease). It also notices a lease whose conservative local
deadline passed without a successful renewal. The thread exists only while something is
held. A renewer sees a lease only as a `Ticket` (`sql_lease._core.policy`, the async
renewer's: the loss rule judges each answer, the deadline is the ticket's); it knows nothing of
`HeldLease`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from time import monotonic

from .._core.policy import SyncCheckedCalls, Ticket, due_groups
from ..capabilities import Renewal
from ..errors import LeaseDatabaseError
from ._capabilities import SyncBatchRenewal, SyncBoolBatchRenewal, SyncLeaseProvider

__all__ = ["Renewer", "Ticket", "renew_batch"]

logger = logging.getLogger("sql_lease.hold")

#: Per lease: (still held, its `Renewal` when the provider reports fence and expiry).
Outcome = tuple[bool, Renewal | None]


def renew_batch(provider: SyncLeaseProvider, tickets: Sequence[Ticket], ttl: int) -> list[Outcome]:
    """Renew ``tickets`` with ``ttl`` in as few statements as the provider allows (their
    values checked once, when held: `SyncCheckedCalls` takes them as they are)."""
    if isinstance(provider, SyncCheckedCalls) and "renew_many" not in vars(provider):
        # (an instance-level renew_many, a wrapper someone put there, is honoured)
        checked = provider._renew_checked([(t.k, t.o) for t in tickets], ttl)
        return [(r is not None, r) for r in checked]
    pairs = [(t.key, t.owner) for t in tickets]
    if isinstance(provider, SyncBatchRenewal):
        renewed = provider.renew_many(pairs, ttl)
        return [(False, None) if r is None else (True, Renewal(*r)) for r in renewed]
    if isinstance(provider, SyncBoolBatchRenewal):
        oks = provider.renew_leases(pairs, ttl)
    else:
        oks = [provider.renew_lease(key, owner, ttl) for key, owner in pairs]
    return [(bool(ok), None) for ok in oks]


class Renewer:
    """Renews the tickets of one provider; ``ticks`` and ``statements`` count its work."""

    def __init__(self, provider: SyncLeaseProvider) -> None:
        self._provider = provider
        self._tickets: set[Ticket] = set()
        self._in_flight: set[Ticket] = set()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.ticks = 0
        self.statements = 0

    def __len__(self) -> int:
        return len(self._tickets)

    def add(self, ticket: Ticket) -> None:
        with self._cond:
            self._tickets.add(ticket)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sql_lease renewer", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def discard(self, ticket: Ticket) -> None:
        """Stop renewing ``ticket`` and wait until no renewal of it is in flight."""
        with self._cond:
            self._tickets.discard(ticket)
            while ticket in self._in_flight:
                self._cond.wait()

    def stop(self) -> list[Ticket]:
        """Stop for good (the provider closed); returns the tickets that were renewed."""
        with self._cond:
            self._stopped = True
            tickets, self._tickets = list(self._tickets), set()
            while self._in_flight:
                self._cond.wait()
            self._cond.notify_all()
        return tickets

    def _run(self) -> None:
        cond = self._cond
        while True:
            expired: list[Ticket] = []
            groups: dict[int, list[Ticket]] = {}
            with cond:
                if not self._tickets or self._stopped:
                    self._thread = None
                    return
                now = monotonic()
                expired = [t for t in self._tickets if not t.alive(now)]
                self._tickets.difference_update(expired)
                if not expired:
                    due = min(t.due for t in self._tickets)
                    if due > now:
                        limit = min(t.deadline for t in self._tickets)
                        cond.wait(min(due, limit) - now)
                        continue
                    groups = due_groups(self._tickets, now)
                    self._in_flight = {t for group in groups.values() for t in group}
                    self.ticks += 1
            for ticket in expired:
                ticket.gone(ticket.expiry_reason())
            if not groups:
                continue
            try:
                for ttl, group in groups.items():
                    self._renew(ttl, group)
            finally:
                with cond:
                    self._in_flight = set()
                    cond.notify_all()

    def _renew(self, ttl: int, tickets: list[Ticket]) -> None:
        started = monotonic()
        self.statements += 1
        try:
            outcomes = renew_batch(self._provider, tickets, ttl)
        except LeaseDatabaseError as exc:
            now = monotonic()
            for ticket in tickets:
                ticket.failed(exc, now)
            return
        except Exception as exc:
            logger.exception("renewing %d leases failed unexpectedly", len(tickets))
            lost = [(ticket, f"renewal failed: {exc!r}") for ticket in tickets]
        else:
            lost = []
            for ticket, (held, renewal) in zip(tickets, outcomes, strict=True):
                reason = ticket.judge(held, renewal)
                if reason is None:
                    ticket.renewed(started, renewal)
                else:
                    lost.append((ticket, reason))
        with self._cond:
            for ticket, _ in lost:
                self._tickets.discard(ticket)
        for ticket, reason in lost:
            ticket.gone(reason)
