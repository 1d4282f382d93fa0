"""The PostgreSQL statement catalogue: every statement the provider sends, built once per table.

Each lease operation is one statement, run in autocommit; its condition is evaluated under the
row lock that the statement takes (PostgreSQL re-checks a locked row's newest version). Time is
always ``clock_timestamp()``: the server's clock when the row is judged, not the statement's or
the transaction's start. Parameters are positional (``$1``...), keys and owners are ``bytea``.

A release does not delete the row: it sets ``expires_at`` to now. Rows therefore only disappear
through `purge`, which leaves rows alone until they have been expired for a grace period; that is
what keeps fences strictly increasing per key even when an insert races a deletion (an insert
draws its fence before it reaches the index, so it must never follow a deletion it did not see).
Every object is named in full, so that no session setting and no co-tenant can change what a
statement does: relations and the sequence carry their schema (`build_catalogue` is given the
schema the provider resolved, `sql_lease._sqlprovider.schema_home`), functions, operators and
types come from ``pg_catalog`` explicitly (``OPERATOR(pg_catalog.=)``,
``pg_catalog.clock_timestamp()``; a look-alike ``public."="(bytea, bytea)`` or
``public.nextval(text)`` earlier on the search path is never a candidate).
`sql_lease.backends.postgres.sqlnames` holds the spellings. The catalogue of a table whose
schema is known also holds the calls of its server functions that pooler mode sends instead of
the hot statements (`functions`).

Plain data: no I/O, no driver.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from ...catalogue import (
    Catalogue,
    Statement,
    decode_acquire,
    decode_force_release,
    decode_holder,
    decode_lease,
    decode_lease_state,
    decode_list_live,
    decode_now,
    decode_one,
    decode_owner,
    decode_released,
    decode_renewal,
    decode_renewed_pair,
)
from ...schema import fence_sequence_name, notify_channel
from .. import quote_ident
from .batch import build_batches
from .citus_calls import distributed_calls
from .counting import build_counting
from .functions import server_calls
from .sqlnames import (
    BYTEA,
    EQ,
    GE,
    GT,
    LE,
    LT,
    NOW,
    add_millis,
    minus_millis,
    nextval,
    notify,
    unnest,
)

__all__ = ["HOME_SQL", "MAX_BATCH", "build_catalogue", "guard_sql", "quote_ident"]

MAX_BATCH: Final = 50_000  # pairs per renew statement

#: Where table $1 lives when the provider was given no schema: the first schema of the
#: session's *default* search path (``reset_val``: the role's and database's setting, not a
#: ``SET search_path`` a previous client of a pooled server connection left behind, set for
#: this statement only with ``set_config(..., true)``) that holds a table of that name, never
#: a temporary one. One statement: the ``LATERAL`` call reads the path after it was reset.
HOME_SQL: Final = """
SELECT p.nspname::pg_catalog.text AS home
FROM (
    SELECT pg_catalog.set_config('search_path', s.reset_val, true) AS path
    FROM pg_catalog.pg_settings AS s WHERE s.name OPERATOR(pg_catalog.=) 'search_path'
) AS r,
LATERAL pg_catalog.unnest(pg_catalog.current_schemas(r.path IS NULL))
    WITH ORDINALITY AS p(nspname, n)
WHERE pg_catalog.to_regclass(pg_catalog.format('%I.%I', p.nspname, $1::pg_catalog.text))
      IS NOT NULL
  AND pg_catalog.left(p.nspname::pg_catalog.text, 8) OPERATOR(pg_catalog.<>) 'pg_temp_'
