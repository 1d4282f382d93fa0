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

``counting`` carries what a client needs to read and write counting leases, metadata and
all-or-none acquires (`sql_lease._core.counting`): the reserved owner of a counting row, the
shape of its ``holders`` grants, the bounds (also in ``limits``); the statements are those of
``Catalogue.counting`` (``count_*``, ``acquire_all``, ``ensure_rows``, ``release_all``: the key
arrays of the last three are one ``bytea[]`` parameter whatever the number of keys).

The placeholders are found by building the real catalogue for sentinel names and replacing
them, so the rendered text is the very text the Python provider sends (a test checks that).
A statement may hold other braces (a ``'{}'::jsonb`` literal), never a placeholder's spelling.
The function is pure and deterministic: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ._core.counting import MAX_KEYS, MAX_LIMIT, MAX_METADATA_BYTES, RESERVED_OWNER
from ._core.validate import MAX_IDENTIFIER_LEN, MAX_NAME_BYTES, MAX_TTL_MS
from .backends import backend_named
from .catalogue import Catalogue, Statement
from .schema import DEFAULT_TABLE

__all__ = ["FORMAT", "export_catalogue", "exported_statements"]

#: Bumped when the shape of the export changes (not when a statement's text does).
FORMAT: Final = 1

_TABLE: Final = "sqlleasexporttable"
_SCHEMA: Final = "sqlleaseexportschema"
#: The backend whose catalogue is exported (through the registry: only it knows its SQL).
_POSTGRES: Final = backend_named("postgres")

Column = tuple[str, str]
#: What a client substitutes; no statement text may contain one of these spellings itself.
PLACEHOLDERS: Final = ("{table}", "{fence_sequence}", "{channel}", "{function}", "{table_name}")

_COUNT_ROW: Final = [
    ("owner", "bytea"),
    ("slot_limit", "integer"),
    ("holders", "text"),
    ("fence", "bigint"),
    ("expires_at", "timestamptz"),
]

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
    "count_acquire": (
        [
            ("key", "bytea"),
            ("owner", "bytea"),
            ("ttl_ms", "bigint"),
            ("limit", "integer"),
            ("metadata", "bytea"),
            ("metadata_is_str", "boolean"),
        ],
        _COUNT_ROW,
        "One row, the key's row after the call: owner is the reserved owner when the key is a "
        "counting row (holders: its live grants, the caller's among them when it got or kept a "
        "slot), else a live plain lease's owner (left as it was). The caller got a slot when "
        "its grant is in holders; holders from a slot_limit other than limit: limits differ.",
    ),
    "count_holders": (
        [("key", "bytea")],
        _COUNT_ROW,
        "The live row (holders: its live grants; a plain lease as one grant), or no row.",
    ),
    "count_release": (
        [("key", "bytea"), ("owner", "bytea")],
        [("released_at", "timestamptz"), ("fence", "bigint"), ("notified", "boolean")],
        "A row when owner's grant (live or expired) of a counting row was removed (released_at: "
        "when; fence: the grant's), else no row.",
    ),
    "count_renew": (
        [("key", "bytea"), ("owner", "bytea"), ("ttl_ms", "bigint")],
        _COUNT_ROW,
        "A row when owner's live grant was renewed (its grant in holders), else no row.",
    ),
    "count_transfer": (
        [
            ("key", "bytea"),
            ("from_owner", "bytea"),
            ("to_owner", "bytea"),
            ("ttl_ms", "bigint"),
            ("metadata", "bytea"),
            ("metadata_is_str", "boolean"),
        ],
        _COUNT_ROW,
        "A row when from_owner's live grant (or live plain lease) went to to_owner (its grant "
        "in holders), else no row.",
    ),
    "acquire_all": (
        [("keys", "bytea[]"), ("owner", "bytea"), ("ttl_ms", "bigint")],
        [
            ("key", "bytea"),
            ("acquired", "boolean"),
            ("fence", "bigint"),
            ("expires_at", "timestamptz"),
            ("holder", "bytea"),
        ],
        "keys sorted and distinct. Rows with acquired=true for every key: all taken. A row "
        "with acquired=false: nothing changed, its key is the first blocking one, holder its "
        "owner. Rows with acquired NULL (keys without a row): nothing changed; run ensure_rows "
        "for the keys, then this statement again.",
    ),
    "ensure_rows": (
        [("keys", "bytea[]")],
        [],
        "Inserts an expired placeholder row for each key that has none (no rows returned).",
    ),
    "release_all": (
        [("keys", "bytea[]"), ("owner", "bytea")],
        [("key", "bytea"), ("notified", "boolean")],
        "One row per live plain lease of owner among keys that was released.",
    ),
}


