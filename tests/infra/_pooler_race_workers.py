"""Race workers behind a pooler: several tasks per process, each with its own provider, or
all sharing one (their calls coalesce)."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Final

from sql_lease import SqlLeaseProvider
from sql_lease.backends import postgres
from sql_lease.observer import LeaseEvent, StatementEvent

from ..integration._race_workers import Hammer, _hammer


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


class _Batches:
    """An observer keeping each write statement that carried several calls (more than one
    row: a one-row statement returns at most one) as its (start, end) on this clock. A batch
    of acquires only is left out: a batch of holder reads (of contended acquires) is
    observed under that name too."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []

    def on_statement(self, event: StatementEvent) -> None:
        if event.operation in _WRITES and event.error is None and (event.rows or 0) > 1:
            end = time.monotonic()
            self.spans.append((end - event.seconds, end))

    def on_lease_event(self, event: LeaseEvent) -> None:
        pass


#: Hammer makes no other read than the holder read: a "BATCH" here is a write batch.
_WRITES: Final = frozenset({"renew_lease", "release_lease", "transfer_lease", "BATCH"})


def shared_provider_tasks(
    url: str, worker: int, keys: list[str], seconds: float, tasks: int, write_batches: int
) -> dict[str, Any]:
    """``tasks`` hammering scripts (`tests.integration._race_workers.Hammer`) sharing ONE
    provider through a transaction pooler, so that their calls coalesce into batches, with
    up to ``write_batches`` write batches in flight at once (this process's
    `postgres.POOLED_WRITE_BATCHES`, which the plan reads); their events, and how many pairs
    of write batches overlapped in time."""
    postgres.POOLED_WRITE_BATCHES = write_batches  # type: ignore[misc]

    async def run() -> dict[str, Any]:
        observer = _Batches()
        provider = SqlLeaseProvider.from_url(
            url, timeout=10, pool_size=8, pooler="transaction", observer=observer
        )
        scripts = [
            Hammer(random.Random(9000 + worker * 100 + t), keys, f"w{worker}t{t}\0")
            for t in range(tasks)
        ]
        calls = {
            "acquire_lease": provider.acquire_lease,
            "renew": provider.renew,
            "transfer": provider.transfer,
            "release": provider.release,
        }
        deadline = time.monotonic() + seconds

        async def hammer(script: Hammer) -> None:
            while time.monotonic() < deadline:
                step = script.step()
                if step.pause:
                    await asyncio.sleep(step.pause)
                if step.call is not None:
                    script.record(step, await calls[step.call](*step.args))

        try:
            await asyncio.gather(*(hammer(s) for s in scripts))
        finally:
            await provider.aclose()
        spans = sorted(observer.spans)
        overlapping = sum(
            1 for i, (_, end) in enumerate(spans) for start, _ in spans[i + 1 :] if start < end
        )
        return {
            "events": [e for s in scripts for e in s.events],
            "batches": len(spans),
            "overlapping": overlapping,
            "stats": provider.coalescing_stats(),
        }

    return asyncio.run(run())
