"""MariaDB statements of counting leases, metadata and all-or-none acquires: plain data.

The row layout of the other backends (`sql_lease.backends.postgres.counting`): the reserved
owner ``x'ff'``, ``slot_limit``, and ``holders`` a JSON array of the live grants, each
``{"o": owner in hex, "f": fence, "e": expiry, "a": grant time, "m": metadata in hex or null,
"s": 1 when the metadata was a str}``, times in microseconds since the epoch.

Each one-key call is one statement that changes the holders under the row's lock, as the
plain statements do (`catalogue`): the acquire an ``INSERT ... ON DUPLICATE KEY UPDATE``, the
others the reporting form (``INSERT ... SELECT ... FOR UPDATE ON DUPLICATE KEY UPDATE``, since
``UPDATE ... RETURNING`` only arrives in 13.0). The update part reads the clock once, under
the lock (``SYSDATE(6)`` pinned in ``@sql_lease_now``), and keeps what it derives from the row
in session variables, assigned left to right in its first assignment and read by the later
ones (``SIMULTANEOUS_ASSIGNMENT``: a bare column is the row as it was). Every assignment to a
variable depends on the row or the clock: MariaDB folds a constant condition away when it
prepares a statement, assignments inside it included. The variables a ``RETURNING`` reads are
set, typed, by every session (`sessions.session_sql`): an unset one reads as NULL there.
Grants are read with ``JSON_TABLE`` and rebuilt with ``JSON_OBJECT``/``JSON_ARRAYAGG``. Fences
are drawn from the sequence under the lock (``NEXTVAL`` in the update part), so they increase
strictly per key across plain and counting grants.

An all-or-none acquire locks the keys' rows in key order (``SELECT ... ORDER BY key FOR
UPDATE``) and judges them all before changing any: window functions over the locked rows count
the blockers and the rows, which the update part reads as ``VALUES(fence)`` and
``VALUES(slot_limit)`` (no row is inserted: every selected row exists). Keys without a row are
given expired placeholder rows first (``ensure``, a multi-row insert in key order), so no
statement waits on a gap lock. Plain data: no I/O, no driver.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from ...catalogue import (
    AllRow,
    CountingStatements,
    Row,
    Statement,
    decode_key,
)
from .._counting import counting_statements

__all__ = ["COUNTING_VARIABLES", "RESERVED", "build_counting"]

RESERVED: Final = "x'ff'"
NOW: Final = "SYSDATE(6)"
_PIN: Final = f"(@sql_lease_now := {NOW})"
_T: Final = "@sql_lease_now"
_CUR: Final = "@sql_lease_cur"
_MINE: Final = "@sql_lease_mine"
_TAKE: Final = "@sql_lease_take"
_FENCE: Final = "@sql_lease_fence"
_NEW: Final = "@sql_lease_h"
_OK: Final = "@sql_lease_ok"
#: The new fence as a number in JSON (a variable read may come back as a string).
_FENCE_NUMBER: Final = f"CAST({_FENCE} AS SIGNED)"
#: The variables these statements keep, with a value of their type (`sessions.session_sql`).
COUNTING_VARIABLES: Final = (
    (_CUR, "''"),
    (_NEW, "''"),
    (_MINE, "0"),
    (_TAKE, "0"),
    (_FENCE, "0"),
    (_OK, "0"),
)
_GRANTS: Final = (
    "'$[*]' COLUMNS(o VARCHAR(2048) PATH '$.o', f BIGINT PATH '$.f', e BIGINT PATH '$.e',"
    " a BIGINT PATH '$.a', m VARCHAR(2048) PATH '$.m', s INT PATH '$.s')"
)


def _us(ts: str) -> str:
    """A DATETIME(6) (UTC) as microseconds since the epoch (exact)."""
    return f"TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {ts})"


def _ts(us: str) -> str:
    return f"(TIMESTAMP'1970-01-01 00:00:00' + INTERVAL ({us}) MICROSECOND)"


def _later(now: str, ttl: str) -> str:
    return f"({_us(now)} + {ttl} * 1000)"


def _hex(b: str) -> str:
    return f"LOWER(HEX({b}))"


def _obj(j: str) -> str:
    return f"JSON_OBJECT('o', {j}.o, 'f', {j}.f, 'e', {j}.e, 'a', {j}.a, 'm', {j}.m, 's', {j}.s)"


def _agg(item: str, arr: str, where: str = "") -> str:
    """The grants of ``arr`` (JSON) as ``item`` each, oldest fence first ('[]' for none)."""
    cond = f" WHERE {where}" if where else ""
    return (
        f"COALESCE((SELECT JSON_ARRAYAGG({item} ORDER BY j.f)"
        f" FROM JSON_TABLE({arr}, {_GRANTS}) AS j{cond}), '[]')"
    )


def _grant(owner: str, fence: str, now: str, ttl: str, meta: str, kind: str) -> str:
    return (
        f"JSON_OBJECT('o', {_hex(owner)}, 'f', {fence}, 'e', {_later(now, ttl)},"
        f" 'a', {_us(now)}, 'm', {_hex(meta)}, 's', {kind})"
    )


def _live(t: str, now: str) -> str:
    """The live grants of row ``t`` (a live plain lease as one grant)."""
    return f"""(CASE WHEN {t}.owner = {RESERVED} AND {t}.expires_at > {now}
        THEN {_agg(_obj("j"), f"{t}.holders", f"j.e > {_us(now)}")}
    WHEN {t}.expires_at > {now} THEN JSON_ARRAY(JSON_OBJECT('o', {_hex(f"{t}.owner")},
        'f', {t}.fence, 'e', {_us(f"{t}.expires_at")}, 'a', {_us(f"{t}.acquired_at")},
        'm', NULL, 's', NULL))
    ELSE '[]' END)"""


def _has(arr: str, owner: str, live_at: str | None = None) -> str:
    """Whether ``arr`` has a grant of ``owner`` (live at ``live_at`` when given)."""
    live = f" AND j.e > {_us(live_at)}" if live_at else ""
    return (
        f"EXISTS (SELECT 1 FROM JSON_TABLE({arr}, {_GRANTS}) AS j WHERE j.o = {_hex(owner)}{live})"
    )


def _with_me(arr: str, owner: str, now: str, ttl: str, meta: str, kind: str) -> str:
    """``arr`` with ``owner``'s grant renewed to now + ttl (its metadata replaced if given)."""
    renewed = (
        f"JSON_OBJECT('o', j.o, 'f', j.f, 'e', {_later(now, ttl)}, 'a', j.a,"
        f" 'm', IF({meta} IS NULL, j.m, {_hex(meta)}), 's', IF({meta} IS NULL, j.s, {kind}))"
    )
    return _agg(f"IF(j.o = {_hex(owner)}, {renewed}, {_obj('j')})", arr)


