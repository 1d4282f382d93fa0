"""Worker processes of the sync counting-lease race: each runs threads sharing one sync
provider on one ``limit=N`` key and records every grant with database times (as the async
race's workers, tests/integration/_counting_workers.py: a grant starts at its expiry minus its
TTL and ends at the earlier of its release's database time and its last expiry)."""

from __future__ import annotations

import os
import random
import threading
import time
from datetime import timedelta
from typing import Any

from sql_lease.sync import SqlLeaseProvider

Grant = tuple[str, int, Any, Any]  # owner, fence, start, end (aware datetimes)


def _client(
    provider: SqlLeaseProvider,
    key: str,
    limit: int,
    seconds: float,
    rng: random.Random,
    name: str,
    out: dict[str, Any],
) -> None:
    grants: list[Grant] = []
    refused = 0
    stop = time.monotonic() + seconds
    serial = 0
    while time.monotonic() < stop:
        serial += 1
        owner = f"{name}-{serial}"
        ttl = rng.choice([60, 150, 300])
        result = provider.acquire_lease(key, owner, ttl, limit=limit)
        if not result.acquired:
            refused += 1
            assert result.owner, result  # a refused caller learns a holder
            time.sleep(rng.random() * 0.01)
            continue
        assert result.expires_at is not None and result.fence is not None
        start = result.expires_at - timedelta(milliseconds=ttl)
        end = result.expires_at
        time.sleep(rng.random() * ttl / 1000 * 0.8)
        if rng.random() < 0.5:
            renewal = provider.renew(key, owner, ttl)
            if renewal is not None:
                assert renewal.fence == result.fence
                end = renewal.expires_at
            time.sleep(rng.random() * ttl / 1000 * 1.2)  # sometimes past expiry
        released = provider.release(key, owner)
        if released is not None:
            assert released.fence == result.fence
            end = min(end, released.released_at)
        grants.append((owner, result.fence, start, end))
    out["grants"], out["refused"] = grants, refused


def contend(
    url: str, key: str, limit: int, seconds: float, seed: int, threads: int
) -> dict[str, Any]:
    """One process: ``threads`` threads on one sync provider contending for ``key``."""
    rng = random.Random(seed)
    outs: list[dict[str, Any]] = [{} for _ in range(threads)]
    with SqlLeaseProvider.from_url(url, timeout=20, pool_size=threads) as provider:
        workers = [
            threading.Thread(
                target=_client,
                args=(
                    provider,
                    key,
                    limit,
                    seconds,
                    random.Random(rng.random()),
                    f"p{os.getpid()}t{t}",
                    outs[t],
                ),
            )
            for t in range(threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    if any("grants" not in o for o in outs):
        raise RuntimeError("a client thread failed (see its traceback above)")
    return {
        "grants": [g for o in outs for g in o["grants"]],
        "refused": sum(o["refused"] for o in outs),
    }
