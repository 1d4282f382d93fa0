"""Many processes open one SQLite file at the same instant: none may fail.

Issue 10: the demo's workers start together, and each connection's first statement used to
switch the file to WAL, which needs an exclusive lock that SQLite does not wait for: about one
process start in ten failed at once with "database is locked". Here 8 processes (plus one that
reads the file with plain ``sqlite3``) meet at a barrier and open a freshly migrated file at
once, round after round; once with the file as the migrations leave it, once with a file in
rollback mode (as an older version left it). Then the same 8 processes mix every operation on a
few hot keys (with a normal timeout nothing may fail, with a tiny one only `LeaseTimeoutError`
may), and open and close the file over and over (checkpoints when the last connection closes).

``SQL_LEASE_SQLITE_ROUNDS`` (default 10) and ``SQL_LEASE_SQLITE_STRESS_SECONDS`` (default 1.5)
make a longer soak.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import sqlite3
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path
from typing import Any

import pytest

from sql_lease import LeaseSchemaError, SqlLeaseProvider, migrate

from . import _sqlite_workers as workers

OPENERS = 8
ROUNDS = int(os.environ.get("SQL_LEASE_SQLITE_ROUNDS", "10"))
STRESS_SECONDS = float(os.environ.get("SQL_LEASE_SQLITE_STRESS_SECONDS", "1.5"))
ROUND_TIMEOUT = 60.0  # seconds for one round's results: only a hung worker gets near it

pytestmark = pytest.mark.timeout(600)


@dataclass
class Cluster:
    """Worker processes and one reader, each with its own inbox, meeting at one barrier."""

    inboxes: list[Queue[Any]]
    reader_inbox: Queue[Any]
    barrier: Barrier
    done: Event
    results: Queue[Any]
    procs: list[BaseProcess]

    def round(self, path: Path, job: tuple[Any, ...] | None = None) -> dict[int, Any]:
        """One round on ``path``: every process's outcome (-1 is the reader's).

        ``job`` defaults to opening a provider with a 5 s timeout (see `_sqlite_workers`).
        """
        self.done.clear()
        for inbox in self.inboxes:
            inbox.put(job or ("open", f"sqlite:///{path}", 5.0))
        self.reader_inbox.put(str(path))
        outcomes: dict[int, Any] = {}
        while len(outcomes) < OPENERS:
            worker, outcome = self._next()
            outcomes[worker] = outcome
        self.done.set()
        while -1 not in outcomes:
            worker, outcome = self._next()
            outcomes[worker] = outcome
        return outcomes

    def _next(self) -> tuple[int, Any]:
        try:
            item: tuple[int, Any] = self.results.get(timeout=ROUND_TIMEOUT + STRESS_SECONDS)
        except queue.Empty:
            dead = [p.name for p in self.procs if not p.is_alive()]
            pytest.fail(f"a round did not finish (dead workers: {dead})")
        return item


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(OPENERS + 1)
    done = ctx.Event()
    results: Queue[Any] = ctx.Queue()
    inboxes: list[Queue[Any]] = [ctx.Queue() for _ in range(OPENERS)]
    reader_inbox: Queue[Any] = ctx.Queue()
    procs: list[BaseProcess] = [
        ctx.Process(target=workers.worker, args=(i, inboxes[i], barrier, results), daemon=True)
        for i in range(OPENERS)
    ]
    procs.append(
        ctx.Process(target=workers.reader, args=(reader_inbox, barrier, done, results), daemon=True)
    )
    for proc in procs:
        proc.start()
    try:
        yield Cluster(inboxes, reader_inbox, barrier, done, results, procs)
    finally:
        for inbox in [*inboxes, reader_inbox]:
            inbox.put(None)
        for proc in procs:
            proc.join(timeout=10)
        barrier.abort()
        for proc in procs:
            if proc.is_alive():
                proc.terminate()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A freshly migrated file, copied for each round (cheaper than migrating each time)."""
    path = tmp_path_factory.mktemp("template") / "leases.db"
    migrate.upgrade(f"sqlite:///{path}")
    assert not path.with_name("leases.db-wal").exists()  # all in the one file: safe to copy
    return path


