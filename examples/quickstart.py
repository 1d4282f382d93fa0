"""The main job in miniature: two workers, one thread key, acquire / route / transfer / release.

    SQL_LEASE_DATABASE_URL=postgresql://postgres@127.0.0.1/postgres python examples/quickstart.py

Applies the library's migrations to that database first (idempotent), then plays out what
Mastra's signals runtime does with a lease per thread.
"""

from __future__ import annotations

import asyncio
import os
import uuid

from sql_lease import SqlLeaseProvider, migrate

URL = os.environ.get("SQL_LEASE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
TTL = 15_000


async def main() -> None:
    await migrate.upgrade_async(URL)
    # Two processes in real life; two providers (two engines and pools) here.
    worker_a = SqlLeaseProvider.from_url(URL)
    worker_b = SqlLeaseProvider.from_url(URL)
    thread = f"resource-42\0thread-{uuid.uuid4().hex[:8]}"  # Mastra's resourceId + NUL + threadId
    run_1, run_2, run_3 = (f"run-{uuid.uuid4().hex[:6]}" for _ in range(3))
    shown = thread.replace("\0", "\\0")
    try:
        got = await worker_a.acquire_lease(thread, run_1, TTL)
        print(f"A  acquire {shown} for {run_1}: acquired={got.acquired} fence={got.fence}")

        lost = await worker_b.acquire_lease(thread, run_2, TTL)
        print(f"B  acquire for {run_2}: acquired={lost.acquired}, route the signal to {lost.owner}")

        still = await worker_a.renew_lease(thread, run_1, TTL)
        print(f"A  renew while running: {still}")

        moved = await worker_a.transfer_lease(thread, run_1, run_3, TTL)
        lease = await worker_b.get_lease(thread)
        assert lease is not None
        print(
            f"A  run finished with a follow-up queued: transfer to {run_3}: {moved}, "
            f"owner now {lease.owner}, fence {lease.fence} (no instant where the key was free)"
        )

        stale = await worker_a.renew_lease(thread, run_1, TTL)
        print(f"A  the old run renews: {stale} (it no longer owns the thread)")

        await worker_b.release_lease(thread, run_3)
        print(f"B  {run_3} done, released; owner now {await worker_a.get_lease_owner(thread)}")
    finally:
        await worker_a.aclose()
        await worker_b.aclose()


if __name__ == "__main__":
    asyncio.run(main())
