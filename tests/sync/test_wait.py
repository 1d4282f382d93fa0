"""Waiting for a busy key, sync: wake-ups by NOTIFY (PostgreSQL), by local release, by expiry."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from sql_lease import LeaseNotAcquired
from sql_lease.sync import AcquireResult, SqlLeaseProvider

from ._events import eventually

LONG = 30_000
PATIENT = 2 * LONG  # a waiter's timeout past the holder's expiry: only a wake-up beats both


def _waiting(provider: Any, key: str) -> tuple[threading.Thread, list[AcquireResult]]:
    got: list[AcquireResult] = []
    thread = threading.Thread(
        target=lambda: got.append(provider.wait_for_lease(key, "a", LONG, timeout_ms=PATIENT))
    )
    thread.start()
    eventually(lambda: provider.waiters.sleeping(key) == 1, f"a waiter of {key!r} asleep")
    return thread, got


def test_a_waiter_gets_the_key_soon_after_the_holder_releases(sync_provider: Any) -> None:
    held = sync_provider.acquire_lease("k\0t", "x", LONG)
    thread, got = _waiting(sync_provider, "k\0t")
    sync_provider.release_lease("k\0t", "x")
    thread.join(PATIENT / 1000)
    assert got and got[0].acquired and got[0].owner == "a"
    # Taken before x's lease would have expired: a wake-up, not the expiry re-check.
    assert got[0].expires_at - timedelta(milliseconds=LONG) < held.expires_at


def test_a_release_by_another_process_wakes_the_waiter_through_notify(
    database_url: str,
) -> None:
    with (
        SqlLeaseProvider.from_url(database_url) as waiter_side,
        SqlLeaseProvider.from_url(database_url) as holder_side,
    ):
        key = "notify\0k"
        holder_side.release_lease(key, "x")
        held = holder_side.acquire_lease(key, "x", LONG)
        assert held.acquired
        thread, got = _waiting(waiter_side, key)
        listener = waiter_side.waiters.listener
        assert listener is not None and listener.connected
        before = listener.notifications
        holder_side.release_lease(key, "x")  # another provider: only a NOTIFY can tell
        thread.join(PATIENT / 1000)
        assert got and got[0].acquired
        assert got[0].expires_at - timedelta(milliseconds=LONG) < held.expires_at
        assert listener.notifications > before
        waiter_side.release_lease(key, "a")


def test_waiters_take_turns_one_holder_at_a_time(sync_provider: Any) -> None:
    sync_provider.acquire_lease("k", "first", LONG)
    inside: list[str] = []
    overlaps = 0
    lock = threading.Lock()

    def worker(name: str) -> None:
        nonlocal overlaps
        with sync_provider.hold("k", name, LONG, wait_ms=PATIENT):
            with lock:
                inside.append(name)
                overlaps += len(inside) > 1
            threading.Event().wait(0.02)
            with lock:
                inside.remove(name)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(5)]
    for t in threads:
        t.start()
    sync_provider.release_lease("k", "first")
    for t in threads:
        t.join(PATIENT / 1000)
    assert overlaps == 0 and not any(t.is_alive() for t in threads)
    assert sync_provider.get_lease_owner("k") is None


def test_hold_with_wait_ms_gives_up_with_not_acquired(sync_provider: Any) -> None:
    sync_provider.acquire_lease("k", "x", LONG)
    with pytest.raises(LeaseNotAcquired) as info, sync_provider.hold("k", "a", LONG, wait_ms=200):
        pytest.fail("must not run")
    assert info.value.holder == "x"
