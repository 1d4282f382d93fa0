"""A racing worker process for the shard-move test: hot keys, acquire / hold / release."""

from __future__ import annotations

import asyncio
import time

from sql_lease import SqlLeaseProvider

#: One tenure: key, owner, fence, monotonic start (after the grant) and end (before the release).
Tenure = tuple[str, str, int, float, float]


def race(url: str, owner: str, keys: list[str], seconds: float) -> tuple[list[Tenure], int]:
    """Acquire, hold a moment and release the ``keys`` in turn for ``seconds``: the tenures
    whose release found the lease still ours (so it was ours throughout), and the errors."""
    return asyncio.run(_race(url, owner, keys, seconds))


async def _race(url: str, owner: str, keys: list[str], seconds: float) -> tuple[list[Tenure], int]:
    provider = SqlLeaseProvider.from_url(url, timeout=30)
    tenures: list[Tenure] = []
    errors = 0
    end = time.monotonic() + seconds
    i = 0
    try:
        while time.monotonic() < end:
            key = keys[i % len(keys)]
            i += 1
            try:
                got = await provider.acquire_lease(key, owner, 60_000)
                if not got.acquired:
                    await asyncio.sleep(0.001)
                    continue
                start = time.monotonic()
                await asyncio.sleep(0.002)
                stop = time.monotonic()
                if await provider.release(key, owner):
                    assert got.fence is not None
                    tenures.append((key, owner, got.fence, start, stop))
            except Exception:
                errors += 1
    finally:
        await provider.aclose()
    return tenures, errors
