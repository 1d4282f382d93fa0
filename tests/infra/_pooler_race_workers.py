"""Race workers behind a pooler: several tasks per process, each with its own provider."""

from __future__ import annotations

import asyncio
from typing import Any

from ..integration._race_workers import _hammer


def hammer_tasks(
    url: str, worker: int, keys: list[str], seconds: float, tasks: int, pooler: str
) -> dict[str, Any]:
    """``tasks`` concurrent hammers (`tests.integration._race_workers`) in this process, each
    on its own provider through ``pooler``; their events and counters merged."""

    async def run() -> list[dict[str, Any]]:
        return await asyncio.gather(
            *(
                _hammer(url, worker * 100 + t, keys, seconds, 7000 + worker * 100 + t, pooler)
                for t in range(tasks)
            )
        )

    results = asyncio.run(run())
    return {
        "events": [e for r in results for e in r["events"]],
        "reruns": sum(r["reruns"] for r in results),
        "reads": sum(r["reads"] for r in results),
    }
