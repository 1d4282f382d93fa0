"""On Citus: coalesced batches and ``renew_many`` run on one worker, in one delegated call.

Only a PostgreSQL database where the ``citus`` extension is installed changes (elsewhere:
nothing; like 0008, the check is a query). 0008's batch functions run on the coordinator, which
sends each key's statements to its worker one by one inside one transaction over every worker:
a thousand renewals are two thousand coordinator-to-worker round trips and a commit across all
workers (the contract's ``renew_many`` of 1000 keys ran past its timeout).

This revision adds three functions whose first argument, an *anchor* key, is their
distribution argument (``create_distributed_function(..., '$1', colocate_with => <table>)``),
their arrays passed as text (`_signature`): the coordinator delegates the whole call to the
worker holding the anchor's shard. The provider sends each batch as one call per worker (the
keys whose shards that worker holds, the anchor one of them), so every statement inside runs on
a local shard: one round trip from the coordinator, a one-node commit. A key whose shard moved
since the provider read the placements is still served correctly (the worker reaches its shard
over the network, as a delegated call may); only slower, until the provider reads them again.

- ``<table>_worker_writes(anchor, the four kinds' arrays in `WRITE_KINDS` order, lock wait)``:
  each kind's calls through 0008's one-key functions, rows as 0006's write batches (kind, key,
  ...), no row lock awaited longer than the lock wait (ms: ``lock_timeout`` for its
  transaction, as 0006's batches), so two batches in flight never wait for each other until a
  deadlock is detected;
- ``<table>_worker_read(anchor, keys)``: the live rows of ``keys`` (0006's read batch);
- ``<table>_worker_renew_many(anchor, keys, owners, ttl_ms)``: 0008's ``renew_many``.

Downgrade (Citus only) drops them.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

from sql_lease.migrate import migration_names

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WRITE_ROW = (
    "kind integer",
    "key bytea",
    "acquired boolean",
    "fence bigint",
    "expires_at timestamptz",
    "holder bytea",
    "notified boolean",
)
_B, _I = "bytea[]", "bigint[]"
_TIMES = "r.fence, r.expires_at"
#: Each write kind: 0008's one-key function, its arrays, the row of one call.
_KINDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("acquire", (_B, _B, _I), f"r.acquired, {_TIMES}, r.holder, NULL::boolean"),
    ("renew", (_B, _B, _I), f"NULL::boolean, {_TIMES}, NULL::bytea, NULL::boolean"),
    ("release", (_B, _B), f"NULL::boolean, {_TIMES}, NULL::bytea, r.notified"),
    ("transfer", (_B, _B, _B, _I), f"NULL::boolean, {_TIMES}, NULL::bytea, r.notified"),
)


def _arguments() -> dict[str, tuple[str, ...]]:
    """Each function's arguments as their array types (each goes as its text: `_signature`)."""
    writes = tuple(t for _, arrays, _ in _KINDS for t in arrays)
    return {
        "worker_writes": ("bytea", *writes, "integer"),
        "worker_read": ("bytea", "bytea[]"),
        "worker_renew_many": ("bytea", "bytea[]", "bytea[]", "bigint"),
    }


def _signature(arguments: Sequence[str]) -> str:
    """The declared arguments: an array as ``text`` (Citus hands a delegated call's arguments
    to the worker as literals, and writes an array cast from text as a cast from ``cstring``,
    which the worker refuses; a text literal goes as it is), cast in the body (`_declare`)."""
    return ", ".join("text" if t.endswith("[]") else t for t in arguments)


def _declare(arguments: Sequence[str]) -> str:
    """``a<n>``: argument ``$n`` as the array it is the text of."""
    return "".join(
        f"  a{n} {t} := ${n}::{t};\n" for n, t in enumerate(arguments, 1) if t.endswith("[]")
    )


