"""One demo worker process: a `Coordinator` on its own provider, fed by a queue.

Signals arrive on the worker's inbox; routing puts a signal on the inbox of the worker whose
run holds the thread (run ids are ``w<worker>:<n>``). Every run and every processed signal is
reported to the parent with its fence and database times, for the verdict.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from dataclasses import asdict, dataclass
from multiprocessing.queues import Queue
from typing import Any

from .._sqlprovider.provider import SqlLeaseProvider
from ..coordinator import Coordinator, Run
from ._db import Target
from ._demo_report import Processed, RunRecord
from ._errors import describe

__all__ = ["Signal", "WorkerConfig", "thread_key", "worker_main"]


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    url: str
    prefix: str  #: thread keys are ``<prefix>\0thread-<n>`` (NUL as in Mastra's keys)
    ttl_ms: int
    work_ms: int  #: mean simulated work per signal
    seed: int


@dataclass(frozen=True, slots=True)
class Signal:
    id: int
    thread: int
    hops: int = 0  #: how often it was routed


def thread_key(prefix: str, thread: int) -> str:
    return f"{prefix}\0thread-{thread}"


def worker_main(
    index: int, config: WorkerConfig, inboxes: list[Queue[Any]], events: Queue[Any]
) -> None:
    """Process entry point; reports a failure as one line instead of a traceback."""
    try:
        asyncio.run(_serve(index, config, inboxes, events))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the parent reports it
        pass
    except Exception as exc:
        described = describe(exc, secrets=Target(config.url).secrets)
        message = described[1] if described else f"{type(exc).__name__}: {exc}"
        code = int(described[0]) if described else 5
        events.put(("error", index, code, message))


async def _serve(
    index: int, config: WorkerConfig, inboxes: list[Queue[Any]], events: Queue[Any]
) -> None:
    rng = random.Random(config.seed * 1000 + index)
    serial = itertools.count(1)
    max_hops = 0
    provider = SqlLeaseProvider.from_url(config.url, timeout=10, pool_size=4, max_overflow=4)

    async def work(run: Run[Signal]) -> None:
        start = await provider.now()
        for signal in run.signals:
            await asyncio.sleep(rng.uniform(0.5, 1.5) * config.work_ms / 1000)
            at = await provider.now()
            events.put(
                ("processed", Processed(signal.id, signal.thread, run.run_id, run.fence, at, index))
            )
        end = await provider.now()
        thread = run.signals[0].thread
        ids = tuple(s.id for s in run.signals)
        events.put(
            (
                "run",
                RunRecord(
                    thread,
                    run.run_id,
                    index,
                    run.fence,
                    start,
                    end,
                    run.started_by,
                    run.previous_run_id,
                    ids,
                ),
            )
        )

    async def route(key: str, owner: str, signal: Signal) -> None:
        worker = int(owner.partition(":")[0].removeprefix("w"))
        inboxes[worker].put(("signal", signal.id, signal.thread, signal.hops + 1))

    coordinator: Coordinator[Signal] = Coordinator(
        provider,
        work=work,
        route=route,
        ttl_ms=config.ttl_ms,
        run_ids=lambda: f"w{index}:{next(serial)}",
    )
    pending: set[asyncio.Task[Any]] = set()
    try:
        await provider.now()  # fail early (and visibly) when the database is unreachable
        events.put(("ready", index))
        inbox = inboxes[index]
        while True:
            message = await asyncio.to_thread(inbox.get)
            if message[0] == "stop":
                break
            _, signal_id, thread, hops = message
            max_hops = max(max_hops, hops)
            signal = Signal(signal_id, thread, hops)
            task = asyncio.create_task(
                coordinator.signal(thread_key(config.prefix, thread), signal)
            )
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)
        await coordinator.wait_idle()
        events.put(("stats", index, {**asdict(coordinator.stats), "max_hops": max_hops}))
    finally:
        await coordinator.aclose()
        await provider.aclose()
