"""Construction, URLs, engines and database failures of the sync SQL provider (real servers)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from sql_lease import (
    LeaseConnectionError,
    LeaseError,
    LeaseLost,
    LeaseSchemaError,
    LeaseTimeoutError,
    LeaseTypeError,
    LeaseValueError,
    migrate,
)
from sql_lease.sync import SqlLeaseProvider
from tests.contract.test_bad_input import cases

from ._events import eventually

LONG = 30_000


@pytest.mark.parametrize(("method", "param", "value", "exc"), cases()[::7])
def test_bad_argument_is_rejected_before_any_io(
    method: str, param: str, value: object, exc: type[Exception]
) -> None:
    goods = {"key": "k", "owner": "o", "from_owner": "o", "to_owner": "p", "ttl_ms": LONG}
    params = {
        "acquire_lease": ("key", "owner", "ttl_ms"),
        "get_lease_owner": ("key",),
        "get_lease": ("key",),
        "release_lease": ("key", "owner"),
        "renew_lease": ("key", "owner", "ttl_ms"),
        "transfer_lease": ("key", "from_owner", "to_owner", "ttl_ms"),
    }[method]
    with SqlLeaseProvider.from_url("postgresql://u:pw@127.0.0.1:1/none", timeout=1) as p:
        started = time.monotonic()
        with pytest.raises(exc) as info:
            getattr(p, method)(*[value if n == param else goods[n] for n in params])
        assert isinstance(info.value, LeaseError)
        assert time.monotonic() - started < 0.5  # no connection attempt was waited for


def test_an_unreachable_server_is_a_connection_error_without_the_password() -> None:
    with SqlLeaseProvider.from_url(
        "postgresql://u:s3cret@127.0.0.1:1/none", timeout=1, connect_timeout=1
    ) as p:
        with pytest.raises(LeaseConnectionError) as info:
            p.get_lease_owner("k")
        assert "s3cret" not in str(info.value) and "s3cret" not in repr(p)
        assert info.value.__cause__ is not None


@pytest.mark.parametrize(
    ("url", "exc"),
    [
        ("mysql://h/db", LeaseValueError),
        ("sqlite://", LeaseValueError),
        ("sqlite:///:memory:", LeaseValueError),
        ("not a url", LeaseValueError),
    ],
)
def test_unusable_urls_are_refused_at_once(url: str, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        SqlLeaseProvider.from_url(url)


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"timeout": 0}, LeaseValueError),
        ({"timeout": True}, LeaseTypeError),
        ({"table_name": "bad name"}, LeaseValueError),
        ({"schema": "x;y"}, LeaseValueError),
        ({"pool_size": 0}, LeaseValueError),
        ({"synchronous_commit": 1}, LeaseTypeError),
    ],
)
def test_bad_options_are_refused_at_construction(
    database_url: str, kwargs: dict[str, object], exc: type[Exception]
) -> None:
    with pytest.raises(exc):
        SqlLeaseProvider.from_url(database_url, **kwargs)  # type: ignore[arg-type]


def test_urls_of_every_accepted_form_reach_the_database(database_url: str) -> None:
    url = make_url(database_url)
    for scheme in ("postgresql", "postgres", "postgresql+asyncpg", "postgresql+psycopg"):
        with SqlLeaseProvider.from_url(url.set(drivername=scheme)) as p:
            assert p.now().tzinfo is not None


def test_a_callers_engine_is_used_and_left_open(database_url: str, sqlite_url: str) -> None:
    pg = create_engine(make_url(database_url).set(drivername="postgresql+psycopg"))
    lite = create_engine(sqlite_url)
    try:
        for engine in (pg, lite):
            with SqlLeaseProvider(engine) as p:
                key = f"engine\0{engine.dialect.name}"
                assert p.acquire_lease(key, "a", LONG).acquired
                assert p.get_lease_owner(key) == "a"
                p.release_lease(key, "a")
            with engine.connect() as conn:  # still usable, and back in transactional mode
                assert conn.execute(text("SELECT 1")).scalar() == 1
                raw = conn.connection.dbapi_connection
                if engine is pg:
                    assert not raw.autocommit  # type: ignore[union-attr]
                else:
                    assert raw.isolation_level is not None  # type: ignore[union-attr]
    finally:
        pg.dispose()
        lite.dispose()


def test_wrong_engines_are_refused(database_url: str) -> None:
    with pytest.raises(LeaseTypeError):
        SqlLeaseProvider("postgresql://x/y")  # type: ignore[arg-type]
    from sqlalchemy.ext.asyncio import create_async_engine

    async_engine = create_async_engine(make_url(database_url).set(drivername="postgresql+asyncpg"))
    with pytest.raises(LeaseTypeError):
        SqlLeaseProvider(async_engine)  # type: ignore[arg-type]
    with pytest.raises(LeaseValueError):  # a sync Engine on a driver we do not run on
        SqlLeaseProvider(create_engine("postgresql+asyncpg://u@127.0.0.1:1/db"))


def test_a_missing_table_is_a_schema_error(database_url: str, tmp_path: Path) -> None:
    with (
        SqlLeaseProvider.from_url(database_url, table_name="nowhere") as p,
        pytest.raises(LeaseSchemaError),
    ):
        p.acquire_lease("k", "a", LONG)
    with (
        SqlLeaseProvider.from_url(f"sqlite:///{tmp_path / 'empty.db'}") as p,
        pytest.raises(LeaseSchemaError),
    ):
        p.get_lease_owner("k")


def test_a_row_locked_past_the_timeout_is_a_timeout_error_that_changed_nothing(
    database_url: str,
) -> None:
    u = make_url(database_url)
    with SqlLeaseProvider.from_url(database_url, timeout=1) as p:
        assert p.acquire_lease("locked", "a", LONG).acquired
        with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database) as c:
            c.execute("SELECT 1 FROM leases WHERE key = %s FOR UPDATE", (b"locked",))
            with pytest.raises(LeaseTimeoutError) as info:
                p.renew_lease("locked", "a", 5_000)
            assert info.value.outcome_unknown is False  # the server cancelled it: not applied
            c.rollback()
        assert p.get_lease("locked").owner == "a"


@pytest.mark.parametrize("pool", ["owned", "engine"])
def test_a_connection_whose_statement_failed_serves_the_next_call(
    database_url: str, pool: str
) -> None:
    """One connection only: a statement the server ended (a lock timeout) leaves it, and its
    kept cursor, usable by the next calls (the failure does not stick to the connection)."""
    u = make_url(database_url)
    key = f"stuck-{pool}"
    engine = None
    if pool == "owned":
        provider = SqlLeaseProvider.from_url(database_url, timeout=1, pool_size=1)
    else:
        url = u.set(drivername="postgresql+psycopg", query={"options": "-c lock_timeout=500"})
        engine = create_engine(url, pool_size=1, max_overflow=0)
        provider = SqlLeaseProvider(engine, timeout=1)
    try:
        assert provider.acquire_lease(key, "a", LONG).acquired
        with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database) as c:
            c.execute("SELECT 1 FROM leases WHERE key = %s FOR UPDATE", (key.encode(),))
            with pytest.raises(LeaseTimeoutError) as info:
                provider.renew_lease(key, "a", 5_000)
            assert info.value.outcome_unknown is False
            c.rollback()
        for _ in range(3):
            assert provider.renew_lease(key, "a", LONG)
            assert provider.get_lease_owner(key) == "a"
        with pytest.raises(LeaseSchemaError):
            SqlLeaseProvider.from_url(database_url, table_name="nowhere").get_lease_owner("k")
        assert provider.transfer_lease(key, "a", "b", LONG)
        assert provider.get_lease(key).owner == "b"
    finally:
        provider.close()
        if engine is not None:
            engine.dispose()


def test_a_stuck_sqlite_writer_times_out(sqlite_url: str) -> None:
    import sqlite3

    path = make_url(sqlite_url).database
    assert path is not None
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with (
            SqlLeaseProvider.from_url(sqlite_url, timeout=0.5) as p,
            pytest.raises(LeaseTimeoutError),
        ):
            p.acquire_lease("busy", "a", LONG)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_guard_holds_the_fence_in_the_callers_transaction(database_url: str) -> None:
    engine = create_engine(make_url(database_url).set(drivername="postgresql+psycopg"))
    try:
        with SqlLeaseProvider.from_url(database_url, timeout=2) as p:
            held = p.acquire_lease("fenced", "a", LONG)
            with engine.begin() as conn:
                p.guard(conn, "fenced", held.fence)
                # While the guard's transaction is open nobody can take the lease over.
                done = threading.Event()
                threading.Thread(
                    target=lambda: (p.transfer_lease("fenced", "a", "b", LONG), done.set())
                ).start()
                assert not done.wait(0.3)
            eventually(done.is_set, "the transfer after the guard's commit")
            with engine.begin() as conn, pytest.raises(LeaseLost):
                p.guard(conn, "fenced", held.fence)
            with pytest.raises(LeaseTypeError):
                p.guard("conn", "fenced", 1)
    finally:
        engine.dispose()


def test_the_sqlite_file_is_shared_with_the_async_provider(sqlite_url: str) -> None:
    import asyncio

    from sql_lease import SqlLeaseProvider as AsyncProvider

    with SqlLeaseProvider.from_url(sqlite_url) as p:
        held = p.acquire_lease("shared\0k", "sync", LONG)

        async def look() -> tuple[str | None, int | None]:
            async with AsyncProvider.from_url(sqlite_url) as ap:
                lease = await ap.get_lease("shared\0k")
                return (lease.owner, lease.fence) if lease else (None, None)

        assert asyncio.run(look()) == ("sync", held.fence)
        p.release_lease("shared\0k", "sync")
    assert migrate.current(sqlite_url) is not None
