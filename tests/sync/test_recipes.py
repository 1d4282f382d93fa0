"""The README's recipes for exclusive jobs, run for real: APScheduler (two "replicas")."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import pytest

from sql_lease import exclusive
from sql_lease.sync import SqlLeaseProvider

from ._events import eventually

apscheduler = pytest.importorskip("apscheduler", reason="the test extra installs APScheduler")


def test_apscheduler_on_two_replicas_runs_each_tick_once(database_url: str) -> None:
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
    from apscheduler.schedulers.background import BackgroundScheduler

    ticks = 3
    ran: list[tuple[int, str]] = []
    fired: list[str] = []
    lock = threading.Lock()
    first = datetime.now().astimezone() + timedelta(seconds=2)
    replicas: list[tuple[BackgroundScheduler, SqlLeaseProvider]] = []
    name = f"aps-job-{first.timestamp()}"
    for replica in ("r1", "r2"):
        provider = SqlLeaseProvider.from_url(database_url)
        scheduler = BackgroundScheduler(timezone="UTC")

        # The recipe: decorate the job, schedule it on every replica.
        @exclusive(provider, name, at_most_for=60, at_least_for=0.5)
        def job(tick: int, replica: str = replica) -> None:
            with lock:
                ran.append((tick, replica))

        def listen(event: Any, replica: str = replica) -> None:
            with lock:
                fired.append(replica)

        scheduler.add_listener(listen, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)
        for tick in range(ticks):
            when = first + timedelta(seconds=tick)
            scheduler.add_job(job, "date", run_date=when, args=[tick], misfire_grace_time=30)
        replicas.append((scheduler, provider))
    try:
        for scheduler, _ in replicas:
            scheduler.start()
        eventually(lambda: len(fired) == 2 * ticks, "every replica firing every tick", 60)
    finally:
        for scheduler, provider in replicas:
            scheduler.shutdown(wait=True)
            provider.close()
    assert sorted(tick for tick, _ in ran) == list(range(ticks)), ran
