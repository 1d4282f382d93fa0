"""One renewal thread per provider: every held lease renewed together, in batches.

Like the async renewer (`sql_lease._renewer`): the thread sleeps until the earliest lease is
due, then renews every lease that has used at least half of its interval, one
``renew_many`` statement per distinct TTL. It also notices a lease whose conservative local
deadline passed without a successful renewal, and declares it lost. The thread exists only
while something is held.
"""

from __future__ import annotations

import logging
import threading
from time import monotonic
from typing import TYPE_CHECKING, Any

from ..errors import LeaseDatabaseError

if TYPE_CHECKING:
    from ._hold import HeldLease

__all__ = ["Renewer"]

logger = logging.getLogger("sql_lease.hold")


class Renewer:
    """Renews the held leases of one provider; ``ticks`` and ``statements`` count its work."""

    def __init__(self, provider: Any) -> None:
        self._provider = provider
        self._leases: set[HeldLease] = set()
        self._in_flight: set[HeldLease] = set()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.ticks = 0
        self.statements = 0

    def __len__(self) -> int:
        return len(self._leases)

    def add(self, lease: HeldLease) -> None:
        with self._cond:
            self._leases.add(lease)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sql_lease renewer", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def discard(self, lease: HeldLease) -> None:
        """Stop renewing ``lease`` and wait until no renewal of it is in flight."""
        with self._cond:
            self._leases.discard(lease)
            while lease in self._in_flight:
                self._cond.wait()

    def stop(self) -> list[HeldLease]:
        """Stop for good (the provider closed); returns the leases that were held."""
        with self._cond:
            self._stopped = True
            leases, self._leases = list(self._leases), set()
            while self._in_flight:
                self._cond.wait()
            self._cond.notify_all()
        return leases

    def _run(self) -> None:
        cond = self._cond
        while True:
            expired: list[HeldLease] = []
            groups: dict[int, list[HeldLease]] = {}
            with cond:
                if not self._leases or self._stopped:
                    self._thread = None
                    return
                now = monotonic()
                expired = [lease for lease in self._leases if lease._deadline <= now]
                self._leases.difference_update(expired)
                if not expired:
                    due = min(lease._due for lease in self._leases)
                    if due > now:
                        limit = min(lease._deadline for lease in self._leases)
                        cond.wait(min(due, limit) - now)
                        continue
                    for lease in self._leases:
                        if lease._due - lease._interval / 2 <= now:
                            groups.setdefault(lease.ttl_ms, []).append(lease)
                    self._in_flight = {x for group in groups.values() for x in group}
                    self.ticks += 1
            for lease in expired:
                lease._expired()
            if not groups:
                continue
            try:
                for ttl, group in groups.items():
                    self._renew(ttl, group)
            finally:
                with cond:
                    self._in_flight = set()
                    cond.notify_all()

    def _renew(self, ttl: int, leases: list[HeldLease]) -> None:
        started = monotonic()
        self.statements += 1
        try:
            outcomes = _renew_batch(self._provider, [(x.key, x.owner) for x in leases], ttl)
        except LeaseDatabaseError as exc:
            now = monotonic()
            for lease in leases:
                lease._renew_failed(exc, now)
            return
        except Exception as exc:
            logger.exception("renewing %d leases failed unexpectedly", len(leases))
            lost = [(lease, f"renewal failed: {exc!r}") for lease in leases]
        else:
            lost = []
            for lease, outcome in zip(leases, outcomes, strict=True):
                if outcome is not None:
                    lease._renewed(started, outcome[1])
                else:
                    lost.append(
                        (lease, "a renewal found it gone (expired, taken over or force-released)")
                    )
        with self._cond:
            for lease, _ in lost:
                self._leases.discard(lease)
        for lease, reason in lost:
            lease._lose(reason)


def _renew_batch(provider: Any, pairs: list[tuple[str, str]], ttl: int) -> list[Any]:
    """Per pair (fence, new expiry) or None: ``renew_many`` where the provider has it (SQL),
    else ``renew_leases`` (the expiry is then not known)."""
    many = getattr(provider, "renew_many", None)
    if many is not None:
        return list(many(pairs, ttl))
    return [(0, None) if ok else None for ok in provider.renew_leases(pairs, ttl)]
