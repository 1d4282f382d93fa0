"""On Citus: ``leases`` distributed by ``key``, each hot call a function Citus runs on the worker.

Only a PostgreSQL database where the ``citus`` extension is installed changes (plain PostgreSQL
and SQLite: nothing; the check is a query, so this revision needs a live connection there, not
``--sql``). Every lease operation names one key, so the table is distributed by ``key``
(``create_distributed_table``; a populated table is distributed in place and its local copy
truncated; a table that is already distributed is left as it is).

What stood in the way, and what replaces it:

- 0004's fence-timeline triggers (Citus refuses a table with triggers): dropped. Each worker
  has its own timeline and its own sequences, so neither can order a key's fences once its
  shard can move. A new tenure's fence is now ``GREATEST(the row's fence + 1, the worker's
  clock in microseconds since 1970, FLOOR)``: the row moves with its shard, so a key's fences
  rise strictly across shard moves and rebalancing; a key whose row was purged (``purge``
  removes only rows expired for a grace period) gets the clock, above the purged fence as long
  as the workers' clocks agree to better than that grace (they must anyway: after a shard move
  another worker's clock judges expiry); a promoted worker starts above every fence its
  predecessor drew (the clock moved on). ``FLOOR`` is the highest fence the table could have
  handed out before this revision (every earlier fence stays below the new ones).
- ``clock_timestamp()``, ``nextval()`` and ``pg_notify()`` in an ``UPDATE`` on a distributed
  table (Citus refuses volatile functions there): each write is a plpgsql function that reads
  the clock into a variable once it holds the key's row lock (a clock read before waiting for
  the lock would let a renewal that queued behind a release revive the released lease), runs
  its one-key statements with it (an update only of the row version it judged, else it judges
  again), and notifies afterwards.
  The functions keep 0006's names, argument types and result columns (pooler mode calls them
  too), and the one-key ones are distributed with ``create_distributed_function(..., '$1',
  colocate_with => <table>)``: a call ``SELECT * FROM f($1, ...)`` to the coordinator is
  delegated whole to the worker holding the key's shard (one round trip there, its statements
  run locally). The batch functions (arrays of keys, which no single worker holds) run on the
  coordinator, one delegated-function statement per key. New functions for the statements that
  had none: ``force_release``, ``want``, ``renew_many`` and ``purge``.

The Mastra event tables (0003) stay plain tables on the coordinator: their ``id`` is one global
order across topics (a subscriber's cursor), their stamp trigger serialises a topic's
publishers on one row and sends the NOTIFY its subscribers LISTEN for on the coordinator; none
of that survives distribution by topic, and a reference table would copy every event to every
node (and refuses the trigger). Their load is the publishers', not the leases'.

Downgrade (Citus only): drops this revision's functions, makes ``leases`` a local table again
(``undistribute_table``), restores 0006's functions and 0004's triggers as 0006 made them, and
sets the fence sequence to the highest fence in the table (0004's rewrite keeps later fences
above it).

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-04
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

from sql_lease.migrate import migration_names

revision: str = "0008"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Each one-key function: suffix, argument types, result columns, declarations, body. ``@t@`` is
#: the table (qualified), ``@floor@`` the fence floor, ``@channel@`` the NOTIFY channel; every
#: body runs with ``search_path = pg_catalog, pg_temp`` (so bare functions and operators are
#: pg_catalog's), its clock read once into ``t_now`` before any statement touches the table.
_TTL = "(t_now + $3::double precision * interval '1 millisecond')"
_FENCE = "GREATEST(c.fence + 1, (extract(epoch FROM t_now) * 1000000)::bigint, @floor@)"
ONE_KEY: tuple[tuple[str, tuple[str, ...], tuple[str, ...], str], ...] = (
    (
        "acquire",
        ("bytea", "bytea", "bigint"),
        ("acquired boolean", "fence bigint", "expires_at timestamptz", "holder bytea"),
        f"""\
DECLARE
  t_now timestamptz;
  c record;
  f bigint;
  same boolean;
