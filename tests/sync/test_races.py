"""Mutual exclusion under real races: processes times threads, each process with its own provider.

Every grant is recorded in database time (from the statements' own results) and the history
is checked by the async race suite's checker: one live owner at a time, fences increasing, a
failed acquire always names a real holder.

The race runs in rounds of ``SQL_LEASE_SYNC_RACE_SECONDS`` (default 1) until it has really
raced (ownership changed hands often), at most ``SQL_LEASE_SYNC_RACE_ROUNDS`` (default 6)
rounds; a soak: ``SQL_LEASE_SYNC_RACE_SECONDS=300 pytest tests/sync/test_races.py -s``.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from multiprocessing.pool import Pool
from typing import Any

import pytest

from sql_lease import migrate
from tests.integration._race_workers import Event
from tests.integration.test_races import check_history

from ._workers import hammer
from .conftest import pooled_url

pytestmark = pytest.mark.race

ROUND_SECONDS = float(os.environ.get("SQL_LEASE_SYNC_RACE_SECONDS", "1"))
MAX_ROUNDS = int(os.environ.get("SQL_LEASE_SYNC_RACE_ROUNDS", "6"))
PROCESSES, THREADS = 3, 4


@pytest.fixture(params=["postgresql", "sqlite", "pgbouncer", "mariadb"])
def race_target(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """The URL the workers race on and its ``pooler=`` (PgBouncer in transaction mode)."""
    if request.param == "pgbouncer":
        return pooled_url(request), "transaction"
    if request.param == "mariadb":  # a database of the test's own
        made: str = request.getfixturevalue("make_mariadb_database")()
        migrate.upgrade(made)
        return made, None
    url: str = request.getfixturevalue(
        {"postgresql": "database_url", "sqlite": "sqlite_url"}[request.param]
    )
    return url, None


def raced(by_op: Counter[tuple[str, bool]], stats: dict[str, int]) -> bool:
    """Ownership changed hands often, acquires lost often, every kind of hand-over happened."""
    return (
        stats["tenures"] > 50
        and stats["failed_acquires"] > 50
        and by_op[("transfer", True)] > 10
        and by_op[("release", True)] > 10
    )


def test_processes_times_threads_never_see_two_live_owners(
    race_target: tuple[str, str | None], worker_pool: Pool
) -> None:
    race_url, pooler = race_target
    run = uuid.uuid4().hex[:8]
    keys = [f"{run}\0sync\0a", f"{run}\0sync\0b", f"{run}\0sync"]
    events: list[Event] = []
    reads = 0
    for round_ in range(MAX_ROUNDS):
        args = [
            (race_url, round_ * 10 + w, keys, ROUND_SECONDS, THREADS, pooler)
            for w in range(PROCESSES)
        ]
        pending = [worker_pool.apply_async(hammer, a) for a in args]
        results: list[dict[str, Any]] = [p.get(timeout=120 + ROUND_SECONDS) for p in pending]
        events += [e for r in results for e in r["events"]]
        reads += sum(r["reads"] for r in results)
        stats = check_history(events)  # every round's history, all rounds together
        by_op = Counter((e.op, e.ok) for e in events)
        if raced(by_op, stats):
            break
    assert raced(by_op, stats), (stats, dict(by_op))
    print(f"rounds={round_ + 1}", stats, dict(by_op), "reads:", reads)
