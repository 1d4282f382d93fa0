"""Pooler mode's functions and the fence trigger, every object named in full.

PostgreSQL only (on SQLite this revision changes nothing). Revision 0005's functions ran the
statements as the library then sent them: unqualified operators and functions, resolved through
``search_path``. With ``SET search_path = <home>, pg_temp`` a co-tenant with CREATE on the
table's schema could still plant a better match (``public."*"(bigint, interval)``,
``public.nextval(text)``) and take over every call. This revision replaces each function's body
with the statement the library now sends (``OPERATOR(pg_catalog.=)``,
``pg_catalog.clock_timestamp()``, the table and sequence schema-qualified; see
`sql_lease.backends.postgres.sqlnames`) and pins ``SET search_path = pg_catalog, pg_temp``
(temporary schema last). Names, argument types and result columns stay those of 0005
(``CREATE OR REPLACE``: grants and callers are unchanged); the library calls them
schema-qualified. 0004's fence-timeline trigger function called ``substr``, ``nextval``,
``clock_timestamp`` and operators unqualified in the caller's search path: it is replaced the
same way, and its update trigger's ``WHEN`` (whose operators were resolved when 0004 ran) is
recreated with qualified operators.

For an unqualified table the schema is the one the table resolves to when the migration runs,
computed by the server (so ``--sql`` scripts work too). The statement texts below are frozen
copies (a drift test compares them with the library's). Downgrade restores 0005's functions
and 0004's trigger exactly.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

# ruff: noqa: E501, W291  (frozen SQL texts, exactly as the library sends them: "WITH " ends a line)

import hashlib
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlalchemy as sa
from alembic import op

from sql_lease.migrate import migration_names

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Each function's statement by its name after ``<table>_``: @table@, @sequence@ and @channel@
#: stand for the table's names (@sequence@ inside its quotes).
STATEMENTS: dict[str, str] = {
    "acquire": """\
WITH cur AS MATERIALIZED (
    SELECT owner, fence, expires_at, expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() AS live
    FROM @table@ WHERE key OPERATOR(pg_catalog.=) $1
), ins AS (
    INSERT INTO @table@ AS l (key, owner, fence, expires_at, acquired_at)
    SELECT $1, $2, pg_catalog.nextval('@sequence@'::pg_catalog.regclass), (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) ($3::bigint::double precision OPERATOR(pg_catalog.*) INTERVAL '1 millisecond')), pg_catalog.clock_timestamp()
    WHERE NOT EXISTS (SELECT FROM cur)
    ON CONFLICT (key) DO NOTHING
    RETURNING l.fence, l.expires_at
), upd AS (
    UPDATE @table@ AS l SET
        owner = $2,
        fence = CASE WHEN l.owner OPERATOR(pg_catalog.=) $2 AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                     THEN l.fence ELSE pg_catalog.nextval('@sequence@'::pg_catalog.regclass) END,
        acquired_at = CASE WHEN l.owner OPERATOR(pg_catalog.=) $2 AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
                           THEN l.acquired_at ELSE pg_catalog.clock_timestamp() END,
        expires_at = (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) ($3::bigint::double precision OPERATOR(pg_catalog.*) INTERVAL '1 millisecond'))
    WHERE (SELECT owner OPERATOR(pg_catalog.=) $2 OR NOT live FROM cur)
      AND l.key OPERATOR(pg_catalog.=) $1 AND (l.owner OPERATOR(pg_catalog.=) $2 OR l.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp())
    RETURNING l.fence, l.expires_at
)
SELECT true AS acquired, fence, expires_at, NULL::pg_catalog.bytea AS holder FROM ins
UNION ALL SELECT true, fence, expires_at, NULL FROM upd
UNION ALL SELECT false, fence, expires_at, owner FROM cur WHERE live""",
    "renew": """\
UPDATE @table@ SET expires_at = (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) ($3::bigint::double precision OPERATOR(pg_catalog.*) INTERVAL '1 millisecond')) WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2 AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() RETURNING fence, expires_at""",
    "release": """\
