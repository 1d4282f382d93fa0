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
from tests.integration._race_workers import Event


def hammer(url: str, worker: int, keys: list[str], seconds: float, threads: int) -> dict[str, Any]:
    """``threads`` threads sharing one sync provider: random acquire/renew/transfer/release."""
    provider = SqlLeaseProvider.from_url(url, timeout=10, pool_size=threads)
    events: list[Event] = []
    lock = threading.Lock()

    def run(thread: int) -> None:
        rng = random.Random(worker * 1000 + thread)
        held: dict[str, tuple[str, int]] = {}
        serial = 0
        deadline = time.monotonic() + seconds

        def new_owner() -> str:
            nonlocal serial
            serial += 1
            return f"w{worker}\0t{thread}\0{serial}"

        mine: list[Event] = []
        while time.monotonic() < deadline:
            key = rng.choice(keys)
            ttl = rng.choice([15, 40, 80, 200])
            have = held.get(key)
            roll = rng.random()
            if have is None or roll < 0.1:
                owner = have[0] if have is not None else new_owner()
                res = provider.acquire_lease(key, owner, ttl)
                if res.acquired:
                    assert res.expires_at is not None and res.fence is not None
                    start = res.expires_at - timedelta(milliseconds=ttl)
                    mine.append(
                        Event("acquire", key, owner, True, res.fence, start, res.expires_at)
                    )
                    held[key] = (owner, res.fence)
                else:
                    mine.append(
                        Event(
                            "acquire", key, owner, False, holder=res.owner, holder_fence=res.fence
                        )
                    )
                    held.pop(key, None)
                continue
            owner, fence = have
            if roll < 0.5:
                if roll < 0.13:
                    time.sleep(0.25)  # a paused owner: its lease expires meanwhile
                renewed = provider.renew(key, owner, ttl)
                if renewed is None:
                    held.pop(key, None)
                    mine.append(Event("renew", key, owner, False, fence))
                else:
                    start = renewed[1] - timedelta(milliseconds=ttl)
                    mine.append(Event("renew", key, owner, True, renewed[0], start, renewed[1]))
            elif roll < 0.7:
                to = new_owner()
                moved = provider.transfer(key, owner, to, ttl)
                if moved is None:
                    held.pop(key, None)
                    mine.append(Event("transfer", key, owner, False, fence, to_owner=to))
                else:
                    start = moved[1] - timedelta(milliseconds=ttl)
                    mine.append(
                        Event(
                            "transfer",
                            key,
                            owner,
                            True,
                            moved[0],
                            start,
                            moved[1],
                            to_owner=to,
                            from_fence=fence,
                        )
                    )
                    held[key] = (to, moved[0])
            elif roll < 0.9:
                released = provider.release(key, owner)
                held.pop(key, None)
                if released is not None:
                    mine.append(Event("release", key, owner, True, released[0], released[1]))
            else:
                held.pop(key, None)
                time.sleep(rng.choice([0, 0.01, 0.05]))
        with lock:
            events.extend(mine)

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

            @exclusive(provider, name, at_most_for=30, at_least_for=at_least_s)
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
        exclusive(provider, name, at_most_for=at_most_s) as run,
    ):
        assert run
        with open(ready_path, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(3600)
