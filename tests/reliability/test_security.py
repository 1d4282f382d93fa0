"""Security: least privilege at runtime, passwords kept secret, identifiers validated and quoted."""

from __future__ import annotations

import asyncio
import logging
import traceback
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import quote

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL, make_url

from sql_lease import (
    LeaseConnectionError,
    LeaseDatabaseError,
    LeaseError,
    LeaseValueError,
    SqlLeaseProvider,
    migrate,
)

from ._cluster import Cluster

LONG = 60_000


def admin(url: str) -> psycopg.Connection:
    u = make_url(url)
    return psycopg.connect(
        host=u.host,
        port=u.port,
        user=u.username,
        password=u.password,
        dbname=u.database,
        autocommit=True,
    )


# -- a least-privilege runtime role --------------------------------------------------------


@pytest.fixture
def runtime_role(make_database: Callable[[], str]) -> Iterator[tuple[str, str]]:
    """A migrated database (migrations run by the owner) and a role with only DML rights.

    Yields (owner URL, runtime URL). The role may SELECT, INSERT, UPDATE and DELETE rows of the
    leases table and use its fence sequence; nothing else: no DDL, no other table, not even the
    migrations' version table. Dropped afterwards (roles are global to the server).
    """
    owner_url = make_database()
    migrate.upgrade(owner_url)
    role = f"lease_runtime_{uuid.uuid4().hex[:10]}"
    db = make_url(owner_url).database
    with admin(owner_url) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN NOINHERIT')
        conn.execute(f'REVOKE ALL ON DATABASE "{db}" FROM PUBLIC')
        conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
        conn.execute(f'GRANT CONNECT ON DATABASE "{db}" TO "{role}"')
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON leases TO "{role}"')
        conn.execute(f'GRANT USAGE ON SEQUENCE leases_fence_seq TO "{role}"')
    runtime_url = make_url(owner_url).set(username=role).render_as_string(hide_password=False)
    try:
        yield owner_url, runtime_url
    finally:
        with admin(owner_url) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


async def test_least_privilege_runtime_role_runs_every_operation(
    runtime_role: tuple[str, str],
) -> None:
    owner_url, runtime_url = runtime_role
    k = "tenant\0thread"
    async with SqlLeaseProvider.from_url(runtime_url, timeout=10) as p:
        # The contract.
        got = await p.acquire_lease(k, "a", LONG)
        assert got.acquired and got.fence is not None
        assert not (await p.acquire_lease(k, "b", LONG)).acquired
        assert await p.get_lease_owner(k) == "a"
        lease = await p.get_lease(k)
        assert lease is not None and lease.fence == got.fence
        assert await p.renew_lease(k, "a", LONG)
        assert await p.transfer_lease(k, "a", "b", LONG)
        await p.release_lease(k, "b")
        assert await p.get_lease_owner(k) is None
        # The extensions.
        assert (await p.acquire_lease(k, "c", LONG)).acquired
        assert await p.renew_leases([(k, "c"), ("other", "x")], LONG) == [True, False]
        assert [le.key for le in await p.list_leases("tenant\0")] == [k]
        assert await p.force_release(k)
        assert await p.purge_expired(min_age_ms=1) >= 0
        async with p.hold("held", "h", LONG) as held:
            assert held.held
            async with p.engine.connect() as conn, conn.begin():
                lease = await p.get_lease("held")
                assert lease is not None
                await p.guard(conn, "held", lease.fence)  # SELECT ... FOR SHARE
        waited = await p.wait_for_lease("held", "w", LONG, timeout_ms=2_000)
        assert waited.acquired
        await p.now()
    # ... and nothing more: the role cannot change the schema or see the migrations' table.
    async with (
        SqlLeaseProvider.from_url(runtime_url, timeout=10) as p,
        p.engine.connect() as conn,
    ):
        for statement in (
            "CREATE TABLE intruder (x int)",
            "TRUNCATE leases",
            "DROP TABLE leases",
            "SELECT * FROM leases_alembic_version",
            "ALTER SEQUENCE leases_fence_seq RESTART WITH 1",
        ):
            with pytest.raises(Exception, match=r"permission denied|must be owner"):
                await conn.exec_driver_sql(statement)
            await conn.rollback()
    # Migrations need the owner: with the runtime role they fail cleanly.
    with pytest.raises(LeaseDatabaseError):
        await migrate.upgrade_async(runtime_url, "head")
    assert await migrate.check_async(owner_url)


# -- passwords stay secret -----------------------------------------------------------------

SECRET = "S3cr3t:p@ss/w%rd?#&=é"  # needs percent-encoding in a URL
ENCODED = quote(SECRET, safe="")


@pytest.fixture
def app_role(cluster: Cluster) -> Iterator[tuple[str, str]]:
    """On the password-protected cluster: a migrated database, a role whose password needs
    quoting; yields (good URL, URL with a wrong password), both as plain strings."""
    name = f"sec_{uuid.uuid4().hex[:10]}"
    owner_url = cluster.create_database(name)
    migrate.upgrade(owner_url)
    role = f"app_{uuid.uuid4().hex[:8]}"
    with cluster.admin(name) as conn:
        conn.execute(
            psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                psycopg.sql.Identifier(role), psycopg.sql.Literal(SECRET)
            )
        )
        conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON leases TO "{role}"')
        conn.execute(f'GRANT USAGE ON SEQUENCE leases_fence_seq TO "{role}"')
    base = f"postgresql://{role}:{{}}@127.0.0.1:{cluster.port}/{name}"
    try:
        yield base.format(ENCODED), base.format(quote("wrong" + SECRET, safe=""))
    finally:
        with cluster.admin(name) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def leaks(text_: str) -> list[str]:
    needles = {SECRET, ENCODED, "S3cr3t", quote(SECRET), SECRET.replace("%", "%%")}
    return [n for n in needles if n in text_]