UPDATE @table@ SET expires_at = pg_catalog.clock_timestamp() WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2 AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() RETURNING fence, expires_at, (CASE WHEN wanted_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN pg_catalog.pg_notify('@channel@', pg_catalog.encode(key, 'hex'))::pg_catalog.text END) IS NOT NULL AS notified""",
    "transfer": """\
UPDATE @table@ SET
    owner = $3,
    fence = CASE WHEN owner OPERATOR(pg_catalog.=) $3 THEN fence ELSE pg_catalog.nextval('@sequence@'::pg_catalog.regclass) END,
    acquired_at = CASE WHEN owner OPERATOR(pg_catalog.=) $3 THEN acquired_at ELSE pg_catalog.clock_timestamp() END,
    expires_at = (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) ($4::bigint::double precision OPERATOR(pg_catalog.*) INTERVAL '1 millisecond'))
WHERE key OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2 AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() RETURNING fence, expires_at, (CASE WHEN wanted_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN pg_catalog.pg_notify('@channel@', pg_catalog.encode(key, 'hex'))::pg_catalog.text END) IS NOT NULL AS notified""",
    "get_owner": """\
SELECT owner FROM @table@ WHERE key OPERATOR(pg_catalog.=) $1 AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()""",
    "get_lease": """\
SELECT owner, fence, expires_at, acquired_at FROM @table@ WHERE key OPERATOR(pg_catalog.=) $1 AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()""",
    "holder": """\
SELECT owner, fence, expires_at FROM @table@ WHERE key OPERATOR(pg_catalog.=) $1 AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()""",
    "batch_acquire": """\
WITH 
a_i AS MATERIALIZED (
    SELECT * FROM (SELECT * FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.bytea[]), pg_catalog.unnest($2::pg_catalog.bytea[]), pg_catalog.unnest($3::bigint[])) AS u(key, owner, ttl) WHERE (SELECT pg_catalog.set_config('lock_timeout', LEAST($4::int, CASE WHEN (EXTRACT(epoch FROM pg_catalog.current_setting('lock_timeout')::interval) OPERATOR(pg_catalog.*) 1000::numeric) OPERATOR(pg_catalog.>) 0::numeric THEN (EXTRACT(epoch FROM pg_catalog.current_setting('lock_timeout')::interval) OPERATOR(pg_catalog.*) 1000::numeric) END)::int::pg_catalog.text, true)) IS NOT NULL) AS i
), a_cur AS MATERIALIZED (
    SELECT l.key, l.owner, l.fence, l.expires_at, l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() AS live
    FROM @table@ AS l WHERE l.key OPERATOR(pg_catalog.=) ANY($1::pg_catalog.bytea[])
), a_ins AS (
    INSERT INTO @table@ AS l (key, owner, fence, expires_at, acquired_at)
    SELECT i.key, i.owner, pg_catalog.nextval('@sequence@'::pg_catalog.regclass), (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) (i.ttl::double precision OPERATOR(pg_catalog.*) INTERVAL '1 millisecond')), pg_catalog.clock_timestamp()
    FROM a_i AS i WHERE NOT EXISTS (SELECT FROM a_cur AS cur WHERE cur.key OPERATOR(pg_catalog.=) i.key)
    ON CONFLICT (key) DO NOTHING
    RETURNING l.key, l.fence, l.expires_at
), a_upd AS (
    UPDATE @table@ AS l SET
        owner = i.owner,
        fence = CASE WHEN l.owner OPERATOR(pg_catalog.=) i.owner AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN l.fence ELSE pg_catalog.nextval('@sequence@'::pg_catalog.regclass) END,
        acquired_at = CASE WHEN l.owner OPERATOR(pg_catalog.=) i.owner AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN l.acquired_at ELSE pg_catalog.clock_timestamp() END,
        expires_at = (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) (i.ttl::double precision OPERATOR(pg_catalog.*) INTERVAL '1 millisecond'))
    FROM a_i AS i JOIN a_cur AS cur ON cur.key OPERATOR(pg_catalog.=) i.key
    WHERE (cur.owner OPERATOR(pg_catalog.=) i.owner OR NOT cur.live)
      AND l.key OPERATOR(pg_catalog.=) i.key AND (l.owner OPERATOR(pg_catalog.=) i.owner OR l.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp())
    RETURNING l.key, l.fence, l.expires_at
)

