"""Worker processes for the sync race and exclusive-job tests (each with its own provider)."""

from __future__ import annotations

import os
import random
import threading
import time
from datetime import timedelta
from typing import Any

from sql_lease import exclusive
from sql_lease.sync import SqlLeaseProvider
from tests.integration._race_workers import Event, Hammer


def hammer(
    url: str,
    worker: int,
    keys: list[str],
    seconds: float,
    threads: int,
    pooler: str | None = None,
) -> dict[str, Any]:
    """``threads`` threads sharing one sync provider (through ``pooler``): random
    acquire/renew/transfer/release (the async race test's `Hammer` script)."""
    provider = SqlLeaseProvider.from_url(url, timeout=10, pool_size=threads, pooler=pooler)
    calls = {
        "acquire_lease": provider.acquire_lease,
        "renew": provider.renew,
        "transfer": provider.transfer,
        "release": provider.release,
    }
    events: list[Event] = []
    lock = threading.Lock()

    def run(thread: int) -> None:
        script = Hammer(random.Random(worker * 1000 + thread), keys, f"w{worker}\0t{thread}\0")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            step = script.step()
            if step.pause:
                time.sleep(step.pause)
            if step.call is not None:
                script.record(step, calls[step.call](*step.args))
        with lock:
            events.extend(script.events)

    pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    provider.close()
    return {"events": events, "reads": provider.acquire_reads, "reruns": provider.acquire_reruns}


def tick_runner(
    url: str, name: str, ticks: int, at_least_s: float, runs_dir: str, sync_dir: str
) -> list[tuple[int, float, float, float, str | None]]:
    """A replica's scheduler: fire the job ``name`` at each tick the test announces.

    Says it is ready in ``sync_dir``; tick ``i`` is the file ``tick-i`` there, holding the
    wall-clock time it is due; once it has fired, it says so in ``done-i-<pid>`` (holding the
    time it finished). Each run leaves one file per tick in ``runs_dir``. Returns, per tick,
    (tick, fired, answered, done, None if it ran else the holder it found): wall-clock times,
    so that a failure can show how far apart the replicas fired.
    """
    with SqlLeaseProvider.from_url(url, timeout=10) as provider:
        provider.now()  # connected
        _announce(sync_dir, f"ready-{os.getpid()}", "ready")
        fired: list[tuple[int, float, float, float, str | None]] = []
        for i in range(ticks):
            delay = _due(sync_dir, i) - time.time()
            if delay > 0:
                time.sleep(delay)
            at = time.time()
            with exclusive(
                provider,
                name,
                at_most_for=timedelta(seconds=30),
                at_least_for=timedelta(seconds=at_least_s),
            ) as run:
                answered = time.time()
                if run:
                    # One file per run of a tick: two runs of one tick would make two files.
                    path = os.path.join(runs_dir, f"tick{i:04d}-pid{os.getpid()}")
                    with open(path, "w") as f:
                        f.write("ran")
            done = time.time()
            fired.append((i, at, answered, done, None if run else str(run.holder)))
            _announce(sync_dir, f"done-{i}-{os.getpid()}", str(done))
        return fired


def _due(sync_dir: str, tick: int, within: float = 120.0) -> float:
    """When ``tick`` is due, once the test has announced it; gives up when the test has
    (an ``abort`` file) or after ``within`` s, so that a failed test leaves no worker waiting."""
    path = os.path.join(sync_dir, f"tick-{tick}")
    give_up = time.monotonic() + within
    while not os.path.exists(path):
        if os.path.exists(os.path.join(sync_dir, "abort")) or time.monotonic() > give_up:
            raise TimeoutError(f"tick {tick} was never announced")
        time.sleep(0.005)
    with open(path) as f:
        return float(f.read())


def _announce(directory: str, name: str, text: str) -> None:
    """Write ``directory/name`` atomically: a reader never sees it half written (the
    temporary name starts with a dot, so that no glob of the final names matches it)."""
    path, temporary = os.path.join(directory, name), os.path.join(directory, f".{name}")
    with open(temporary, "w") as f:
        f.write(text)
    os.rename(temporary, path)


def crashing_holder(url: str, name: str, at_most_s: float, ready_path: str) -> None:
    """Take the job ``name`` and hang inside it (the test SIGKILLs this process)."""
    with (
        SqlLeaseProvider.from_url(url, timeout=10) as provider,
        exclusive(provider, name, at_most_for=timedelta(seconds=at_most_s)) as run,
    ):
        assert run
        with open(ready_path, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(3600)
