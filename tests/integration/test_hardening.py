"""Regressions found by the reliability suite: URLs, names, timeouts, connect-time failures."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import LeaseConnectionError, LeaseError, LeaseValueError, SqlLeaseProvider, migrate

from ..conftest import server_url


async def test_password_given_as_query_parameter_is_never_shown() -> None:
    provider = SqlLeaseProvider.from_url(
        "postgresql://u@127.0.0.1:1/db?password=S3cr3tQ", timeout=2, connect_timeout=1
    )
    try:
        assert "S3cr3tQ" not in repr(provider)
        with pytest.raises(LeaseConnectionError) as info:
            await provider.get_lease_owner("k")
        assert "S3cr3tQ" not in str(info.value)
    finally:
        await provider.aclose()


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pw@h:abc/db",
        "postgresql://u:pw@h:5432:1/db",
        "postgresql://u:pw@[::1/db",
        "postgresql://u:pw@h/db?prepared_statement_cache_size=x",
    ],
)
def test_malformed_url_is_a_lease_value_error_without_the_password(url: str) -> None:
    with pytest.raises(LeaseValueError) as info:
        SqlLeaseProvider.from_url(url)
    assert "pw" not in str(info.value).replace("postgresql", "")
    if "prepared" not in url:  # offline SQL never builds a connection, so options don't matter
        with pytest.raises(LeaseValueError):
            migrate.upgrade(url, sql=True)
    with pytest.raises(LeaseError):
        migrate.upgrade(url)


@pytest.mark.parametrize("length", [31, 35, 40])
def test_every_documented_table_name_length_works(length: int) -> None:
    table = "t" * length
    assert "CREATE TABLE" in (migrate.upgrade(None, table_name=table, sql=True) or "")
    SqlLeaseProvider.from_url("postgresql://u@127.0.0.1:1/db", table_name=table)


@pytest.mark.parametrize("seconds", [86_400.5, 3_000_000, 1e300])
def test_timeouts_beyond_a_day_are_refused_up_front(seconds: float) -> None:
    with pytest.raises(LeaseValueError, match="one day"):
        SqlLeaseProvider.from_url("postgresql://u@127.0.0.1:1/db", timeout=seconds)


async def test_a_one_day_timeout_works(database_url: str) -> None:
    async with SqlLeaseProvider.from_url(database_url, timeout=86_400) as provider:
        await provider.now()


async def test_backend_killed_while_connecting_is_a_connection_error(database_url: str) -> None:
    app, u, stop = "sql_lease_connect_kill", make_url(database_url), threading.Event()
    assert server_url().host == u.host

    def killer() -> None:
        with psycopg.connect(
            host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
        ) as conn:
            while not stop.is_set():
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = %s AND pid <> pg_backend_pid()",
                    (app,),
                )

    thread = threading.Thread(target=killer)
    thread.start()
    wrong: list[str] = []
    try:
        for _ in range(40):
            provider = SqlLeaseProvider.from_url(
                database_url, timeout=3, connect_args={"server_settings": {"application_name": app}}
            )
            try:
                await provider.get_lease_owner("k")
            except LeaseConnectionError:
                pass
            except LeaseError as exc:
                wrong.append(f"{type(exc).__name__}: {exc}")
            finally:
                await provider.aclose()
    finally:
        stop.set()
        thread.join()
    assert not wrong, wrong[:3]


@pytest.fixture(params=["postgresql", "sqlite"])
def owned_provider(request: pytest.FixtureRequest) -> SqlLeaseProvider:
    fixture = {"postgresql": "sql_provider", "sqlite": "sqlite_provider"}[request.param]
    provider: SqlLeaseProvider = request.getfixturevalue(fixture)
    return provider


async def test_an_idle_connection_closed_underneath_is_replaced(
    owned_provider: SqlLeaseProvider,
) -> None:
    # The provider does not ask a connection whether it is open before each statement (the
    # driver does): a closed one must still be dropped and the call go on, nothing lost.
    provider = owned_provider
    assert (await provider.acquire_lease("idle\0k", "a", 30_000)).acquired
    idle = list(provider._connections._idle)
    assert idle, "an owned engine keeps its connection between calls"
    for fairy, _, _ in idle:
        await fairy.driver_connection.close()  # asyncpg's or aiosqlite's own connection
    assert await provider.get_lease_owner("idle\0k") == "a"  # a read
    assert await provider.renew_lease("idle\0k", "a", 30_000)  # a write: nothing was sent
    assert provider._connections._idle and all(
        _is_open(fairy.driver_connection) for fairy, _, _ in provider._connections._idle
    )


def _is_open(driver: Any) -> bool:
    if hasattr(driver, "is_closed"):  # asyncpg
        return not driver.is_closed()
    return getattr(driver, "_connection", None) is not None  # aiosqlite
