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
    url: str,
    name: str,
    ticks: int,
    interval: float,
    at_least_s: float,
    runs_dir: str,
    sync_dir: str,
) -> int:
    """A replica's scheduler: fire the job ``name`` every ``interval`` s, ``ticks`` times.

    Says it is ready in ``sync_dir``, then waits for the ``go`` file holding the wall-clock
    time of the first tick. Each run leaves one file per tick in ``runs_dir``.
    """
    with SqlLeaseProvider.from_url(url, timeout=10) as provider:
        provider.now()  # connected
        with open(os.path.join(sync_dir, f"ready-{os.getpid()}"), "w") as f:
            f.write("ready")
        go = os.path.join(sync_dir, "go")
        while not os.path.exists(go):
            time.sleep(0.01)
        with open(go) as f:
            start = float(f.read())
        ran = 0
        for i in range(ticks):
            delay = start + i * interval - time.time()
            if delay > 0:
                time.sleep(delay)

            @exclusive(
                provider,
                name,
                at_most_for=timedelta(seconds=30),
                at_least_for=timedelta(seconds=at_least_s),
            )
            def job(tick: int = i) -> bool:
                # One file per run of a tick: two runs of one tick would make two files.
                path = os.path.join(runs_dir, f"tick{tick:04d}-pid{os.getpid()}")
                with open(path, "w") as f:
                    f.write("ran")
                return True

            if job():
                ran += 1
        return ran


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
