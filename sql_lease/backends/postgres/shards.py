"""Which Citus worker holds a key: PostgreSQL's hash of the key, the shards' hash ranges, and
the worker (node group) of each shard. Plain data and arithmetic, no I/O.

Citus places a row of a hash-distributed table in the shard whose range of hash values holds
the hash of its distribution column, computed with the column type's hash function; for
``bytea`` (our keys) that is PostgreSQL's ``hash_bytes`` over the key's bytes (Bob Jenkins'
lookup3 hash, as PostgreSQL writes it for a little-endian machine: the same as ``hashtext`` of
a text with those bytes). Computing it here costs about 2 µs per key and no round trip, so a
coalesced batch can be split into one call per worker before it is sent (`ShardMap.split`).

The placements are what the provider read last (`SHARDS_SQL`); after a shard moves they are
stale until it reads them again, which only costs a network hop inside the worker (the call
still runs every key's statements: correctness never depends on this map).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Final

__all__ = ["SHARDS_SQL", "ShardMap", "hash_bytes"]

#: The shards of every hash-distributed table (schema, table, lowest and highest hash, node
#: group of its placement), in hash order.
SHARDS_SQL: Final = (
    "SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text,"
    " s.shardminvalue::pg_catalog.int4, s.shardmaxvalue::pg_catalog.int4,"
    " pg_catalog.min(pl.groupid)"
    " FROM pg_catalog.pg_dist_shard AS s"
    " JOIN pg_catalog.pg_dist_partition AS p"
    " ON p.logicalrelid OPERATOR(pg_catalog.=) s.logicalrelid"
    " JOIN pg_catalog.pg_dist_placement AS pl ON pl.shardid OPERATOR(pg_catalog.=) s.shardid"
    " JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) s.logicalrelid"
    " JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
    " WHERE p.partmethod OPERATOR(pg_catalog.=) 'h'"
    " GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3"
)

_MASK: Final = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _MASK


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    a = ((a - c) & _MASK) ^ _rot(c, 4)
    c = (c + b) & _MASK
    b = ((b - a) & _MASK) ^ _rot(a, 6)
    a = (a + c) & _MASK
    c = ((c - b) & _MASK) ^ _rot(b, 8)
    b = (b + a) & _MASK
    a = ((a - c) & _MASK) ^ _rot(c, 16)
    c = (c + b) & _MASK
    b = ((b - a) & _MASK) ^ _rot(a, 19)
    a = (a + c) & _MASK
    c = ((c - b) & _MASK) ^ _rot(b, 4)
    b = (b + a) & _MASK
    return a, b, c


def _final(a: int, b: int, c: int) -> int:
    c = (c ^ b) - _rot(b, 14) & _MASK
    a = (a ^ c) - _rot(c, 11) & _MASK
    b = (b ^ a) - _rot(a, 25) & _MASK
    c = (c ^ b) - _rot(b, 16) & _MASK
    a = (a ^ c) - _rot(c, 4) & _MASK
    b = (b ^ a) - _rot(a, 14) & _MASK
    return (c ^ b) - _rot(b, 24) & _MASK


def hash_bytes(data: bytes) -> int:
    """PostgreSQL's ``hash_bytes`` of ``data`` as the signed 32-bit integer it returns."""
    n = len(data)
    a = b = c = (0x9E3779B9 + n + 3923095) & _MASK
    pos = 0
    while n - pos >= 12:
        a = (a + int.from_bytes(data[pos : pos + 4], "little")) & _MASK
        b = (b + int.from_bytes(data[pos + 4 : pos + 8], "little")) & _MASK
        c = (c + int.from_bytes(data[pos + 8 : pos + 12], "little")) & _MASK
        a, b, c = _mix(a, b, c)
        pos += 12
    tail = data[pos:]
    # The last 0-11 bytes: a takes bytes 0-3, b 4-7, c 8-10 shifted up one byte (its lowest
    # byte is left for the length, as lookup3 does).
    a = (a + int.from_bytes(tail[0:4], "little")) & _MASK
    b = (b + int.from_bytes(tail[4:8], "little")) & _MASK
    c = (c + (int.from_bytes(tail[8:11], "little") << 8)) & _MASK
    h = _final(a, b, c)
    return h - (1 << 32) if h & 0x80000000 else h


class ShardMap:
    """The shards of one distributed table: sorted hash ranges and each one's node group."""

    __slots__ = ("_groups", "_maxes", "_mins")

    def __init__(self, shards: Iterable[tuple[int, int, int]]) -> None:
        """``shards``: (lowest hash, highest hash, node group) of each shard."""
        ordered = sorted(shards)
        self._mins = [s[0] for s in ordered]
        self._maxes = [s[1] for s in ordered]
        self._groups = [s[2] for s in ordered]

    def __len__(self) -> int:
        return len(self._mins)

    def group_of(self, key: bytes) -> int | None:
        """The node group holding ``key``'s shard (None: no shard covers its hash)."""
        h = hash_bytes(key)
        i = bisect.bisect_right(self._mins, h) - 1
        if i < 0 or h > self._maxes[i]:
            return None
        return self._groups[i]

    def split(self, keys: Sequence[bytes]) -> list[list[int]]:
        """The indexes of ``keys`` by node group (keys of one group together, in their
        order; groups in the order of their first key). A key no shard covers gets a group
        of its own (the call still runs it)."""
        by_group: dict[object, list[int]] = {}
        for i, key in enumerate(keys):
            group = self.group_of(key)
            by_group.setdefault(("none", i) if group is None else group, []).append(i)
        return list(by_group.values())
