"""libpq URL parameters reach the real server: session settings, timeouts, host lists."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from sqlalchemy.engine import make_url

from sql_lease import SqlLeaseProvider, migrate
from sql_lease.errors import LeaseConnectionError, LeaseDatabaseError


def with_query(database_url: str, query: str) -> str:
    return f"{database_url}?{query}"


async def session_value(provider: SqlLeaseProvider, sql: str) -> object:
    async with provider.engine.connect() as conn:
        return (await conn.exec_driver_sql(sql)).scalar()


def host_list(database_url: str, *hosts: str, query: str = "") -> str:
    """``database_url`` with its host replaced by a libpq host list."""
    url = make_url(database_url)
    user = quote(url.username or "postgres", safe="")
    auth = f"{user}:{quote(url.password, safe='')}" if url.password else user
    return f"postgresql://{auth}@{','.join(hosts)}/{url.database}" + (f"?{query}" if query else "")


def own_host(database_url: str) -> str:
    url = make_url(database_url)
    return f"{url.host or '127.0.0.1'}:{url.port or 5432}"


@pytest.fixture
def closed_port() -> int:
    """A local port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that completes the TCP handshake (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


async def test_application_name_from_the_url_shows_in_pg_stat_activity(database_url: str) -> None:
    sql = "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"
    async with SqlLeaseProvider.from_url(database_url) as plain:
        assert await session_value(plain, sql) == "sql_lease"  # the default
    url = with_query(database_url, "application_name=billing-worker&connect_timeout=10")
    async with SqlLeaseProvider.from_url(url) as named:
        assert await session_value(named, sql) == "billing-worker"
        assert (await named.acquire_lease("url-app", "o", 5_000)).acquired


async def test_options_settings_from_the_url_reach_the_session(database_url: str) -> None:
    url = with_query(database_url, "options=-c%20statement_timeout%3D1234%20--lock-timeout%3D777")
    async with SqlLeaseProvider.from_url(url, timeout=5) as provider:
        assert await session_value(provider, "SHOW statement_timeout") == "1234ms"
        assert await session_value(provider, "SHOW lock_timeout") == "777ms"
        assert (await provider.acquire_lease("url-options", "o", 5_000)).acquired
    async with SqlLeaseProvider.from_url(database_url, timeout=5) as provider:
        assert await session_value(provider, "SHOW statement_timeout") == "4s"  # 80% of 5 s


async def test_keepalive_parameters_become_the_servers_tcp_keepalive_settings(
    database_url: str,
) -> None:
    url = with_query(
        database_url, "keepalives=1&keepalives_idle=41&keepalives_interval=7&tcp_user_timeout=9000"
    )
    async with SqlLeaseProvider.from_url(url) as provider:
        assert await session_value(provider, "SHOW tcp_keepalives_idle") == "41"
        assert await session_value(provider, "SHOW tcp_keepalives_interval") == "7"
        assert await session_value(provider, "SHOW tcp_user_timeout") == "9000"
    async with SqlLeaseProvider.from_url(
        with_query(database_url, "keepalives=0&keepalives_idle=41")
    ) as provider:
        assert await session_value(provider, "SHOW tcp_keepalives_idle") != "41"


async def test_connect_timeout_from_the_url_bounds_a_connection_that_never_answers(
    silent_server: int,
) -> None:
    # Every other bound is a day: only the URL's connect_timeout can end this call (the
    # test's own timeout fails it otherwise).
    url = f"postgresql://postgres@127.0.0.1:{silent_server}/x?connect_timeout=1"
    provider = SqlLeaseProvider.from_url(url, timeout=86_400, connect_timeout=86_400)
    async with provider:
        with pytest.raises(LeaseDatabaseError):
            await provider.get_lease_owner("k")


async def test_a_host_list_falls_through_a_closed_port_to_the_next_host(
    database_url: str, closed_port: int
) -> None:
    url = host_list(
        database_url,
        f"127.0.0.1:{closed_port}",
        own_host(database_url),
        query="target_session_attrs=read-write",
    )
    async with SqlLeaseProvider.from_url(url) as provider:
        assert (await provider.acquire_lease("url-hosts", "o", 5_000)).acquired
        port = make_url(database_url).port or 5432
        assert await session_value(provider, "SELECT inet_server_port()") == port
        assert f"127.0.0.1:{closed_port}," in repr(provider)  # shown as it was written
    assert await migrate.check_async(url)  # the migrations take the same URL


async def test_target_session_attrs_is_applied(database_url: str) -> None:
    # The test server is a primary: asking for a standby finds none.
    url = host_list(database_url, own_host(database_url), query="target_session_attrs=standby")
    async with SqlLeaseProvider.from_url(url) as provider:
        with pytest.raises(LeaseConnectionError):
            await provider.get_lease_owner("k")