ORDER BY p.n LIMIT 1
""".strip()


def guard_sql(table: str) -> str:
    """The guard for an already quoted table: (:key, :fence) -> one row when that fence is
    the live fence of the key, read ``FOR SHARE`` (kept so until the transaction ends)."""
    return (
        f"SELECT 1 FROM {table} WHERE key {EQ} :key AND fence {EQ} :fence"
        f" AND expires_at {GT} {NOW} FOR SHARE"
    )


def build_catalogue(
    table_name: str, schema: str | None = None, home: str | None = None
) -> Catalogue:
    """Build the PostgreSQL catalogue for ``schema.table_name``.

    ``home`` is the schema the table was found in when the caller gave no ``schema``
    (`sql_lease._sqlprovider.schema_home`): the statements name it, the NOTIFY channel stays the
    one of ``schema`` (None), as every client of the table computes it. Without either, the table is
    left unqualified (a catalogue that is only ever sent once its home is known).
    """
    t = quote_ident(table_name)
    seq = quote_ident(fence_sequence_name(table_name))
    where = schema if schema is not None else home
    if where is not None:
        t = f"{quote_ident(where)}.{t}"
        seq = f"{quote_ident(where)}.{seq}"
    channel = notify_channel(table_name, schema)
    # Literals built from validated identifier characters only.
    next_fence = nextval(seq)
    live = f"expires_at {GT} {NOW}"

    def notifying(update: str, columns: str) -> str:
        # NOTIFY serialises committing transactions database-wide, so only a change to a key
        # that someone is waiting for (`wanted_until` in the future) sends one. A top-level
        # UPDATE (not a CTE) keeps the common case as cheap as a plain conditional update.
        return (
            f"{update} RETURNING {columns}, (CASE WHEN wanted_until {GT} {NOW} THEN "
            f"{notify(channel, 'key')} END) IS NOT NULL AS notified"
        )

    # Acquire: `cur` reads the row in the statement's snapshot. An absent key is inserted (the
    # insert draws a fence only when it will try to insert); an expired or own row is updated
    # under its row lock. A live row of another holder matches neither, so a failed acquire takes
    # no lock and writes nothing (the update is gated on the snapshot row, so it does not even
    # look the key up again). Rows out: an `acquired` row from ins or upd, then the snapshot
    # holder if live. When neither says anything definite (a concurrent writer committed after
    # the snapshot), the caller runs the statement again with a fresh snapshot.
    acquire = f"""
WITH cur AS MATERIALIZED (
    SELECT owner, fence, expires_at, {live} AS live
    FROM {t} WHERE key {EQ} $1
), ins AS (
    INSERT INTO {t} AS l (key, owner, fence, expires_at, acquired_at)
    SELECT $1, $2, {next_fence}, {add_millis("$3::bigint")}, {NOW}
    WHERE NOT EXISTS (SELECT FROM cur)
    ON CONFLICT (key) DO NOTHING
    RETURNING l.fence, l.expires_at
), upd AS (
    UPDATE {t} AS l SET
        owner = $2,
        fence = CASE WHEN l.owner {EQ} $2 AND l.expires_at {GT} {NOW}
                     THEN l.fence ELSE {next_fence} END,
        acquired_at = CASE WHEN l.owner {EQ} $2 AND l.expires_at {GT} {NOW}
                           THEN l.acquired_at ELSE {NOW} END,
        expires_at = {add_millis("$3::bigint")}
    WHERE (SELECT owner {EQ} $2 OR NOT live FROM cur)
      AND l.key {EQ} $1 AND (l.owner {EQ} $2 OR l.expires_at {LE} {NOW})
    RETURNING l.fence, l.expires_at
)
SELECT true AS acquired, fence, expires_at, NULL::{BYTEA} AS holder FROM ins
UNION ALL SELECT true, fence, expires_at, NULL FROM upd
UNION ALL SELECT false, fence, expires_at, owner FROM cur WHERE live
""".strip()

    renew_many = f"""
UPDATE {t} AS l SET expires_at = {add_millis("$3::bigint")}
FROM {unnest(f"$1::{BYTEA}[]", f"$2::{BYTEA}[]")} AS i(key, owner)
WHERE l.key {EQ} i.key AND l.owner {EQ} i.owner AND l.expires_at {GT} {NOW}
RETURNING l.key, l.owner, l.fence, l.expires_at
""".strip()

    transfer_update = f"""UPDATE {t} SET
    owner = $3,
    fence = CASE WHEN owner {EQ} $3 THEN fence ELSE {next_fence} END,
    acquired_at = CASE WHEN owner {EQ} $3 THEN acquired_at ELSE {NOW} END,
    expires_at = {add_millis("$4::bigint")}
