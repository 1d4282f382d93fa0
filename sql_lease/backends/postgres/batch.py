"""PostgreSQL's multi-row statements, for coalesced calls: plain data, no I/O.

A write batch is one statement carrying the queued acquires, renewals, releases and transfers
of a provider: for each kind present, the one-row statement over ``unnest`` of one array per
parameter, as a data-modifying CTE; a read batch is the one-row read over an array of keys.
Each is a single conditional statement in autocommit: every row is judged under its own row
lock by the same condition as the one-row form, so a call's rows are what its one-row statement
would have returned at that instant. The coalescer puts at most one write per key into one
statement, whatever its kind (rows never interact: the CTEs of one statement see one snapshot
and never touch each other's rows), and sorts the calls by key (row locks are then taken in
the same order by statements that overlap, which keeps deadlocks rare; one that happens rolls
the whole statement back and it runs again). Each result row of a write batch starts with its
kind (`WRITE_KINDS` index) and key, then `WRITE_COLUMNS`; of a read batch, with its key.

A write batch takes one more parameter after its arrays: how long it may wait for a row lock,
in milliseconds, or less when the session's own ``lock_timeout`` is shorter
(``set_config('lock_timeout', ..., true)`` evaluated once per kind, with its first input row,
so before that kind can meet a lock; transaction-local, and each statement is its own
transaction). The provider passes a short wait for a batch of several calls: a row locked by a
long transaction (a caller's `guard`, say) then fails the statement soon with nothing applied,
and each of its calls runs again on its own, waiting for locks within its own deadline. So one
locked key never holds up the other calls of its batch for long.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from ...catalogue import WRITE_COLUMNS, WRITE_KINDS, Batch, Batches
from .sqlnames import BYTEA, EQ, GT, LE, NOW, TEXT, add_millis, notify, unnest

__all__ = ["build_batches"]

_LIVE = f"l.expires_at {GT} {NOW}"
_LOCK_WAIT_PARAM = "$lock_wait"  # replaced by the number of the last parameter
#: The session's own lock_timeout in milliseconds, NULL when it has none (0).
_SESSION_MS = (
    "(EXTRACT(epoch FROM pg_catalog.current_setting('lock_timeout')::interval)"
    " OPERATOR(pg_catalog.*) 1000::numeric)"
)
_SESSION_LOCK_WAIT = (
    f"CASE WHEN {_SESSION_MS} OPERATOR(pg_catalog.>) 0::numeric THEN {_SESSION_MS} END"
)


@dataclass(frozen=True, slots=True)
class _Params:
    """The arrays of one kind in a write batch: the parameter before its first, their types."""

    before: int
    types: tuple[str, ...]

    def array(self, n: int) -> str:
        return f"${self.before + n + 1}::{self.types[n]}[]"


@dataclass(frozen=True, slots=True)
class _Part:
    """One write kind: its parameters' names and types, and its SQL builder."""

    names: tuple[str, ...]
    types: tuple[str, ...]
    build: Callable[[_Params, int], tuple[str, str]]


def _input(p: _Params, columns: str) -> str:
    """The calls of one kind as rows, ``i``; as the first row comes out (an InitPlan,
    evaluated once) the lock wait becomes the batch's last parameter, or the session's own
    when that is shorter."""
    arrays = [p.array(n) for n in range(len(p.types))]
    wait = f"LEAST({_LOCK_WAIT_PARAM}::int, {_SESSION_LOCK_WAIT})::int::{TEXT}"
    locks = f"(SELECT pg_catalog.set_config('lock_timeout', {wait}, true)) IS NOT NULL"
    return f"(SELECT * FROM {unnest(*arrays)} AS u({columns}) WHERE {locks}) AS i"


def _expiry(ttl: str) -> str:
    return add_millis(ttl)


