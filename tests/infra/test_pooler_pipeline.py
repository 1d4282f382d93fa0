"""The psycopg fetch of ``pooler="transaction"`` on the wire, through a real PgBouncer.

PgBouncer in transaction mode with ONE server connection, so every client shares it and
anything a call left behind in the session would show to the next one. Shown: the server-side
timeouts are in force for the statement and gone after it; no prepared statement and no notice
(no ``SET LOCAL`` warning) on the server connection; coalesced batch statements bind their
arrays (``bytea[]`` with NUL, backslash and quote bytes, ``bigint[]`` past int4) exactly, with
``standard_conforming_strings`` either way; a failed statement raises psycopg's exception and
the connection is idle and usable after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.pool import PoolProxiedConnection

from sql_lease import SqlLeaseProvider
from sql_lease.backends import Fetch, backend_for
from sql_lease.backends.postgres import psycopg_driver
from sql_lease.backends.postgres.catalogue import build_catalogue
from sql_lease.backends.postgres.psycopg_wire import Exchange, template
from sql_lease.catalogue import WRITE_KINDS

from .pgbouncer import PgBouncer

pytestmark = [pytest.mark.infra, pytest.mark.timeout(60)]

#: Keys a text protocol could mangle: NUL, backslash, quotes, high bytes, empty.
AWKWARD = [b"\x00", b"a\x00b", b"\\x00", b"'", b'"', b"\xff\xfe", b"", b"{x,y}", b"\\\\"]


@pytest.fixture(scope="module")
def one_server() -> Iterator[PgBouncer]:
    """Transaction pooling over a single server connection: every client shares it."""
    with PgBouncer(pool_mode="transaction", pool_size=1) as b:
        yield b


@pytest.fixture
async def wire(
    one_server: PgBouncer, database_url: str
) -> AsyncIterator[tuple[Fetch, PoolProxiedConnection]]:
    """The provider's own fetch (timeout 10 s: server-side timeouts 8 s) on one connection."""
    with psycopg.connect(database_url.replace("+asyncpg", ""), autocommit=True) as conn:
        conn.execute("TRUNCATE leases")
    url = one_server.url(make_url(database_url).database or "postgres")
    provider = SqlLeaseProvider.from_url(url, timeout=10, pooler="transaction")
    backend = backend_for(provider.engine)
    adapt = backend.adaptor(10.0, True)
    try:
        async with provider.engine.connect() as conn:
            fairy = await conn.get_raw_connection()
            yield adapt(fairy, lambda: backend.catalogue("leases", None, "public")), fairy
    finally:
        await provider.aclose()


@pytest.fixture
def fetch(wire: tuple[Fetch, PoolProxiedConnection]) -> Fetch:
    return wire[0]


def other_client(bouncer: PgBouncer, database_url: str) -> psycopg.Connection[Any]:
    dsn = bouncer.dsn(make_url(database_url).database or "postgres")
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=None)


async def test_timeouts_are_in_force_for_the_statement_and_gone_after(
    fetch: Fetch, one_server: PgBouncer, database_url: str
) -> None:
    settings = "SELECT pg_backend_pid(), current_setting('statement_timeout'), "
    settings += "current_setting('lock_timeout')"
    [(pid, statement, lock)] = await fetch(settings)
    assert (statement, lock) == ("8s", "8s")
    with other_client(one_server, database_url) as other:
        row = other.execute(settings, prepare=False).fetchone()
        prepared = other.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
    assert row == (pid, "0", "0")  # the same server connection, nothing left on it
    assert prepared == (0,)


async def test_no_notice_is_raised(wire: tuple[Fetch, PoolProxiedConnection]) -> None:
    # A SET LOCAL outside a transaction block would warn; inside the query's implicit
    # transaction it does not. The server's notices are the signal.
    fetch, fairy = wire
    conn = fairy.driver_connection
    assert isinstance(conn, psycopg.AsyncConnection)
    notices: list[str | None] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary))
    await fetch("DO $$BEGIN RAISE NOTICE 'probe'; END$$")
    assert notices == ["probe"]  # the handler hears what the server says
    catalogue = build_catalogue("leases")
    assert (await fetch(catalogue.acquire.sql, b"n", b"o", 5000))[0][0] is True
    assert await fetch(catalogue.renew.sql, b"n", b"o", 5000)
    assert await fetch(catalogue.get_owner.sql, b"n") == [(b"o",)]
    assert notices == ["probe"]