BEGIN
  LOOP
    SELECT l.owner, l.fence, l.expires_at, l.acquired_at INTO c FROM @t@ AS l WHERE l.key = $1;
    t_now := clock_timestamp();
    IF FOUND AND c.expires_at > t_now AND c.owner <> $2 THEN
      RETURN QUERY SELECT false, c.fence, c.expires_at, c.owner;  -- held: no lock taken
      RETURN;
    END IF;
    IF NOT FOUND THEN
      f := GREATEST((extract(epoch FROM t_now) * 1000000)::bigint, @floor@);
      INSERT INTO @t@ AS l (key, owner, fence, expires_at, acquired_at)
      VALUES ($1, $2, f, {_TTL}, t_now) ON CONFLICT (key) DO NOTHING;
      IF FOUND THEN
        RETURN QUERY SELECT true, f, {_TTL}, NULL::bytea;
        RETURN;
      END IF;
      CONTINUE;  -- another acquire inserted it first: judge its row
    END IF;
    SELECT l.owner, l.fence, l.expires_at, l.acquired_at INTO c FROM @t@ AS l
    WHERE l.key = $1 FOR UPDATE;
    IF NOT FOUND THEN
      CONTINUE;  -- purged meanwhile
    END IF;
    t_now := clock_timestamp();
    IF c.expires_at > t_now AND c.owner <> $2 THEN
      RETURN QUERY SELECT false, c.fence, c.expires_at, c.owner;
      RETURN;
    END IF;
    same := c.owner = $2 AND c.expires_at > t_now;
    f := CASE WHEN same THEN c.fence ELSE {_FENCE} END;
    UPDATE @t@ AS l SET owner = $2, fence = f,
      acquired_at = CASE WHEN same THEN c.acquired_at ELSE t_now END, expires_at = {_TTL}
    WHERE l.key = $1 AND l.owner = c.owner AND l.fence = c.fence
      AND l.expires_at = c.expires_at;
    IF FOUND THEN  -- else the row changed after it was read: judge it again
      RETURN QUERY SELECT true, f, {_TTL}, NULL::bytea;
      RETURN;
    END IF;
  END LOOP;
END""",
    ),
    (
        "renew",
        ("bytea", "bytea", "bigint"),
        ("fence bigint", "expires_at timestamptz"),
        f"""\
DECLARE
  t_now timestamptz;
BEGIN
  PERFORM FROM @t@ AS l WHERE l.key = $1 FOR UPDATE;  -- the clock after the row lock
  t_now := clock_timestamp();
  RETURN QUERY UPDATE @t@ AS l SET expires_at = {_TTL}
  WHERE l.key = $1 AND l.owner = $2 AND l.expires_at > t_now RETURNING l.fence, l.expires_at;
END""",
    ),
    (
        "release",
        ("bytea", "bytea"),
        ("fence bigint", "expires_at timestamptz", "notified boolean"),
        """\
DECLARE
  t_now timestamptz;
  r record;
BEGIN
  PERFORM FROM @t@ AS l WHERE l.key = $1 FOR UPDATE;  -- the clock after the row lock
  t_now := clock_timestamp();
  UPDATE @t@ AS l SET expires_at = t_now
  WHERE l.key = $1 AND l.owner = $2 AND l.expires_at > t_now
  RETURNING l.fence, l.expires_at, l.wanted_until > t_now AS wanted INTO r;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  IF r.wanted THEN
    PERFORM pg_notify('@channel@', encode($1, 'hex'));
  END IF;
  RETURN QUERY SELECT r.fence, r.expires_at, coalesce(r.wanted, false);
END""",
    ),
    (
        "transfer",
        ("bytea", "bytea", "bytea", "bigint"),
        ("fence bigint", "expires_at timestamptz", "notified boolean"),
        """\
DECLARE
  t_now timestamptz;
  c record;
  f bigint;
  wanted boolean;
