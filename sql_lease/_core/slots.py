"""The in-memory provider's counting leases, leases with metadata and all-or-none calls: a
structure and a mixin with no I/O, judged by the provider's clock and fence counter.

The same rules as the SQL statements (`sql_lease._core.counting`): a key here has up to
``limit`` grants, each with its own fence, expiry, grant time and metadata; a live plain lease
of the key counts as one grant with limit 1; a call with another limit while grants are live
raises `LeaseLimitMismatchError`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ..errors import LeaseLimitMismatchError
from .contract import AcquireResult, Lease
from .counting import MAX_KEYS, AcquireAllResult
from .validate import Millis, check_keys, check_name, check_ttl

__all__ = ["Entry", "Grants", "MemoryCounting", "Slot", "Slots"]


@dataclass(slots=True)
class Slot:
    """One grant: its fence, expiry and grant time (provider clock seconds), metadata."""

    fence: int
    expires: float
    acquired: float
    metadata: bytes | str | None = None


@dataclass(slots=True)
class Grants:
    """The grants of one key, by owner, and the limit their holders agreed on."""

    limit: int
    by_owner: dict[str, Slot] = field(default_factory=dict)

    def prune(self, now: float) -> None:
        for owner in [o for o, s in self.by_owner.items() if s.expires <= now]:
            del self.by_owner[owner]

    def oldest(self) -> tuple[str, Slot]:
        return min(self.by_owner.items(), key=lambda item: item[1].fence)

    def soonest(self) -> tuple[str, Slot]:
        return min(self.by_owner.items(), key=lambda item: item[1].expires)

    def ordered(self) -> Iterator[tuple[str, Slot]]:
        return iter(sorted(self.by_owner.items(), key=lambda item: item[1].fence))


class Slots:
    """Every counting key (or key with metadata) of one in-memory provider."""

    def __init__(self) -> None:
        self._keys: dict[str, Grants] = {}

    def names(self) -> list[str]:
        """The keys that have (or had, until pruned) grants."""
        return list(self._keys)

    def live(self, key: str, now: float) -> Grants | None:
        """The key's grants, pruned; None (and forgotten) when none is live."""
        grants = self._keys.get(key)
        if grants is None:
            return None
        grants.prune(now)
        if not grants.by_owner:
            del self._keys[key]
            return None
        return grants

    def acquire(
        self,
        key: str,
        owner: str,
        limit: int,
        slot: Callable[[], Slot],
        plain: tuple[str, Slot] | None,
        now: float,
        ttl_s: float,
        metadata: tuple[bytes | str | None, bool],
    ) -> tuple[bool, str, Slot]:
        """Grant ``owner`` a slot (``slot()`` makes a new one), renew its own, or refuse:
        (acquired, the owner or a holder, its slot). ``plain``: the key's live plain lease,
        which becomes a grant with limit 1 when its owner asks again. ``metadata``: the value
        and whether it was given."""
        grants = self.live(key, now)
        if grants is None and plain is not None:
            grants = Grants(1, {plain[0]: plain[1]})
        if grants is not None and grants.limit != limit:
            raise LeaseLimitMismatchError(key, limit, grants.limit)
        if grants is None:
            grants = Grants(limit)
        mine = grants.by_owner.get(owner)
        if mine is None and len(grants.by_owner) >= limit:
            holder, held = grants.soonest()
            return False, holder, held
        if mine is None:
            mine = grants.by_owner[owner] = slot()
        mine.expires = now + ttl_s
        if metadata[1]:
            mine.metadata = metadata[0]
        self._keys[key] = grants
        return True, owner, mine

    def release(self, key: str, owner: str) -> bool:
        grants = self._keys.get(key)
        if grants is None or grants.by_owner.pop(owner, None) is None:
            return False
        if not grants.by_owner:
            del self._keys[key]
        return True

    def renew(self, key: str, owner: str, now: float, ttl_s: float) -> Slot | None:
        grants = self.live(key, now)
        mine = None if grants is None else grants.by_owner.get(owner)
        if mine is not None:
            mine.expires = now + ttl_s
        return mine

    def transfer(
        self,
        key: str,
        owners: tuple[str, str],
        now: float,
        ttl_s: float,
        fence: Callable[[], int],
        metadata: tuple[bytes | str | None, bool],
    ) -> Slot | None:
        """Hand ``owners[0]``'s grant to ``owners[1]`` (new fence; metadata kept unless
        given); None when it holds none, or the receiver holds one already."""
        source, target = owners
        grants = self.live(key, now)
        mine = None if grants is None else grants.by_owner.get(source)
        if grants is None or mine is None:
            return None
        if source != target:
            if target in grants.by_owner:
                return None
            del grants.by_owner[source]
            mine = grants.by_owner[target] = Slot(fence(), mine.expires, now, mine.metadata)
        mine.expires = now + ttl_s
        if metadata[1]:
            mine.metadata = metadata[0]
        return mine

    def drop(self, key: str, now: float) -> tuple[str, Slot] | None:
        """End every grant of ``key`` (a force-release); its newest grant, or None."""
        grants = self.live(key, now)
        if grants is None:
            return None
        del self._keys[key]
        return max(grants.by_owner.items(), key=lambda item: item[1].fence)

    def adopt(self, key: str, owner: str, slot: Slot) -> None:
        """A plain lease becomes a grant with limit 1 (it is given metadata)."""
        self._keys[key] = Grants(1, {owner: slot})