SELECT 0, key, true, fence, expires_at, NULL::pg_catalog.bytea, NULL::boolean FROM a_ins
UNION ALL SELECT 0, key, true, fence, expires_at, NULL, NULL FROM a_upd
UNION ALL SELECT 0, key, false, fence, expires_at, owner, NULL FROM a_cur WHERE live""",
    "batch_renew": """\
WITH 
r_upd AS (
    UPDATE @table@ AS l SET expires_at = (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) (i.ttl::double precision OPERATOR(pg_catalog.*) INTERVAL '1 millisecond'))
    FROM (SELECT * FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.bytea[]), pg_catalog.unnest($2::pg_catalog.bytea[]), pg_catalog.unnest($3::bigint[])) AS u(key, owner, ttl) WHERE (SELECT pg_catalog.set_config('lock_timeout', LEAST($4::int, CASE WHEN (EXTRACT(epoch FROM pg_catalog.current_setting('lock_timeout')::interval) OPERATOR(pg_catalog.*) 1000::numeric) OPERATOR(pg_catalog.>) 0::numeric THEN (EXTRACT(epoch FROM pg_catalog.current_setting('lock_timeout')::interval) OPERATOR(pg_catalog.*) 1000::numeric) END)::int::pg_catalog.text, true)) IS NOT NULL) AS i
    WHERE l.key OPERATOR(pg_catalog.=) i.key AND l.owner OPERATOR(pg_catalog.=) i.owner AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
    RETURNING l.key, l.fence, l.expires_at
)

SELECT 1, key, NULL::boolean, fence, expires_at, NULL::pg_catalog.bytea, NULL::boolean FROM r_upd""",
    "batch_release": """\
WITH 
e_upd AS (
    UPDATE @table@ AS l SET expires_at = pg_catalog.clock_timestamp()
    FROM (SELECT * FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.bytea[]), pg_catalog.unnest($2::pg_catalog.bytea[])) AS u(key, owner) WHERE (SELECT pg_catalog.set_config('lock_timeout', LEAST($3::int, CASE WHEN (EXTRACT(epoch FROM pg_catalog.current_setting('lock_timeout')::interval) OPERATOR(pg_catalog.*) 1000::numeric) OPERATOR(pg_catalog.>) 0::numeric THEN (EXTRACT(epoch FROM pg_catalog.current_setting('lock_timeout')::interval) OPERATOR(pg_catalog.*) 1000::numeric) END)::int::pg_catalog.text, true)) IS NOT NULL) AS i
    WHERE l.key OPERATOR(pg_catalog.=) i.key AND l.owner OPERATOR(pg_catalog.=) i.owner AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
    RETURNING l.key, l.fence, l.expires_at, (CASE WHEN l.wanted_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN pg_catalog.pg_notify('@channel@', pg_catalog.encode(l.key, 'hex'))::pg_catalog.text END) IS NOT NULL AS notified
)

SELECT 2, key, NULL::boolean, fence, expires_at, NULL::pg_catalog.bytea, notified FROM e_upd""",
    "batch_transfer": """\
WITH 
t_upd AS (
    UPDATE @table@ AS l SET
        owner = i.to_owner,
        fence = CASE WHEN l.owner OPERATOR(pg_catalog.=) i.to_owner THEN l.fence ELSE pg_catalog.nextval('@sequence@'::pg_catalog.regclass) END,
        acquired_at = CASE WHEN l.owner OPERATOR(pg_catalog.=) i.to_owner THEN l.acquired_at
            ELSE pg_catalog.clock_timestamp() END,
        expires_at = (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) (i.ttl::double precision OPERATOR(pg_catalog.*) INTERVAL '1 millisecond'))
    FROM (SELECT * FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.bytea[]), pg_catalog.unnest($2::pg_catalog.bytea[]), pg_catalog.unnest($3::pg_catalog.bytea[]), pg_catalog.unnest($4::bigint[])) AS u(key, from_owner, to_owner, ttl) WHERE (SELECT pg_catalog.set_config('lock_timeout', LEAST($5::int, CASE WHEN (EXTRACT(epoch FROM pg_catalog.current_setting('lock_timeout')::interval) OPERATOR(pg_catalog.*) 1000::numeric) OPERATOR(pg_catalog.>) 0::numeric THEN (EXTRACT(epoch FROM pg_catalog.current_setting('lock_timeout')::interval) OPERATOR(pg_catalog.*) 1000::numeric) END)::int::pg_catalog.text, true)) IS NOT NULL) AS i
    WHERE l.key OPERATOR(pg_catalog.=) i.key AND l.owner OPERATOR(pg_catalog.=) i.from_owner AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
    RETURNING l.key, l.fence, l.expires_at, (CASE WHEN l.wanted_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() THEN pg_catalog.pg_notify('@channel@', pg_catalog.encode(l.key, 'hex'))::pg_catalog.text END) IS NOT NULL AS notified
)

