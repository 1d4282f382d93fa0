"""The multi-process race through a real PgBouncer in transaction pooling (issue 13).

4 processes x 4 tasks, each task its own provider (``pooler="transaction"``), on 3 hot keys with
TTLs of 15-200 ms, through a PgBouncer with 6 server connections for 64 client connections: a
server connection serves many clients in turn. Every grant is checked in database time by the
history checker of `tests.integration.test_races`: one live owner at a time, fences increasing,
every refused acquire naming a real holder.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from ..integration.test_races import check_history, pool
from ._pooler_race_workers import hammer_tasks
from .pgbouncer import PgBouncer

pytestmark = [pytest.mark.infra, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def bouncer() -> Iterator[PgBouncer]:
    with PgBouncer(pool_mode="transaction", pool_size=6) as b:
        yield b


def test_processes_and_tasks_racing_through_pgbouncer_never_see_two_live_owners(
    bouncer: PgBouncer, database_url: str
) -> None:
    url = bouncer.url(make_url(database_url).database or "postgres")
    run = uuid.uuid4().hex[:8]
    keys = [f"{run}\0hot\0a", f"{run}\0hot\0b", f"{run}\0hot"]
    workers, tasks = 4, 4
    with pool(workers) as ex:
        futures = [
            ex.submit(hammer_tasks, url, w, keys, 4.0, tasks, "transaction") for w in range(workers)
        ]
        results: list[dict[str, Any]] = [f.result(timeout=150) for f in futures]
    events = [e for r in results for e in r["events"]]
    stats = check_history(events)
    by_op: dict[tuple[str, bool], int] = defaultdict(int)
    for e in events:
        by_op[(e.op, e.ok)] += 1
    # The race really raced through the pooler: ownership changed hands, acquires lost.
    assert stats["tenures"] > 50, (stats, dict(by_op))
    assert stats["failed_acquires"] > 50, (stats, dict(by_op))
    assert by_op[("transfer", True)] > 0 and by_op[("release", True)] > 0, dict(by_op)
    assert by_op[("renew", False)] > 0, dict(by_op)  # some leases expired under their owners
    print(stats, dict(by_op))
