"""Argument checks shared by every provider; all run before any I/O."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final, TypeAlias

from ..errors import LeaseTypeError, LeaseValueError

__all__ = [
    "MAX_NAME_BYTES",
    "MAX_TTL_MS",
    "Millis",
    "check_identifier",
    "check_items",
    "check_keys",
    "check_limit",
    "check_metadata",
    "check_millis",
    "check_name",
    "check_prefix",
    "check_ttl",
]

MAX_NAME_BYTES: Final = 1024
MAX_TTL_MS: Final = 365 * 24 * 60 * 60 * 1000
# Derived names (`<table>_fence_seq`, `<table>_alembic_version`) must fit PostgreSQL's 63 bytes.
MAX_IDENTIFIER_LEN: Final = 40
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MS: Final = timedelta(milliseconds=1)

#: A duration argument (``ttl_ms``, ``wait_ms``, ...): an int of milliseconds or a `timedelta`.
Millis: TypeAlias = int | timedelta


def check_name(what: str, value: object) -> bytes:
    """Validate a key or owner and return its stored form: its UTF-8 bytes, a lone surrogate
    as its 3-byte form (``surrogatepass``, as the TypeScript package's WTF-8), so that every
    string a JavaScript process may hold addresses the same lease from Python."""
    if not isinstance(value, str):
        raise LeaseTypeError(f"{what} must be a str, not {type(value).__name__}")
    encoded = value.encode("utf-8", "surrogatepass")
    if not encoded:
        raise LeaseValueError(f"{what} must not be empty")
    if len(encoded) > MAX_NAME_BYTES:
        raise LeaseValueError(
            f"{what} is {len(encoded)} bytes in UTF-8; the limit is {MAX_NAME_BYTES}"
        )
    return encoded


def _to_millis(what: str, value: object) -> int:
    """An int of milliseconds (not bool), or a `timedelta` rounded up to a whole millisecond."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, timedelta):
        return -(-value // _MS)  # rounded up: a duration is never shorter than asked
    raise LeaseTypeError(
        f"{what} must be an int of milliseconds or a timedelta, not {type(value).__name__}"
    )


def _shown(value: object, millis: int) -> str:
    return f"{value} ({millis} ms)" if isinstance(value, timedelta) else str(millis)


def check_ttl(ttl_ms: object, what: str = "ttl_ms") -> int:
    """Validate a TTL: an int of milliseconds or a `timedelta` (rounded up to a whole
    millisecond), 1 ms to 365 days; returns milliseconds."""
    if type(ttl_ms) is int and 0 < ttl_ms <= MAX_TTL_MS:  # the hot path: one test
        return ttl_ms
    millis = _to_millis(what, ttl_ms)
    if millis <= 0 or millis > MAX_TTL_MS:
        raise LeaseValueError(
            f"{what} must be between 1 and {MAX_TTL_MS} ms (365 days), not {_shown(ttl_ms, millis)}"
        )
    return millis


def check_identifier(what: str, value: object) -> str:
    """Validate a table or schema name: a plain SQL identifier of at most 40 characters."""
    if not isinstance(value, str):
        raise LeaseTypeError(f"{what} must be a str, not {type(value).__name__}")
    if not _IDENTIFIER.fullmatch(value) or len(value) > MAX_IDENTIFIER_LEN:
        raise LeaseValueError(
            f"{what} must be a plain SQL identifier (letters, digits, underscore; not starting "
            f"with a digit; at most {MAX_IDENTIFIER_LEN} characters), not {value!r}"
        )
    return value


def check_millis(what: str, value: object) -> int:
    """Validate a non-negative duration (int of milliseconds or `timedelta`, rounded up), at
    most 365 days; returns milliseconds."""
    millis = _to_millis(what, value)
    if millis < 0 or millis > MAX_TTL_MS:
        raise LeaseValueError(
            f"{what} must be between 0 and {MAX_TTL_MS} ms (365 days), not {_shown(value, millis)}"
        )
    return millis


def check_limit(value: object, what: str = "limit", most: int = 10_000) -> int:
    """Validate a count: an int from 1 to ``most``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise LeaseTypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < 1 or value > most:
        raise LeaseValueError(f"{what} must be between 1 and {most}, not {value}")
    return int(value)


def check_items(items: object, what: str = "items") -> list[tuple[bytes, bytes]]:
    """Validate an iterable of ``(key, owner)`` pairs; returns their stored forms."""
    if isinstance(items, str | bytes) or not hasattr(items, "__iter__"):
        raise LeaseTypeError(f"{what} must be an iterable of (key, owner) pairs")
    pairs: list[tuple[bytes, bytes]] = []
    for item in items:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise LeaseTypeError(f"each of {what} must be a (key, owner) pair, not {item!r:.60}")
        pairs.append((check_name("key", item[0]), check_name("owner", item[1])))
    return pairs


def check_prefix(prefix: object) -> tuple[bytes, bytes | None]:
    """Validate a key prefix; returns the ``[low, high)`` byte range of keys it covers."""
    if prefix is None:
        return b"", None
    low = check_name("prefix", prefix)
    stripped = low.rstrip(b"\xff")
    if not stripped:
        return low, None
    return low, stripped[:-1] + bytes([stripped[-1] + 1])


def check_metadata(value: object, most: int = 1024) -> tuple[bytes | None, bool | None]:
    """Validate ``metadata=``: None, bytes (or bytearray/memoryview) or str, at most ``most``
    bytes (a str as its UTF-8, lone surrogates as ``surrogatepass``); returns the stored bytes
    and whether it was a str (both None for None)."""
    if value is None:
        return None, None
    if isinstance(value, str):
        data, is_str = value.encode("utf-8", "surrogatepass"), True
    elif isinstance(value, bytes | bytearray | memoryview):
        data, is_str = bytes(value), False
    else:
        raise LeaseTypeError(f"metadata must be bytes, str or None, not {type(value).__name__}")
    if len(data) > most:
        raise LeaseValueError(f"metadata is {len(data)} bytes; the limit is {most}")
    return data, is_str


def check_keys(keys: object, most: int = 1000) -> list[bytes]:
    """Validate the keys of an all-or-none call: an iterable (not a str) of 1 to ``most``
    keys; returns their stored forms, sorted and without duplicates (the order rows are
    locked in, so two such calls never wait for each other in a cycle)."""
    if isinstance(keys, str | bytes) or not hasattr(keys, "__iter__"):
        raise LeaseTypeError("keys must be an iterable of str (a list or a set), not a str")
    stored = sorted({check_name("key", key) for key in keys})
    if not stored:
        raise LeaseValueError("keys must not be empty")
    if len(stored) > most:
        raise LeaseValueError(f"at most {most} keys at once, not {len(stored)}")
    return stored
