"""The psycopg executor's guarantees on a real server: deadlines, dead and dying connections.

Each test's provider connects with its own ``application_name`` so that it finds (and
terminates) only its own backends. Blocked calls run in a thread; the test waits for events
(the backend seen waiting in ``pg_stat_activity``, the call returning), never for a guessed
time.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import monotonic
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from sql_lease import LeaseConnectionError, LeaseTimeoutError
from sql_lease.sync import SqlLeaseProvider

from ._events import EVENT_S, eventually

LONG = 60_000


def _admin(url: str) -> psycopg.Connection[Any]:
    u = make_url(url)
    return psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    )


def _app() -> str:
    return f"t_exec_{uuid.uuid4().hex[:10]}"


def _pids(admin: psycopg.Connection[Any], app: str, where: str = "true") -> list[int]:
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        f" AND application_name = %s AND ({where})",
        (app,),
    ).fetchall()
    return [pid for (pid,) in rows]


def _terminate(admin: psycopg.Connection[Any], pids: list[int]) -> None:
    for pid in pids:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    eventually(
        lambda: (
            not admin.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
            ).fetchall()
        ),
        "the terminated backends have exited",
    )


class Background:
    """``fn()`` in a thread; `result()` waits for it (bounded) and re-raises its error."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.elapsed = 0.0

        def run() -> None:
            started = monotonic()
            try:
                self.value = fn()
            except BaseException as exc:
                self.error = exc
            finally:
                self.elapsed = monotonic() - started
                self.done.set()

        threading.Thread(target=run, daemon=True).start()

    def result(self, within: float = EVENT_S) -> Any:
        assert self.done.wait(within), "the call did not return"
        if self.error is not None:
            raise self.error
        return self.value


@contextmanager
def _row_locked(url: str, key: str) -> Iterator[psycopg.Connection[Any]]:
    """Hold a row lock on ``key``'s lease in an open transaction of another connection."""
    u = make_url(url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database) as c:
        c.execute("SELECT 1 FROM leases WHERE key = %s FOR UPDATE", (key.encode(),))
        try:
            yield c
        finally:
            c.rollback()


def test_a_stuck_statement_ends_at_the_deadline_cancelled_on_the_server(
    database_url: str,
) -> None:
    # A caller's engine: no server-side statement_timeout, so only the watchdog can end it.
    app = _app()
    engine = create_engine(
        make_url(database_url).set(drivername="postgresql+psycopg", query={"application_name": app})
    )
    key = f"stuck-{app}"
    timeout = 0.5
    try:
        with SqlLeaseProvider(engine, timeout=timeout) as p, _admin(database_url) as admin:
            before = p.acquire_lease(key, "a", LONG)
            with _row_locked(database_url, key):
                call = Background(lambda: p.renew_lease(key, "a", LONG))
                # No bound on the wait for the error itself beyond the event bound: the
                # blocker holds the lock for as long as the call lasts.
                with pytest.raises(LeaseTimeoutError) as info:
                    call.result()
                waiting = _pids(admin, app, "wait_event_type = 'Lock'")
            assert info.value.outcome_unknown is True  # a write, ended from the client
            cause = info.value.__cause__
            assert isinstance(cause, psycopg.errors.QueryCanceled), cause  # by the server
            assert waiting == []  # nothing of ours still queued on the lock
            # The deadline held (with room for a loaded machine), and nothing was applied.
            assert call.elapsed < timeout + 5.0, call.elapsed
            lease = p.get_lease(key)
            assert lease is not None and lease.expires_at == before.expires_at
            assert p.renew_lease(key, "a", LONG)  # the next call runs on a sound connection
    finally:
        engine.dispose()


def test_a_read_on_connections_that_died_idle_runs_again_and_succeeds(database_url: str) -> None:
    app = _app()
    url = make_url(database_url).update_query_dict({"application_name": app})
    key = f"idle-read-{app}"
    with SqlLeaseProvider.from_url(url, pool_size=4) as p, _admin(database_url) as admin:
        assert p.acquire_lease(key, "a", LONG).acquired
        # Fill the pool with three connections, then kill them all (as a server restart would).
        barrier = threading.Barrier(3)

        def busy() -> Any:
            barrier.wait()
            return p.executor.run("probe", False, "SELECT pg_sleep(0.2)", (), 10)

        for call in [Background(busy) for _ in range(3)]:
            call.result()
        dead = _pids(admin, app)
        assert len(dead) >= 3
        _terminate(admin, dead)
        assert p.get_lease_owner(key) == "a"
        ((pid,),) = p.executor.run("probe", False, "SELECT pg_backend_pid()", (), 10)
        assert pid not in dead