def exception_text(exc: BaseException) -> str:
    """Everything a log or a crash report would show: the whole chain, with reprs."""
    parts = ["".join(traceback.format_exception(exc))]
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        parts += [str(cur), repr(cur), repr(getattr(cur, "args", ""))]
        cur = cur.__cause__ or cur.__context__
    return "\n".join(parts)


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    for name in ("", "sqlalchemy", "sqlalchemy.engine", "sqlalchemy.pool", "asyncpg", "sql_lease"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


def logged_text(caplog: pytest.LogCaptureFixture) -> str:
    out = []
    for record in caplog.records:
        out.append(record.getMessage())
        out.append(repr(record.args))
        if record.exc_info and record.exc_info[1] is not None:
            out.append(exception_text(record.exc_info[1]))
    return "\n".join(out)


async def test_password_that_needs_quoting_works_and_never_shows(
    app_role: tuple[str, str], debug_logs: pytest.LogCaptureFixture
) -> None:
    good, wrong = app_role
    # The percent-encoded password authenticates (SCRAM), with SQL echoed at DEBUG.
    async with SqlLeaseProvider.from_url(good, timeout=10, echo="debug", echo_pool="debug") as p:
        assert (await p.acquire_lease("k", "a", LONG)).acquired
        assert await p.get_lease_owner("k") == "a"
        shown = [repr(p), str(p), repr(p.engine), repr(p.engine.url), str(p.engine.url)]
        assert not leaks("\n".join(shown)), shown
    # A wrong password: a typed error that names the server, never the password.
    async with SqlLeaseProvider.from_url(wrong, timeout=5) as p:
        with pytest.raises(LeaseConnectionError) as info:
            await p.get_lease_owner("k")
        assert getattr(info.value.__cause__, "sqlstate", None) == "28P01"
        assert f"127.0.0.1:{make_url(good).port}" in str(info.value)
        assert not leaks(exception_text(info.value)), exception_text(info.value)
    # Migrations and readiness checks with the password in the URL. The role may not read the
    # migrations' version table, so even the readiness check is refused, cleanly.
    with pytest.raises(LeaseDatabaseError, match="permission denied") as refused:
        await migrate.check_async(good)
    assert not leaks(exception_text(refused.value))
    with pytest.raises(LeaseError) as failed:
        await migrate.upgrade_async(wrong)
    assert not leaks(exception_text(failed.value))
    assert debug_logs.records, "nothing was logged: the capture is not working"
    assert not leaks(logged_text(debug_logs)), leaks(logged_text(debug_logs))


async def test_unreachable_server_error_never_shows_the_password(
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    url = URL.create(
        "postgresql", username="u", password=SECRET, host="127.0.0.1", port=1, database="d"
    )
    for form in (url, url.render_as_string(hide_password=False)):
        async with SqlLeaseProvider.from_url(form, timeout=2, connect_timeout=1) as p:
            assert not leaks(repr(p))
            with pytest.raises(LeaseConnectionError) as info:
                await p.acquire_lease("k", "a", LONG)
            assert not leaks(exception_text(info.value)), exception_text(info.value)
    assert not leaks(logged_text(debug_logs))


# -- identifiers are validated and quoted -------------------------------------------------

HOSTILE = [
    'leases"; DROP TABLE leases; --',
    "leases; DROP TABLE leases",
    "leases--",
    "le ases",
    "leases\0",
    "pg_catalog.pg_class",
    '"leases"',
    "leases'",
    "caf\u00e9",
    "1leases",
    "",
    "x" * 64,
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_table_and_schema_names_are_rejected_before_any_sql(name: str) -> None:
    url = "postgresql://u:pw@127.0.0.1:1/none"
    with pytest.raises(LeaseValueError):
        SqlLeaseProvider.from_url(url, table_name=name)
    with pytest.raises(LeaseValueError):
        SqlLeaseProvider.from_url(url, schema=name)
    with pytest.raises(LeaseValueError):
        migrate.upgrade(None, table_name=name, sql=True)
    with pytest.raises(LeaseValueError):
        migrate.upgrade(None, schema=name, sql=True)


async def test_reserved_and_mixed_case_names_are_quoted_consistently(
    make_database: Callable[[], str],
) -> None:
    """Names that are only safe when quoted work end to end, and case is kept exactly."""
    url = make_database()
    await migrate.upgrade_async(url, table_name="select", schema="Order")
    await migrate.upgrade_async(url, table_name="Leases")
    await migrate.upgrade_async(url, table_name="leases")
    async with (
        SqlLeaseProvider.from_url(url, table_name="select", schema="Order") as reserved,
        SqlLeaseProvider.from_url(url, table_name="Leases") as upper,
        SqlLeaseProvider.from_url(url) as lower,
    ):
        assert (await reserved.acquire_lease("k", "r", LONG)).acquired
        assert (await upper.acquire_lease("k", "u", LONG)).acquired
        assert (await lower.acquire_lease("k", "l", LONG)).acquired
        owners = await asyncio.gather(*(p.get_lease_owner("k") for p in (reserved, upper, lower)))
        assert owners == ["r", "u", "l"]  # three tables, as named
        async with lower.engine.connect() as conn:
            found = await conn.execute(
                text(
                    'SELECT to_regclass(\'"Order"."select"\') IS NOT NULL,'
                    " to_regclass('public.\"Leases\"') IS NOT NULL,"
                    " to_regclass('public.leases') IS NOT NULL"
                )
            )
            assert found.one() == (True, True, True)
