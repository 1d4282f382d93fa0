"""The Python side of the cross-language tests, run with the repository's interpreter.

``peer.py ops URL`` reads a JSON list of ``[method, *args]`` on stdin, runs them in order on a
`sql_lease.SqlLeaseProvider` (the public contract methods, and ``map_long_key``) and prints one
JSON result each.

``peer.py hammer URL WORKER SECONDS SEED KEYS_JSON`` prints ``ready``, waits for a line on stdin,
then runs random acquire/renew/transfer/release on the hot keys with short TTLs for SECONDS and
prints its events as JSON (the same shape as the Node worker's), times in database time as
whole epoch milliseconds, floored (as JavaScript's Date holds them).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sql_lease import SqlLeaseProvider, map_long_key

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms(when: datetime) -> int:
    return (when - EPOCH) // timedelta(milliseconds=1)


def plain(name: str, value: Any) -> Any:
    if isinstance(value, datetime):
        return ms(value)
    return str(value) if name == "fence" else value


async def ops(url: str) -> None:
    calls = json.loads(sys.stdin.read())
    async with SqlLeaseProvider.from_url(url, timeout=10) as provider:
        out = []
        for method, *args in calls:
            if method == "map_long_key":
                out.append(map_long_key(*args))
                continue
            result = await getattr(provider, method)(*args)
            if result is not None and not isinstance(result, bool | str):
                result = {
                    name: plain(name, getattr(result, name))
                    for name in ("acquired", "key", "owner", "fence", "expires_at", "acquired_at")
                    if hasattr(result, name)
                }
            out.append(result)
    print(json.dumps(out))


async def hammer(url: str, worker: str, seconds: float, seed: int, keys: list[str]) -> None:
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    held: dict[str, tuple[str, int]] = {}
    serial = 0

    def new_owner() -> str:
        nonlocal serial
        serial += 1
        return f"{worker}\0{serial}"

    def record(op: str, key: str, owner: str, ok: bool, **fields: Any) -> None:
        events.append({"op": op, "key": key, "owner": owner, "ok": ok, "lang": "python", **fields})

    # renew/transfer/release (the reporting forms) give the fence and database times; the
    # contract methods return only booleans.
    async with SqlLeaseProvider.from_url(url, timeout=10, pool_size=4) as provider:
        await provider.now()  # connected
        print("ready", flush=True)
        sys.stdin.readline()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            key = rng.choice(keys)
            ttl = rng.choice([15, 40, 80, 200])
            mine = held.get(key)
            roll = rng.random()
            if mine is None or roll < 0.1:
                owner = mine[0] if mine is not None else new_owner()
                res = await provider.acquire_lease(key, owner, ttl)
                assert res.fence is not None and res.expires_at is not None
                if res.acquired:
                    expires = ms(res.expires_at)
                    record(
                        "acquire",
                        key,
                        owner,
                        True,
                        fence=str(res.fence),
                        t=expires - ttl,
                        expires=expires,
                    )
                    held[key] = (owner, res.fence)
                else:
                    record(
                        "acquire", key, owner, False, holder=res.owner, holderFence=str(res.fence)
                    )
                    held.pop(key, None)
                continue
            owner, fence = mine
            if roll < 0.5:
                if roll < 0.13:
                    await asyncio.sleep(0.25)  # a paused owner: its lease expires meanwhile
                renewed = await provider.renew(key, owner, ttl)
                if renewed is None:
                    held.pop(key, None)
                    record("renew", key, owner, False, fence=str(fence))
                else:
                    expires = ms(renewed[1])
                    record(
                        "renew",
                        key,
                        owner,
                        True,
                        fence=str(renewed[0]),
                        t=expires - ttl,
                        expires=expires,
                    )
            elif roll < 0.7:
                to = new_owner()
                moved = await provider.transfer(key, owner, to, ttl)
                if moved is None:
                    held.pop(key, None)
                    record("transfer", key, owner, False, fence=str(fence), toOwner=to)
                else:
                    expires = ms(moved[1])
                    record(
                        "transfer",
                        key,
                        owner,
                        True,
                        fence=str(moved[0]),
                        t=expires - ttl,
                        expires=expires,
                        toOwner=to,
                        fromFence=str(fence),
                    )
                    held[key] = (to, moved[0])
            elif roll < 0.9:
                released = await provider.release(key, owner)
                held.pop(key, None)
                if released is not None:
                    record("release", key, owner, True, fence=str(released[0]), t=ms(released[1]))
            else:
                held.pop(key, None)  # walk away: let it expire
                await asyncio.sleep(rng.choice([0, 0.01, 0.05]))
    print(json.dumps(events))


def main() -> None:
    mode, url, *rest = sys.argv[1:]
    if mode == "ops":
        asyncio.run(ops(url))
    else:
        worker, seconds, seed, keys = rest
        asyncio.run(hammer(url, worker, float(seconds), int(seed), json.loads(keys)))


if __name__ == "__main__":
    main()
