"""Exclusive scheduled jobs (`sql_lease.exclusive`) with the sync and the async providers."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from datetime import timedelta
from multiprocessing.pool import Pool
from pathlib import Path
from typing import Any

import pytest

from sql_lease import LeaseError, SqlLeaseProvider, exclusive
from sql_lease.sync import SqlLeaseProvider as SyncProvider

from ._events import eventually
from ._workers import crashing_holder, tick_runner
from .conftest import forkserver

#: Ticks of the 8-process test; CI runs 5, SQL_LEASE_EXCLUSIVE_TICKS=100 for the full bar.
TICKS = int(os.environ.get("SQL_LEASE_EXCLUSIVE_TICKS", "5"))


def test_a_decorated_job_runs_where_the_lease_is_free_and_is_skipped_elsewhere(
    sync_provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    @exclusive(sync_provider, "job", at_most_for=timedelta(seconds=30))
    def job(x: int) -> int:
        calls.append(x)
        return x * 2

    assert job(21) == 42 and calls == [21]
    assert sync_provider.get_lease_owner("job") is None  # released: at_least_for is 0
    sync_provider.acquire_lease("job", "another-replica", 30_000)
    with caplog.at_level(logging.INFO, logger="sql_lease.exclusive"):
        assert job(1) is None
    assert calls == [21]
    assert "skipped 'job'" in caplog.text and "another-replica" in caplog.text


def test_at_most_for_is_the_ttl_and_at_least_for_keeps_the_lease_after_a_fast_run(
    sync_provider: Any,
) -> None:
    with exclusive(
        sync_provider, "job", at_most_for=timedelta(minutes=10), at_least_for=timedelta(seconds=20)
    ) as r:
        assert r and r.acquired
        lease = sync_provider.get_lease("job")
        ttl = lease.expires_at - lease.acquired_at  # two clock readings in one statement
        assert abs(ttl - timedelta(minutes=10)) < timedelta(seconds=1)
    kept = sync_provider.get_lease("job")
    assert kept is not None and kept.owner == f"{r.owner}:at-least"
    # Kept until about at_least_for after it was taken (measured from before the request).
    kept_for = kept.expires_at - lease.acquired_at
    assert timedelta(seconds=15) < kept_for <= timedelta(seconds=20.5), kept_for
    with exclusive(sync_provider, "job", at_most_for=timedelta(seconds=60)) as again:
        assert not again and again.holder == kept.owner


def test_a_long_job_renews_while_it_runs(sync_provider: Any) -> None:
    with exclusive(sync_provider, "job", at_most_for=timedelta(seconds=0.6)) as run:
        assert run
        eventually(lambda: run.lease.renewals >= 3, "three renewals")  # past its 0.6 s TTL
        assert sync_provider.get_lease_owner("job") == run.owner
    assert sync_provider.get_lease_owner("job") is None


def test_an_error_in_the_job_propagates_and_releases(sync_provider: Any) -> None:
    @exclusive(sync_provider, "job", at_most_for=timedelta(seconds=30))
    def job() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        job()
    assert sync_provider.get_lease_owner("job") is None


async def test_async_functions_with_the_sync_provider(sync_provider: Any) -> None:
    @exclusive(sync_provider, "job", at_most_for=timedelta(seconds=30))
    async def job() -> str:
        await asyncio.sleep(0)
        return sync_provider.get_lease_owner("job")

    owner = await job()
    assert owner is not None and owner.count(":") >= 2  # host:pid:random
    async with exclusive(sync_provider, "job", at_most_for=timedelta(seconds=30)) as run:
        assert run


async def test_sync_and_async_functions_with_the_async_provider(
    sql_provider: SqlLeaseProvider,
) -> None:
    @exclusive(
        sql_provider, "job", at_most_for=timedelta(seconds=30), at_least_for=timedelta(seconds=5)
    )
    async def job() -> str:
        return "ran"

    @exclusive(sql_provider, "job2", at_most_for=timedelta(seconds=30))
    def blocking() -> str:
        return "ran in a thread"

    assert await job() == "ran"
    assert await job() is None  # at_least_for keeps it
    assert await blocking() == "ran in a thread"  # type: ignore[misc]
    with (
        pytest.raises(TypeError),
        exclusive(sql_provider, "job3", at_most_for=timedelta(seconds=30)),
    ):
        pass


def test_a_bare_number_is_refused_with_the_two_readings_spelled_out() -> None:
    from sql_lease.sync import InMemoryLeaseProvider

    with pytest.raises(TypeError) as info:
        exclusive(InMemoryLeaseProvider(), "job", at_most_for=10_000)
    assert str(info.value) == (
        "at_most_for must be a timedelta, not int (a bare number's unit could be misread: "
        "write timedelta(seconds=10000) or timedelta(milliseconds=10000))"
    )


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"at_most_for": timedelta(seconds=0)}, ValueError),
        ({"at_most_for": timedelta(seconds=-1)}, ValueError),
        ({"at_most_for": True}, TypeError),
        ({"at_most_for": "10m"}, TypeError),
        ({"at_most_for": 10_000}, TypeError),  # seconds or milliseconds? refused
        ({"at_most_for": 0.5}, TypeError),
        ({"at_most_for": timedelta(seconds=10), "at_least_for": 1}, TypeError),
        ({"at_most_for": timedelta(seconds=10), "at_least_for": timedelta(seconds=11)}, ValueError),
        ({"at_most_for": timedelta(seconds=10), "at_least_for": timedelta(seconds=-1)}, ValueError),
        ({"at_most_for": timedelta(days=366)}, ValueError),
        ({"at_most_for": timedelta(seconds=10), "owner": ""}, ValueError),
    ],
)
def test_bad_arguments_are_refused_at_once(kwargs: dict[str, Any], exc: type[Exception]) -> None:
    from sql_lease.sync import InMemoryLeaseProvider

    with pytest.raises(exc) as info:
        exclusive(InMemoryLeaseProvider(), "job", **kwargs)
    assert isinstance(info.value, LeaseError)
    with pytest.raises(TypeError):
        exclusive(object(), "job", at_most_for=timedelta(seconds=10))
    with pytest.raises(ValueError, match="name must not be empty"):
        exclusive(InMemoryLeaseProvider(), "", at_most_for=timedelta(seconds=10))


def test_eight_processes_firing_each_tick_run_it_exactly_once(
    database_url: str, tmp_path: Path, worker_pool: Pool
) -> None:
    """Eight replicas fire each tick at the same due time, a little apart (their wake-ups and
    requests): exactly one runs it, because at_least_for keeps the lease past the stragglers,
    and every tick runs, because the lease is free again once at_least_for is over.

    A tick is announced only when every replica has fired the previous one, due at_least_for
    (and a margin) after the last of them finished: the gap is then over whatever the load.
    (Fixed wall-clock ticks failed on a loaded machine: replicas stalled past a tick fired it
    with the next in a burst, which at_least_for rightly counts as one firing.)
    """
    name = f"tick-job-{os.getpid()}-{time.monotonic_ns()}"
    at_least, lead = 1.0, 0.3  # at_least_for covers the spread of one tick's firings
    runs_dir, sync_dir = tmp_path / "runs", tmp_path / "sync"
    runs_dir.mkdir()
    sync_dir.mkdir()
    args = (database_url, name, TICKS, at_least, str(runs_dir), str(sync_dir))
    results = [worker_pool.apply_async(tick_runner, args) for _ in range(8)]
    dues: list[float] = []
    finished = 0.0
    try:
        # Every scheduler up and connected before the first tick (like replicas in service).
        eventually(lambda: len(list(sync_dir.glob("ready-*"))) == 8, "8 schedulers ready", 90)
        for i in range(TICKS):
            # The previous tick's lease (kept at most at_least_for after its winner finished)
            # is over by then; the lead lets every replica see the tick before it is due.
            dues.append(max(finished + at_least + 0.1, time.time() + lead))
            (sync_dir / f".tick-{i}").write_text(repr(dues[-1]))
            (sync_dir / f".tick-{i}").rename(sync_dir / f"tick-{i}")
            finished = _all_fired(sync_dir, i)
        fired = [r.get(timeout=60) for r in results]
    except BaseException:
        (sync_dir / "abort").touch()  # no replica left waiting for a tick (the pool is shared)
        raise
    runs: dict[str, int] = {}
    for path in runs_dir.iterdir():
        tick = path.name.split("-")[0]
        runs[tick] = runs.get(tick, 0) + 1
    ran = [sum(holder is None for *_, holder in f) for f in fired]
    timeline = _timeline(fired, dues)
    print(timeline)
    assert sum(ran) == TICKS, f"{ran}\n{timeline}"
    assert sorted(runs) == [f"tick{i:04d}" for i in range(TICKS)], timeline
    assert set(runs.values()) == {1}, f"{runs}\n{timeline}"


def _all_fired(sync_dir: Path, tick: int) -> float:
    """Wait until the eight replicas have fired ``tick``; when the last one finished."""
    done = f"done-{tick}-*"
    eventually(lambda: len(list(sync_dir.glob(done))) == 8, f"8 replicas fired tick {tick}", 60)
    return max(float(p.read_text()) for p in sync_dir.glob(done))


def _timeline(
    fired: list[list[tuple[int, float, float, float, str | None]]], dues: list[float]
) -> str:
    """Per tick, each replica's firing (ms after the tick was due: fired, answered, done) and
    whether it ran (``RAN``) or whom it found holding the job."""
    lines = []
    for replica, ticks in enumerate(fired):
        for tick, at, answered, done, holder in ticks:
            ms = "/".join(f"{(t - dues[tick]) * 1000:+5.0f}" for t in (at, answered, done))
            lines.append((tick, at, f"tick {tick} replica {replica}: {ms} ms {holder or 'RAN'}"))
    return "\n".join(line for *_, line in sorted(lines))


def test_a_holder_killed_with_sigkill_blocks_the_job_for_at_most_at_most_for(
    database_url: str, tmp_path: Path
) -> None:
    name = f"crash-job-{os.getpid()}"
    at_most = 1.0
    ready = tmp_path / "ready"
    proc = forkserver().Process(
        target=crashing_holder, args=(database_url, name, at_most, str(ready))
    )
    proc.start()
    try:
        eventually(ready.exists, "the holder running the job", within=60)
        with SyncProvider.from_url(database_url) as provider:
            assert provider.get_lease_owner(name) is not None
            assert proc.pid is not None
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(30)
            killed_at = provider.now()
            runs: list[Any] = []

            @exclusive(provider, name, at_most_for=timedelta(seconds=30))
            def job() -> None:
                runs.append(provider.get_lease(name))

            while not runs:
                job()
                time.sleep(0.05)
            taken = runs[0].acquired_at
            # Blocked while the dead holder's lease lived, and no longer than at_most_for.
            assert taken - killed_at <= timedelta(seconds=at_most + 1.0), taken - killed_at
            assert taken - killed_at > timedelta(0)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(10)
