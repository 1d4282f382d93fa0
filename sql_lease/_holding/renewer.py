"""One renewal loop per provider: all held leases are renewed together, in batches.

The loop sleeps until the earliest lease is due, then renews every lease that has used at
least half of its renewal interval, so leases taken at different moments fall into step and
share one statement per tick. A tick sends one statement per distinct TTL among the leases it
renews (run concurrently): `BatchRenewal.renew_many` when the provider has it, else its
``renew_leases``, else one ``renew_lease`` per lease. The loop exists only while something is
held. A renewer sees a lease only as a `Ticket` (`sql_lease._core.policy`: what to renew,
when, whom to tell, and the loss rule that judges each answer), so it knows nothing of
`HeldLease`; it refers to its provider through a callable, weakly for the
providers of others (see `sql_lease._holding.runtime`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from .._core.contract import LeaseProvider
from .._core.policy import CheckedCalls, Ticket, due_groups
from ..capabilities import BatchRenewal, Renewal
from ..errors import LeaseClosedError, LeaseDatabaseError

__all__ = ["BoolBatchRenewal", "Outcome", "Renewer", "Ticket", "renew_batch", "retry_later"]

logger = logging.getLogger("sql_lease.hold")

#: Per lease: (still held, its `Renewal` when the provider reports fence and expiry).
Outcome = tuple[bool, Renewal | None]


@runtime_checkable
class BoolBatchRenewal(Protocol):
    """Renews many leases at once, telling only which are still held (``renew_leases``)."""

    async def renew_leases(self, items: Sequence[tuple[str, str]], ttl_ms: int) -> list[bool]:
        """Renew each ``(key, owner)`` with ``ttl_ms``; per item, in order, whether it was held."""
        ...


async def renew_batch(
    provider: LeaseProvider, tickets: Sequence[Ticket], ttl: int
) -> list[Outcome]:
    """Renew ``tickets`` with ``ttl`` in as few statements as the provider allows (their
    values checked once, when held: `CheckedCalls` takes them as they are)."""
    if isinstance(provider, CheckedCalls) and "renew_many" not in vars(provider):
        # (an instance-level renew_many, a wrapper someone put there, is honoured)
        checked = await provider._renew_checked([(t.k, t.o) for t in tickets], ttl)
        return [(r is not None, r) for r in checked]
    pairs = [(t.key, t.owner) for t in tickets]
    if isinstance(provider, BatchRenewal):
        renewed = await provider.renew_many(pairs, ttl)
        return [(r is not None, r) for r in renewed]
    if isinstance(provider, BoolBatchRenewal):
        return [(ok, None) for ok in await provider.renew_leases(pairs, ttl)]
    oks = await asyncio.gather(*(provider.renew_lease(k, o, ttl) for k, o in pairs))
    return [(bool(ok), None) for ok in oks]


def retry_later(ticket: Ticket, exc: BaseException, now: float) -> None:
    """A renewal of ``ticket`` failed at ``now``: it is retried after the policy's backoff
    (logged at WARNING the first time in a row, then at DEBUG). Shared with the sync hold."""
    delay = ticket.backoff(now)
    log = logger.warning if ticket.failures == 1 else logger.debug
    log(
        "renewing lease %r of %r failed (%s); retrying in %.0f ms, %.0f ms before it expires",
        ticket.key,
        ticket.owner,
        exc,
        delay * 1000,
        max(0.0, ticket.deadline - now) * 1000,
    )


class Renewer:
    """Renews the tickets of one provider; ``ticks`` and ``statements`` count its work."""

    def __init__(self, provider: Callable[[], LeaseProvider | None]) -> None:
        self._provider = provider
        self._tickets: set[Ticket] = set()
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._sleep_until = float("inf")
        self._batch: asyncio.Future[Any] | None = None  # the renewal round in flight
        self._batch_tickets: set[Ticket] = set()
        #: Renewal rounds run, and renewal calls made (one per distinct TTL per round).
        self.ticks = 0
        self.statements = 0

    def __len__(self) -> int:
        return len(self._tickets)

    def add(self, ticket: Ticket) -> None:
        """Renew ``ticket`` from its ``due`` time on (starting the loop if needed)."""
        self._tickets.add(ticket)
        if (
            self._task is None
            or self._task.done()
            or self._task.get_loop() is not asyncio.get_running_loop()
        ):
            self._wake = asyncio.Event()
            self._sleep_until = float("inf")
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="sql_lease renewer"
            )
        elif ticket.due < self._sleep_until and self._wake is not None:
            self._wake.set()

    def discard(self, ticket: Ticket) -> None:
        """Stop renewing ``ticket`` (a renewal in flight may still finish: see `settle`)."""
        self._tickets.discard(ticket)

    def close(self, reason: str) -> None:
        """Every ticket is gone with ``reason`` (its provider closed); the loop ends now."""
        tickets, self._tickets = list(self._tickets), set()
        for ticket in tickets:
            ticket.gone(reason)
        if self._wake is not None:
            self._wake.set()

    async def settle(self, ticket: Ticket) -> None:
        """Wait until no renewal of ``ticket`` is in flight (call after `discard`)."""
        batch = self._batch
        if batch is not None and ticket in self._batch_tickets and not batch.done():
            await asyncio.wait([batch])  # not cancelled with the caller

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake
        assert wake is not None
        try:
            while self._tickets:
                now = loop.time()
                due = min(ticket.due for ticket in self._tickets)
                if due > now:
                    wake.clear()
                    self._sleep_until = due
                    try:
                        async with asyncio.timeout(due - now):
                            await wake.wait()
                    except TimeoutError:
                        pass
                    self._sleep_until = float("inf")
                    continue
                groups = due_groups(self._tickets, now)
                self.ticks += 1
                self._batch_tickets = {ticket for group in groups.values() for ticket in group}
                self._batch = asyncio.gather(
                    *(self._renew(ttl, group) for ttl, group in groups.items())
                )
                try:
                    await self._batch
                finally:
                    self._batch, self._batch_tickets = None, set()
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _renew(self, ttl: int, tickets: list[Ticket]) -> None:
        provider = self._provider()
        if provider is None:
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        self.statements += 1
        try:
            outcomes = await renew_batch(provider, tickets, ttl)
        except LeaseClosedError:
            for ticket in tickets:
                ticket.gone("its provider was closed")
            return
        except LeaseDatabaseError as exc:
            now = loop.time()
            for ticket in tickets:
                if ticket in self._tickets:
                    ticket.failed(exc, now)
            return
        except Exception as exc:
            logger.exception("renewing %d leases failed unexpectedly", len(tickets))
            for ticket in tickets:
                ticket.gone(f"renewal failed: {exc!r}")
            return
        for ticket, (held, renewal) in zip(tickets, outcomes, strict=True):
            if ticket not in self._tickets:
                continue  # released, transferred or lost meanwhile
            reason = ticket.judge(held, renewal)
            if reason is None:
                ticket.renewed(started, renewal)
            else:
                ticket.gone(reason)
