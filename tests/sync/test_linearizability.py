"""Linearizability of the sync providers: processes x threads, judged in database time.

Three worker processes with three client threads each (one sync provider per process) call
every operation on a few hot keys with short TTLs, as owners shared between processes, and
record each call with the database times the provider reports. The checker of
tests/reliability (`_history`, Wing & Gong / Lowe) must explain every history by some order of
the calls, consistent with real time and with the database clock, in which each call did
exactly what SPEC §3's sequential model says. On PostgreSQL and on SQLite (one file, shared).

``SQL_LEASE_SOAK_SECONDS`` (default: one round) keeps it going in rounds on fresh keys.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from dataclasses import replace
from multiprocessing.pool import Pool

import pytest

from tests.reliability._history import Op, check_history
from tests.reliability._workers import Plan, to_ops
from tests.reliability.test_linearizability import summarize

from ._history_workers import process_worker

SOAK_SECONDS = float(os.environ.get("SQL_LEASE_SOAK_SECONDS", "0"))
PROCESSES = 3
THREADS = 3  # client threads per process
OPS_PER_ROUND = 60  # per client


@pytest.fixture(params=["postgresql", "sqlite"])
def history_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(
        {"postgresql": "database_url", "sqlite": "sqlite_url"}[request.param]
    )
    return url


def run_round(pool: Pool, url: str, keys: tuple[str, ...], seed: int) -> list[Op]:
    plan = Plan(keys=keys, ops=OPS_PER_ROUND)
    start_at = time.time() + 0.5  # every process connected and calibrated: they start together
    pending = [
        pool.apply_async(process_worker, (url, f"p{p}", plan, seed + p, THREADS, start_at))
        for p in range(PROCESSES)
    ]
    ops: list[Op] = []
    for p in pending:
        out = p.get(timeout=120)
        ops += to_ops(out["calls"], out["cal"], first_id=len(ops))
    return ops


@pytest.mark.timeout(SOAK_SECONDS + 180)
def test_sync_histories_from_processes_and_threads_are_linearizable(
    history_url: str, worker_pool: Pool
) -> None:
    rng = random.Random(os.environ.get("SQL_LEASE_SEED", "sync-linearizability"))
    deadline = time.monotonic() + SOAK_SECONDS
    totals: Counter[str] = Counter()
    rounds = explored = 0
    last: list[Op] = []
    while rounds == 0 or time.monotonic() < deadline:
        tag = f"slin{rng.randrange(10**9)}"
        keys = (f"{tag}\0hot", f"{tag}\0\u00e9", f"{tag}")
        ops = run_round(worker_pool, history_url, keys, seed=rng.randrange(10**6))
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
    assert not check_history([*last, intruder]).ok
    zeroed = replace(victim, result=(True, owner, 0, exp))  # a fence no tenure ever had
    assert not check_history([zeroed if op is victim else op for op in last]).ok
