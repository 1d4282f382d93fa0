"""A MariaDB server restarted under a provider in use: a private server (never the shared one
at 3306, which other work uses) on its own port and data directory (`tests.infra.private_mariadb`).

While it is down a call is a typed connection error that says nothing was sent; a renewal
waiting on a row lock when the server goes away is a typed error whose outcome is unknown; once
it is back, the same provider (not rebuilt) works again, and nothing committed before the
restart is lost (the lease, its owner and fence). Fails under CI=true when mariadbd is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

from sql_lease import SqlLeaseProvider, migrate
from sql_lease.errors import LeaseConnectionError, LeaseError

from ..infra.private_mariadb import PrivateMariadb, find_mariadbd, in_ci

LONG = 60_000


@pytest.fixture
def server() -> Iterator[PrivateMariadb]:
    if find_mariadbd() is None:
        message = "mariadbd and mariadb-install-db are needed for the restart test"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    with PrivateMariadb() as running:
        yield running


@pytest.mark.timeout(180)
async def test_a_server_restart_is_a_typed_error_nothing_lost_and_the_provider_recovers(
    server: PrivateMariadb,
) -> None:
    with server.connect() as conn, conn.cursor() as cursor:
        cursor.execute("CREATE DATABASE leases_db")
    url = server.url("leases_db")
    await migrate.upgrade_async(url)
    provider = SqlLeaseProvider.from_url(url, timeout=5, connect_timeout=2)
    try:
        held = await provider.acquire_lease("job", "a", LONG)
        assert held.acquired and held.fence is not None
        assert (await provider.acquire_lease("sem", "a", LONG, limit=2)).acquired

        # A renewal waiting for a row lock when the server goes away: its fate is unknown.
        blocker = server.connect("leases_db")
        blocker.cursor().execute("START TRANSACTION")
        blocker.cursor().execute("SELECT 1 FROM leases WHERE `key` = 'job' FOR UPDATE")
        renewal = asyncio.create_task(provider.renew_lease("job", "a", LONG))
        await asyncio.sleep(0.3)
        assert not renewal.done()
        await asyncio.to_thread(server.stop)
        with contextlib.suppress(Exception):
            blocker.close()
        with pytest.raises(LeaseError) as cut:
            await renewal
        assert cut.value.outcome_unknown, repr(cut.value)

        # Down: a typed connection error, nothing sent.
        with pytest.raises(LeaseConnectionError) as down:
            await provider.acquire_lease("other", "b", LONG)
        assert not down.value.outcome_unknown

        await asyncio.to_thread(server.start)
        # Back: the same provider goes on; the lease from before is there, as it was.
        lease = await provider.get_lease("job")
        assert lease is not None and (lease.owner, lease.fence) == ("a", held.fence)
        assert not (await provider.acquire_lease("job", "b", LONG)).acquired
        assert await provider.renew_lease("job", "a", LONG)
        assert [h.owner for h in await provider.get_lease_holders("sem")] == ["a"]
        moved = await provider.acquire_lease("other", "b", LONG)
        assert moved.acquired and moved.fence is not None and moved.fence > held.fence
    finally:
        await provider.aclose()
