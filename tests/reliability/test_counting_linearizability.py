"""Linearizability of counting leases: histories of several processes racing on ``limit=N`` keys,
judged by database time against the counting model (`_counting_model`).

Four processes of three clients call acquire (``limit=N``), ``get_lease_holders``, renew,
transfer and release on three counting keys (limits 3, 3 and 2) as five owners shared between
processes, with TTLs short enough to expire mid-run, and record each call with the database
times the provider reports (`_workers`). Every history must be explained by one order of the
calls in which no instant has more than N live grants, every refusal had N live holders, every
holders list was exact at one instant, and fences rose with every grant. Coalescing is forced
on (``coalesce="always"``): the plain statements a counting key's release, renewal and transfer
try first go out in multi-row batches.

``SQL_LEASE_SOAK_SECONDS`` (default 4) keeps the rounds going, on fresh keys, that long.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import pytest

from sql_lease import SqlLeaseProvider

from ._counting_model import check_counting, counting_model
from ._linearize import Op, search
from ._workers import Plan, calibrate, process_worker, run_clients, to_ops

SOAK_SECONDS = float(os.environ.get("SQL_LEASE_SOAK_SECONDS", "4"))
PROCESSES = 4
TASKS = 3
OPS_PER_ROUND = 45  # per client


def keys_of(prefix: str) -> dict[str, int]:
    return {f"{prefix}\0hot": 3, f"{prefix}\0\u00e9": 3, prefix: 2}


def run_round(ex: ProcessPoolExecutor, url: str, limits: dict[str, int], seed: int) -> list[Op]:
    plan = Plan(
        keys=tuple(limits), ops=OPS_PER_ROUND, coalesce="always", limits=tuple(limits.items())
    )
    start_at = time.time() + 0.3
    futures = [
        ex.submit(process_worker, url, f"p{p}", plan, seed + p, TASKS, 10.0, start_at)
        for p in range(PROCESSES)
    ]
    ops: list[Op] = []
    for f in futures:
        out = f.result(timeout=120)
        ops += to_ops(out["calls"], out["cal"], first_id=len(ops))
        COALESCED.update(dict(zip(("batches", "calls"), out["coalesced"], strict=True)))
    return ops


#: Multi-row statements the workers sent, and the calls they carried (all rounds).
COALESCED: Counter[str] = Counter()


def summarize(ops: list[Op], limits: dict[str, int]) -> Counter[str]:
    c: Counter[str] = Counter()
    for op in ops:
        if op.kind == "holders":
            c["holders:full" if len(op.result) == limits[op.key] else "holders:not full"] += 1
            continue
        ok = bool(op.result) and (op.kind != "acquire" or op.result[0])
        c[f"{op.kind}:{'hit' if ok else 'miss'}"] += 1
    return c


def refuted(ops: list[Op], falsified: Op, limits: dict[str, int]) -> bool:
    """No order explains ``falsified``'s key up to it (its calls invoked before it completed)."""
    assert falsified.hi is not None
    prefix = [op for op in ops if op.key == falsified.key and op.lo <= falsified.hi]
    linearizable, _, _ = search(prefix, counting_model(limits))
    return not linearizable


@pytest.mark.timeout(SOAK_SECONDS + 150)
def test_counting_histories_of_racing_processes_are_linearizable(history_url: str) -> None:
    rng = random.Random(os.environ.get("SQL_LEASE_SEED", "counting"))
    deadline = time.monotonic() + SOAK_SECONDS
    totals: Counter[str] = Counter()
    rounds = explored = 0
    COALESCED.clear()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(PROCESSES, mp_context=context) as ex:
        while rounds == 0 or time.monotonic() < deadline:
            limits = keys_of(f"cnt{rng.randrange(10**9)}")
            ops = run_round(ex, history_url, limits, rng.randrange(10**6))
            assert not any(op.error for op in ops), [op.describe() for op in ops if op.error]
            verdict = check_counting(ops, limits)
            assert verdict.ok, verdict.report()
            rounds += 1
            explored += verdict.explored
            totals += summarize(ops, limits)
    print(f"rounds={rounds} search nodes={explored} {dict(totals)} coalesced={dict(COALESCED)}")
    # The histories exercised the contract: full keys, refusals, expiry, every call's outcomes.
    # Per round (540 calls) a loaded machine saw 8 to 29 refusals (its processes start apart,
    # so fewer calls meet): the bars are well below what a round does, not its average.
    for outcome in ("acquire:hit", "renew:hit", "renew:miss", "release:hit"):
        assert totals[outcome] > 10 * rounds, (outcome, dict(totals))
    for outcome in ("acquire:miss", "transfer:hit", "transfer:miss", "holders:full"):
        assert totals[outcome] > 2 * rounds, (outcome, dict(totals))
    assert totals["holders:not full"] > rounds, dict(totals)
    assert COALESCED["calls"] > COALESCED["batches"] > 0, dict(COALESCED)
    # The checker has teeth on these histories: one falsified result is caught.
    wins = [op for op in ops if op.kind == "acquire" and op.result[0]]
    victim = wins[len(wins) // 2]
    _, owner, fence, exp = victim.result
    intruder = replace(victim, id=10**6, owner="intruder", result=(True, "intruder", fence, exp))
    assert refuted([*ops, intruder], intruder, limits)
    zeroed = replace(victim, result=(True, owner, 0, exp))  # a fence no grant ever had
    assert refuted([zeroed if op is victim else op for op in ops], zeroed, limits)


ADMITS = "pg_catalog.jsonb_array_length(s.cur) OPERATOR(pg_catalog.<) $4"
ONE_MORE = "pg_catalog.jsonb_array_length(s.cur) OPERATOR(pg_catalog.<=) $4"


async def test_the_checker_catches_a_provider_that_admits_one_holder_too_many(
    database_url: str,
) -> None:
    """A provider whose counting acquire counts ``<=`` instead of ``<`` (N+1 holders) yields
    histories the counting model rejects."""
    provider = SqlLeaseProvider.from_url(database_url, timeout=10, schema="public")
    counting = provider._sql.counting
    assert counting is not None and ADMITS in counting.acquire.sql, "update this mutant"
    wrong = replace(counting.acquire, sql=counting.acquire.sql.replace(ADMITS, ONE_MORE))
    provider._sql = replace(provider._sql, counting=replace(counting, acquire=wrong))
    limits = keys_of(f"mutant{random.randrange(10**9)}")
    try:
        cal = await calibrate(provider)
        plan = Plan(keys=tuple(limits), ops=120, pause=0.1, limits=tuple(limits.items()))
        calls = await run_clients(provider, "m", plan, seed=11, tasks=4)
    finally:
        await provider.aclose()
    verdict = check_counting(to_ops(calls, cal), limits)
    assert not verdict.ok, f"{len(calls)} calls and the checker saw nothing wrong"
    print(verdict.report())
