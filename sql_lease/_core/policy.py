"""The hold policy, written once for the async and the sync API: no I/O, no asyncio, no threads.

A hold's terms are checked once (`hold_terms`: key, owner, TTL, renewal period, wait) and then
travel as a `HoldTerms`, so nothing downstream checks them again: not the inner acquire, not a
renewal tick. A held lease is a `Ticket`: what its renewer renews (key, owner, TTL, when it is
due) and the one loss rule that judges it, the same for both APIs. The lease is lost when a
renewal finds it gone, when a renewal reports another fence than the one granted
(`fence_moved`: after a lossy failover the new primary can hold an older row of the same
owner), or once it has expired by the clock that granted it, counted conservatively from the
start of the last successful request (`Ticket.deadline`). A failed renewal is retried after a
backoff that doubles from `BACKOFF_FIRST` up to the renewal period (`Ticket.backoff`).

The drivers are thin: `sql_lease._holding` (asyncio: a keeper, a renewal task) and
`sql_lease.sync` (a renewal thread) do the waiting and the calls, and tell the ticket's
callbacks what happened; the ticket says what it means. Times are the driver's own clock
(event-loop time, `monotonic`), in seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Protocol, TypedDict, runtime_checkable

from ..capabilities import Renewal
from ..errors import LeaseValueError
from .contract import AcquireResult
from .counting import check_hold_keys
from .validate import Millis, check_millis, check_name, check_ttl

__all__ = [
    "BACKOFF_FIRST",
    "GONE",
    "CheckedCalls",
    "HoldKeywords",
    "HoldTerms",
    "SyncCheckedCalls",
    "Ticket",
    "acquire_call",
    "due_groups",
    "fence_moved",
    "hold_terms",
    "keys_terms",
    "keyword_terms",
    "renew_interval",
    "wait_terms",
]

BACKOFF_FIRST: Final = 0.05  # seconds before the first retry of a failed renewal (doubles)
#: Why a lease is lost when a renewal found no live row of it.
GONE: Final = "a renewal found it gone (expired, taken over or force-released)"


@dataclass(frozen=True, slots=True)
class HoldTerms:
    """A hold's arguments, checked (`hold_terms`): key and owner with their stored forms
    (``k``, ``o``), TTL, renewal period and wait in ms. A plain wait's are a hold's without a
    renewal period (0: `wait_terms`)."""

    key: str
    owner: str
    k: bytes
    o: bytes
    ttl_ms: int
    renew_every_ms: int
    wait_ms: int


@runtime_checkable
class CheckedCalls(Protocol):
    """A provider (ours) that takes a hold's checked values as they are: its inner acquire and
    its renewal ticks check nothing again. Others get the public calls."""

    async def _acquire_checked(self, k: bytes, o: bytes, owner: str, ttl: int) -> AcquireResult:
        """`acquire_lease` with checked values (``k``, ``o``: stored forms)."""
        ...

    async def _renew_checked(
        self, pairs: list[tuple[bytes, bytes]], ttl: int
    ) -> list[Renewal | None]:
        """`renew_many` with checked values."""
        ...


@runtime_checkable
class SyncCheckedCalls(Protocol):
    """`CheckedCalls` of a sync provider."""

    def _acquire_checked(self, k: bytes, o: bytes, owner: str, ttl: int) -> AcquireResult:
        """`acquire_lease` with checked values (``k``, ``o``: stored forms)."""
        ...

    def _renew_checked(self, pairs: list[tuple[bytes, bytes]], ttl: int) -> list[Renewal | None]:
        """`renew_many` with checked values."""
        ...


class HoldKeywords(TypedDict, total=False):
    """The keyword options of a sync hold (``hold(key, owner, ttl_ms, **options)``); the
    hooks are called with the `HeldLease`."""

    renew_every_ms: Millis | None
    wait_ms: Millis
    on_acquired: Callable[[Any], object] | None
    on_renewed: Callable[[Any], object] | None
    on_lost: Callable[[Any], object] | None
    on_released: Callable[[Any], object] | None
    limit: int


_KEYWORDS: Final = frozenset(HoldKeywords.__annotations__)


def keyword_terms(key: str, owner: str, ttl_ms: Millis, options: HoldKeywords) -> HoldTerms:
    """`hold_terms` from a sync hold's keywords; `TypeError` for one it does not take."""
    unknown = sorted(options.keys() - _KEYWORDS)
    if unknown:
        raise TypeError(f"hold() got an unexpected keyword argument {unknown[0]!r}")
    return hold_terms(key, owner, ttl_ms, options.get("renew_every_ms"), options.get("wait_ms", 0))


def acquire_call(provider: Any, terms: HoldTerms, limit: int, checked: bool) -> Any:
    """The acquire of checked ``terms`` (async or sync: the caller awaits or not): ``limit``
    other than 1, a slot of a counting lease (``acquire_lease(..., limit=)``, which checks
    it); else, on our providers (``checked``: `CheckedCalls`/`SyncCheckedCalls`), the checked
    values as they are; others get ``acquire_lease``."""
    if limit != 1 or type(limit) is not int:
        return partial(provider.acquire_lease, terms.key, terms.owner, terms.ttl_ms, limit=limit)
    if checked and "acquire_lease" not in vars(provider):
        # (an instance-level acquire_lease, a wrapper someone put there, is honoured)
        return partial(provider._acquire_checked, terms.k, terms.o, terms.owner, terms.ttl_ms)
    return partial(provider.acquire_lease, terms.key, terms.owner, terms.ttl_ms)


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