def test_a_write_on_a_connection_that_died_idle_is_sent_on_a_fresh_one(database_url: str) -> None:
    app = _app()
    url = make_url(database_url).update_query_dict({"application_name": app})
    key = f"idle-write-{app}"
    with SqlLeaseProvider.from_url(url, pool_size=2) as p, _admin(database_url) as admin:
        assert p.acquire_lease(key, "a", LONG).acquired
        dead = _pids(admin, app)
        assert dead
        _terminate(admin, dead)
        # Nothing was sent on the dead connection, so the write is neither lost nor unknown.
        assert p.renew_lease(key, "a", LONG)
        assert p.get_lease_owner(key) == "a"


def test_a_write_whose_connection_dies_under_it_has_an_unknown_outcome(database_url: str) -> None:
    app = _app()
    url = make_url(database_url).update_query_dict({"application_name": app})
    key = f"dying-write-{app}"
    with SqlLeaseProvider.from_url(url, timeout=30) as p, _admin(database_url) as admin:
        assert p.acquire_lease(key, "a", LONG).acquired
        with _row_locked(database_url, key):
            call = Background(lambda: p.renew_lease(key, "a", LONG))
            eventually(
                lambda: _pids(admin, app, "wait_event_type = 'Lock'"), "the renewal is waiting"
            )
            _terminate(admin, _pids(admin, app, "wait_event_type = 'Lock'"))
            with pytest.raises(LeaseConnectionError) as info:
                call.result()
        assert info.value.outcome_unknown is True  # sent, then lost: never run again
        assert p.get_lease_owner(key) == "a"  # and the provider carries on


def test_a_read_whose_connection_dies_under_it_runs_once_more_only(database_url: str) -> None:
    app = _app()
    url = make_url(database_url).update_query_dict({"application_name": app})
    sleeping = "state = 'active' AND query LIKE 'SELECT pg_backend_pid(), pg_sleep%%'"
    with SqlLeaseProvider.from_url(url, timeout=30) as p, _admin(database_url) as admin:
        sql = "SELECT pg_backend_pid(), pg_sleep(2)"

        def read() -> Any:
            return p.executor.run("probe", False, sql, (), 30)

        # Killed once: the read runs again on a new connection and returns its answer.
        call = Background(read)
        eventually(lambda: _pids(admin, app, sleeping), "the read is running")
        first = _pids(admin, app, sleeping)
        _terminate(admin, first)
        ((pid, _),) = call.result()
        assert pid not in first
        # Killed twice: the second failure is the caller's (a read is repeated once).
        call = Background(read)
        eventually(lambda: _pids(admin, app, sleeping), "the read is running")
        first = _pids(admin, app, sleeping)
        _terminate(admin, first)
        eventually(
            lambda: [x for x in _pids(admin, app, sleeping) if x not in first],
            "the read is running again",
        )
        _terminate(admin, _pids(admin, app, sleeping))
        with pytest.raises(LeaseConnectionError) as info:
            call.result()
        assert info.value.outcome_unknown is False  # a read changes nothing


@contextmanager
def _stopped(pid: int) -> Iterator[None]:
    """The server process ``pid`` frozen (SIGSTOP): a server or network that stalls."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.skipif(
    os.environ.get("CI") != "true" and (not hasattr(signal, "SIGSTOP") or os.geteuid() != 0),
    reason="needs to signal the server (never skipped under CI=true: there it must run)",
)
def test_a_stalled_server_still_ends_the_call_past_a_cancel_it_cannot_answer(
    database_url: str,
) -> None:
    # The cancel request reaches the postmaster, but the frozen backend cannot act on it:
    # the watchdog then shuts the socket, and the call ends.
    app = _app()
    url = make_url(database_url).update_query_dict({"application_name": app})
    key = f"stalled-{app}"
    timeout = 0.5
    with (
        SqlLeaseProvider.from_url(url, timeout=timeout, pool_size=1) as p,
        _admin(database_url) as admin,
    ):
        assert p.acquire_lease(key, "a", LONG).acquired
        for write, call in (
            (False, lambda: p.get_lease_owner(key)),
            (True, lambda: p.renew_lease(key, "a", LONG)),
        ):
            assert p.get_lease_owner(key) == "a"  # the pool's one connection is open, idle
            (pid,) = _pids(admin, app)
            with _stopped(pid):
                running = Background(call)
                # Bounded by the event wait: without the socket step this call never ends.
                with pytest.raises(LeaseTimeoutError) as info:
                    running.result()
            assert info.value.outcome_unknown is write
            eventually(
                functools.partial(lambda gone: gone not in _pids(admin, app), pid),
                "the dropped backend has exited",
            )
        assert p.get_lease_owner(key) == "a"  # a fresh connection serves the next call
