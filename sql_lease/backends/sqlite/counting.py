"""SQLite statements of counting leases, metadata and all-or-none acquires: plain data.

The same row layout as PostgreSQL's (`sql_lease.backends.postgres.counting`): the reserved
owner ``x'ff'``, ``slot_limit``, and ``holders`` as JSON text (owners and metadata in hex, times
in microseconds since the epoch, here whole milliseconds). The JSON goes out as a BLOB: the
driver adaptor reads every text it returns as a time. SQLite takes the database's write
lock before a write statement reads anything and ``'now'`` is read once per statement, so each
statement judges and changes the holders atomically, with one reading of the clock.

An all-or-none acquire is one ``INSERT ... SELECT ... ON CONFLICT DO UPDATE`` that inserts
nothing unless every key is free or the owner's; a write that took nothing returns no row, so
the first blocking key is then read by ``blocker`` (a separate read: the report, not the
decision). Statements for ``n`` keys take one parameter per key (SQLite has no arrays).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from ...catalogue import (
    AllRow,
    CountingStatements,
    Statement,
    decode_all,
    decode_key,
)
from .._counting import counting_statements

__all__ = ["build_counting"]

RESERVED: Final = "x'ff'"
NOW: Final = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
#: 'now' in microseconds (SQLite's clock has milliseconds).
NOW_US: Final = (
    "((CAST(strftime('%s', 'now') AS INTEGER) * 1000"
    " + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000)"
)


def _us(ts: str) -> str:
    return (
        f"((CAST(strftime('%s', {ts}) AS INTEGER) * 1000"
        f" + CAST(substr(strftime('%f', {ts}), 4) AS INTEGER)) * 1000)"
    )


def _ts(us: str) -> str:
    return (
        f"(strftime('%Y-%m-%d %H:%M:%S', ({us}) / 1000000, 'unixepoch')"
        f" || printf('.%03d', (({us}) / 1000) % 1000))"
    )


def _later(ttl: str) -> str:
    return f"({NOW_US} + {ttl} * 1000)"


def _hex_or_null(b: str) -> str:
    return f"CASE WHEN {b} IS NULL THEN NULL ELSE lower(hex({b})) END"


def _grant(owner: str, fence: str, ttl: str, meta: str, kind: str) -> str:
    return (
        f"json_object('o', lower(hex({owner})), 'f', {fence}, 'e', {_later(ttl)},"
        f" 'a', {NOW_US}, 'm', {_hex_or_null(meta)}, 's', {kind})"
    )


def _field(v: str, name: str) -> str:
    return f"json_extract({v}, '$.{name}')"


def _live(t: str) -> str:
    return f"""CASE WHEN {t}.owner = {RESERVED} AND {t}.expires_at > {NOW} THEN (
        SELECT json_group_array(json(x.v)) FROM (
            SELECT value AS v FROM json_each({t}.holders)
            WHERE {_field("value", "e")} > {NOW_US} ORDER BY {_field("value", "f")}) AS x)
    WHEN {t}.expires_at > {NOW} THEN json_array(json_object('o', lower(hex({t}.owner)),
        'f', {t}.fence, 'e', {_us(f"{t}.expires_at")}, 'a', {_us(f"{t}.acquired_at")},
        'm', NULL, 's', NULL))
    ELSE '[]' END"""


def _max_expiry(arr: str, fallback: str) -> str:
    latest = _ts(f"max({_field('value', 'e')})")
    return f"COALESCE((SELECT {latest} FROM json_each({arr})), {fallback})"


def _mine(arr: str, owner: str) -> str:
    return (
        f"EXISTS (SELECT 1 FROM json_each({arr})"
        f" WHERE {_field('value', 'o')} = lower(hex({owner})))"
    )


def _live_grant(arr: str, owner: str) -> str:
    return (
        f"EXISTS (SELECT 1 FROM json_each({arr}) WHERE {_field('value', 'o')} = lower(hex({owner}))"
        f" AND {_field('value', 'e')} > {NOW_US})"
    )


def _with_me(arr: str, owner: str, ttl: str, meta: str, kind: str) -> str:
    renewed = f"json_set(value, '$.e', {_later(ttl)})"
    replaced = f"json_set(value, '$.e', {_later(ttl)}, '$.m', lower(hex({meta})), '$.s', {kind})"
    return f"""(SELECT json_group_array(json(x.v)) FROM (
        SELECT CASE WHEN {_field("value", "o")} = lower(hex({owner}))
            THEN CASE WHEN {meta} IS NULL THEN {renewed} ELSE {replaced} END
            ELSE value END AS v
        FROM json_each({arr}) ORDER BY {_field("value", "f")}) AS x)"""


def _without(arr: str, owner: str) -> str:
    return f"""(SELECT json_group_array(json(x.v)) FROM (
        SELECT value AS v FROM json_each({arr})
        WHERE {_field("value", "o")} <> lower(hex({owner}))
        ORDER BY {_field("value", "f")}) AS x)"""


def _returning() -> str:
    return (
        f"RETURNING owner, slot_limit, CASE WHEN owner = {RESERVED} THEN CAST(holders AS BLOB) END,"
        " fence, expires_at"
    )


def _acquire(t: str, nf: str) -> str:
    """(?1 key, ?2 owner, ?3 ttl, ?4 limit, ?5 metadata, ?6 metadata is str)."""
    count = "json_array_length(s.cur) < ?4"
    held_limit = f"CASE WHEN l.owner = {RESERVED} THEN l.slot_limit ELSE 1 END"
    grant = _grant("?2", nf, "?3", "?5", "?6")
    return f"""