def _without(arr: str, owner: str) -> str:
    return _agg(_obj("j"), arr, f"j.o <> {_hex(owner)}")


def _append(arr: str, item: str) -> str:
    return f"JSON_ARRAY_APPEND({arr}, '$', {item})"


def _max_expiry(arr: str, fallback: str) -> str:
    latest = _ts("MAX(j.e)")
    return f"COALESCE((SELECT {latest} FROM JSON_TABLE({arr}, {_GRANTS}) AS j), {fallback})"


def _set(*pairs: tuple[str, str]) -> str:
    """Assign each variable in order; the condition is never true (every value is non-NULL)."""
    return " OR ".join(f"({var} := {value}) IS NULL" for var, value in pairs)


def _returning(t: str) -> str:
    return (
        f"RETURNING {t}.owner, {t}.slot_limit,"
        f" IF({t}.owner = {RESERVED}, {t}.holders, NULL), {t}.fence, {t}.expires_at"
    )


def _acquire(t: str, seq: str) -> str:
    """(?1 key, ?2 owner, ?3 ttl, ?4 limit, ?5 metadata, ?6 metadata is str)."""
    held_limit = f"IF({t}.owner = {RESERVED}, {t}.slot_limit, 1)"
    mine = (
        f"IF({t}.owner = {RESERVED}, {t}.expires_at > {_T} AND {_has(f'{t}.holders', '?2', _T)},"
        f" {t}.owner = ?2 AND {t}.expires_at > {_T})"
    )
    take = (
        f"(JSON_LENGTH({_CUR}) = 0 OR {held_limit} = ?4) AND ({_MINE} OR JSON_LENGTH({_CUR}) < ?4)"
    )
    grant = _grant("?2", _FENCE_NUMBER, _T, "?3", "?5", "?6")
    new = f"IF({_MINE}, {_with_me(_CUR, '?2', _T, '?3', '?5', '?6')}, {_append(_CUR, grant)})"
    first = _set(
        ("@sql_lease_now", NOW),
        (_CUR, _live(t, _T)),
        (_MINE, mine),
        (_TAKE, take),
        (_FENCE, f"IF({_TAKE} AND NOT {_MINE}, NEXTVAL({seq}), {t}.fence)"),
        (_NEW, f"IF({_TAKE}, {new}, {t}.holders)"),
    )
    inserted = _grant("?2", f"LASTVAL({seq})", NOW, "?3", "?5", "?6")
    return f"""
INSERT INTO {t} (`key`, owner, fence, expires_at, acquired_at, slot_limit, holders)
VALUES (?1, {RESERVED}, NEXTVAL({seq}), {NOW} + INTERVAL ?3 * 1000 MICROSECOND, {NOW}, ?4,
    JSON_ARRAY({inserted}))
ON DUPLICATE KEY UPDATE
    owner = IF({first}, {t}.owner, IF({_TAKE} OR {t}.owner = {RESERVED}, {RESERVED}, {t}.owner)),
    fence = {_FENCE},
    expires_at = IF({_TAKE}, {_max_expiry(_NEW, f"{t}.expires_at")}, {t}.expires_at),
    acquired_at = IF({_TAKE} AND NOT {_MINE}, {_T}, {t}.acquired_at),
    slot_limit = IF({_TAKE}, ?4, {t}.slot_limit),
    holders = IF({_TAKE}, {_NEW}, IF({t}.owner = {RESERVED}, {_CUR}, {t}.holders))
{_returning(t)}
""".strip()


