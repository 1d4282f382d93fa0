"""MariaDB beyond the contract suite: migrations (the facade, ``alembic upgrade head``, the CLI,
offline ``--sql``), URLs, one winner among concurrent acquires, least-privilege runtime grants,
the guard in the application's transaction, and failures (a killed connection, a lock wait
timeout, a deadlock), each a typed error after which the provider goes on.

Every test makes its own database (``sql_lease_t_<random>``), dropped when the session ends.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncmy
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from sql_lease import LeaseLost, SqlLeaseProvider, migrate
from sql_lease._core.failures import Failure
from sql_lease.backends import backend_named
from sql_lease.errors import LeaseConnectionError, LeaseTimeoutError, LeaseValueError

from .. import _mariadb

ROOT = Path(__file__).resolve().parents[2]
LONG = 30_000


@pytest.fixture
def url(make_mariadb_database: Callable[[], str]) -> str:
    """A migrated database of the test's own."""
    made = make_mariadb_database()
    migrate.upgrade(made)
    return made


def rows(url: str, statement: str) -> list[tuple[object, ...]]:
    u = make_url(url)
    with _mariadb.admin_connect(u, u.database) as conn, conn.cursor() as cursor:
        cursor.execute(statement)
        return list(cursor.fetchall())


def tables(url: str) -> set[str]:
    return {str(r[0]) for r in rows(url, "SHOW FULL TABLES")}


def run(*args: str, env_url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != migrate.ENV_URL}
    if env_url is not None:
        env[migrate.ENV_URL] = env_url
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# -- migrations -----------------------------------------------------------------------------


def test_alembic_upgrade_head_then_downgrade_base(make_mariadb_database: Callable[[], str]) -> None:
    url = make_mariadb_database()
    done = run("alembic", "upgrade", "head", env_url=url)
    assert done.returncode == 0, done.stderr
    assert {"leases", "leases_fence_seq", "leases_alembic_version"} <= tables(url)
    assert rows(url, "SELECT version_num FROM leases_alembic_version") == [(migrate.head(),)]
    assert migrate.check(url)
    done = run("alembic", "downgrade", "base", env_url=url)
    assert done.returncode == 0, done.stderr
    assert tables(url) == set()


def test_cli_migrate_list_and_offline_sql(make_mariadb_database: Callable[[], str]) -> None:
    url = make_mariadb_database()
    done = run("sql_lease", "migrate", "--url", url)
    assert done.returncode == 0, done.stderr
    assert "(head)" in done.stdout
    listed = run("sql_lease", "list", "--url", url)
    assert listed.returncode == 0 and "no live leases" in listed.stdout, listed.stderr
    offline = run("sql_lease", "migrate", "--sql", "--url", url)
    assert offline.returncode == 0, offline.stderr
    assert "CREATE SEQUENCE `leases_fence_seq`" in offline.stdout
    assert "`key` VARBINARY(1024) NOT NULL" in offline.stdout
    assert "wanted_until DATETIME(6)" in offline.stdout
    assert "plpgsql" not in offline.stdout.lower() and "TRIGGER" not in offline.stdout


# -- URLs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["mysql://u@h/db", "mysql+asyncmy://u@h/db", "mysql+pymysql://u@h/db"]
)
def test_mysql_urls_are_refused_with_the_reason(text: str) -> None:
    refused = r"mysql:// URL is refused: MySQL is not supported.*RETURNING"
    with pytest.raises(LeaseValueError, match=refused):
        SqlLeaseProvider.from_url(text)


def test_bad_mariadb_urls_and_options_are_refused_before_io() -> None:
    with pytest.raises(LeaseValueError, match="names no database"):
        SqlLeaseProvider.from_url("mariadb://u@h:3306")
    with pytest.raises(LeaseValueError, match="unknown MariaDB URL parameter"):
        SqlLeaseProvider.from_url("mariadb://u@h/db?bogus=1")
    with pytest.raises(LeaseValueError, match="no pooler"):
        SqlLeaseProvider.from_url("mariadb://u@h/db", pooler="transaction")
    with pytest.raises(LeaseValueError, match="no schemas"):
        SqlLeaseProvider.from_url("mariadb://u@h/db", schema="s")


# -- contention -----------------------------------------------------------------------------


async def test_sixteen_concurrent_acquires_one_winner(url: str) -> None:
    async with SqlLeaseProvider.from_url(url, pool_size=16, max_overflow=0) as p:
        results = await asyncio.gather(
            *(p.acquire_lease("hot\0key", f"owner-{i}", LONG) for i in range(16))
        )
    winners = [r for r in results if r.acquired]
    assert len(winners) == 1
    assert {r.owner for r in results} == {winners[0].owner}
    assert {r.fence for r in results} == {winners[0].fence}


# -- least privilege ------------------------------------------------------------------------


