"""The statement catalogue: every SQL statement the provider sends, built once per table.

Each lease operation is one statement, run in autocommit; its condition is evaluated under the
row lock that the statement takes (PostgreSQL re-checks a locked row's newest version). Time is
always ``clock_timestamp()``: the server's clock when the row is judged, not the statement's or
the transaction's start. Parameters are positional (``$1``...), keys and owners are ``bytea``.

A release does not delete the row: it sets ``expires_at`` to now. Rows therefore only disappear
through `purge`, which leaves rows alone until they have been expired for a grace period; that is
what keeps fences strictly increasing per key even when an insert races a deletion.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._validate import check_identifier
from .schema import fence_sequence_name

__all__ = ["Statements", "build_statements", "quote_ident"]


def quote_ident(name: str) -> str:
    """Quote an already validated identifier."""
    return '"' + check_identifier("identifier", name) + '"'


@dataclass(frozen=True, slots=True)
class Statements:
    """SQL text for one leases table. Result columns are documented per statement."""

    table: str
    #: ($1 key, $2 owner, $3 ttl_ms) -> rows (acquired, fence, expires_at, holder); see acquire.
    acquire: str
    #: ($1 key) -> (owner) of the live lease, or no row.
    get_owner: str
    #: ($1 key) -> (owner, fence, expires_at, acquired_at) of the live lease, or no row.
    get_lease: str
    #: ($1 key, $2 owner) -> (fence, released_at) when a live lease of owner ended, or no row.
    release: str
    #: ($1 key, $2 owner, $3 ttl_ms) -> (fence, expires_at) when renewed, or no row.
    renew: str
    #: ($1 key, $2 from, $3 to, $4 ttl_ms) -> (fence, expires_at) when transferred, or no row.
    transfer: str
    #: () -> (now) the database clock.
    now: str


def build_statements(table_name: str, schema: str | None = None) -> Statements:
    """Build the PostgreSQL statements for ``schema.table_name``."""
    t = quote_ident(table_name)
    seq = quote_ident(fence_sequence_name(table_name))
    if schema is not None:
        t = f"{quote_ident(schema)}.{t}"
        seq = f"{quote_ident(schema)}.{seq}"
    # The literal is the sequence's quoted name, which only holds validated identifier characters.
    nextval = f"nextval('{seq}')"
    expiry = "clock_timestamp() + {p}::bigint * interval '1 millisecond'"

    # Acquire: `cur` reads the row in the statement's snapshot. An absent key is inserted (the
    # insert draws a fence only when it will try to insert); an expired or own row is updated
    # under its row lock. A live row of another holder matches neither, so a failed acquire takes
    # no lock and writes nothing. Rows out: an `acquired` row from ins or upd, then the snapshot
    # holder if live. When neither says anything definite (a concurrent writer committed after
    # the snapshot), the caller runs the statement again with a fresh snapshot.
    acquire = f"""
WITH cur AS MATERIALIZED (
    SELECT owner, fence, expires_at, expires_at > clock_timestamp() AS live
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
    WHERE l.key = $1 AND (l.owner = $2 OR l.expires_at <= clock_timestamp())
    RETURNING l.fence, l.expires_at
)
SELECT true AS acquired, fence, expires_at, NULL::bytea AS holder FROM ins
UNION ALL SELECT true, fence, expires_at, NULL FROM upd
UNION ALL SELECT false, fence, expires_at, owner FROM cur WHERE live
""".strip()

    live = "expires_at > clock_timestamp()"
    return Statements(
        table=t,
        acquire=acquire,
        get_owner=f"SELECT owner FROM {t} WHERE key = $1 AND {live}",
        get_lease=(
            f"SELECT owner, fence, expires_at, acquired_at FROM {t} WHERE key = $1 AND {live}"
        ),
        release=(
            f"UPDATE {t} SET expires_at = clock_timestamp()"
            f" WHERE key = $1 AND owner = $2 AND {live} RETURNING fence, expires_at"
        ),
        renew=(
            f"UPDATE {t} SET expires_at = {expiry.format(p='$3')}"
            f" WHERE key = $1 AND owner = $2 AND {live} RETURNING fence, expires_at"
        ),
        transfer=f"""
UPDATE {t} SET
    owner = $3,
    fence = CASE WHEN owner = $3 THEN fence ELSE {nextval} END,
    acquired_at = CASE WHEN owner = $3 THEN acquired_at ELSE clock_timestamp() END,
    expires_at = {expiry.format(p="$4")}
WHERE key = $1 AND owner = $2 AND {live}
RETURNING fence, expires_at
""".strip(),
        now="SELECT clock_timestamp()",
    )