BEGIN
  LOOP
    SELECT l.owner, l.fence, l.expires_at, l.acquired_at, l.wanted_until INTO c FROM @t@ AS l
    WHERE l.key = $1 FOR UPDATE;
    t_now := clock_timestamp();
    IF NOT FOUND OR c.owner <> $2 OR c.expires_at <= t_now THEN
      RETURN;
    END IF;
    f := CASE WHEN c.owner = $3 THEN c.fence ELSE @fence@ END;
    UPDATE @t@ AS l SET owner = $3, fence = f,
      acquired_at = CASE WHEN c.owner = $3 THEN c.acquired_at ELSE t_now END,
      expires_at = (t_now + $4::double precision * interval '1 millisecond')
    WHERE l.key = $1 AND l.owner = c.owner AND l.fence = c.fence
      AND l.expires_at = c.expires_at;
    IF FOUND THEN  -- else the row changed after it was read: judge it again
      wanted := coalesce(c.wanted_until > t_now, false);
      IF wanted THEN
        PERFORM pg_notify('@channel@', encode($1, 'hex'));
      END IF;
      RETURN QUERY SELECT f, (t_now + $4::double precision * interval '1 millisecond'), wanted;
      RETURN;
    END IF;
  END LOOP;
END""".replace("@fence@", _FENCE),
    ),
    (
        "force_release",
        ("bytea",),
        ("owner bytea", "fence bigint", "expires_at timestamptz", "notified boolean"),
        """\
DECLARE
  t_now timestamptz;
  r record;
BEGIN
  PERFORM FROM @t@ AS l WHERE l.key = $1 FOR UPDATE;  -- the clock after the row lock
  t_now := clock_timestamp();
  UPDATE @t@ AS l SET expires_at = t_now WHERE l.key = $1 AND l.expires_at > t_now
  RETURNING l.owner, l.fence, l.expires_at, l.wanted_until > t_now AS wanted INTO r;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  IF r.wanted THEN
    PERFORM pg_notify('@channel@', encode($1, 'hex'));
  END IF;
  RETURN QUERY SELECT r.owner, r.fence, r.expires_at, coalesce(r.wanted, false);
END""",
    ),
    (
        "want",
        ("bytea", "bigint"),
        ("owner bytea", "fence bigint", "expires_at timestamptz"),
        """\
DECLARE
  t_now timestamptz;
BEGIN
  PERFORM FROM @t@ AS l WHERE l.key = $1 FOR UPDATE;  -- the clock after the row lock
  t_now := clock_timestamp();
  RETURN QUERY UPDATE @t@ AS l
  SET wanted_until = GREATEST(l.wanted_until,
                              t_now + $2::double precision * interval '1 millisecond')
  WHERE l.key = $1 AND l.expires_at > t_now RETURNING l.owner, l.fence, l.expires_at;
END""",
    ),
)

#: 0006's reads, distributed as they are (a SELECT may call the clock on a distributed table).
READS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("get_owner", ("bytea",)),
    ("get_lease", ("bytea",)),
    ("holder", ("bytea",)),
)

_WRITE_ROW = (
    "kind integer",
    "key bytea",
    "acquired boolean",
    "fence bigint",
    "expires_at timestamptz",
    "holder bytea",
    "notified boolean",
)
#: The batch functions (0006's names and signatures; the last argument, a lock wait, is unused:
#: each key's statement waits within the call's own timeouts): kind, suffix, arrays, the row of
#: one key from its one-key function ``f``.
BATCHES: tuple[tuple[int, str, tuple[str, ...], str, str], ...] = (
    (
        0,
        "acquire",
        ("bytea[]", "bytea[]", "bigint[]"),
        "@fn@($1[i], $2[i], $3[i])",
        "r.acquired, r.fence, r.expires_at, r.holder, NULL::boolean",
    ),
    (
        1,
        "renew",
        ("bytea[]", "bytea[]", "bigint[]"),
        "@fn@($1[i], $2[i], $3[i])",
        "NULL::boolean, r.fence, r.expires_at, NULL::bytea, NULL::boolean",
    ),
    (
        2,
        "release",
        ("bytea[]", "bytea[]"),
        "@fn@($1[i], $2[i])",
        "NULL::boolean, r.fence, r.expires_at, NULL::bytea, r.notified",
    ),
    (
        3,
        "transfer",
        ("bytea[]", "bytea[]", "bytea[]", "bigint[]"),
        "@fn@($1[i], $2[i], $3[i], $4[i])",
        "NULL::boolean, r.fence, r.expires_at, NULL::bytea, r.notified",
    ),
)

#: Coordinator functions of their own (no single key): renew_many and purge.
COORDINATOR: tuple[tuple[str, tuple[str, ...], tuple[str, ...], str], ...] = (
    (
        "renew_many",
        ("bytea[]", "bytea[]", "bigint"),
        ("key bytea", "owner bytea", "fence bigint", "expires_at timestamptz"),
        """\
