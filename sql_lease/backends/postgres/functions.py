"""Server-side functions for pooler mode: each hot statement as a call of a plpgsql function.

Behind a transaction pooler no named prepared statement may be used, so every plain statement
is parsed and planned again by the server on every call. Migration 0005 created, per lease
table, one plpgsql function per hot statement whose body is ``RETURN QUERY <the catalogue's
statement>``; 0006 replaced their bodies with the fully qualified statements and pinned
``SET search_path = pg_catalog, pg_temp`` (``SECURITY INVOKER``): plpgsql keeps the plan per
server session, and the session lives on behind the pooler. A call names no protocol-level
object, so it can never run as another statement on another connection; it names the
function's schema, so no session's search path can make it miss or reach a look-alike.

Plain data, no I/O: `routines` lists the functions of a table (what the migration must have
created: the drift tests compare), `register` records, for a table, the call that replaces each
statement text, and `call_for` answers that for `psycopg_driver`. A write batch of several
kinds becomes the ``UNION ALL`` of its kinds' one-kind batch functions (the coalescer never
puts two writes of one key into a batch, so the kinds' rows never interact; rows are matched
to their callers by kind and key, not by order).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Final

from ...catalogue import Batches, Catalogue, ServerCall, Statement
from .catalogue import build_catalogue, quote_ident

__all__ = ["Routine", "call_for", "register", "routines", "server_calls"]

_KOT: Final = ("bytea", "bytea", "bigint")
_TIMES: Final = ("fence bigint", "expires_at timestamptz")
#: One-row statements: catalogue attribute, argument types, result columns.
_ONE_ROW: Final = (
    ("acquire", _KOT, ("acquired boolean", *_TIMES, "holder bytea")),
    ("renew", _KOT, _TIMES),
    ("release", ("bytea", "bytea"), (*_TIMES, "notified boolean")),
    ("transfer", ("bytea", "bytea", "bytea", "bigint"), (*_TIMES, "notified boolean")),
    ("get_owner", ("bytea",), ("owner bytea",)),
    ("get_lease", ("bytea",), ("owner bytea", *_TIMES, "acquired_at timestamptz")),
    ("holder", ("bytea",), ("owner bytea", *_TIMES)),
)
#: One-kind write batches, in `WRITE_KINDS` order: their array types (the lock wait follows).
_BATCH_KINDS: Final = (
    ("acquire", ("bytea[]", "bytea[]", "bigint[]")),
    ("renew", ("bytea[]", "bytea[]", "bigint[]")),
    ("release", ("bytea[]", "bytea[]")),
    ("transfer", ("bytea[]", "bytea[]", "bytea[]", "bigint[]")),
)
_WRITE_ROW: Final = (
    "kind integer",
    "key bytea",
    "acquired boolean",
    *_TIMES,
    "holder bytea",
    "notified boolean",
)
_READ_ROW: Final = ("key bytea", "owner bytea", *_TIMES, "acquired_at timestamptz")


@dataclass(frozen=True, slots=True)
class Routine:
    """One function: its name (unqualified), argument types, result columns, and the
    catalogue statement its body runs (``$n`` are its arguments)."""

    name: str
    arguments: tuple[str, ...]
    columns: tuple[str, ...]
    statement: str

    def signature(self, schema: str | None) -> str:
        """``name(types)`` as ``DROP FUNCTION`` and ``to_regprocedure`` take it."""
        return f"{_qualified(self.name, schema)}({', '.join(self.arguments)})"


def _qualified(name: str, schema: str | None) -> str:
    quoted = quote_ident(name)
    return quoted if schema is None else f"{quote_ident(schema)}.{quoted}"


def _call(name: str, schema: str | None, args: list[str]) -> str:
    return f"SELECT * FROM {_qualified(name, schema)}({', '.join(args)})"


def _params(first: int, count: int) -> list[str]:
    return [f"${n}" for n in range(first + 1, first + count + 1)]


@cache
def routines(
    table_name: str, schema: str | None = None, home: str | None = None
) -> tuple[Routine, ...]:
    """The functions migration 0006 creates for ``schema.table_name`` (``home``: the schema
    the table was found in when ``schema`` is None, as `build_catalogue` takes it)."""
    return _routines(build_catalogue(table_name, schema, home), table_name)


def _batches(cat: Catalogue) -> Batches:
    if cat.batches is None:  # never for PostgreSQL's catalogue
        raise ValueError("a PostgreSQL catalogue has batches")
    return cat.batches


def _routines(cat: Catalogue, table: str) -> tuple[Routine, ...]:
    found: list[Routine] = []
    for attr, arguments, columns in _ONE_ROW:
        statement = getattr(cat, attr)
        if not isinstance(statement, Statement):
            raise TypeError(f"not a statement: {attr}")
        found.append(Routine(f"{table}_{attr}", arguments, columns, statement.sql))
    batches = _batches(cat)
    for kind, (name, arrays) in enumerate(_BATCH_KINDS):
        sql = batches.writes((kind,)).sql
        found.append(Routine(f"{table}_batch_{name}", (*arrays, "integer"), _WRITE_ROW, sql))
    found.append(Routine(f"{table}_batch_read", ("bytea[]",), _READ_ROW, batches.read.sql))
    return tuple(found)


_CALLS: dict[str, str] = {}


@cache
def register(table_name: str, schema: str | None = None, home: str | None = None) -> None:
    """Record the function call that replaces each hot statement of ``schema.table_name``
    (or of the table found in ``home``). Calls always name the schema, so that no session's
    search path can make one miss (and fall back) or reach another function: a catalogue
    whose table has no schema yet registers nothing (its texts are never sent)."""
    where = schema if schema is not None else home
    if where is None:
        return
    cat = build_catalogue(table_name, schema, home)
    for routine in routines(table_name, schema, home):
        _CALLS[routine.statement] = _call(routine.name, where, _params(0, len(routine.arguments)))
    widths = [len(arrays) for _, arrays in _BATCH_KINDS]
    for mask in range(1, 1 << len(widths)):
        kinds = tuple(k for k in range(len(widths)) if mask >> k & 1)
        if len(kinds) == 1:
            continue  # a one-kind batch is its function's own statement (above)
        wait = f"${sum(widths[k] for k in kinds) + 1}"
        calls, before = [], 0
        for kind in kinds:
            name = f"{table_name}_batch_{_BATCH_KINDS[kind][0]}"
            calls.append(_call(name, where, [*_params(before, widths[kind]), wait]))
            before += widths[kind]
        _CALLS[_batches(cat).writes(kinds).sql] = "\nUNION ALL ".join(calls)


def server_calls(table_name: str, schema: str) -> dict[str, ServerCall]:
    """The call of each statement of ``schema.table_name`` that has a function (by text)."""
    register(table_name, schema)
    found = {}
    for routine in routines(table_name, schema):
        call = call_for(routine.statement)
        if call is not None:
            found[routine.statement] = ServerCall(routine.name, routine.arguments, call)
    return found


def call_for(sql: str) -> str | None:
    """The function call that replaces statement ``sql``, or None (sent as it is)."""
    return _CALLS.get(sql)
