"""Worker processes of the counting-lease race: each runs two clients (two providers, two
engines) on one ``limit=N`` key and records every grant with database times.

A grant's start is its database grant time (the statement writes the expiry as grant time +
TTL, exactly, so start = expires_at - ttl for a new owner); its end is the earlier of the
database time its release took effect (`release` reports it) and its last expiry (renewals
move it). The parent checks, in the database's clock, that no instant had more than N.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from datetime import datetime, timedelta
from typing import Any

from sql_lease import SqlLeaseProvider

Grant = tuple[str, int, datetime, datetime]  # owner, fence, start, end


async def _client(
    url: str, key: str, limit: int, seconds: float, rng: random.Random, name: str
) -> dict[str, Any]:
    grants: list[Grant] = []
    refused = 0
    async with SqlLeaseProvider.from_url(url, timeout=20) as provider:
        stop = time.monotonic() + seconds
        serial = 0
        while time.monotonic() < stop:
            serial += 1
            owner = f"{name}-{serial}"
            ttl = rng.choice([60, 150, 300])
            result = await provider.acquire_lease(key, owner, ttl, limit=limit)
            if not result.acquired:
                refused += 1
                assert result.owner, result  # a refused caller learns a holder
                await asyncio.sleep(rng.random() * 0.01)
                continue
            assert result.expires_at is not None and result.fence is not None
            start = result.expires_at - timedelta(milliseconds=ttl)
            end = result.expires_at
            await asyncio.sleep(rng.random() * ttl / 1000 * 0.8)
            if rng.random() < 0.5:
                renewal = await provider.renew(key, owner, ttl)
                if renewal is not None:
                    assert renewal.fence == result.fence
                    end = renewal.expires_at
                await asyncio.sleep(rng.random() * ttl / 1000 * 1.2)  # sometimes past expiry
            released = await provider.release(key, owner)
            if released is not None:
                assert released.fence == result.fence
                end = min(end, released.released_at)
            grants.append((owner, result.fence, start, end))
    return {"grants": grants, "refused": refused}


async def _clients(url: str, key: str, limit: int, seconds: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    runs = await asyncio.gather(
        *(
            _client(url, key, limit, seconds, random.Random(rng.random()), f"p{os.getpid()}c{c}")
            for c in range(2)
        )
    )
    return {
        "grants": [g for r in runs for g in r["grants"]],
        "refused": sum(r["refused"] for r in runs),
    }


def contend(url: str, key: str, limit: int, seconds: float, seed: int) -> dict[str, Any]:
    """One process: two clients contending for ``key`` (``limit``) for ``seconds``."""
    return asyncio.run(_clients(url, key, limit, seconds, seed))
