"""Mutual exclusion under real races: several OS processes, each with its own engine."""

from __future__ import annotations

import itertools
import multiprocessing
import uuid
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import pytest

from sql_lease import SqlLeaseProvider, migrate

from ._race_workers import Event, chain_holder, hammer, racer

pytestmark = pytest.mark.race

# A renewal is judged live just before it stamps the new expiry; allow that instant.
STAMP_SLACK = timedelta(milliseconds=5)


def pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


class Tenure:
    """One owner's hold on a key under one fence, in database time."""

    def __init__(self, key: str, owner: str, fence: int, start: datetime, end: datetime):
        self.key, self.owner, self.fence, self.start, self.expiry = key, owner, fence, start, end
        self.ended: datetime | None = None

    @property
    def end(self) -> datetime:
        return self.expiry if self.ended is None else min(self.expiry, self.ended)

    def __repr__(self) -> str:
        return f"Tenure({self.owner!r}, fence={self.fence}, {self.start} .. {self.end})"


def check_history(events: list[Event]) -> dict[str, int]:
    """Rebuild tenures from successes and check: one live owner at a time, fences increasing."""
    tenures: dict[tuple[str, int], Tenure] = {}
    successes = sorted((e for e in events if e.ok), key=lambda e: e.t)  # type: ignore[arg-type,return-value]
    for e in successes:
        assert e.t is not None and e.fence is not None
        if e.op in ("acquire", "renew"):
            tenure = tenures.get((e.key, e.fence))
            assert e.expires is not None
            if tenure is None:
                assert e.op == "acquire", f"renew of unknown tenure: {e}"
                tenures[(e.key, e.fence)] = Tenure(e.key, e.owner, e.fence, e.t, e.expires)
            else:
                assert tenure.owner == e.owner, f"{e} inside {tenure}"
                assert tenure.ended is None, f"{e} after {tenure} ended"
                assert e.t <= tenure.expiry + STAMP_SLACK, f"{e} after {tenure} expired"
                tenure.expiry = e.expires
        elif e.op == "transfer":
            assert e.from_fence is not None and e.to_owner is not None and e.expires is not None
            old = tenures[(e.key, e.from_fence)]
            assert old.ended is None and e.t <= old.expiry + STAMP_SLACK, f"{e} vs {old}"
            old.ended = e.t
            tenures[(e.key, e.fence)] = Tenure(e.key, e.to_owner, e.fence, e.t, e.expires)
        elif e.op == "release":
            tenure = tenures[(e.key, e.fence)]
            assert tenure.owner == e.owner
            tenure.ended = e.t
    by_key: dict[str, list[Tenure]] = defaultdict(list)
    for tenure in tenures.values():
        by_key[tenure.key].append(tenure)
    for key, items in by_key.items():
        # Starts can tie at the clock's resolution (SQLite: 1 ms); the fence orders those.
        items.sort(key=lambda t: (t.start, t.fence))
        for prev, nxt in itertools.pairwise(items):
            assert nxt.fence > prev.fence, f"{key!r}: fence went back: {prev} then {nxt}"
            assert nxt.start >= prev.end, f"{key!r}: two live owners: {prev} and {nxt}"
    # A failed acquire names a holder, and that holder really held the key under that fence.
    failed = [e for e in events if e.op == "acquire" and not e.ok]
    for e in failed:
        assert e.holder is not None, f"failed acquire without a holder: {e}"
        tenure = tenures.get((e.key, e.holder_fence))  # type: ignore[arg-type]
        assert tenure is not None and tenure.owner == e.holder, f"phantom holder in {e}"
    return {"tenures": len(tenures), "failed_acquires": len(failed), "successes": len(successes)}


