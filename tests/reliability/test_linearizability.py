"""Linearizability: histories of concurrent calls from several processes, against SPEC §3's model.

The workers call every operation on a few hot keys with short TTLs, as several owners shared
between processes, and record each call with the database times the provider reports. The checker
(`_history`) must explain every history by some order of the calls, consistent with real time and
with the database clock, in which each call did exactly what the sequential model says.

``SQL_LEASE_SOAK_SECONDS`` (default 4) keeps the run going, in rounds on fresh keys, for that
many seconds: ``SQL_LEASE_SOAK_SECONDS=600 pytest tests/reliability -k soak -s``.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from sql_lease import SqlLeaseProvider

from ._history import Op, check_history, search, us
from ._workers import Plan, calibrate, process_worker, run_clients, to_ops

T0 = us(datetime(2026, 1, 1, tzinfo=UTC))
SOAK_SECONDS = float(os.environ.get("SQL_LEASE_SOAK_SECONDS", "4"))
PROCESSES = 3
TASKS = 2  # concurrent clients per process
OPS_PER_ROUND = 70  # per client


def ms(x: float) -> int:
    return T0 + round(x * 1000)


class H:
    """Builds a crafted history, times in milliseconds after T0."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(
        self,
        kind: str,
        owner: str,
        lo: float,
        hi: float | None,
        result: object = None,
        *,
        key: str = "k",
        to: str | None = None,
        ttl: int | None = None,
        error: str | None = None,
        unknown: bool = False,
    ) -> H:
        self.ops.append(
            Op(
                len(self.ops),
                f"c{len(self.ops)}",
                key,
                kind,
                owner,
                ms(lo),
                None if hi is None else ms(hi),
                result,
                to,
                ttl,
                unknown,
                error,
            )
        )
        return self

    def acquire(self, owner: str, lo: float, hi: float, at: float, fence: int, ttl: int = 1000):
        return self.add(
            "acquire", owner, lo, hi, (True, owner, fence, ms(at) + ttl * 1000), ttl=ttl
        )

    def lost(self, owner: str, lo: float, hi: float, holder: str, fence: int, expires: float):
        return self.add("acquire", owner, lo, hi, (False, holder, fence, ms(expires)), ttl=1000)

    def owner(self, lo: float, hi: float, holder: str | None, key: str = "k"):
        return self.add("get_owner", "", lo, hi, holder, key=key)

    def check(self):
        return check_history(self.ops)


# -- the checker rejects what the model cannot explain ----------------------------------------


def test_checker_rejects_two_owners_holding_one_key_at_once() -> None:
    h = H().acquire("a", 0, 2, at=1, fence=1).acquire("b", 3, 5, at=4, fence=2)
    verdict = h.check()
    assert not verdict.ok
    report = verdict.report()
    print(report)
    assert "not linearizable" in report and "acquire('b'" in report
    assert "held by 'a' fence=1" in report  # the state the model was in when it got stuck


def test_checker_accepts_the_same_acquires_once_the_first_lease_expired() -> None:
    assert (
        H()
        .acquire("a", 0, 2, at=1, fence=1, ttl=10)
        .acquire("b", 30, 32, at=31, fence=2)
        .check()
        .ok
    )


def test_checker_accepts_concurrent_acquires_where_the_loser_names_the_winner() -> None:
    h = H().acquire("a", 0, 10, at=6, fence=7).lost("b", 1, 9, holder="a", fence=7, expires=1006)
    assert h.check().ok
    # ... but not a loser naming a holder that never was, nor the right holder's wrong fence.
    assert not H().acquire("a", 0, 10, at=6, fence=7).lost("b", 1, 9, "z", 7, 1006).check().ok
    assert not H().acquire("a", 0, 10, at=6, fence=7).lost("b", 1, 9, "a", 8, 1006).check().ok
    assert not H().acquire("a", 0, 10, at=6, fence=7).lost("b", 1, 9, "a", 7, 1007).check().ok


