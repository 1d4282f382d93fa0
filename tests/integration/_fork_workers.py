"""One forking program for `test_forks`: ``python -m ... API HOW URL``.

API: ``async`` or ``sync`` (the provider's kind). HOW: ``mp`` (a `multiprocessing` child with
the fork start method), ``fork`` (`os.fork`, the child ends with ``os._exit``), ``fork-exit``
(`os.fork` outside any event loop, the child ends with ``sys.exit``: the interpreter's own
finalization runs in it). The parent makes a call (a pooled connection exists), forks; the
child calls the inherited provider (it must refuse at once), closes it, then makes a provider
of its own and uses it; the parent, after the child ended, times its next calls. Prints one
JSON object: ``child`` (lines the child wrote) and ``parent_s`` (the parent's latencies).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sql_lease
import sql_lease.sync

REPORT = Path(tempfile.mkdtemp()) / "child.txt"


def _say(line: str) -> None:
    with REPORT.open("a") as f:
        f.write(line + "\n")


def _refused(call: Any) -> None:
    started = time.monotonic()
    try:
        call()
    except sql_lease.LeaseError as exc:
        _say(f"{type(exc).__name__} {time.monotonic() - started:.3f} {exc}")
    else:
        _say("not refused")


def child_sync(url: str, inherited: sql_lease.sync.SqlLeaseProvider) -> None:
    _refused(lambda: inherited.acquire_lease("c", "child", 5000))
    inherited.close()  # releases nothing of the parent's
    with sql_lease.sync.SqlLeaseProvider.from_url(url) as own:
        _say(f"own {own.acquire_lease('c', 'child', 5000).acquired}")


def child_async(url: str, inherited: sql_lease.SqlLeaseProvider) -> None:
    async def main() -> None:
        async def call() -> None:
            await inherited.acquire_lease("c", "child", 5000)

        started = time.monotonic()
        try:
            await call()
        except sql_lease.LeaseError as exc:
            _say(f"{type(exc).__name__} {time.monotonic() - started:.3f} {exc}")
        else:
            _say("not refused")
        await inherited.aclose()  # releases nothing of the parent's
        async with sql_lease.SqlLeaseProvider.from_url(url) as own:
            _say(f"own {(await own.acquire_lease('c', 'child', 5000)).acquired}")

    asyncio.run(main())


def fork(how: str, target: Any, *args: Any) -> None:
    if how == "mp":
        proc = multiprocessing.get_context("fork").Process(target=target, args=args)
        proc.start()
        proc.join(60)
        return
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            target(*args)
        except BaseException as exc:
            _say(f"child failed {type(exc).__name__}: {exc}")
            code = 1
        if how == "fork":
            os._exit(code)
        sys.exit(code)  # the interpreter's finalization runs in the child
    os.waitpid(pid, 0)


def run_sync(how: str, url: str) -> list[float]:
    with sql_lease.sync.SqlLeaseProvider.from_url(url) as provider:
        provider.acquire_lease("p", "parent", 60_000)
        fork(how, child_sync, url, provider)
        latencies = []
        for _ in range(3):
            started = time.monotonic()
            assert provider.acquire_lease("p", "parent", 60_000).acquired
            latencies.append(time.monotonic() - started)
        return latencies


def run_async(how: str, url: str) -> list[float]:
    async def main(provider: sql_lease.SqlLeaseProvider, forking: bool) -> list[float]:
        if forking:  # inside the running loop, as a server forking its workers would
            fork(how, child_async, url, provider)
        latencies = []
        for _ in range(3):
            started = time.monotonic()
            assert (await provider.acquire_lease("p", "parent", 60_000)).acquired
            latencies.append(time.monotonic() - started)
        return latencies

    provider = sql_lease.SqlLeaseProvider.from_url(url)

    async def warm() -> None:
        await provider.acquire_lease("p", "parent", 60_000)

    if how == "fork-exit":  # outside any loop: the child's finalization must not hurt
        asyncio.run(warm())  # its connections stay with that (closed) loop
        fork(how, child_async, url, provider)

        async def after() -> list[float]:  # a second `asyncio.run` of the parent's
            try:
                return await main(provider, False)
            finally:
                await provider.aclose()

        return asyncio.run(after())

    async def whole() -> list[float]:
        try:
            await warm()
            return await main(provider, True)
        finally:
            await provider.aclose()

    return asyncio.run(whole())


if __name__ == "__main__":
    api, how, url = sys.argv[1:4]
    latencies = (run_sync if api == "sync" else run_async)(how, url)
    child = REPORT.read_text().splitlines() if REPORT.exists() else []
    print(json.dumps({"child": child, "parent_s": latencies}))
