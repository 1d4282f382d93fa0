"""Pooler mode: each hot statement also as a plpgsql function, planned once per server session.

PostgreSQL only (on SQLite this revision changes nothing). Behind a transaction pooler the
library may not use named prepared statements (a server connection moves between clients), so
the server parsed and planned every statement on every call. This revision creates, per lease
table, one plpgsql function per hot statement (acquire, renew, release, transfer, the three
reads, and the one-kind write batches and the read batch of coalesced calls), each
``RETURN QUERY`` of that statement's text as the library sends it: plpgsql caches the plan per
server session, which lives on behind the pooler. In pooler mode the library sends
``SELECT * FROM "<table>_acquire"($1, $2, $3)`` instead (`sql_lease.backends.postgres.functions`);
a call names no protocol-level object, so it cannot run as another statement anywhere.

The functions are ``SECURITY INVOKER`` (a caller needs exactly the table and sequence
privileges the plain statements need) with ``EXECUTE`` granted to ``PUBLIC`` explicitly (in
case default privileges revoke it), and ``SET search_path`` to the table's schema and
``pg_temp`` last, so neither a caller's search path nor a temporary table can change what they
touch. They live in the table's schema (for an unqualified table, the schema it resolved to at
migration time). The statement texts below are frozen copies: a later change to a statement
needs a revision that replaces its function (a drift test compares them with the library's).
The library falls back to the plain statements when the functions are missing (before this
revision), so the upgrade order does not matter. Downgrade drops the functions.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

# ruff: noqa: E501, W291  (frozen SQL texts, exactly as the library sends them: "WITH " ends a line)

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import sqlalchemy as sa
from alembic import op

from sql_lease.migrate import migration_names

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


class Function(NamedTuple):
    """One function: its name after ``<table>_``, argument types, result columns, body."""

    suffix: str
    arguments: tuple[str, ...]
    columns: tuple[str, ...]
    statement: str  # @table@, @sequence@ and @channel@ stand for the table's names


#: The row of every one-kind write batch function (its kind, its key, then the write columns).
_WRITE_ROW = (
    "kind integer",
    "key bytea",
    "acquired boolean",
    "fence bigint",
    "expires_at timestamptz",
    "holder bytea",
    "notified boolean",
)

FUNCTIONS: tuple[Function, ...] = (
    Function(
        "acquire",
        ("bytea", "bytea", "bigint"),
        ("acquired boolean", "fence bigint", "expires_at timestamptz", "holder bytea"),
        """\
WITH cur AS MATERIALIZED (
    SELECT owner, fence, expires_at, expires_at > clock_timestamp() AS live
    FROM @table@ WHERE key = $1
), ins AS (
    INSERT INTO @table@ AS l (key, owner, fence, expires_at, acquired_at)
    SELECT $1, $2, nextval('@sequence@'), clock_timestamp() + $3::bigint * interval '1 millisecond', clock_timestamp()
    WHERE NOT EXISTS (SELECT FROM cur)
    ON CONFLICT (key) DO NOTHING
    RETURNING l.fence, l.expires_at
), upd AS (
    UPDATE @table@ AS l SET
        owner = $2,
        fence = CASE WHEN l.owner = $2 AND l.expires_at > clock_timestamp()
                     THEN l.fence ELSE nextval('@sequence@') END,
        acquired_at = CASE WHEN l.owner = $2 AND l.expires_at > clock_timestamp()
                           THEN l.acquired_at ELSE clock_timestamp() END,
        expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
    WHERE (SELECT owner = $2 OR NOT live FROM cur)
      AND l.key = $1 AND (l.owner = $2 OR l.expires_at <= clock_timestamp())
    RETURNING l.fence, l.expires_at
)
SELECT true AS acquired, fence, expires_at, NULL::bytea AS holder FROM ins
UNION ALL SELECT true, fence, expires_at, NULL FROM upd
UNION ALL SELECT false, fence, expires_at, owner FROM cur WHERE live""",
    ),
    Function(
        "renew",
        ("bytea", "bytea", "bigint"),
        ("fence bigint", "expires_at timestamptz"),
        """\
