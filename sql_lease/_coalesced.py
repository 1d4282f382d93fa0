"""The SQL provider's coalesced calls: one `Coalescer` per operation kind, and how a batch of
calls is sent (one multi-row statement on PostgreSQL, one transaction on SQLite).

See `_coalesce` for the rules. `_one` is every contract call's way to the database: a lone
call runs its one-row statement right away; calls that find their kind busy wait for the next
batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from time import monotonic
from typing import Any, Final, Literal

from ._coalesce import Coalescer, Send, Waiter
from ._deadlines import server_millis
from ._execute import Fetch, StatementRunner
from .catalogue import Batch, Row
from .errors import LeaseClosedError, LeaseTimeoutError, LeaseTypeError, LeaseValueError

__all__ = ["COALESCE_MODES", "Coalesce", "CoalescedCalls", "check_coalesce"]

#: True (the default): batches form from calls that are already waiting; False: never;
#: "always": every call goes through a batch, even a lone one (tests of the batch statements).
Coalesce = bool | Literal["always"]
COALESCE_MODES: Final = (True, False, "always")
#: Statements of one kind in flight at once before calls queue for a batch.
IN_FLIGHT: Final = 1
#: Milliseconds a write batch of several calls waits for a row lock before its calls run alone.
LOCK_WAIT: Final = 100
_UNLIMITED: Final = 1 << 30


def check_coalesce(value: object) -> Coalesce:
    if value is True or value is False or value == "always":
        return value
    if isinstance(value, bool | str):
        raise LeaseValueError(f'coalesce must be True, False or "always", not {value!r}')
    raise LeaseTypeError(f'coalesce must be a bool or "always", not {type(value).__name__}')


class CoalescedCalls(StatementRunner):
    """The coalescers of `SqlLeaseProvider` (its base class) and their batch senders."""

    _coalesce: Coalesce
    _acquires: Coalescer
    _renews: Coalescer
    _releases: Coalescer
    _transfers: Coalescer
    _owner_reads: Coalescer
    _lease_reads: Coalescer
    _holder_reads: Coalescer

    def _init_coalescing(self, mode: Coalesce) -> None:
        self._coalesce = mode
        sql = self._sql
        batches = sql.batches

        def make(
            operation: str,
            write: bool,
            single: str,
            batch: Batch | None,
            width: int,
            shared: bool = False,
        ) -> Coalescer:
            if batch is None:
                send = self._transaction_sender(operation, write, single)
            else:
                send = self._statement_sender(operation, write, batch, width)
            limit = _UNLIMITED if mode is False else IN_FLIGHT
            return Coalescer(send, limit=limit, single=mode != "always", shared_keys=shared)

        acquire, renew, release, transfer, read = (
            (None,) * 5
            if batches is None
            else (batches.acquire, batches.renew, batches.release, batches.transfer, batches.read)
        )
        self._acquires = make(
            "acquire_lease", True, sql.acquire.sql, acquire, len(sql.acquire.columns)
        )
        self._renews = make("renew_lease", True, sql.renew.sql, renew, len(sql.renew.columns))
        self._releases = make(
            "release_lease", True, sql.release.sql, release, len(sql.release.columns)
        )
        self._transfers = make(
            "transfer_lease", True, sql.transfer.sql, transfer, len(sql.transfer.columns)
        )
        self._owner_reads = make(
            "get_lease_owner", False, sql.get_owner.sql, read, len(sql.get_owner.columns), True
        )
        self._lease_reads = make(
            "get_lease", False, sql.get_lease.sql, read, len(sql.get_lease.columns), True
        )
        self._holder_reads = make(
            "acquire_lease", False, sql.holder.sql, read, len(sql.holder.columns), True
        )

    @property
    def coalesce(self) -> Coalesce:
        """The coalescing mode given at construction (True, False or "always")."""
        return self._coalesce

    def coalescing_stats(self) -> dict[str, tuple[int, int]]:
        """Diagnostics: per operation kind, (multi-row statements sent, calls they carried)."""
        kinds = {
            "acquire": self._acquires,
            "renew": self._renews,
            "release": self._releases,
            "transfer": self._transfers,
            "get_owner": self._owner_reads,
            "get_lease": self._lease_reads,
            "holder": self._holder_reads,
        }
        return {name: (c.batches, c.batched_calls) for name, c in kinds.items()}

    async def _one(
        self,
        coalescer: Coalescer,
        operation: str,
        write: bool,
        sql: str,
        args: tuple[object, ...],
        seconds: float | None = None,
    ) -> list[Any]:
        """One call's rows: its own statement now, or its share of the next batch."""
        if coalescer.enter():
            try:
                rows: list[Any] = await self._run(operation, write, sql, args, seconds)
                return rows
            finally:
                coalescer.leave()
        return await self._queued(coalescer, operation, write, args, seconds)

    async def _queued(
        self,
        coalescer: Coalescer,
        operation: str,
        write: bool,
        args: tuple[object, ...],
        seconds: float | None = None,
    ) -> list[Any]:
        """The slow path of a call that `Coalescer.enter` did not admit: its share of the
        next batch (the contract methods inline the fast path, one frame less)."""
        if self._closed:
            raise LeaseClosedError(operation)
        return await coalescer.wait(
            args[0],  # type: ignore[arg-type]  # every coalesced statement starts with the key
            args,
            self._timeout if seconds is None else seconds,
            self._deadlines,
            lambda sent: self._backend.translate(
                TimeoutError(f"no answer within {self._timeout} s"),
                operation=operation,
                where=self._where,
                sent=sent and write,
                table=self._sql.table,
            ),
        )

    def _statement_sender(self, operation: str, write: bool, batch: Batch, width: int) -> Send:
        """Send a batch as one multi-row statement; split its rows by key.

        A write batch of several calls waits at most `LOCK_WAIT` for a row lock; when the
        server gives up on one (a call's row is locked by a long transaction: nothing was
        applied), each call runs again on its own. A call on its own (a batch of one, or one
        running again) may wait for locks for the server's share of what is left of its
        deadline, as a one-row statement does: the server then ends a statement stuck on a
        lock before the call's deadline, so the caller learns that nothing was applied.
        """
        sql = batch.sql
        lock_wait = batch.lock_wait

        async def statement(waiters: list[Waiter], wait: int, seconds: float) -> list[list[Row]]:
            ordered = sorted(waiters, key=_key)  # same lock order in every statement
            args: tuple[object, ...] = tuple(
                list(column) for column in zip(*(w.args for w in ordered), strict=True)
            )
            if lock_wait:
                args += (wait,)

            def going_out(fetch: Fetch) -> Awaitable[list[Row]]:
                _mark_sent(waiters)
                return fetch(sql, *args)

            rows = await self._run(operation, write, sql, args, seconds, via=going_out)
            by_key: dict[bytes, list[Row]] = {}
            for row in rows:
                by_key.setdefault(row[0], []).append(row[1 : 1 + width])
            return [by_key.get(w.key, []) for w in waiters]

        async def alone(waiter: Waiter) -> list[Row]:
            left = waiter.deadline - monotonic()
            if left <= 0:
                raise LeaseTimeoutError(
                    f"{operation}: no answer within the timeout", operation=operation
                )
            rows = await statement([waiter], server_millis(left), left)
            return rows[0]

        async def send(batch: list[Waiter], seconds: float) -> list[list[Row] | BaseException]:
            if len(batch) == 1 and lock_wait:
                return [await alone(batch[0])]
            try:
                return list(await statement(batch, LOCK_WAIT, seconds))
            except LeaseTimeoutError as exc:
                if exc.outcome_unknown or not lock_wait:
                    raise
            return await asyncio.gather(*(alone(w) for w in batch), return_exceptions=True)

        return send

    def _transaction_sender(self, operation: str, write: bool, sql: str) -> Send:
        """Send a batch as its one-row statements in one transaction on one connection (one
        commit for all; SQLite's writers queue for the file anyway)."""
        begin = "BEGIN IMMEDIATE" if write else "BEGIN"

        async def script(fetch: Fetch, batch: list[Waiter]) -> list[list[Row]]:
            _mark_sent(batch)
            await fetch(begin)
            try:
                out = [await fetch(sql, *w.args) for w in batch]
            except Exception:
                await fetch("ROLLBACK")
                raise
            await fetch("COMMIT")
            return out

        async def send(batch: list[Waiter], seconds: float) -> list[list[Row] | BaseException]:
            result: list[list[Row] | BaseException] = await self._run(
                operation, write, sql, (), seconds, via=lambda fetch: script(fetch, batch)
            )
            return result

        return send


def _key(waiter: Waiter) -> bytes:
    return waiter.key


def _mark_sent(batch: list[Waiter]) -> None:
    """The batch's statement goes out now: a caller timing out from here on may have had
    its call applied (``outcome_unknown``); before, it certainly was not."""
    for waiter in batch:
        waiter.sent = True
