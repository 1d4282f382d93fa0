"""PostgreSQL statements of counting leases, metadata and all-or-none acquires: plain data.

A key with ``limit=N`` (or with metadata) lives in its one row of the leases table, marked by
the reserved owner ``\\xff`` (no UTF-8 name is that byte, so no plain statement ever matches the
row as its owner): ``holders`` is a ``jsonb`` array of the live grants, each an object
``{"o": owner in hex, "f": fence, "e": expiry, "a": grant time, "m": metadata in hex or null,
"s": true when the metadata was a str}`` with times in microseconds since the epoch;
``slot_limit`` is N, ``fence`` the newest fence granted, ``expires_at`` the latest expiry.

Why one row. Every statement here changes the holders inside the ``SET`` of an
``INSERT ... ON CONFLICT DO UPDATE`` or an ``UPDATE`` of that one row, which PostgreSQL
evaluates on the newest version of the row while holding its lock: two callers racing for the
last slot are serialised by the row lock and the second sees the first's grant, so no instant
has N+1 holders. (A table of holders beside a parent row would not do in one statement: every
CTE of a statement reads one snapshot, taken before the lock was granted.) The whole new state
is one row-valued subquery (``SET (a, b, ...) = (SELECT ...)``), so it is computed with a single
reading of the clock, taken after the lock: a grant's time is later than the release or expiry
that freed its slot.

Fences come from the table's sequence, rewritten as migration 0004's trigger rewrites a plain
lease's (``timeline << 40 | value``; the trigger leaves such a value as it is), so fences of
plain and counting grants of one key share one strictly increasing order. A plain row that is
live is read as one holder with limit 1, so a counting call on it either joins (same owner,
``limit=1``), is refused (another owner), or is told the limits differ.

Plain data: no I/O, no driver.
"""

from __future__ import annotations

from typing import Final

from ...catalogue import (
    CountingStatements,
    Statement,
    decode_all,
    decode_key,
)
from .._counting import counting_statements
from .sqlnames import BYTEA, EQ, GT, LT, NOW, TEXT, nextval, notify

__all__ = ["RESERVED", "build_counting"]

#: The owner of a row that holds a counting lease (or a lease with metadata), spelled as an
#: escape string so that ``standard_conforming_strings = off`` cannot change its bytes.
RESERVED: Final = "E'\\\\xff'::pg_catalog.bytea"
BIGINT: Final = "pg_catalog.int8"
JSONB: Final = "pg_catalog.jsonb"
ARROW: Final = "OPERATOR(pg_catalog.->>)"
CONCAT: Final = "OPERATOR(pg_catalog.||)"
NE: Final = "OPERATOR(pg_catalog.<>)"
PLUS: Final = "OPERATOR(pg_catalog.+)"
TIMES: Final = "OPERATOR(pg_catalog.*)"
SEQUENCE_BITS: Final = 40
MASK: Final = (1 << SEQUENCE_BITS) - 1
M5: Final = "$5::pg_catalog.bytea"
K6: Final = "$6::pg_catalog.bool"
TIMELINE: Final = (
    "('x'::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.pg_walfile_name("
    "pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::pg_catalog.int8"
)


def _us(ts: str) -> str:
    """A timestamptz as microseconds since the epoch (exact: ``EXTRACT`` is numeric)."""
    return f"(EXTRACT(EPOCH FROM {ts}) {TIMES} 1000000)::{BIGINT}"


def _later(now: str, ttl: str) -> str:
    """``now`` (microseconds) plus ``ttl`` milliseconds."""
    return f"({now} {PLUS} ({ttl}::{BIGINT} {TIMES} 1000))"


def _ts(us: str) -> str:
    """Microseconds since the epoch as a timestamptz (exact below 2^53)."""
    return (
        f"(pg_catalog.to_timestamp(0::double precision) {PLUS}"
        f" (({us})::double precision {TIMES} INTERVAL '1 microsecond'))"
    )


def _field(h: str, name: str) -> str:
    return f"({h} {ARROW} '{name}')"


def _num(h: str, name: str) -> str:
    return f"({_field(h, name)})::{BIGINT}"


def _hex(b: str) -> str:
    return f"pg_catalog.encode({b}, 'hex')"


