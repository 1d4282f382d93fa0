"""The linearizability checker of plain lease histories: the sequential model of SPEC §3, searched
by `_linearize` (Wing & Gong / Lowe).

A history is a list of `Op`s (`_linearize`), each placed in database time, with the database
times the provider reports (an acquire's ``expires_at``, a renew's new expiry, a release's
instant).

Time is the database clock. Each op is judged (live means ``now < expires_at``) at some instant
inside its own window: a write that reports a database time judged the lease just before that
stamp, any other op somewhere between its invocation and its completion. The judging instants
need not increase along the linearization: PostgreSQL judges a statement while it runs but
publishes its effect when it commits, and a read's snapshot is older than its clock reading, so
an op ordered later can hold an earlier clock reading than its predecessor. Ownership and fences
are still checked exactly: a new owner's stamp must lie at or after the previous tenure's expiry.

An op that failed with ``outcome_unknown=True`` may have taken effect at any time after it was
invoked, or never; its unseen results (a new fence, an expiry) are carried as bounds until a
later observation pins them. An op that failed with ``outcome_unknown=False`` must not have taken
effect at all, so it is left out: a later observation that needs it makes the history fail.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ._linearize import (
    EPOCH,
    INF,
    STAMP_SLACK_US,
    Model,
    Op,
    Verdict,
    check,
    show_us,
    us,
)
from ._linearize import minimal_failing_prefix as _prefix
from ._linearize import search as _search

__all__ = [
    "EPOCH",
    "INF",
    "PLAIN",
    "STAMP_SLACK_US",
    "Op",
    "Verdict",
    "check_history",
    "minimal_failing_prefix",
    "search",
    "show_us",
    "stamp",
    "step",
    "us",
]

KINDS = ("acquire", "get_owner", "get_lease", "renew", "transfer", "release")


# -- the sequential model ---------------------------------------------------------------------

# State of one key: (owner, fence, exp_lo, exp_hi, last_fence). ``owner`` None: no lease (absent,
# released). The expiry is known to lie in [exp_lo, exp_hi] (equal once observed); ``fence`` is
# None while unknown (set by an op of unknown outcome); ``last_fence`` is the greatest fence the
# key is known to have had, which any new owner's fence must exceed.
State = tuple[str | None, int | None, int, int, int]
INITIAL: State = (None, None, 0, 0, 0)


def describe_state(state: State) -> str:
    owner, fence, lo, hi, last = state
    if owner is None:
        return f"no lease (last fence {last})"
    exp = show_us(lo) if lo == hi else f"in [{show_us(lo)}, {show_us(hi)}]"
    return f"held by {owner!r} fence={fence} expires {exp} (last fence {last})"


def _live(state: State, tau: int) -> State | None:
    """``state`` constrained to a lease that is live at ``tau``, or None if impossible."""
    owner, fence, lo, hi, last = state
    if owner is None or tau >= hi:
        return None
    return (owner, fence, max(lo, tau + 1), hi, last)


def _free(state: State, tau: int, tau_hi: int) -> tuple[State, int] | None:
    """``state`` with no live lease at some instant in [tau, tau_hi]; (state, that instant)."""
    owner, fence, lo, hi, last = state
    if owner is None:
        return state, tau
    at = max(tau, lo)
    if at > tau_hi:
        return None
    # Relaxed when the expiry is a range (outcome-unknown ops only): it ends by tau_hi.
    return (owner, fence, lo, min(hi, tau_hi), last), at


def _bind(state: State, fence: int, exp: int | None) -> State | None:
    """``state`` (which has an owner) with its fence and expiry observed as ``fence``/``exp``."""
    owner, known, lo, hi, last = state
    if known is None:
        if fence <= last:
            return None
        last = fence
    elif known != fence:
        return None
    if exp is not None:
        if not lo <= exp <= hi:
            return None
        lo = hi = exp
    return (owner, fence, lo, hi, last)


def _new_owner(state: State, owner: str, fence: int | None, lo: int, hi: int) -> State | None:
    last = state[4]
    if fence is not None:
        if fence <= last or (state[1] is not None and fence <= state[1]):
            return None
        last = fence
    return (owner, fence, lo, hi, last)


def _window(op: Op, stamp: int | None) -> tuple[int, int]:
    if stamp is not None:
        return stamp - STAMP_SLACK_US, stamp
    return op.lo, INF if op.hi is None else op.hi


def step(state: State, op: Op) -> list[State]:
    """Every state in which ``op`` can leave ``state`` when it goes next and returns its result."""
    out: list[State] = []
    if op.unknown:
        _step_unknown(state, op, out)
    else:
        _step_known(state, op, out)
    return out


def stamp(op: Op) -> int | None:
    """The database instant a successful write reports (its new expiry minus its TTL)."""
    r = op.result
    if op.unknown or r is None:
        return None
    if op.kind == "acquire" and r[0]:
        assert op.ttl_ms is not None
        return int(r[3] - op.ttl_ms * 1000)
    if op.kind in ("renew", "transfer"):
        assert op.ttl_ms is not None
        return int(r[1] - op.ttl_ms * 1000)
    if op.kind == "release":
        return int(r[1])
    return None


def _step_known(state: State, op: Op, out: list[State]) -> None:
    kind, r = op.kind, op.result
    tau, w_hi = _window(op, stamp(op))

    def emit(new: State | None) -> None:
        if new is not None:
            out.append(new)

    def free_then(make: Any) -> None:
        freed = _free(state, tau, w_hi)
        if freed is not None:
            emit(make(freed[0]))

    if kind == "acquire":
        acquired, holder, fence, exp = r
        if acquired:
            if holder != op.owner:
                return
            # Same owner, still live: expiry reset, fence unchanged.
            live = _live(state, tau)
            if live is not None and live[0] == op.owner:
                bound = _bind(live, fence, None)
                if bound is not None:
                    emit((bound[0], bound[1], exp, exp, bound[4]))
            # Free (absent or expired): a new tenure with a new fence.
            free_then(lambda s: _new_owner(s, op.owner, fence, exp, exp))
        else:
            live = _live(state, tau)
            if live is not None and live[0] == holder and holder != op.owner:
                emit(_bind(live, fence, exp))
    elif kind in ("get_owner", "get_lease"):
        if r is None:
            free_then(lambda s: s)
        else:
            holder, fence, exp = (r, None, None) if kind == "get_owner" else r
            live = _live(state, tau)
            if live is not None and live[0] == holder:
                emit(live if fence is None else _bind(live, fence, exp))
    elif kind in ("renew", "transfer", "release"):
        if r is None:
            # Not held live by the caller at tau: someone else's, absent, or expired.
            if state[0] != op.owner:
                emit(state)
            else:
                free_then(lambda s: s)
            return
        fence, t = r
        live = _live(state, tau)
        if live is None or live[0] != op.owner:
            return
        if kind == "renew" or (kind == "transfer" and op.to_owner == op.owner):
            bound = _bind(live, fence, None)
            if bound is not None:
                emit((bound[0], bound[1], t, t, bound[4]))
        elif kind == "transfer":
            assert op.to_owner is not None
            if live[1] is None or fence > live[1]:
                emit(_new_owner(live, op.to_owner, fence, t, t))
        else:  # release
            bound = _bind(live, fence, None)
            if bound is not None:
                emit((None, None, 0, 0, bound[4]))


def _step_unknown(state: State, op: Op, out: list[State]) -> None:
    """An op with no answer that took effect (the "never" case is not linearizing it at all).

    Only effects that change something are produced: a no-op is the same as never applying it.
    """
    tau = op.lo
    ttl_us = (op.ttl_ms or 0) * 1000
    kind = op.kind
    if kind == "acquire":
        live = _live(state, tau)
        if live is not None and live[0] == op.owner:
            out.append((live[0], live[1], tau + ttl_us, INF, live[4]))
        freed = _free(state, tau, INF)
        if freed is not None:
            s, at = freed
            new = _new_owner(s, op.owner, None, at + ttl_us, INF)
            if new is not None:
                out.append(new)
    elif kind in ("renew", "transfer", "release"):
        live = _live(state, tau)
        if live is None or live[0] != op.owner:
            return
        if kind == "release":
            out.append((None, None, 0, 0, live[4]))
        elif kind == "renew" or op.to_owner == op.owner:
            out.append((live[0], live[1], tau + ttl_us, INF, live[4]))
        else:
            assert op.to_owner is not None
            out.append((op.to_owner, None, tau + ttl_us, INF, live[4]))


# -- the model, searched -----------------------------------------------------------------------


def _relevant(op: Op) -> bool:
    """Drop what cannot matter: failed ops known not to have applied, and unanswered reads."""
    if op.error is not None and not op.unknown:
        return False  # the library says nothing was applied: the model must do without it
    return not (op.unknown and op.kind in ("get_owner", "get_lease"))


def _fences(op: Op) -> Iterable[int]:
    if op.kind == "acquire":
        return () if op.result[2] is None else (op.result[2],)
    if op.kind in ("renew", "transfer", "release"):
        return (op.result[0],)
    return ()


PLAIN = Model(lambda _key: INITIAL, step, describe_state, _relevant, _fences, "SPEC §3")


def search(ops: Sequence[Op], budget: int = 5_000_000) -> tuple[bool, int, Any]:
    """`_linearize.search` with the plain model."""
    return _search(ops, PLAIN, budget)


def minimal_failing_prefix(ops: Sequence[Op]) -> list[Op]:
    return _prefix(ops, PLAIN)


def check_history(ops: Iterable[Op]) -> Verdict:
    """Check a whole history (any number of keys); never raises for a bad history."""
    return check(ops, PLAIN)
