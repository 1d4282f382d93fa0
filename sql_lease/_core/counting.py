"""Counting leases, metadata and all-or-none acquires: the values and checks every provider
shares (no I/O, no dialect).

A key acquired with ``limit=N`` may have up to N live owners at once; each owner's grant has
its own fence (strictly increasing per key across every grant) and expiry, and may carry
metadata (bytes or str, at most `MAX_METADATA_BYTES`). In a SQL table such a key is one row
whose owner is `RESERVED_OWNER` (the byte ``0xff``, never part of UTF-8, so no plain statement
matches it) and whose grants are a JSON array: `grants_of` reads it.

Mixing limits is refused: while a key has live holders, a call with another ``limit`` raises
`sql_lease.errors.LeaseLimitMismatchError` naming both (a plain lease counts as ``limit=1``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, NamedTuple, TypeAlias

from ..errors import LeaseTypeError, LeaseValueError
from .contract import AcquireResult
from .validate import check_limit, check_metadata, check_name

__all__ = [
    "EPOCH",
    "MAX_KEYS",
    "MAX_LIMIT",
    "MAX_METADATA_BYTES",
    "RESERVED_OWNER",
    "AcquireAllResult",
    "Grant",
    "Metadata",
    "check_count_args",
    "check_hold_keys",
    "grants_of",
    "micros",
]

#: What ``metadata=`` takes and a `Lease` returns: bytes or str as given, or None.
Metadata: TypeAlias = bytes | str | None
#: The stored owner of a row holding a counting lease or a lease with metadata.
RESERVED_OWNER: Final = b"\xff"
#: The largest ``limit`` (every grant is rewritten with the row: keep N small).
MAX_LIMIT: Final = 1000
#: The largest metadata, in bytes (a str counts as its UTF-8).
MAX_METADATA_BYTES: Final = 1024
#: The most keys one `acquire_leases` call takes.
MAX_KEYS: Final = 1000
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def micros(us: int) -> datetime:
    """Microseconds since the epoch as an aware datetime (exact)."""
    return EPOCH + timedelta(microseconds=us)


class Grant(NamedTuple):
    """One holder of a key: its owner (stored bytes), fence, expiry, grant time, metadata."""

    owner: bytes
    fence: int
    expires_at: datetime
    acquired_at: datetime
    metadata: bytes | str | None


def _metadata(item: dict[str, object]) -> bytes | str | None:
    raw = item.get("m")
    if raw is None:
        return None
    data = bytes.fromhex(str(raw))
    return data.decode("utf-8", "surrogatepass") if item.get("s") else data


def grants_of(text: str | bytes | None) -> tuple[Grant, ...]:
    """The grants of a ``holders`` JSON array (times in microseconds), oldest fence first."""
    if not text:
        return ()
    items = json.loads(text)
    grants = [
        Grant(
            bytes.fromhex(item["o"]),
            int(item["f"]),
            micros(int(item["e"])),
            micros(int(item["a"])),
            _metadata(item),
        )
        for item in items
    ]
    grants.sort(key=lambda g: g.fence)
    return tuple(grants)


@dataclass(frozen=True, slots=True)
class AcquireAllResult:
    """Outcome of ``acquire_leases(keys, owner, ttl_ms)``: every key or none.

    ``acquired``: True when the owner now holds every key; then ``leases`` maps each key to
    its `AcquireResult` (fence, expiry). False: nothing was taken (or kept: keys the owner
    already held are renewed only on success), and ``blocked_key`` is the first key (in sorted
    order) held by someone else, ``blocked_by`` that holder.
    """

    acquired: bool
    leases: dict[str, AcquireResult]
    blocked_key: str | None = None
    blocked_by: str | None = None


def check_count_args(limit: object, metadata: object) -> tuple[int, bytes | None, bool | None]:
    """The checked ``limit`` (1 to `MAX_LIMIT`) and metadata (its stored bytes, whether it
    was a str), before any I/O."""
    n = check_limit(limit, "limit", MAX_LIMIT)
    data, is_str = check_metadata(metadata, MAX_METADATA_BYTES)
    return n, data, is_str


def check_hold_keys(keys: object, limit: object = 1) -> tuple[str, ...]:
    """The keys of a hold of several keys, before any I/O: a list or tuple (never a str) of 1
    to `MAX_KEYS` distinct keys, each a valid key, in the order given; ``limit`` must be 1
    (the keys are taken as plain leases, all or none)."""
    if not isinstance(keys, list | tuple):
        raise LeaseTypeError(f"keys must be a str or a list or tuple of str, not {keys!r}")
    if not keys:
        raise LeaseValueError("keys must not be empty")
    if len(keys) > MAX_KEYS:
        raise LeaseValueError(f"at most {MAX_KEYS} keys at once, not {len(keys)}")
    seen: set[bytes] = set()
    for key in keys:
        stored = check_name("key", key)
        if stored in seen:
            raise LeaseValueError(f"key {key!r} is given twice")
        seen.add(stored)
    if limit != 1 or type(limit) is not int:
        raise LeaseValueError("a hold of several keys takes plain leases: leave limit=1")
    return tuple(keys)
