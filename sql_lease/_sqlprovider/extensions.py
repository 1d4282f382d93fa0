"""The SQL provider's extensions beyond the contract: reporting forms of release, renew and
transfer, batched renewal, break-glass release, listing, purging, waiting marks, the clock,
the wake-up source of waiters."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from .._core.calls import (
    key_owner,
    list_args,
    purge_args,
    purge_rounds,
    renew_args,
    renew_chunks,
    renewed_in_order,
    transfer_args,
    want_args,
)
from .._core.contract import ForeignLease, Lease
from .._core.count_calls import renewal_of
from .._core.counting import RESERVED_OWNER
from .._core.validate import Millis, check_limit, check_millis, check_name, check_prefix, check_ttl
from ..capabilities import Holder, Released, Renewal
from ..catalogue import LeaseState, decode_row, label
from .counting import SqlCounting
from .guard import guard

__all__ = ["SqlExtensions"]

logger = logging.getLogger("sql_lease")
_wait_logger = logging.getLogger("sql_lease.wait")


class SqlExtensions(SqlCounting):
    """The extension methods of `SqlLeaseProvider` (its base class)."""

    _listen_engine: AsyncEngine | None
    _listens: bool

    async def release(self, key: str, owner: str) -> Released | None:
        """`release_lease` that reports what it did: the `Released` fence and database time
        it took effect, or None when ``owner`` held no live lease of ``key`` (a no-op)."""
        statement = self._sql.release
        args = key_owner(key, owner)
        rows = await self._one(self._releases, "release_lease", True, statement.sql, args)
        if rows:
            return statement.decode(rows[0])
        return await self._count_release(*args)  # a grant of a counting row?

    async def renew(self, key: str, owner: str, ttl_ms: Millis) -> Renewal | None:
        """`renew_lease` that reports the `Renewal` (fence, new expiry), or None when lost."""
        args = (*key_owner(key, owner), check_ttl(ttl_ms))
        statement = self._sql.renew
        rows = await self._one(self._renews, "renew_lease", True, statement.sql, args)
        if rows:
            return statement.decode(rows[0])
        grant = await self._count_renew(*args)  # a grant of a counting row?
        return None if grant is None else Renewal(grant.fence, grant.expires_at)

    async def transfer(
        self, key: str, from_owner: str, to_owner: str, ttl_ms: Millis
    ) -> Renewal | None:
        """`transfer_lease` that reports the new owner's `Renewal` (its fence, the expiry),
        or None when ``from_owner`` did not hold the lease."""
        args = transfer_args(key, from_owner, to_owner, ttl_ms)
        statement = self._sql.transfer
        rows = await self._one(self._transfers, "transfer_lease", True, statement.sql, args)
        if rows:
            return statement.decode(rows[0])
        return renewal_of(await self._count_transfer(args, None, None))  # a counting grant?

    async def renew_leases(self, items: Iterable[tuple[str, str]], ttl_ms: Millis) -> list[bool]:
        """Renew many ``(key, owner)`` leases in one statement; one bool per item, in order."""
        return [r is not None for r in await self.renew_many(items, ttl_ms)]

    async def renew_many(
        self, items: Iterable[tuple[str, str]], ttl_ms: Millis
    ) -> list[Renewal | None]:
        """Renew many ``(key, owner)`` leases; per item its `Renewal`, or None when not held."""
        pairs, ttl = renew_args(items, ttl_ms)
        return await self._renew_checked(pairs, ttl)

    async def _renew_checked(
        self, pairs: list[tuple[bytes, bytes]], ttl: int
    ) -> list[Renewal | None]:
        """`renew_many` with its arguments checked; a renewal tick's come here directly
        (`sql_lease._core.policy.CheckedCalls`)."""
        if not pairs:
            if self._closed:
                raise self._closed_error("renew_leases")
            return []
        groups = self._key_groups([k for k, _ in pairs]) if len(pairs) > 1 else None
        if groups is None or len(groups) == 1:
            rows = await self._renew_rows(pairs, ttl)
        else:  # Citus: each worker's share at once, on connections of their own
            shares = [[pairs[i] for i in group] for group in groups]
            rows = [
                r
                for part in await asyncio.gather(
                    *(self._renew_rows(share, ttl) for share in shares)
                )
                for r in part
            ]
        return await self._renew_misses(renewed_in_order(self._sql, rows, pairs), pairs, ttl)

    async def _renew_rows(self, pairs: list[tuple[bytes, bytes]], ttl: int) -> list[Any]:
        rows: list[Any] = []
        for sql, args in renew_chunks(self._sql, pairs, ttl):
            rows += await self._run("renew_leases", True, sql, args)
        return rows

    async def force_release(self, key: str) -> bool:
        """Break-glass: end the live lease of ``key`` whoever holds it; logged at WARNING."""
        k = check_name("key", key)
        statement = self._sql.force_release
        rows = await self._run("force_release", True, statement.sql, (k,))
        if not rows:
            return False
        ended = statement.decode(rows[0])
        logger.warning(
            "force-released lease %r held by %r (fence %d)", key, ended.owner, ended.fence
        )
        return True

    async def list_leases(
        self, prefix: str | None = None, *, limit: int = 100, after: str | None = None
    ) -> list[Lease]:
        """Live leases in key order, optionally those whose key starts with ``prefix``.

        ``limit`` caps the page (1 to 10,000); pass the last key seen as ``after`` for the next.
        A counting lease shows as its live grants, one `Lease` each (with its metadata).
        """
        statement = self._sql.list_live
        args = list_args(prefix, limit, after)
        rows = await self._run("list_leases", False, statement.sql, args)
        leases = [statement.decode(row) for row in rows]
        if any(isinstance(lease, ForeignLease) for lease in leases):
            leases = await self._expand_counting(leases)
        return leases

    async def list_states(
        self,
        prefix: str | None = None,
        *,
        limit: int = 100,
        after: str | None = None,
        ended_within_ms: Millis = 60_000,
    ) -> list[LeaseState]:
        """What an operator watches (``sql-lease top``): in key order, the rows of live leases,
        of leases that ended (released or expired) within ``ended_within_ms``, and of keys a
        waiter wants, each with ``wanted_until`` and the database's ``now``.

        ``prefix``, ``limit`` and ``after`` as for `list_leases`. A key or owner that is not
        UTF-8 shows as its label (``\\x`` and hex), never raises. A counting lease shows as
        one state per live holder (``limit`` counts keys, not holders).
        """
        low, high = check_prefix(prefix)
        count = check_limit(limit)
        within = check_millis("ended_within_ms", ended_within_ms)
        if after is not None:
            low = max(low, check_name("after", after) + b"\0")
        statement = self._sql.list_states
        rows = await self._run("list_states", False, statement.sql, (low, high, count, within))
        return await self._holders_of_states([statement.decode(row) for row in rows])

    async def _holders_of_states(self, states: list[LeaseState]) -> list[LeaseState]:
        """The states with a live counting row as one state per live grant (its holders), and
        a counting row with no live grant left out unless a waiter wants its key (an
        all-or-none acquire's placeholder, or every grant ended: nobody held it as such). A key
        shown as its label (not UTF-8, or text starting ``\\x``) is left as read."""
        reserved = label(RESERVED_OWNER)
        out: list[LeaseState] = []
        for s in states:
            if s.owner != reserved or s.key.startswith("\\x"):  # plain, or a key's label
                out.append(s)
                continue
            holders = await self.get_lease_holders(s.key) if s.live else []
            out.extend(
                s._replace(
                    owner=h.owner, fence=h.fence, expires_at=h.expires_at, acquired_at=h.acquired_at
                )
                for h in holders
            )
            if not holders and s.wanted:
                out.append(s)
        return out

    async def purge_expired(
        self,
        *,
        min_age_ms: Millis = 60_000,
        batch_size: int = 1_000,
        max_batches: int | None = None,
    ) -> int:
        """Delete rows expired for at least ``min_age_ms``, ``batch_size`` rows per statement.

        Each batch is its own short statement that skips locked rows, so purging never blocks
        lease traffic for long. Returns how many rows were deleted.
        """
        age, batch, batches = purge_args(min_age_ms, batch_size, max_batches)
        sql = self._sql.purge_batch.sql
        rounds = purge_rounds(batch, batches)
        try:
            next(rounds)
            while True:
                rounds.send(len(await self._run("purge_expired", True, sql, (age, batch))))
        except StopIteration as end:
            total: int = end.value
            return total

    async def mark_wanted(self, key: str, wait_ms: Millis) -> Holder | None:
        """Mark ``key`` wanted for ``wait_ms``; returns its live holder, or None if free (a
        counting key: a `Holder` with no name, the newest fence and the latest expiry)."""
        args = want_args(key, wait_ms)
        statement = self._sql.want
        rows = await self._run("want", True, statement.sql, args)
        if rows and rows[0][0] == RESERVED_OWNER:  # a counting row: (reserved, newest fence)
            return Holder("", rows[0][1], rows[0][2])
        return decode_row(statement, rows[0], args[0]) if rows else None

    # -- fencing inside the caller's transaction (sql_lease._sqlprovider.guard) ------------------

    async def guard(self, conn: Any, key: str, fence: int) -> None:
        """In ``conn``'s transaction, lock the live lease of ``key`` with ``fence`` or raise.

        ``conn`` is the caller's SQLAlchemy `AsyncConnection` (PostgreSQL). The row is read
        ``FOR SHARE``, so the fence stays live until that transaction ends; raises `LeaseLost`
        when ``fence`` is not the live fence. See `sql_lease._sqlprovider.guard`.
        """
        if self._closed:
            raise self._closed_error("guard")
        if self._renames == {}:  # the statements do not name the table's schema yet
            await self._find_home("guard")
        await guard(self._sql, self._backend, conn, key, fence)

    async def now(self) -> datetime:
        """The database server's clock (the clock that judges expiry)."""
        statement = self._sql.now
        rows = await self._run("now", False, statement.sql, ())
        return statement.decode(rows[0])
