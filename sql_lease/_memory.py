"""A single-process provider with the same semantics as the SQL one (SPEC §3)."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Self

from ._core.contract import AcquireResult, Lease
from ._core.counting import Metadata, check_count_args
from ._core.slots import Entry as _Entry
from ._core.slots import MemoryCounting, Slot, Slots
from ._core.validate import (
    Millis,
    check_items,
    check_limit,
    check_millis,
    check_name,
    check_prefix,
    check_ttl,
)
from ._holding.lifecycle import LeaseLifecycle
from .capabilities import Released, Renewal, WakeupSink
from .errors import LeaseClosedError
from .observer import LeaseObserver, check_observer, observed_acquire, timed_operation

__all__ = ["InMemoryLeaseProvider"]

#: Methods an observer sees, by the operation they report (`renew_leases` goes through
#: `renew_many`, so a batch is reported once).
_OBSERVED = {
    "acquire_lease": "acquire_lease",
    "get_lease_owner": "get_lease_owner",
    "get_lease": "get_lease",
    "release_lease": "release_lease",
    "renew_lease": "renew_lease",
    "transfer_lease": "transfer_lease",
    "renew_many": "renew_leases",
    "force_release": "force_release",
    "list_leases": "list_leases",
    "purge_expired": "purge_expired",
    "now": "now",
}

logger = logging.getLogger("sql_lease")


class InMemoryLeaseProvider(MemoryCounting, LeaseLifecycle):
    """Leases in a dict, judged by a monotonic clock; asyncio- and thread-safe.

    ``observer`` (a `sql_lease.observer.LeaseObserver`) sees each operation and lease event.
    ``clock`` returns seconds (default `time.monotonic`); tests can inject a fake one. Reported
    datetimes map clock readings onto wall time as of construction. Fences come from one
    counter per provider, so they strictly increase on every change of owner. A release,
    transfer or force-release wakes a waiter of the key (`wait_for_lease`) at once. After
    `aclose` (or leaving ``async with``) every call raises `LeaseClosedError`. Durations are
    ints of milliseconds or `timedelta` values, rounded up to a whole millisecond.
    """

    #: Every change of this provider happens here, so it wakes its waiters itself (through
    #: `_wake_waiters`, on release, transfer and force-release): they never poll.
    _wakes_own_waiters = True

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        observer: LeaseObserver | None = None,
    ) -> None:
        self._observer = check_observer(observer)
        if observer is not None:
            # Timed wrappers on this instance only: without an observer, calls pay nothing.
            for name, operation in _OBSERVED.items():
                method = getattr(self, name)
                setattr(self, name, timed_operation(observer, "memory", operation, method))
            observed = observed_acquire(observer, self.acquire_lease)
            self.acquire_lease = observed  # type: ignore[method-assign]
        self._clock = clock
        self._leases: dict[str, _Entry] = {}
        self._slots = Slots()
        self._fences = itertools.count(1)
        self._lock = threading.Lock()
        self._wall0 = datetime.now(UTC)
        self._clock0 = clock()
        self._closed = False

    @property
    def observer(self) -> LeaseObserver | None:
        """The observer given at construction, or None."""
        return self._observer

    async def aclose(self) -> None:
        """Close the provider (idempotent): later calls raise `LeaseClosedError`; leases held
        through `hold` count as lost. The leases themselves are kept, unreachable."""
        if not self._closed:
            self._closed = True
            await self._close_lifecycle()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise LeaseClosedError(operation)

    def _wall(self, t: float) -> datetime:
        return self._wall0 + timedelta(seconds=t - self._clock0)

    def _live(self, key: str, now: float) -> _Entry | None:
        entry = self._leases.get(key)
        if entry is None:
            return None
        if entry.expires <= now:
            del self._leases[key]
            return None
        return entry

    async def acquire_lease(
        self, key: str, owner: str, ttl_ms: Millis, *, limit: int = 1, metadata: Metadata = None
    ) -> AcquireResult:
        """Claim ``key`` for ``owner`` for ``ttl_ms`` if free, expired or already ``owner``'s
        (then only the expiry moves; the fence stays); else report the live holder.
        ``limit=N``, ``metadata``: as `SqlLeaseProvider.acquire_lease`."""
        check_name("key", key)
        check_name("owner", owner)
        ttl_ms = check_ttl(ttl_ms)
        counted = type(limit) is not int or limit != 1 or metadata is not None
        checked = check_count_args(limit, metadata) if counted else (1, None, None)
        if self._closed:
            raise LeaseClosedError("acquire_lease")
        with self._lock:
            now = self._clock()
            if counted or self._slots.live(key, now) is not None:
                return self._count_acquire(key, owner, ttl_ms, checked, metadata is not None)
            entry = self._live(key, now)
            if entry is None:
                entry = _Entry(owner, next(self._fences), now + ttl_ms / 1000, now)
                self._leases[key] = entry
            elif entry.owner == owner:
                entry.expires = now + ttl_ms / 1000
            else:
                return AcquireResult(False, entry.owner, entry.fence, self._wall(entry.expires))
            return AcquireResult(True, owner, entry.fence, self._wall(entry.expires))

    async def get_lease_owner(self, key: str) -> str | None:
        """The owner of the live lease of ``key``, or None if it is absent or expired."""
        check_name("key", key)
        if self._closed:
            raise LeaseClosedError("get_lease_owner")
        with self._lock:
            grants = self._slots.live(key, self._clock())
            if grants is not None:
                return grants.oldest()[0]
            entry = self._live(key, self._clock())
            return None if entry is None else entry.owner

    async def get_lease(self, key: str) -> Lease | None:
        """The live lease of ``key`` with its fence and times, or None."""
        check_name("key", key)
        self._check_open("get_lease")
        with self._lock:
            grants = self._slots.live(key, self._clock())
            if grants is not None:
                return self._slot_lease(key, *grants.oldest())
            entry = self._live(key, self._clock())
            if entry is None:
                return None
            return Lease(
                key, entry.owner, entry.fence, self._wall(entry.expires), self._wall(entry.acquired)
            )

    async def release_lease(self, key: str, owner: str) -> None:
        """End the lease of ``key`` if ``owner`` holds it (live or expired); else do nothing."""
        check_name("key", key)
        check_name("owner", owner)
        if self._closed:
            raise LeaseClosedError("release_lease")
        with self._lock:
            entry = self._leases.get(key)
            if not self._slots.release(key, owner):
                if entry is None or entry.owner != owner:
                    return
                del self._leases[key]
        self._wake_waiters(key)

    async def renew_lease(self, key: str, owner: str, ttl_ms: Millis) -> bool:
        """Set the expiry of ``owner``'s live lease of ``key`` to now + ``ttl_ms``; False (and
        nothing changed) when it is expired, absent or someone else's."""
        check_name("key", key)
        check_name("owner", owner)
        ttl_ms = check_ttl(ttl_ms)
        if self._closed:
            raise LeaseClosedError("renew_lease")
        with self._lock:
            now = self._clock()
            if self._slots.renew(key, owner, now, ttl_ms / 1000) is not None:
                return True
            entry = self._live(key, now)
            if entry is None or entry.owner != owner:
                return False
            entry.expires = now + ttl_ms / 1000
            return True

    async def transfer_lease(
        self, key: str, from_owner: str, to_owner: str, ttl_ms: Millis, *, metadata: Metadata = None
    ) -> bool:
        """Hand ``from_owner``'s live lease of ``key`` to ``to_owner`` for ``ttl_ms`` with a
        new fence, at once (the key is never free); False when not held by ``from_owner``.
        ``metadata``: as `SqlLeaseProvider.transfer_lease`."""
        check_name("key", key)
        check_name("from_owner", from_owner)
        check_name("to_owner", to_owner)
        ttl_ms = check_ttl(ttl_ms)
        check_count_args(1, metadata)
        if self._closed:
            raise LeaseClosedError("transfer_lease")
        with self._lock:
            now = self._clock()
            entry = self._live(key, now)
            if metadata is not None and entry is not None and entry.owner == from_owner:
                del self._leases[key]  # a lease given metadata keeps it in a grant
                slot = Slot(entry.fence, entry.expires, entry.acquired)
                self._slots.adopt(key, from_owner, slot)
            if self._slots.live(key, now) is not None:
                fences = self._fences
                value = (
                    bytes(metadata) if isinstance(metadata, bytearray | memoryview) else metadata
                )
                moved = self._slots.transfer(
                    key,
                    (from_owner, to_owner),
                    now,
                    ttl_ms / 1000,
                    lambda: next(fences),
                    (value, metadata is not None),
                )
                return moved is not None  # the number of holders is unchanged: no waiter wakes
            if entry is None or entry.owner != from_owner:
                return False
            entry.expires = now + ttl_ms / 1000
            if to_owner == from_owner:
                return True
            entry.owner = to_owner
            entry.fence = next(self._fences)
            entry.acquired = now
        self._wake_waiters(key)
        return True

    async def release(self, key: str, owner: str) -> Released | None:
        """`release_lease` that reports the `Released` fence and time, or None (a no-op)."""
        check_name("key", key)
        check_name("owner", owner)
        self._check_open("release_lease")
        with self._lock:
            now = self._clock()
            entry = self._live(key, now)
            grants = self._slots.live(key, now)
            slot = None if grants is None else grants.by_owner.get(owner)
            if slot is not None and self._slots.release(key, owner):  # a grant
                entry = _Entry(owner, slot.fence, slot.expires, slot.acquired)
            elif entry is None or entry.owner != owner:
                return None
            else:
                del self._leases[key]
            released = Released(entry.fence, self._wall(now))
        self._wake_waiters(key)
        return released

    async def renew(self, key: str, owner: str, ttl_ms: Millis) -> Renewal | None:
        """`renew_lease` that reports the `Renewal` (fence, new expiry), or None when lost."""
        check_name("owner", owner)
        return (await self.renew_many([(key, owner)], ttl_ms))[0]

    async def transfer(
        self, key: str, from_owner: str, to_owner: str, ttl_ms: Millis
    ) -> Renewal | None:
        """`transfer_lease` that reports the new owner's `Renewal`, or None when not held."""
        if not await self.transfer_lease(key, from_owner, to_owner, ttl_ms):
            return None
        with self._lock:
            entry = self._leases.get(key)
            if entry is None:  # a grant of a counting key
                lease = [h for h in await self.get_lease_holders(key) if h.owner == to_owner]
                return Renewal(lease[0].fence, lease[0].expires_at) if lease else None
            return Renewal(entry.fence, self._wall(entry.expires))

    async def renew_leases(self, items: Iterable[tuple[str, str]], ttl_ms: Millis) -> list[bool]:
        """Renew many ``(key, owner)`` leases at once; one bool per item, in order."""
        return [r is not None for r in await self.renew_many(items, ttl_ms)]

    async def force_release(self, key: str) -> bool:
        """End the live lease of ``key`` whoever holds it; logged at WARNING."""
        check_name("key", key)
        self._check_open("force_release")
        with self._lock:
            now = self._clock()
            dropped = self._slots.drop(key, now)  # every grant of a counting key
            entry = self._live(key, now)
            if dropped is not None:
                slot = dropped[1]
                entry = _Entry(dropped[0], slot.fence, slot.expires, slot.acquired)
            elif entry is None:
                return False
            else:
                del self._leases[key]
        self._wake_waiters(key)
        logger.warning(
            "force-released lease %r held by %r (fence %d)", key, entry.owner, entry.fence
        )
        return True

    async def list_leases(
        self, prefix: str | None = None, *, limit: int = 100, after: str | None = None
    ) -> list[Lease]:
        """Live leases in key order (by UTF-8 bytes, as in SQL), optionally by key prefix."""
        check_prefix(prefix)
        count = check_limit(limit)
        floor = None if after is None else check_name("after", after)
        self._check_open("list_leases")
        with self._lock:
            now = self._clock()
            found = []
            rows = 0
            names = set(self._leases).union(self._slots.names())
            for key in sorted(names, key=lambda k: k.encode()):
                if prefix is not None and not key.startswith(prefix):
                    continue
                if floor is not None and key.encode() <= floor:
                    continue
                entry = self._live(key, now)
                grants = self._slots.live(key, now)  # a counting key: one row, each grant
                if grants is not None:
                    found += [self._slot_lease(key, o, s) for o, s in grants.ordered()]
                elif entry is not None:
                    found.append(
                        Lease(
                            key,
                            entry.owner,
                            entry.fence,
                            self._wall(entry.expires),
                            self._wall(entry.acquired),
                        )
                    )
                else:
                    continue
                rows += 1
                if rows == count:
                    break
            return found

    async def purge_expired(
        self, *, min_age_ms: Millis = 0, batch_size: int = 1_000, max_batches: int | None = None
    ) -> int:
        """Drop entries expired for at least ``min_age_ms``; returns how many were dropped."""
        age = check_millis("min_age_ms", min_age_ms) / 1000
        check_limit(batch_size, what="batch_size", most=100_000)
        if max_batches is not None:
            check_limit(max_batches, "max_batches", 10**9)
        self._check_open("purge_expired")
        with self._lock:
            now = self._clock()
            dead = [k for k, e in self._leases.items() if e.expires <= now - age]
            for k in dead:
                del self._leases[k]
            return len(dead)

    def __repr__(self) -> str:
        return f"InMemoryLeaseProvider(leases={len(self._leases)})"

    # -- what held leases need (sql_lease._holding.held, _renewer) --------------------------------

    def wakeup_source(self, sink: WakeupSink) -> None:
        """None: this provider wakes its waiters itself on release, transfer and force-release."""
        return

    async def now(self) -> datetime:
        """This provider's clock as an aware datetime (the clock that judges expiry)."""
        self._check_open("now")
        with self._lock:
            return self._wall(self._clock())

    async def renew_many(
        self, items: Iterable[tuple[str, str]], ttl_ms: Millis
    ) -> list[Renewal | None]:
        """Renew many leases; per item (fence, new expiry), or None when it was not held."""
        pairs = [(k.decode(), o.decode()) for k, o in check_items(items)]
        ttl_ms = check_ttl(ttl_ms)
        self._check_open("renew_leases")
        with self._lock:
            now = self._clock()
            out: list[Renewal | None] = []
            for key, owner in pairs:
                entry = self._live(key, now)
                if entry is None or entry.owner != owner:
                    slot = self._slots.renew(key, owner, now, ttl_ms / 1000)  # a grant?
                    out.append(
                        None if slot is None else Renewal(slot.fence, self._wall(slot.expires))
                    )
                    continue
                entry.expires = now + ttl_ms / 1000
                out.append(Renewal(entry.fence, self._wall(entry.expires)))
            return out