SELECT 3, key, NULL::boolean, fence, expires_at, NULL::pg_catalog.bytea, notified FROM t_upd""",
    "batch_read": """\
SELECT l.key, l.owner, l.fence, l.expires_at, l.acquired_at FROM @table@ AS l
WHERE l.key OPERATOR(pg_catalog.=) ANY($1::pg_catalog.bytea[]) AND l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()""",
}

SEQUENCE_BITS = 40
MASK = (1 << SEQUENCE_BITS) - 1
#: The current timeline as a bigint (0004's, every name in full).
TIMELINE = (
    "('x'::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.substr("
    "pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::bigint"
)
#: The schema a DO block works in: ``home`` (a variable), quoted as the library quotes it.
_QUOTED_HOME = "pg_catalog.concat('\"', pg_catalog.replace(home, '\"', '\"\"'), '\"')"


def _revision(name: str) -> ModuleType:
    """A frozen earlier revision of this directory (to restore exactly what it created)."""
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"sql_lease_revision_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _postgres() -> bool:
    return op.get_context().dialect.name == "postgresql"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _channel(table: str, schema: str | None) -> str:
    # sql_lease.schema.notify_channel, frozen: 63 bytes at most, else hashed.
    name = f"sql_lease:{schema}.{table}" if schema else f"sql_lease:{table}"
    if len(name) > 63:
        name = "sql_lease:" + hashlib.sha1(name.encode()).hexdigest()
    return name


def _home(table: str, schema: str | None) -> str:
    """SQL for the table's schema: the given one, else the first schema of the migration's
    search path holding a (non-temporary) table of that name, computed by the server."""
    if schema is not None:
        return _literal(schema)
    return (
        "(SELECT p.nspname::pg_catalog.text"
        " FROM pg_catalog.unnest(pg_catalog.current_schemas(false)) WITH ORDINALITY AS p(nspname, n)"
        " WHERE pg_catalog.to_regclass(pg_catalog.format('%I.%I', p.nspname,"
        f" {_literal(table)}::pg_catalog.text)) IS NOT NULL"
        " AND pg_catalog.left(p.nspname::pg_catalog.text, 8) OPERATOR(pg_catalog.<>) 'pg_temp_'"
        " ORDER BY p.n LIMIT 1)"
    )


def _in_home(table: str, schema: str | None, statements: list[str]) -> None:
    """Run ``statements`` in one DO block, ``home`` being the table's schema: ``@home@`` in a
    statement stands for it, quoted (``%%`` because `sa.DDL` formats its text with ``%``).
    The library names only plain identifiers (a schema found for an unqualified table too), so
    another home is refused here rather than written into the functions."""
    body = "".join(
        f"EXECUTE pg_catalog.replace({_literal(s)}, '@home@', {_QUOTED_HOME});\n"
        for s in statements
    )
    op.execute(
        sa.DDL(
            f"DO $do$ DECLARE home text := {_home(table, schema)}; BEGIN\n"
            "IF home IS NULL THEN RAISE EXCEPTION 'sql_lease: no table %, run the earlier"
            f" revisions first', {_literal(table)}; END IF;\n"
            "IF home OPERATOR(pg_catalog.!~) '^[A-Za-z_][A-Za-z0-9_]*$' THEN RAISE EXCEPTION"
            " 'sql_lease: the table is in schema %, not a plain identifier: move it', home;"
            f" END IF;\n{body}END $do$".replace("%", "%%")
        )
    )


def _function(name: str, arguments: Sequence[str], columns: Sequence[str], statement: str) -> str:
    body = f"#variable_conflict use_column\nBEGIN\nRETURN QUERY {statement};\nEND"
    return (
        f'CREATE OR REPLACE FUNCTION @home@."{name}"({", ".join(arguments)})'
        f" RETURNS TABLE({', '.join(columns)}) LANGUAGE plpgsql VOLATILE SECURITY INVOKER"
        f" SET search_path = pg_catalog, pg_temp AS $fn$\n{body}\n$fn$"
    )


def _timeline_fence(value: str, timeline: str) -> str:
    """``value`` (a drawn fence) with its top bits raised to at least the timeline."""
    bits = SEQUENCE_BITS
    shifted = f"({value} OPERATOR(pg_catalog.>>) {bits})"
    high = f"(GREATEST({timeline}, {shifted}) OPERATOR(pg_catalog.<<) {bits})"
    return f"({high} OPERATOR(pg_catalog.|) ({value} OPERATOR(pg_catalog.&) {MASK}))"


def _trigger_ddl(table: str) -> list[str]:
    """0004's trigger function and triggers, every name in full, in ``@home@``."""
    sequence = f'@home@."{table}_fence_seq"'
    function = f'@home@."{table}_fence_timeline"'
    moved = f"(OLD.fence OPERATOR(pg_catalog.>>) {SEQUENCE_BITS})"  # the fence's timeline
    return [
        f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql"
        " SET search_path = pg_catalog, pg_temp AS $body$\n"
        "DECLARE\n"
        f"  timeline bigint := {TIMELINE};\n"
        "BEGIN\n"
        "  IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND NEW.fence OPERATOR(pg_catalog.=) OLD.fence THEN\n"
        f"    NEW.fence := pg_catalog.nextval('{sequence}'::pg_catalog.regclass);\n"
        "    NEW.acquired_at := pg_catalog.clock_timestamp();\n"
        "  END IF;\n"
        f"  NEW.fence := {_timeline_fence('NEW.fence', 'timeline')};\n"
        "  RETURN NEW;\n"
        "END\n"
        "$body$",
        f'CREATE TRIGGER "{table}_fence_timeline_insert" BEFORE INSERT ON @home@."{table}"'
        f" FOR EACH ROW EXECUTE FUNCTION {function}()",
        # fence is NOT NULL: "<>" is 0004's IS DISTINCT FROM (which has no qualified form).
        f'CREATE TRIGGER "{table}_fence_timeline_update" BEFORE UPDATE OF fence'
        f' ON @home@."{table}" FOR EACH ROW WHEN (NEW.fence OPERATOR(pg_catalog.<>) OLD.fence'
        f" OR ({moved} OPERATOR(pg_catalog.>=) 1 AND {moved} OPERATOR(pg_catalog.<) ({TIMELINE})))"
        f" EXECUTE FUNCTION {function}()",
    ]


