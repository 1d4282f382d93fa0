"""The SQLite statement catalogue (and the DDL of the fence counter): plain data, no I/O.

The same operations as on PostgreSQL, each one statement in autocommit. SQLite serialises
writers on the database file, so a write statement judges its row under the file's write lock;
``now`` is SQLite's clock (this machine's), constant within a statement. Fences come from a
one-row counter table that triggers advance whenever a lease row gets a new fence. Times are
stored as UTC text (``YYYY-MM-DD HH:MM:SS.SSS``), which sorts like the instants it names; the
driver adaptors turn them into aware datetimes, so rows decode as PostgreSQL's do.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from ..._core.validate import check_identifier
from ...capabilities import Renewal
from ...catalogue import (
    Catalogue,
    Statement,
    Transaction,
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
from ...schema import notify_channel
from .counting import build_counting

__all__ = ["MAX_BATCH", "NOW", "build_catalogue", "counter_table_name", "sqlite_ddl"]

NOW: Final = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
MAX_BATCH: Final = 10_000  # pairs per renew statement (SQLite binds at most 32,766 values)
#: Coalesced calls go out as their one-row statements in one transaction; a write batch takes
#: the write lock at once (``BEGIN IMMEDIATE``: no upgrade from a read lock to fail on).
TRANSACTION: Final = Transaction(
    begin_write="BEGIN IMMEDIATE", begin="BEGIN", commit="COMMIT", rollback="ROLLBACK"
)


def _plus(param: str) -> str:
    return f"strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', {param} / 1000.0))"


def _minus(param: str) -> str:
    return f"strftime('%Y-%m-%d %H:%M:%f', 'now', printf('-%.3f seconds', {param} / 1000.0))"


def counter_table_name(table_name: str) -> str:
    """The one-row table that stands in for PostgreSQL's fence sequence."""
    return f"{table_name}_fence_seq"


def sqlite_ddl(table_name: str) -> list[str]:
    """The counter table and the triggers that keep it ahead of every fence handed out.

    Migration 0001 carries its own frozen copy of this text: a change here is a new migration.
    """
    t = check_identifier("table_name", table_name)
    c = counter_table_name(t)
    return [
        f'CREATE TABLE "{c}" (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL)',
        f'INSERT INTO "{c}" (id, value) VALUES (1, 0)',
        f'CREATE TRIGGER "{t}_fence_ins" AFTER INSERT ON "{t}" BEGIN '
        f'UPDATE "{c}" SET value = NEW.fence WHERE id = 1 AND NEW.fence > value; END',
        f'CREATE TRIGGER "{t}_fence_upd" AFTER UPDATE OF fence ON "{t}" '
        f"WHEN NEW.fence <> OLD.fence BEGIN "
        f'UPDATE "{c}" SET value = NEW.fence WHERE id = 1 AND NEW.fence > value; END',
    ]


