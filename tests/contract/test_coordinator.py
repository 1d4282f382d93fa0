"""The signals-style coordinator on every provider: run, queue, route, transfer, fall back."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from sql_lease import NOOP_LEASE_PROVIDER
from sql_lease.coordinator import Coordinator, Outcome, Run

KEY = "resource\0thread-1"
TTL = 5_000


@dataclass
class Recorder:
    """Work and route callables that record what happened; work can be held open."""

    provider: Any
    runs: list[Run[str]] = field(default_factory=list)
    owners_during_run: list[str | None] = field(default_factory=list)
    routed: list[tuple[str, str, str]] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    during: Callable[[Run[str]], Any] | None = None

    def __post_init__(self) -> None:
        self.gate.set()

    async def work(self, run: Run[str]) -> None:
        self.runs.append(run)
        self.started.set()
        self.owners_during_run.append(await self.provider.get_lease_owner(run.key))
        if self.during is not None:
            await self.during(run)
        await self.gate.wait()

    async def route(self, key: str, owner: str, signal: str) -> None:
        self.routed.append((key, owner, signal))


def make(provider: Any, name: str = "a", ttl_ms: int = TTL) -> tuple[Coordinator[str], Recorder]:
    recorder = Recorder(provider)
    serial = itertools.count(1)
    coordinator: Coordinator[str] = Coordinator(
        provider,
        work=recorder.work,
        route=recorder.route,
        ttl_ms=ttl_ms,
        run_ids=lambda: f"{name}:{next(serial)}",
    )
    return coordinator, recorder


async def idle(coordinator: Coordinator[Any]) -> None:
    await asyncio.wait_for(coordinator.wait_idle(), 10)


async def test_a_signal_runs_under_the_lease_which_is_released_afterwards(provider: Any) -> None:
    coordinator, rec = make(provider)
    assert await coordinator.signal(KEY, "s1") is Outcome.STARTED
    await idle(coordinator)
    [run] = rec.runs
    assert (run.signals, run.started_by, run.run_id) == (("s1",), "acquire", "a:1")
    assert run.fence is not None
    assert rec.owners_during_run == ["a:1"]
    assert await provider.get_lease_owner(KEY) is None
    assert (coordinator.stats.runs, coordinator.stats.releases) == (1, 1)
    assert coordinator.active == []


async def test_signals_during_a_run_become_one_follow_up_run_by_transfer(provider: Any) -> None:
    coordinator, rec = make(provider)
    rec.gate.clear()
    assert await coordinator.signal(KEY, "s1") is Outcome.STARTED
    await rec.started.wait()
    assert await coordinator.signal(KEY, "s2") is Outcome.QUEUED
    assert await coordinator.signal(KEY, "s3") is Outcome.QUEUED
    rec.gate.set()
    await idle(coordinator)
    first, second = rec.runs
    assert second.signals == ("s2", "s3")
    assert (second.started_by, second.previous_run_id) == ("transfer", first.run_id)
    assert rec.owners_during_run == [first.run_id, second.run_id]
    assert first.fence is not None and second.fence is not None and second.fence > first.fence
    assert (coordinator.stats.transfers, coordinator.stats.releases) == (1, 1)
    assert await provider.get_lease_owner(KEY) is None


async def test_signals_racing_the_first_acquire_join_the_run(provider: Any) -> None:
    coordinator, rec = make(provider)
    outcomes = await asyncio.gather(*(coordinator.signal(KEY, f"s{i}") for i in range(3)))
    await idle(coordinator)
    assert sorted(o.value for o in outcomes) == ["queued", "queued", "started"]
    assert sorted(s for run in rec.runs for s in run.signals) == ["s0", "s1", "s2"]
    assert len({run.run_id for run in rec.runs}) == len(rec.runs)


async def test_a_loser_routes_to_the_owner_which_runs_it_as_a_follow_up(provider: Any) -> None:
    owner, at_owner = make(provider, "a")
    other, at_other = make(provider, "b")
    at_owner.gate.clear()
    await owner.signal(KEY, "s1")
    await at_owner.started.wait()
    assert await other.signal(KEY, "s2") is Outcome.ROUTED
    assert at_other.routed == [(KEY, "a:1", "s2")]
    assert other.stats.conflicts == 1 and other.active == []
    # The application delivers the routed signal to the owner's process.
    assert await owner.signal(KEY, "s2") is Outcome.QUEUED
    at_owner.gate.set()
    await idle(owner)
    assert [run.signals for run in at_owner.runs] == [("s1",), ("s2",)]
    assert at_other.runs == []


async def test_a_failed_transfer_falls_back_to_a_fresh_acquire(provider: Any) -> None:
    coordinator, rec = make(provider)

    async def lose_the_lease(run: Run[str]) -> None:
        if run.signals == ("s1",):
            await coordinator.signal(KEY, "s2")  # a follow-up is queued ...
            await provider.release_lease(KEY, run.run_id)  # ... and the lease is gone

    rec.during = lose_the_lease
    await coordinator.signal(KEY, "s1")
    await idle(coordinator)
    first, second = rec.runs
    assert first.signals == ("s1",)
    assert (second.signals, second.started_by, second.previous_run_id) == (("s2",), "acquire", None)
    assert rec.owners_during_run[1] == second.run_id
    assert (coordinator.stats.transfer_failures, coordinator.stats.transfers) == (1, 0)
    assert await provider.get_lease_owner(KEY) is None


async def test_when_transfer_and_acquire_fail_the_follow_ups_are_routed(provider: Any) -> None:
    coordinator, rec = make(provider)

    async def someone_takes_over(run: Run[str]) -> None:
        await coordinator.signal(KEY, "s2")
        await coordinator.signal(KEY, "s3")
        await provider.release_lease(KEY, run.run_id)
        assert (await provider.acquire_lease(KEY, "intruder", TTL)).acquired

    rec.during = someone_takes_over
    await coordinator.signal(KEY, "s1")
    await idle(coordinator)
    assert [run.signals for run in rec.runs] == [("s1",)]
    assert rec.routed == [(KEY, "intruder", "s2"), (KEY, "intruder", "s3")]
    assert coordinator.stats.transfer_failures == 1 and coordinator.stats.routed == 2
    assert await provider.get_lease_owner(KEY) == "intruder"
    # The thread is forgotten: the next signal tries afresh (and is routed again).
    assert await coordinator.signal(KEY, "s4") is Outcome.ROUTED


async def test_a_long_run_keeps_its_lease_by_renewing_it(provider: Any) -> None:
    # Two and a half TTLs of work; the TTL leaves renewals (every 500 ms) a second of slack for
    # a slow SQLite commit on a busy disk (300 ms once lost the lease on an idle CI machine).
    coordinator, rec = make(provider, ttl_ms=1500)
    seen: list[str | None] = []

    async def outlive_the_ttl(run: Run[str]) -> None:
        await asyncio.sleep(3.75)
        seen.append(await provider.get_lease_owner(KEY))

    rec.during = outlive_the_ttl
    await coordinator.signal(KEY, "s1")
    await idle(coordinator)
    assert seen == ["a:1"]
    assert coordinator.stats.renewals >= 2 and coordinator.stats.lost == 0
    assert not rec.runs[0].lost


async def test_a_run_learns_when_its_lease_is_lost(provider: Any) -> None:
    coordinator, rec = make(provider, ttl_ms=300)

    async def stolen(run: Run[str]) -> None:
        await provider.release_lease(KEY, run.run_id)
        await provider.acquire_lease(KEY, "thief", TTL)
        await asyncio.wait_for(run.wait_lost(), 5)

    rec.during = stolen
    await coordinator.signal(KEY, "s1")
    await idle(coordinator)
    assert rec.runs[0].lost and coordinator.stats.lost == 1
    assert await provider.get_lease_owner(KEY) == "thief"  # releasing a lost lease is a no-op


async def test_failing_work_is_logged_and_the_thread_goes_on(
    provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator, rec = make(provider)

    async def explode(run: Run[str]) -> None:
        if run.signals == ("s1",):
            await coordinator.signal(KEY, "s2")
            raise RuntimeError("boom")

    rec.during = explode
    await coordinator.signal(KEY, "s1")
    await idle(coordinator)
    assert [run.signals for run in rec.runs] == [("s1",), ("s2",)]
    assert coordinator.stats.errors == 1
    assert "boom" in caplog.text
    assert await provider.get_lease_owner(KEY) is None


async def test_aclose_cancels_live_runs_and_releases_their_leases(provider: Any) -> None:
    coordinator, rec = make(provider)
    rec.gate.clear()
    await coordinator.signal(KEY, "s1")
    await rec.started.wait()
    assert await provider.get_lease_owner(KEY) == "a:1"
    await coordinator.aclose()
    assert await provider.get_lease_owner(KEY) is None
    assert coordinator.active == []


async def test_threads_are_independent(provider: Any) -> None:
    coordinator, rec = make(provider)
    rec.gate.clear()
    assert await coordinator.signal("t1", "x") is Outcome.STARTED
    assert await coordinator.signal("t2", "y") is Outcome.STARTED
    assert sorted(coordinator.active) == ["t1", "t2"]
    rec.gate.set()
    await idle(coordinator)
    assert sorted(run.key for run in rec.runs) == ["t1", "t2"]


async def test_noop_provider_gives_single_process_behaviour() -> None:
    coordinator, rec = make(NOOP_LEASE_PROVIDER)
    other, at_other = make(NOOP_LEASE_PROVIDER, "b")
    rec.gate.clear()
    assert await coordinator.signal(KEY, "s1") is Outcome.STARTED
    await rec.started.wait()
    assert await coordinator.signal(KEY, "s2") is Outcome.QUEUED  # queued locally, as before
    assert await other.signal(KEY, "s3") is Outcome.STARTED  # every process wins its own race
    rec.gate.set()
    await idle(coordinator)
    await idle(other)
    assert [run.signals for run in rec.runs] == [("s1",), ("s2",)]
    assert rec.runs[1].started_by == "transfer" and rec.runs[1].fence is None
    assert at_other.routed == [] and rec.routed == []


async def test_bad_arguments_are_rejected_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="ttl_ms"):
        make(NOOP_LEASE_PROVIDER, ttl_ms=0)
    coordinator, _ = make(NOOP_LEASE_PROVIDER)
    with pytest.raises(ValueError, match="key"):
        await coordinator.signal("", "s")
    assert coordinator.stats.signals == 0