_INSERTED: Final = "`key`, owner, fence, expires_at, acquired_at"


def _reporting(t: str, where: str, update: str, returning: str) -> str:
    return (
        f"INSERT INTO {t} ({_INSERTED}) SELECT {_INSERTED} FROM {t} AS s WHERE {where} "
        f"FOR UPDATE ON DUPLICATE KEY UPDATE {update} {returning}"
    )


def _renew(t: str) -> str:
    """(?1 key, ?2 owner, ?3 ttl): the owner's live grant renewed."""
    where = (
        f"s.`key` = ?1 AND s.owner = {RESERVED} AND s.expires_at > {NOW}"
        f" AND {_has('s.holders', '?2', NOW)}"
    )
    first = _set(
        ("@sql_lease_now", NOW),
        (_NEW, _with_me(_live(t, _T), "?2", _T, "?3", "NULL", "NULL")),
    )
    update = (
        f"holders = IF({first}, {t}.holders, {_NEW}),"
        f" expires_at = {_max_expiry(_NEW, f'{t}.expires_at')}"
    )
    return _reporting(t, where, update, _returning(t))


def _transfer(t: str, seq: str) -> str:
    """(?1 key, ?2 from, ?3 to, ?4 ttl, ?5 metadata, ?6 metadata is str): ``from``'s live
    grant handed to ``to`` with a new fence, its metadata kept unless given; refused when
    ``to`` already holds a grant of the key; a live plain lease of ``from`` only when metadata
    is given (as PostgreSQL's)."""
    same = "?2 = ?3"
    where = (
        f"s.`key` = ?1 AND ((s.owner = {RESERVED} AND s.expires_at > {NOW}"
        f" AND {_has('s.holders', '?2', NOW)} AND ({same} OR NOT {_has('s.holders', '?3', NOW)}))"
        f" OR (s.owner = ?2 AND s.expires_at > {NOW} AND ?5 IS NOT NULL))"
    )

    def kept(field: str) -> str:
        return (
            f"(SELECT j.{field} FROM JSON_TABLE({_CUR}, {_GRANTS}) AS j"
            f" WHERE j.o = {_hex('?2')} LIMIT 1)"
        )

    new = (
        f"JSON_OBJECT('o', {_hex('?3')}, 'f', {_FENCE_NUMBER},"
        f" 'e', {_later(_T, '?4')}, 'a', {_us(_T)},"
        f" 'm', IF(?5 IS NULL, {kept('m')}, {_hex('?5')}), 's', IF(?5 IS NULL, {kept('s')}, ?6))"
    )
    first = _set(
        ("@sql_lease_now", NOW),
        (_CUR, _live(t, _T)),
        (_FENCE, f"IF({same}, {t}.fence, NEXTVAL({seq}))"),
        (
            _NEW,
            f"IF({same}, {_with_me(_CUR, '?2', _T, '?4', '?5', '?6')},"
            f" {_append(_without(_CUR, '?2'), new)})",
        ),
    )
    update = (
        f"owner = IF({first}, {t}.owner, {RESERVED}), fence = {_FENCE},"
        f" expires_at = {_max_expiry(_NEW, f'{t}.expires_at')},"
        f" acquired_at = IF({same}, {t}.acquired_at, {_T}),"
        f" slot_limit = IF({t}.owner = {RESERVED}, {t}.slot_limit, 1), holders = {_NEW}"
    )
    return _reporting(t, where, update, _returning(t))