@dataclass(slots=True)
class Entry:
    """A plain lease of the in-memory provider."""

    owner: str
    fence: int
    expires: float  # clock seconds
    acquired: float


class MemoryCounting:
    """The counting methods of `InMemoryLeaseProvider` (a base class): its plain leases are
    ``_leases``, its grants ``_slots``, both guarded by ``_lock``."""

    _leases: dict[str, Entry]
    _slots: Slots
    _lock: threading.Lock
    _clock: Callable[[], float]
    _fences: Iterator[int]
    _closed: bool

    if TYPE_CHECKING:  # the provider's own (the lifecycle's for waking waiters)

        def _wall(self, t: float) -> datetime: ...
        def _live(self, key: str, now: float) -> Entry | None: ...
        def _wake_waiters(self, key: str) -> None: ...
        def _check_open(self, operation: str) -> None: ...

    def _slot_lease(self, key: str, owner: str, slot: Slot) -> Lease:
        expires, acquired = self._wall(slot.expires), self._wall(slot.acquired)
        return Lease(key, owner, slot.fence, expires, acquired, slot.metadata)

    def _count_acquire(
        self,
        key: str,
        owner: str,
        ttl_ms: int,
        checked: tuple[int, bytes | None, bool | None],
        given: bool,
    ) -> AcquireResult:
        """Under the lock: a counting acquire, or an acquire with metadata."""
        limit, data, is_str = checked
        value: bytes | str | None = data
        if data is not None and is_str:
            value = data.decode("utf-8", "surrogatepass")
        now = self._clock()
        entry = self._live(key, now)
        plain = None
        if entry is not None:
            if limit != 1:
                raise LeaseLimitMismatchError(key, limit, 1)
            if entry.owner != owner:
                return AcquireResult(False, entry.owner, entry.fence, self._wall(entry.expires))
            plain = (owner, Slot(entry.fence, entry.expires, entry.acquired))
            del self._leases[key]
        won, holder, slot = self._slots.acquire(
            key,
            owner,
            limit,
            lambda: Slot(next(self._fences), now, now),
            plain,
            now,
            ttl_ms / 1000,
            (value, given),
        )
        return AcquireResult(won, holder, slot.fence, self._wall(slot.expires))

    async def get_lease_holders(self, key: str) -> list[Lease]:
        """The live holders of ``key``, oldest grant first (a plain lease: its one holder)."""
        check_name("key", key)
        self._check_open("get_lease_holders")
        with self._lock:
            now = self._clock()
            grants = self._slots.live(key, now)
            if grants is not None:
                return [self._slot_lease(key, o, s) for o, s in grants.ordered()]
            entry = self._live(key, now)
            if entry is None:
                return []
            return [
                self._slot_lease(key, entry.owner, Slot(entry.fence, entry.expires, entry.acquired))
            ]

    async def acquire_leases(
        self, keys: Iterable[str], owner: str, ttl_ms: Millis
    ) -> AcquireAllResult:
        """Take every key for ``owner`` as plain leases, or none; see `SqlCounting`."""
        stored = check_keys(keys, MAX_KEYS)
        check_name("owner", owner)
        ttl = check_ttl(ttl_ms)
        self._check_open("acquire_leases")
        names = [k.decode("utf-8", "surrogatepass") for k in stored]
        with self._lock:
            now = self._clock()
            for key in names:
                grants = self._slots.live(key, now)
                if grants is not None:
                    return AcquireAllResult(False, {}, key, grants.oldest()[0])
                entry = self._live(key, now)
                if entry is not None and entry.owner != owner:
                    return AcquireAllResult(False, {}, key, entry.owner)
            taken: dict[str, AcquireResult] = {}
            for key in names:
                entry = self._live(key, now)
                if entry is None:
                    entry = self._leases[key] = Entry(owner, next(self._fences), now, now)
                entry.expires = now + ttl / 1000
                taken[key] = AcquireResult(True, owner, entry.fence, self._wall(entry.expires))
            return AcquireAllResult(True, taken)

    async def release_leases(self, keys: Iterable[str], owner: str) -> int:
        """Release ``owner``'s live plain leases among ``keys``; how many were released."""
        stored = check_keys(keys, MAX_KEYS)
        check_name("owner", owner)
        self._check_open("release_leases")
        released = []
        with self._lock:
            now = self._clock()
            for key in (k.decode("utf-8", "surrogatepass") for k in stored):
                entry = self._live(key, now)
                if entry is not None and entry.owner == owner:
                    del self._leases[key]
                    released.append(key)
        for key in released:
            self._wake_waiters(key)
        return len(released)
