"""Counting leases, metadata and all-or-none calls of `sql_lease.sync.SqlLeaseProvider`.

The async provider's rules (`sql_lease._sqlprovider.counting`) on the same statements
(`Catalogue.counting`), with the same answers (`sql_lease._core.count_calls`): the plain
statements stay the hot path; these run when a call asks for them (``limit`` other than 1,
``metadata=``, several keys) or when a plain statement met a counting row. A plain write's
miss on a table before migration 0009 stays a miss (`_fall_through`, as the async one's).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from .._core import count_calls as answers
from .._core.contract import AcquireResult, Lease
from .._core.counting import MAX_KEYS, RESERVED_OWNER, AcquireAllResult, Grant
from .._core.validate import check_keys, check_name, check_ttl
from ..backends import Backend
from ..capabilities import Released, Renewal
from ..catalogue import Catalogue, CountingStatements
from ..errors import LeaseForeignRowError, LeaseSchemaError

__all__ = ["SyncCounting"]

T = TypeVar("T")
Rows = list[tuple[Any, ...]]


class SyncCounting:
    """The counting methods of the sync `SqlLeaseProvider` (a base class)."""

    _sql: Catalogue
    _backend: Backend

    if TYPE_CHECKING:  # the provider's own

        def _run(
            self, operation: str, write: bool, sql: str, args: tuple[object, ...], *within: float
        ) -> Rows: ...
        def get_lease_owner(self, key: str) -> str | None: ...

    def _counting(self) -> CountingStatements:
        return answers.counting_of(self._sql, self._backend.title)

    def _count_acquire(
        self, key: str, k: bytes, o: bytes, ttl: int, checked: tuple[int, bytes | None, bool | None]
    ) -> AcquireResult:
        """Grant ``o`` a slot of ``k`` (``limit`` slots), renew its grant, or refuse."""
        limit, data, is_str = checked
        statement = self._counting().acquire
        rows = self._run("acquire_lease", True, statement.sql, (k, o, ttl, limit, data, is_str))
        return answers.count_answer(key, k, o, limit, statement.decode(rows[0]))

    def get_lease_holders(self, key: str) -> list[Lease]:
        """The live holders of ``key``, oldest grant first, each with its fence, times and
        metadata (a plain lease: its one holder; a free key: an empty list)."""
        k = check_name("key", key)
        statement = self._counting().holders
        rows = self._run("get_lease_holders", False, statement.sql, (k,))
        return answers.holders_of(key, statement.decode(rows[0])) if rows else []

    def _count_lease(
        self, key: str, stored_owner: bytes, error: LeaseForeignRowError
    ) -> Lease | None:
        """`get_lease` of a row whose owner is not UTF-8: a counting row's oldest live grant,
        else ``error`` (a foreign row)."""
        if stored_owner != RESERVED_OWNER:
            raise error
        holders = self.get_lease_holders(key)
        return holders[0] if holders else None

    def _fall_through(self, call: str, sql: str, args: tuple[Any, ...]) -> Rows:
        """A plain write's miss asking for the owner's grant of a counting row; none on a
        table before 0009, whose missing columns fail the statement (nothing was applied)."""
        try:
            return self._run(call, True, sql, args)
        except LeaseSchemaError:
            return []

    def _count_release(self, k: bytes, o: bytes) -> Released | None:
        if self._sql.counting is None:
            return None
        statement = self._sql.counting.release
        rows = self._fall_through("release_lease", statement.sql, (k, o))
        return statement.decode(rows[0]) if rows else None

    def _count_renew(self, k: bytes, o: bytes, ttl: int) -> Grant | None:
        if self._sql.counting is None:
            return None
        statement = self._sql.counting.renew
        rows = self._fall_through("renew_lease", statement.sql, (k, o, ttl))
        return answers.grant_of(statement.decode(rows[0]), o) if rows else None

    def _count_transfer(
        self, args: tuple[bytes, bytes, bytes, int], data: bytes | None, is_str: bool | None
    ) -> Grant | None:
        if self._sql.counting is None:
            if data is not None:
                self._counting()  # raises: no metadata on this backend
            return None
        statement = self._sql.counting.transfer
        sql, values = statement.sql, (*args, data, is_str)
        if data is None:  # a plain transfer's miss
            rows = self._fall_through("transfer_lease", sql, values)
        else:  # metadata asked for: a table before 0009 is an error
            rows = self._run("transfer_lease", True, sql, values)
        return answers.grant_of(statement.decode(rows[0]), args[2]) if rows else None

    def _renew_misses(
        self, renewed: list[Renewal | None], pairs: list[tuple[bytes, bytes]], ttl: int
    ) -> list[Renewal | None]:
        """A batched renewal's misses that are grants of counting rows, renewed."""
        misses = answers.renew_misses(self._sql.counting, renewed, pairs)
        if not misses:
            return renewed
        got = {pair: answers.renewal_of(self._count_renew(*pair, ttl)) for pair in misses}
        return [got.get(p) if r is None else r for p, r in zip(pairs, renewed, strict=True)]

    def _expand_counting(self, leases: list[Lease]) -> list[Lease]:
        """Listed rows with each counting key as its live grants."""
        if not any(answers.is_counting(lease) for lease in leases):
            return leases
        out: list[Lease] = []
        for lease in leases:
            out.extend(self.get_lease_holders(lease.key) if answers.is_counting(lease) else [lease])
        return out

    def acquire_leases(self, keys: Iterable[str], owner: str, ttl_ms: int) -> AcquireAllResult:
        """Take every key of ``keys`` for ``owner`` as plain leases, or none, in one statement
        (rows locked in sorted key order: two such calls never deadlock); keys the owner holds
        already are renewed. Refused: nothing changed, and the result names the first blocking
        key (in sorted order) and its holder."""
        stored = check_keys(keys, MAX_KEYS)
        o = check_name("owner", owner)
        ttl = check_ttl(ttl_ms)
        steps = answers.acquire_all_steps(self._counting(), stored, o, owner, ttl)
        result, ask = self._steps(steps)
        if ask is not None:  # a counting row's (or an unknown) holder: its oldest
            result = AcquireAllResult(False, {}, ask, self.get_lease_owner(ask))
        return result

    def release_leases(self, keys: Iterable[str], owner: str) -> int:
        """Release ``owner``'s live plain leases among ``keys`` in one statement (rows locked
        in sorted key order); how many were released."""
        stored = check_keys(keys, MAX_KEYS)
        o = check_name("owner", owner)
        counting = self._counting()
        statement = counting.release_all(len(stored))
        args = (*counting.keys_args(stored), o)
        return len(self._run("release_leases", True, statement.sql, args))

    def _steps(self, steps: Generator[answers.Send, Rows, T]) -> T:
        """Run the statements of a counting call's ``steps``; its result."""
        rows: Any = None
        try:
            while True:
                send = steps.send(rows)
                rows = self._run(send.operation, send.write, send.sql, send.args)
        except StopIteration as end:
            done: T = end.value
            return done