UPDATE @table@ SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond' WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() RETURNING fence, expires_at""",
    ),
    Function(
        "release",
        ("bytea", "bytea"),
        ("fence bigint", "expires_at timestamptz", "notified boolean"),
        """\
UPDATE @table@ SET expires_at = clock_timestamp() WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() RETURNING fence, expires_at, (CASE WHEN wanted_until > clock_timestamp() THEN pg_notify('@channel@', encode(key, 'hex'))::text END) IS NOT NULL AS notified""",
    ),
    Function(
        "transfer",
        ("bytea", "bytea", "bytea", "bigint"),
        ("fence bigint", "expires_at timestamptz", "notified boolean"),
        """\
UPDATE @table@ SET
    owner = $3,
    fence = CASE WHEN owner = $3 THEN fence ELSE nextval('@sequence@') END,
    acquired_at = CASE WHEN owner = $3 THEN acquired_at ELSE clock_timestamp() END,
    expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond'
WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() RETURNING fence, expires_at, (CASE WHEN wanted_until > clock_timestamp() THEN pg_notify('@channel@', encode(key, 'hex'))::text END) IS NOT NULL AS notified""",
    ),
    Function(
        "get_owner",
        ("bytea",),
        ("owner bytea",),
        """\
SELECT owner FROM @table@ WHERE key = $1 AND expires_at > clock_timestamp()""",
    ),
    Function(
        "get_lease",
        ("bytea",),
        ("owner bytea", "fence bigint", "expires_at timestamptz", "acquired_at timestamptz"),
        """\
SELECT owner, fence, expires_at, acquired_at FROM @table@ WHERE key = $1 AND expires_at > clock_timestamp()""",
    ),
    Function(
        "holder",
        ("bytea",),
        ("owner bytea", "fence bigint", "expires_at timestamptz"),
        """\
SELECT owner, fence, expires_at FROM @table@ WHERE key = $1 AND expires_at > clock_timestamp()""",
    ),
    Function(
        "batch_acquire",
        ("bytea[]", "bytea[]", "bigint[]", "integer"),
        _WRITE_ROW,
        """\
WITH 
a_i AS MATERIALIZED (
    SELECT * FROM (SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::bigint[]) AS u(key, owner, ttl) WHERE (SELECT set_config('lock_timeout', LEAST($4::int, NULLIF(extract(epoch FROM current_setting('lock_timeout')::interval) * 1000, 0))::int::text, true)) IS NOT NULL) AS i
), a_cur AS MATERIALIZED (
    SELECT l.key, l.owner, l.fence, l.expires_at, l.expires_at > clock_timestamp() AS live
    FROM @table@ AS l WHERE l.key = ANY($1::bytea[])
), a_ins AS (
    INSERT INTO @table@ AS l (key, owner, fence, expires_at, acquired_at)
    SELECT i.key, i.owner, nextval('@sequence@'), clock_timestamp() + i.ttl * interval '1 millisecond', clock_timestamp()
    FROM a_i AS i WHERE NOT EXISTS (SELECT FROM a_cur AS cur WHERE cur.key = i.key)
    ON CONFLICT (key) DO NOTHING
    RETURNING l.key, l.fence, l.expires_at
), a_upd AS (
    UPDATE @table@ AS l SET
        owner = i.owner,
        fence = CASE WHEN l.owner = i.owner AND l.expires_at > clock_timestamp() THEN l.fence ELSE nextval('@sequence@') END,
        acquired_at = CASE WHEN l.owner = i.owner AND l.expires_at > clock_timestamp() THEN l.acquired_at ELSE clock_timestamp() END,
        expires_at = clock_timestamp() + i.ttl * interval '1 millisecond'
    FROM a_i AS i JOIN a_cur AS cur ON cur.key = i.key
    WHERE (cur.owner = i.owner OR NOT cur.live)
      AND l.key = i.key AND (l.owner = i.owner OR l.expires_at <= clock_timestamp())
    RETURNING l.key, l.fence, l.expires_at
)

SELECT 0, key, true, fence, expires_at, NULL::bytea, NULL::bool FROM a_ins
UNION ALL SELECT 0, key, true, fence, expires_at, NULL, NULL FROM a_upd
UNION ALL SELECT 0, key, false, fence, expires_at, owner, NULL FROM a_cur WHERE live""",
    ),
    Function(
        "batch_renew",
        ("bytea[]", "bytea[]", "bigint[]", "integer"),
        _WRITE_ROW,
        """\
WITH 
r_upd AS (
    UPDATE @table@ AS l SET expires_at = clock_timestamp() + i.ttl * interval '1 millisecond'
    FROM (SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::bigint[]) AS u(key, owner, ttl) WHERE (SELECT set_config('lock_timeout', LEAST($4::int, NULLIF(extract(epoch FROM current_setting('lock_timeout')::interval) * 1000, 0))::int::text, true)) IS NOT NULL) AS i
    WHERE l.key = i.key AND l.owner = i.owner AND l.expires_at > clock_timestamp()
    RETURNING l.key, l.fence, l.expires_at
)

SELECT 1, key, NULL::bool, fence, expires_at, NULL::bytea, NULL::bool FROM r_upd""",
    ),
    Function(
        "batch_release",
        ("bytea[]", "bytea[]", "integer"),
        _WRITE_ROW,
        """\
WITH 
e_upd AS (
    UPDATE @table@ AS l SET expires_at = clock_timestamp()
    FROM (SELECT * FROM unnest($1::bytea[], $2::bytea[]) AS u(key, owner) WHERE (SELECT set_config('lock_timeout', LEAST($3::int, NULLIF(extract(epoch FROM current_setting('lock_timeout')::interval) * 1000, 0))::int::text, true)) IS NOT NULL) AS i
    WHERE l.key = i.key AND l.owner = i.owner AND l.expires_at > clock_timestamp()
    RETURNING l.key, l.fence, l.expires_at, (CASE WHEN l.wanted_until > clock_timestamp() THEN pg_notify('@channel@', encode(l.key, 'hex'))::text END) IS NOT NULL AS notified
)

SELECT 2, key, NULL::bool, fence, expires_at, NULL::bytea, notified FROM e_upd""",
    ),
    Function(
        "batch_transfer",
        ("bytea[]", "bytea[]", "bytea[]", "bigint[]", "integer"),
        _WRITE_ROW,
        """\
WITH 
t_upd AS (
    UPDATE @table@ AS l SET
        owner = i.to_owner,
        fence = CASE WHEN l.owner = i.to_owner THEN l.fence ELSE nextval('@sequence@') END,
        acquired_at = CASE WHEN l.owner = i.to_owner THEN l.acquired_at
            ELSE clock_timestamp() END,
        expires_at = clock_timestamp() + i.ttl * interval '1 millisecond'
    FROM (SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::bytea[], $4::bigint[]) AS u(key, from_owner, to_owner, ttl) WHERE (SELECT set_config('lock_timeout', LEAST($5::int, NULLIF(extract(epoch FROM current_setting('lock_timeout')::interval) * 1000, 0))::int::text, true)) IS NOT NULL) AS i
    WHERE l.key = i.key AND l.owner = i.from_owner AND l.expires_at > clock_timestamp()
    RETURNING l.key, l.fence, l.expires_at, (CASE WHEN l.wanted_until > clock_timestamp() THEN pg_notify('@channel@', encode(l.key, 'hex'))::text END) IS NOT NULL AS notified
)

SELECT 3, key, NULL::bool, fence, expires_at, NULL::bytea, notified FROM t_upd""",
    ),
    Function(
        "batch_read",
        ("bytea[]",),
        (
            "key bytea",
            "owner bytea",
            "fence bigint",
            "expires_at timestamptz",
            "acquired_at timestamptz",
        ),
        """\
SELECT l.key, l.owner, l.fence, l.expires_at, l.acquired_at FROM @table@ AS l
WHERE l.key = ANY($1::bytea[]) AND l.expires_at > clock_timestamp()""",
    ),
)