def hold_terms(
    key: str, owner: str, ttl_ms: Millis, renew_every_ms: Millis | None, wait_ms: Millis
) -> HoldTerms:
    """A hold's arguments checked, once (the async and sync holds alike)."""
    k, o = check_name("key", key), check_name("owner", owner)
    ttl = check_ttl(ttl_ms)
    every = renew_interval(ttl, renew_every_ms)
    return HoldTerms(key, owner, k, o, ttl, every, check_millis("wait_ms", wait_ms))


def keys_terms(
    keys: object,
    owner: str,
    ttl_ms: Millis,
    renew_every_ms: Millis | None,
    wait_ms: Millis,
    limit: object = 1,
) -> tuple[tuple[str, ...], HoldTerms]:
    """A hold of several keys' arguments checked, once, before any I/O: the keys
    (`check_hold_keys`) and the terms every key's hold shares (those of the first)."""
    names = check_hold_keys(keys, limit)
    return names, hold_terms(names[0], owner, ttl_ms, renew_every_ms, wait_ms)


def wait_terms(key: str, owner: str, ttl_ms: Millis, timeout_ms: Millis) -> HoldTerms:
    """A plain wait's arguments (``wait_for_lease``) checked, once."""
    k, o = check_name("key", key), check_name("owner", owner)
    ttl = check_ttl(ttl_ms)
    return HoldTerms(key, owner, k, o, ttl, 0, check_millis("timeout_ms", timeout_ms))


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


class Ticket:
    """One held lease as its renewer sees it, with the loss rule and the backoff.

    ``due`` is when it wants renewing next, ``interval`` its renewal period and ``deadline``
    its conservative local expiry (seconds of the driver's clock); ``fence`` the fence it was
    granted. The renewer calls ``renewed(started, renewal)`` after a renewal that started at
    ``started`` kept it (``renewal`` None when the provider reports no fence and expiry),
    ``failed(exc, now)`` after a database error (it is retried: see `backoff`), and
    ``gone(reason)`` once it is lost (`judge`).
    """

    __slots__ = (
        "deadline",
        "due",
        "failed",
        "failures",
        "fence",
        "gone",
        "interval",
        "k",
        "key",
        "o",
        "owner",
        "renewed",
        "ttl_ms",
        "ttl_s",
    )

    def __init__(
        self,
        terms: HoldTerms,
        *,
        renewed: Callable[[float, Renewal | None], None],
        failed: Callable[[BaseException, float], None],
        gone: Callable[[str], None],
    ) -> None:
        self.key, self.owner, self.ttl_ms = terms.key, terms.owner, terms.ttl_ms
        self.k, self.o = terms.k, terms.o  # stored forms, for `CheckedCalls`
        self.ttl_s = terms.ttl_ms / 1000
        self.interval = terms.renew_every_ms / 1000
        self.due = 0.0
        self.deadline = 0.0  # start of the last good request + TTL
        self.fence: int | None = None
        self.failures = 0  # consecutive failed renewals
        self.renewed, self.failed, self.gone = renewed, failed, gone

    def grant(self, started: float, fence: int | None) -> None:
        """Granted with ``fence`` by a request that started at ``started``."""
        self.fence = fence
        self.deadline = started + self.ttl_s
        self.due = started + self.interval

    def judge(self, held: bool, renewal: Renewal | None) -> str | None:
        """Why a renewal's answer loses the lease (gone, or its fence moved), else None."""
        return fence_moved(self.fence, renewal) if held else GONE

    def kept(self, started: float) -> float | None:
        """A renewal that started at ``started`` kept the lease: the deadline moves on. Returns
        how many seconds behind its schedule (the last good start, or the grant, plus the
        interval) it started when that is more than half the interval (a late renewal), else
        None."""
        behind = started - (self.deadline - self.ttl_s) - self.interval
        self.deadline = max(self.deadline, started + self.ttl_s)
        self.due = started + self.interval
        self.failures = 0
        return behind if behind > self.interval / 2 else None

    def backoff(self, now: float) -> float:
        """A renewal failed at ``now``: the delay until the retry (also set as ``due``)."""
        self.failures += 1
        delay: float = min(self.interval, BACKOFF_FIRST * 2.0 ** (self.failures - 1))
        self.due = now + delay
        return delay

    def alive(self, now: float) -> bool:
        """True until the conservative deadline."""
        return now < self.deadline

    def expiry_reason(self) -> str:
        """Why the lease counts as lost once its deadline passed."""
        reason = "it expired before it could be renewed"
        if self.failures:
            reason += f" ({self.failures} renewal attempts failed)"
        return reason


def due_groups(tickets: Iterable[Ticket], now: float) -> dict[int, list[Ticket]]:
    """The tickets a tick at ``now`` renews (those that used at least half of their interval,
    so leases taken at different moments fall into step), grouped by TTL: one statement each."""
    groups: dict[int, list[Ticket]] = {}
    for ticket in tickets:
        if ticket.due - ticket.interval / 2 <= now:
            groups.setdefault(ticket.ttl_ms, []).append(ticket)
    return groups