def test_checker_rejects_a_stale_read_after_the_acquire_completed() -> None:
    assert not H().acquire("a", 0, 2, at=1, fence=1).owner(3, 4, None).check().ok
    assert H().acquire("a", 0, 2, at=1, fence=1).owner(3, 4, "a").check().ok
    # Concurrent with the acquire, either answer is fine.
    assert H().acquire("a", 0, 2, at=1, fence=1).owner(0.5, 4, None).check().ok


def test_checker_judges_expiry_by_database_time() -> None:
    short = H().acquire("a", 0, 2, at=1, fence=1, ttl=10)  # expires at 11 ms
    assert short.owner(20, 21, None).check().ok
    assert not H().acquire("a", 0, 2, at=1, fence=1, ttl=10).owner(20, 21, "a").check().ok
    # A renew stamped well after the expiry cannot have found the lease live.
    late = H().acquire("a", 0, 2, at=1, fence=1, ttl=10)
    late.add("renew", "a", 5, 40, (1, ms(30) + 1000 * 1000), ttl=1000)
    assert not late.check().ok
    # Renewed in time: the lease lives on past its first expiry.
    ok = H().acquire("a", 0, 2, at=1, fence=1, ttl=10)
    ok.add("renew", "a", 3, 6, (1, ms(5) + 1000 * 1000), ttl=1000).owner(20, 21, "a")
    assert ok.check().ok


def test_checker_rejects_fences_that_do_not_increase() -> None:
    h = H().acquire("a", 0, 2, at=1, fence=5)
    h.add("release", "a", 3, 4, (5, ms(3.5))).acquire("b", 5, 6, at=5.5, fence=4)
    assert not h.check().ok
    # A re-acquire by the holder keeps its fence; a new fence there is a violation.
    assert H().acquire("a", 0, 2, at=1, fence=5).acquire("a", 3, 4, at=3.5, fence=5).check().ok
    assert not H().acquire("a", 0, 2, at=1, fence=5).acquire("a", 3, 4, at=3.5, fence=6).check().ok
    # One sequence for all keys: the same fence on two keys is a violation too.
    two = H().acquire("a", 0, 2, at=1, fence=5)
    two.add("acquire", "a", 0, 2, (True, "a", 5, ms(1) + 10**6), key="other", ttl=1000)
    verdict = two.check()
    assert not verdict.ok and "fence 5 was seen on several keys" in verdict.report()


def test_checker_rejects_a_transfer_that_left_a_gap() -> None:
    h = H().acquire("a", 0, 2, at=1, fence=1)
    h.add("transfer", "a", 3, 5, (2, ms(4) + 10**6), to="b", ttl=1000)
    assert h.check().ok
    h.acquire("c", 6, 8, at=7, fence=3)  # after a completed transfer: b holds it
    assert not h.check().ok


def test_checker_respects_real_time_order() -> None:
    # The release completed before the failed acquire was invoked: it cannot name 'a'.
    h = H().acquire("a", 0, 2, at=1, fence=1).add("release", "a", 3, 4, (1, ms(3.5)))
    assert not h.lost("b", 5, 6, "a", 1, 1001).check().ok
    h = H().acquire("a", 0, 2, at=1, fence=1).add("release", "a", 3, 6, (1, ms(5.5)))
    assert h.lost("b", 4, 5, "a", 1, 1001).check().ok  # overlapping: fine


def test_checker_treats_unknown_outcomes_as_maybe_and_errors_as_never() -> None:
    # A timed-out acquire with unknown outcome may have taken effect: 'a' holding it is explained.
    maybe = H().add("acquire", "a", 0, None, ttl=60_000, error="LeaseTimeoutError", unknown=True)
    assert maybe.owner(50, 51, "a").check().ok
    assert maybe.owner(52, 53, None).check().ok is False  # once held for 60 s, not free at once
    # The library said nothing was applied: then nobody can be holding it.
    never = H().add("acquire", "a", 0, 10, ttl=60_000, error="LeaseTimeoutError", unknown=False)
    assert not never.owner(50, 51, "a").check().ok
    # A later observation pins the unknown fence and expiry; contradicting them is caught.
    pinned = H().add("acquire", "a", 0, None, ttl=60_000, error="LeaseTimeoutError", unknown=True)
    pinned.add("get_lease", "", 50, 51, ("a", 9, ms(60_010)))
    assert pinned.check().ok
    pinned.add("get_lease", "", 52, 53, ("a", 8, ms(60_010)))
    assert not pinned.check().ok


