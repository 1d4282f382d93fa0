"""The MariaDB statement catalogue (and its DDL): plain data, no I/O, no driver.

The same operations as on PostgreSQL, each ONE statement in autocommit, judged under the row
lock it takes (10.5+; tested on 10.11):

- acquire: ``INSERT ... ON DUPLICATE KEY UPDATE ... RETURNING``. A caller that loses rewrites
  nothing and gets the live holder's row back (RETURNING names the row as it stands).
- the reporting forms (release, renew, transfer, force-release, mark wanted, renew many):
  ``INSERT INTO t SELECT ... FROM t ... FOR UPDATE ON DUPLICATE KEY UPDATE ... RETURNING``:
  ``UPDATE ... RETURNING`` only arrives in MariaDB 13.0, and this form inserts nothing for a
  missing key (no row selected: no row returned). The ``SELECT ... FOR UPDATE`` is a current,
  locking read: the row the update sees is the row the condition was checked on, and the
  update's ``IF``s check it again anyway.
- ``ON DUPLICATE KEY UPDATE`` assigns left to right unless ``sql_mode`` has
  ``SIMULTANEOUS_ASSIGNMENT`` (10.3.5+), which every connection sets (`SESSION_SQL_MODE`): a
  statement written for standard semantics would otherwise extend an expired holder's lease
  without handing it over.
- The clock is the server's ``UTC_TIMESTAMP(6)`` (constant within a statement; ``NOW()``
  follows the session's time zone). Fences come from a ``SEQUENCE`` taken under the row lock
  (``NEXTVAL`` in the update part), so they increase strictly per key.
- Keys and owners are ``VARBINARY(1024)`` (NUL-safe bytes; 1,024 bytes fit InnoDB's 3,072-byte
  index limit).

Parameters are written ``?1``, ``?2``... (one name per value, repeated where a statement uses a
value twice); `placeholders.compiled` turns a text into the drivers' ``%s`` form and the order
of its arguments. Identifiers are quoted with backticks, valid whatever the ``sql_mode``.
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
from ...schema import fence_sequence_name, notify_channel
from .counting import build_counting

__all__ = [
    "MAX_BATCH",
    "NOW",
    "SESSION_SQL_MODE",
    "TRANSACTION",
    "build_catalogue",
    "mariadb_ddl",
    "quote",
]

#: The server's clock when it is read (UTC: every session's time zone is +00:00), not when
#: the statement began (``UTC_TIMESTAMP``, ``NOW``): a statement that waited for a row lock
#: judges the row by the time it got it, as PostgreSQL's ``clock_timestamp()``.
NOW: Final = "SYSDATE(6)"
#: The acquire's one reading of the clock under the row lock, kept in a session variable.
_PIN: Final = f"(@sql_lease_now := {NOW})"
_PINNED: Final = "@sql_lease_now"
#: The guard runs in the application's session, whatever its time zone: UTC at the start of
#: the statement plus the time since, read when the row lock was granted.
_GUARD_NOW: Final = (
    "UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND"
)
#: Pairs per renew-many statement (bounded by ``max_allowed_packet``, 16 MiB by default).
MAX_BATCH: Final = 2_000
#: Every connection's ``sql_mode``: standard assignment in ``ON DUPLICATE KEY UPDATE``, strict
#: inserts. Never ``NO_BACKSLASH_ESCAPES`` nor ``ANSI_QUOTES``: the drivers escape with
#: backslashes, and the statements quote with backticks.
SESSION_SQL_MODE: Final = (
    "STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION,SIMULTANEOUS_ASSIGNMENT"
)
#: Coalesced calls go out as their one-row statements in one transaction (in key order: the
#: same lock order in every batch, or concurrent batches deadlock); only with
#: ``coalesce="always"``: with the default, a call never waits for a batch (``waits=False``),
#: as separate statements on their own connections ran faster at 16 and 64 callers
#: (benchmarks/bench_mariadb.py).
TRANSACTION: Final = Transaction(
    begin_write="START TRANSACTION",
    begin="START TRANSACTION READ ONLY",
    commit="COMMIT",
    rollback="ROLLBACK",
    waits=False,
)

_COLUMNS: Final = "`key`, owner, fence, expires_at, acquired_at, wanted_until"


def quote(name: str) -> str:
    """A validated table name in backticks."""
    return f"`{check_identifier('table_name', name)}`"


def _plus(param: str) -> str:
    return f"{NOW} + INTERVAL {param} * 1000 MICROSECOND"


def mariadb_ddl(table_name: str) -> list[str]:
    """The fence sequence and the leases table (with ``wanted_until``), as migrations 0001 and
    0002 create them together; for documentation and tests: the migrations carry their own
    frozen copies."""
    t = check_identifier("table_name", table_name)
    return [
        f"CREATE SEQUENCE `{fence_sequence_name(t)}` START WITH 1 INCREMENT BY 1 MINVALUE 1 "
        "NOCACHE NOCYCLE",
        f"CREATE TABLE `{t}` (`key` VARBINARY(1024) NOT NULL, owner VARBINARY(1024) NOT NULL, "
        "fence BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL, "
        "acquired_at DATETIME(6) NOT NULL, wanted_until DATETIME(6) NULL, "
        "PRIMARY KEY (`key`), "
        f"CONSTRAINT `{t}_key_len` CHECK (LENGTH(`key`) BETWEEN 1 AND 1024), "
        f"CONSTRAINT `{t}_owner_len` CHECK (LENGTH(owner) BETWEEN 1 AND 1024)) "
        "ENGINE=InnoDB",
    ]


def _reporting(t: str, where: str, update: str, returning: str) -> str:
    """The reporting form: the live row that ``where`` selects (locked), updated by
    ``update``; nothing for a missing row."""
    return (
        f"INSERT INTO {t} ({_COLUMNS}) SELECT {_COLUMNS} FROM {t} AS s WHERE {where} "
        f"FOR UPDATE ON DUPLICATE KEY UPDATE {update} RETURNING {returning}"
    )


def build_catalogue(table_name: str) -> Catalogue:
    """The MariaDB catalogue for ``table_name`` (its database is the connection's)."""
    t = quote(table_name)
    seq = f"`{fence_sequence_name(check_identifier('table_name', table_name))}`"
    live = f"expires_at > {NOW}"
    # The update part of the acquire runs once the row is locked: it reads the clock once,
    # there (`_PIN`), and judges the row by that reading only. A bare column is the row's.
    takes = f"(owner = VALUES(owner) OR expires_at <= {_PINNED})"
    mine_live = f"(owner = VALUES(owner) AND expires_at > {_PINNED})"
    acquire = f"""
INSERT INTO {t} (`key`, owner, fence, expires_at, acquired_at)
VALUES (?1, ?2, NEXTVAL({seq}), {_plus("?3")}, {NOW})
ON DUPLICATE KEY UPDATE
    owner = IF({_PIN} IS NULL OR {takes}, VALUES(owner), owner),
    fence = IF({mine_live}, fence, IF({takes}, NEXTVAL({seq}), fence)),
    acquired_at = IF({mine_live}, acquired_at, IF({takes}, {_PINNED}, acquired_at)),
    expires_at = IF({takes}, {_PINNED} + INTERVAL ?3 * 1000 MICROSECOND, expires_at)
RETURNING owner = ?2, fence, expires_at, owner
""".strip()
    # The reporting forms judge the row in their locking read (the clock read there, after
    # the lock was granted); the row stays locked until the update, which changes it
    # unconditionally. Their update names the row's columns with the table.
    key_owner_live = f"s.`key` = ?1 AND s.owner = ?2 AND s.{live}"
    k, ko, kot = ("key",), ("key", "owner"), ("key", "owner", "ttl_ms")
    fence_expiry = ("fence", "expires_at")
    return Catalogue(
        dialect="mariadb",
        table=t,
        channel=notify_channel(table_name),
        acquire=Statement(
            "acquire", acquire, kot, ("acquired", "fence", "expires_at", "holder"), decode_acquire
        ),
        get_owner=Statement(
            "get_owner",
            f"SELECT owner FROM {t} WHERE `key` = ?1 AND {live}",
            k,
            ("owner",),
            decode_owner,
        ),
        get_lease=Statement(
            "get_lease",
            f"SELECT owner, fence, expires_at, acquired_at FROM {t} WHERE `key` = ?1 AND {live}",
            k,
            ("owner", "fence", "expires_at", "acquired_at"),
            decode_lease,
        ),
        holder=Statement(
            "holder",
            f"SELECT owner, fence, expires_at FROM {t} WHERE `key` = ?1 AND {live}",
            k,
            ("owner", "fence", "expires_at"),
            decode_holder,
        ),
        release=Statement(
            "release",
            _reporting(
                t,
                key_owner_live,
                f"expires_at = {NOW}",
                "fence, expires_at",
            ),
            ko,
            fence_expiry,
            decode_released,
        ),
        renew=Statement(
            "renew",
            _reporting(
                t,
                key_owner_live,
                f"expires_at = {_plus('?3')}",
                "fence, expires_at",
            ),
            kot,
            fence_expiry,
            decode_renewal,
        ),
        transfer=Statement(
            "transfer",
            _reporting(
                t,
                key_owner_live,
                f"owner = ?3, fence = IF({t}.owner <> ?3, NEXTVAL({seq}), {t}.fence), "
                f"acquired_at = IF({t}.owner <> ?3, {NOW}, {t}.acquired_at), "
                f"expires_at = {_plus('?4')}",
                "fence, expires_at",
            ),
            ("key", "from_owner", "to_owner", "ttl_ms"),
            fence_expiry,
            decode_renewal,
        ),
        renew_many=lambda n: _renew_many(t, n),
        renew_many_args=_renew_many_args,
        force_release=Statement(
            "force_release",
            _reporting(
                t,
                f"s.`key` = ?1 AND s.{live}",
                f"expires_at = {NOW}",
                "owner, fence, expires_at",
            ),
            k,
            ("owner", "fence", "expires_at"),
            decode_force_release,
        ),
        list_live=Statement(
            "list_live",
            f"""
SELECT `key`, owner, fence, expires_at, acquired_at, {NOW} FROM {t}
WHERE `key` >= ?1 AND (?2 IS NULL OR `key` < ?2) AND {live}
ORDER BY `key` LIMIT ?3
""".strip(),
            ("from_key", "below_key", "limit"),
            ("key", "owner", "fence", "expires_at", "acquired_at", "now"),
            decode_list_live,
        ),
        list_states=Statement(
            "list_states",
            f"""
SELECT `key`, owner, fence, expires_at, acquired_at, wanted_until, {NOW} FROM {t}
WHERE `key` >= ?1 AND (?2 IS NULL OR `key` < ?2)
  AND (expires_at > {NOW} - INTERVAL ?4 * 1000 MICROSECOND OR wanted_until > {NOW})
ORDER BY `key` LIMIT ?3
""".strip(),
            ("from_key", "below_key", "limit", "ended_within_ms"),
            ("key", "owner", "fence", "expires_at", "acquired_at", "wanted_until", "now"),
            decode_lease_state,
        ),
        purge_batch=Statement(
            "purge_batch",
            f"DELETE FROM {t} WHERE expires_at < {NOW} - INTERVAL ?1 * 1000 MICROSECOND "
            "LIMIT ?2 RETURNING 1",
            ("min_age_ms", "batch"),
            ("1",),
            decode_one,
        ),
        want=Statement(
            "want",
            _reporting(
                t,
                f"s.`key` = ?1 AND s.{live}",
                f"wanted_until = GREATEST(COALESCE({t}.wanted_until, {NOW}), {_plus('?2')})",
                "owner, fence, expires_at",
            ),
            ("key", "wait_ms"),
            ("owner", "fence", "expires_at"),
            decode_holder,
        ),
        now=Statement("now", f"SELECT {NOW}", (), ("now",), decode_now),
        guard=Statement(
            "guard",
            f"SELECT 1 FROM {t} WHERE `key` = :key AND fence = :fence AND expires_at > "
            f"{_GUARD_NOW} LOCK IN SHARE MODE",
            ("key", "fence"),
            ("1",),
            decode_one,
        ),
        max_batch=MAX_BATCH,
        transaction=TRANSACTION,
        counting=build_counting(t, seq),
    )


@lru_cache(maxsize=64)
def _renew_many(t: str, n: int) -> Statement[tuple[tuple[bytes, bytes], Renewal]]:
    pairs = ", ".join(f"(?{2 * i + 2}, ?{2 * i + 3})" for i in range(n))
    keys = ", ".join(f"?{2 * i + 2}" for i in range(n))
    sql = _reporting(
        t,
        f"s.`key` IN ({keys}) AND (s.`key`, s.owner) IN ({pairs}) AND s.expires_at > {NOW} "
        "ORDER BY s.`key`",
        f"expires_at = {_plus('?1')}",
        "`key`, owner, fence, expires_at",
    )
    params = ("ttl_ms", *(f"{part}{i}" for i in range(n) for part in ("key", "owner")))
    return Statement(
        "renew_many", sql, params, ("key", "owner", "fence", "expires_at"), decode_renewed_pair
    )


def _renew_many_args(pairs: list[tuple[bytes, bytes]], ttl: int) -> tuple[object, ...]:
    return (ttl, *(part for pair in pairs for part in pair))