def _release(t: str) -> str:
    """(?1 key, ?2 owner): the owner's grant (live or expired) removed; none left: the row
    expires now. Returns when, and the removed grant's fence."""
    where = f"s.`key` = ?1 AND s.owner = {RESERVED} AND {_has('s.holders', '?2')}"
    fence = (
        f"(SELECT j.f FROM JSON_TABLE({t}.holders, {_GRANTS}) AS j"
        f" WHERE j.o = {_hex('?2')} LIMIT 1)"
    )
    first = _set(
        ("@sql_lease_now", NOW),
        (_FENCE, fence),
        (_NEW, _without(_live(t, _T), "?2")),
    )
    update = f"holders = IF({first}, {t}.holders, {_NEW}), expires_at = {_max_expiry(_NEW, _T)}"
    return _reporting(t, where, update, f"RETURNING {NOW}, {_FENCE}")


def _holders(t: str) -> str:
    """(?1 key): the live row, its grants as JSON (a plain lease as one grant)."""
    return f"""
SELECT l.owner, l.slot_limit, {_live("l", NOW)}, l.fence, l.expires_at FROM {t} AS l
WHERE l.`key` = ?1 AND l.expires_at > {NOW}
""".strip()


def _keys(n: int) -> str:
    return ", ".join(f"?{i}" for i in range(1, n + 1))


def decode_all(row: Row) -> AllRow:
    """An all-or-none row: MariaDB answers 1/0 for booleans."""
    acquired = None if row[1] is None else bool(row[1])
    return AllRow(
        bytes(row[0]), acquired, row[2], row[3], None if row[4] is None else bytes(row[4])
    )


