"""One run per thread across processes: what Mastra's signals runtime does with a `LeaseProvider`.

    coordinator = Coordinator(provider, work=run_agent, route=send_to_owner)
    await coordinator.signal("resource\\0thread-1", message)

On a signal for a thread key, the coordinator tries to acquire the key's lease for a fresh run
id. The winner runs ``work`` while it holds the lease as a `HeldLease` (adopted: renewed by the
provider's one renewer, judged lost by the rule of ``hold``); a loser hands the signal to
``route`` with the current owner, so the application can deliver it there. Signals that reach
the owner while its run is live are queued as follow-ups. When the run ends with follow-ups
queued, the lease passes to the next run with `HeldLease.transfer_to` (``transfer_lease``: no
instant where the key is free); with none queued it is released. A failed transfer falls back
to ``acquire_lease``, and a failed acquire to routing. Works with any provider; with
`NoopLeaseProvider` every process wins (single-process behaviour).

The coordinator never cancels work whose lease was lost: `Run.lost` tells, and `Run.fence`
lets a downstream store reject the stale run's writes.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar, runtime_checkable

from ._core.contract import AcquireResult, Lease, LeaseProvider
from ._core.validate import check_name, check_ttl
from ._holding.held import HeldLease
from ._holding.keeper import renew_interval
from .errors import LeaseLost

__all__ = ["Coordinator", "CoordinatorStats", "Outcome", "Run"]

logger = logging.getLogger("sql_lease.coordinator")

S = TypeVar("S")


class Outcome(enum.Enum):
    """What `Coordinator.signal` did with a signal."""

    STARTED = "started"  #: this call won the lease and started a run
    QUEUED = "queued"  #: a local run (or its start) is in progress: queued as a follow-up
    ROUTED = "routed"  #: another owner holds the thread: handed to ``route``


@dataclass(slots=True, eq=False)
class Run(Generic[S]):
    """One run of a thread: the signals it processes and the lease it holds."""

    key: str
    run_id: str
    signals: tuple[S, ...]
    fence: int | None  #: after a transfer, read with ``get_lease`` if the provider has it
    started_by: Literal["acquire", "transfer"]
    previous_run_id: str | None = None  #: the run that transferred the lease to this one
    _held: HeldLease | None = field(default=None, repr=False)

    @property
    def lost(self) -> bool:
        """True once the lease was found lost (a renewal found it gone, or it expired)."""
        return self._held is not None and self._held.lost

    async def wait_lost(self) -> None:
        """Return when the lease is lost (never, while it is held or once it was handed on
        or released)."""
        if self._held is not None and await self._held.wait_lost():
            return
        await asyncio.Event().wait()  # never lost: wait for cancellation


@dataclass(slots=True)
class CoordinatorStats:
    """Counters of one coordinator (all since construction)."""

    signals: int = 0  #: calls to `signal`
    runs: int = 0  #: runs started (by acquire or transfer)
    queued: int = 0  #: signals queued as follow-ups of a local run
    routed: int = 0  #: signals handed to ``route``
    conflicts: int = 0  #: acquires that found another live owner
    transfers: int = 0  #: follow-up runs that took the lease by transfer
    transfer_failures: int = 0  #: transfers that found the lease lost (fell back to acquire)
    releases: int = 0  #: leases released because no follow-up was queued
    renewals: int = 0  #: successful renewals (counted when a run ends)
    lost: int = 0  #: runs whose lease was found lost while they ran
    errors: int = 0  #: exceptions from ``work``, ``route`` or the provider, and failed renewals


Work = Callable[[Run[S]], Awaitable[None]]
Route = Callable[[str, str, S], Awaitable[None]]


@runtime_checkable
class _LeaseReader(Protocol):
    async def get_lease(self, key: str) -> Lease | None: ...


@dataclass(slots=True, eq=False)
class _Thread(Generic[S]):
    """Local state of a thread key while this coordinator starts or runs it."""

    pending: list[S]
    task: asyncio.Task[None] | None = None


class Coordinator(Generic[S]):
    """Runs ``work`` for a thread in at most one place at a time, routing the rest.

    ``route(key, owner, signal)`` delivers a signal to the process running ``owner`` (a run id
    this or another coordinator issued); it is the application's transport. ``run_ids`` makes
    fresh run ids (default: random hex); embedding a process name in them makes routing easy.
    ``ttl_ms`` is the lease TTL; live runs renew every third of it, with every other lease
    held through the provider (see `HeldLease`, whose loss rule applies; work is never
    cancelled on loss).
    """

    def __init__(
        self,
        provider: LeaseProvider,
        *,
        work: Work[S],
        route: Route[S],
        ttl_ms: int = 15_000,
        run_ids: Callable[[], str] | None = None,
    ) -> None:
        self._provider = provider
        self._work = work
        self._route = route
        self._ttl_ms = check_ttl(ttl_ms)
        renew_interval(self._ttl_ms, None)  # a TTL too short to renew is refused here
        self._run_ids = run_ids or (lambda: uuid.uuid4().hex)
        self._threads: dict[str, _Thread[S]] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self.stats = CoordinatorStats()

    @property
    def active(self) -> list[str]:
        """Thread keys this coordinator is starting or running now."""
        return list(self._threads)

    async def signal(self, key: str, signal: S) -> Outcome:
        """Deliver ``signal`` for thread ``key``: run it here, queue it, or route it."""
        check_name("key", key)
        self.stats.signals += 1
        thread = self._threads.get(key)
        if thread is not None:
            thread.pending.append(signal)
            self.stats.queued += 1
            return Outcome.QUEUED
        thread = _Thread(pending=[])
        self._threads[key] = thread
        self._idle.clear()
        run_id = self._run_ids()
        started = asyncio.get_running_loop().time()
        try:
            result = await self._provider.acquire_lease(key, run_id, self._ttl_ms)
        except BaseException:
            self._forget(key, thread)
            if thread.pending:
                logger.error(
                    "dropped %d follow-ups of %r: acquire failed", len(thread.pending), key
                )
            raise
        if not result.acquired:
            self.stats.conflicts += 1
            await self._route_away(key, thread, result.owner, [signal])
            return Outcome.ROUTED
        batch, thread.pending = [signal, *thread.pending], []
        run = self._run(key, tuple(batch), result, started, "acquire")
        self._start(key, thread, run)
        return Outcome.STARTED

    async def wait_idle(self) -> None:
        """Return when no run is in progress (follow-ups included)."""
        await self._idle.wait()

    async def aclose(self) -> None:
        """Cancel live runs and release their leases; queued follow-ups are dropped."""
        tasks = [t.task for t in self._threads.values() if t.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- internals ----------------------------------------------------------------------

    def _run(
        self,
        key: str,
        signals: tuple[S, ...],
        result: AcquireResult,
        started: float,
        how: Literal["acquire", "transfer"],
        previous: str | None = None,
    ) -> Run[S]:
        """A run of ``signals`` under the lease ``result`` granted (at loop time ``started``)."""
        held = HeldLease.adopt(
            self._provider,
            result,
            key,
            self._ttl_ms,
            started=started,
            cancel_on_loss=False,
            on_released=self._released,
        )
        assert result.owner is not None  # adopt checked it
        return Run(key, result.owner, signals, result.fence, how, previous, held)

    def _released(self, held: HeldLease) -> None:
        self.stats.releases += 1

    def _start(self, key: str, thread: _Thread[S], run: Run[S]) -> None:
        thread.task = asyncio.get_running_loop().create_task(
            self._drive(key, thread, run), name=f"sql_lease run {run.run_id}"
        )

    def _forget(self, key: str, thread: _Thread[S]) -> None:
        if self._threads.get(key) is thread:
            del self._threads[key]
        if not self._threads:
            self._idle.set()

    async def _drive(self, key: str, thread: _Thread[S], run: Run[S]) -> None:
        """Run, then hand over to follow-ups (transfer, else acquire, else route) or release."""
        current: Run[S] | None = run
        try:
            while current is not None:
                current = await self._run_once(key, thread, current)
        except Exception:
            self.stats.errors += 1
            logger.exception("thread %r: dropped %d queued signals", key, len(thread.pending))
        finally:
            self._forget(key, thread)

    async def _run_once(self, key: str, thread: _Thread[S], run: Run[S]) -> Run[S] | None:
        """Hold the lease while ``work`` runs; the follow-up run, or None when done.

        Leaving the hold releases the lease (also on cancellation) unless it was handed to
        the follow-up run.
        """
        held = run._held
        assert held is not None
        self.stats.runs += 1
        follow_up: Run[S] | None = None
        next_id: str | None = None
        try:
            async with held:
                if run.started_by == "transfer":
                    run.fence = await self._fence_of(key, run.run_id)
                try:
                    await self._work(run)
                except Exception:
                    self.stats.errors += 1
                    logger.exception("work for %r (run %s) failed", run.key, run.run_id)
                if thread.pending:
                    next_id = self._run_ids()
                    follow_up = await self._hand_over(key, thread, run, held, next_id)
        except LeaseLost:
            pass  # counted below; its follow-ups (if any) acquire afresh
        finally:
            self.stats.renewals += held.renewals
            self.stats.errors += held.renew_errors
            if held.lost:
                self.stats.lost += 1
                logger.warning("run %s lost the lease on %r", run.run_id, run.key)
        if follow_up is not None:
            return follow_up
        if not thread.pending:  # nothing arrived while releasing
            return None
        # Acquiring for the same next_id is safe even if a transfer that raised did happen:
        # re-acquiring one's own lease succeeds.
        return await self._acquire_for(key, thread, next_id)

    async def _hand_over(
        self, key: str, thread: _Thread[S], done: Run[S], held: HeldLease, next_id: str
    ) -> Run[S] | None:
        """Transfer the lease to ``next_id`` for the queued follow-ups; None when it failed
        (the follow-ups stay queued)."""
        batch, thread.pending = thread.pending, []
        started = asyncio.get_running_loop().time()
        try:
            await held.transfer_to(next_id, self._ttl_ms)
        except Exception as exc:
            thread.pending[:0] = batch
            self.stats.transfer_failures += 1
            if not isinstance(exc, LeaseLost):
                self.stats.errors += 1
                logger.exception("transfer of %r from run %s failed", key, done.run_id)
            return None
        self.stats.transfers += 1
        result = AcquireResult(True, next_id)  # its fence is read once the run holds it
        return self._run(key, tuple(batch), result, started, "transfer", done.run_id)

    async def _acquire_for(self, key: str, thread: _Thread[S], run_id: str | None) -> Run[S] | None:
        """Acquire afresh for the queued follow-ups; route them if another owner holds it."""
        run_id = run_id or self._run_ids()
        started = asyncio.get_running_loop().time()
        result = await self._provider.acquire_lease(key, run_id, self._ttl_ms)
        batch, thread.pending = thread.pending, []
        if result.acquired:
            return self._run(key, tuple(batch), result, started, "acquire")
        self.stats.conflicts += 1
        await self._route_away(key, thread, result.owner, batch)
        return None

    async def _route_away(
        self, key: str, thread: _Thread[S], owner: str | None, signals: list[S]
    ) -> None:
        """Route ``signals`` and whatever queues meanwhile to ``owner``; forget the thread."""
        if owner is None:  # the contract rules this out while a holder exists
            self._forget(key, thread)
            raise RuntimeError(f"acquire of {key!r} lost without naming the holder")
        while signals:
            await self._route_each(key, owner, signals)
            signals, thread.pending = thread.pending, []
        self._forget(key, thread)

    async def _route_each(self, key: str, owner: str, signals: list[S]) -> None:
        for item in signals:
            self.stats.routed += 1
            try:
                await self._route(key, owner, item)
            except Exception:
                self.stats.errors += 1
                logger.exception("routing a signal for %r to %s failed", key, owner)

    async def _fence_of(self, key: str, run_id: str) -> int | None:
        """The fence of ``run_id``'s lease, when the provider offers ``get_lease``."""
        if not isinstance(self._provider, _LeaseReader):
            return None
        try:
            lease = await self._provider.get_lease(key)
        except Exception:
            logger.warning("could not read the fence of %r", key, exc_info=True)
            return None
        if lease is None or lease.owner != run_id:
            return None
        return lease.fence