def _citus() -> bool:
    context = op.get_context()
    if context.dialect.name != "postgresql" or context.as_sql:
        return False
    found = op.get_bind().exec_driver_sql(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')"
    )
    return bool(found.scalar())


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _home(table: str, schema: str | None) -> str:
    """The table's schema, as 0006 finds it (given, else the first of the search path)."""
    path = Path(__file__).with_name("0006_qualified_names.py")
    spec = importlib.util.spec_from_file_location("sql_lease_revision_0006_for_0010", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    v6 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(v6)
    home = op.get_bind().exec_driver_sql(f"SELECT {v6._home(table, schema)}").scalar()
    if not isinstance(home, str):
        raise RuntimeError(f"sql_lease: no table {table}: run the earlier revisions first")
    return home


def _function(name: str, arguments: str, columns: Sequence[str], body: str) -> str:
    return (
        f"CREATE OR REPLACE FUNCTION {name}({arguments})"
        f" RETURNS TABLE({', '.join(columns)}) LANGUAGE plpgsql VOLATILE SECURITY INVOKER"
        f" SET search_path = pg_catalog, pg_temp AS $fn$\n#variable_conflict use_column\n"
        f"{body}\n$fn$"
    )


def _writes_body(fn: dict[str, str]) -> str:
    loops = []
    first = 2  # $1 is the anchor
    for kind, (suffix, arrays, row) in enumerate(_KINDS):
        params = [f"a{first + n}" for n in range(len(arrays))]
        call = f"{fn[suffix]}({', '.join(f'{p}[i]' for p in params)})"
        loops.append(
            f"  FOR i IN 1 .. coalesce(array_length({params[0]}, 1), 0) LOOP\n"
            f"    RETURN QUERY SELECT {kind}, {params[0]}[i], {row} FROM {call} AS r;\n"
            "  END LOOP;"
        )
        first += len(arrays)
    # The batch's lock wait (ms; 0006's batches take it as their last argument): a batch
    # waits that long at most for a row lock, then fails whole and its calls run alone.
    wait = f"${first}"
    head = f"  PERFORM pg_catalog.set_config('lock_timeout', {wait}::text, true);"
    return f"  IF {wait} IS NOT NULL THEN\n{head}\n  END IF;\n" + "\n".join(loops)


def upgrade() -> None:
    if not _citus():
        return
    names = migration_names()
    table = names.table
    home = _home(table, names.schema)
    t = f"{_quote(home)}.{_quote(table)}"

    def fn(suffix: str) -> str:
        return f"{_quote(home)}.{_quote(f'{table}_{suffix}')}"

    live = "l.expires_at > pg_catalog.clock_timestamp()"
    bodies = {
        "worker_writes": (_WRITE_ROW, _writes_body({s: fn(s) for s, _, _ in _KINDS})),
        "worker_read": (
            (
                "key bytea",
                "owner bytea",
                "fence bigint",
                "expires_at timestamptz",
                "acquired_at timestamptz",
            ),
            "  RETURN QUERY SELECT l.key, l.owner, l.fence, l.expires_at, l.acquired_at"
            f" FROM {t} AS l\n  WHERE l.key = ANY(a2) AND {live};",
        ),
        "worker_renew_many": (
            ("key bytea", "owner bytea", "fence bigint", "expires_at timestamptz"),
            "  FOR i IN 1 .. coalesce(array_length(a2, 1), 0) LOOP\n"
            "    RETURN QUERY SELECT a2[i], a3[i], r.fence, r.expires_at"
            f" FROM {fn('renew')}(a2[i], a3[i], $4) AS r;\n  END LOOP;",
        ),
    }
    for suffix, arguments in _arguments().items():
        columns, body = bodies[suffix]
        body = f"DECLARE\n{_declare(arguments)}BEGIN\n{body}\nEND"
        declared = _signature(arguments)
        op.get_bind().exec_driver_sql(_function(fn(suffix), declared, columns, body))
        signature = f"{fn(suffix)}({declared})"
        op.get_bind().exec_driver_sql(f"GRANT EXECUTE ON FUNCTION {signature} TO PUBLIC")
        op.get_bind().exec_driver_sql(
            f"SELECT create_distributed_function({_literal(signature)}, '$1',"
            f" colocate_with := {_literal(t)})"
        )


def downgrade() -> None:
    if not _citus():
        return
    names = migration_names()
    table = names.table
    home = _home(table, names.schema)
    for suffix, arguments in _arguments().items():
        name = f"{_quote(home)}.{_quote(f'{table}_{suffix}')}"
        op.get_bind().exec_driver_sql(f"DROP FUNCTION IF EXISTS {name}({_signature(arguments)})")