INSERT INTO {t} AS l (key, owner, fence, expires_at, acquired_at, slot_limit, holders)
VALUES (?1, {RESERVED}, {nf}, {_ts(_later("?3"))}, {NOW}, ?4, json_array({grant}))
ON CONFLICT (key) DO UPDATE SET
    (owner, fence, expires_at, acquired_at, slot_limit, holders) = (
    SELECT
        CASE WHEN n.take OR l.owner = {RESERVED} THEN {RESERVED} ELSE l.owner END,
        CASE WHEN n.take AND NOT n.mine THEN {nf} ELSE l.fence END,
        CASE WHEN n.take THEN {_max_expiry("n.h", "l.expires_at")} ELSE l.expires_at END,
        CASE WHEN n.take AND NOT n.mine THEN {NOW} ELSE l.acquired_at END,
        CASE WHEN n.take THEN ?4 ELSE l.slot_limit END,
        CASE WHEN n.take THEN n.h WHEN l.owner = {RESERVED} THEN n.cur ELSE l.holders END
    FROM (
        SELECT d.*, CASE WHEN d.mine THEN {_with_me("d.cur", "?2", "?3", "?5", "?6")}
            ELSE json_insert(d.cur, '$[#]', json({grant})) END AS h
        FROM (
            SELECT s.cur, s.mine, s.ok AND (s.mine OR {count}) AS take
            FROM (
                SELECT c.cur, {_mine("c.cur", "?2")} AS mine,
                    (json_array_length(c.cur) = 0 OR {held_limit} = ?4) AS ok
                FROM (SELECT {_live("l")} AS cur) AS c
            ) AS s
        ) AS d
    ) AS n
)
{_returning()}
""".strip()


def _renew(t: str) -> str:
    """(?1 key, ?2 owner, ?3 ttl)."""
    return f"""
UPDATE {t} AS l SET (holders, expires_at) = (
    SELECT n.h, {_max_expiry("n.h", "l.expires_at")}
    FROM (SELECT {_with_me(_live("l"), "?2", "?3", "NULL", "NULL")} AS h) AS n)
WHERE l.key = ?1 AND l.owner = {RESERVED} AND l.expires_at > {NOW}
  AND {_live_grant("l.holders", "?2")}
{_returning()}
""".strip()


def _transfer(t: str, nf: str) -> str:
    """(?1 key, ?2 from, ?3 to, ?4 ttl, ?5 metadata, ?6 metadata is str)."""
    same = "?2 = ?3"
    kept_m = (
        f"(SELECT {_field('value', 'm')} FROM json_each(d.cur)"
        f" WHERE {_field('value', 'o')} = lower(hex(?2)))"
    )
    kept_s = (
        f"(SELECT {_field('value', 's')} FROM json_each(d.cur)"
        f" WHERE {_field('value', 'o')} = lower(hex(?2)))"
    )
    new = (
        f"json_object('o', lower(hex(?3)), 'f', {nf}, 'e', {_later('?4')}, 'a', {NOW_US},"
        f" 'm', CASE WHEN ?5 IS NULL THEN {kept_m} ELSE lower(hex(?5)) END,"
        f" 's', CASE WHEN ?5 IS NULL THEN {kept_s} ELSE ?6 END)"
    )
    return f"""
UPDATE {t} AS l SET (owner, fence, expires_at, acquired_at, slot_limit, holders) = (
    SELECT {RESERVED},
        CASE WHEN {same} THEN l.fence ELSE {nf} END,
        {_max_expiry("n.h", "l.expires_at")},
        CASE WHEN {same} THEN l.acquired_at ELSE {NOW} END,
        CASE WHEN l.owner = {RESERVED} THEN l.slot_limit ELSE 1 END,
        n.h
    FROM (SELECT CASE WHEN {same} THEN {_with_me("d.cur", "?2", "?4", "?5", "?6")}
        ELSE json_insert({_without("d.cur", "?2")}, '$[#]', json({new})) END AS h
        FROM (SELECT {_live("l")} AS cur) AS d) AS n)
