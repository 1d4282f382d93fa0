"""On Citus: counting leases, metadata and all-or-none calls as functions Citus can run.

Only a PostgreSQL database where the ``citus`` extension is installed and the leases table is
distributed (0008) changes (plain PostgreSQL, MariaDB, SQLite and offline ``--sql``: nothing;
like 0008, the check is a query). 0009's counting statements read ``clock_timestamp()`` and
``nextval()`` inside ``ON CONFLICT DO UPDATE`` / ``UPDATE`` of the distributed table, which
Citus refuses; and the all-or-none statements lock rows of several shards in one statement.

One-key functions (``<table>_count_acquire``, ``_count_holders``, ``_count_renew``,
``_count_release``, ``_count_transfer``: the arguments and result columns of 0009's
statements), distributed with the key as their distribution argument and colocated with the
table, so a call to the coordinator is delegated whole to the worker holding the key. Each
locks the key's row first, then reads the worker's clock once into a variable (a clock read
before the lock would let a call queued behind a release judge the released grant live), and
writes values computed in plpgsql: the row keeps 0009's layout (the reserved owner ``\\xff``,
``slot_limit``, ``holders`` as a ``jsonb`` array of grants ordered by fence). A new grant's
fence is 0008's: ``GREATEST(the row's fence + 1, the clock in microseconds, FLOOR)``, so plain
and counting fences of one key share one strictly increasing order across shard moves and
failover (the row moves with its shard; a promoted worker's clock has moved on), and ``FLOOR``
(computed as 0008 computes its own) keeps every new fence above every fence handed out before.

All-or-none functions (``<table>_count_acquire_all``, ``_count_release_all``,
``_count_ensure``): plain coordinator functions (not distributed: their keys lie on several
workers) taking an array of keys. They lock the keys' rows one by one in key order (so two
all-or-none calls never wait for each other in a cycle; a missing row is first inserted as an
expired placeholder, as 0009's ``ensure`` does), then write every key or none; the whole call
is one distributed transaction, committed on every worker it wrote to by two-phase commit.
Their expiries are judged by the coordinator's clock, read after the locks (Citus evaluates a
volatile function on the coordinator): the nodes' clocks must agree, as 0008 already needs
after a shard move. Each of their statements names one key, so it runs on one shard, also
under pooler mode's ``plan_cache_mode = force_generic_plan`` (Citus prunes a generic plan by
the key's value when it runs; Citus's counters show single-shard executions only, either way).

Downgrade (Citus only) drops these functions (counting rows left behind read as leases of the
foreign owner ``\\xff`` until they expire, as after 0009's downgrade).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

from sql_lease.migrate import migration_names

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Pieces of the bodies. In every body: ``c`` the key's row (owner, fence, expires_at,
# acquired_at, slot_limit, holders, wanted_until), ``t_now`` the clock read after its lock and
# ``now_us`` the same in microseconds since 1970; ``@t@`` is the table, ``@floor@`` the fence
# floor, ``@channel@`` the NOTIFY channel. Grants are 0009's objects: o (owner, hex), f (fence),
# e (expiry, µs), a (grant time, µs), m (metadata, hex or null), s (metadata was a str).
_RESERVED = "pg_catalog.decode('ff', 'hex')"
_US = "(extract(epoch FROM t_now) * 1000000)::bigint"
_ROW = (
    "SELECT l.owner, l.fence, l.expires_at, l.acquired_at, l.slot_limit, l.holders,"
    " l.wanted_until INTO c FROM @t@ AS l WHERE l.key = $1"
)
_FENCE = "GREATEST(c.fence + 1, now_us, @floor@)"


def _ts(us: str) -> str:
    """Microseconds since 1970 as a timestamptz (0009's conversion, exact below 2^53)."""
    micro = "interval '1 microsecond'"
    return f"(to_timestamp(0::double precision) + ({us})::double precision * {micro})"


def _later(ttl: str) -> str:
    return f"(now_us + {ttl}::bigint * 1000)"


def _hex(b: str) -> str:
    return f"encode({b}, 'hex')"


#: The live grants of ``c`` (a live plain lease as one grant), as 0009's statements read them.
_LIVE = f"""CASE
    WHEN c.owner = {_RESERVED} AND c.expires_at > t_now THEN (
      SELECT coalesce(jsonb_agg(lh.value ORDER BY (lh.value ->> 'f')::bigint), '[]'::jsonb)
      FROM jsonb_array_elements(c.holders) AS lh WHERE (lh.value ->> 'e')::bigint > now_us)
    WHEN c.expires_at > t_now THEN jsonb_build_array(jsonb_build_object(
      'o', {_hex("c.owner")}, 'f', c.fence,
      'e', (extract(epoch FROM c.expires_at) * 1000000)::bigint,
      'a', (extract(epoch FROM c.acquired_at) * 1000000)::bigint, 'm', NULL, 's', NULL))
    ELSE '[]'::jsonb END"""


def _has(arr: str, owner: str, live: bool = False) -> str:
    alive = " AND (hv.value ->> 'e')::bigint > now_us" if live else ""
    return (
        f"EXISTS (SELECT FROM jsonb_array_elements({arr}) AS hv"
        f" WHERE hv.value ->> 'o' = {_hex(owner)}{alive})"
    )


def _grant(owner: str, fence: str, ttl: str, meta: str, kind: str) -> str:
    return (
        f"jsonb_build_object('o', {_hex(owner)}, 'f', {fence}, 'e', {_later(ttl)},"
        f" 'a', now_us, 'm', {_hex(meta)}, 's', {kind}::boolean)"
    )


def _with_me(arr: str, owner: str, ttl: str, meta: str, kind: str) -> str:
    """``arr`` with ``owner``'s grant renewed to now + ttl (its metadata replaced if given)."""
    return f"""(SELECT jsonb_agg(CASE WHEN wv.value ->> 'o' = {_hex(owner)}
      THEN wv.value || jsonb_build_object('e', {_later(ttl)})
        || CASE WHEN {meta} IS NULL THEN '{{}}'::jsonb
           ELSE jsonb_build_object('m', {_hex(meta)}, 's', {kind}::boolean) END
      ELSE wv.value END ORDER BY (wv.value ->> 'f')::bigint)
    FROM jsonb_array_elements({arr}) AS wv)"""


def _without(arr: str, owner: str) -> str:
    return (
        "(SELECT coalesce(jsonb_agg(rv.value ORDER BY (rv.value ->> 'f')::bigint), '[]'::jsonb)"
        f" FROM jsonb_array_elements({arr}) AS rv WHERE rv.value ->> 'o' <> {_hex(owner)})"
    )


def _latest(arr: str, fallback: str) -> str:
    """The latest expiry of the grants ``arr``, else ``fallback``."""
    top = _ts("max((xv.value ->> 'e')::bigint)")
    return f"coalesce((SELECT {top} FROM jsonb_array_elements({arr}) AS xv), {fallback})"


_COUNT_ROW = (
    "owner bytea",
    "slot_limit integer",
    "holders text",
    "fence bigint",
    "expires_at timestamptz",
)
_DECLARE = """\
DECLARE
  t_now timestamptz;
  now_us bigint;
  c record;
  cur jsonb;
  h jsonb;
  f bigint;
  e timestamptz;
"""


def _locked(indent: str = "  ", where: str = "") -> str:
    """Lock the key's row (``where``: more conditions), then read the clock."""
    return (
        f"{indent}{_ROW}{where} FOR UPDATE;\n"
        f"{indent}t_now := clock_timestamp();  -- after the row lock\n"
        f"{indent}now_us := {_US};\n"
    )


#: The one-key functions: suffix, argument types, result columns, body.
ONE_KEY: tuple[tuple[str, tuple[str, ...], tuple[str, ...], str], ...] = (
    (
        "count_acquire",
        ("bytea", "bytea", "bigint", "integer", "bytea", "boolean"),
        _COUNT_ROW,
        f"""{_DECLARE}  mine boolean;
  take boolean;
BEGIN
  LOOP
{_locked("    ")}    IF NOT FOUND THEN
      f := GREATEST(now_us, @floor@);
      h := jsonb_build_array({_grant("$2", "f", "$3", "$5", "$6")});
      e := {_ts(_later("$3"))};
      INSERT INTO @t@ AS l (key, owner, fence, expires_at, acquired_at, slot_limit, holders)
      VALUES ($1, {_RESERVED}, f, e, t_now, $4, h) ON CONFLICT (key) DO NOTHING;
      IF FOUND THEN
        RETURN QUERY SELECT {_RESERVED}, $4, h::text, f, e;
        RETURN;
      END IF;
      CONTINUE;  -- another call inserted it first: lock its row
    END IF;
    EXIT;
  END LOOP;
  cur := {_LIVE};
  mine := {_has("cur", "$2")};
  take := (jsonb_array_length(cur) = 0
           OR CASE WHEN c.owner = {_RESERVED} THEN c.slot_limit ELSE 1 END = $4)
          AND (mine OR jsonb_array_length(cur) < $4);
  IF NOT take THEN  -- refused (or the limits differ): a counting row's expired grants pruned
    IF c.owner = {_RESERVED} THEN
      UPDATE @t@ AS l SET holders = cur WHERE l.key = $1;
      RETURN QUERY SELECT c.owner, c.slot_limit, cur::text, c.fence, c.expires_at;
    ELSE
      RETURN QUERY SELECT c.owner, c.slot_limit, NULL::text, c.fence, c.expires_at;
    END IF;
    RETURN;
  END IF;
  IF mine THEN
    f := c.fence;
    h := {_with_me("cur", "$2", "$3", "$5", "$6")};
  ELSE
    f := {_FENCE};
    h := cur || jsonb_build_array({_grant("$2", "f", "$3", "$5", "$6")});
  END IF;
  e := {_latest("h", "c.expires_at")};
  UPDATE @t@ AS l SET owner = {_RESERVED}, fence = f, expires_at = e,
    acquired_at = CASE WHEN mine THEN c.acquired_at ELSE t_now END, slot_limit = $4, holders = h
  WHERE l.key = $1;
  RETURN QUERY SELECT {_RESERVED}, $4, h::text, f, e;
END""",
    ),
    (
        "count_holders",
        ("bytea",),
        _COUNT_ROW,
        f"""{_DECLARE}BEGIN
  {_ROW};
  IF NOT FOUND THEN
    RETURN;
  END IF;
  t_now := clock_timestamp();
  now_us := {_US};
  IF c.expires_at > t_now THEN
    RETURN QUERY SELECT c.owner, c.slot_limit, ({_LIVE})::text, c.fence, c.expires_at;
  END IF;
END""",
    ),
    (
        "count_renew",
        ("bytea", "bytea", "bigint"),
        _COUNT_ROW,
        f"""{_DECLARE}BEGIN
{_locked()}  IF NOT FOUND OR c.owner <> {_RESERVED} OR c.expires_at <= t_now
     OR NOT {_has("c.holders", "$2", live=True)} THEN
    RETURN;
  END IF;
  cur := {_LIVE};
  h := {_with_me("cur", "$2", "$3", "NULL::bytea", "NULL")};
  e := {_latest("h", "c.expires_at")};
  UPDATE @t@ AS l SET holders = h, expires_at = e WHERE l.key = $1;
  RETURN QUERY SELECT c.owner, c.slot_limit, h::text, c.fence, e;
END""",
    ),
    (
        "count_release",
        ("bytea", "bytea"),
        ("released_at timestamptz", "fence bigint", "notified boolean"),
        f"""{_DECLARE}  wanted boolean;
BEGIN
{_locked(where=f" AND l.owner = {_RESERVED}")}  IF NOT FOUND THEN
    RETURN;
  END IF;
  -- the owner's grant, live or expired, in the row as locked
  f := (SELECT (gv.value ->> 'f')::bigint FROM jsonb_array_elements(c.holders) AS gv
        WHERE gv.value ->> 'o' = {_hex("$2")} LIMIT 1);
  IF f IS NULL THEN
    RETURN;
  END IF;
  cur := {_LIVE};
  h := {_without("cur", "$2")};
  e := {_latest("h", "t_now")};
  UPDATE @t@ AS l SET holders = h, expires_at = e WHERE l.key = $1;
  wanted := coalesce(c.wanted_until > t_now, false);
  IF wanted THEN
    PERFORM pg_notify('@channel@', encode($1, 'hex'));
  END IF;
  RETURN QUERY SELECT t_now, f, wanted;
END""",
    ),
    (
        "count_transfer",
        ("bytea", "bytea", "bytea", "bigint", "bytea", "boolean"),
        _COUNT_ROW,
        f"""{_DECLARE}  same boolean := $2 = $3;
  kept jsonb;
  lim integer;
BEGIN
{_locked()}  IF NOT FOUND THEN
    RETURN;
  END IF;
  IF c.owner = {_RESERVED} THEN
    IF c.expires_at <= t_now OR NOT {_has("c.holders", "$2", live=True)}
       OR (NOT same AND {_has("c.holders", "$3", live=True)}) THEN
      RETURN;
    END IF;
  ELSIF NOT (c.owner = $2 AND c.expires_at > t_now AND $5 IS NOT NULL) THEN
    RETURN;  -- a plain lease is handed on as a counting row only with metadata given
  END IF;
  cur := {_LIVE};
  IF same THEN
    f := c.fence;
    h := {_with_me("cur", "$2", "$4", "$5", "$6")};
  ELSE
    f := {_FENCE};
    kept := coalesce((SELECT jsonb_build_object('m', kv.value -> 'm', 's', kv.value -> 's')
                      FROM jsonb_array_elements(cur) AS kv WHERE kv.value ->> 'o' = {_hex("$2")}),
                     '{{}}'::jsonb);
    h := {_without("cur", "$2")} || jsonb_build_array(
      jsonb_build_object('o', {_hex("$3")}, 'f', f, 'e', {_later("$4")}, 'a', now_us)
      || CASE WHEN $5 IS NULL THEN kept
         ELSE jsonb_build_object('m', {_hex("$5")}, 's', $6::boolean) END);
  END IF;
  e := {_latest("h", "c.expires_at")};
  lim := CASE WHEN c.owner = {_RESERVED} THEN c.slot_limit ELSE 1 END;
  UPDATE @t@ AS l SET owner = {_RESERVED}, fence = f, expires_at = e,
    acquired_at = CASE WHEN same THEN c.acquired_at ELSE t_now END, slot_limit = lim, holders = h
  WHERE l.key = $1;
  RETURN QUERY SELECT {_RESERVED}, lim, h::text, f, e;
END""",
    ),
)

#: The keys of an all-or-none call, distinct, in key order (the order rows are locked in).
_SORTED = "ARRAY(SELECT DISTINCT u.uk FROM unnest($1) AS u(uk) ORDER BY u.uk)"
#: Lock key ``k``'s row into ``c``, inserting an expired placeholder first when it has none.
_LOCK_OR_PLACE = f"""\
    LOOP
      SELECT l.owner, l.expires_at INTO c FROM @t@ AS l WHERE l.key = k FOR UPDATE;
      EXIT WHEN FOUND;
      t_now := clock_timestamp();
      INSERT INTO @t@ AS l (key, owner, fence, expires_at, acquired_at, slot_limit, holders)
      VALUES (k, {_RESERVED}, GREATEST({_US}, @floor@), t_now, t_now, NULL, '[]'::jsonb)
      ON CONFLICT (key) DO NOTHING;
    END LOOP;
"""

#: The coordinator functions of all-or-none calls: suffix, arguments, result columns, body.
SEVERAL_KEYS: tuple[tuple[str, tuple[str, ...], tuple[str, ...], str], ...] = (
    (
        "count_acquire_all",
        ("bytea[]", "bytea", "bigint"),
        (
            "key bytea",
            "acquired boolean",
            "fence bigint",
            "expires_at timestamptz",
            "holder bytea",
        ),
        f"""\
DECLARE
  keys bytea[] := {_SORTED};
  k bytea;
  c record;
  t_now timestamptz;
  now_us bigint;
  e timestamptz;
  f bigint;
BEGIN
  FOREACH k IN ARRAY keys LOOP
{_LOCK_OR_PLACE}    t_now := clock_timestamp();
    IF c.expires_at > t_now AND c.owner <> $2 THEN
      -- the first key in key order held by another (a counting row's: the reserved owner)
      RETURN QUERY SELECT k, false, NULL::bigint, NULL::timestamptz, c.owner;
      RETURN;
    END IF;
  END LOOP;
  -- every row locked and free or the owner's: all taken, judged by one clock read after
  t_now := clock_timestamp();
  now_us := {_US};
  e := {_ts(_later("$3"))};
  FOREACH k IN ARRAY keys LOOP
    UPDATE @t@ AS l SET owner = $2,
      fence = CASE WHEN l.owner = $2 AND l.expires_at > t_now THEN l.fence
                   ELSE GREATEST(l.fence + 1, now_us, @floor@) END,
      acquired_at = CASE WHEN l.owner = $2 AND l.expires_at > t_now THEN l.acquired_at
                         ELSE t_now END,
      expires_at = e
    WHERE l.key = k RETURNING l.fence INTO f;
    RETURN QUERY SELECT k, true, f, e, NULL::bytea;
  END LOOP;
END""",
    ),
    (
        "count_release_all",
        ("bytea[]", "bytea"),
        ("key bytea", "notified boolean"),
        f"""\
DECLARE
  keys bytea[] := {_SORTED};
  k bytea;
  c record;
  t_now timestamptz;
  wanted boolean;
BEGIN
  FOREACH k IN ARRAY keys LOOP
    SELECT l.wanted_until INTO c FROM @t@ AS l WHERE l.key = k AND l.owner = $2 FOR UPDATE;
    CONTINUE WHEN NOT FOUND;
    t_now := clock_timestamp();  -- after the row lock
    UPDATE @t@ AS l SET expires_at = t_now
    WHERE l.key = k AND l.owner = $2 AND l.expires_at > t_now;
    CONTINUE WHEN NOT FOUND;
    wanted := coalesce(c.wanted_until > t_now, false);
    IF wanted THEN
      PERFORM pg_notify('@channel@', encode(k, 'hex'));
    END IF;
    RETURN QUERY SELECT k, wanted;
  END LOOP;
END""",
    ),
    (
        "count_ensure",
        ("bytea[]",),
        ("key bytea",),
        f"""\
DECLARE
  k bytea;
  c record;
  t_now timestamptz;
BEGIN
  FOREACH k IN ARRAY {_SORTED} LOOP
{_LOCK_OR_PLACE}  END LOOP;
END""",
    ),
)


def _revision(name: str) -> ModuleType:
    """A frozen earlier revision of this directory."""
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"sql_lease_revision_0011_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _scalar(sql: str) -> object:
    return op.get_bind().exec_driver_sql(sql).scalar()


def _distributed_home() -> tuple[str, str] | None:
    """The table's schema and quoted name when it is distributed on Citus, else None."""
    context = op.get_context()
    if context.dialect.name != "postgresql" or context.as_sql:
        return None
    if not _scalar("SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')"):
        return None
    names = migration_names()
    v6 = _revision("0006_qualified_names.py")
    home = _scalar(f"SELECT {v6._home(names.table, names.schema)}")
    if not isinstance(home, str):
        raise RuntimeError(f"sql_lease: no table {names.table}: run the earlier revisions first")
    t = f"{_quote(home)}.{_quote(names.table)}"
    if not _scalar(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition"
        f" WHERE logicalrelid = {_literal(t)}::pg_catalog.regclass)"
    ):
        return None
    return home, t


def _function(name: str, arguments: Sequence[str], columns: Sequence[str], body: str) -> str:
    return (
        f"CREATE OR REPLACE FUNCTION {name}({', '.join(arguments)})"
        f" RETURNS TABLE({', '.join(columns)}) LANGUAGE plpgsql VOLATILE SECURITY INVOKER"
        " SET search_path = pg_catalog, pg_temp AS $fn$\n#variable_conflict use_column\n"
        f"{body}\n$fn$"
    )


def upgrade() -> None:
    found = _distributed_home()
    if found is None:
        return
    home, t = found
    names = migration_names()

    def fn(suffix: str) -> str:
        return f"{_quote(home)}.{_quote(f'{names.table}_{suffix}')}"

    # One connection per worker for the whole transaction: Citus refuses to propagate a
    # function (below) after a parallel multi-shard query (the floor's) in one transaction.
    op.get_bind().exec_driver_sql("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    v4 = _revision("0004_fence_timeline.py")
    channel = _revision("0006_qualified_names.py")._channel(names.table, names.schema)
    sequence = f"{_quote(home)}.{_quote(names.sequence)}"
    # Every fence handed out before, as 0008 computes its floor: in the table, or drawn by the
    # sequence before 0008.
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
        )

    bind = op.get_bind()
    for suffix, arguments, columns, body in ONE_KEY:
        bind.exec_driver_sql(_function(fn(suffix), arguments, columns, fill(body)))
        signature = f"{fn(suffix)}({', '.join(arguments)})"
        bind.exec_driver_sql(f"GRANT EXECUTE ON FUNCTION {signature} TO PUBLIC")
        _scalar(
            f"SELECT create_distributed_function({_literal(signature)}, '$1',"
            f" colocate_with := {_literal(t)})"
        )
    for suffix, arguments, columns, body in SEVERAL_KEYS:
        bind.exec_driver_sql(_function(fn(suffix), arguments, columns, fill(body)))
        signature = f"{fn(suffix)}({', '.join(arguments)})"
        bind.exec_driver_sql(f"GRANT EXECUTE ON FUNCTION {signature} TO PUBLIC")


def downgrade() -> None:
    found = _distributed_home()
    if found is None:
        return
    home, _ = found
    table = migration_names().table
    for suffix, arguments, _, _ in (*ONE_KEY, *SEVERAL_KEYS):
        name = f"{_quote(home)}.{_quote(f'{table}_{suffix}')}"
        op.get_bind().exec_driver_sql(f"DROP FUNCTION IF EXISTS {name}({', '.join(arguments)})")