def _fence(seq: str) -> str:
    """A new fence: the sequence's next value with the timeline in its top bits, as migration
    0006's trigger function writes it (drawn once: ``q.v``)."""
    b = SEQUENCE_BITS
    shifted = f"(q.v OPERATOR(pg_catalog.>>) {b})"
    high = f"(GREATEST({TIMELINE}, {shifted}) OPERATOR(pg_catalog.<<) {b})"
    return (
        f"(SELECT {high} OPERATOR(pg_catalog.|) (q.v OPERATOR(pg_catalog.&) {MASK})"
        f" FROM (SELECT {nextval(seq)} AS v) AS q)"
    )


def _grant(owner: str, fence: str, now: str, ttl: str, meta: str, kind: str) -> str:
    return (
        f"pg_catalog.jsonb_build_object('o', {_hex(owner)}, 'f', {fence},"
        f" 'e', {_later(now, ttl)}, 'a', {now},"
        f" 'm', {_hex(meta)}, 's', {kind}::pg_catalog.bool)"
    )


def _live(t: str, now: str) -> str:
    """The live grants of row ``t`` as a jsonb array (a live plain lease as one grant). The
    row's expiry bounds its grants: a force-release (which sets it to now) ends them all."""
    h = "h.value"
    return f"""CASE WHEN {t}.owner {EQ} {RESERVED} AND {t}.expires_at {GT} {_ts(now)} THEN (
        SELECT COALESCE(pg_catalog.jsonb_agg({h} ORDER BY {_num(h, "f")}), '[]'::{JSONB})
        FROM pg_catalog.jsonb_array_elements({t}.holders) AS h
        WHERE {_num(h, "e")} {GT} {now})
    WHEN {t}.expires_at {GT} {_ts(now)} THEN pg_catalog.jsonb_build_array(
        pg_catalog.jsonb_build_object('o', {_hex(f"{t}.owner")}, 'f', {t}.fence,
            'e', {_us(f"{t}.expires_at")}, 'a', {_us(f"{t}.acquired_at")},
            'm', NULL, 's', NULL))
    ELSE '[]'::{JSONB} END"""


def _max_expiry(arr: str, fallback: str) -> str:
    latest = _ts(f"pg_catalog.max({_num('x.value', 'e')})")
    return (
        f"COALESCE((SELECT {latest} FROM pg_catalog.jsonb_array_elements({arr}) AS x), {fallback})"
    )


def _mine(arr: str, owner: str) -> str:
    return (
        f"EXISTS (SELECT FROM pg_catalog.jsonb_array_elements({arr}) AS m"
        f" WHERE {_field('m.value', 'o')} {EQ} {_hex(owner)})"
    )


def _with_me(arr: str, owner: str, now: str, ttl: str, meta: str, kind: str) -> str:
    """``arr`` with ``owner``'s grant renewed to now + ttl (its metadata replaced if given)."""
    h = "w.value"
    return f"""(SELECT pg_catalog.jsonb_agg(CASE WHEN {_field(h, "o")} {EQ} {_hex(owner)}
        THEN {h} {CONCAT} pg_catalog.jsonb_build_object('e', {_later(now, ttl)})
            {CONCAT} (CASE WHEN {meta} IS NULL THEN '{{}}'::{JSONB} ELSE
            pg_catalog.jsonb_build_object('m', {_hex(meta)}, 's', {kind}::pg_catalog.bool) END)
        ELSE {h} END ORDER BY {_num(h, "f")})
     FROM pg_catalog.jsonb_array_elements({arr}) AS w)"""


def _without(arr: str, owner: str) -> str:
    h = "r.value"
    return (
        f"(SELECT COALESCE(pg_catalog.jsonb_agg({h} ORDER BY {_num(h, 'f')}), '[]'::{JSONB})"
        f" FROM pg_catalog.jsonb_array_elements({arr}) AS r"
        f" WHERE {_field(h, 'o')} {NE} {_hex(owner)})"
    )


def _grant_of(arr: str, owner: str, name: str) -> str:
    return (
        f"(SELECT {_num('g.value', name)} FROM pg_catalog.jsonb_array_elements({arr}) AS g"
        f" WHERE {_field('g.value', 'o')} {EQ} {_hex(owner)})"
    )


def _returning(t: str) -> str:
    return (
        f"RETURNING {t}.owner, {t}.slot_limit, CASE WHEN {t}.owner {EQ} {RESERVED}"
        f" THEN {t}.holders::{TEXT} END AS holders, {t}.fence, {t}.expires_at"
    )


