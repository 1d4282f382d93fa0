"""The sync provider's cells of ``bench_pooler.py`` (``sync-direct``, ``sync-pgbouncer-tx``):
N threads sharing one `sql_lease.sync.SqlLeaseProvider`, each looping the cell's calls on its
own key, timed and costed like the async cells (a warm-up, then ``seconds`` measured)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from sql_lease.sync import SqlLeaseProvider


class Costed(Protocol):
    def snapshot(self) -> Any: ...

    def since(self, before: Any) -> tuple[float, float, float]: ...


def measure_sync(
    cell: str,
    url: str,
    options: dict[str, Any],
    clients: int,
    seconds: float,
    cpu: Costed | None,
) -> tuple[float, tuple[float, float, float]]:
    """One run of ``cell`` (``lifecycle`` or ``read``) by ``clients`` threads: ops/s and CPU
    per operation (client, server, pooler) of the timed part."""
    provider = SqlLeaseProvider.from_url(url, timeout=10, pool_size=clients, **options)
    try:
        for n in range(clients):
            if cell == "read":
                provider.acquire_lease(f"bench-sync-read-{n}", f"owner-{n}", 600_000)
        run_for(provider, cell, clients, min(0.5, seconds), None)  # every connection opened
        return run_for(provider, cell, clients, seconds, cpu)
    finally:
        provider.close()


def run_for(
    provider: SqlLeaseProvider, cell: str, clients: int, seconds: float, cpu: Costed | None
) -> tuple[float, tuple[float, float, float]]:
    done = [0] * clients
    stop = [0.0]
    start = threading.Barrier(clients + 1)

    def loop(n: int) -> None:
        key, owner = f"bench-sync-{cell}-{n}", f"owner-{n}"
        step: Callable[[], int]
        if cell == "lifecycle":

            def step() -> int:
                provider.acquire_lease(key, owner, 10_000)
                provider.renew_lease(key, owner, 10_000)
                provider.release_lease(key, owner)
                return 3

        else:
            read = f"bench-sync-read-{n}"

            def step() -> int:
                provider.get_lease_owner(read)
                return 1

        start.wait()
        while time.monotonic() < stop[0]:
            done[n] += step()

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    before = cpu.snapshot() if cpu else None
    started = time.monotonic()
    stop[0] = started + seconds
    start.wait()
    for thread in threads:
        thread.join()
    total = sum(done)
    rate = total / (time.monotonic() - started)
    if cpu is None or before is None or not total:
        return rate, (0.0, 0.0, 0.0)
    client_s, server_s, pooler_s = cpu.since(before)
    return rate, (client_s * 1e6 / total, server_s * 1e6 / total, pooler_s * 1e6 / total)
