"""One failover round against a `Replicated` pair, and what it cost (shared by the tests and
``scripts/failover-soak``).

Clients (asyncio tasks on a few providers, multi-host URL with ``target_session_attrs=
read-write``) race for a few hot keys with short TTLs: acquire, renew while they hold, release.
Mid-run the primary crashes (``pg_ctl stop -m immediate``) and the standby is promoted; with
``lag`` the replication link is stalled that long before the crash and cut with it, so the
commits the primary acknowledged meanwhile never reach the standby. Every acknowledged call is
recorded with its database-side result; `analyse` then counts, from the history alone and the
standby's rows just before promotion:

- writes and grants lost: acknowledged grants/renewals the promoted standby does not have;
- overlaps: two grants of one key, different owners, whose ownership intervals intersect
  (interval = from the grant's database time to the last acknowledged expiry, or to the start
  of its release call), with the longest intersection;
- fence inversions: a grant of a key whose fence is not above every fence granted earlier
  for it (earlier by database time, over the whole history: grants the old primary
  acknowledged and lost included), except the same owner's own fence again (a re-acquire of
  its live lease after a call whose outcome it did not learn);
- fences handed out twice: one fence value in grants of two different (key, owner) pairs, or
  re-drawn for the same pair after the failover although the standby had lost it.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, TypeVar

from sql_lease import LeaseError, SqlLeaseProvider, migrate

from .cluster import Replicated

T = TypeVar("T")
KEYS = ("hot-a", "hot-b", "hot-c")
SEQUENCE_BITS = 40  # migration 0004: fence = timeline << 40 | sequence value
MASK = (1 << SEQUENCE_BITS) - 1


def show_fence(fence: int) -> str:
    """``timeline:sequence value``, e.g. ``1:83`` (a plain sequence value shows as ``0:83``)."""
    return f"{fence >> SEQUENCE_BITS}:{fence & MASK}"


def _wall() -> datetime:
    return datetime.now(UTC)


@dataclass
class Grant:
    key: str
    owner: str
    fence: int
    start: datetime  # database time of the granting statement
    end: datetime  # last acknowledged expiry (or the start of the release call)
    acked_at: float  # monotonic, when the grant was acknowledged
    after_failover: bool = False


class Write(NamedTuple):
    """A write call: acknowledged, or failed (kind ``renew?``, ``release?``: it may have
    committed). ``lo``..``hi`` bound the expiry it set (for a release: the moment it ended the
    lease); ``at`` (acknowledged or failed) and ``started`` are monotonic times."""

    key: str
    kind: str
    fence: int
    lo: datetime
    hi: datetime
    at: float
    started: float


@dataclass
class Round:
    database: str = ""
    grants: list[Grant] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    crash_at: float = 0.0  # monotonic, once the primary is gone
    promoting_at: float = 0.0  # monotonic, just before the standby is promoted
    promoted_at: float = 0.0
    standby_rows: dict[str, tuple[int, datetime]] = field(default_factory=dict)
    first_success_after: float | None = None
    slowest_call: float = 0.0


@dataclass
class Figures:
    writes_lost: int
    grants_lost: int
    overlaps: list[float]  # window of each overlap, ms
    inversions: list[tuple[str, int, int]]  # (key, earlier fence, later lower fence)
    duplicates: list[int]
    errors: dict[str, int]
    recovered_ms: float | None
    slowest_call: float
    #: per key with lost writes: its last writes with their timing and the standby's row
    lost: list[str] = field(default_factory=list)

    def line(self) -> str:
        inv = ", ".join(
            f"{k}: {show_fence(a)} then {show_fence(b)}" for k, a, b in self.inversions[:3]
        )
        longest = max(self.overlaps, default=0.0)
        rec = "never" if self.recovered_ms is None else f"{self.recovered_ms:.0f} ms"
        return (
            f"acked writes lost {self.writes_lost} (grants {self.grants_lost}); "
            f"overlaps {len(self.overlaps)} (longest {longest:.0f} ms); "
            f"fence inversions {len(self.inversions)}{f' ({inv})' if inv else ''}; "
            f"fences twice {len(self.duplicates)}; errors {sum(self.errors.values())} "
            f"{dict(self.errors)}; first success {rec} after promotion; "
            f"slowest call {self.slowest_call:.2f} s"
        )


async def _client(
    provider: SqlLeaseProvider, rnd: Round, stop: asyncio.Event, rng: random.Random
) -> None:
    owner = f"o-{uuid.uuid4().hex[:8]}"
    mine: dict[str, Grant] = {}

    async def call(op: Awaitable[T]) -> tuple[T | None, bool]:
        """(result, acknowledged); on a `LeaseError` (None, False): the outcome is unknown."""
        t0 = time.monotonic()
        try:
            result = await op
        except LeaseError as exc:
            name = type(exc).__name__
            rnd.errors[name] = rnd.errors.get(name, 0) + 1
            await asyncio.sleep(0.02)
            return None, False
        finally:
            rnd.slowest_call = max(rnd.slowest_call, time.monotonic() - t0)
        now = time.monotonic()
        if rnd.promoted_at and now > rnd.promoted_at and rnd.first_success_after is None:
            rnd.first_success_after = now - rnd.promoted_at
        return result, True

    while not stop.is_set():
        key = rng.choice(KEYS)
        ttl = rng.randint(300, 1500)
        grant = mine.get(key)
        began = time.monotonic()
        if grant is None:
            res, _ = await call(provider.acquire_lease(key, owner, ttl))
            if res is not None and res.acquired:
                assert res.fence is not None and res.expires_at is not None
                g = Grant(
                    key,
                    owner,
                    res.fence,
                    res.expires_at - timedelta(milliseconds=ttl),
                    res.expires_at,
                    time.monotonic(),
                    after_failover=bool(rnd.crash_at),
                )
                rnd.grants.append(g)
                e = res.expires_at
                rnd.writes.append(Write(key, "grant", res.fence, e, e, time.monotonic(), began))
                mine[key] = g
        elif rng.random() < 0.7:
            renew_ttl = ttl
            started = _wall()
            ok, acked = await call(provider.renew_lease(key, owner, renew_ttl))
            if ok:
                # renew_lease says only True: the new expiry lies between these two bounds
                # (same host, so the client's clock is the server's).
                lo = started + timedelta(milliseconds=renew_ttl)
                hi = _wall() + timedelta(milliseconds=renew_ttl)
                grant.end = lo  # the latest renewal sets the expiry (it may shorten it)
                rnd.writes.append(Write(key, "renew", grant.fence, lo, hi, time.monotonic(), began))
            elif acked:
                del mine[key]
            else:
                # It may have committed (and shortened the expiry): held for sure only until
                # the earlier of the two expiries; recorded as in doubt (kind "renew?").
                lo = started + timedelta(milliseconds=renew_ttl)
                hi = _wall() + timedelta(milliseconds=renew_ttl)
                grant.end = min(grant.end, lo)
                rnd.writes.append(
                    Write(key, "renew?", grant.fence, lo, hi, time.monotonic(), began)
                )
        else:
            started = _wall()
            _, acked = await call(provider.release_lease(key, owner))
            grant.end = min(grant.end, started)
            kind = "release" if acked else "release?"
            w = Write(key, kind, grant.fence, started, _wall(), time.monotonic(), began)
            rnd.writes.append(w)
            del mine[key]
        await asyncio.sleep(rng.uniform(0.005, 0.03))


async def run_round(
    cluster: Replicated,
    *,
    lag: float,
    before: float = 1.5,
    after: float = 2.5,
    providers: int = 2,
    clients_per_provider: int = 4,
    seed: int | None = None,
    replies_held: float = 0.0,
) -> Round:
    """Race, crash the primary (after stalling the link ``lag`` s, or holding the standby's
    replies ``replies_held`` s: every write then in flight reaches the standby unacknowledged),
    promote, race on."""
    db = f"lease_{uuid.uuid4().hex[:8]}"
    cluster.create_database(db)
    url = cluster.url(db)
    await asyncio.to_thread(migrate.upgrade, url)
    cluster.wait_replayed()
    rng = random.Random(seed)
    rnd = Round(database=db)
    stop = asyncio.Event()
    ps = [
        SqlLeaseProvider.from_url(url, timeout=2.0, connect_timeout=1.0) for _ in range(providers)
    ]
    tasks = [
        asyncio.create_task(_client(p, rnd, stop, random.Random(rng.random())))
        for p in ps
        for _ in range(clients_per_provider)
    ]
    try:
        await asyncio.sleep(before)
        if lag:
            assert cluster.link is not None
            cluster.link.stall()
            await asyncio.sleep(lag)
        if replies_held:
            assert cluster.link is not None
            cluster.link.hold_replies()
            await asyncio.sleep(replies_held)
        await asyncio.to_thread(cluster.crash_primary)
        rnd.crash_at = time.monotonic()
        assert cluster.link is not None
        cluster.link.cut()
        # Judge what the standby will come up with: everything it received, replayed.
        await asyncio.to_thread(cluster.wait_received_replayed)
        rows = await asyncio.to_thread(
            cluster.standby.query,
            "SELECT convert_from(key, 'UTF8'), fence, expires_at FROM leases",
            db,
        )
        rnd.standby_rows = {str(k): (int(str(f)), e) for k, f, e in rows}  # type: ignore[misc]
        rnd.promoting_at = time.monotonic()
        await asyncio.to_thread(cluster.promote)
        rnd.promoted_at = time.monotonic()
        await asyncio.sleep(after)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for p in ps:
            await p.aclose()
    return rnd


def before_failover(rnd: Round) -> dict[str, list[tuple[Write, bool]]]:
    """Per key, in the order they were acknowledged, the writes the old primary may have
    committed, each with whether the standby must have it (with synchronous replication).

    Must: acknowledged before the promotion began (so by the old primary: the standby takes no
    writes until then), even if the client noticed only after the crash. May: a call that
    failed (kind ``...?``), or was acknowledged only after the promotion began, but had started
    before the crash ended: it may have committed before the crash without the client learning
    it, and a standby row may reflect it (e.g. a release whose reply the crash cut off).
    """
    per_key: dict[str, list[tuple[Write, bool]]] = {}
    for w in sorted(rnd.writes, key=lambda w: w.at):
        must = not w.kind.endswith("?") and w.at < rnd.promoting_at
        if must or w.started < rnd.crash_at:
            per_key.setdefault(w.key, []).append((w, must))
    return per_key


def _reflects(w: Write, expiry: datetime) -> bool:
    """Whether a row of ``w``'s fence with this expiry shows ``w`` (or a later write of it).

    A call in doubt counts only if the row holds exactly what it would have set: then it
    committed. An acknowledged renewal: the expiry it set or a later one (a longer renewal); an
    acknowledged release: the moment it ended the lease, or an earlier one (it found the lease
    expired already and changed nothing).
    """
    if w.kind.endswith("?"):
        return w.lo <= expiry <= w.hi
    return expiry <= w.hi if w.kind == "release" else expiry >= w.lo


def analyse(rnd: Round) -> Figures:
    """The figures of the module docstring, from one round's history."""
    lost_writes = 0
    lost_grants = 0
    lost_lines: list[str] = []
    for key, ws in before_failover(rnd).items():
        row = rnd.standby_rows.get(key)
        kept = 0  # writes up to the last one the standby's row reflects survived
        if row is not None:
            fence, expiry = row
            for i, (w, _) in enumerate(ws, 1):
                if fence > w.fence or (fence == w.fence and _reflects(w, expiry)):
                    kept = i
        lost = [w for w, must in ws[kept:] if must]
        lost_writes += len(lost)
        lost_grants += sum(1 for w in lost if w.kind == "grant")
        if lost:
            lost_lines.append(_describe(key, ws, kept, row, rnd.crash_at))
    overlaps: list[float] = []
    by_key: dict[str, list[Grant]] = {}
    for g in rnd.grants:
        by_key.setdefault(g.key, []).append(g)
    inversions: list[tuple[str, int, int]] = []
    for key, gs in by_key.items():
        gs.sort(key=lambda g: g.start)
        for i, a in enumerate(gs):
            for b in gs[i + 1 :]:
                if a.owner != b.owner and b.start < a.end:
                    overlaps.append((min(a.end, b.end) - b.start).total_seconds() * 1000)
        earlier: list[Grant] = []
        for g in sorted(gs, key=lambda g: (g.start, g.acked_at)):
            above = [e for e in earlier if e.fence >= g.fence]
            if any(e.fence > g.fence or e.owner != g.owner for e in above):
                inversions.append((key, max(e.fence for e in above), g.fence))
            earlier.append(g)
    seen: dict[int, Grant] = {}
    duplicates = []
    for g in rnd.grants:
        first = seen.setdefault(g.fence, g)
        if first is g:
            continue
        # The same owner re-acquiring its own live lease (after a call whose outcome it did not
        # learn) gets the same fence legitimately; across the failover only if the row survived.
        row = rnd.standby_rows.get(g.key)
        survived = row is not None and row[0] >= g.fence
        same = (first.key, first.owner) == (g.key, g.owner)
        if not same or (first.after_failover != g.after_failover and not survived):
            duplicates.append(g.fence)
    recovered = None if rnd.first_success_after is None else rnd.first_success_after * 1000
    return Figures(
        lost_writes,
        lost_grants,
        overlaps,
        inversions,
        duplicates,
        rnd.errors,
        recovered,
        rnd.slowest_call,
        lost_lines,
    )


def _describe(
    key: str,
    ws: list[tuple[Write, bool]],
    kept: int,
    row: tuple[int, datetime] | None,
    crash_at: float,
) -> str:
    """A key's last writes before the failover (``*``: counted lost; ``~``: may be missing),
    with their times relative to the end of the crash, next to the standby's row."""
    shown = "none" if row is None else f"fence {show_fence(row[0])} expires {row[1]:%H:%M:%S.%f}"
    lines = [f"{key}: standby row {shown}"]
    first = max(0, len(ws) - 8)
    for i, (w, must) in enumerate(ws[first:], first):
        mark = ("*" if i >= kept else " ") if must else "~"
        lines.append(
            f" {mark} {w.kind:8} fence {show_fence(w.fence)}"
            f" expiry {w.lo:%H:%M:%S.%f}..{w.hi:%H:%M:%S.%f} started"
            f" {(w.started - crash_at) * 1000:+.0f} ms, done {(w.at - crash_at) * 1000:+.0f} ms"
        )
    return "\n".join(lines)
