"""Long keys: the stored form of a key over 1024 bytes, as the TypeScript package maps it.

`@sql-lease/mastra` accepts every key Mastra can produce: a key whose stored bytes (UTF-8, a
lone surrogate as its 3-byte form, i.e. ``str.encode("utf-8", "surrogatepass")``) exceed
`MAX_NAME_BYTES` is stored under `map_long_key(key)`: its first bytes (cut at a character),
`LONG_KEY_MARKER`, then the 64 hex digits of the SHA-256 of all its bytes; 1024 bytes at most.
A Python process passes `map_long_key(key)` to a provider to address the same lease (the
Python providers themselves refuse keys over the limit rather than map them silently).
"""

from __future__ import annotations

import hashlib
from typing import Final

from ._core.validate import MAX_NAME_BYTES
from .errors import LeaseTypeError

__all__ = ["LONG_KEY_HEAD_BYTES", "LONG_KEY_MARKER", "map_long_key"]

#: Between the kept head of a long key and its SHA-256 (NUL: never in ordinary text).
LONG_KEY_MARKER: Final = "\x00sql-lease-sha256:"
#: How many bytes of a long key's head the mapped form keeps, at most.
LONG_KEY_HEAD_BYTES: Final = MAX_NAME_BYTES - len(LONG_KEY_MARKER.encode()) - 64


def map_long_key(key: str) -> str:
    """The key under which `key` is stored: itself up to 1024 stored bytes, else its head, the
    marker and the SHA-256 of its stored bytes in hex (identical to the TypeScript package's
    `mapLongKey`)."""
    if not isinstance(key, str):
        raise LeaseTypeError(f"key must be a str, not {type(key).__name__}")
    encoded = key.encode("utf-8", "surrogatepass")
    if len(encoded) <= MAX_NAME_BYTES:
        return key
    end = LONG_KEY_HEAD_BYTES
    while end > 0 and encoded[end] & 0xC0 == 0x80:  # not inside a character
        end -= 1
    digest = hashlib.sha256(encoded).hexdigest()
    return encoded[:end].decode("utf-8", "surrogatepass") + LONG_KEY_MARKER + digest
