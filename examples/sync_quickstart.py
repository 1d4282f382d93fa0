"""The sync provider in miniature: acquire, hold with renewal, wait for a busy key.

    SQL_LEASE_DATABASE_URL=postgresql://postgres@localhost/db python examples/sync_quickstart.py

Needs the ``sync`` extra for PostgreSQL (``pip install '.[sync]'`` in a checkout); a
``sqlite:///leases.db`` URL needs nothing more. Applies the migrations first (idempotent).
"""

from __future__ import annotations

import os
import threading
import time
import uuid

from sql_lease import migrate
from sql_lease.sync import SqlLeaseProvider

URL = os.environ.get("SQL_LEASE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def main() -> None:
    migrate.upgrade(URL)
    key = f"report-{uuid.uuid4().hex[:8]}"
    with SqlLeaseProvider.from_url(URL) as leases:
        with leases.hold(key, "worker-a", 3_000) as lease:
            print(f"worker-a holds {key} (fence {lease.fence}); renewed in the background")
            taken = leases.acquire_lease(key, "worker-b", 3_000)
            print(f"worker-b tries: acquired={taken.acquired}, holder={taken.owner}")

            # worker-b waits for the key; worker-a finishes its work after 5 s (past its TTL:
            # the renewal thread keeps the lease alive), then releases on leaving the block.
            got: list[bool] = []
            waiter = threading.Thread(
                target=lambda: got.append(
                    leases.wait_for_lease(key, "worker-b", 3_000, timeout_ms=30_000).acquired
                )
            )
            waiter.start()
            for _ in range(5):
                time.sleep(1)
                lease.check()  # raises LeaseLost if the lease was lost
            print(f"worker-a done after {lease.renewals} renewals")
        waiter.join()
        print(f"worker-b woke and acquired it: {got[0]}; owner now {leases.get_lease_owner(key)}")
        leases.release_lease(key, "worker-b")


if __name__ == "__main__":
    main()