def _acquire(t: str, seq: str) -> str:
    """($1 key, $2 owner, $3 ttl, $4 limit, $5 metadata, $6 metadata is str): the new row;
    the subqueries: z the clock, c the live grants, s whether the limits agree and the owner
    holds one, d the decision (and a fence only when granting), n the new grants."""
    count = f"pg_catalog.jsonb_array_length(s.cur) {LT} $4"
    held_limit = f"CASE WHEN l.owner {EQ} {RESERVED} THEN l.slot_limit ELSE 1 END"
    return f"""
INSERT INTO {t} AS l (key, owner, fence, expires_at, acquired_at, slot_limit, holders)
SELECT $1, {RESERVED}, g.f, {_ts(_later("g.now", "$3"))}, {_ts("g.now")}, $4,
    pg_catalog.jsonb_build_array({_grant("$2", "g.f", "g.now", "$3", M5, K6)})
FROM (SELECT {_fence(seq)} AS f, {_us(NOW)} AS now) AS g
ON CONFLICT (key) DO UPDATE SET
    (owner, fence, expires_at, acquired_at, slot_limit, holders) = (
    SELECT
        CASE WHEN d.take OR l.owner {EQ} {RESERVED} THEN {RESERVED} ELSE l.owner END,
        CASE WHEN d.take AND NOT d.mine THEN d.f ELSE l.fence END,
        CASE WHEN d.take THEN {_max_expiry("n.h", "l.expires_at")} ELSE l.expires_at END,
        CASE WHEN d.take AND NOT d.mine THEN {_ts("d.now")} ELSE l.acquired_at END,
        CASE WHEN d.take THEN $4 ELSE l.slot_limit END,
        CASE WHEN d.take THEN n.h WHEN l.owner {EQ} {RESERVED} THEN d.cur ELSE l.holders END
    FROM (
        SELECT s.now, s.cur, s.mine, s.ok AND (s.mine OR {count}) AS take,
            CASE WHEN s.ok AND NOT s.mine AND {count} THEN {_fence(seq)} END AS f
        FROM (
            SELECT c.now, c.cur, {_mine("c.cur", "$2")} AS mine,
                (pg_catalog.jsonb_array_length(c.cur) {EQ} 0 OR {held_limit} {EQ} $4) AS ok
            FROM (SELECT z.now, {_live("l", "z.now")} AS cur
                  FROM (SELECT {_us(NOW)} AS now) AS z) AS c
        ) AS s
    ) AS d,
    LATERAL (SELECT CASE WHEN d.mine THEN {_with_me("d.cur", "$2", "d.now", "$3", M5, K6)}
        ELSE d.cur {CONCAT} pg_catalog.jsonb_build_array(
            {_grant("$2", "d.f", "d.now", "$3", M5, K6)}) END AS h) AS n
)
{_returning("l")}
""".strip()


def _live_grant(arr: str, owner: str) -> str:
    return (
        f"EXISTS (SELECT FROM pg_catalog.jsonb_array_elements({arr}) AS v"
        f" WHERE {_field('v.value', 'o')} {EQ} {_hex(owner)}"
        f" AND {_num('v.value', 'e')} {GT} {_us(NOW)})"
    )


def _renew(t: str) -> str:
    """($1 key, $2 owner, $3 ttl): the owner's live grant renewed."""
    null_meta = f"NULL::{BYTEA}"
    return f"""
UPDATE {t} AS l SET (holders, expires_at) = (
    SELECT n.h, {_max_expiry("n.h", "l.expires_at")}
    FROM (SELECT {_with_me(_live("l", "z.now"), "$2", "z.now", "$3", null_meta, "NULL")} AS h
          FROM (SELECT {_us(NOW)} AS now) AS z) AS n)
WHERE l.key {EQ} $1 AND l.owner {EQ} {RESERVED} AND l.expires_at {GT} {NOW}
  AND {_live_grant("l.holders", "$2")}
{_returning("l")}
""".strip()


