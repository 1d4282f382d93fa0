"""The Python side of the counting-lease interop tests, run with the repository's interpreter.

``counting_peer.py URL`` reads a JSON list of calls on stdin, each ``{"m": method, "a": [args],
"kw": {keyword arguments}}``, runs them in order on one `sql_lease.SqlLeaseProvider` and prints
one JSON result each. Metadata written as ``{"hex": "..."}`` is bytes, a JSON string is a str;
results show bytes metadata the same way. A call that raises gives ``{"error": class name,
"message": str(exc)}`` (the next calls still run).
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from sql_lease import SqlLeaseProvider

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def arg(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"hex"}:
        return bytes.fromhex(value["hex"])
    return value


def plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return (value - EPOCH) // timedelta(milliseconds=1)
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | str | int | float):
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    fields = (
        "acquired",
        "key",
        "owner",
        "fence",
        "expires_at",
        "acquired_at",
        "metadata",
        "leases",
        "blocked_key",
        "blocked_by",
    )
    return {name: plain(getattr(value, name)) for name in fields if hasattr(value, name)}


async def main(url: str) -> None:
    calls = json.loads(sys.stdin.read())
    out: list[Any] = []
    async with SqlLeaseProvider.from_url(url, timeout=10) as provider:
        for call in calls:
            args = [arg(a) for a in call.get("a", [])]
            kwargs = {k: arg(v) for k, v in call.get("kw", {}).items()}
            try:
                out.append(plain(await getattr(provider, call["m"])(*args, **kwargs)))
            except Exception as exc:  # reported to the test, which checks it
                out.append({"error": type(exc).__name__, "message": str(exc)})
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
