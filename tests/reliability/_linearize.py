"""The search of the linearizability checkers: histories of calls judged against a sequential
model (`_history`: plain leases, SPEC §3; `_counting_model`: counting leases).

A history is a list of `Op`s: who called what with which arguments, when (invocation and
completion, as a window of *database* time obtained by calibrating each client's clock against
``clock_timestamp()``), and what came back, including the database times the provider reports.
Keys are independent objects, so each key's sub-history is checked on its own.

The search is Wing & Gong's, as refined by Lowe and used by Knossos/Porcupine: take the ops in
invocation order, repeatedly pick one that may go next (no other pending op finished before it
was invoked), apply it to the model and check its result, backtrack when the model disagrees,
and remember every (set of ops done, model state) already explored. A `Model` says what one op
does to a state; ops of unknown outcome need not be placed at all (they may never have applied).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
INF = 1 << 62
#: A statement reads ``clock_timestamp()`` more than once: its condition a moment before the
#: value it stamps. The judged instant of a stamped op lies within this many microseconds before
#: its stamp. It is the checker's only tolerance.
STAMP_SLACK_US = 5_000


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
    - renew, transfer: None, or ``(fence, expires_us)`` (the new expiry); a counting transfer:
      a bool (``transfer_lease`` reports no fence)
    - release: None (no-op), or ``(fence, released_us)``
    - holders: the live grants, ``((owner, fence, expires_us), ...)`` (counting leases)
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
        args = [repr(self.owner)] if self.kind not in ("get_owner", "get_lease", "holders") else []
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
    if result is None or isinstance(result, str | bool):
        return repr(result)
    if kind == "acquire":
        acquired, owner, fence, exp = result
        return f"acquired={acquired} owner={owner!r} fence={fence} expires={show_us(exp)}"
    if kind == "get_lease":
        owner, fence, exp = result
        return f"owner={owner!r} fence={fence} expires={show_us(exp)}"
    if kind == "holders":
        return "[" + ", ".join(f"{o!r} fence={f} expires={show_us(e)}" for o, f, e in result) + "]"
    fence, t = result
    what = "at" if kind == "release" else "expires"
    return f"fence={fence} {what}={show_us(t)}"


@dataclass(frozen=True)
class Model:
    """A sequential model: each key's ``initial`` state, ``step`` (every state in which an op
    can leave a state when it goes next and returns its result), ``describe`` (a state, for
    counterexamples), ``relevant`` (the ops the search must place or may place), ``fences`` (the
    fences an op's result names: one sequence for all keys, so no fence names two keys),
    ``name`` (what the model is, for reports)."""

    initial: Callable[[str], Hashable]
    step: Callable[[Any, Op], list[Any]]
    describe: Callable[[Any], str]
    relevant: Callable[[Op], bool]
    fences: Callable[[Op], Iterable[int]]
    name: str


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


Node = tuple[int, Any]  # (mask of ops done, model state)


def search(ops: Sequence[Op], model: Model, budget: int = 5_000_000) -> tuple[bool, int, Any]:
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
    root: Node = (0, model.initial(ops[0].key) if ops else None)
    parents: dict[Node, tuple[Node | None, int]] = {root: (None, -1)}
    stack = [root]
    deepest, deepest_done = root, -1
    explored = 0
    step = model.step
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


def _counterexample(key: str, ops: Sequence[Op], model: Model, diagnostics: Any) -> str:
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
        f"key {key!r}: {len(ops)} ops are not linearizable with respect to {model.name}.",
        f"The longest explained order covers {len(path)} ops; its last steps were:",
        *(f"    {ordered[i].describe()}" for i in path[-8:]),
        f"leaving the model at: {model.describe(state)}.",
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


def minimal_failing_prefix(ops: Sequence[Op], model: Model) -> list[Op]:
    """The shortest prefix (by invocation) of a failing history that already fails on its own.

    Every such prefix is a real sub-history: all calls invoked before some instant, with the
    results they really returned. Bisection assumes failures persist once they appear, which is
    the usual case; the returned prefix is always verified to fail.
    """
    ordered = sorted(ops, key=lambda o: (o.lo, o.id))
    lo_n, hi_n = 1, len(ordered)
    while lo_n < hi_n:
        mid = (lo_n + hi_n) // 2
        if search(ordered[:mid], model)[0]:
            lo_n = mid + 1
        else:
            hi_n = mid
    prefix = ordered[:hi_n]
    assert not search(prefix, model)[0]
    return prefix


def check(ops: Iterable[Op], model: Model) -> Verdict:
    """Check a whole history (any number of keys) against ``model``; never raises for a bad
    history."""
    all_ops = list(ops)
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in all_ops:
        if model.relevant(op):
            by_key[op.key].append(op)
    verdict = Verdict(ok=True)
    for key, key_ops in sorted(by_key.items()):
        ok, explored, _ = search(key_ops, model)
        kv = KeyVerdict(key, len(key_ops), ok, explored)
        if not ok:
            verdict.ok = False
            prefix = minimal_failing_prefix(key_ops, model)
            _, _, small = search(prefix, model)
            kv.counterexample = (
                f"(shortest failing prefix: {len(prefix)} of {len(key_ops)} ops)\n"
                + _counterexample(key, prefix, model, small)
            )
        verdict.keys.append(kv)
    # Fences come from one sequence: a fence never names two different keys' tenures.
    fence_keys: dict[int, set[str]] = defaultdict(set)
    for op in all_ops:
        if op.error is None and op.result is not None:
            for fence in model.fences(op):
                fence_keys[fence].add(op.key)
    for fence, keys in sorted(fence_keys.items()):
        if len(keys) > 1:
            verdict.ok = False
            verdict.problems.append(f"fence {fence} was seen on several keys: {sorted(keys)!r}")
    return verdict
