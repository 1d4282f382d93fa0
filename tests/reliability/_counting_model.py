"""The sequential model of counting leases (``limit=N``), for the linearizability search.

A key's state is its limit N, its stored grants (one per owner: fence and expiry, each known
exactly or as bounds) and the greatest fence it is known to have had. The model, as
`docs/explanation/counting-leases.md` states it:

- acquire: an owner holding a live grant renews it (fence kept); else it gets a new grant when
  fewer than N grants are live, with a fence above every earlier grant of the key; else it is
  refused, which must be justified: N live grants, and the named holder is one of them, the
  one whose grant ends first, with its own fence and expiry;
- renew: the owner's live grant gets a new expiry; release: the owner's grant is removed (a
  live one must be; an expired one may already be gone, pruned by another write);
  transfer: the owner's live grant goes to an owner holding no live grant, with a new fence
  (``transfer_lease`` reports a bool: that fence is carried as bounds until seen);
- holders (``get_lease_holders``): exactly the grants live at one instant of its window.

Each write rewrites the row with its live grants only (an expired grant is pruned), so the
model drops the expired grants at the instant it judges a write. Time is the database clock,
as in `_history`: each op is judged at an instant of its window (a stamped write just before
its stamp); the instants worth trying are the window's start and every grant expiry inside it,
since liveness changes only there. Ops of unknown outcome may have taken effect at any instant
after their invocation, or never; their unseen fences and expiries are bounds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ._history import stamp as plain_stamp
from ._linearize import INF, STAMP_SLACK_US, Model, Op, Verdict, check, show_us

__all__ = ["check_counting", "counting_model", "describe_state"]

# A grant: (owner, fence_lo, fence_hi, exp_lo, exp_hi); fence_lo == fence_hi once known.
Grant = tuple[str, int, int, int, int]
# A key's state: (limit, grants sorted by owner, greatest fence the key is known to reach).
State = tuple[int, tuple[Grant, ...], int]


def _show_range(lo: int, hi: int, show: Any = str) -> str:
    return show(lo) if lo == hi else f"in [{show(lo)}, {show(hi)}]"


def describe_state(state: State) -> str:
    limit, grants, last = state
    shown = "; ".join(
        f"{o!r} fence {_show_range(flo, fhi)} expires {_show_range(elo, ehi, show_us)}"
        for o, flo, fhi, elo, ehi in grants
    )
    return f"limit {limit}, grants: {shown or 'none'} (last fence {last})"


def stamp(op: Op) -> int | None:
    """The database instant a write reports, as the plain model reads it (a bare True, a
    transfer's answer without a reported fence, reports none)."""
    return None if isinstance(op.result, bool) else plain_stamp(op)


def _window(op: Op) -> tuple[int, int]:
    at = stamp(op)
    if at is not None:
        return at - STAMP_SLACK_US, at
    return op.lo, INF if op.hi is None or op.unknown else op.hi


def _instants(grants: tuple[Grant, ...], lo: int, hi: int) -> list[int]:
    """The instants of [lo, hi] between which no grant's liveness can change."""
    found = {lo}
    for g in grants:
        found.update(e for e in (g[3], g[4]) if lo < e <= hi)
    return sorted(found)


def _views(grants: tuple[Grant, ...], tau: int) -> Iterator[tuple[tuple[Grant, ...], set[str]]]:
    """Each way ``grants`` can be at ``tau``: the grants (bounds narrowed) and the live owners.
    Live means ``tau < expiry``; a grant whose expiry is a range around ``tau`` goes both ways."""
    views: list[tuple[list[Grant], set[str]]] = [([], set())]
    for g in grants:
        o, flo, fhi, elo, ehi = g
        if tau < elo:
            ways = [(g, True)]
        elif tau >= ehi:
            ways = [(g, False)]
        else:
            ways = [((o, flo, fhi, tau + 1, ehi), True), ((o, flo, fhi, elo, tau), False)]
        views = [
            ([*gs, way], live | {o} if alive else live) for gs, live in views for way, alive in ways
        ]
    for gs, live in views:
        yield tuple(gs), live


def _with(
    grants: Iterable[Grant], new: Grant | None = None, drop: str | None = None
) -> tuple[Grant, ...]:
    kept = [g for g in grants if g[0] != drop and (new is None or g[0] != new[0])]
    if new is not None:
        kept.append(new)
    return tuple(sorted(kept))


def _bind(g: Grant, fence: int | None, exp: int | None) -> Grant | None:
    """``g`` with its fence and expiry observed (None: not observed), or None if impossible."""
    o, flo, fhi, elo, ehi = g
    if fence is not None:
        if not flo <= fence <= fhi:
            return None
        flo = fhi = fence
    if exp is not None:
        if not elo <= exp <= ehi:
            return None
        elo = ehi = exp
    return (o, flo, fhi, elo, ehi)


def _granted(
    grants: tuple[Grant, ...], last: int, owner: str, fence: int | None, elo: int, ehi: int
) -> tuple[tuple[Grant, ...], int] | None:
    """A new grant for ``owner``: its fence above every earlier grant's (None: unknown, carried
    as a lower bound)."""
    if fence is None:
        return _with(grants, (owner, last + 1, INF, elo, ehi)), last + 1
    if fence <= last:
        return None
    earlier = []
    for o, flo, fhi, e1, e2 in grants:
        fhi = min(fhi, fence - 1)
        if flo > fhi:
            return None
        earlier.append((o, flo, fhi, e1, e2))
    return _with(earlier, (owner, fence, fence, elo, ehi)), fence


def _grant_of(grants: Iterable[Grant], owner: str) -> Grant | None:
    return next((g for g in grants if g[0] == owner), None)


def step(state: State, op: Op) -> list[State]:
    """Every state in which ``op`` can leave ``state`` when it goes next and returns its result."""
    limit, grants, last = state
    lo, hi = _window(op)
    out: set[State] = set()
    for tau in _instants(grants, lo, hi):
        for view, live in _views(grants, tau):
            alive = tuple(g for g in view if g[0] in live)
            judge = _unknown if op.unknown else _known
            for new in judge(op, tau, hi, limit, view, alive, live, last):
                if new is not None:
                    out.add((limit, new[0], new[1]))
    return list(out)


Outcome = tuple[tuple[Grant, ...], int] | None


def _known(
    op: Op,
    tau: int,
    hi: int,
    limit: int,
    view: tuple[Grant, ...],
    alive: tuple[Grant, ...],
    live: set[str],
    last: int,
) -> Iterator[Outcome]:
    kind, r, o = op.kind, op.result, op.owner
    mine = _grant_of(alive, o)
    if kind == "acquire":
        acquired, holder, fence, exp = r
        if acquired:
            if holder != o:
                return
            if mine is not None:  # renewed: fence kept, expiry reset
                bound = _bind(mine, fence, None)
                if bound is not None:
                    yield _with(alive, (o, fence, fence, exp, exp)), max(last, fence)
            elif len(alive) < limit:
                yield _granted(alive, last, o, fence, exp, exp)
            return
        # Refused: the limit's worth of live grants, the named one ending first.
        named = _grant_of(alive, holder)
        if mine is not None or len(alive) != limit or named is None or holder == o:
            return
        bound = _bind(named, fence, exp)
        if bound is None:
            return
        rest: list[Grant] = [bound]
        for g in alive:
            if g[0] != holder:
                if g[4] < exp:
                    return
                rest.append((g[0], g[1], g[2], max(g[3], exp), g[4]))
        yield tuple(sorted(rest)), max(last, fence)
    elif kind == "holders":
        if len(r) != len(alive) or len({owner for owner, _, _ in r}) != len(r):
            return
        seen: list[Grant] = []
        for owner, fence, exp in r:
            found = _grant_of(alive, owner)
            bound = None if found is None else _bind(found, fence, exp)
            if bound is None:
                return
            seen.append(bound)
        expired = [g for g in view if g[0] not in live]
        yield tuple(sorted(seen + expired)), max([last, *(f for _, f, _ in r)])
    elif kind == "renew":
        if r is None:
            if mine is None:
                yield view, last
            return
        fence, exp = r
        bound = None if mine is None else _bind(mine, fence, None)
        if bound is not None:
            yield _with(alive, (o, fence, fence, exp, exp)), max(last, fence)
    elif kind == "transfer":
        yield from _transfer(op, tau, hi, view, alive, live, last, INF)
    elif kind == "release":
        if r is None:
            if mine is None:  # an expired grant of the owner may have been pruned already
                yield view, last
            return
        fence, _ = r
        stored = _grant_of(view, o)
        if stored is not None and _bind(stored, fence, None) is not None:
            yield _with(alive, drop=o), max(last, fence)
    else:
        raise ValueError(f"no counting model for {kind!r}")


def _transfer(
    op: Op,
    tau: int,
    hi: int,
    view: tuple[Grant, ...],
    alive: tuple[Grant, ...],
    live: set[str],
    last: int,
    cap: int,
) -> Iterator[Outcome]:
    """A transfer judged at ``tau``; ``cap``: the latest its new expiry can be (unknown: INF)."""
    o, to, r, ttl = op.owner, op.to_owner, op.result, (op.ttl_ms or 0) * 1000
    assert to is not None
    mine = _grant_of(alive, o)
    done = op.unknown or bool(r)
    if not done:
        if mine is None or (to != o and to in live):
            yield view, last
        return
    if mine is None or (to != o and to in live):
        return
    fence, elo, ehi = None, tau + ttl, min(cap, hi + ttl)
    if isinstance(r, tuple):  # a reporting transfer: the new fence and expiry
        fence, elo, ehi = r[0], r[1], r[1]
    if to == o:
        bound = _bind(mine, fence, None)
        if bound is not None:
            yield _with(alive, (o, bound[1], bound[2], elo, ehi)), max(last, fence or 0)
        return
    yield _granted(_with(alive, drop=o), last, to, fence, elo, ehi)


def _unknown(
    op: Op,
    tau: int,
    hi: int,
    limit: int,
    view: tuple[Grant, ...],
    alive: tuple[Grant, ...],
    live: set[str],
    last: int,
) -> Iterator[Outcome]:
    """An op with no answer that took effect at ``tau`` (only effects that change something:
    a no-op is the same as never applying it)."""
    o, ttl = op.owner, (op.ttl_ms or 0) * 1000
    mine = _grant_of(alive, o)
    if op.kind in ("acquire", "renew") and mine is not None:
        yield _with(alive, (o, mine[1], mine[2], tau + ttl, INF)), last
    elif op.kind == "acquire" and len(alive) < limit:
        yield _granted(alive, last, o, None, tau + ttl, INF)
    elif op.kind == "transfer":
        yield from _transfer(op, tau, INF, view, alive, live, last, INF)
    elif op.kind == "release" and _grant_of(view, o) is not None:
        yield _with(alive, drop=o), last


def _relevant(op: Op) -> bool:
    """Failed ops known not to have applied, and unanswered reads, cannot matter."""
    if op.error is not None and not op.unknown:
        return False
    return not (op.unknown and op.kind == "holders")


def _fences(op: Op) -> Iterable[int]:
    r = op.result
    if op.kind == "acquire":
        return (r[2],)
    if op.kind == "holders":
        return (f for _, f, _ in r)
    if op.kind in ("renew", "release") or (op.kind == "transfer" and isinstance(r, tuple)):
        return (r[0],)
    return ()


def counting_model(limits: Mapping[str, int]) -> Model:
    """The counting model of keys held with the given limits (key -> N)."""
    return Model(
        lambda key: (limits[key], (), 0),
        step,
        describe_state,
        _relevant,
        _fences,
        "the counting model",
    )


def check_counting(ops: Iterable[Op], limits: Mapping[str, int]) -> Verdict:
    """Check a history of counting calls on keys of the given limits; never raises for a bad
    history."""
    return check(ops, counting_model(limits))
