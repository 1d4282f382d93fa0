"""Every process upgrading at start-up: migrations serialise on the server.

N processes upgrade one database at the same moment (each waits on stdin until all are
ready); all succeed, Alembic's log shows each revision applied by exactly one of them, and the
schema is at head with no drift. Without the advisory lock 7 of 8 failed on a fresh database
(``UniqueViolationError ... pg_type_typname_nsp_index``). Every path is covered: the async and
sync facades, ``alembic upgrade head`` through ``migrations/env.py``, ``sql-lease migrate``
and the pooler form through a real PgBouncer.

The fresh-database race runs once in CI; ``SQL_LEASE_MIGRATE_TRIALS=N`` repeats it N times.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import LeaseTimeoutError, migrate
from sql_lease.schema import migration_lock_key

from ..infra.pgbouncer import PgBouncer
from .test_migrations import _drift

pytestmark = pytest.mark.race

ROOT = Path(__file__).resolve().parents[2]
#: Every revision the library ships, oldest first (read from the scripts, not listed by hand).
REVISIONS = sorted(
    p.name[:4] for p in (ROOT / "migrations" / "versions").glob("[0-9][0-9][0-9][0-9]_*.py")
)
_RUNNING = re.compile(r"Running upgrade [0-9a-z]* ?-> ([0-9a-z]+)")


def migrate_together(mode: str, url: str, n: int, pooler: str | None = None) -> Counter[str]:
    """``n`` worker processes upgrading ``url`` at once; every revision any of them applied."""
    argv = [sys.executable, "-m", "tests.integration._migrate_workers", mode, url]
    procs = [
        subprocess.Popen(
            [*argv, *([pooler] if pooler else [])],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    for proc in procs:  # every process imported and waiting
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    applied: Counter[str] = Counter()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert (proc.returncode, out.splitlines()[-1:]) == (0, ["ok"]), out + err
        applied.update(line.split()[1] for line in out.splitlines() if line.startswith("applied"))
        applied.update(_RUNNING.findall(err))
    return applied


def at_head_without_drift(url: str) -> None:
    assert migrate.current(url) == migrate.head()
    assert _drift(url, "leases", None) == []


@pytest.mark.parametrize("trial", range(int(os.environ.get("SQL_LEASE_MIGRATE_TRIALS", "1"))))
def test_eight_processes_upgrading_a_fresh_database_at_once_all_succeed(
    make_database: Callable[[], str], trial: int
) -> None:
    url = make_database()
    applied = migrate_together("async", url, 8)
    assert applied == Counter(REVISIONS)  # each revision applied once, by one process
    at_head_without_drift(url)


@pytest.mark.parametrize("mode", ["sync", "alembic"])
def test_eight_processes_upgrading_from_0002_at_once_all_succeed(
    make_database: Callable[[], str], mode: str
) -> None:
    url = make_database()
    migrate.upgrade(url, "0002")
    applied = migrate_together(mode, url, 8)
    assert applied == Counter(REVISIONS[2:])
    at_head_without_drift(url)


def test_alembic_upgrades_of_a_fresh_database_at_once_all_succeed(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    assert migrate_together("alembic", url, 6) == Counter(REVISIONS)
    at_head_without_drift(url)


def test_six_sql_lease_migrate_commands_at_once_all_exit_0(
    make_database: Callable[[], str], tmp_path: Path
) -> None:
    url = make_database()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "sql_lease", "migrate", "--url", url],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
        assert "(head)" in out
    at_head_without_drift(url)


@pytest.fixture
def lock_held(make_database: Callable[[], str]) -> Iterator[str]:
    """A fresh database whose migration lock another session holds (the documented key)."""
    url = make_database()
    u = make_url(url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [migration_lock_key("leases")])
        yield url


def test_a_migrator_that_cannot_get_the_lock_in_time_gets_a_timeout_error(lock_held: str) -> None:
    started = time.monotonic()
    with pytest.raises(LeaseTimeoutError) as info:
        migrate.upgrade(lock_held, timeout=1)
    assert time.monotonic() - started < 10
    assert str(info.value).startswith("upgrade: ")
    assert migrate.current(lock_held) is None  # nothing applied


def test_the_lock_is_per_table_and_schema() -> None:
    keys = {
        migration_lock_key("leases"),
        migration_lock_key("leases", "coord"),
        migration_lock_key("other_leases"),
    }
    assert len(keys) == 3
    assert migration_lock_key("leases") == migration_lock_key("leases", "public")
    assert -(2**63) <= migration_lock_key("leases") < 2**63


@pytest.fixture(scope="module")
def bouncer() -> Iterator[PgBouncer]:
    with PgBouncer(pool_mode="transaction", pool_size=3) as b:
        yield b


@pytest.mark.infra
def test_processes_upgrading_through_a_transaction_pooler_at_once_all_succeed(
    make_database: Callable[[], str], bouncer: PgBouncer
) -> None:
    url = make_database()
    through = bouncer.url(make_url(url).database or "postgres")
    assert migrate_together("async", through, 6, "transaction") == Counter(REVISIONS)
    at_head_without_drift(url)


@pytest.mark.infra
def test_a_pooled_migrator_that_cannot_get_the_lock_in_time_gets_a_timeout_error(
    lock_held: str, bouncer: PgBouncer
) -> None:
    through = bouncer.url(make_url(lock_held).database or "postgres")
    with pytest.raises(LeaseTimeoutError):
        migrate.upgrade(through, timeout=1, pooler="transaction")
    assert migrate.current(lock_held) is None
