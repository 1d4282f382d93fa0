"""A linearizability checker for lease histories, judged against the sequential model of SPEC §3.

A history is a list of `Op`s: who called what with which arguments, when (invocation and
completion, as a window of *database* time obtained by calibrating each client's clock against
``clock_timestamp()``), and what came back, including the database times the provider reports
(an acquire's ``expires_at``, a renew's new expiry, a release's instant). Keys are independent
objects, so each key's sub-history is checked on its own.

The search is Wing & Gong's, as refined by Lowe and used by Knossos/Porcupine: take the ops in
invocation order, repeatedly pick one that may go next (no other pending op finished before it
was invoked), apply it to the model and check its result, backtrack when the model disagrees,
and remember every (set of ops done, model state) already explored.

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

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
INF = 1 << 62
#: A statement reads ``clock_timestamp()`` more than once: its condition a moment before the
#: value it stamps. The judged instant of a stamped op lies within this many microseconds before
#: its stamp. It is the checker's only tolerance.
STAMP_SLACK_US = 5_000

KINDS = ("acquire", "get_owner", "get_lease", "renew", "transfer", "release")


def us(t: datetime) -> int:
    """A database timestamp as integer microseconds since the epoch (exact)."""
    return (t - EPOCH) // timedelta(microseconds=1)


def show_us(t: int) -> str:
    if t >= INF:
        return "inf"
    return (EPOCH + timedelta(microseconds=t)).strftime("%H:%M:%S.%f")


@dataclass(frozen=True)
class Op:
    """One call and what it returned.

    ``lo``/``hi``: earliest and latest database time (microseconds) at which the call can have
    taken effect (its invocation and completion); ``hi`` is None when the call never completed
    with an answer (``unknown``). ``result`` by kind:

    - acquire: ``(acquired, owner, fence, expires_us)``
    - get_owner: owner or None
    - get_lease: None or ``(owner, fence, expires_us)``
    - renew, transfer: None, or ``(fence, expires_us)`` (the new expiry)
    - release: None (no-op), or ``(fence, released_us)``
    """

    id: int
    client: str
    key: str
    kind: str
    owner: str
    lo: int
    hi: int | None
    result: Any = None
    to_owner: str | None = None
    ttl_ms: int | None = None
    unknown: bool = False
    error: str | None = None

    @property
    def completed(self) -> bool:
        return self.hi is not None

    def describe(self) -> str:
        args = [repr(self.owner)] if self.kind not in ("get_owner", "get_lease") else []
        if self.to_owner is not None:
            args.append(repr(self.to_owner))
        if self.ttl_ms is not None:
            args.append(f"ttl={self.ttl_ms}ms")
        call = f"{self.kind}({', '.join(args)})"
        if self.error is not None:
            out = f"raised {self.error}" + (" (outcome unknown)" if self.unknown else "")
        else:
            out = f"-> {_show_result(self.kind, self.result)}"
        hi = "never" if self.hi is None else show_us(self.hi)
        return f"#{self.id} {self.client:>6} [{show_us(self.lo)} .. {hi}] {call} {out}"


def _show_result(kind: str, result: Any) -> str:
    if result is None or isinstance(result, str):
        return repr(result)
    if kind == "acquire":
        acquired, owner, fence, exp = result
        return f"acquired={acquired} owner={owner!r} fence={fence} expires={show_us(exp)}"
    if kind == "get_lease":
        owner, fence, exp = result
        return f"owner={owner!r} fence={fence} expires={show_us(exp)}"
    fence, t = result
    what = "at" if kind == "release" else "expires"
    return f"fence={fence} {what}={show_us(t)}"


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


# -- the search -------------------------------------------------------------------------------


@dataclass
class KeyVerdict:
    key: str
    ops: int
    ok: bool
    explored: int
    counterexample: str = ""


@dataclass
class Verdict:
    ok: bool
    keys: list[KeyVerdict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ops(self) -> int:
        return sum(k.ops for k in self.keys)

    @property
    def explored(self) -> int:
        return sum(k.explored for k in self.keys)

    def report(self) -> str:
        lines = [k.counterexample for k in self.keys if not k.ok] + self.problems
        return "\n\n".join(lines)


def _relevant(ops: Iterable[Op]) -> list[Op]:
    """Drop what cannot matter: failed ops known not to have applied, and unanswered reads."""
    kept = []
    for op in ops:
        if op.error is not None and not op.unknown:
            continue  # the library says nothing was applied: the model must do without it
        if op.unknown and op.kind in ("get_owner", "get_lease"):
            continue
        kept.append(op)
    return kept


Node = tuple[int, State]  # (mask of ops done, model state)


def search(ops: Sequence[Op], budget: int = 5_000_000) -> tuple[bool, int, Any]:
    """WGL search over ``ops`` (one key). Returns (linearizable, nodes explored, diagnostics).

    On failure the diagnostics are (deepest node, parent links, ops in search order), from which
    `_counterexample` prints the longest explained prefix and the ops that could not follow it.
    """
    ops = sorted(ops, key=lambda o: (o.lo, o.id))
    n = len(ops)
    lo = [o.lo for o in ops]
    hi = [INF if o.hi is None else o.hi for o in ops]
    goal = 0
    for i, o in enumerate(ops):
        if o.completed:
            goal |= 1 << i
    root: Node = (0, INITIAL)
    parents: dict[Node, tuple[Node | None, int]] = {root: (None, -1)}
    stack = [root]
    deepest, deepest_done = root, -1
    explored = 0
    while stack:
        node = stack.pop()
        mask, state = node
        explored += 1
        if explored > budget:
            raise RuntimeError(f"linearizability search gave up after {budget} nodes")
        if mask & goal == goal:
            return True, explored, node
        done = (mask & goal).bit_count()
        if done > deepest_done:
            deepest, deepest_done = node, done
        # Candidates: undone ops invoked before every other undone op completed. Ops are in
        # invocation order and complete after they start, so the scan stops at the first op
        # invoked after the earliest completion seen so far.
        first = ((~mask) & (mask + 1)).bit_length() - 1
        bound = INF
        candidates: list[int] = []
        for i in range(first, n):
            if lo[i] > bound:
                break
            if not mask >> i & 1:
                candidates.append(i)
                bound = min(bound, hi[i])
        for i in reversed(candidates):  # the earliest invoked is tried first
            for new_state in step(state, ops[i]):
                child = (mask | 1 << i, new_state)
                if child not in parents:
                    parents[child] = (node, i)
                    stack.append(child)
    return False, explored, (deepest, parents, ops)


def _counterexample(key: str, ops: Sequence[Op], diagnostics: Any) -> str:
    node, parents, ordered = diagnostics
    path: list[int] = []
    cur = node
    while cur is not None:
        parent, i = parents[cur]
        if i >= 0:
            path.append(i)
        cur = parent
    path.reverse()
    mask, state = node
    frontier = _frontier(ordered, mask)
    pending = [
        o for i, o in enumerate(ordered) if not mask >> i & 1 and o.completed and o.lo <= frontier
    ]
    lines = [
        f"key {key!r}: {len(ops)} ops are not linearizable with respect to SPEC §3.",
        f"The longest explained order covers {len(path)} ops; its last steps were:",
        *(f"    {ordered[i].describe()}" for i in path[-8:]),
        f"leaving the model at: {describe_state(state)}.",
        "None of these pending ops can take effect next:",
        *(f"    {o.describe()}" for o in pending[:8]),
    ]
    return "\n".join(lines)


def _frontier(ordered: Sequence[Op], mask: int) -> int:
    bound = INF
    for i, o in enumerate(ordered):
        if not mask >> i & 1 and o.hi is not None:
            bound = min(bound, o.hi)
    return bound


def minimal_failing_prefix(ops: Sequence[Op]) -> list[Op]:
    """The shortest prefix (by invocation) of a failing history that already fails on its own.

    Every such prefix is a real sub-history: all calls invoked before some instant, with the
    results they really returned. Bisection assumes failures persist once they appear, which is
    the usual case; the returned prefix is always verified to fail.
    """
    ordered = sorted(ops, key=lambda o: (o.lo, o.id))
    lo_n, hi_n = 1, len(ordered)
    while lo_n < hi_n:
        mid = (lo_n + hi_n) // 2
        if search(ordered[:mid])[0]:
            lo_n = mid + 1
        else:
            hi_n = mid
    prefix = ordered[:hi_n]
    assert not search(prefix)[0]
    return prefix


def check_history(ops: Iterable[Op]) -> Verdict:
    """Check a whole history (any number of keys); never raises for a bad history."""
    all_ops = list(ops)
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in _relevant(all_ops):
        by_key[op.key].append(op)
    verdict = Verdict(ok=True)
    for key, key_ops in sorted(by_key.items()):
        ok, explored, _ = search(key_ops)
        kv = KeyVerdict(key, len(key_ops), ok, explored)
        if not ok:
            verdict.ok = False
            prefix = minimal_failing_prefix(key_ops)
            _, _, small = search(prefix)
            kv.counterexample = (
                f"(shortest failing prefix: {len(prefix)} of {len(key_ops)} ops)\n"
                + _counterexample(key, prefix, small)
            )
        verdict.keys.append(kv)
    # Fences come from one sequence: a fence never names two different keys' tenures.
    fence_keys: dict[int, set[str]] = defaultdict(set)
    for op in all_ops:
        if op.error is None and op.result is not None:
            if op.kind == "acquire" and op.result[2] is not None:
                fence_keys[op.result[2]].add(op.key)
            elif op.kind in ("renew", "transfer", "release"):
                fence_keys[op.result[0]].add(op.key)
    for fence, keys in sorted(fence_keys.items()):
        if len(keys) > 1:
            verdict.ok = False
            verdict.problems.append(f"fence {fence} was seen on several keys: {sorted(keys)!r}")
    return verdict