@pytest.fixture
def runtime_url(url: str) -> Iterator[str]:
    """A user with only SELECT, INSERT, UPDATE, DELETE on the leases table and its sequence
    (and SELECT on the version table, for readiness checks): the documented grants."""
    u = make_url(url)
    user = f"sql_lease_rt_{uuid.uuid4().hex[:8]}"
    db = u.database
    with _mariadb.admin_connect(u) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw-{user}'")
        for grant in (
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.`leases` TO '{user}'@'%'",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.`leases_fence_seq` TO '{user}'@'%'",
            f"GRANT SELECT ON `{db}`.`leases_alembic_version` TO '{user}'@'%'",
        ):
            cursor.execute(grant)
    try:
        yield u.set(username=user, password=f"pw-{user}").render_as_string(hide_password=False)
    finally:
        with _mariadb.admin_connect(u) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP USER IF EXISTS '{user}'@'%'")


async def test_the_runtime_user_needs_only_the_documented_grants(runtime_url: str) -> None:
    assert await migrate.check_async(runtime_url)
    k = "tenant\0job"
    async with SqlLeaseProvider.from_url(runtime_url, timeout=10) as p:
        got = await p.acquire_lease(k, "a", LONG)
        assert got.acquired
        assert not (await p.acquire_lease(k, "b", LONG)).acquired
        assert await p.renew_lease(k, "a", LONG)
        assert await p.transfer_lease(k, "a", "b", LONG)
        lease = await p.get_lease(k)
        assert lease is not None and lease.owner == "b" and lease.fence > got.fence
        assert [x.key for x in await p.list_leases("tenant\0")] == [k]
        assert (await p.force_release(k)) is not None
        assert await p.purge_expired(min_age_ms=0) >= 0
        async with p.hold("held", "me", LONG) as held:
            assert held.fence is not None
        waited = await p.wait_for_lease("held", "other", LONG, timeout_ms=LONG)
        assert waited.acquired
        # Counting leases, metadata and all-or-none calls need nothing more.
        assert (await p.acquire_lease("sem", "a", LONG, limit=2, metadata="m")).acquired
        assert (await p.acquire_lease("sem", "b", LONG, limit=2)).acquired
        assert len(await p.get_lease_holders("sem")) == 2
        assert (await p.acquire_leases(["x", "y"], "a", LONG)).acquired
        assert await p.release_leases(["x", "y"], "a") == 2


# -- the guard ------------------------------------------------------------------------------


async def test_guard_in_the_applications_transaction(url: str) -> None:
    engine = create_async_engine(url.replace("mariadb:", "mariadb+asyncmy:", 1))
    try:
        async with SqlLeaseProvider.from_url(url) as p:
            got = await p.acquire_lease("job", "me", LONG)
            async with engine.begin() as conn:
                await conn.exec_driver_sql("SET time_zone = '+05:00'")  # the app's own zone
                await p.guard(conn, "job", got.fence)
            await p.release_lease("job", "me")
            async with engine.begin() as conn:
                with pytest.raises(LeaseLost):
                    await p.guard(conn, "job", got.fence)
    finally:
        await engine.dispose()


# -- failures -------------------------------------------------------------------------------


def _kill_connections_to(url: str) -> int:
    """KILL every connection to ``url``'s database but the caller's; how many."""
    u = make_url(url)
    with _mariadb.admin_connect(u) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> CONNECTION_ID()",
            (u.database,),
        )
        ids = [r[0] for r in cursor.fetchall()]
        for thread in ids:
            cursor.execute(f"KILL {int(thread)}")
    return len(ids)


async def test_a_killed_connection_is_a_typed_error_and_the_provider_recovers(url: str) -> None:
    async with SqlLeaseProvider.from_url(url, timeout=5) as p:
        assert (await p.acquire_lease("k", "a", LONG)).acquired
        assert _kill_connections_to(url) >= 1
        assert await p.get_lease_owner("k") == "a"  # a read runs again on a new connection
        assert _kill_connections_to(url) >= 1
        try:
            assert await p.renew_lease("k", "a", LONG)
        except LeaseConnectionError as exc:  # a write on a dead connection: typed, unknown
            assert exc.outcome_unknown
        assert await p.renew_lease("k", "a", LONG)  # and the next call works
        assert await p.get_lease_owner("k") == "a"


async def test_a_lock_wait_timeout_is_a_typed_error_nothing_applied(url: str) -> None:
    u = make_url(url)
    async with SqlLeaseProvider.from_url(url, timeout=1.5) as p:
        before = await p.acquire_lease("locked", "a", LONG)
        with _mariadb.admin_connect(u, u.database) as blocker, blocker.cursor() as cursor:
            cursor.execute("START TRANSACTION")
            cursor.execute("SELECT fence FROM leases WHERE `key` = 'locked' FOR UPDATE")
            with pytest.raises(LeaseTimeoutError) as caught:
                await p.transfer_lease("locked", "a", "b", LONG)
            assert not caught.value.outcome_unknown  # the server gave up: nothing applied
            cursor.execute("ROLLBACK")
        lease = await p.get_lease("locked")
        assert lease is not None and lease.owner == "a" and lease.fence == before.fence
        assert await p.transfer_lease("locked", "a", "b", LONG)  # the provider goes on


