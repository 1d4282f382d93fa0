"""`migrate.*` and ``sql-lease check/migrate/current/downgrade`` honour their timeouts.

A server that accepts TCP connections and never answers used to hold `migrate.check` and
``sql-lease check --timeout 1s`` for 61 s (asyncpg's default connect timeout). The bounds
asserted here are generous (many times the timeout) so that a loaded machine passes; the bug
they catch is a wait of a minute.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from sql_lease import LeaseTimeoutError, LeaseTypeError, LeaseValueError, migrate
from sql_lease.cli._app import run as cli_run

from ..reliability._proxy import StallingProxy

SLACK = 15.0  # seconds beyond the timeout a loaded machine may take; the bug took 61


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A URL whose server accepts connections (the kernel's backlog) and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    try:
        yield f"postgresql://u:s3cret@127.0.0.1:{server.getsockname()[1]}/db"
    finally:
        server.close()


def _bounded(call: Callable[[], Any], seconds: float) -> LeaseTimeoutError:
    started = time.monotonic()
    with pytest.raises(LeaseTimeoutError) as info:
        call()
    assert time.monotonic() - started < seconds + SLACK
    assert info.value.__cause__ is not None
    assert "s3cret" not in str(info.value)
    return info.value


@pytest.mark.parametrize("name", ["check", "current", "upgrade", "downgrade"])
def test_every_migrate_call_ends_within_its_timeout_on_a_silent_server(
    silent_url: str, name: str
) -> None:
    fn = getattr(migrate, name)
    err = _bounded(lambda: fn(silent_url, timeout=1), 1)
    assert str(err).startswith(f"{name}: ")  # labelled with the call, `check` included


def test_the_connect_timeout_bounds_a_call_without_an_overall_timeout(silent_url: str) -> None:
    _bounded(lambda: migrate.upgrade(silent_url, timeout=None, connect_timeout=1), 1)


async def test_the_async_forms_end_within_their_timeout_too(silent_url: str) -> None:
    started = time.monotonic()
    for call in (migrate.check_async, migrate.current_async, migrate.upgrade_async):
        with pytest.raises(LeaseTimeoutError):
            await call(silent_url, timeout=1)
    assert time.monotonic() - started < 3 + SLACK


async def test_a_network_that_stalls_after_connecting_is_bounded_by_the_timeout() -> None:
    """No server-side timeout applies to an engine of the caller's: the client deadline does."""
    proxy = StallingProxy("127.0.0.1", 5432)
    await proxy.start()
    engine = create_async_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{proxy.port}/postgres")
    stalled = asyncio.Event()

    @event.listens_for(engine.sync_engine, "connect")
    def stall(*_: object) -> None:
        proxy.stall()
        stalled.set()

    try:
        started = time.monotonic()
        with pytest.raises(LeaseTimeoutError):
            await migrate.check_async(engine, timeout=1)
        assert stalled.is_set()
        assert time.monotonic() - started < 1 + SLACK
    finally:
        await proxy.close()
        await engine.dispose()


def test_a_migration_waiting_for_a_lock_times_out_and_changes_nothing(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    migrate.upgrade(url, "0001")
    u = make_url(url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database) as conn:
        conn.execute("LOCK TABLE leases IN ACCESS SHARE MODE")  # 0002's ALTER must wait
        with pytest.raises(LeaseTimeoutError) as info:
            migrate.upgrade(url, timeout=1)
        # The server's lock timeout (80%) or, on a loaded machine, the client's deadline.
        assert str(info.value).startswith("upgrade: ")
        assert migrate.current(url) == "0001"  # rolled back as one transaction
    migrate.upgrade(url, timeout=10)
    assert migrate.check(url, timeout=10)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"timeout": 0}, LeaseValueError),
        ({"timeout": -1.0}, LeaseValueError),
        ({"timeout": "5s"}, LeaseTypeError),
        ({"timeout": True}, LeaseTypeError),
        ({"connect_timeout": None}, LeaseTypeError),
        ({"connect_timeout": 10**9}, LeaseValueError),
    ],
)
def test_bad_timeouts_are_refused_before_any_io(
    silent_url: str, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    started = time.monotonic()
    with pytest.raises(error):
        migrate.check(silent_url, **kwargs)
    assert time.monotonic() - started < SLACK  # refused, not a connection attempt


@pytest.mark.parametrize(
    ("args", "label"),
    [
        (["check"], "check"),
        (["current"], "current"),
        (["migrate"], "upgrade"),
        (["downgrade", "--yes"], "downgrade"),
    ],
)
def test_the_cli_timeout_bounds_the_schema_commands(
    silent_url: str,
    args: list[str],
    label: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.startswith("SQL_LEASE_")]:
        monkeypatch.delenv(name)
    started = time.monotonic()
    code = cli_run([*args, "--url", silent_url, "--timeout", "1s"])
    assert time.monotonic() - started < 1 + SLACK
    err = capsys.readouterr().err
    assert code == 3, err
    (line,) = err.splitlines()
    assert line.startswith(f"sql-lease: error: {label}: no answer from "), line
    assert "s3cret" not in err


def test_sql_lease_check_as_a_readiness_probe_process(silent_url: str) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sql_lease", "check", "--url", silent_url, "--timeout", "1s"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("SQL_LEASE_")},
        timeout=120,
        check=False,
    )
    assert time.monotonic() - started < 1 + SLACK + 20  # + the interpreter's start-up
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("sql-lease: error: check: no answer from ")
