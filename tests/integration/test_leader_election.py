"""The leader-election recipe (examples/leader_election.py), run for real on PostgreSQL."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest

from sql_lease import HeldLease, LeaseClosedError, SqlLeaseProvider

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "leader_election.py"


def _recipe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("leader_election", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


recipe = _recipe()


class Contenders:
    """Records who leads; fails if two ever lead at once."""

    def __init__(self) -> None:
        self.leading: set[str] = set()
        self.fences: list[tuple[str, int]] = []
        self.changed = asyncio.Event()
        self.step_down: dict[str, asyncio.Event] = {}

    def lead(self, name: str) -> Callable[[HeldLease], Awaitable[None]]:
        self.step_down[name] = asyncio.Event()

        async def lead(lease: HeldLease) -> None:
            assert not self.leading, f"{name} leads while {self.leading} lead"
            assert lease.fence is not None
            self.leading.add(name)
            self.fences.append((name, lease.fence))
            self.changed.set()
            try:
                await self.step_down[name].wait()
            finally:
                self.leading.discard(name)

        return lead

    async def wait_for(self, count: int) -> None:
        async with asyncio.timeout(60):
            while len(self.fences) < count:
                self.changed.clear()
                await self.changed.wait()


async def test_the_recipe_elects_one_leader_then_the_other(database_url: str) -> None:
    key = f"leader-{uuid.uuid4().hex[:8]}"
    leaderships = await recipe.demo(database_url, key)
    (old, old_fence), (new, new_fence) = leaderships
    assert {old, new} == {"A", "B"}
    assert new_fence > old_fence


async def test_a_leader_that_steps_down_is_replaced_at_once(database_url: str) -> None:
    key = f"leader-{uuid.uuid4().hex[:8]}"
    seen = Contenders()
    async with (
        SqlLeaseProvider.from_url(database_url) as a,
        SqlLeaseProvider.from_url(database_url) as b,
    ):
        tasks = {
            "A": asyncio.create_task(recipe.campaign(a, key, "A", seen.lead("A"))),
            "B": asyncio.create_task(recipe.campaign(b, key, "B", seen.lead("B"))),
        }
        await seen.wait_for(1)
        first = seen.fences[0][0]
        assert await a.get_lease_owner(key) == first
        seen.step_down[first].set()
        await tasks[first]  # stepped down: released
        await seen.wait_for(2)  # the other one was woken by the release (TTL is 10 s)
        second, fence = seen.fences[1]
        assert second != first and fence > seen.fences[0][1]
        tasks[second].cancel()  # stop campaigning while leading: released on the way out
        await asyncio.gather(tasks[second], return_exceptions=True)
        assert await a.get_lease_owner(key) is None


async def test_a_crashed_leader_is_replaced_when_its_lease_expires(database_url: str) -> None:
    key = f"leader-{uuid.uuid4().hex[:8]}"
    seen = Contenders()
    ttl = timedelta(seconds=3)  # long enough that a busy host does not lose it by a stall
    a = SqlLeaseProvider.from_url(database_url)
    b = SqlLeaseProvider.from_url(database_url)
    try:
        a_task = asyncio.create_task(recipe.campaign(a, key, "A", seen.lead("A"), ttl=ttl))
        await seen.wait_for(1)
        b_task = asyncio.create_task(recipe.campaign(b, key, "B", seen.lead("B"), ttl=ttl))
        # A "crashes": its provider goes away without releasing (the lease is left to expire).
        await a.aclose()
        with pytest.raises(LeaseClosedError):  # it lost the lease, then could not campaign
            await a_task
        await seen.wait_for(2)
        assert [name for name, _ in seen.fences] == ["A", "B"]
        assert seen.fences[1][1] > seen.fences[0][1]
        b_task.cancel()
        await asyncio.gather(b_task, return_exceptions=True)
    finally:
        await a.aclose()
        await b.aclose()


def test_the_example_runs_as_a_script(database_url: str) -> None:
    env = {**os.environ, "SQL_LEASE_DATABASE_URL": database_url}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "took over from" in done.stdout, done.stdout
