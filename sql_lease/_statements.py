"""The statement catalogue: every SQL statement the provider sends, built once per table.

Each lease operation is one statement, run in autocommit; its condition is evaluated under the
row lock that the statement takes (PostgreSQL re-checks a locked row's newest version). Time is
always ``clock_timestamp()``: the server's clock when the row is judged, not the statement's or
the transaction's start. Parameters are positional (``$1``...), keys and owners are ``bytea``.

A release does not delete the row: it sets ``expires_at`` to now. Rows therefore only disappear
through `purge`, which leaves rows alone until they have been expired for a grace period; that is
what keeps fences strictly increasing per key even when an insert races a deletion (an insert
draws its fence before it reaches the index, so it must never follow a deletion it did not see).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .schema import fence_sequence_name, notify_channel

__all__ = ["Statements", "build_statements", "quote_ident"]

_DERIVED = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def quote_ident(name: str) -> str:
    """Quote an identifier built from validated names (derived names may exceed the 40
    characters allowed for a table or schema name, never PostgreSQL's 63)."""
    if not _DERIVED.fullmatch(name):
        raise ValueError(f"not a plain identifier: {name!r}")
    return '"' + name + '"'


@dataclass(frozen=True, slots=True)
class Statements:
    """SQL text for one leases table. Result columns are documented per statement."""

    table: str
    channel: str
    #: ($1 key, $2 owner, $3 ttl_ms) -> rows (acquired, fence, expires_at, holder); see acquire.
    acquire: str
    #: ($1 key) -> (owner) of the live lease, or no row.
    get_owner: str
    #: ($1 key) -> (owner, fence, expires_at, acquired_at) of the live lease, or no row.
    get_lease: str
    #: ($1 key) -> (owner, fence, expires_at) of the live lease, or no row: the read an acquire
    #: of a contended key starts with (see `_contention`).
    holder: str
    #: ($1 key, $2 owner) -> (fence, released_at) when a live lease of owner ended, or no row.
    release: str
    #: ($1 key, $2 owner, $3 ttl_ms) -> (fence, expires_at) when renewed, or no row.
    renew: str
    #: ($1 key, $2 from, $3 to, $4 ttl_ms) -> (fence, expires_at) when transferred, or no row.
    transfer: str
    #: For n pairs: the statement; its arguments come from `renew_many_args`. Rows out:
    #: (key, owner, fence, expires_at) per renewed pair. At most `max_batch` pairs a statement.
    renew_many: Callable[[int], str]
    renew_many_args: Callable[[list[tuple[bytes, bytes]], int], tuple[object, ...]]
    #: ($1 key) -> (owner, fence, released_at) when a live lease was ended, or no row.
    force_release: str
    #: ($1 from_key, $2 below_key or NULL, $3 limit) -> live leases in key order:
    #: (key, owner, fence, expires_at, acquired_at, now).
    list_live: str
    #: ($1 min_age_ms, $2 batch) -> one row per row deleted (expired for at least min_age).
    purge_batch: str
    #: ($1 key, $2 wait_ms) -> (owner, fence, expires_at) of the live holder; marks the key
    #: wanted so that its release or transfer sends a notification.
    want: str
    #: () -> (now) the database clock.
    now: str
    max_batch: int = 50_000


def build_statements(table_name: str, schema: str | None = None) -> Statements:
    """Build the PostgreSQL statements for ``schema.table_name``."""
    t = quote_ident(table_name)
    seq = quote_ident(fence_sequence_name(table_name))
    if schema is not None:
        t = f"{quote_ident(schema)}.{t}"
        seq = f"{quote_ident(schema)}.{seq}"
    channel = notify_channel(table_name, schema)
    # Literals built from validated identifier characters only.
    nextval = f"nextval('{seq}')"
    expiry = "clock_timestamp() + {p}::bigint * interval '1 millisecond'"
    live = "expires_at > clock_timestamp()"

    def notifying(update: str, columns: str) -> str:
        # NOTIFY serialises committing transactions database-wide, so only a change to a key
        # that someone is waiting for (`wanted_until` in the future) sends one. A top-level
        # UPDATE (not a CTE) keeps the common case as cheap as a plain conditional update.
        return (
            f"{update} RETURNING {columns}, (CASE WHEN wanted_until > clock_timestamp() THEN "
            f"pg_notify('{channel}', encode(key, 'hex'))::text END) IS NOT NULL AS notified"
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
    FROM {t} WHERE key = $1
), ins AS (
    INSERT INTO {t} AS l (key, owner, fence, expires_at, acquired_at)
    SELECT $1, $2, {nextval}, {expiry.format(p="$3")}, clock_timestamp()
    WHERE NOT EXISTS (SELECT FROM cur)
    ON CONFLICT (key) DO NOTHING
    RETURNING l.fence, l.expires_at
), upd AS (
    UPDATE {t} AS l SET
        owner = $2,
        fence = CASE WHEN l.owner = $2 AND l.expires_at > clock_timestamp()
                     THEN l.fence ELSE {nextval} END,
        acquired_at = CASE WHEN l.owner = $2 AND l.expires_at > clock_timestamp()
                           THEN l.acquired_at ELSE clock_timestamp() END,
        expires_at = {expiry.format(p="$3")}
    WHERE (SELECT owner = $2 OR NOT live FROM cur)
      AND l.key = $1 AND (l.owner = $2 OR l.expires_at <= clock_timestamp())
    RETURNING l.fence, l.expires_at
)
SELECT true AS acquired, fence, expires_at, NULL::bytea AS holder FROM ins
UNION ALL SELECT true, fence, expires_at, NULL FROM upd
UNION ALL SELECT false, fence, expires_at, owner FROM cur WHERE live
""".strip()

    renew_many = f"""
UPDATE {t} AS l SET expires_at = {expiry.format(p="$3")}
FROM unnest($1::bytea[], $2::bytea[]) AS i(key, owner)
WHERE l.key = i.key AND l.owner = i.owner AND l.expires_at > clock_timestamp()
RETURNING l.key, l.owner, l.fence, l.expires_at
""".strip()

    transfer_update = f"""UPDATE {t} SET
    owner = $3,
    fence = CASE WHEN owner = $3 THEN fence ELSE {nextval} END,
    acquired_at = CASE WHEN owner = $3 THEN acquired_at ELSE clock_timestamp() END,
    expires_at = {expiry.format(p="$4")}
WHERE key = $1 AND owner = $2 AND {live}"""

    return Statements(
        table=t,
        channel=channel,
        acquire=acquire,
        get_owner=f"SELECT owner FROM {t} WHERE key = $1 AND {live}",
        get_lease=(
            f"SELECT owner, fence, expires_at, acquired_at FROM {t} WHERE key = $1 AND {live}"
        ),
        holder=f"SELECT owner, fence, expires_at FROM {t} WHERE key = $1 AND {live}",
        release=notifying(
            f"UPDATE {t} SET expires_at = clock_timestamp()"
            f" WHERE key = $1 AND owner = $2 AND {live}",
            "fence, expires_at",
        ),
        renew=(
            f"UPDATE {t} SET expires_at = {expiry.format(p='$3')}"
            f" WHERE key = $1 AND owner = $2 AND {live} RETURNING fence, expires_at"
        ),
        transfer=notifying(transfer_update, "fence, expires_at"),
        renew_many=lambda _: renew_many,
        renew_many_args=_renew_many_args,
        force_release=notifying(
            f"UPDATE {t} SET expires_at = clock_timestamp() WHERE key = $1 AND {live}",
            "owner, fence, expires_at",
        ),
        list_live=f"""
SELECT key, owner, fence, expires_at, acquired_at, clock_timestamp() AS now FROM {t}
WHERE key >= $1 AND ($2::bytea IS NULL OR key < $2) AND {live}
ORDER BY key LIMIT $3
""".strip(),
        purge_batch=f"""
WITH doomed AS (
    SELECT key FROM {t}
    WHERE expires_at < clock_timestamp() - $1::bigint * interval '1 millisecond'
    LIMIT $2 FOR UPDATE SKIP LOCKED
)
DELETE FROM {t} AS l USING doomed
WHERE l.key = doomed.key
  AND l.expires_at < clock_timestamp() - $1::bigint * interval '1 millisecond'
RETURNING 1
""".strip(),
        want=f"""
UPDATE {t} SET wanted_until = GREATEST(
    wanted_until, clock_timestamp() + $2::bigint * interval '1 millisecond')
WHERE key = $1 AND {live}
RETURNING owner, fence, expires_at
""".strip(),
        now="SELECT clock_timestamp()",
    )


def _renew_many_args(pairs: list[tuple[bytes, bytes]], ttl: int) -> tuple[object, ...]:
    return [k for k, _ in pairs], [o for _, o in pairs], ttl
