"""One renewal loop per provider: all held leases are renewed together, in batches.

The loop sleeps until the earliest lease is due, then renews every lease that has used at
least half of its renewal interval, so leases taken at different moments fall into step and
share one statement per tick. ``renew_leases`` takes one TTL per call, so a tick sends one
statement per distinct TTL among the leases it renews (run concurrently). The loop exists only
while something is held. Renewers are kept per provider (`PerProvider`: weakly keyed) and
refer to it weakly, so a provider and its renewer are collected together.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ._per_provider import PerProvider
from .errors import LeaseClosedError, LeaseDatabaseError

if TYPE_CHECKING:
    from ._hold import HeldLease

__all__ = ["Renewer", "close_for", "renew_batch", "renewer_for"]

logger = logging.getLogger("sql_lease.hold")

_renewers: PerProvider[Renewer] = PerProvider(lambda p, weak: Renewer(p, weak=weak))

Outcome = tuple[bool, datetime | None]  # (still held, new expiry if the provider reports it)


def renewer_for(provider: Any) -> Renewer:
    """The renewal scheduler of ``provider`` (created on first use)."""
    return _renewers.get(provider)


def close_for(provider: Any, reason: str) -> None:
    """``provider`` was closed: every lease it renews is lost with ``reason``."""
    renewer = _renewers.find(provider)
    if renewer is not None:
        renewer.close(reason)


async def renew_batch(provider: Any, pairs: Sequence[tuple[str, str]], ttl: int) -> list[Outcome]:
    """Renew ``pairs`` with ``ttl`` in as few statements as the provider allows."""
    many: Callable[..., Awaitable[list[tuple[int, datetime] | None]]] | None = getattr(
        provider, "renew_many", None
    )
    if many is not None:
        return [(r is not None, None if r is None else r[1]) for r in await many(pairs, ttl)]
    batch: Callable[..., Awaitable[list[bool]]] | None = getattr(provider, "renew_leases", None)
    if batch is not None:
        return [(ok, None) for ok in await batch(pairs, ttl)]
    oks = await asyncio.gather(*(provider.renew_lease(k, o, ttl) for k, o in pairs))
    return [(bool(ok), None) for ok in oks]


class Renewer:
    """Renews the held leases of one provider; ``ticks`` and ``statements`` count its work."""

    def __init__(self, provider: Any, *, weak: bool = True) -> None:
        self._provider: Callable[[], Any] = weakref.ref(provider) if weak else (lambda: provider)
        self._leases: set[HeldLease] = set()
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._sleep_until = float("inf")
        self._batch: asyncio.Future[Any] | None = None  # the renewal round in flight
        self._batch_leases: set[HeldLease] = set()
        #: Renewal rounds run, and renewal calls made (one per distinct TTL per round).
        self.ticks = 0
        self.statements = 0

    def __len__(self) -> int:
        return len(self._leases)

    def add(self, lease: HeldLease) -> None:
        self._leases.add(lease)
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
        elif lease._due < self._sleep_until and self._wake is not None:
            self._wake.set()

    def discard(self, lease: HeldLease) -> None:
        self._leases.discard(lease)

    def close(self, reason: str) -> None:
        """Lose every lease (its provider closed) and let the loop end now."""
        for lease in list(self._leases):
            lease._lose(reason)
        self._leases.clear()
        if self._wake is not None:
            self._wake.set()

    async def settle(self, lease: HeldLease) -> None:
        """Wait until no renewal of ``lease`` is in flight (call after `discard`)."""
        batch = self._batch
        if batch is not None and lease in self._batch_leases and not batch.done():
            await asyncio.wait([batch])  # not cancelled with the caller

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake
        assert wake is not None
        try:
            while self._leases:
                now = loop.time()
                due = min(lease._due for lease in self._leases)
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
                groups: dict[int, list[HeldLease]] = {}
                for lease in self._leases:
                    if lease._due - lease._interval / 2 <= now:
                        groups.setdefault(lease.ttl_ms, []).append(lease)
                self.ticks += 1
                self._batch_leases = {lease for group in groups.values() for lease in group}
                self._batch = asyncio.gather(
                    *(self._renew(ttl, group) for ttl, group in groups.items())
                )
                try:
                    await self._batch
                finally:
                    self._batch, self._batch_leases = None, set()
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _renew(self, ttl: int, leases: list[HeldLease]) -> None:
        provider = self._provider()
        if provider is None:
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        self.statements += 1
        try:
            outcomes = await renew_batch(provider, [(x.key, x.owner) for x in leases], ttl)
        except LeaseClosedError:
            for lease in leases:
                lease._lose("its provider was closed")
            return
        except LeaseDatabaseError as exc:
            now = loop.time()
            for lease in leases:
                if lease in self._leases:
                    lease._renew_failed(exc, now)
            return
        except Exception as exc:
            logger.exception("renewing %d leases failed unexpectedly", len(leases))
            for lease in leases:
                lease._lose(f"renewal failed: {exc!r}")
            return
        for lease, (held, expires_at) in zip(leases, outcomes, strict=True):
            if lease not in self._leases:
                continue  # released, transferred or lost meanwhile
            if held:
                lease._renewed(started, expires_at)
            else:
                lease._lose("a renewal found it gone (expired, taken over or force-released)")
