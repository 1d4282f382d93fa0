"""Scale-out on Citus, part three: a worker fails over to its standby in the middle of a race.

A private cluster (``../shared/citus/cluster.sh`` on free ports, so the suite's own cluster
keeps its topology) whose first worker streams to a synchronous standby. Four processes race
through the coordinator for hot keys placed on that worker; the worker dies
(``pg_ctl stop -m immediate``), its standby is promoted (a new timeline) and the coordinator is
pointed at it (``citus_update_node``). Synchronous replication loses no acknowledged commit,
so no two tenures of a key may overlap, a key's fences must rise in tenure order, and every
fence granted on the promoted standby lies above every fence of the old worker (migration
0008's rule on Citus: a new tenure's fence is the greater of the row's fence + 1 and the
worker's clock in microseconds; the row came over with every committed fence). Needs Citus
installed into this PostgreSQL 15 and the right to run servers as the ``postgres`` user.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sql_lease import migrate

from ._race import await_taken, judge, race

pytestmark = pytest.mark.citus

BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
#: ``../shared/citus/cluster.sh`` beside the checkout, unless SQL_LEASE_CITUS_CLUSTER names one.
CLUSTER = Path(
    os.environ.get("SQL_LEASE_CITUS_CLUSTER")
    or Path(__file__).resolve().parents[2].parent / "shared" / "citus" / "cluster.sh"
)
LEASES = "'public.leases'::regclass"


def _as_postgres(*argv: str | Path) -> str:
    """Run ``argv`` as the ``postgres`` system user (PostgreSQL refuses to run as root)."""
    if os.geteuid() != 0:
        return _run(*argv)
    return _run("su", "postgres", "-s", "/bin/bash", "-c", " ".join(f"'{a}'" for a in argv))


def _run(*argv: str | Path, timeout: float = 120) -> str:
    args = [str(a) for a in argv]
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def _free_base() -> int:
    """A port p with p, p+1, p+2 and p+3 free on loopback."""
    for base in range(58_100, 64_000, 7):
        if all(_free(base + i) for i in range(4)):
            return base
    raise AssertionError("no four free ports in a row")


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _sql(port: int, db: str) -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname=db, autocommit=True)


class Cluster:
    """The private cluster: its directory, the coordinator's and workers' ports, a standby."""

    def __init__(self, root: Path, base: int) -> None:
        self.root = root
        self.coordinator, self.worker, self.other = base, base + 1, base + 2
        self.standby_port = base + 3
        self.standby = root / "standby"
        self.db = "failover"
        self.url = ""

    def start(self) -> None:
        if not CLUSTER.exists():
            pytest.fail(f"{CLUSTER} is missing", pytrace=False)
        _run("bash", CLUSTER, "start", self.root, str(self.coordinator))
        self.url = _run("bash", CLUSTER, "createdb", self.root, self.db).strip()

    def add_synchronous_standby(self) -> None:
        """A streaming standby of the first worker, then made synchronous on it."""
        _as_postgres(
            BIN / "pg_basebackup", "-h", "127.0.0.1", "-p", str(self.worker), "-U", "postgres",
            "-D", self.standby, "-R", "-X", "stream", "-c", "fast",
        )  # fmt: skip
        with (self.standby / "postgresql.conf").open("a") as conf:
            conf.write(f"\nport = {self.standby_port}\n")
        _as_postgres(BIN / "pg_ctl", "-D", self.standby, "-l", f"{self.standby}.log", "-w",
                     "-t", "60", "start")  # fmt: skip
        with _sql(self.worker, "postgres") as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            conn.execute("SELECT pg_reload_conf()")
            for _ in range(300):
                row = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchone()
                if row == ("sync",):
                    return
                time.sleep(0.1)
        raise AssertionError("the standby never became synchronous")

    def fail_over(self) -> None:
        """The worker dies, its standby is promoted, the coordinator points at it."""
        _as_postgres(BIN / "pg_ctl", "-D", self.root / f"node{self.worker}", "-m", "immediate",
                     "-w", "stop")  # fmt: skip
        _as_postgres(BIN / "pg_ctl", "-D", self.standby, "-w", "-t", "60", "promote")
        with _sql(self.coordinator, self.db) as conn:
            conn.execute(
                "SELECT citus_update_node(nodeid, '127.0.0.1', %s) FROM pg_dist_node"
                " WHERE nodeport = %s",
                (self.standby_port, self.worker),
            )

    def stop(self) -> None:
        subprocess.run(["bash", str(CLUSTER), "stop", str(self.root)], check=False)
        if (self.standby / "PG_VERSION").exists():
            _as_postgres(BIN / "pg_ctl", "-D", self.standby, "-m", "fast", "-w", "stop")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="sql_lease_citus_failover_"))
    shutil.chown(root, "postgres")
    made = Cluster(root, _free_base())
    try:
        made.start()
        yield made
    finally:
        made.stop()
        shutil.rmtree(root, ignore_errors=True)


def _hot_keys(conn: psycopg.Connection[tuple[Any, ...]], port: int, n: int) -> list[str]:
    """``n`` keys whose shards are placed on the worker at ``port``."""
    found: list[str] = []
    for i in itertools.count():
        key = f"failover-{i}"
        row = conn.execute(
            "SELECT nodeport FROM citus_shards WHERE shardid ="
            f" get_shard_id_for_distribution_column({LEASES}, %s::bytea)",
            (key.encode(),),
        ).fetchone()
        if row is not None and row[0] == port:
            found.append(key)
        if len(found) == n:
            return found
    raise AssertionError("unreachable")


def test_a_worker_failing_over_to_its_standby_in_the_middle_of_a_race(cluster: Cluster) -> None:
    cluster.add_synchronous_standby()
    migrate.upgrade(cluster.url)
    with _sql(cluster.coordinator, cluster.db) as db:
        hot = _hot_keys(db, cluster.worker, 3)
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(4, mp_context=ctx) as pool:
            futures = [pool.submit(race, cluster.url, f"p{i}", hot, 24.0) for i in range(4)]
            await_taken(db, hot[0])
            time.sleep(3)  # tenures on the old worker
            failed = time.monotonic()
            cluster.fail_over()
            switched = time.monotonic() - failed
            results = [f.result(timeout=180) for f in futures]
    v = judge(results)
    tenures, errors, by_key = v.tenures, v.errors, v.by_key
    overlaps, backwards = v.overlaps, v.backwards
    before = [t for t in tenures if t[4] < failed]
    after = [t for t in tenures if t[3] > failed + switched]
    print(
        f"\nworker {cluster.worker} failed over to {cluster.standby_port} in {switched:.1f} s;"
        f" tenures per key { {k: len(v) for k, v in by_key.items()} }; before {len(before)},"
        f" after {len(after)}; overlapping {overlaps}; fences not rising {backwards};"
        f" call errors {errors}"
    )
    assert overlaps == 0
    assert backwards == 0
    assert len(before) > 5 and len(after) > 5
    assert max(t[2] for t in before) < min(t[2] for t in after)
