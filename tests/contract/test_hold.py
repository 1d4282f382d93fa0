"""Held leases (`provider.hold`): renewal, release, loss, hand-off and batching, per provider."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import pytest

from sql_lease import HeldLease, LeaseError, LeaseLost, LeaseNotAcquired
from sql_lease._holding.renewer import Renewer
from sql_lease._holding.runtime import runtime_of

from .._events import eventually

LONG = 30_000
TTL = 600  # renewed every 200 ms by default


async def test_hold_renews_in_the_background_and_releases_on_exit(provider: Any) -> None:
    async with provider.hold("k\0t", "a", TTL) as lease:
        assert isinstance(lease, HeldLease) and lease.held
        assert (lease.key, lease.owner) == ("k\0t", "a")
        first_expiry, fence = lease.expires_at, lease.fence
        assert fence is not None and first_expiry is not None
        await past(provider, first_expiry)  # alive from here on only thanks to renewals
        assert lease.renewals >= 1
        assert lease.expires_at is not None and lease.expires_at > first_expiry
        assert lease.fence == fence
        assert await provider.get_lease_owner("k\0t") == "a"
    assert not lease.held and not lease.lost
    assert await provider.get_lease_owner("k\0t") is None
    assert len(runtime_of(provider).renewer) == 0


async def test_hold_on_a_taken_key_raises_not_acquired_naming_the_holder(provider: Any) -> None:
    held = await provider.acquire_lease("k", "x", LONG)
    with pytest.raises(LeaseNotAcquired) as info:
        async with provider.hold("k", "a", TTL):
            pytest.fail("must not run")
    err = info.value
    assert isinstance(err, LeaseError)
    assert (err.key, err.owner, err.holder, err.fence) == ("k", "a", "x", held.fence)
    assert "'x'" in str(err)
    assert await provider.get_lease_owner("k") == "x"


async def test_loss_cancels_the_body_and_raises_lease_lost(
    provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    reached = False
    seen: list[str | None] = []
    box: list[HeldLease] = []

    async def body() -> None:
        nonlocal reached
        async with provider.hold(
            "k", "a", TTL, on_lost=lambda lease: seen.append(lease.lost_reason)
        ) as lease:
            box.append(lease)
            assert await provider.force_release("k")
            await forever()  # cancelled at the next renewal
            reached = True

    with (
        caplog.at_level(logging.WARNING, logger="sql_lease.hold"),
        pytest.raises(LeaseLost) as info,
    ):
        await body()
    assert not reached
    lease = box[0]
    assert lease.lost and not lease.held
    assert info.value.key == "k" and info.value.fence == lease.fence
    assert isinstance(info.value.__cause__, asyncio.CancelledError)
    assert seen == [lease.lost_reason]
    assert "lost" in caplog.text
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_loss_is_raised_even_if_the_body_swallows_the_cancellation(provider: Any) -> None:
    async def body() -> None:
        async with provider.hold("k", "a", TTL):
            await provider.force_release("k")
            with contextlib.suppress(asyncio.CancelledError):
                await forever()  # bad manners, but the loss still surfaces

    with pytest.raises(LeaseLost):
        await body()


async def test_an_outer_cancellation_is_not_swallowed_by_a_loss(provider: Any) -> None:
    entered = asyncio.Event()
    box: list[HeldLease] = []

    async def body() -> None:
        async with provider.hold("k", "a", TTL) as lease:
            box.append(lease)
            entered.set()
            await forever()

    task = asyncio.create_task(body())
    await entered.wait()
    await provider.force_release("k")
    await box[0].wait_lost()  # the hold has just cancelled the body...
    task.cancel()  # ...and someone else cancels the task too, before it runs again
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_without_cancel_on_loss_the_body_runs_on_and_the_exit_raises(provider: Any) -> None:
    box: list[HeldLease] = []

    async def body() -> None:
        async with provider.hold("k", "a", TTL, cancel_on_loss=False) as lease:
            box.append(lease)
            await provider.force_release("k")
            assert await lease.wait_lost() is True
            await asyncio.sleep(0.05)  # not cancelled

    with pytest.raises(LeaseLost):
        await body()
    assert box[0].lost


async def test_release_on_exception_and_on_cancellation(provider: Any) -> None:
    with pytest.raises(KeyError):
        async with provider.hold("k1", "a", LONG):
            raise KeyError("boom")
    assert await provider.get_lease_owner("k1") is None

    entered = asyncio.Event()

    async def body() -> None:
        async with provider.hold("k2", "a", LONG):
            entered.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(body())
    await entered.wait()
    assert await provider.get_lease_owner("k2") == "a"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await provider.get_lease_owner("k2") is None


async def test_hand_off_leaves_no_gap_and_stops_renewing(provider: Any) -> None:
    async with provider.hold("k", "a", TTL) as lease:
        await lease.transfer_to("b", ttl_ms=TTL)
        assert lease.handed_to == "b" and not lease.held and not lease.lost
        taken = await provider.get_lease("k")
        assert taken.owner == "b" and taken.fence > lease.fence
        assert (await provider.acquire_lease("k", "racer", LONG)).owner == "b"
    assert await provider.get_lease_owner("k") == "b"  # not released on exit
    await past(provider, taken.expires_at)
    assert await provider.get_lease_owner("k") is None  # b's lease was not renewed by a's hold
    assert await lease.wait_lost() is False


async def test_transfer_of_a_lost_lease_raises_lease_lost(provider: Any) -> None:
    async def body() -> None:
        async with provider.hold("k", "a", LONG, cancel_on_loss=False) as lease:
            await provider.force_release("k")
            await provider.acquire_lease("k", "x", LONG)
            with pytest.raises(LeaseLost):
                await lease.transfer_to("b")

    with pytest.raises(LeaseLost):
        await body()
    assert await provider.get_lease_owner("k") == "x"


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"ttl_ms": 1000, "renew_every_ms": 501}, ValueError),
        ({"ttl_ms": 1000, "renew_every_ms": 0}, ValueError),
        ({"ttl_ms": 1000, "renew_every_ms": 1.5}, TypeError),
        ({"ttl_ms": 1, "renew_every_ms": None}, ValueError),
        ({"ttl_ms": 0}, ValueError),
        ({"ttl_ms": 1000, "wait_ms": -1}, ValueError),
        ({"ttl_ms": 1000, "cancel_on_loss": 1}, TypeError),
        ({"ttl_ms": 1000, "on_lost": "print"}, TypeError),
    ],
)
async def test_hold_validates_its_arguments_before_any_io(
    provider: Any, kwargs: dict[str, Any], exc: type[Exception]
) -> None:
    with pytest.raises(exc):
        provider.hold("k", "a", **kwargs)
    with pytest.raises(TypeError):
        provider.hold(3, "a", 1000)
    assert await provider.get_lease_owner("k") is None


async def test_hooks_may_be_sync_or_async(provider: Any) -> None:
    events: list[str] = []

    async def renewed(lease: HeldLease) -> None:
        events.append("renewed")

    async with provider.hold(
        "k",
        "a",
        TTL,
        renew_every_ms=100,
        on_acquired=lambda lease: events.append("acquired"),
        on_renewed=renewed,
        on_released=lambda lease: events.append("released"),
    ):
        await eventually(lambda: events.count("renewed") >= 2, "two renewals")
    assert events[0] == "acquired" and events[-1] == "released"
    assert events.count("renewed") >= 2


async def test_a_hold_is_single_use(provider: Any) -> None:
    lease = provider.hold("k", "a", TTL)
    async with lease:
        pass
    with pytest.raises(RuntimeError):
        async with lease:
            pass


async def test_many_held_leases_are_renewed_by_one_statement_per_tick(provider: Any) -> None:
    """1,000 held leases of one provider, one TTL: one renewal statement per tick."""
    calls = count_renewal_statements(provider)
    renewer = runtime_of(provider).renewer
    holds: list[HeldLease] = []
    all_in, done = asyncio.Event(), asyncio.Event()

    async def worker(w: int) -> None:  # 10 tasks holding 100 leases each
        async with contextlib.AsyncExitStack() as stack:
            for i in range(100):
                lease = provider.hold(f"bulk:{w}:{i}", "me", 5_000, renew_every_ms=300)
                holds.append(await stack.enter_async_context(lease))
            if len(holds) == 1_000:
                all_in.set()
            await done.wait()

    async with asyncio.TaskGroup() as group:
        for w in range(10):
            group.create_task(worker(w))
        await all_in.wait()
        start = await between_ticks(renewer, calls)
        await eventually(
            lambda: renewer.ticks >= start[0] + 2 and all(lease.renewals >= 2 for lease in holds),
            "two ticks, and every lease renewed twice",
        )
        ticks, sent = await between_ticks(renewer, calls, since=start)
        done.set()
    print(f"\n{provider!r}: 1,000 held leases, {ticks} ticks, {sent} renewal statements")
    assert ticks >= 2
    assert sent == ticks  # one statement per tick
    assert all(lease.renewals >= 2 and not lease.lost for lease in holds)
    assert await provider.list_leases("bulk:") == []


async def test_one_statement_per_distinct_ttl_per_tick(provider: Any) -> None:
    calls = count_renewal_statements(provider)
    renewer = runtime_of(provider).renewer
    async with (
        provider.hold("a", "me", 600, renew_every_ms=200),
        provider.hold("b", "me", 900, renew_every_ms=200),
    ):
        start = await between_ticks(renewer, calls)
        await eventually(lambda: renewer.ticks >= start[0] + 2, "two ticks")
        ticks, sent = await between_ticks(renewer, calls, since=start)
    assert ticks >= 2
    assert ticks <= sent <= 2 * ticks


async def forever() -> None:
    """A body that only ends by being cancelled."""
    await asyncio.Event().wait()


async def past(provider: Any, when: Any) -> None:
    """Return once ``when`` has passed by the provider's clock."""
    now = await provider.now()
    while now <= when:
        await asyncio.sleep((when - now).total_seconds() + 0.01)
        now = await provider.now()


async def between_ticks(
    renewer: Renewer, calls: list[int], since: tuple[int, int] = (0, 0)
) -> tuple[int, int]:
    """(ticks, statements) since ``since``, read when no renewal round is in flight."""
    while (batch := renewer._batch) is not None:
        await asyncio.wait([batch])
    return renewer.ticks - since[0], calls[0] - since[1]


def count_renewal_statements(provider: Any) -> list[int]:
    """Count the renewal statements ``provider`` sends (instance-level wrappers)."""
    calls = [0]
    if hasattr(provider, "_fetch"):  # SQL: count statements at the execution layer
        fetch = provider._fetch

        async def counting_fetch(operation: str, *args: Any) -> Any:
            if operation == "renew_leases":
                calls[0] += 1
            return await fetch(operation, *args)

        provider._fetch = counting_fetch
    else:
        many = provider.renew_many

        async def counting_many(*args: Any) -> Any:
            calls[0] += 1
            return await many(*args)

        provider.renew_many = counting_many
    return calls