def test_checker_prints_a_short_counterexample_for_a_long_history() -> None:
    h = H()
    t = 0.0
    for i in range(60):  # a long, valid prefix on a busy key
        h.acquire("a", t, t + 1, at=t + 0.5, fence=i + 1, ttl=1)
        t += 3
    h.owner(t, t + 1, None)
    h.acquire("b", t + 2, t + 3, at=t + 2.5, fence=100).owner(t + 4, t + 5, "a")
    verdict = h.check()
    assert not verdict.ok
    report = verdict.report()
    print(report)
    assert "shortest failing prefix: 63 of 63 ops" in report
    assert report.count("\n    #") <= 16


# -- real histories from several processes ----------------------------------------------------


def pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def run_round(
    ex: ProcessPoolExecutor,
    url: str,
    keys: tuple[str, ...],
    seed: int,
    coalesce: bool | str = True,
    tasks: int = TASKS,
) -> list[Op]:
    plan = Plan(keys=keys, ops=OPS_PER_ROUND, coalesce=coalesce)
    start_at = time.time() + 0.3
    futures = [
        ex.submit(process_worker, url, f"p{p}", plan, seed + p, tasks, 10.0, start_at)
        for p in range(PROCESSES)
    ]
    ops: list[Op] = []
    for f in futures:
        out = f.result(timeout=120)
        ops += to_ops(out["calls"], out["cal"], first_id=len(ops))
        batches, calls = out["coalesced"]
        COALESCED["batches"] += batches
        COALESCED["calls"] += calls
    return ops


#: Multi-row statements the workers sent, and the calls they carried (all rounds).
COALESCED: Counter[str] = Counter()


def summarize(ops: list[Op]) -> Counter[str]:
    c: Counter[str] = Counter()
    for op in ops:
        ok = op.result is not None and (op.kind != "acquire" or op.result[0])
        c[f"{op.kind}:{'hit' if ok else 'miss'}"] += 1
    return c