def build_catalogue(table_name: str) -> Catalogue:
    """The SQLite catalogue for ``table_name``; result rows match the PostgreSQL ones (the
    statements that notify there have no ``notified`` column here)."""
    t = f'"{check_identifier("table_name", table_name)}"'
    next_fence = f'(SELECT value + 1 FROM "{counter_table_name(table_name)}" WHERE id = 1)'
    live = f"expires_at > {NOW}"
    # A failed acquire rewrites the row with its own values so that RETURNING names the
    # holder: the write lock makes that the same statement, and SQLite cannot return a row
    # from an upsert that chose not to update.
    mine_live = f"l.owner = excluded.owner AND l.expires_at > {NOW}"
    takes = f"(l.owner = excluded.owner OR l.expires_at <= {NOW})"
    acquire = f"""
INSERT INTO {t} AS l (key, owner, fence, expires_at, acquired_at)
VALUES (?1, ?2, {next_fence}, {_plus("?3")}, {NOW})
ON CONFLICT (key) DO UPDATE SET
    owner = CASE WHEN {takes} THEN excluded.owner ELSE l.owner END,
    fence = CASE WHEN {mine_live} THEN l.fence WHEN {takes} THEN excluded.fence
                 ELSE l.fence END,
    acquired_at = CASE WHEN {mine_live} THEN l.acquired_at WHEN {takes}
                       THEN excluded.acquired_at ELSE l.acquired_at END,
    expires_at = CASE WHEN {takes} THEN excluded.expires_at ELSE l.expires_at END
RETURNING owner = ?2, fence, expires_at, owner
""".strip()
    k, ko, kot = ("key",), ("key", "owner"), ("key", "owner", "ttl_ms")
    fence_expiry = ("fence", "expires_at")
    return Catalogue(
        dialect="sqlite",
        table=t,
        channel=notify_channel(table_name),
        acquire=Statement(
            "acquire", acquire, kot, ("acquired", "fence", "expires_at", "holder"), decode_acquire
        ),
        get_owner=Statement(
            "get_owner",
            f"SELECT owner FROM {t} WHERE key = ?1 AND {live}",
            k,
            ("owner",),
            decode_owner,
        ),
        get_lease=Statement(
            "get_lease",
            f"SELECT owner, fence, expires_at, acquired_at FROM {t} WHERE key = ?1 AND {live}",
            k,
            ("owner", "fence", "expires_at", "acquired_at"),
            decode_lease,
        ),
        holder=Statement(
            "holder",
            f"SELECT owner, fence, expires_at FROM {t} WHERE key = ?1 AND {live}",
            k,
            ("owner", "fence", "expires_at"),
            decode_holder,
        ),
        release=Statement(
            "release",
            f"UPDATE {t} SET expires_at = {NOW} WHERE key = ?1 AND owner = ?2 AND {live}"
            " RETURNING fence, expires_at",
            ko,
            fence_expiry,
            decode_released,
        ),
        renew=Statement(
            "renew",
            f"UPDATE {t} SET expires_at = {_plus('?3')} WHERE key = ?1 AND owner = ?2 AND {live}"
            " RETURNING fence, expires_at",
            kot,
            fence_expiry,
            decode_renewal,
        ),
        transfer=Statement(
            "transfer",
            f"""
UPDATE {t} SET
    owner = ?3,
    fence = CASE WHEN owner = ?3 THEN fence ELSE {next_fence} END,
    acquired_at = CASE WHEN owner = ?3 THEN acquired_at ELSE {NOW} END,
    expires_at = {_plus("?4")}
WHERE key = ?1 AND owner = ?2 AND {live}
RETURNING fence, expires_at
""".strip(),
            ("key", "from_owner", "to_owner", "ttl_ms"),
            fence_expiry,
            decode_renewal,
        ),
        renew_many=lambda n: _renew_many(t, n),
        renew_many_args=_renew_many_args,
        force_release=Statement(
            "force_release",
            f"UPDATE {t} SET expires_at = {NOW} WHERE key = ?1 AND {live}"
            " RETURNING owner, fence, expires_at",
            k,
            ("owner", "fence", "expires_at"),
            decode_force_release,
        ),
        list_live=Statement(
            "list_live",
            f"""
SELECT key, owner, fence, expires_at, acquired_at, {NOW} FROM {t}
WHERE key >= ?1 AND (?2 IS NULL OR key < ?2) AND {live}
ORDER BY key LIMIT ?3
""".strip(),
            ("from_key", "below_key", "limit"),
            ("key", "owner", "fence", "expires_at", "acquired_at", "now"),
            decode_list_live,
        ),
        list_states=Statement(
            "list_states",
            f"""
SELECT key, owner, fence, expires_at, acquired_at, wanted_until, {NOW} FROM {t}
WHERE key >= ?1 AND (?2 IS NULL OR key < ?2)
  AND (expires_at > {_minus("?4")} OR wanted_until > {NOW})
ORDER BY key LIMIT ?3
""".strip(),
            ("from_key", "below_key", "limit", "ended_within_ms"),
            ("key", "owner", "fence", "expires_at", "acquired_at", "wanted_until", "now"),
            decode_lease_state,
        ),
        purge_batch=Statement(
            "purge_batch",
            f"""
DELETE FROM {t} WHERE key IN (
    SELECT key FROM {t} WHERE expires_at < {_minus("?1")} LIMIT ?2
) AND expires_at < {_minus("?1")}
RETURNING 1
""".strip(),
            ("min_age_ms", "batch"),
            ("1",),
            decode_one,
        ),
        want=Statement(
            "want",
            f"UPDATE {t} SET wanted_until = max(coalesce(wanted_until, ''), {_plus('?2')})"
            f" WHERE key = ?1 AND {live} RETURNING owner, fence, expires_at",
            ("key", "wait_ms"),
            ("owner", "fence", "expires_at"),
            decode_holder,
        ),
        now=Statement("now", f"SELECT {NOW}", (), ("now",), decode_now),
        guard=None,  # fencing inside the caller's transaction needs PostgreSQL's FOR SHARE
        max_batch=MAX_BATCH,
        transaction=TRANSACTION,
        counting=build_counting(t, next_fence),
    )


@lru_cache(maxsize=64)
def _renew_many(t: str, n: int) -> Statement[tuple[tuple[bytes, bytes], Renewal]]:
    values = ", ".join(f"(?{2 * i + 2}, ?{2 * i + 3})" for i in range(n))
    sql = f"""
WITH i(key, owner) AS (VALUES {values})
UPDATE {t} AS l SET expires_at = {_plus("?1")}
FROM i WHERE l.key = i.key AND l.owner = i.owner AND l.expires_at > {NOW}
RETURNING key, owner, fence, expires_at
""".strip()
    params = ("ttl_ms", *(f"{part}{i}" for i in range(n) for part in ("key", "owner")))
    return Statement(
        "renew_many", sql, params, ("key", "owner", "fence", "expires_at"), decode_renewed_pair
    )


def _renew_many_args(pairs: list[tuple[bytes, bytes]], ttl: int) -> tuple[object, ...]:
    return (ttl, *(part for pair in pairs for part in pair))