def _stamp_function(ev: Any, qualify: str, settings: str, body: str) -> str:
    """0003's event stamp function (the TypeScript package's event tables), its relations in
    ``qualify`` (``@home@.`` or nothing), with ``settings`` and ``body`` (0003's or ours)."""
    sequence = f'{qualify}"{ev.id_sequence}"'.replace("'", "''")
    return (
        f'CREATE OR REPLACE FUNCTION {qualify}"{ev.stamp_function}"() RETURNS trigger'
        f" LANGUAGE plpgsql{settings} AS $body$\n"
        + body.replace("@topics@", f'{qualify}"{ev.topics}"')
        .replace("@sequence@", sequence)
        .replace("@channel@", ev.channel)
        + "$body$"
    )


#: 0003's stamp function body, frozen (what downgrade restores).
STAMP_0003 = """\
BEGIN
  INSERT INTO @topics@ AS tp (topic, next_seq, last_at)
  VALUES (NEW.topic, 1, clock_timestamp())
  ON CONFLICT (topic) DO UPDATE
  SET next_seq = tp.next_seq + 1, last_at = clock_timestamp()
  RETURNING tp.next_seq - 1 INTO NEW.seq;
  -- After the topic's row lock: ids of one topic are handed out in commit order.
  NEW.id := nextval('@sequence@'::regclass);
  NEW.created_at := clock_timestamp();
  PERFORM pg_notify('@channel@', NEW.topic);
  RETURN NEW;
END
"""

