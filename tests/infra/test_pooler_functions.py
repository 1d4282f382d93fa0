"""Pooler mode's server functions (revision 0005), through a real PgBouncer in transaction mode.

Shown: the hot statements reach the server as calls of the table's functions (a function
replaced by hand answers for them); a database without the functions (revision 0004) still
works, on the plain statements, with one warning; a row locked elsewhere ends a call inside a
function with `LeaseTimeoutError` (the ``SET LOCAL`` timeouts hold for the function's statement:
``lock_timeout``, 55P03); a dropped table under the functions is a `LeaseSchemaError` (42P01).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import LeaseSchemaError, LeaseTimeoutError, SqlLeaseProvider, migrate

from .pgbouncer import PgBouncer

pytestmark = [pytest.mark.infra, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def bouncer() -> Iterator[PgBouncer]:
    with PgBouncer(pool_mode="transaction", pool_size=2) as b:
        yield b


def _plain(url: str) -> str:
    return url.replace("+asyncpg", "")


def _pooled(bouncer: PgBouncer, url: str) -> str:
    return bouncer.url(make_url(url).database or "postgres")


async def _lifecycle(provider: SqlLeaseProvider) -> None:
    first = await provider.acquire_lease("job", "a", 60_000)
    assert first.acquired
    assert not (await provider.acquire_lease("job", "b", 60_000)).acquired
    assert await provider.renew_lease("job", "a", 60_000)
    assert await provider.get_lease_owner("job") == "a"
    lease = await provider.get_lease("job")
    assert lease is not None and lease.owner == "a"
    assert await provider.transfer_lease("job", "a", "b", 60_000)
    assert await provider.get_lease_owner("job") == "b"
    await provider.release_lease("job", "b")
    assert await provider.get_lease_owner("job") is None


async def test_the_hot_statements_are_calls_of_the_functions(
    bouncer: PgBouncer, make_database: Callable[[], str]
) -> None:
    url = make_database()
    await migrate.upgrade_async(url)
    provider = SqlLeaseProvider.from_url(_pooled(bouncer, url), timeout=10, pooler="transaction")
    try:
        await _lifecycle(provider)
        with psycopg.connect(_plain(url), autocommit=True) as conn:
            conn.execute(
                "CREATE OR REPLACE FUNCTION leases_get_owner(bytea) RETURNS TABLE(owner bytea)"
                " LANGUAGE sql AS $$ SELECT 'from-the-function'::bytea $$"
            )
        assert await provider.get_lease_owner("nobody") == "from-the-function"
    finally:
        await provider.aclose()


async def test_the_functions_run_their_generic_plans_for_the_call_only(
    bouncer: PgBouncer, make_database: Callable[[], str]
) -> None:
    """A call sets ``plan_cache_mode = force_generic_plan`` for its own transaction: the
    plans plpgsql keeps are not planned again per call (`pooler_text`), and nothing leaks to
    the server connection's next client."""
    url = make_database()
    await migrate.upgrade_async(url)
    provider = SqlLeaseProvider.from_url(_pooled(bouncer, url), timeout=10, pooler="transaction")
    try:
        with psycopg.connect(_plain(url), autocommit=True) as conn:
            conn.execute(
                "CREATE OR REPLACE FUNCTION leases_get_owner(bytea) RETURNS TABLE(owner bytea)"
                " LANGUAGE sql AS $$ SELECT pg_catalog.convert_to("
                "pg_catalog.current_setting('plan_cache_mode'), 'UTF8') $$"
            )
        assert await provider.get_lease_owner("anyone") == "force_generic_plan"
        dsn = bouncer.dsn(make_url(url).database or "postgres")
        for _ in range(4):  # whichever server connection the pooler hands out
            with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as other:
                assert other.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
    finally:
        await provider.aclose()


async def test_without_the_functions_the_plain_statements_run(
    bouncer: PgBouncer, make_database: Callable[[], str], caplog: pytest.LogCaptureFixture
) -> None:
    url = make_database()
    await migrate.upgrade_async(url, "0004")
    provider = SqlLeaseProvider.from_url(_pooled(bouncer, url), timeout=10, pooler="transaction")
    try:
        with caplog.at_level(logging.WARNING, logger="sql_lease"):
            await _lifecycle(provider)
            await _lifecycle(provider)
        warned = [r for r in caplog.records if "server functions" in r.getMessage()]
        assert len(warned) == 1
        assert "0005" in warned[0].getMessage()
    finally:
        await provider.aclose()


async def test_a_locked_row_ends_the_call_inside_the_function_within_the_timeout(
    bouncer: PgBouncer, make_database: Callable[[], str]
) -> None:
    url = make_database()
    await migrate.upgrade_async(url)
    provider = SqlLeaseProvider.from_url(
        _pooled(bouncer, url), timeout=1.0, pooler="transaction", coalesce=False
    )
    try:
        assert (await provider.acquire_lease("job", "a", 60_000)).acquired
        with psycopg.connect(_plain(url)) as holder:  # a transaction: the row stays locked
            holder.execute("SELECT 1 FROM leases WHERE key = 'job' FOR UPDATE")
            with pytest.raises(LeaseTimeoutError) as raised:
                await provider.renew_lease("job", "a", 60_000)
            holder.rollback()
        cause = raised.value.__cause__
        assert isinstance(cause, psycopg.Error)
        assert cause.sqlstate in ("55P03", "57014")
        assert "leases_renew" in str(cause)  # raised in the function (its context line)
        assert await provider.renew_lease("job", "a", 60_000)
    finally:
        await provider.aclose()


async def test_a_dropped_table_under_the_functions_is_a_schema_error(
    bouncer: PgBouncer, make_database: Callable[[], str]
) -> None:
    url = make_database()
    await migrate.upgrade_async(url)
    with psycopg.connect(_plain(url), autocommit=True) as conn:
        conn.execute("DROP TABLE leases")
    provider = SqlLeaseProvider.from_url(_pooled(bouncer, url), timeout=10, pooler="transaction")
    try:
        with pytest.raises(LeaseSchemaError):
            await provider.acquire_lease("job", "a", 60_000)
        with pytest.raises(LeaseSchemaError):
            await provider.get_lease_owner("job")
    finally:
        await provider.aclose()
