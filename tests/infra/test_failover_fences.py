"""Fences never go backwards, even after an asynchronous failover (issue 13, migration 0004).

A primary and a streaming standby on loopback (`Replicated`), the multi-host URL with
``target_session_attrs=read-write``, the primary crashed with ``pg_ctl stop -m immediate``,
the standby promoted. With the link stalled before the crash (asynchronous replication), the
promoted standby lacks what the old primary acknowledged last: leases and fence-sequence
values. Fences carry the timeline (``timeline << 40 | sequence value``), so:

- racing clients (`run_round`): 0 fence inversions and 0 fences handed out twice over the whole
  history, grants the old primary acknowledged and lost included; overlaps (two owners at once,
  which the library cannot prevent after a lossy failover) are printed, not asserted. With
  synchronous replication: nothing lost, no overlap, no inversion, also when the standby's
  replies are held before the crash (writes in flight reach it unacknowledged).
- downstream: a store that rejects writes with a fence below the highest it has seen (a table in
  a separate database on the shared server) takes the new owner's writes after the failover and
  rejects the old owner's, although the sequence itself went back (forced here).
- `hold()`: a lease whose grant never reached the standby is reported lost at its first
  renewal on the promoted standby (the renewal finds no row).

``SQL_LEASE_FAILOVER_ROUNDS`` (default 1) repeats the racing tests: a soak knob
(``scripts/failover-soak`` runs more rounds outside pytest).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest

from sql_lease import AcquireResult, LeaseConnectionError, LeaseLost, SqlLeaseProvider, migrate

from .cluster import Replicated
from .failover import MASK, SEQUENCE_BITS, analyse, run_round, show_fence

pytestmark = [pytest.mark.infra, pytest.mark.timeout(90)]

ROUNDS = int(os.environ.get("SQL_LEASE_FAILOVER_ROUNDS", "1"))
LONG = 30_000  # ms: leases that must not expire during a test
BURN = 40  # fences drawn during the stall: more than the 32 a sequence WAL-logs ahead


@pytest.fixture(params=range(1, ROUNDS + 1), ids=lambda n: f"round{n}")
def failover_round(request: pytest.FixtureRequest) -> int:
    return int(request.param)


# -- racing clients ---------------------------------------------------------------------------


async def test_async_lagged_failover_never_inverts_or_repeats_a_fence(
    failover_round: int,
) -> None:
    with Replicated(synchronous=False) as cluster:
        rnd = await run_round(cluster, lag=0.4, before=1.0, after=1.5)
    figures = analyse(rnd)
    longest = max(figures.overlaps, default=0.0)
    print(f"async round {failover_round}: {figures.line()}")
    print(
        f"async round {failover_round}: {len(figures.overlaps)} overlaps, longest {longest:.0f} ms"
    )
    assert figures.writes_lost > 0, "the stalled link lost no acknowledged write: not lossy"
    assert any(g.after_failover for g in rnd.grants), "no grant after the promotion"
    assert figures.inversions == []
    assert figures.duplicates == []
    before = [g.fence for g in rnd.grants if not g.after_failover]
    after = [g.fence for g in rnd.grants if g.after_failover]
    assert {f >> SEQUENCE_BITS for f in before} == {1}
    assert {f >> SEQUENCE_BITS for f in after} == {2}


async def test_synchronous_failover_loses_nothing_overlaps_nothing_inverts_nothing(
    failover_round: int,
) -> None:
    with Replicated(synchronous=True) as cluster:
        rnd = await run_round(cluster, lag=0.0, before=1.0, after=1.5)
    figures = analyse(rnd)
    print(f"sync round {failover_round}: {figures.line()}")
    assert any(not g.after_failover for g in rnd.grants)
    assert any(g.after_failover for g in rnd.grants), "no grant after the promotion"
    assert figures.writes_lost == 0, "\n".join(figures.lost)
    assert figures.overlaps == []
    assert figures.inversions == []
    assert figures.duplicates == []
    assert set(figures.errors) <= {"LeaseConnectionError", "LeaseTimeoutError"}
    assert {g.fence >> SEQUENCE_BITS for g in rnd.grants if g.after_failover} == {2}


async def test_writes_in_doubt_at_a_synchronous_failover_count_as_survivors_not_losses() -> None:
    """The standby's replies are held before the crash: the writes then in flight reach the
    standby, but the crash cuts off their acknowledgement (outcome unknown to the clients).
    A release or a shorter renewal among them leaves a row the acknowledged writes alone do not
    explain; the checker must count none of it lost (it once did on a loaded machine)."""
    with Replicated(synchronous=True) as cluster:
        rnd = await run_round(cluster, lag=0.0, before=1.0, after=1.0, replies_held=0.3)
    figures = analyse(rnd)
    in_doubt = [w for w in rnd.writes if w.kind.endswith("?") and w.started < rnd.crash_at]
    print(f"replies held: {len(in_doubt)} writes in doubt; {figures.line()}")
    assert figures.writes_lost == 0, "\n".join(figures.lost)
    assert figures.overlaps == []
    assert figures.inversions == []
    assert figures.duplicates == []


# -- a lossy failover, step by step -----------------------------------------------------------


async def _migrated(cluster: Replicated) -> tuple[str, str]:
    """A new database on the pair, migrated and replayed by the standby: (URL, name)."""
    db = f"lease_{uuid.uuid4().hex[:8]}"
    cluster.create_database(db)
    url = cluster.url(db)
    await asyncio.to_thread(migrate.upgrade, url)
    await asyncio.to_thread(cluster.wait_replayed)
    return url, db


async def _fail_over(cluster: Replicated) -> None:
    """Crash the primary, drop what the stalled link held back, promote the standby."""
    await asyncio.to_thread(cluster.crash_primary)
    assert cluster.link is not None
    cluster.link.cut()
    await asyncio.to_thread(cluster.promote)


async def _acquire_after_failover(url: str, key: str, owner: str) -> AcquireResult:
    """Acquire on the promoted standby (a fresh provider; its first connections may still be
    refused while the server finishes promoting)."""
    async with SqlLeaseProvider.from_url(url, timeout=2.0, connect_timeout=1.0) as p:
        for _ in range(20):
            try:
                return await p.acquire_lease(key, owner, LONG)
            except LeaseConnectionError:
                await asyncio.sleep(0.1)
        return await p.acquire_lease(key, owner, LONG)


class FencedStore:
    """A downstream store (a table on the shared server): a write is accepted only when its
    fence is at least the highest fence the store has seen for the key."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._conn.execute(
            "CREATE TABLE fenced_writes (key text PRIMARY KEY, fence bigint NOT NULL,"
            " value text NOT NULL)"
        )

    def write(self, key: str, fence: int, value: str) -> bool:
        row = self._conn.execute(
            "INSERT INTO fenced_writes AS w (key, fence, value) VALUES (%s, %s, %s)"
            " ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, value = EXCLUDED.value"
            " WHERE w.fence <= EXCLUDED.fence RETURNING true",
            (key, fence, value),
        ).fetchone()
        return row is not None

    def value(self, key: str) -> str:
        row = self._conn.execute("SELECT value FROM fenced_writes WHERE key = %s", (key,))
        found = row.fetchone()
        assert found is not None
        return str(found[0])

    def close(self) -> None:
        self._conn.close()


