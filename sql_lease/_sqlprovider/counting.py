"""`SqlCounting`: counting leases, metadata and all-or-none calls of `SqlLeaseProvider`.

The plain statements stay the hot path, untouched: a call with ``limit=1`` and no metadata
sends exactly the statement it sent before counting leases existed. The statements here run
only when a call asks for them (``limit`` other than 1, ``metadata=``, several keys) or when a
plain statement met a counting row: an acquire refused by the reserved owner, a plain release,
renewal or transfer that matched nothing (the owner may hold a grant of a counting row; one
more statement on that path, which is a miss), a read that found the reserved owner. What the
rows mean is in `sql_lease._core.counting` and the backends' ``counting`` modules.

On a table before migration 0009 (a rolling upgrade: this version's code, the old schema) that
extra statement of a miss fails on the missing columns; a table without them holds no counting
row, so the miss stands (`_fall_through`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._core.contract import AcquireResult, Lease
from .._core.counting import MAX_KEYS, RESERVED_OWNER, AcquireAllResult, Grant, check_count_args
from .._core.validate import check_keys, check_name, check_ttl
from ..capabilities import Released
from ..catalogue import AllRow, CountingStatements, CountRow, name_of
from ..errors import (
    LeaseForeignRowError,
    LeaseLimitMismatchError,
    LeaseSchemaError,
    LeaseValueError,
)
from .batch_senders import CoalescedCalls

__all__ = ["SqlCounting", "check_count_args"]


def _soonest(grants: tuple[Grant, ...]) -> Grant:
    """The holder whose grant ends first: when a slot may free up."""
    return min(grants, key=lambda g: g.expires_at)


def _lease(key: str, grant: Grant) -> Lease:
    owner = name_of(grant.owner, "owner", None)
    return Lease(key, owner, grant.fence, grant.expires_at, grant.acquired_at, grant.metadata)


class SqlCounting(CoalescedCalls):
    """The counting methods of `SqlLeaseProvider` (a base class)."""

    def _counting(self) -> CountingStatements:
        counting = self._sql.counting
        if counting is None:
            raise LeaseValueError(
                f"{self._backend.title} has no counting leases, metadata or all-or-none calls"
            )
        return counting

    async def _count_acquire(
        self,
        key: str,
        k: bytes,
        o: bytes,
        ttl: int,
        checked: tuple[int, bytes | None, bool | None],
    ) -> AcquireResult:
        """Grant ``o`` a slot of ``k`` (``limit`` slots), renew its grant, or refuse."""
        limit, data, is_str = checked
        statement = self._counting().acquire
        args = (k, o, ttl, limit, data, is_str)
        rows = await self._run("acquire_lease", True, statement.sql, args)
        row: CountRow = statement.decode(rows[0])
        if row.owner != RESERVED_OWNER:  # a live plain lease, left as it was
            if limit != 1:
                raise LeaseLimitMismatchError(key, limit, 1)
            return AcquireResult(False, name_of(row.owner, "owner", k), row.fence, row.expires_at)
        if row.grants and row.slot_limit != limit:
            raise LeaseLimitMismatchError(key, limit, row.slot_limit or 1)
        for grant in row.grants:
            if grant.owner == o:
                return AcquireResult(
                    True, o.decode("utf-8", "surrogatepass"), grant.fence, grant.expires_at
                )
        holder = _soonest(row.grants)
        return AcquireResult(
            False, name_of(holder.owner, "owner", k), holder.fence, holder.expires_at
        )

    async def get_lease_holders(self, key: str) -> list[Lease]:
        """The live holders of ``key``, oldest grant first, each with its fence, times and
        metadata (a plain lease: its one holder; a free key: an empty list)."""
        k = check_name("key", key)
        statement = self._counting().holders
        rows = await self._run("get_lease_holders", False, statement.sql, (k,))
        if not rows:
            return []
        row: CountRow = statement.decode(rows[0])
        return [_lease(key, grant) for grant in row.grants]

    async def _count_lease(
        self, key: str, stored_owner: bytes, error: LeaseForeignRowError
    ) -> Lease | None:
        """`get_lease` of a row whose owner is not UTF-8: of a counting row (``stored_owner``
        is the reserved owner), its oldest live grant; else ``error`` (a foreign row)."""
        if stored_owner != RESERVED_OWNER:
            raise error
        holders = await self.get_lease_holders(key)
        return holders[0] if holders else None

    async def _fall_through(self, call: str, sql: str, args: tuple[Any, ...]) -> list[Any]:
        """A plain write's miss asking for the owner's grant of a counting row; none on a
        table before 0009, whose missing columns fail the statement (nothing was applied)."""
        try:
            rows: list[Any] = await self._run(call, True, sql, args)
        except LeaseSchemaError:
            return []
        return rows

    async def _count_release(self, k: bytes, o: bytes) -> Released | None:
        counting = self._sql.counting
        if counting is None:
            return None
        statement = counting.release
        rows = await self._fall_through("release_lease", statement.sql, (k, o))
        return statement.decode(rows[0]) if rows else None

    async def _count_renew(self, k: bytes, o: bytes, ttl: int) -> Grant | None:
        counting = self._sql.counting
        if counting is None:
            return None
        statement = counting.renew
        rows = await self._fall_through("renew_lease", statement.sql, (k, o, ttl))
        return _grant_of(statement.decode(rows[0]), o) if rows else None

    async def _count_transfer(
        self, args: tuple[bytes, bytes, bytes, int], data: bytes | None, is_str: bool | None
    ) -> Grant | None:
        counting = self._sql.counting
        if counting is None:
            if data is not None:
                self._counting()  # raises: no metadata on this backend
            return None
        statement = counting.transfer
        sql, values = statement.sql, (*args, data, is_str)
        if data is None:  # a plain transfer's miss
            rows = await self._fall_through("transfer_lease", sql, values)
        else:  # metadata asked for: a table before 0009 is an error
            rows = await self._run("transfer_lease", True, sql, values)
        return _grant_of(statement.decode(rows[0]), args[2]) if rows else None

    async def acquire_leases(
        self, keys: Iterable[str], owner: str, ttl_ms: int
    ) -> AcquireAllResult:
        """Take every key of ``keys`` for ``owner`` as plain leases, or none, in one statement
        (rows locked in sorted key order, so two such calls never deadlock). Keys the owner
        already holds are renewed (fences kept). Refused: nothing changed, and the result
        names the first blocking key (in sorted order) and its holder."""
        stored = check_keys(keys, MAX_KEYS)
        o = check_name("owner", owner)
        ttl = check_ttl(ttl_ms)
        counting = self._counting()
        statement = counting.acquire_all(len(stored))
        keys_args = counting.keys_args(stored)
        for _ in range(3):
            rows = await self._run("acquire_leases", True, statement.sql, (*keys_args, o, ttl))
            found: list[AllRow] = [statement.decode(row) for row in rows]
            if counting.ensure is None or _settled(found):
                break
            # Keys without a row (PostgreSQL and MariaDB lock only rows that exist):
            # placeholders, then again.
            ensure = counting.ensure(len(stored))
            await self._run("acquire_leases", True, ensure.sql, keys_args)
        taken = {r.key: r for r in found if r.acquired}
        if len(taken) == len(stored):
            return AcquireAllResult(
                True,
                {
                    name_of(k, "key"): AcquireResult(True, owner, r.fence, r.expires_at)
                    for k, r in taken.items()
                },
            )
        blocked = [r for r in found if r.acquired is False]
        if not blocked and counting.blocker is not None:
            reader = counting.blocker(len(stored))
            rows = await self._run("acquire_leases", False, reader.sql, (*keys_args, o))
            blocked = [reader.decode(row) for row in rows]
        if not blocked:
            return AcquireAllResult(False, {})
        first = blocked[0]
        blocked_key = name_of(first.key, "key")
        holder: str | None
        if first.holder is None or first.holder == RESERVED_OWNER:
            holder = await self.get_lease_owner(blocked_key)  # type: ignore[attr-defined]
        else:
            holder = name_of(first.holder, "owner", first.key)
        return AcquireAllResult(False, {}, blocked_key, holder)

    async def release_leases(self, keys: Iterable[str], owner: str) -> int:
        """Release ``owner``'s live plain leases among ``keys`` in one statement (rows locked
        in sorted key order); returns how many were released."""
        stored = check_keys(keys, MAX_KEYS)
        o = check_name("owner", owner)
        counting = self._counting()
        statement = counting.release_all(len(stored))
        rows = await self._run(
            "release_leases", True, statement.sql, (*counting.keys_args(stored), o)
        )
        return len(rows)


def _settled(found: list[AllRow]) -> bool:
    """Whether an all-or-none answer is final: a key blocked (refused whatever the missing
    rows), or every key answered. No row at all (MariaDB answers only for rows that exist)
    or a key without an answer: placeholders are needed first."""
    if any(r.acquired is False for r in found):
        return True
    return bool(found) and all(r.acquired is not None for r in found)


def _grant_of(row: CountRow, o: bytes) -> Grant | None:
    for grant in row.grants:
        if grant.owner == o:
            return grant
    return None
