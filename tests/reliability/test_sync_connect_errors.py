"""The sync provider says why it cannot connect, at once, as the async one does.

psycopg's pool connects in the background: a wrong password, a missing database, a closed port
or an unknown host used to take the whole timeout (5 s) and end in ``ConnectionRefusedError
... (the 'psycopg.pool' log says why)``, the reason printed three times in that log. Now the
error carries the server's reason within 2 s and the pool logs nothing of it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy.engine import URL, make_url

from sql_lease import LeaseConnectionError, migrate
from sql_lease.sync import SqlLeaseProvider

from ..conftest import server_url
from ._cluster import Cluster

BOUND_S = 2.0


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def pool_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG, logger="psycopg.pool"):
        yield caplog


def refused(url: str | URL, pool_log: pytest.LogCaptureFixture) -> str:
    """The message of the first call's error, after checking its time, type and the log."""
    with SqlLeaseProvider.from_url(url, timeout=5) as provider:
        for _ in range(2):  # the second call too: the reason is kept, not a timeout
            started = time.monotonic()
            with pytest.raises(LeaseConnectionError) as info:
                provider.acquire_lease("k", "o", 1000)
            assert time.monotonic() - started < BOUND_S, info.value
    warnings = [r for r in pool_log.records if r.levelno >= logging.WARNING]
    assert warnings == []
    message = str(info.value)
    assert "'psycopg.pool' log" not in message
    return message


def test_a_missing_database(pool_log: pytest.LogCaptureFixture) -> None:
    url = server_url().set(database=f"nosuch_{uuid.uuid4().hex[:8]}", drivername="postgresql")
    message = refused(url, pool_log)
    assert f'database "{url.database}" does not exist' in message


def test_a_closed_port(pool_log: pytest.LogCaptureFixture) -> None:
    message = refused(f"postgresql://postgres@127.0.0.1:{closed_port()}/db", pool_log)
    assert "Connection refused" in message


def test_an_unknown_host(pool_log: pytest.LogCaptureFixture) -> None:
    message = refused("postgresql://postgres@no-such-host.invalid/db", pool_log)
    assert "no-such-host.invalid" in message


def test_a_wrong_password(cluster: Cluster, pool_log: pytest.LogCaptureFixture) -> None:
    url = cluster.url(password="not-the-password")
    message = refused(url, pool_log)
    assert "password authentication failed" in message
    assert "not-the-password" not in message


def admin_sql(statement: str) -> None:
    admin = server_url()
    with psycopg.connect(
        host=admin.host,
        port=admin.port,
        user=admin.username,
        password=admin.password,
        dbname=admin.database or "postgres",
        autocommit=True,
    ) as conn:
        conn.execute(statement)


def test_the_provider_recovers_once_the_database_exists() -> None:
    name = f"later_{uuid.uuid4().hex[:8]}"
    url = server_url().set(database=name, drivername="postgresql")
    with SqlLeaseProvider.from_url(url, timeout=5) as provider:
        with pytest.raises(LeaseConnectionError):
            provider.acquire_lease("k", "o", 1000)
        admin_sql(f'CREATE DATABASE "{name}"')
        try:
            migrate.upgrade(url)
            deadline = time.monotonic() + 30
            while True:  # the pool tries again after its backoff (about a second)
                try:
                    assert provider.acquire_lease("k", "o", 1000).acquired
                    break
                except LeaseConnectionError:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
        finally:
            provider.close()
            admin_sql(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_a_failed_attempt_to_add_a_connection_waits_for_a_busy_one(
    make_database: Callable[[], str],
) -> None:
    """With a connection open (busy), a second that the server refuses (the role's connection
    limit) is no reason to fail: the call waits for the busy one, as before."""
    url = make_database()
    migrate.upgrade(url)
    role = f"limited_{uuid.uuid4().hex[:8]}"
    admin_sql(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
            conn.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
        limited = make_url(url).set(username=role, drivername="postgresql")
        with SqlLeaseProvider.from_url(limited, timeout=5, pool_size=2) as provider:
            # Twice: the second time, the refused attempt of the first is on record.
            for _ in range(2):
                assert provider.acquire_lease("k", "a", 60_000).acquired  # a connection open
                with psycopg.connect(url) as blocker:  # holds the row: the release waits
                    blocker.execute("SELECT 1 FROM leases FOR UPDATE")
                    busy = threading.Thread(target=provider.release_lease, args=("k", "a"))
                    busy.start()
                    time.sleep(0.5)  # the only connection is busy: a second one is refused
                    commit = threading.Timer(1.0, blocker.commit)
                    commit.start()
                    started = time.monotonic()
                    assert provider.get_lease_owner("k") is None  # after the busy one
                    assert 0.3 < time.monotonic() - started < 4
                    commit.join()
                busy.join()
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
        admin_sql(f"DROP ROLE {role}")