@pytest.fixture
def store(make_database: Callable[[], str]) -> Iterator[FencedStore]:
    s = FencedStore(make_database())
    try:
        yield s
    finally:
        s.close()


async def test_the_fence_makes_a_lossy_failover_safe_downstream(store: FencedStore) -> None:
    with Replicated(synchronous=False) as cluster:
        url, _ = await _migrated(cluster)
        async with SqlLeaseProvider.from_url(url, timeout=2.0, connect_timeout=1.0) as old:
            # Replicated history: an earlier owner of k wrote and released; r holds j.
            first = await old.acquire_lease("k", "w", LONG)
            assert first.fence is not None and store.write("k", first.fence, "w1")
            await old.release_lease("k", "w")
            r1 = await old.acquire_lease("j", "r", LONG)
            assert r1.fence is not None and store.write("j", r1.fence, "r1")
            await asyncio.to_thread(cluster.wait_replayed)
            # The link stalls: what follows is acknowledged by the primary alone.
            assert cluster.link is not None
            cluster.link.stall()
            for i in range(BURN):
                assert (await old.acquire_lease(f"other-{i}", "x", LONG)).acquired
            a = await old.acquire_lease("k", "a", LONG)
            assert a.acquired and a.fence is not None
            assert store.write("k", a.fence, "a1")
            await old.release_lease("j", "r")  # r lets j go, and s takes it
            s = await old.acquire_lease("j", "s", LONG)
            assert s.acquired and s.fence is not None
            assert store.write("j", s.fence, "s1")
            await _fail_over(cluster)
        # The promoted standby never saw a's grant: the key is free there, and b takes it.
        b = await _acquire_after_failover(url, "k", "b")
        assert b.acquired and b.fence is not None
        # Nor r's release: j is still r's there. r, acquiring again, starts a new tenure with a
        # fence above s's (keeping its old one would put it below a fence the store has seen).
        r2 = await _acquire_after_failover(url, "j", "r")
        assert r2.acquired and r2.fence is not None
    fa, fb = a.fence, b.fence
    print(f"old owner's fence {show_fence(fa)}, new owner's {show_fence(fb)}")
    # The sequence went back (what the fences were before migration 0004) ...
    assert fb & MASK < fa & MASK
    # ... the fence did not: the new timeline puts b above everything the old primary issued.
    assert (fa >> SEQUENCE_BITS, fb >> SEQUENCE_BITS) == (1, 2)
    assert fb > fa
    # Two owners believe they hold k. The store takes the rightful owner's writes only.
    assert store.write("k", fb, "b1")
    assert not store.write("k", fa, "a2")  # the old owner, with its pre-crash fence
    assert store.value("k") == "b1"
    assert store.write("k", fb, "b2")
    assert store.value("k") == "b2"
    # The surviving tenure of j, re-acquired on the new timeline, outranks s's lost grant.
    assert r2.fence >> SEQUENCE_BITS == 2 and r2.fence > s.fence > r1.fence
    assert not store.write("j", r1.fence, "r-stale")
    assert store.write("j", r2.fence, "r2")
    assert not store.write("j", s.fence, "s2")
    assert store.value("j") == "r2"
    # With plain sequence values the same store would have done the opposite.
    assert store.write("plain", fa & MASK, "a1")
    assert not store.write("plain", fb & MASK, "b1")
    assert store.write("plain", fa & MASK, "a2")
    assert store.value("plain") == "a2"


async def test_hold_reports_the_loss_at_its_next_renewal_after_a_lossy_failover() -> None:
    with Replicated(synchronous=False) as cluster:
        url, db = await _migrated(cluster)
        async with SqlLeaseProvider.from_url(url, timeout=2.0, connect_timeout=1.0) as p:
            hold = p.hold("k", "a", LONG, renew_every_ms=300, cancel_on_loss=False)

            async def held_through_the_failover() -> None:
                assert cluster.link is not None
                cluster.link.stall()  # the grant reaches the primary only
                async with hold as held:
                    assert held.fence is not None and held.fence >> SEQUENCE_BITS == 1
                    await _fail_over(cluster)
                    assert await asyncio.wait_for(held.wait_lost(), 30)
                    rows = await asyncio.to_thread(
                        cluster.standby.query,
                        "SELECT count(*) FROM leases WHERE key = 'k'::bytea",
                        db,
                    )
                    assert rows == [(0,)]  # the promoted standby never had the row

            with pytest.raises(LeaseLost) as lost:
                await held_through_the_failover()
    # Found gone by a renewal, long before the TTL would have ended it.
    assert hold.lost_reason is not None and "found it gone" in hold.lost_reason
    assert lost.value.key == "k" and lost.value.fence == hold.fence