WHERE l.key = ?1
  AND ((l.owner = {RESERVED} AND l.expires_at > {NOW} AND {_live_grant("l.holders", "?2")}
        AND ({same} OR NOT {_live_grant("l.holders", "?3")}))
       OR (l.owner = ?2 AND l.expires_at > {NOW} AND ?5 IS NOT NULL))
{_returning()}
""".strip()


def _release(t: str) -> str:
    """(?1 key, ?2 owner): the owner's grant removed; none left: the row expires now.
    Returns when, and the grant's fence (``old`` is materialised by the ``WHERE``, before
    the row changes)."""
    return f"""
WITH old AS MATERIALIZED (
    SELECT {_field("value", "f")} AS fence FROM {t} AS o, json_each(o.holders)
    WHERE o.key = ?1 AND o.owner = {RESERVED} AND {_field("value", "o")} = lower(hex(?2))
)
UPDATE {t} AS l SET (holders, expires_at) = (
    SELECT n.h, {_max_expiry("n.h", NOW)}
    FROM (SELECT {_without(_live("l"), "?2")} AS h) AS n)
WHERE l.key = ?1 AND l.owner = {RESERVED} AND EXISTS (SELECT 1 FROM old)
RETURNING {NOW}, (SELECT fence FROM old)
""".strip()


def _holders(t: str) -> str:
    return f"""
SELECT l.owner, l.slot_limit, CAST({_live("l")} AS BLOB), l.fence, l.expires_at FROM {t} AS l
WHERE l.key = ?1 AND l.expires_at > {NOW}
""".strip()


def _keys(n: int) -> str:
    return ", ".join(f"?{i}" for i in range(1, n + 1))


@lru_cache(maxsize=64)
def _acquire_all(t: str, nf: str, n: int) -> Statement[AllRow]:
    """(?1..?n sorted keys, ?n+1 owner, ?n+2 ttl): every key as a plain lease, or none."""
    o, ttl = f"?{n + 1}", f"?{n + 2}"
    values = ", ".join(f"(?{i})" for i in range(1, n + 1))
    mine_live = f"l.owner = {o} AND l.expires_at > {NOW}"
    sql = f"""
INSERT INTO {t} AS l (key, owner, fence, expires_at, acquired_at)
SELECT k.column1, {o}, {nf}, {_ts(_later(ttl))}, {NOW} FROM (VALUES {values}) AS k
WHERE NOT EXISTS (SELECT 1 FROM {t} WHERE key IN ({_keys(n)})
                  AND expires_at > {NOW} AND owner <> {o})
ORDER BY k.column1
ON CONFLICT (key) DO UPDATE SET
    owner = excluded.owner,
    fence = CASE WHEN {mine_live} THEN l.fence ELSE excluded.fence END,
    acquired_at = CASE WHEN {mine_live} THEN l.acquired_at ELSE excluded.acquired_at END,
    expires_at = excluded.expires_at
RETURNING key, 1, fence, expires_at, NULL
""".strip()
    params = (*(f"key{i}" for i in range(n)), "owner", "ttl_ms")
    return Statement(
        "acquire_all", sql, params, ("key", "acquired", "fence", "expires_at", "holder"), decode_all
    )


@lru_cache(maxsize=64)
def _blocker(t: str, n: int) -> Statement[AllRow]:
    o = f"?{n + 1}"
    sql = f"""
SELECT key, 0, NULL, NULL, owner FROM {t}
WHERE key IN ({_keys(n)}) AND expires_at > {NOW} AND owner <> {o} ORDER BY key LIMIT 1
""".strip()
    params = (*(f"key{i}" for i in range(n)), "owner")
    return Statement(
        "blocker", sql, params, ("key", "acquired", "fence", "expires_at", "holder"), decode_all
    )


@lru_cache(maxsize=64)
def _release_all(t: str, n: int) -> Statement[bytes]:
    o = f"?{n + 1}"
    sql = (
        f"UPDATE {t} SET expires_at = {NOW} WHERE key IN ({_keys(n)}) AND owner = {o}"
        f" AND expires_at > {NOW} RETURNING key"
    )
    params = (*(f"key{i}" for i in range(n)), "owner")
    return Statement("release_all", sql, params, ("key",), decode_key)


def _keys_args(keys: list[bytes]) -> tuple[object, ...]:
    return tuple(keys)


def build_counting(t: str, nf: str) -> CountingStatements:
    """The counting statements for the quoted table ``t``; ``nf`` draws the next fence."""
    return counting_statements(
        (_acquire(t, nf), _holders(t), _release(t), _renew(t), _transfer(t, nf)),
        acquire_all=lambda n: _acquire_all(t, nf, n),
        release_all=lambda n: _release_all(t, n),
        keys_args=_keys_args,
        blocker=lambda n: _blocker(t, n),
    )
