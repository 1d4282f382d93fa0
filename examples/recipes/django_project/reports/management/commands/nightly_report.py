"""``python manage.py nightly_report``: run from cron or a Kubernetes CronJob on every replica;
one of them builds the report, the others skip."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from sql_lease import exclusive
from sql_lease.sync import SqlLeaseProvider


class Command(BaseCommand):
    help = "Build the nightly report on one replica at a time."

    def handle(self, *args: Any, **options: Any) -> None:
        with (
            SqlLeaseProvider.from_url(settings.SQL_LEASE_DATABASE_URL) as leases,
            exclusive(
                leases,
                "reports:nightly",
                at_most_for=timedelta(minutes=10),  # a crashed run blocks the job this long
                at_least_for=timedelta(minutes=1),  # replicas' cron fire a little apart
            ) as run,
        ):
            if not run:
                self.stdout.write(f"skipped: held by {run.holder}")
                return
            self.stdout.write(f"ran: {build_report()}")


def build_report() -> str:
    return f"report built by pid {os.getpid()}"  # the real work goes here