@lru_cache(maxsize=64)
def _acquire_all(t: str, seq: str, n: int) -> Statement[AllRow]:
    """(?1..?n sorted keys, ?n+1 owner, ?n+2 ttl): the keys' rows locked in key order, then
    all taken as plain leases or none. Each row comes back taken (1), blocking (0, with its
    owner), or neither (NULL: refused by another row, or a key has no row yet: `ensure`)."""
    o, ttl = f"?{n + 1}", f"?{n + 2}"
    blocking = f"s.owner <> {o} AND s.expires_at > {NOW}"
    mine_live = f"{t}.owner = {o} AND {t}.expires_at > {NOW}"
    ok = f"VALUES(fence) = 0 AND VALUES(slot_limit) = {n} AND {t}.`key` IS NOT NULL"
    still_blocking = f"{t}.owner <> {o} AND {t}.expires_at > {NOW}"
    sql = f"""
INSERT INTO {t} (`key`, owner, fence, expires_at, acquired_at, slot_limit)
SELECT s.`key`, s.owner, SUM({blocking}) OVER (), s.expires_at, s.acquired_at, COUNT(*) OVER ()
FROM {t} AS s WHERE s.`key` IN ({_keys(n)}) ORDER BY s.`key` FOR UPDATE
ON DUPLICATE KEY UPDATE
    owner = IF(({_OK} := ({ok})) IS NULL, {t}.owner, IF({_OK}, {o}, {t}.owner)),
    fence = IF({_OK} AND NOT ({mine_live}), NEXTVAL({seq}), {t}.fence),
    acquired_at = IF({_OK} AND NOT ({mine_live}), {NOW}, {t}.acquired_at),
    expires_at = IF({_OK}, {NOW} + INTERVAL {ttl} * 1000 MICROSECOND, {t}.expires_at)
RETURNING `key`, IF({_OK}, 1, IF({still_blocking}, 0, NULL)), IF({_OK}, fence, NULL),
    IF({_OK}, expires_at, NULL), IF({_OK}, NULL, IF({still_blocking}, owner, NULL))
""".strip()
    params = (*(f"key{i}" for i in range(n)), "owner", "ttl_ms")
    return Statement(
        "acquire_all", sql, params, ("key", "acquired", "fence", "expires_at", "holder"), decode_all
    )


@lru_cache(maxsize=64)
def _ensure(t: str, seq: str, n: int) -> Statement[bytes]:
    """(?1..?n sorted keys): an expired placeholder row (the reserved owner, no grants) for
    each key that has none, inserted in key order."""
    rows = ", ".join(f"(?{i}, {RESERVED}, NEXTVAL({seq}), {NOW}, {NOW})" for i in range(1, n + 1))
    sql = (
        f"INSERT INTO {t} ({_INSERTED}) VALUES {rows}"
        f" ON DUPLICATE KEY UPDATE owner = {t}.owner RETURNING `key`"
    )
    return Statement("ensure_rows", sql, tuple(f"key{i}" for i in range(n)), ("key",), decode_key)


@lru_cache(maxsize=64)
def _release_all(t: str, n: int) -> Statement[bytes]:
    """(?1..?n keys, ?n+1 owner): the owner's live plain leases among the keys released, their
    rows locked in key order."""
    o = f"?{n + 1}"
    sql = _reporting(
        t,
        f"s.`key` IN ({_keys(n)}) AND s.owner = {o} AND s.expires_at > {NOW} ORDER BY s.`key`",
        f"expires_at = {NOW}",
        "RETURNING `key`",
    )
    params = (*(f"key{i}" for i in range(n)), "owner")
    return Statement("release_all", sql, params, ("key",), decode_key)


def _keys_args(keys: list[bytes]) -> tuple[object, ...]:
    return tuple(keys)


def build_counting(t: str, seq: str) -> CountingStatements:
    """The counting statements for the quoted table ``t`` and its quoted fence sequence."""
    return counting_statements(
        (_acquire(t, seq), _holders(t), _release(t), _renew(t), _transfer(t, seq)),
        acquire_all=lambda n: _acquire_all(t, seq, n),
        release_all=lambda n: _release_all(t, n),
        keys_args=_keys_args,
        ensure=lambda n: _ensure(t, seq, n),
    )