def soak_rounds(
    play: Callable[[tuple[str, ...], int], list[Op]], *, seed: str, tag: str, seconds: float
) -> None:
    """Race rounds on fresh keys (``play(keys, seed)`` returns one round's history) for
    ``seconds``, at least one round, each history judged by the checker; then check that the
    histories exercised the contract and that the checker catches a falsified result."""
    rng = random.Random(os.environ.get("SQL_LEASE_SEED", seed))
    deadline = time.monotonic() + seconds
    totals: Counter[str] = Counter()
    rounds = explored = 0
    last: list[Op] = []
    while rounds == 0 or time.monotonic() < deadline:
        prefix = f"{tag}{rng.randrange(10**9)}"
        keys = (f"{prefix}\0hot", f"{prefix}\0\u00e9", f"{prefix}")
        ops = play(keys, rng.randrange(10**6))
        assert not any(op.error for op in ops), [op.describe() for op in ops if op.error]
        verdict = check_history(ops)
        assert verdict.ok, verdict.report()
        rounds += 1
        explored += verdict.explored
        totals += summarize(ops)
        last = ops
    checked = sum(totals.values())
    print(f"rounds={rounds} ops checked={checked} search nodes={explored} {dict(totals)}")
    # The histories really exercised the contract: contention, expiry, every outcome.
    for outcome in ("acquire:hit", "acquire:miss", "renew:hit", "renew:miss", "transfer:hit"):
        assert totals[outcome] > 5 * rounds, (outcome, dict(totals))
    assert totals["release:hit"] > 5 * rounds and totals["get_owner:miss"] > rounds, dict(totals)
    # The same history with one result falsified is caught: the checker has teeth here too.
    wins = [op for op in last if op.kind == "acquire" and op.result[0]]
    victim = wins[len(wins) // 2]
    _, owner, fence, exp = victim.result
    intruder = replace(victim, id=10**6, owner="intruder", result=(True, "intruder", fence, exp))
    assert refuted([*last, intruder], intruder)
    zeroed = replace(victim, result=(True, owner, 0, exp))  # a fence no tenure ever had
    assert refuted([zeroed if op is victim else op for op in last], zeroed)


def refuted(ops: list[Op], falsified: Op) -> bool:
    """The checker finds no order for ``falsified``'s key: searched over that key's calls invoked
    before it completed (a prefix, which its falsified result already makes impossible) and
    without the counterexample's bisection, so that an exhaustive search stays small even when
    a loaded machine widened every call's time window."""
    assert falsified.hi is not None
    prefix = [op for op in ops if op.key == falsified.key and op.lo <= falsified.hi]
    linearizable, _, _ = search(prefix)
    return not linearizable


@pytest.mark.timeout(SOAK_SECONDS + 120)
def test_histories_from_racing_processes_are_linearizable(history_url: str) -> None:
    database_url = history_url
    with pool(PROCESSES) as ex:
        soak_rounds(
            lambda keys, seed: run_round(ex, database_url, keys, seed=seed),
            seed="linearizability",
            tag="lin",
            seconds=SOAK_SECONDS,
        )


@pytest.mark.timeout(SOAK_SECONDS + 120)
@pytest.mark.parametrize("coalesce", ["always", True])
def test_histories_of_coalesced_calls_are_linearizable(
    history_url: str, coalesce: bool | str
) -> None:
    """More clients per process, so that calls wait together and go out as multi-row
    statements: every caller's answer must still fit the sequential model ("always" sends
    every call through a batch; True lets batches form only from calls already waiting)."""
    database_url = history_url
    COALESCED.clear()
    with pool(PROCESSES) as ex:
        soak_rounds(
            lambda keys, seed: run_round(
                ex, database_url, keys, seed=seed, coalesce=coalesce, tasks=4
            ),
            seed=f"coalesced-{coalesce}",
            tag="coa",
            seconds=SOAK_SECONDS,
        )
    print(f"coalesce={coalesce}: {dict(COALESCED)}")
    if coalesce == "always":
        # Batches of several calls really formed (not only batches of one).
        assert COALESCED["calls"] > COALESCED["batches"] > 0, dict(COALESCED)


# -- the checker catches real providers that break the contract ------------------------------

LIVE = " AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()"
MUTANTS = {
    "renew ignores expiry": "renew",
    "get_lease_owner ignores expiry": "get_owner",
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
async def test_checker_catches_a_provider_that_ignores_expiry(
    database_url: str, mutant: str
) -> None:
    """A provider whose statement forgets the liveness condition yields histories the checker
    rejects: the search is strong enough for the bugs it exists to catch."""
    field = MUTANTS[mutant]
    # schema= given: the catalogue is final from the start (none is found and rebuilt later).
    provider = SqlLeaseProvider.from_url(database_url, timeout=10, schema="public")
    statement = getattr(provider._sql, field)
    assert LIVE in statement.sql, f"the {field} statement changed: update this mutant"
    mutant_statement = replace(statement, sql=statement.sql.replace(LIVE, ""))
    provider._sql = replace(provider._sql, **{field: mutant_statement})
    try:
        cal = await calibrate(provider)
        tag = f"mutant{random.randrange(10**9)}"
        plan = Plan(keys=(f"{tag}\0a", f"{tag}\0b"), ops=150, pause=0.2)
        calls = await run_clients(provider, "m", plan, seed=5, tasks=3)
    finally:
        await provider.aclose()
    verdict = check_history(to_ops(calls, cal))
    assert not verdict.ok, f"{mutant}: {len(calls)} calls and the checker saw nothing wrong"
    print(f"{mutant}:\n{verdict.report()}")
