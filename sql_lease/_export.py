"""The PostgreSQL statement catalogue as JSON, for clients in other languages.

`export_catalogue` returns a JSON-ready dict: for each statement its SQL text with placeholders
for the names that depend on the table, its parameters in order with their PostgreSQL types, and
its result columns. A client renders a statement by replacing the placeholders:

- ``{table}``: the quoted, schema-qualified table (``"s"."leases"``): with no schema configured,
  the schema that ``find_schema`` (run once, on the first connection) answers, as the Python
  provider does, never the bare name (a temporary table or a session's ``search_path`` would
  otherwise decide which table a statement touches);
- ``{fence_sequence}``: the quoted, optionally schema-qualified sequence of ``naming``;
- ``{channel}``: the LISTEN/NOTIFY channel of ``naming`` (it appears inside a string literal).

``functions`` gives, for the statements pooler mode sends as calls of the table's plpgsql
functions (the catalogue's ``server_calls``), the function's name (``{table_name}``: the table's
unquoted name) and its call, ``{function}`` standing for the quoted function name qualified by
the table's schema. The call is the very text pooler mode sends, so the two languages cannot
drift.

The placeholders are found by building the real catalogue for sentinel names and replacing
them, so the rendered text is the very text the Python provider sends (a test checks that).
The function is pure and deterministic: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any, Final

from ._core.validate import MAX_IDENTIFIER_LEN, MAX_NAME_BYTES, MAX_TTL_MS
from .backends import backend_named
from .catalogue import Statement
from .schema import DEFAULT_TABLE

__all__ = ["FORMAT", "export_catalogue"]

#: Bumped when the shape of the export changes (not when a statement's text does).
FORMAT: Final = 1

_TABLE: Final = "sqlleasexporttable"
_SCHEMA: Final = "sqlleaseexportschema"
#: The backend whose catalogue is exported (through the registry: only it knows its SQL).
_POSTGRES: Final = backend_named("postgres")

Column = tuple[str, str]

# name -> (parameters, result columns, what the rows mean). Types are PostgreSQL's names as
# a prepared statement describes them; the integration test checks them against the server.
_SPEC: Final[dict[str, tuple[list[Column], list[Column], str]]] = {
    "acquire": (
        [("key", "bytea"), ("owner", "bytea"), ("ttl_ms", "bigint")],
        [
            ("acquired", "boolean"),
            ("fence", "bigint"),
            ("expires_at", "timestamptz"),
            ("holder", "bytea"),
        ],
        "A row with acquired=true: won (fence, expires_at). Else a row with acquired=false "
        "names the live holder. No row, or only a row whose holder is the caller: a concurrent "
        "writer committed after the snapshot; run the statement again.",
    ),
    "get_owner": ([("key", "bytea")], [("owner", "bytea")], "The live owner, or no row."),
    "get_lease": (
        [("key", "bytea")],
        [
            ("owner", "bytea"),
            ("fence", "bigint"),
            ("expires_at", "timestamptz"),
            ("acquired_at", "timestamptz"),
        ],
        "The live lease, or no row.",
    ),
    "holder": (
        [("key", "bytea")],
        [("owner", "bytea"), ("fence", "bigint"), ("expires_at", "timestamptz")],
        "The live holder, or no row (the cheap read of a contended key).",
    ),
    "release": (
        [("key", "bytea"), ("owner", "bytea")],
        [("fence", "bigint"), ("expires_at", "timestamptz"), ("notified", "boolean")],
        "A row when owner's live lease ended (expires_at is when), else no row.",
    ),
    "renew": (
        [("key", "bytea"), ("owner", "bytea"), ("ttl_ms", "bigint")],
        [("fence", "bigint"), ("expires_at", "timestamptz")],
        "A row when renewed, no row when the lease was lost.",
    ),
    "transfer": (
        [("key", "bytea"), ("from_owner", "bytea"), ("to_owner", "bytea"), ("ttl_ms", "bigint")],
        [("fence", "bigint"), ("expires_at", "timestamptz"), ("notified", "boolean")],
        "A row with the new owner's fence when transferred, no row when from_owner did not "
        "hold the lease.",
    ),
    "renew_many": (
        [("keys", "bytea[]"), ("owners", "bytea[]"), ("ttl_ms", "bigint")],
        [("key", "bytea"), ("owner", "bytea"), ("fence", "bigint"), ("expires_at", "timestamptz")],
        "keys[i] pairs with owners[i]; one row per renewed pair (send each pair once).",
    ),
    "force_release": (
        [("key", "bytea")],
        [
            ("owner", "bytea"),
            ("fence", "bigint"),
            ("expires_at", "timestamptz"),
            ("notified", "boolean"),
        ],
        "A row when a live lease was ended, else no row.",
    ),
    "list_live": (
        [("from_key", "bytea"), ("below_key", "bytea"), ("limit", "bigint")],
        [
            ("key", "bytea"),
            ("owner", "bytea"),
            ("fence", "bigint"),
            ("expires_at", "timestamptz"),
            ("acquired_at", "timestamptz"),
            ("now", "timestamptz"),
        ],
        "Live leases with from_key <= key < below_key (NULL: no bound) in key order.",
    ),
    "purge_batch": (
        [("min_age_ms", "bigint"), ("batch", "bigint")],
        [("?column?", "integer")],
        "Deletes up to batch rows expired for at least min_age_ms; one row per deletion.",
    ),
    "want": (
        [("key", "bytea"), ("wait_ms", "bigint")],
        [("owner", "bytea"), ("fence", "bigint"), ("expires_at", "timestamptz")],
        "Marks the key wanted for wait_ms and returns its live holder, or no row.",
    ),
    "now": ([], [("clock_timestamp", "timestamptz")], "The database clock."),
}


def _template(sql: str, table: str, sequence: str, channel: str) -> str:
    if "{" in sql or "}" in sql:
        raise ValueError("a statement contains a brace: it cannot be templated")
    text = sql.replace(sequence, "{fence_sequence}").replace(table, "{table}")
    text = text.replace(channel, "{channel}")
    if _TABLE in text or _SCHEMA in text:
        raise ValueError("a statement names the table in a form the export does not template")
    return text


def _functions(statements: dict[str, Statement[Any]]) -> dict[str, object]:
    """The pooler-mode call of each statement that has a server function (see the module)."""
    calls = _POSTGRES.catalogue(_TABLE, _SCHEMA).server_calls
    out: dict[str, object] = {}
    for name, statement in statements.items():
        found = calls.get(statement.sql)
        if found is None:
            continue
        if len(found.functions) != 1:
            raise ValueError(f"the {name} statement is not one function's call")
        function = found.functions[0]
        qualified = f'"{_SCHEMA}"."{function}"'
        if qualified not in found.call or not function.startswith(_TABLE):
            raise ValueError(
                f"the {name} call names its function in a form the export cannot template"
            )
        out[name] = {
            "name": "{table_name}" + function.removeprefix(_TABLE),
            "arguments": list(found.arguments),
            "call": found.call.replace(qualified, "{function}"),
        }
    return out


def export_catalogue() -> dict[str, object]:
    """The PostgreSQL statement catalogue as JSON-ready data (see the module docstring)."""
    sql = _POSTGRES.catalogue(_TABLE, _SCHEMA)
    table = f'"{_SCHEMA}"."{_TABLE}"'
    sequence = f'"{_SCHEMA}"."{_TABLE}_fence_seq"'
    if sql.table != table or sql.channel != f"sql_lease:{_SCHEMA}.{_TABLE}":
        raise ValueError("the catalogue's naming changed: update the export")
    renew_many = sql.renew_many(1)
    if renew_many != sql.renew_many(2):
        raise ValueError("renew_many depends on the batch size: it cannot be exported as one text")
    catalogue: dict[str, Statement[Any]] = {
        "acquire": sql.acquire,
        "get_owner": sql.get_owner,
        "get_lease": sql.get_lease,
        "holder": sql.holder,
        "release": sql.release,
        "renew": sql.renew,
        "transfer": sql.transfer,
        "renew_many": renew_many,
        "force_release": sql.force_release,
        "list_live": sql.list_live,
        "purge_batch": sql.purge_batch,
        "want": sql.want,
        "now": sql.now,
    }
    statements: dict[str, object] = {}
    for name, (params, columns, rows) in _SPEC.items():
        statement = catalogue[name]
        if statement.params != tuple(n for n, _ in params) or statement.columns != tuple(
            n for n, _ in columns
        ):
            raise ValueError(f"the {name} statement's parameters or columns changed: update _SPEC")
        statements[name] = {
            "sql": _template(statement.sql, table, sequence, sql.channel),
            "params": [{"name": n, "type": t} for n, t in params],
            "columns": [{"name": n, "type": t} for n, t in columns],
            "rows": rows,
        }
    return {
        "format": FORMAT,
        "dialect": "postgresql",
        "placeholders": {
            "table": 'quoted table, schema-qualified: "s"."t" (no schema set: find_schema\'s)',
            "fence_sequence": "quoted sequence {table_name}_fence_seq, qualified like the table",
            "channel": "the notify channel (inside a string literal)",
            "function": "in functions: the quoted function name, qualified by the table's schema",
        },
        "naming": {
            "default_table": DEFAULT_TABLE,
            "identifier_pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
            "identifier_max_length": MAX_IDENTIFIER_LEN,
            "fence_sequence": "{table_name}_fence_seq",
            "channel": "sql_lease:{table_name}, or sql_lease:{schema}.{table_name} with a schema",
            "channel_max_bytes": 63,
            "channel_when_longer": "sql_lease:{sha1 hex of the long channel name}",
        },
        "limits": {"max_name_bytes": MAX_NAME_BYTES, "max_ttl_ms": MAX_TTL_MS, "min_ttl_ms": 1},
        "encoding": "keys and owners are the UTF-8 bytes of the string (bytea)",
        "statements": statements,
        "find_schema": {
            "sql": _POSTGRES.home_sql,
            "params": [{"name": "table_name", "type": "text"}],
            "columns": [{"name": "home", "type": "text"}],
            "rows": "The schema to qualify {table} and {fence_sequence} with when none is set:"
            " the first of the session's default search_path holding the table (never a"
            " temporary schema). No row: the table is missing (run the migrations).",
        },
        "functions": _functions(catalogue),
    }
