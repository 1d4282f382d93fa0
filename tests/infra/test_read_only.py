"""A server that turned read-only (SQLSTATE 25006): a typed error, nothing applied, and the
connection dropped so that the next call reconnects (issue 13).

On the shared server a database set ``default_transaction_read_only`` stands in for a demoted
primary: the provider's connection is read-only, the setting is then lifted, and the next call
(on a new connection) succeeds, which it could not on the kept one. Against a real streaming
standby: the standby alone refuses with the same error; with both hosts and
``target_session_attrs=read-write`` the provider reaches the writable one.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import LeaseConnectionError, SqlLeaseProvider, migrate

from .cluster import Replicated

pytestmark = [pytest.mark.infra, pytest.mark.timeout(90)]


def set_read_only(url: str, on: bool) -> None:
    u = make_url(url)
    with psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname="postgres", autocommit=True
    ) as conn:
        action = "SET default_transaction_read_only = on" if on else "RESET ALL"
        conn.execute(f'ALTER DATABASE "{u.database}" {action}'.encode())


async def test_a_read_only_connection_is_a_typed_error_and_is_dropped(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    await migrate.upgrade_async(url)
    set_read_only(url, True)
    provider = SqlLeaseProvider.from_url(url, timeout=5)
    try:
        with pytest.raises(LeaseConnectionError, match="read-only") as caught:
            await provider.acquire_lease("k", "a", 30_000)
        assert caught.value.outcome_unknown is False  # refused before anything applied
        set_read_only(url, False)
        # The read-only connection was dropped: the next write runs on a new, writable one
        # (on the kept one it would fail again: the setting is the session's from its start).
        assert (await provider.acquire_lease("k", "b", 30_000)).acquired
        assert await provider.get_lease_owner("k") == "b"  # "a" never got it
    finally:
        await provider.aclose()


async def test_a_standby_refuses_and_target_session_attrs_finds_the_primary() -> None:
    with Replicated(synchronous=False) as cluster:
        cluster.create_database("leases")
        primary = f"postgresql://postgres@127.0.0.1:{cluster.primary.port}/leases"
        await migrate.upgrade_async(primary)
        cluster.wait_replayed()
        standby = SqlLeaseProvider.from_url(
            f"postgresql://postgres@127.0.0.1:{cluster.standby.port}/leases", timeout=5
        )
        try:
            with pytest.raises(LeaseConnectionError, match="target_session_attrs") as caught:
                await standby.acquire_lease("k", "a", 30_000)
            assert caught.value.outcome_unknown is False
        finally:
            await standby.aclose()
        both = (
            f"postgresql://postgres@127.0.0.1:{cluster.standby.port},"
            f"127.0.0.1:{cluster.primary.port}/leases?target_session_attrs=read-write"
        )
        provider = SqlLeaseProvider.from_url(both, timeout=5)
        try:
            assert (await provider.acquire_lease("k", "a", 30_000)).acquired
        finally:
            await provider.aclose()
