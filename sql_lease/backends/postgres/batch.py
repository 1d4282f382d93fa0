"""PostgreSQL's multi-row statements, for coalesced calls: plain data, no I/O.

Each is the one-row statement of `catalogue` over ``unnest`` of one array per parameter, still
a single conditional statement in autocommit: every row is judged under its own row lock by the
same condition as the one-row form, so a call's rows are what its one-row statement would have
returned at that instant. The coalescer puts at most one write per key into one statement (rows
never interact) and sorts the calls by key (row locks are then taken in the same order by
statements that overlap, which keeps deadlocks rare; one that happens rolls the whole statement
back and it runs again). Each result row starts with its key.

A write batch takes one more parameter after its arrays: how long it may wait for a row lock,
in milliseconds, or less when the session's own ``lock_timeout`` is shorter
(``set_config('lock_timeout', ..., true)`` evaluated once, with its first input row, so before
it can meet a lock; transaction-local, and each statement is its own transaction).
The provider passes a short wait for a batch of several calls: a row locked by a long
transaction (a caller's `guard`, say) then fails the statement soon with nothing applied, and
each of its calls runs again on its own, waiting for locks within its own deadline. So one
locked key never holds up the other calls of its batch for long.
"""

from __future__ import annotations

from ...catalogue import Batch, Batches

__all__ = ["build_batches"]

_LIVE = "l.expires_at > clock_timestamp()"
_KOT_ARRAYS = "$1::bytea[], $2::bytea[], $3::bigint[]"
_TRANSFER_ARRAYS = "$1::bytea[], $2::bytea[], $3::bytea[], $4::bigint[]"


#: The session's own lock_timeout in milliseconds, NULL when it has none (0).
_SESSION_LOCK_WAIT = (
    "NULLIF(extract(epoch FROM current_setting('lock_timeout')::interval) * 1000, 0)"
)


def _input(arrays: str, columns: str) -> str:
    """The calls as rows; as the first row comes out (an InitPlan, evaluated once), the lock
    wait becomes the parameter after the arrays, or the session's own when that is shorter."""
    wait = f"LEAST(${arrays.count('[]') + 1}::int, {_SESSION_LOCK_WAIT})::int::text"
    locks = f"(SELECT set_config('lock_timeout', {wait}, true)) IS NOT NULL"
    return f"(SELECT * FROM unnest({arrays}) AS u({columns}) WHERE {locks}) AS i"


def _expiry(ttl: str) -> str:
    return f"clock_timestamp() + {ttl} * interval '1 millisecond'"


def build_batches(table: str, nextval: str, channel: str) -> Batches:
    """The multi-row statements for ``table`` (quoted), drawing fences with ``nextval``."""
    notified = (
        "(CASE WHEN l.wanted_until > clock_timestamp() THEN "
        f"pg_notify('{channel}', encode(l.key, 'hex'))::text END) IS NOT NULL AS notified"
    )
    mine_live = f"l.owner = i.owner AND {_LIVE}"
    # As the one-row acquire: `cur` reads the batch's rows in the statement's snapshot; absent
    # keys are inserted, expired or own rows updated under their row locks, and a live row of
    # another holder matches neither (no lock, no write) and comes back as the holder.
    acquire = f"""
WITH i AS MATERIALIZED (
    SELECT * FROM {_input(_KOT_ARRAYS, "key, owner, ttl")}
), cur AS MATERIALIZED (
    SELECT l.key, l.owner, l.fence, l.expires_at, {_LIVE} AS live
    FROM {table} AS l WHERE l.key = ANY($1::bytea[])
), ins AS (
    INSERT INTO {table} AS l (key, owner, fence, expires_at, acquired_at)
    SELECT i.key, i.owner, {nextval}, {_expiry("i.ttl")}, clock_timestamp()
    FROM i WHERE NOT EXISTS (SELECT FROM cur WHERE cur.key = i.key)
    ON CONFLICT (key) DO NOTHING
    RETURNING l.key, l.fence, l.expires_at
), upd AS (
    UPDATE {table} AS l SET
        owner = i.owner,
        fence = CASE WHEN {mine_live} THEN l.fence ELSE {nextval} END,
        acquired_at = CASE WHEN {mine_live} THEN l.acquired_at ELSE clock_timestamp() END,
        expires_at = {_expiry("i.ttl")}
    FROM i JOIN cur ON cur.key = i.key
    WHERE (cur.owner = i.owner OR NOT cur.live)
      AND l.key = i.key AND (l.owner = i.owner OR l.expires_at <= clock_timestamp())
    RETURNING l.key, l.fence, l.expires_at
)
SELECT key, true AS acquired, fence, expires_at, NULL::bytea AS holder FROM ins
UNION ALL SELECT key, true, fence, expires_at, NULL FROM upd
UNION ALL SELECT key, false, fence, expires_at, owner FROM cur WHERE live
""".strip()
    renew = f"""
UPDATE {table} AS l SET expires_at = {_expiry("i.ttl")}
FROM {_input(_KOT_ARRAYS, "key, owner, ttl")}
WHERE l.key = i.key AND l.owner = i.owner AND {_LIVE}
RETURNING l.key, l.fence, l.expires_at
""".strip()
    release = f"""
UPDATE {table} AS l SET expires_at = clock_timestamp()
FROM {_input("$1::bytea[], $2::bytea[]", "key, owner")}
WHERE l.key = i.key AND l.owner = i.owner AND {_LIVE}
RETURNING l.key, l.fence, l.expires_at, {notified}
""".strip()
    transfer = f"""
UPDATE {table} AS l SET
    owner = i.to_owner,
    fence = CASE WHEN l.owner = i.to_owner THEN l.fence ELSE {nextval} END,
    acquired_at = CASE WHEN l.owner = i.to_owner THEN l.acquired_at ELSE clock_timestamp() END,
    expires_at = {_expiry("i.ttl")}
FROM {_input(_TRANSFER_ARRAYS, "key, from_owner, to_owner, ttl")}
WHERE l.key = i.key AND l.owner = i.from_owner AND {_LIVE}
RETURNING l.key, l.fence, l.expires_at, {notified}
""".strip()
    read = f"""
SELECT l.key, l.owner, l.fence, l.expires_at, l.acquired_at FROM {table} AS l
WHERE l.key = ANY($1::bytea[]) AND {_LIVE}
""".strip()
    kot = ("keys", "owners", "ttl_ms", "lock_wait_ms")
    return Batches(
        acquire=Batch(
            "acquire", acquire, kot, ("key", "acquired", "fence", "expires_at", "holder"), True
        ),
        renew=Batch("renew", renew, kot, ("key", "fence", "expires_at"), True),
        release=Batch(
            "release",
            release,
            ("keys", "owners", "lock_wait_ms"),
            ("key", "fence", "expires_at", "notified"),
            True,
        ),
        transfer=Batch(
            "transfer",
            transfer,
            ("keys", "from_owners", "to_owners", "ttl_ms", "lock_wait_ms"),
            ("key", "fence", "expires_at", "notified"),
            True,
        ),
        read=Batch("read", read, ("keys",), ("key", "owner", "fence", "expires_at", "acquired_at")),
    )