def test_the_history_checker_catches_two_live_owners() -> None:
    t0 = datetime(2026, 1, 1).astimezone()
    ms = timedelta(milliseconds=1)
    overlapping = [
        Event("acquire", "k", "a", True, 1, t0, t0 + 100 * ms),
        Event("acquire", "k", "b", True, 2, t0 + 50 * ms, t0 + 150 * ms),
    ]
    with pytest.raises(AssertionError, match="two live owners"):
        check_history(overlapping)
    backwards = [
        Event("acquire", "k", "a", True, 5, t0, t0 + 100 * ms),
        Event("acquire", "k", "b", True, 4, t0 + 200 * ms, t0 + 300 * ms),
    ]
    with pytest.raises(AssertionError, match="fence went back"):
        check_history(backwards)
    nameless = [Event("acquire", "k", "a", False, holder=None)]
    with pytest.raises(AssertionError, match="without a holder"):
        check_history(nameless)


@pytest.fixture(params=["postgresql", "sqlite", "mariadb"])
def race_url(request: pytest.FixtureRequest) -> str:
    """The database every racing process connects to: PostgreSQL, one SQLite file, or a
    MariaDB database of the test's own."""
    if request.param == "mariadb":
        made: str = request.getfixturevalue("make_mariadb_database")()
        migrate.upgrade(made)
        return made
    fixture = {"postgresql": "database_url", "sqlite": "sqlite_url"}[request.param]
    url: str = request.getfixturevalue(fixture)
    return url


def test_processes_racing_on_hot_keys_never_see_two_live_owners(race_url: str) -> None:
    database_url = race_url
    run = uuid.uuid4().hex[:8]  # the session database is shared with other tests
    keys = [f"{run}\0hot\0a", f"{run}\0hot\0b", f"{run}\0hot"]
    workers = 4
    with pool(workers) as ex:
        futures = [ex.submit(hammer, database_url, w, keys, 4.0, 1000 + w) for w in range(workers)]
        results: list[dict[str, Any]] = [f.result(timeout=120) for f in futures]
    events = [e for r in results for e in r["events"]]
    stats = check_history(events)
    by_op = defaultdict(int)
    for e in events:
        by_op[(e.op, e.ok)] += 1
    # The race really raced: ownership changed hands many times, and acquires lost often.
    assert stats["tenures"] > 100, (stats, dict(by_op))
    assert stats["failed_acquires"] > 100, (stats, dict(by_op))
    assert by_op[("transfer", True)] > 20 and by_op[("release", True)] > 20, dict(by_op)
    assert by_op[("renew", False)] > 0, dict(by_op)  # some leases expired under their owners
    # Both ways of failing raced: the full statement, and the read of a contended key.
    reads = sum(r["reads"] for r in results)
    assert 0 < reads < stats["failed_acquires"], (reads, stats)
    reruns = sum(r["reruns"] for r in results)
    print(stats, dict(by_op), "acquire re-runs:", reruns, "reads:", reads)


async def test_transfer_along_a_chain_leaves_no_gap_for_racers(race_url: str) -> None:
    database_url = race_url
    async with SqlLeaseProvider.from_url(database_url) as sql_provider:
        await _chain_race(database_url, sql_provider)


async def _chain_race(database_url: str, sql_provider: SqlLeaseProvider) -> None:
    key = f"chain\0{uuid.uuid4().hex}"
    assert (await sql_provider.acquire_lease(key, "chain-0", 60_000)).acquired
    with pool(4) as ex:
        last = "chain-300"
        racers = [ex.submit(racer, database_url, w, key, 3.0, last) for w in range(3)]
        chain = ex.submit(chain_holder, database_url, key, "chain-0", 300, 60_000)
        owners = chain.result(timeout=120)
        outcomes = [r.result(timeout=120) for r in racers]
    assert await sql_provider.get_lease_owner(key) == owners[-1]
    assert [o["wins"] for o in outcomes] == [[], [], []]
    shown = set().union(*(o["holders"] for o in outcomes))
    assert None not in shown
    assert shown <= set(owners), shown - set(owners)
    assert len(shown) > 10  # racers really ran while the chain moved
    assert sum(o["attempts"] for o in outcomes) > 300
