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
import time
from multiprocessing.pool import Pool

import pytest

from sql_lease import migrate
from tests.reliability._history import Op
from tests.reliability._workers import Plan, to_ops
from tests.reliability.test_linearizability import soak_rounds

from ._history_workers import process_worker

SOAK_SECONDS = float(os.environ.get("SQL_LEASE_SOAK_SECONDS", "0"))
PROCESSES = 3
THREADS = 3  # client threads per process
OPS_PER_ROUND = 60  # per client


@pytest.fixture(params=["postgresql", "sqlite", "mariadb"])
def history_url(request: pytest.FixtureRequest) -> str:
    if request.param == "mariadb":  # a database of the test's own
        made: str = request.getfixturevalue("make_mariadb_database")()
        migrate.upgrade(made)
        return made
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
    soak_rounds(
        lambda keys, seed: run_round(worker_pool, history_url, keys, seed),
        seed="sync-linearizability",
        tag="slin",
        seconds=SOAK_SECONDS,
    )
