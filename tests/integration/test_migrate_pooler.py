"""`migrate.*(..., pooler=...)` through a real PgBouncer in transaction mode, and host lists.

A deploy pipeline that only has the pooler's URL migrates through it: no startup parameter
the pooler refuses (PgBouncer's defaults: ``statement_timeout`` is refused), only unnamed
statements, the DDL in one transaction whose server-side lock timeout still ends a migration
stuck behind a lock. The libpq host list (``h1:p1,h2:p2?target_session_attrs=read-write``)
works for every migration call, directly and through the pooler.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import LeaseConnectionError, LeaseTimeoutError, LeaseValueError, migrate

from ..infra.pgbouncer import PgBouncer

pytestmark = [pytest.mark.infra, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def bouncer() -> Iterator[PgBouncer]:
    """Transaction pooling with 2 server connections, the pooler's defaults otherwise."""
    with PgBouncer(pool_mode="transaction", pool_size=2) as b:
        yield b


def via(bouncer: PgBouncer, database_url: str) -> str:
    return bouncer.url(make_url(database_url).database or "postgres")


def dead_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def host_list(url: str) -> str:
    """``url`` with a dead host first: libpq's multi-host form, read-write wanted."""
    u = make_url(url)
    return (
        f"postgresql://{u.username}@127.0.0.1:{dead_port()},{u.host}:{u.port}/{u.database}"
        "?target_session_attrs=read-write"
    )


def direct(url: str) -> psycopg.Connection[tuple[object, ...]]:
    u = make_url(url)
    return psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database)


def test_without_pooler_the_pooler_refuses_the_migration_connection(
    bouncer: PgBouncer, make_database: Callable[[], str]
) -> None:
    # The control: what pooler= is for (the server-side timeouts are startup parameters).
    with pytest.raises(LeaseConnectionError, match="unsupported startup parameter"):
        migrate.upgrade(via(bouncer, make_database()), timeout=20)


def test_every_migration_call_works_through_a_transaction_pooler(
    bouncer: PgBouncer, make_database: Callable[[], str]
) -> None:
    url = via(bouncer, make_database())
    assert migrate.current(url, pooler="transaction") is None
    assert not migrate.check(url, pooler="transaction")
    migrate.upgrade(url, "0001", pooler="transaction", timeout=30)
    assert migrate.current(url, pooler="transaction") == "0001"
    for _ in range(2):  # to head, then again: idempotent
        migrate.upgrade(url, pooler="transaction", timeout=30)
        assert migrate.check(url, pooler="transaction")
    migrate.downgrade(url, "base", pooler="transaction", timeout=30)
    assert migrate.current(url, pooler="transaction") is None
    migrate.upgrade(url, pooler="session", timeout=30)  # the same settings suit session mode
    assert migrate.check(url, pooler="session")


async def test_the_async_forms_take_pooler_too(
    bouncer: PgBouncer, make_database: Callable[[], str]
) -> None:
    url = via(bouncer, make_database())
    await migrate.upgrade_async(url, pooler="transaction", schema="coord")
    assert await migrate.check_async(url, pooler="transaction", schema="coord")
    assert await migrate.current_async(url, pooler="transaction", schema="coord") == migrate.head()
    await migrate.downgrade_async(url, pooler="transaction", schema="coord")
    assert await migrate.current_async(url, pooler="transaction", schema="coord") is None


def test_a_migration_stuck_on_a_lock_is_ended_by_the_server_behind_the_pooler(
    bouncer: PgBouncer, make_database: Callable[[], str]
) -> None:
    database = make_database()
    url = via(bouncer, database)
    migrate.upgrade(url, "0001", pooler="transaction", timeout=30)
    with direct(database) as locker:
        locker.execute("LOCK TABLE leases IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(LeaseTimeoutError) as caught:
            migrate.upgrade(url, pooler="transaction", timeout=2)
    # The server gave up first (SET LOCAL statement_timeout and lock_timeout in the
    # migration's transaction, 80% of timeout), so the transaction rolled back whole.
    assert re.search("due to (statement|lock) timeout", str(caught.value.__cause__))
    assert migrate.current(url, pooler="transaction") == "0001"
    migrate.upgrade(url, pooler="transaction", timeout=30)
    assert migrate.check(url, pooler="transaction")


def test_host_lists_work_for_every_migration_call(
    bouncer: PgBouncer, make_database: Callable[[], str]
) -> None:
    database = make_database()
    listed = host_list(database)
    migrate.upgrade(listed, "0001")
    assert migrate.current(listed) == "0001"
    migrate.upgrade(listed)
    assert migrate.check(listed)
    migrate.downgrade(listed, "base")
    assert migrate.current(listed) is None
    # Through the pooler too: the dead host first, then PgBouncer.
    pooled = host_list(via(bouncer, database))
    migrate.upgrade(pooled, pooler="transaction", timeout=30)
    assert migrate.check(pooled, pooler="transaction")


def test_pooler_is_checked_before_any_io(tmp_path: object) -> None:
    nowhere = f"postgresql://u@127.0.0.1:{dead_port()}/db"
    with pytest.raises(LeaseValueError, match="pooler must be"):
        migrate.check(nowhere, pooler="statement")
    with pytest.raises(LeaseValueError, match="no connection pooler"):
        migrate.upgrade(f"sqlite:///{tmp_path}/x.db", pooler="transaction")
