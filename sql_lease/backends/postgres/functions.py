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
created: the drift tests compare), and `server_calls` gives, for a table's catalogue, the call
that replaces each statement text: `build_catalogue` keeps them in the catalogue it builds
(`Catalogue.server_calls`), where pooler mode (`pooler_text`) and the TypeScript export read
them. A write batch of several
kinds becomes the ``UNION ALL`` of its kinds' one-kind batch functions (the coalescer never
puts two writes of one key into a batch, so the kinds' rows never interact; rows are matched
to their callers by kind and key, not by order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ...catalogue import Batches, Catalogue, ServerCall, Statement
from .. import quote_ident

__all__ = ["Routine", "routines", "server_calls"]

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


def routines(cat: Catalogue, table_name: str) -> tuple[Routine, ...]:
    """The functions migration 0006 creates for the table of ``cat`` (PostgreSQL's catalogue
    of ``table_name``, as `build_catalogue` makes it for the table's schema)."""
    found: list[Routine] = []
    for attr, arguments, columns in _ONE_ROW:
        statement = getattr(cat, attr)
        if not isinstance(statement, Statement):
            raise TypeError(f"not a statement: {attr}")
        found.append(Routine(f"{table_name}_{attr}", arguments, columns, statement.sql))
    batches = _batches(cat)
    for kind, (name, arrays) in enumerate(_BATCH_KINDS):
        sql = batches.writes((kind,)).sql
        found.append(Routine(f"{table_name}_batch_{name}", (*arrays, "integer"), _WRITE_ROW, sql))
    found.append(Routine(f"{table_name}_batch_read", ("bytea[]",), _READ_ROW, batches.read.sql))
    return tuple(found)


def _batches(cat: Catalogue) -> Batches:
    if cat.batches is None:  # never for PostgreSQL's catalogue
        raise ValueError("a PostgreSQL catalogue has batches")
    return cat.batches


def server_calls(cat: Catalogue, table_name: str, where: str) -> dict[str, ServerCall]:
    """The call that replaces each hot statement of ``cat`` (PostgreSQL's catalogue of
    ``table_name`` in schema ``where``), by statement text: one function's for a one-row
    statement, a one-kind batch and the read batch; the ``UNION ALL`` of its kinds' functions
    for a write batch of several kinds. Calls always name the schema, so that no session's
    search path can make one miss (and fall back) or reach another function."""
    found: dict[str, ServerCall] = {}
    for routine in routines(cat, table_name):
        call = _call(routine.name, where, _params(0, len(routine.arguments)))
        found[routine.statement] = ServerCall((routine.name,), routine.arguments, call)
    widths = [len(arrays) for _, arrays in _BATCH_KINDS]
    for mask in range(1, 1 << len(widths)):
        kinds = tuple(k for k in range(len(widths)) if mask >> k & 1)
        if len(kinds) == 1:
            continue  # a one-kind batch is its function's own statement (above)
        wait = f"${sum(widths[k] for k in kinds) + 1}"
        names: list[str] = []
        arguments: list[str] = []
        calls: list[str] = []
        before = 0
        for kind in kinds:
            name, arrays = _BATCH_KINDS[kind]
            names.append(f"{table_name}_batch_{name}")
            arguments.extend(arrays)
            calls.append(_call(names[-1], where, [*_params(before, widths[kind]), wait]))
            before += widths[kind]
        text = "\nUNION ALL ".join(calls)
        found[_batches(cat).writes(kinds).sql] = ServerCall(
            tuple(names), (*arguments, "integer"), text
        )
    return found
