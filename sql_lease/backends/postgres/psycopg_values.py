"""Values on a psycopg connection whose meaning no session setting can change.

A database or role default, or a ``SET`` another client left on a pooled server connection,
can change how text is read and written: ``standard_conforming_strings=off`` makes ``'\\x..'``
an escape string (and psycopg's text ``bytea[]`` parameters double their backslashes under it:
a renewal then matched another key), ``DateStyle`` changes every text timestamp, the client
encoding changes what a byte means. So:

- **Extended protocol** (the sync default mode): parameters and results are binary
  (`pinned_cursor`, ``binary=True``): bytes, arrays, integers and times travel as the server's
  binary values, which no setting touches.
- **Simple protocol** (pooler mode, text only): the literals built here are ASCII and mean the
  same under every setting: ``bytea`` only as hex inside ``E''`` strings (an escape string is
  read alike whatever ``standard_conforming_strings`` or ``backslash_quote`` is, and holds no
  quote), integers as bare digits, arrays as array literals cast to ``pg_catalog`` types.
  Results are text: the statement's own transaction pins ``DateStyle`` (`PIN_OUTPUT`, before
  the statement runs, so its rows are printed in ISO form with a numeric UTC offset whatever
  ``TimeZone`` is), and `IsoTimestamptzLoader` reads that form whatever ``DateStyle`` the
  connection reports (psycopg's own loader trusts the reported session value, which is not the
  one in force while the statement ran).
"""

from __future__ import annotations

from binascii import hexlify
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

import psycopg
from psycopg.abc import Buffer
from psycopg.adapt import AdaptersMap, Loader
from psycopg.types.array import ListBinaryDumper
from psycopg.types.string import BytesBinaryDumper

__all__ = [
    "PIN_OUTPUT",
    "IsoTimestamptzLoader",
    "PinnedContext",
    "literal",
    "pin",
    "pinned_cursor",
]

#: ``SET LOCAL`` of the settings the text form of our result columns depends on (``bytea``'s
#: is read in both of its forms; booleans and integers depend on nothing).
PIN_OUTPUT: Final = "SET LOCAL DateStyle = ISO; "
_TIMESTAMPTZ_OID: Final = 1184
#: ``\x`` as bytea's hex prefix inside ``E''`` (backslash doubled once), and inside an array
#: element in ``E''`` (doubled twice: the array parser reads one level).
_HEX: Final = b"\\\\x"
_HEX_ELEMENT: Final = b"\\\\\\\\x"


class IsoTimestamptzLoader(Loader):
    """A text ``timestamptz`` in ISO form (``2026-01-02 03:04:05.6+05:45``) as an aware
    datetime, whatever ``DateStyle`` the connection reports."""

    def load(self, data: Buffer) -> datetime:
        text = bytes(data).decode("ascii", "replace")
        try:
            value = datetime.fromisoformat(text)
        except ValueError as exc:  # infinity, BC, a year past 9999, or not ISO
            raise psycopg.DataError(f"can't read timestamptz {text!r}") from exc
        if value.tzinfo is None:
            raise psycopg.DataError(f"timestamptz without a UTC offset: {text!r}")
        return value


def pin(adapters: AdaptersMap) -> AdaptersMap:
    """Register on ``adapters`` (a cursor's or a private copy) what makes values
    setting-proof: binary ``bytes`` and list parameters, the ISO text timestamp loader."""
    adapters.register_dumper(bytes, BytesBinaryDumper)
    adapters.register_dumper(list, ListBinaryDumper)
    adapters.register_loader(_TIMESTAMPTZ_OID, IsoTimestamptzLoader)
    return adapters


class PinnedContext:
    """An adaptation context for a `psycopg.adapt.Transformer`: ``conn``'s adapters with
    `pin`'s registered on a private copy (the connection's own stay as they are)."""

    __slots__ = ("adapters", "connection")

    def __init__(self, conn: psycopg.AsyncConnection[Any] | psycopg.Connection[Any]) -> None:
        self.connection = conn
        self.adapters = pin(AdaptersMap(conn.adapters))


def pinned_cursor(conn: psycopg.Connection[Any]) -> psycopg.RawCursor[Any]:
    """A raw cursor on ``conn`` whose adapters are pinned (`pin`; its own copy)."""
    cur = psycopg.RawCursor(conn)
    pin(cur.adapters)
    return cur


def _array(values: list[Any]) -> bytes | None:
    """A list of ``bytes`` as a ``bytea[]`` literal, of ``int`` as ``int8[]``, else None."""
    if not values:
        return None
    kind = type(values[0])
    if kind is bytes:
        if all(type(v) is bytes for v in values):
            hexed = b",".join([_HEX_ELEMENT + hexlify(v) for v in values])
            return b" E'{" + hexed + b"}'::pg_catalog.bytea[]"
    elif kind is int and all(type(v) is int for v in values):
        return b" '{" + ",".join(map(str, values)).encode() + b"}'::pg_catalog.int8[]"
    return None


def literal(value: object, fallback: Callable[[Any], bytes]) -> bytes:
    """``value`` as an SQL literal that means the same under every session setting (module
    docstring); a type the statements never bind goes to ``fallback`` (psycopg's)."""
    kind = type(value)
    if kind is bytes:
        return b" E'" + _HEX + hexlify(value) + b"'::pg_catalog.bytea"  # type: ignore[arg-type]
    if kind is int:
        return str(value).encode() if value >= 0 else b" " + str(value).encode()  # type: ignore[operator]
    if value is None:
        return b"NULL"
    if kind is bool:
        return b"true" if value else b"false"
    if kind is list:
        found = _array(value)  # type: ignore[arg-type]
        if found is not None:
            return found
    return fallback(value)
