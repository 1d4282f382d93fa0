"""Fully qualified spellings of what PostgreSQL statements call: plain strings, no I/O.

PostgreSQL resolves an unqualified function, operator or type name through the session's
``search_path``, and prefers an exact argument match in any schema on it to a built-in that
needs an implicit cast (``$3::bigint * interval`` has no exact built-in operator;
``nextval('seq')`` passes an untyped literal). A role that can create objects in a schema on
the path can therefore plant ``public."*"(bigint, interval)`` or ``public.nextval(text)`` and
take over a statement. Every statement the library sends or installs spells these names with
``pg_catalog`` instead (`OPERATOR(pg_catalog.=)`, `NOW`, ...): the one candidate is the
built-in. Keywords (``bigint``, ``integer``, ``boolean``, ``interval``, ``double precision``,
``GREATEST``, ``LEAST``, ``EXTRACT``) are grammar and always name ``pg_catalog``'s objects.

``OPERATOR(...)`` binds tighter than ``AND``/``OR`` but all qualified operators share one
precedence (left to right), so arithmetic built here is parenthesised.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BYTEA",
    "EQ",
    "GE",
    "GT",
    "LE",
    "LT",
    "NOW",
    "TEXT",
    "add_millis",
    "encode_hex",
    "minus_millis",
    "nextval",
    "notify",
    "unnest",
]

EQ: Final = "OPERATOR(pg_catalog.=)"
GT: Final = "OPERATOR(pg_catalog.>)"
GE: Final = "OPERATOR(pg_catalog.>=)"
LT: Final = "OPERATOR(pg_catalog.<)"
LE: Final = "OPERATOR(pg_catalog.<=)"
NOW: Final = "pg_catalog.clock_timestamp()"
BYTEA: Final = "pg_catalog.bytea"
TEXT: Final = "pg_catalog.text"


def _millis(ms: str) -> str:
    """``ms`` (a bigint expression) milliseconds as an interval: the one built-in
    ``float8 * interval`` operator, exact for any TTL (microseconds below 2^53), and an
    interval literal that reads the same under every ``IntervalStyle``."""
    return f"({ms}::double precision OPERATOR(pg_catalog.*) INTERVAL '1 millisecond')"


def add_millis(ms: str) -> str:
    """The server's clock plus ``ms`` milliseconds (an expiry)."""
    return f"({NOW} OPERATOR(pg_catalog.+) {_millis(ms)})"


def minus_millis(ms: str) -> str:
    """The server's clock minus ``ms`` milliseconds."""
    return f"({NOW} OPERATOR(pg_catalog.-) {_millis(ms)})"


def nextval(sequence: str) -> str:
    """The next value of ``sequence`` (quoted, schema-qualified, plain identifier characters):
    a ``regclass`` constant, so no ``nextval(text)`` can be a candidate."""
    return f"pg_catalog.nextval('{sequence}'::pg_catalog.regclass)"


def encode_hex(key: str) -> str:
    return f"pg_catalog.encode({key}, 'hex')"


def notify(channel: str, key: str) -> str:
    """NOTIFY ``channel`` (plain characters) with ``key`` in hex, as a text expression."""
    return f"pg_catalog.pg_notify('{channel}', {encode_hex(key)})::{TEXT}"


def unnest(*arrays: str) -> str:
    """The arrays side by side as rows (what ``unnest(a, b)`` means in ``FROM``: that
    special form exists only unqualified, so it is spelled as ``ROWS FROM``)."""
    return "ROWS FROM (" + ", ".join(f"pg_catalog.unnest({a})" for a in arrays) + ")"
