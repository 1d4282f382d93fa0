"""A provider given no schema finds its table's schema once, before its first statement.

The schema is the first of the session's *default* search path holding the table (a session's
own ``SET search_path`` and a temporary table do not count), and every statement then names
it. No table: `LeaseSchemaError` naming the fix, and the next call tries again (migrating later
needs no restart). Async and sync providers alike.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from sql_lease import LeaseSchemaError, SqlLeaseProvider, migrate
from sql_lease import sync as sync_lease

pytestmark = pytest.mark.timeout(60)


def _plain(url: str) -> str:
    return url.replace("+asyncpg", "")


async def _database_with_table_in(make_database: Callable[[], str], schema: str) -> str:
    url = make_database()
    with psycopg.connect(_plain(url), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"'.encode())
        conn.execute(
            f'ALTER DATABASE "{url.rsplit("/", 1)[1]}" SET search_path = "$user", {schema}'.encode()
        )
    await migrate.upgrade_async(url, schema=schema)
    return url


async def test_the_schema_is_found_on_the_default_search_path_and_named(
    make_database: Callable[[], str],
) -> None:
    url = await _database_with_table_in(make_database, "home_a")
    provider = SqlLeaseProvider.from_url(url, timeout=10)
    try:
        assert provider.schema is None
        # A temporary table of the same name on the provider's own session, first on its
        # search path: not the table (the statements name the schema they found).
        async with provider.engine.connect() as conn:
            await conn.exec_driver_sql("SET search_path = pg_temp, public")
        assert (await provider.acquire_lease("k", "a", 60_000)).acquired
        assert provider._sql.table == '"home_a"."leases"'
        with psycopg.connect(_plain(url), autocommit=True) as conn:
            rows = conn.execute("SELECT owner FROM home_a.leases").fetchall()
        assert rows == [(b"a",)]
    finally:
        await provider.aclose()
    with sync_lease.SqlLeaseProvider.from_url(url, timeout=10) as sync_provider:
        assert sync_provider.get_lease_owner("k") == "a"
        assert sync_provider.statements.table == '"home_a"."leases"'


async def test_no_table_is_a_schema_error_until_it_is_migrated(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    provider = SqlLeaseProvider.from_url(url, timeout=10)
    sync_provider = sync_lease.SqlLeaseProvider.from_url(url, timeout=10)
    try:
        with pytest.raises(LeaseSchemaError, match="sql-lease migrate"):
            await provider.get_lease_owner("k")
        with pytest.raises(LeaseSchemaError, match="schema="):
            sync_provider.get_lease_owner("k")
        await migrate.upgrade_async(url)
        assert (await provider.acquire_lease("k", "a", 60_000)).acquired
        assert sync_provider.get_lease_owner("k") == "a"
    finally:
        await provider.aclose()
        sync_provider.close()


def test_a_temporary_table_alone_is_not_the_table(make_database: Callable[[], str]) -> None:
    url = make_database()
    with psycopg.connect(_plain(url), autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE leases (key bytea)")
        [(found,)] = conn.execute(
            "SELECT count(*) FROM (" + _home_sql() + ") AS h", ("leases",)
        ).fetchall()
    assert found == 0


def _home_sql() -> str:
    from sql_lease.backends.postgres.catalogue import HOME_SQL

    return HOME_SQL.replace("%", "%%").replace("$1", "%s")
