"""Several batches in flight at once behind a transaction pooler (issue 32).

Behind ``pooler="transaction"`` a provider keeps up to
`sql_lease.backends.postgres.POOLED_READ_BATCHES` read batches and ``POOLED_WRITE_BATCHES``
write batches (multi-row statements of coalesced calls) in flight at once, on the pooler's
several server connections. One write per key per batch must hold across them: a key in flight
in one batch is in no other until it ends (tests/unit/test_coalesce.py checks the rule itself).
Writes keep one batch in flight by default (a smaller batch costs the server more per call);
the race runs with three write batches, as raising the constant would (each worker sets it in
its own process), and with the default.

3 processes, each ONE provider shared by 32 tasks on 24 hot keys with TTLs of 15-200 ms, race
through a real PgBouncer (6 server connections); every grant is checked in database time by
the history checker of `tests.integration.test_races`: one live owner at a time, fences
increasing, every refused acquire naming a real holder; with three, write batches of one
provider did overlap in time.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from sql_lease.backends import PlanOptions
from sql_lease.backends.postgres import BACKEND, POOLED_READ_BATCHES, POOLED_WRITE_BATCHES

from ..integration.test_races import check_history, pool
from ._pooler_race_workers import shared_provider_tasks
from .pgbouncer import PgBouncer

pytestmark = [pytest.mark.infra, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def bouncer() -> Iterator[PgBouncer]:
    with PgBouncer(pool_mode="transaction", pool_size=6) as b:
        yield b


def test_only_the_transaction_pooler_plan_keeps_several_batches_in_flight() -> None:
    url = make_url("postgresql+asyncpg://u@127.0.0.1:6432/db")

    def planned(pooler: str | None) -> tuple[int, int]:
        options = PlanOptions(
            timeout=5.0,
            connect_timeout=5.0,
            synchronous_commit=True,
            pooler=pooler,
            connect_args={},
            engine_kwargs={},
        )
        plan = BACKEND.plan(url, options)
        return plan.read_batches, plan.write_batches

    assert POOLED_READ_BATCHES > 1
    assert planned("transaction") == (POOLED_READ_BATCHES, POOLED_WRITE_BATCHES)
    assert planned(None) == (1, 1) and planned("session") == (1, 1)


@pytest.mark.parametrize("write_batches", [3, POOLED_WRITE_BATCHES])
def test_tasks_sharing_a_provider_race_through_concurrent_batches_and_stay_correct(
    bouncer: PgBouncer, database_url: str, write_batches: int
) -> None:
    url = bouncer.url(make_url(database_url).database or "postgres")
    run = uuid.uuid4().hex[:8]
    keys = [f"{run}\0hot\0{n}" for n in range(24)]
    workers, tasks = 3, 32
    with pool(workers) as ex:
        futures = [
            ex.submit(shared_provider_tasks, url, w, keys, 4.0, tasks, write_batches)
            for w in range(workers)
        ]
        results: list[dict[str, Any]] = [f.result(timeout=150) for f in futures]
    events = [e for r in results for e in r["events"]]
    stats = check_history(events)
    by_op: dict[tuple[str, bool], int] = defaultdict(int)
    for e in events:
        by_op[(e.op, e.ok)] += 1
    summary = (stats, dict(by_op), [(r["batches"], r["overlapping"]) for r in results])
    # The race really raced: ownership changed hands, acquires lost, calls went in batches.
    assert stats["tenures"] > 50, summary
    assert stats["failed_acquires"] > 50, summary
    assert by_op[("transfer", True)] > 0 and by_op[("release", True)] > 0, summary
    assert sum(r["batches"] for r in results) > 20, summary
    if write_batches > 1:  # ... and write batches of one provider were in flight side by side
        assert sum(r["overlapping"] for r in results) > 0, summary
    print(summary)