WHERE key {EQ} $1 AND owner {EQ} $2 AND {live}"""

    renew_many_statement = Statement(
        "renew_many",
        renew_many,
        ("keys", "owners", "ttl_ms"),
        ("key", "owner", "fence", "expires_at"),
        decode_renewed_pair,
    )
    k, ko, kot = ("key",), ("key", "owner"), ("key", "owner", "ttl_ms")
    cat = Catalogue(
        dialect="postgresql",
        table=t,
        channel=channel,
        acquire=Statement(
            "acquire", acquire, kot, ("acquired", "fence", "expires_at", "holder"), decode_acquire
        ),
        get_owner=Statement(
            "get_owner",
            f"SELECT owner FROM {t} WHERE key {EQ} $1 AND {live}",
            k,
            ("owner",),
            decode_owner,
        ),
        get_lease=Statement(
            "get_lease",
            f"SELECT owner, fence, expires_at, acquired_at FROM {t} WHERE key {EQ} $1 AND {live}",
            k,
            ("owner", "fence", "expires_at", "acquired_at"),
            decode_lease,
        ),
        holder=Statement(
            "holder",
            f"SELECT owner, fence, expires_at FROM {t} WHERE key {EQ} $1 AND {live}",
            k,
            ("owner", "fence", "expires_at"),
            decode_holder,
        ),
        release=Statement(
            "release",
            notifying(
                f"UPDATE {t} SET expires_at = {NOW} WHERE key {EQ} $1 AND owner {EQ} $2 AND {live}",
                "fence, expires_at",
            ),
            ko,
            ("fence", "expires_at", "notified"),
            decode_released,
        ),
        renew=Statement(
            "renew",
            f"UPDATE {t} SET expires_at = {add_millis('$3::bigint')}"
            f" WHERE key {EQ} $1 AND owner {EQ} $2 AND {live} RETURNING fence, expires_at",
            kot,
            ("fence", "expires_at"),
            decode_renewal,
        ),
        transfer=Statement(
            "transfer",
            notifying(transfer_update, "fence, expires_at"),
            ("key", "from_owner", "to_owner", "ttl_ms"),
            ("fence", "expires_at", "notified"),
            decode_renewal,
        ),
        renew_many=lambda _: renew_many_statement,
        renew_many_args=_renew_many_args,
        force_release=Statement(
            "force_release",
            notifying(
                f"UPDATE {t} SET expires_at = {NOW} WHERE key {EQ} $1 AND {live}",
                "owner, fence, expires_at",
            ),
            k,
            ("owner", "fence", "expires_at", "notified"),
            decode_force_release,
        ),
        list_live=Statement(
            "list_live",
            f"""
SELECT key, owner, fence, expires_at, acquired_at, {NOW} AS now FROM {t}
WHERE key {GE} $1 AND ($2::{BYTEA} IS NULL OR key {LT} $2) AND {live}
ORDER BY key LIMIT $3
""".strip(),
            ("from_key", "below_key", "limit"),
            ("key", "owner", "fence", "expires_at", "acquired_at", "now"),
            decode_list_live,
        ),
        list_states=Statement(
            "list_states",
            f"""
SELECT key, owner, fence, expires_at, acquired_at, wanted_until, {NOW} AS now FROM {t}
WHERE key {GE} $1 AND ($2::{BYTEA} IS NULL OR key {LT} $2)
  AND (expires_at {GT} {minus_millis("$4::bigint")} OR wanted_until {GT} {NOW})
ORDER BY key LIMIT $3
""".strip(),
            ("from_key", "below_key", "limit", "ended_within_ms"),
            ("key", "owner", "fence", "expires_at", "acquired_at", "wanted_until", "now"),
            decode_lease_state,
        ),
        purge_batch=Statement(
            "purge_batch",
            f"""
WITH doomed AS (
    SELECT key FROM {t}
    WHERE expires_at {LT} {minus_millis("$1::bigint")}
    LIMIT $2 FOR UPDATE SKIP LOCKED
)
DELETE FROM {t} AS l USING doomed
WHERE l.key {EQ} doomed.key
  AND l.expires_at {LT} {minus_millis("$1::bigint")}
RETURNING 1
""".strip(),
            ("min_age_ms", "batch"),
            ("?column?",),
            decode_one,
        ),
        want=Statement(
            "want",
            f"""
UPDATE {t} SET wanted_until = GREATEST(wanted_until, {add_millis("$2::bigint")})
WHERE key {EQ} $1 AND {live}
RETURNING owner, fence, expires_at
""".strip(),
            ("key", "wait_ms"),
            ("owner", "fence", "expires_at"),
            decode_holder,
        ),
        now=Statement(
            "now", f"SELECT {NOW} AS clock_timestamp", (), ("clock_timestamp",), decode_now
        ),
        guard=Statement("guard", guard_sql(t), ("key", "fence"), ("?column?",), decode_one),
        max_batch=MAX_BATCH,
        batches=build_batches(t, next_fence, channel),
        counting=build_counting(t, seq, channel),
    )
    if where is None:
        return cat  # never sent: the provider finds the table's schema first
    return replace(
        cat,
        server_calls=server_calls(cat, table_name, where),
        distributed=distributed_calls(cat, table_name, where),
    )


def _renew_many_args(pairs: list[tuple[bytes, bytes]], ttl: int) -> tuple[object, ...]:
    return [k for k, _ in pairs], [o for _, o in pairs], ttl