async def test_batch_arrays_bind_exactly(fetch: Fetch, database_url: str) -> None:
    batches = build_catalogue("leases").batches
    assert batches is not None
    keys = sorted(k for k in AWKWARD if k)  # the table refuses an empty key
    owners = [b"owner\x00" + k for k in keys]

    def arguments(params: tuple[str, ...], ttl: int) -> list[object]:
        by_name = {"keys": keys, "owners": owners, "ttl_ms": [ttl] * len(keys)}
        return [1000 if p == "lock_wait_ms" else by_name[p.split("_", 1)[1]] for p in params]

    acquire = batches.writes((WRITE_KINDS.index("acquire"),))
    rows = await fetch(acquire.sql, *arguments(acquire.params, 60_000))
    assert sorted((r[1], r[2]) for r in rows) == [(k, True) for k in keys]
    read = await fetch(batches.read.sql, keys)
    assert {r[0]: r[1] for r in read} == dict(zip(keys, owners, strict=True))
    # What the server stored, read back over psycopg's server-side binding.
    with psycopg.connect(database_url.replace("+asyncpg", ""), autocommit=True) as conn:
        stored = conn.execute("SELECT key, owner FROM leases ORDER BY key").fetchall()
    assert stored == sorted(zip(keys, owners, strict=True))
    renew = batches.writes((WRITE_KINDS.index("renew"),))
    renewed = await fetch(renew.sql, *arguments(renew.params, 2**40))  # past int4: bigint[]
    assert sorted(r[1] for r in renewed) == keys


async def test_a_failed_statement_raises_psycopgs_error_and_leaves_the_connection_idle(
    fetch: Fetch,
) -> None:
    with pytest.raises(psycopg.errors.DivisionByZero):
        await fetch("SELECT 1 / $1", 0)
    with pytest.raises(psycopg.errors.UndefinedTable):
        await fetch("SELECT * FROM no_such_table WHERE x = $1", b"\x00")
    assert await fetch("SELECT $1::bytea, $2::bigint, $3::bytea", b"\x00\\'", -(2**40), None) == [
        (b"\x00\\'", -(2**40), None)
    ]
    assert await fetch("SELECT 1 WHERE false") == []


@pytest.mark.parametrize("conforming", ["on", "off"])
async def test_literals_are_right_whatever_standard_conforming_strings_is(
    conforming: str, database_url: str
) -> None:
    # Directly on the server: a SET through the pooler would leak to its other clients.
    u = make_url(database_url)
    conn = await psycopg.AsyncConnection.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    )
    try:
        await conn.execute(f"SET standard_conforming_strings = {conforming}")
        exchange = Exchange(conn)
        found = template(
            "SELECT $1::bytea[], $2::bigint[], $3::bytea, $4::bool[], $5::bytea[]",
            "SET LOCAL lock_timeout = 1000; ",
            exchange.encoding,
        )
        args = (AWKWARD, [1, -5, 2**62], b"\x00'\\", [True, False], [])
        rows = await exchange.run(exchange.query(found, args))
        assert rows == [(AWKWARD, [1, -5, 2**62], b"\x00'\\", [True, False], [])]
    finally:
        await conn.close()


async def test_a_cancelled_call_leaves_its_connection_idle_and_usable(
    wire: tuple[Fetch, PoolProxiedConnection], database_url: str
) -> None:
    """Cancelled mid-statement, the call raises at once; once settled, the server runs
    nothing of it and the same connection (drained to idle) runs the next statement."""
    fetch, fairy = wire
    sleeping = asyncio.ensure_future(fetch("SELECT pg_sleep(30), 'sql_lease_cancel_probe'"))
    u = make_url(database_url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database) as w:
        w.autocommit = True
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
            " AND pid <> pg_backend_pid() AND query LIKE '%sql_lease_cancel_probe%'"
        )
        while w.execute(query).fetchone() != (1,):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        sleeping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sleeping
        await psycopg_driver.settle(fairy)
        assert w.execute(query).fetchone() == (0,)
    conn = fairy.driver_connection
    assert isinstance(conn, psycopg.AsyncConnection)
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert await fetch("SELECT $1::bytea", b"\x00") == [(b"\x00",)]