def _transfer(t: str, seq: str) -> str:
    """($1 key, $2 from, $3 to, $4 ttl, $5 metadata, $6 metadata is str): ``from``'s live grant
    handed to ``to`` with a new fence, its metadata kept unless given; refused when ``to``
    already holds a grant of the key. A live plain lease of ``from`` is handed on (becoming a
    counting row) only when metadata is given: a plain transfer's miss, which falls through to
    this statement, never turns a plain lease (retaken meanwhile) into a counting row."""
    same = f"$2 {EQ} $3"
    kept = (
        f"COALESCE((SELECT pg_catalog.jsonb_build_object('m', k.value OPERATOR(pg_catalog.->) 'm',"
        f" 's', k.value OPERATOR(pg_catalog.->) 's')"
        f" FROM pg_catalog.jsonb_array_elements(d.cur) AS k"
        f" WHERE {_field('k.value', 'o')} {EQ} {_hex('$2')}), '{{}}'::{JSONB})"
    )
    given = f"pg_catalog.jsonb_build_object('m', {_hex(M5)}, 's', {K6})"
    new = (
        f"pg_catalog.jsonb_build_object('o', {_hex('$3')}, 'f', d.f,"
        f" 'e', {_later('d.now', '$4')}, 'a', d.now)"
        f" {CONCAT} CASE WHEN {M5} IS NULL THEN {kept} ELSE {given} END"
    )
    return f"""
UPDATE {t} AS l SET (owner, fence, expires_at, acquired_at, slot_limit, holders) = (
    SELECT {RESERVED},
        CASE WHEN {same} THEN l.fence ELSE d.f END,
        {_max_expiry("n.h", "l.expires_at")},
        CASE WHEN {same} THEN l.acquired_at ELSE {_ts("d.now")} END,
        CASE WHEN l.owner {EQ} {RESERVED} THEN l.slot_limit ELSE 1 END,
        n.h
    FROM (SELECT z.now, {_live("l", "z.now")} AS cur,
                 CASE WHEN {same} THEN NULL ELSE {_fence(seq)} END AS f
          FROM (SELECT {_us(NOW)} AS now) AS z) AS d,
    LATERAL (SELECT CASE WHEN {same} THEN {_with_me("d.cur", "$2", "d.now", "$4", M5, K6)}
        ELSE {_without("d.cur", "$2")} {CONCAT} pg_catalog.jsonb_build_array({new})
        END AS h) AS n)
WHERE l.key {EQ} $1
  AND ((l.owner {EQ} {RESERVED} AND l.expires_at {GT} {NOW} AND {_live_grant("l.holders", "$2")}
        AND ({same} OR NOT {_live_grant("l.holders", "$3")}))
       OR (l.owner {EQ} $2 AND l.expires_at {GT} {NOW} AND {M5} IS NOT NULL))
{_returning("l")}
""".strip()


def _release(t: str, channel: str) -> str:
    """($1 key, $2 owner): the owner's grant (live or expired) removed; when none is left
    the row expires now. Returns when, the grant's fence, and whether a waiter was notified.

    The fence is read from the row locked by ``s`` (``FOR UPDATE`` returns the newest version
    once the lock is granted, its columns computed again on it), which is the version the
    ``UPDATE`` changes: a snapshot's reading would be stale when the row changed while the
    release waited (the owner's expired grant replaced by a new grant of the same owner)."""
    gone = f"{_without(_live('l', 'z.now'), '$2')}"
    notified = f"(CASE WHEN l.wanted_until {GT} {NOW} THEN {notify(channel, 'l.key')} END)"
    return f"""
UPDATE {t} AS l SET (holders, expires_at) = (
    SELECT n.h, {_max_expiry("n.h", NOW)}
    FROM (SELECT {gone} AS h FROM (SELECT {_us(NOW)} AS now) AS z) AS n)
FROM (
    SELECT o.key, {_grant_of("o.holders", "$2", "f")} AS fence FROM {t} AS o
    WHERE o.key {EQ} $1 AND o.owner {EQ} {RESERVED}
      AND EXISTS (SELECT FROM pg_catalog.jsonb_array_elements(o.holders) AS v
                  WHERE {_field("v.value", "o")} {EQ} {_hex("$2")})
    FOR UPDATE
) AS s
WHERE l.key {EQ} s.key
RETURNING {NOW} AS released_at, s.fence, {notified} IS NOT NULL AS notified
""".strip()


def _holders(t: str) -> str:
    """($1 key): the live row, its grants as JSON (a plain lease as one grant)."""
    return f"""
SELECT l.owner, l.slot_limit, ({_live("l", "z.now")})::{TEXT} AS holders, l.fence, l.expires_at
FROM {t} AS l, (SELECT {_us(NOW)} AS now) AS z
WHERE l.key {EQ} $1 AND l.expires_at {GT} {NOW}
""".strip()


