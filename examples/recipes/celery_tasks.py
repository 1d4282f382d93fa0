"""Celery beat, exclusive: a scheduled task that runs once per tick however many workers get it.

    SQL_LEASE_DATABASE_URL=postgresql://app@db/app celery -A examples.recipes.celery_tasks worker
    celery -A examples.recipes.celery_tasks beat

Beat should run on one node, but a redeploy, a second beat or a retried delivery can put the
same tick on several workers. The task's body runs under the lease ``reports:nightly``: the
first worker to take it runs the report, every other one skips (the task returns None).
``at_least_for`` keeps the lease after a fast run, so a copy of the tick delivered a little
later is skipped too. Needs ``celery[redis]`` and, for PostgreSQL, ``sql-lease[sync]``.
"""

from __future__ import annotations

import functools
import os
from datetime import timedelta

from celery import Celery
from celery.schedules import crontab

from sql_lease import exclusive
from sql_lease.sync import SqlLeaseProvider

BROKER = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
app = Celery("reports", broker=BROKER, backend=os.environ.get("CELERY_RESULT_BACKEND", BROKER))
app.conf.beat_schedule = {
    "nightly-report": {"task": "reports.nightly", "schedule": crontab(hour=3, minute=0)},
}
#: Longer than the spread of one tick's deliveries, shorter than the interval between ticks.
AT_LEAST_FOR = timedelta(seconds=float(os.environ.get("NIGHTLY_AT_LEAST_SECONDS", "60")))


@functools.cache
def leases() -> SqlLeaseProvider:
    """One provider per worker process, made on first use (never before a prefork fork)."""
    return SqlLeaseProvider.from_url(os.environ["SQL_LEASE_DATABASE_URL"])


def build_report() -> str:
    return f"report built by pid {os.getpid()}"  # the real work goes here


@app.task(name="reports.nightly")
def nightly() -> str | None:
    with exclusive(
        leases(), "reports:nightly", at_most_for=timedelta(minutes=10), at_least_for=AT_LEAST_FOR
    ) as run:
        if not run:
            return None  # another worker has this tick
        return build_report()