def _write_parts(table: str, nextval: str, channel: str) -> tuple[_Part, ...]:
    """Per write kind (in `WRITE_KINDS` order): its arrays' types, and its CTEs and result
    SELECT given the number of the parameter before its first array and the kind's index."""
    notified = (
        f"(CASE WHEN l.wanted_until {GT} {NOW} THEN {notify(channel, 'l.key')} END) IS NOT NULL"
    )
    mine_live = f"l.owner {EQ} i.owner AND {_LIVE}"

    def acquire(p: _Params, kind: int) -> tuple[str, str]:
        # As the one-row acquire: `cur` reads the batch's rows in the statement's snapshot;
        # absent keys are inserted, expired or own rows updated under their row locks, and a
        # live row of another holder matches neither (no lock, no write): the holder.
        ctes = f"""
a_i AS MATERIALIZED (
    SELECT * FROM {_input(p, "key, owner, ttl")}
), a_cur AS MATERIALIZED (
    SELECT l.key, l.owner, l.fence, l.expires_at, {_LIVE} AS live
    FROM {table} AS l WHERE l.key {EQ} ANY({p.array(0)})
), a_ins AS (
    INSERT INTO {table} AS l (key, owner, fence, expires_at, acquired_at)
    SELECT i.key, i.owner, {nextval}, {_expiry("i.ttl")}, {NOW}
    FROM a_i AS i WHERE NOT EXISTS (SELECT FROM a_cur AS cur WHERE cur.key {EQ} i.key)
    ON CONFLICT (key) DO NOTHING
    RETURNING l.key, l.fence, l.expires_at
), a_upd AS (
    UPDATE {table} AS l SET
        owner = i.owner,
        fence = CASE WHEN {mine_live} THEN l.fence ELSE {nextval} END,
        acquired_at = CASE WHEN {mine_live} THEN l.acquired_at ELSE {NOW} END,
        expires_at = {_expiry("i.ttl")}
    FROM a_i AS i JOIN a_cur AS cur ON cur.key {EQ} i.key
    WHERE (cur.owner {EQ} i.owner OR NOT cur.live)
      AND l.key {EQ} i.key AND (l.owner {EQ} i.owner OR l.expires_at {LE} {NOW})
    RETURNING l.key, l.fence, l.expires_at
)"""
        select = f"""
SELECT {kind}, key, true, fence, expires_at, NULL::{BYTEA}, NULL::boolean FROM a_ins
UNION ALL SELECT {kind}, key, true, fence, expires_at, NULL, NULL FROM a_upd
UNION ALL SELECT {kind}, key, false, fence, expires_at, owner, NULL FROM a_cur WHERE live"""
        return ctes, select

    def renew(p: _Params, kind: int) -> tuple[str, str]:
        ctes = f"""
r_upd AS (
    UPDATE {table} AS l SET expires_at = {_expiry("i.ttl")}
    FROM {_input(p, "key, owner, ttl")}
    WHERE l.key {EQ} i.key AND l.owner {EQ} i.owner AND {_LIVE}
    RETURNING l.key, l.fence, l.expires_at
)"""
        return ctes, _returned(kind, "r_upd", "NULL::boolean")

    def release(p: _Params, kind: int) -> tuple[str, str]:
        ctes = f"""
e_upd AS (
    UPDATE {table} AS l SET expires_at = {NOW}
    FROM {_input(p, "key, owner")}
    WHERE l.key {EQ} i.key AND l.owner {EQ} i.owner AND {_LIVE}
    RETURNING l.key, l.fence, l.expires_at, {notified} AS notified
)"""
        return ctes, _returned(kind, "e_upd", "notified")

    def transfer(p: _Params, kind: int) -> tuple[str, str]:
        ctes = f"""
t_upd AS (
    UPDATE {table} AS l SET
        owner = i.to_owner,
        fence = CASE WHEN l.owner {EQ} i.to_owner THEN l.fence ELSE {nextval} END,
        acquired_at = CASE WHEN l.owner {EQ} i.to_owner THEN l.acquired_at
            ELSE {NOW} END,
        expires_at = {_expiry("i.ttl")}
    FROM {_input(p, "key, from_owner, to_owner, ttl")}
    WHERE l.key {EQ} i.key AND l.owner {EQ} i.from_owner AND {_LIVE}
    RETURNING l.key, l.fence, l.expires_at, {notified} AS notified
)"""
        return ctes, _returned(kind, "t_upd", "notified")

    kot = (BYTEA, BYTEA, "bigint")
    return (
        _Part(("keys", "owners", "ttl_ms"), kot, acquire),
        _Part(("keys", "owners", "ttl_ms"), kot, renew),
        _Part(("keys", "owners"), (BYTEA, BYTEA), release),
        _Part(("keys", "from_owners", "to_owners", "ttl_ms"), (BYTEA,) * 3 + ("bigint",), transfer),
    )


def _returned(kind: int, cte: str, notified: str) -> str:
    return (
        f"\nSELECT {kind}, key, NULL::boolean, fence, expires_at, NULL::{BYTEA}, {notified}"
        f" FROM {cte}"
    )


def build_batches(table: str, nextval: str, channel: str) -> Batches:
    """The multi-row statements for ``table`` (quoted), drawing fences with ``nextval``."""
    parts = _write_parts(table, nextval, channel)

    @cache
    def writes(kinds: tuple[int, ...]) -> Batch:
        if not kinds or list(kinds) != sorted(set(kinds)) or kinds[-1] >= len(parts):
            raise ValueError(f"not a sorted subset of the write kinds: {kinds!r}")
        ctes: list[str] = []
        selects: list[str] = []
        params: list[str] = []
        for kind in kinds:
            part = parts[kind]
            cte, select = part.build(_Params(len(params), part.types), kind)
            ctes.append(cte)
            selects.append(select)
            params.extend(f"{WRITE_KINDS[kind]}_{name}" for name in part.names)
        params.append("lock_wait_ms")
        sql = f"WITH {','.join(ctes)}\n" + "\nUNION ALL".join(selects)
        sql = sql.replace(_LOCK_WAIT_PARAM, f"${len(params)}")
        name = "+".join(WRITE_KINDS[k] for k in kinds)
        return Batch(name, sql.strip(), tuple(params), ("kind", "key", *WRITE_COLUMNS), True)

    read = f"""
SELECT l.key, l.owner, l.fence, l.expires_at, l.acquired_at FROM {table} AS l
WHERE l.key {EQ} ANY($1::{BYTEA}[]) AND {_LIVE}
""".strip()
    return Batches(
        writes=writes,
        read=Batch("read", read, ("keys",), ("key", "owner", "fence", "expires_at", "acquired_at")),
    )