BEGIN
  FOR i IN 1 .. coalesce(array_length($1, 1), 0) LOOP
    RETURN QUERY SELECT $1[i], $2[i], r.fence, r.expires_at FROM @renew@($1[i], $2[i], $3) AS r;
  END LOOP;
END""",
    ),
    (
        "purge",
        ("bigint", "integer"),
        ("purged integer",),
        """\
DECLARE
  cutoff timestamptz := clock_timestamp() - $1::double precision * interval '1 millisecond';
  doomed bytea[];
  k bytea;
BEGIN
  doomed := ARRAY(SELECT l.key FROM @t@ AS l WHERE l.expires_at < cutoff LIMIT $2);
  FOREACH k IN ARRAY doomed LOOP
    DELETE FROM @t@ AS l WHERE l.key = k AND l.expires_at < cutoff;
    IF FOUND THEN
      RETURN QUERY SELECT 1;
    END IF;
  END LOOP;
END""",
    ),
)


def _revision(name: str) -> ModuleType:
    """A frozen earlier revision of this directory (to restore exactly what it created)."""
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"sql_lease_revision_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def _scalar(sql: str) -> object:
    return op.get_bind().exec_driver_sql(sql).scalar()


def _ddl(statement: str) -> None:
    op.get_bind().exec_driver_sql(statement)


def _home(table: str, schema: str | None) -> str:
    home = _scalar(_revision("0006_qualified_names.py")._home(table, schema))
    if not isinstance(home, str):
        raise RuntimeError(f"sql_lease: no table {table}: run the earlier revisions first")
    return home


def _function(name: str, arguments: Sequence[str], columns: Sequence[str], body: str) -> str:
    return (
        f"CREATE OR REPLACE FUNCTION {name}({', '.join(arguments)})"
        f" RETURNS TABLE({', '.join(columns)}) LANGUAGE plpgsql VOLATILE SECURITY INVOKER"
        f" SET search_path = pg_catalog, pg_temp AS $fn$\n#variable_conflict use_column\n"
        f"{body}\n$fn$"
    )


def _batch(kind: int, one: str, row: str) -> str:
    return f"""\
BEGIN
  FOR i IN 1 .. coalesce(array_length($1, 1), 0) LOOP
    RETURN QUERY SELECT {kind}, $1[i], {row} FROM {one} AS r;
  END LOOP;
