"""Held leases, sync: renewal from one thread per provider, loss, hand-off, close."""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

import pytest

from sql_lease import LeaseAlreadyHeld, LeaseClosedError, LeaseError, LeaseLost, LeaseNotAcquired
from sql_lease.sync import HeldLease

from ._events import eventually

LONG = 30_000
TTL = 600  # renewed every 200 ms


def test_hold_renews_in_the_background_and_releases_on_exit(sync_provider: Any) -> None:
    with sync_provider.hold("k\0t", "a", TTL) as lease:
        assert isinstance(lease, HeldLease) and lease.held
        first, fence = lease.expires_at, lease.fence
        # Alive past its TTL only thanks to renewals: wait for three of them.
        eventually(lambda: lease.renewals >= 3, "three renewals")
        assert lease.expires_at > first and lease.fence == fence
        assert sync_provider.get_lease_owner("k\0t") == "a"
        lease.check()
    assert not lease.held and not lease.lost.is_set()
    assert sync_provider.get_lease_owner("k\0t") is None
    assert len(sync_provider.renewer) == 0


def test_hold_on_a_taken_key_raises_not_acquired_naming_the_holder(sync_provider: Any) -> None:
    held = sync_provider.acquire_lease("k", "x", LONG)
    with pytest.raises(LeaseNotAcquired) as info, sync_provider.hold("k", "a", TTL):
        pytest.fail("must not run")
    assert (info.value.holder, info.value.fence) == ("x", held.fence)
    assert sync_provider.get_lease_owner("k") == "x"


def test_loss_sets_the_event_calls_on_lost_and_raises_on_exit(
    sync_provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str | None] = []
    called = threading.Event()

    def on_lost(lease: HeldLease) -> None:
        seen.append(lease.lost_reason)
        called.set()

    with (  # noqa: PT012 - the block's exit raises: the body is what leads to it
        caplog.at_level(logging.WARNING, logger="sql_lease.hold"),
        pytest.raises(LeaseLost) as info,
        sync_provider.hold("k", "a", TTL, on_lost=on_lost) as lease,
    ):
        assert sync_provider.force_release("k")
        assert lease.lost.wait(30), "loss not noticed"
        with pytest.raises(LeaseLost):
            lease.check()
        assert called.wait(30)
    assert info.value.key == "k" and info.value.fence == lease.fence
    assert seen == [lease.lost_reason] and not lease.held
    assert "lost" in caplog.text


def test_a_body_error_wins_over_a_loss(sync_provider: Any) -> None:
    with pytest.raises(KeyError), sync_provider.hold("k", "a", TTL) as lease:  # noqa: PT012
        sync_provider.force_release("k")
        assert lease.lost.wait(30)
        raise KeyError("boom")


def test_release_on_exception(sync_provider: Any) -> None:
    with pytest.raises(KeyError), sync_provider.hold("k", "a", LONG):
        raise KeyError("boom")
    assert sync_provider.get_lease_owner("k") is None


def test_hand_off_leaves_no_gap_and_stops_renewing(sync_provider: Any) -> None:
    with sync_provider.hold("k", "a", TTL) as lease:
        lease.transfer_to("b", ttl_ms=TTL)
        assert lease.handed_to == "b" and not lease.held and not lease.lost.is_set()
        taken = sync_provider.get_lease("k")
        assert taken.owner == "b" and taken.fence > lease.fence
        assert sync_provider.acquire_lease("k", "racer", LONG).owner == "b"
    assert sync_provider.get_lease_owner("k") == "b"  # not released on exit
    eventually(lambda: sync_provider.get_lease_owner("k") is None, "b's lease expiring")


def test_transfer_of_a_lost_lease_raises_lease_lost(sync_provider: Any) -> None:
    with pytest.raises(LeaseLost), sync_provider.hold("k", "a", LONG) as lease:  # noqa: PT012
        sync_provider.force_release("k")
        sync_provider.acquire_lease("k", "x", LONG)
        with pytest.raises(LeaseLost):
            lease.transfer_to("b")
    assert sync_provider.get_lease_owner("k") == "x"