def _postgres() -> bool:
    return op.get_context().dialect.name == "postgresql"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _channel(table: str, schema: str | None) -> str:
    # sql_lease.schema.notify_channel, frozen: 63 bytes at most, else hashed.
    name = f"sql_lease:{schema}.{table}" if schema else f"sql_lease:{table}"
    if len(name) > 63:
        name = "sql_lease:" + hashlib.sha1(name.encode()).hexdigest()
    return name


def _home(table: str, schema: str | None) -> str:
    """SQL for the schema the table lives in (an unqualified table: the one it resolves to
    when the migration runs), computed by the server (so that ``--sql`` scripts work too)."""
    if schema is not None:
        return _literal(schema)
    return (
        "(SELECT n.nspname FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        f" WHERE c.oid = {_literal(_quote(table))}::regclass)"
    )


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _each(table: str, schema: str | None, command: str, *values: str) -> None:
    """Run ``format(command, home, <function name>, home, *values)`` per function, in a DO
    block (``%%`` because `sa.DDL` formats its text with ``%``)."""
    for f, value in zip(FUNCTIONS, values or [""] * len(FUNCTIONS), strict=True):
        name = _literal(f"{table}_{f.suffix}")
        text = command.replace("@arguments@", ", ".join(f.arguments)).replace(
            "@columns@", ", ".join(f.columns)
        )
        extra = f", {value}" if values else ""
        op.execute(
            sa.DDL(
                "DO $do$ DECLARE home text := "
                f"{_home(table, schema)}; BEGIN\n"
                f"EXECUTE pg_catalog.format({_literal(text)}, home, {name}, home{extra});\n"
                "END $do$".replace("%", "%%")
            )
        )


def upgrade() -> None:
    if not _postgres():
        return
    names = migration_names()
    table, schema = names.table, names.schema
    prefix = "" if schema is None else _quote(schema) + "."
    channel = _channel(table, schema).replace("'", "''")
    bodies = []
    for f in FUNCTIONS:
        statement = (
            f.statement.replace("@table@", prefix + _quote(table))
            .replace("@sequence@", (prefix + _quote(f"{table}_fence_seq")).replace("'", "''"))
            .replace("@channel@", channel)
        )
        body = f"#variable_conflict use_column\nBEGIN\nRETURN QUERY {statement};\nEND"
        bodies.append("$fn$\n" + body + "\n$fn$")
    _each(
        table,
        schema,
        "CREATE FUNCTION %I.%I(@arguments@) RETURNS TABLE(@columns@) LANGUAGE plpgsql"
        " VOLATILE SECURITY INVOKER SET search_path = %I, pg_temp AS %L",
        *bodies,
    )
    # SECURITY INVOKER: calling grants nothing beyond the caller's table privileges; explicit
    # in case default privileges revoke EXECUTE from PUBLIC.
    _each(table, schema, "GRANT EXECUTE ON FUNCTION %I.%I(@arguments@) TO PUBLIC")


def downgrade() -> None:
    if not _postgres():
        return
    names = migration_names()
    _each(names.table, names.schema, "DROP FUNCTION %I.%I(@arguments@)")