def journal_mode(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        mode: str = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()
    return mode


def rollback_mode(path: Path) -> Path:
    """``path`` switched back to rollback mode, as older versions left a migrated file."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
    finally:
        conn.close()
    return path


def failures(all_outcomes: list[dict[int, Any]]) -> Counter[str]:
    """Every failure of every round, by message (rounds with a failure: ``failed_rounds``)."""
    return Counter(o for outcomes in all_outcomes for o in outcomes.values() if o != "ok")


def failed_rounds(all_outcomes: list[dict[int, Any]]) -> int:
    return sum(any(o != "ok" for o in outcomes.values()) for outcomes in all_outcomes)


def test_the_migrations_leave_the_file_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "leases.db"
    migrate.upgrade(f"sqlite:///{path}")
    assert journal_mode(path) == "wal"
    # And an upgrade of a file in rollback mode (an older version's) switches it.
    migrate.upgrade(f"sqlite:///{rollback_mode(path)}")
    assert journal_mode(path) == "wal"


def test_processes_opening_a_freshly_migrated_file_at_once_never_fail(
    cluster: Cluster, template: Path, tmp_path: Path
) -> None:
    outcomes = []
    for n in range(ROUNDS):
        path = Path(shutil.copyfile(template, tmp_path / f"r{n}.db"))
        outcomes.append(cluster.round(path))
    assert failures(outcomes) == Counter(), f"{failed_rounds(outcomes)} of {ROUNDS} rounds failed"


def test_processes_opening_a_rollback_mode_file_at_once_switch_it_without_failing(
    cluster: Cluster, template: Path, tmp_path: Path
) -> None:
    paths = [
        rollback_mode(Path(shutil.copyfile(template, tmp_path / f"r{n}.db"))) for n in range(ROUNDS)
    ]
    outcomes = [cluster.round(path) for path in paths]
    assert failures(outcomes) == Counter(), f"{failed_rounds(outcomes)} of {ROUNDS} rounds failed"
    assert {journal_mode(path) for path in paths} == {"wal"}


def _stress(cluster: Cluster, path: Path, kind: str, timeout: float) -> Counter[str]:
    keys = [f"hot-{n}" for n in range(3)]
    outcomes = cluster.round(path, (kind, f"sqlite:///{path}", keys, STRESS_SECONDS, timeout))
    assert outcomes.pop(-1) == "ok"  # the reader
    totals: Counter[str] = Counter()
    for counts in outcomes.values():
        totals.update(counts)
    return totals


def test_eight_processes_mixing_every_operation_on_hot_keys_never_fail(
    cluster: Cluster, template: Path, tmp_path: Path
) -> None:
    path = Path(shutil.copyfile(template, tmp_path / "stress.db"))
    totals = _stress(cluster, path, "stress", 10.0)
    assert set(totals) == {"ok"}, totals


def test_with_a_tiny_timeout_the_only_failure_is_a_lease_timeout(
    cluster: Cluster, template: Path, tmp_path: Path
) -> None:
    path = Path(shutil.copyfile(template, tmp_path / "stress.db"))
    totals = _stress(cluster, path, "stress", 0.002)
    assert set(totals) <= {"ok", "timeout"}, totals


def test_processes_opening_and_closing_the_file_over_and_over_never_fail(
    cluster: Cluster, template: Path, tmp_path: Path
) -> None:
    path = Path(shutil.copyfile(template, tmp_path / "churn.db"))
    totals = _stress(cluster, path, "churn", 10.0)
    assert set(totals) == {"ok"}, totals


async def test_a_provider_on_a_missing_file_says_to_run_the_migrations_and_creates_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "missing.db"
    provider = SqlLeaseProvider.from_url(f"sqlite:///{path}")
    try:
        with pytest.raises(LeaseSchemaError) as info:
            await provider.acquire_lease("k", "a", 10_000)
    finally:
        await provider.aclose()
    assert "does not exist" in str(info.value) and "migrat" in str(info.value)
    assert os.listdir(tmp_path) == []


async def test_a_provider_on_a_file_never_migrated_says_to_run_the_migrations(
    tmp_path: Path,
) -> None:
    path = tmp_path / "other.db"
    sqlite3.connect(path).close()  # an empty database file (another application's, say)
    provider = SqlLeaseProvider.from_url(f"sqlite:///{path}")
    try:
        with pytest.raises(LeaseSchemaError) as info:
            await provider.get_lease_owner("k")
    finally:
        await provider.aclose()
    assert "apply the migrations" in str(info.value)


async def test_two_providers_of_one_process_share_the_file(template: Path, tmp_path: Path) -> None:
    path = Path(shutil.copyfile(template, tmp_path / "two.db"))
    first = SqlLeaseProvider.from_url(f"sqlite:///{path}")
    second = SqlLeaseProvider.from_url(f"sqlite:///{path}")
    try:
        assert (await first.acquire_lease("k", "a", 60_000)).acquired
        lost = await second.acquire_lease("k", "b", 60_000)
        assert not lost.acquired and lost.owner == "a"
        await first.aclose()  # its connections close; the second's stay
        await first.aclose()
        assert await second.get_lease_owner("k") == "a"
        third = SqlLeaseProvider.from_url(f"sqlite:///{path}")
        try:
            assert await third.transfer_lease("k", "a", "c", 60_000)
        finally:
            await third.aclose()
        assert await second.get_lease_owner("k") == "c"
    finally:
        await second.aclose()
    assert journal_mode(path) == "wal"
