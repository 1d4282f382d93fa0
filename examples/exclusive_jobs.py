"""Exclusive scheduled jobs: one replica runs each tick (APScheduler; see the README for cron).

    SQL_LEASE_DATABASE_URL=postgresql://postgres@localhost/db python examples/exclusive_jobs.py

Starts two "replicas" (two schedulers, two providers) firing the same job every 2 seconds;
each tick runs once. Needs ``apscheduler`` (3.x) and, for PostgreSQL, the ``sync`` extra.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from apscheduler.schedulers.background import BackgroundScheduler

from sql_lease import exclusive, migrate
from sql_lease.sync import SqlLeaseProvider

URL = os.environ.get("SQL_LEASE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def replica(name: str) -> tuple[BackgroundScheduler, SqlLeaseProvider]:
    leases = SqlLeaseProvider.from_url(URL)

    @exclusive(
        leases,
        "example:every-2s",
        at_most_for=timedelta(minutes=1),
        at_least_for=timedelta(seconds=1),
    )
    def job() -> None:
        print(f"{time.strftime('%H:%M:%S')} tick run by {name}")

    scheduler = BackgroundScheduler()
    scheduler.add_job(job, "interval", seconds=2)
    return scheduler, leases


def main() -> None:
    migrate.upgrade(URL)
    replicas = [replica("replica-1"), replica("replica-2")]
    for scheduler, _ in replicas:
        scheduler.start()
    time.sleep(9)
    for scheduler, leases in replicas:
        scheduler.shutdown()
        leases.close()


if __name__ == "__main__":
    main()