def test_a_second_hold_of_the_same_key_and_owner_is_refused(sync_provider: Any) -> None:
    with sync_provider.hold("k", "a", LONG):
        with pytest.raises(LeaseAlreadyHeld), sync_provider.hold("k", "a", LONG):
            pytest.fail("must not run")
        assert sync_provider.get_lease_owner("k") == "a"
    assert sync_provider.get_lease_owner("k") is None


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"ttl_ms": 1000, "renew_every_ms": 501}, ValueError),
        ({"ttl_ms": 1000, "renew_every_ms": 0}, ValueError),
        ({"ttl_ms": 1000, "renew_every_ms": 1.5}, TypeError),
        ({"ttl_ms": 1}, ValueError),
        ({"ttl_ms": 0}, ValueError),
        ({"ttl_ms": 1000, "wait_ms": -1}, ValueError),
        ({"ttl_ms": 1000, "on_lost": "print"}, TypeError),
    ],
)
def test_hold_validates_its_arguments_before_any_io(
    sync_provider: Any, kwargs: dict[str, Any], exc: type[Exception]
) -> None:
    with pytest.raises(exc) as info:
        sync_provider.hold("k", "a", **kwargs)
    assert isinstance(info.value, LeaseError)
    with pytest.raises(TypeError):
        sync_provider.hold(3, "a", 1000)
    assert sync_provider.get_lease_owner("k") is None


def test_hooks_run_in_order(sync_provider: Any) -> None:
    events: list[str] = []
    with sync_provider.hold(
        "k",
        "a",
        TTL,
        renew_every_ms=100,
        on_acquired=lambda lease: events.append("acquired"),
        on_renewed=lambda lease: events.append("renewed"),
        on_released=lambda lease: events.append("released"),
    ):
        eventually(lambda: events.count("renewed") >= 2, "two renewals")
    assert events[0] == "acquired" and events[-1] == "released"


def test_many_held_leases_share_one_statement_per_tick(sync_provider: Any) -> None:
    renewer = sync_provider.renewer
    with contextlib.ExitStack() as stack:
        holds = [
            stack.enter_context(sync_provider.hold(f"bulk:{i}", "me", 3_000, renew_every_ms=300))
            for i in range(200)
        ]
        ticks0, sent0 = renewer.ticks, renewer.statements
        eventually(lambda: all(h.renewals >= 2 for h in holds), "every lease renewed twice")
        ticks, sent = renewer.ticks - ticks0, renewer.statements - sent0
    assert ticks >= 2 and sent == ticks  # one TTL: one statement per tick, for 200 leases
    assert not any(h.lost.is_set() for h in holds)
    assert sync_provider.list_leases("bulk:") == []


def test_a_closed_provider_refuses_every_call_and_ends_its_holds(sync_provider: Any) -> None:
    lease = sync_provider.hold("k", "a", LONG).__enter__()
    sync_provider.close()
    assert lease.lost.is_set() and "closed" in (lease.lost_reason or "")
    calls = [
        lambda: sync_provider.acquire_lease("k", "a", LONG),
        lambda: sync_provider.get_lease_owner("k"),
        lambda: sync_provider.get_lease("k"),
        lambda: sync_provider.release_lease("k", "a"),
        lambda: sync_provider.renew_lease("k", "a", LONG),
        lambda: sync_provider.transfer_lease("k", "a", "b", LONG),
        lambda: sync_provider.renew_leases([("k", "a")], LONG),
        lambda: sync_provider.list_leases(),
        lambda: sync_provider.hold("k", "b", LONG),
        lambda: sync_provider.wait_for_lease("k", "b", LONG, timeout_ms=10),
    ]
    for call in calls:
        with pytest.raises(LeaseClosedError):
            call()
    with pytest.raises(LeaseLost):
        lease.__exit__(None, None, None)
    sync_provider.close()  # idempotent
