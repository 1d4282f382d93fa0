"""Today's behaviour behind a real PgBouncer (baseline for issue 13; asserts what is true today).

PgBouncer 1.18 (Debian) in front of the shared test server. What these tests pin down:

- `SqlLeaseProvider.from_url` always sends ``statement_timeout`` and ``lock_timeout`` as
  startup parameters; PgBouncer refuses them (in every pool mode) unless told to ignore them, so
  every call fails with `LeaseConnectionError` naming the parameter;
- with ``ignore_startup_parameters`` and asyncpg's statement cache off, the contract operations
  work, but the server-side timeouts are silently gone (``SHOW statement_timeout`` says 0) and a
  statement stuck on a row lock is ended by the client-side deadline instead;
- with the statement cache on, a cached (named) statement is bound on whichever server
  connection the pooler hands out next: there it does not exist;
- a pooler-side ``connect_query`` can put the timeouts back (a documented-setting option).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import asyncpg
import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import LeaseConnectionError, LeaseError, SqlLeaseProvider

from .pgbouncer import PgBouncer

pytestmark = [pytest.mark.infra, pytest.mark.timeout(60)]

IGNORED = ("statement_timeout", "lock_timeout")
NO_CACHE = {"statement_cache_size": 0}


def through(bouncer: PgBouncer, database_url: str) -> str:
    return bouncer.url(make_url(database_url).database or "postgres")


@pytest.fixture
def bouncer(request: pytest.FixtureRequest) -> Iterator[PgBouncer]:
    """A PgBouncer on the shared server; ``indirect`` parameters go to `PgBouncer`."""
    options = dict(getattr(request, "param", {}))
    b = PgBouncer(**options)
    b.start()
    yield b
    b.stop()


@pytest.mark.parametrize(
    "bouncer", [{"pool_mode": "transaction"}, {"pool_mode": "session"}], indirect=True, ids=str
)
async def test_from_url_fails_behind_pgbouncer_on_its_startup_parameters(
    bouncer: PgBouncer, database_url: str
) -> None:
    provider = SqlLeaseProvider.from_url(
        through(bouncer, database_url), timeout=5, connect_args=NO_CACHE
    )
    try:
        with pytest.raises(LeaseConnectionError, match="unsupported startup parameter"):
            await provider.acquire_lease("k", "a", 1000)
    finally:
        await provider.aclose()


TX_IGNORING = {"pool_mode": "transaction", "ignore_startup_parameters": IGNORED, "pool_size": 4}


@pytest.mark.parametrize("bouncer", [TX_IGNORING], indirect=True, ids=["transaction"])
async def test_ignoring_the_parameters_the_contract_works_without_server_timeouts(
    bouncer: PgBouncer, database_url: str
) -> None:
    url = through(bouncer, database_url)
    provider = SqlLeaseProvider.from_url(url, timeout=5, connect_args=NO_CACHE)
    try:
        key = "pooled\0key"
        first = await provider.acquire_lease(key, "a", 5000)
        assert first.acquired and first.owner == "a"
        assert (await provider.acquire_lease(key, "b", 5000)).owner == "a"
        assert await provider.get_lease_owner(key) == "a"
        assert await provider.renew_lease(key, "a", 5000)
        assert await provider.transfer_lease(key, "a", "b", 5000)
        lease = await provider.get_lease(key)
        assert lease is not None and lease.owner == "b"
        assert first.fence is not None and lease.fence > first.fence
        await provider.release_lease(key, "b")
        assert await provider.get_lease_owner(key) is None
        # 64 concurrent callers on a few keys: no errors. (TTLs outlast a loaded machine's
        # slowest gather: one grant per key.)
        results = await asyncio.gather(
            *(provider.acquire_lease(f"base{i % 4}", f"o{i}", 60_000) for i in range(64)),
            return_exceptions=True,
        )
        assert not [r for r in results if isinstance(r, BaseException)]
        assert sum(1 for r in results if not isinstance(r, BaseException) and r.acquired) == 4
    finally:
        await provider.aclose()
    # The settings from_url asked for never reached the server.
    conn = await asyncpg.connect(url, statement_cache_size=0)
    try:
        assert await conn.fetchval("SHOW statement_timeout") == "0"
        assert await conn.fetchval("SHOW lock_timeout") == "0"
    finally:
        await conn.close()


@pytest.mark.parametrize("bouncer", [TX_IGNORING], indirect=True, ids=["transaction"])
async def test_a_statement_stuck_on_a_lock_is_ended_by_the_client_deadline_only(
    bouncer: PgBouncer, database_url: str
) -> None:
    """No server-side timeout: the server keeps waiting, the client's deadline ends the call."""
    provider = SqlLeaseProvider.from_url(
        through(bouncer, database_url), timeout=1.0, connect_args=NO_CACHE
    )
    u = make_url(database_url)
    try:
        await provider.acquire_lease("locked", "a", 60_000)
        with psycopg.connect(
            host=u.host, port=u.port, user=u.username, dbname=u.database
        ) as blocker:
            blocker.execute("SELECT 1 FROM leases FOR UPDATE")
            with pytest.raises(LeaseError) as caught:
                await provider.renew_lease("locked", "a", 60_000)
            blocker.rollback()
        assert type(caught.value).__name__ == "LeaseTimeoutError"
        assert not isinstance(caught.value.__cause__, asyncpg.LockNotAvailableError)
    finally:
        await provider.aclose()


@pytest.mark.parametrize(
    "bouncer", [{**TX_IGNORING, "pool_size": 2}], indirect=True, ids=["transaction"]
)
async def test_with_the_statement_cache_a_named_statement_meets_another_server(
    bouncer: PgBouncer, database_url: str
) -> None:
    url = through(bouncer, database_url)
    client = await asyncpg.connect(url)  # asyncpg's default: named, cached statements
    pinner = await asyncpg.connect(url, statement_cache_size=0)
    try:
        assert await client.fetchval("SELECT $1::int + 1", 1) == 2  # prepared on server S1
        # PgBouncer reuses the most recently released server: the pinner's transaction takes
        # S1, so the client's next call runs on another server, where its statement is unknown.
        pin = pinner.transaction()
        await pin.start()
        await pinner.fetchval("SELECT 1")
        with pytest.raises(asyncpg.InvalidSQLStatementNameError, match="does not exist"):
            await client.fetchval("SELECT $1::int + 1", 1)
        await pin.rollback()
    finally:
        await client.close()
        await pinner.close()


@pytest.mark.parametrize(
    "bouncer",
    [{**TX_IGNORING, "database_options": {"connect_query": "'SET statement_timeout = 800'"}}],
    indirect=True,
    ids=["connect_query"],
)
async def test_a_pooler_connect_query_sets_the_server_timeout_for_every_client(
    bouncer: PgBouncer, database_url: str
) -> None:
    conn = await asyncpg.connect(through(bouncer, database_url), statement_cache_size=0)
    try:
        assert await conn.fetchval("SHOW statement_timeout") == "800ms"
        with pytest.raises(asyncpg.QueryCanceledError):
            await conn.execute("SELECT pg_sleep(5)")
    finally:
        await conn.close()