def _template(sql: str, table: str, sequence: str, channel: str) -> str:
    if any(p in sql for p in PLACEHOLDERS):
        raise ValueError("a statement contains a placeholder's spelling: it cannot be templated")
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


def _one_text(name: str, of_size: Callable[[int], Statement[Any]]) -> Statement[Any]:
    """The statement of a batch-sized family, which must not depend on the size."""
    statement = of_size(1)
    if statement != of_size(2):
        raise ValueError(f"{name} depends on the batch size: it cannot be exported as one text")
    return statement


def exported_statements(sql: Catalogue) -> dict[str, Statement[Any]]:
    """The statements of ``sql`` the export carries, by their exported names."""
    counting = sql.counting
    if counting is None or counting.ensure is None:
        raise ValueError("the PostgreSQL catalogue has no counting statements: update the export")
    return {
        "acquire": sql.acquire,
        "get_owner": sql.get_owner,
        "get_lease": sql.get_lease,
        "holder": sql.holder,
        "release": sql.release,
        "renew": sql.renew,
        "transfer": sql.transfer,
        "renew_many": _one_text("renew_many", sql.renew_many),
        "force_release": sql.force_release,
        "list_live": sql.list_live,
        "purge_batch": sql.purge_batch,
        "want": sql.want,
        "now": sql.now,
        "count_acquire": counting.acquire,
        "count_holders": counting.holders,
        "count_release": counting.release,
        "count_renew": counting.renew,
        "count_transfer": counting.transfer,
        "acquire_all": _one_text("acquire_all", counting.acquire_all),
        "ensure_rows": _one_text("ensure_rows", counting.ensure),
        "release_all": _one_text("release_all", counting.release_all),
    }


def export_catalogue() -> dict[str, object]:
    """The PostgreSQL statement catalogue as JSON-ready data (see the module docstring)."""
    sql = _POSTGRES.catalogue(_TABLE, _SCHEMA)
    table = f'"{_SCHEMA}"."{_TABLE}"'
    sequence = f'"{_SCHEMA}"."{_TABLE}_fence_seq"'
    if sql.table != table or sql.channel != f"sql_lease:{_SCHEMA}.{_TABLE}":
        raise ValueError("the catalogue's naming changed: update the export")
    if sql.counting is not None and sql.counting.keys_args([b"a", b"b"]) != ([b"a", b"b"],):
        raise ValueError("the key arrays are no longer one parameter: update the export")
    catalogue = exported_statements(sql)
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
        "limits": {
            "max_name_bytes": MAX_NAME_BYTES,
            "max_ttl_ms": MAX_TTL_MS,
            "min_ttl_ms": 1,
            "max_limit": MAX_LIMIT,
            "max_metadata_bytes": MAX_METADATA_BYTES,
            "max_keys": MAX_KEYS,
        },
        "counting": {
            "reserved_owner": RESERVED_OWNER.hex(),
            "holders": "a JSON array of the live grants, oldest fence first, each"
            ' {"o": owner in hex, "f": fence, "e": expiry, "a": grant time, "m": metadata in hex'
            ' or null, "s": true when the metadata was a str}, times in microseconds since the'
            " epoch; a live plain lease reads as one grant",
            "rows": "a key holding a counting lease or a lease with metadata is one row whose"
            " owner is reserved_owner (never a UTF-8 name): a plain statement never matches it"
            " as its owner; plain statements that meet it answer reserved_owner as the holder",
        },
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