END"""


def upgrade() -> None:
    if not _citus():
        return
    names = migration_names()
    table, schema = names.table, names.schema
    home = _home(table, schema)
    t = f"{_quote(home)}.{_quote(table)}"

    def fn(suffix: str) -> str:
        return f"{_quote(home)}.{_quote(f'{table}_{suffix}')}"

    v4 = _revision("0004_fence_timeline.py")
    v6 = _revision("0006_qualified_names.py")
    channel = v6._channel(table, schema)
    distributed = _scalar(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition"
        f" WHERE logicalrelid = {_literal(t)}::pg_catalog.regclass)"
    )
    sequence = f"{_quote(home)}.{_quote(names.sequence)}"
    # Every fence handed out before: in the table, or drawn by the sequence (0004's rewrite).
    floor = int(
        _scalar(
            f"SELECT GREATEST((SELECT max(fence) FROM {t}),"
            f" (SELECT {v4._timeline_fence('last_value')} FROM {sequence}), 0)"
        )
        or 0
    )

    def fill(body: str) -> str:
        return (
            body.replace("@t@", t)
            .replace("@floor@", str(floor))
            .replace("@channel@", channel.replace("'", "''"))
            .replace("@renew@", fn("renew"))
        )

    if not distributed:
        for trigger in ("update", "insert"):
            _ddl(f"DROP TRIGGER IF EXISTS {_quote(f'{table}_fence_timeline_{trigger}')} ON {t}")
        _ddl(f"DROP FUNCTION IF EXISTS {fn('fence_timeline')}()")
        _scalar(f"SELECT create_distributed_table({_literal(t)}, 'key')")
        _scalar(f"SELECT truncate_local_data_after_distributing_table({_literal(t)})")
    for suffix, arguments, columns, body in (*ONE_KEY, *COORDINATOR):
        _ddl(_function(fn(suffix), arguments, columns, fill(body)))
    for kind, suffix, arrays, one, row in BATCHES:
        body = _batch(kind, fill(one.replace("@fn@", fn(suffix))), row)
        _ddl(_function(fn(f"batch_{suffix}"), (*arrays, "integer"), _WRITE_ROW, body))
    for suffix, arguments, _, _ in COORDINATOR:
        _ddl(f"GRANT EXECUTE ON FUNCTION {fn(suffix)}({', '.join(arguments)}) TO PUBLIC")
    one_key = [(s, a) for s, a, _, _ in ONE_KEY] + list(READS)
    for suffix, arguments in one_key:
        signature = f"{fn(suffix)}({', '.join(arguments)})"
        _ddl(f"GRANT EXECUTE ON FUNCTION {signature} TO PUBLIC")
        _scalar(
            f"SELECT create_distributed_function({_literal(signature)}, '$1',"
            f" colocate_with := {_literal(t)})"
        )


def downgrade() -> None:
    if not _citus():
        return
    names = migration_names()
    table, schema = names.table, names.schema
    home = _home(table, schema)
    t = f"{_quote(home)}.{_quote(table)}"

    def fn(suffix: str) -> str:
        return f"{_quote(home)}.{_quote(f'{table}_{suffix}')}"

    v5 = _revision("0005_pooler_functions.py")
    v6 = _revision("0006_qualified_names.py")
    doomed = [(s, a) for s, a, _, _ in (*ONE_KEY, *COORDINATOR)] + list(READS)
    doomed += [(f"batch_{s}", (*a, "integer")) for _, s, a, _, _ in BATCHES]
    doomed.append(("batch_read", ("bytea[]",)))
    for suffix, arguments in doomed:
        _ddl(f"DROP FUNCTION IF EXISTS {fn(suffix)}({', '.join(arguments)})")
    _scalar(f"SELECT undistribute_table({_literal(t)})")
    # 0006's functions (0005's names and grants, 0006's bodies) and 0004's triggers, as 0006
    # made them; then the sequence above every fence handed out (0004 keeps rewrites above it).
    v5.upgrade()
    channel = v6._channel(table, schema)
    statements = []
    for f in v5.FUNCTIONS:
        statement = (
            v6.STATEMENTS[f.suffix]
            .replace("@table@", f'@home@."{table}"')
            .replace("@sequence@", f'@home@."{table}_fence_seq"')
            .replace("@channel@", channel)
        )
        statements.append(v6._function(f"{table}_{f.suffix}", f.arguments, f.columns, statement))
    v6._in_home(table, schema, [*statements, *v6._trigger_ddl(table)])
    sequence = f"{_quote(home)}.{_quote(names.sequence)}"
    _scalar(
        f"SELECT pg_catalog.setval({_literal(sequence)}::pg_catalog.regclass,"
        f" GREATEST((SELECT max(fence) FROM {t}), (SELECT last_value FROM {sequence})))"
    )
