"""Leader election: of several processes exactly one leads, and another takes over when it stops.

    SQL_LEASE_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        python examples/leader_election.py

Every contender runs `campaign` with its own name. The leader holds one lease and renews it in
the background; the others wait for it without polling (on PostgreSQL the leader's release
wakes them through LISTEN/NOTIFY; a leader that crashed is replaced when its lease expires).
Leading is `lead(lease)`: pass ``lease.fence`` to whatever the leader writes, so a leader that
paused past its TTL cannot overwrite its successor's work.

Run as a script it applies the migrations (idempotent) and plays out two contenders, each with
its own provider as two processes would have: one leads for a moment and steps down, the other
takes over with a higher fence.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta

from sql_lease import (
    HeldLease,
    InMemoryLeaseProvider,
    LeaseDatabaseError,
    LeaseLost,
    LeaseNotAcquired,
    SqlLeaseProvider,
    migrate,
)

logger = logging.getLogger("leader_election")

URL = os.environ.get("SQL_LEASE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
TTL = timedelta(seconds=10)  # how long a crashed leader blocks the others, at most
RETRY = timedelta(seconds=1)  # pause after a database error before campaigning again


async def campaign(
    leases: SqlLeaseProvider | InMemoryLeaseProvider,
    key: str,
    me: str,
    lead: Callable[[HeldLease], Awaitable[None]],
    *,
    ttl: timedelta = TTL,
) -> None:
    """Lead ``key`` as ``me`` whenever nobody else does: ``lead(lease)`` runs while we hold it.

    Returns once ``lead`` returns (we step down: the lease is released, and a waiting
    contender takes over at once). When the lease is lost (a renewal found it gone), ``lead``
    is cancelled and we campaign again. Cancel the task to stop campaigning; if it leads, the
    lease is released on the way out.
    """
    while True:
        try:
            # Waits up to one TTL for the key, then loops: a follower never stops campaigning.
            async with leases.hold(key, me, ttl, wait_ms=ttl) as lease:
                logger.info("%s leads %r (fence %s)", me, key, lease.fence)
                await lead(lease)
                return
        except LeaseNotAcquired:
            continue  # someone else still leads
        except LeaseLost as lost:
            logger.warning("%s lost the leadership: %s", me, lost.reason)
        except LeaseDatabaseError as exc:
            logger.warning("%s could not campaign (%s); retrying", me, exc)
            await asyncio.sleep(RETRY.total_seconds())


async def demo(url: str = URL, key: str = "example:leader") -> list[tuple[str, int]]:
    """Two contenders on their own providers; returns (leader, fence) in order of leadership."""
    leaderships: list[tuple[str, int]] = []

    def leader(name: str) -> Callable[[HeldLease], Awaitable[None]]:
        async def lead(lease: HeldLease) -> None:
            assert lease.fence is not None
            leaderships.append((name, lease.fence))
            print(f"{name} leads with fence {lease.fence}")
            await asyncio.sleep(0.5)  # the leader's work; then it steps down
            print(f"{name} steps down")

        return lead

    async with (
        SqlLeaseProvider.from_url(url) as first,
        SqlLeaseProvider.from_url(url) as second,
    ):
        await asyncio.gather(
            campaign(first, key, "A", leader("A"), ttl=timedelta(seconds=5)),
            campaign(second, key, "B", leader("B"), ttl=timedelta(seconds=5)),
        )
    (old, old_fence), (new, new_fence) = leaderships
    print(f"{new} took over from {old}: fence {old_fence} -> {new_fence}")
    return leaderships


async def main() -> None:
    await migrate.upgrade_async(URL)
    await demo(URL)


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, format="%(name)s: %(message)s")  # warnings
    asyncio.run(main())