def _acquire_all(t: str, seq: str) -> str:
    """($1 sorted keys, $2 owner, $3 ttl): every key's row locked in key order (``FOR UPDATE``
    returns each row's newest version), then all taken as plain leases or none. A key without
    a row is reported as missing (``acquired`` NULL): the caller inserts expired placeholder
    rows (`ensure`) and runs this again, since rows inserted by a statement are invisible to
    its own reads."""
    return f"""
WITH locked AS MATERIALIZED (
    SELECT l.key, l.owner, l.expires_at {GT} {NOW} AS live FROM {t} AS l
    WHERE l.key {EQ} ANY ($1::{BYTEA}[]) ORDER BY l.key FOR UPDATE
), blocked AS (
    SELECT key, owner FROM locked WHERE live AND owner {NE} $2 ORDER BY key LIMIT 1
), missing AS (
    SELECT k.key FROM pg_catalog.unnest($1::{BYTEA}[]) AS k(key)
    WHERE NOT EXISTS (SELECT FROM locked WHERE locked.key {EQ} k.key)
), upd AS (
    UPDATE {t} AS l SET
        owner = $2,
        fence = CASE WHEN l.owner {EQ} $2 AND l.expires_at {GT} {NOW}
                     THEN l.fence ELSE {nextval(seq)} END,
        acquired_at = CASE WHEN l.owner {EQ} $2 AND l.expires_at {GT} {NOW}
                           THEN l.acquired_at ELSE {NOW} END,
        expires_at = {_ts(_later(_us(NOW), "$3"))}
    FROM locked
    WHERE l.key {EQ} locked.key
      AND NOT EXISTS (SELECT FROM blocked) AND NOT EXISTS (SELECT FROM missing)
    RETURNING l.key, l.fence, l.expires_at
)
SELECT key, true AS acquired, fence, expires_at, NULL::{BYTEA} AS holder FROM upd
UNION ALL SELECT key, false, NULL, NULL, owner FROM blocked
UNION ALL SELECT key, NULL, NULL, NULL, NULL FROM missing
""".strip()


def _ensure(t: str, seq: str) -> str:
    """($1 keys): an expired placeholder row for each key that has none (owner `RESERVED`,
    no grants), so that `_acquire_all` can lock it."""
    return f"""
INSERT INTO {t} (key, owner, fence, expires_at, acquired_at, slot_limit, holders)
SELECT k.key, {RESERVED}, {nextval(seq)}, {NOW}, {NOW}, NULL, '[]'::{JSONB}
FROM pg_catalog.unnest($1::{BYTEA}[]) AS k(key) ORDER BY k.key
ON CONFLICT (key) DO NOTHING
""".strip()


def _release_all(t: str, channel: str) -> str:
    """($1 keys, $2 owner): the owner's live plain leases among the keys released, their rows
    locked in key order."""
    return f"""
UPDATE {t} AS l SET expires_at = {NOW}
FROM (SELECT key FROM {t} WHERE key {EQ} ANY ($1::{BYTEA}[]) AND owner {EQ} $2
      ORDER BY key FOR UPDATE) AS s
WHERE l.key {EQ} s.key AND l.owner {EQ} $2 AND l.expires_at {GT} {NOW}
RETURNING l.key, (CASE WHEN l.wanted_until {GT} {NOW}
    THEN {notify(channel, "l.key")} END) IS NOT NULL AS notified
""".strip()


def build_counting(t: str, seq: str, channel: str) -> CountingStatements:
    """The counting statements for the quoted, qualified table ``t`` and sequence ``seq``."""
    acquire_all = Statement(
        "acquire_all",
        _acquire_all(t, seq),
        ("keys", "owner", "ttl_ms"),
        ("key", "acquired", "fence", "expires_at", "holder"),
        decode_all,
    )
    ensure = Statement("ensure_rows", _ensure(t, seq), ("keys",), (), decode_key)
    release_all = Statement(
        "release_all", _release_all(t, channel), ("keys", "owner"), ("key", "notified"), decode_key
    )
    return counting_statements(
        (_acquire(t, seq), _holders(t), _release(t, channel), _renew(t), _transfer(t, seq)),
        released=("released_at", "fence", "notified"),
        acquire_all=lambda _: acquire_all,
        release_all=lambda _: release_all,
        keys_args=_keys_args,
        ensure=lambda _: ensure,
    )


def _keys_args(keys: list[bytes]) -> tuple[object, ...]:
    return (keys,)