#: The same, every name in full.
STAMP = """\
BEGIN
  INSERT INTO @topics@ AS tp (topic, next_seq, last_at)
  VALUES (NEW.topic, 1, pg_catalog.clock_timestamp())
  ON CONFLICT (topic) DO UPDATE
  SET next_seq = tp.next_seq OPERATOR(pg_catalog.+) 1, last_at = pg_catalog.clock_timestamp()
  RETURNING tp.next_seq OPERATOR(pg_catalog.-) 1 INTO NEW.seq;
  -- After the topic's row lock: ids of one topic are handed out in commit order.
  NEW.id := pg_catalog.nextval('@sequence@'::pg_catalog.regclass);
  NEW.created_at := pg_catalog.clock_timestamp();
  PERFORM pg_catalog.pg_notify('@channel@', NEW.topic);
  RETURN NEW;
END
"""


def _drop_triggers(names_table: str, qualified: str, function: str) -> None:
    op.execute(sa.DDL(f'DROP TRIGGER "{names_table}_fence_timeline_update" ON {qualified}'))
    op.execute(sa.DDL(f'DROP TRIGGER "{names_table}_fence_timeline_insert" ON {qualified}'))
    op.execute(sa.DDL(f"DROP FUNCTION {function}()"))


def upgrade() -> None:
    if not _postgres():
        return
    names = migration_names()
    table, schema = names.table, names.schema
    v5 = _revision("0005_pooler_functions.py")
    channel = _channel(table, schema)
    statements = []
    for f in v5.FUNCTIONS:
        statement = (
            STATEMENTS[f.suffix]
            .replace("@table@", f'@home@."{table}"')
            .replace("@sequence@", f'@home@."{table}_fence_seq"')
            .replace("@channel@", channel)
        )
        statements.append(_function(f"{table}_{f.suffix}", f.arguments, f.columns, statement))
    # 0004's trigger function and triggers, named as 0004 named them (an unqualified table:
    # resolved by this session's search path, as when 0004 ran), are replaced in the home.
    prefix = "" if schema is None else f'"{schema}".'
    _drop_triggers(table, f'{prefix}"{table}"', f'{prefix}"{table}_fence_timeline"')
    ev = _revision("0003_mastra_pubsub.py").event_names(table, schema)
    stamp = _stamp_function(ev, "@home@.", " SET search_path = pg_catalog, pg_temp", STAMP)
    _in_home(table, schema, [*statements, *_trigger_ddl(table), stamp])


def downgrade() -> None:
    if not _postgres():
        return
    names = migration_names()
    table, schema = names.table, names.schema
    # 0005's functions exactly as 0005 made them (bodies, settings and grants).
    v5 = _revision("0005_pooler_functions.py")
    v5.downgrade()
    v5.upgrade()
    _in_home(
        table,
        schema,
        [
            f'DROP TRIGGER "{table}_fence_timeline_update" ON @home@."{table}"',
            f'DROP TRIGGER "{table}_fence_timeline_insert" ON @home@."{table}"',
            f'DROP FUNCTION @home@."{table}_fence_timeline"()',
        ],
    )
    # 0003's stamp function as 0003 made it (named as it named it).
    ev = _revision("0003_mastra_pubsub.py").event_names(table, schema)
    prefix = "" if schema is None else f'"{schema}".'
    op.execute(sa.DDL(_stamp_function(ev, prefix, "", STAMP_0003).replace("%", "%%")))
    # 0004's trigger function and triggers exactly as 0004 made them (its downgrade would also
    # move the fence sequence, which going back to 0005 must not do).
    _revision("0004_fence_timeline.py").upgrade()
