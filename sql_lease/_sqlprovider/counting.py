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

from collections.abc import Generator, Iterable
from typing import Any, TypeVar

from .._core.contract import AcquireResult, Lease
from .._core.count_calls import (
    Send,
    acquire_all_steps,
    count_answer,
    counting_of,
    grant_of,
    holders_of,
    is_counting,
    renew_misses,
    renewal_of,
)
from .._core.counting import MAX_KEYS, RESERVED_OWNER, AcquireAllResult, Grant, check_count_args
from .._core.validate import check_keys, check_name, check_ttl
from ..capabilities import Released, Renewal
from ..catalogue import CountingStatements
from ..errors import LeaseForeignRowError, LeaseSchemaError
from .batch_senders import CoalescedCalls

__all__ = ["SqlCounting", "check_count_args"]

T = TypeVar("T")


class SqlCounting(CoalescedCalls):
    """The counting methods of `SqlLeaseProvider` (a base class)."""

    def _counting(self) -> CountingStatements:
        return counting_of(self._sql, self._backend.title)

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
        return count_answer(key, k, o, limit, statement.decode(rows[0]))

    async def get_lease_holders(self, key: str) -> list[Lease]:
        """The live holders of ``key``, oldest grant first, each with its fence, times and
        metadata (a plain lease: its one holder; a free key: an empty list)."""
        k = check_name("key", key)
        statement = self._counting().holders
        rows = await self._run("get_lease_holders", False, statement.sql, (k,))
        if not rows:
            return []
        return holders_of(key, statement.decode(rows[0]))

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
        return grant_of(statement.decode(rows[0]), o) if rows else None

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
        return grant_of(statement.decode(rows[0]), args[2]) if rows else None

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
        result, ask = await self._steps(acquire_all_steps(self._counting(), stored, o, owner, ttl))
        if ask is not None:  # a counting row's (or an unknown) holder: its oldest
            result = AcquireAllResult(False, {}, ask, await self._owner_of(ask))
        return result

    async def _steps(self, steps: Generator[Send, list[Any], T]) -> T:
        """Run the statements of a counting call's ``steps``; its result."""
        rows: Any = None
        try:
            while True:
                send = steps.send(rows)
                rows = await self._run(send.operation, send.write, send.sql, send.args)
        except StopIteration as end:
            done: T = end.value
            return done

    async def _owner_of(self, key: str) -> str | None:
        owner: str | None = await self.get_lease_owner(key)  # type: ignore[attr-defined]
        return owner

    async def _renew_misses(
        self, renewed: list[Renewal | None], pairs: list[tuple[bytes, bytes]], ttl: int
    ) -> list[Renewal | None]:
        """A batched renewal's misses that are grants of counting rows, renewed (one counting
        statement per distinct miss)."""
        misses = renew_misses(self._sql.counting, renewed, pairs)
        if not misses:
            return renewed
        got = {pair: renewal_of(await self._count_renew(*pair, ttl)) for pair in misses}
        return [got.get(p) if r is None else r for p, r in zip(pairs, renewed, strict=True)]

    async def _expand_counting(self, leases: list[Lease]) -> list[Lease]:
        """The listed rows with each counting key (its owner reserved) as its live grants."""
        out: list[Lease] = []
        for lease in leases:
            if is_counting(lease):
                out.extend(await self.get_lease_holders(lease.key))
            else:
                out.append(lease)
        return out

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