async def test_a_deadlock_is_classified_as_a_conflict_nothing_applied(url: str) -> None:
    u = make_url(url)
    params = {
        "host": u.host,
        "port": u.port or 3306,
        "user": u.username,
        "password": u.password or "",
        "db": u.database,
    }
    async with SqlLeaseProvider.from_url(url) as p:
        await p.acquire_lease("x", "o", LONG)
        await p.acquire_lease("y", "o", LONG)
    one, two = await asyncmy.connect(**params), await asyncmy.connect(**params)
    try:
        c1, c2 = one.cursor(), two.cursor()
        await c1.execute("START TRANSACTION")
        await c2.execute("START TRANSACTION")
        await c1.execute("SELECT 1 FROM leases WHERE `key` = 'x' FOR UPDATE")
        await c2.execute("SELECT 1 FROM leases WHERE `key` = 'y' FOR UPDATE")
        first = asyncio.ensure_future(
            c1.execute("SELECT 1 FROM leases WHERE `key` = 'y' FOR UPDATE")
        )
        await asyncio.sleep(0.2)
        second = c2.execute("SELECT 1 FROM leases WHERE `key` = 'x' FOR UPDATE")
        outcomes = await asyncio.gather(first, second, return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(errors) == 1, outcomes
        backend = backend_named("mariadb")
        assert backend.classify(errors[0]) is Failure.CONFLICT
        error = backend.translate(
            errors[0], operation="acquire_lease", where="w", sent=True, table="t"
        )
        assert isinstance(error, LeaseTimeoutError) and not error.outcome_unknown
    finally:
        one.close()
        two.close()


def test_the_sync_provider_and_its_guard_on_pymysql(url: str) -> None:
    from sqlalchemy import create_engine

    from sql_lease.sync import SqlLeaseProvider as SyncProvider

    engine = create_engine(url.replace("mariadb:", "mariadb+pymysql:", 1))
    try:
        with SyncProvider.from_url(url, timeout=5) as p:
            got = p.acquire_lease("sync\0job", "me", LONG)
            assert got.acquired
            assert not p.acquire_lease("sync\0job", "you", LONG).acquired
            with engine.begin() as conn:
                p.guard(conn, "sync\0job", got.fence)
            assert p.transfer_lease("sync\0job", "me", "you", LONG)
            with engine.begin() as conn, pytest.raises(LeaseLost):
                p.guard(conn, "sync\0job", got.fence)
        with SyncProvider(engine) as borrowed:  # a caller's engine
            assert borrowed.get_lease_owner("sync\0job") == "you"
    finally:
        engine.dispose()


async def test_an_unreachable_server_is_a_typed_error_nothing_sent() -> None:
    async with SqlLeaseProvider.from_url(
        "mariadb://root@127.0.0.1:1/nowhere", timeout=3, connect_timeout=1
    ) as p:
        with pytest.raises(LeaseConnectionError) as caught:
            await p.acquire_lease("k", "o", LONG)
        assert not caught.value.outcome_unknown


async def test_a_database_without_the_migrations_is_a_schema_error(
    make_mariadb_database: Callable[[], str],
) -> None:
    from sql_lease.errors import LeaseSchemaError

    async with SqlLeaseProvider.from_url(make_mariadb_database(), timeout=5) as p:
        with pytest.raises(LeaseSchemaError, match="migrations"):
            await p.acquire_lease("k", "o", LONG)


def test_row_locked_refuses_a_backend_it_does_not_know_and_makes_no_file(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It once fell through to sqlite3.connect(<database name>) for MariaDB, which left empty
    # files named sql_lease_t_<hex> in the working directory.
    from ._observed import row_locked

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="no backend 'sqlite'"), row_locked(url, "sqlite", "k"):
        pass
    with row_locked(url, "mariadb", "k"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_mariadb_url_never_becomes_a_file_in_the_working_directory(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sql_lease.sync import SqlLeaseProvider as SyncProvider

    monkeypatch.chdir(tmp_path)
    missing = make_url(url).set(database=f"{make_url(url).database}_gone")

    async def calls() -> None:
        async with SqlLeaseProvider.from_url(url, timeout=5) as p:
            assert (await p.acquire_lease("f", "o", LONG)).acquired
        async with SqlLeaseProvider.from_url(missing, timeout=5) as p:
            with pytest.raises(LeaseConnectionError):
                await p.acquire_lease("f", "o", LONG)

    asyncio.run(calls())
    with SyncProvider.from_url(url, timeout=5) as sp:
        assert sp.get_lease_owner("f") == "o"
    assert migrate.current(url) is not None
    listed = subprocess.run(
        [sys.executable, "-m", "sql_lease", "list", "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert listed.returncode == 0, listed.stderr
    assert list(tmp_path.iterdir()) == []
