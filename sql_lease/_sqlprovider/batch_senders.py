"""The SQL provider's coalesced calls: one `Coalescer` per operation kind, and how a batch of
calls is sent (one multi-row statement on PostgreSQL, one transaction on SQLite).

See `_coalesce` for the rules. `_one` is every contract call's way to the database: a lone
call runs its one-row statement right away; calls that find their kind busy wait for the next
batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Collection
from operator import itemgetter
from time import monotonic
from typing import Any, Final, Literal

from .._core.deadlines import server_millis
from ..catalogue import WRITE_COLUMNS, WRITE_KINDS, Batches, Catalogue, Row, Transaction
from ..errors import (
    LeaseDatabaseError,
    LeaseError,
    LeaseTimeoutError,
    LeaseTypeError,
    LeaseValueError,
)
from .coalescer import UNLIMITED, Coalescer, Lane, Send, Waiter
from .execute import Fetch, StatementRunner

__all__ = ["COALESCE_MODES", "Coalesce", "CoalescedCalls", "check_coalesce"]

#: True (the default): batches form from calls that are already waiting; False: never;
#: "always": every call goes through a batch, even a lone one (tests of the batch statements).
Coalesce = bool | Literal["always"]
COALESCE_MODES: Final = (True, False, "always")
#: Statements of one kind in flight at once before calls queue for a batch.
IN_FLIGHT: Final = 1
#: Milliseconds a write batch of several calls waits for a row lock before its calls run alone.
LOCK_WAIT: Final = 100
#: Write statements in flight at once (the write kinds share them) before writes queue; of
#: them, IN_FLIGHT batches.
WRITES_IN_FLIGHT: Final = 2
#: The provider method of each write kind (`catalogue.WRITE_KINDS`).
WRITE_OPERATIONS: Final = ("acquire_lease", "renew_lease", "release_lease", "transfer_lease")
#: The provider method of each read kind: get_owner, get_lease, the holder read of a contended
#: acquire.
READ_OPERATIONS: Final = ("get_lease_owner", "get_lease", "acquire_lease")


def check_coalesce(value: object) -> Coalesce:
    if value is True or value is False or value == "always":
        return value
    if isinstance(value, bool | str):
        raise LeaseValueError(f'coalesce must be True, False or "always", not {value!r}')
    raise LeaseTypeError(f'coalesce must be a bool or "always", not {type(value).__name__}')


class CoalescedCalls(StatementRunner):
    """The coalescers of `SqlLeaseProvider` (its base class) and their batch senders: one for
    the writes (acquire, renew, release and transfer calls share a statement), one per read."""

    _coalesce: Coalesce
    _acquires: Lane
    _renews: Lane
    _releases: Lane
    _transfers: Lane
    _owner_reads: Lane
    _lease_reads: Lane
    _holder_reads: Lane

    def _init_coalescing(
        self, mode: Coalesce, reads_in_flight: int = IN_FLIGHT, writes_in_flight: int = IN_FLIGHT
    ) -> None:
        """The coalescers for ``mode``; ``reads_in_flight``, ``writes_in_flight``: read and
        write batches in flight at once (more than `IN_FLIGHT` behind a transaction pooler:
        `backends.Plan.read_batches`)."""
        self._coalesce = mode
        sql = self._sql
        batches = sql.batches
        # Every call alone: coalescing off, or adaptive on a backend whose batches would only
        # serialise what its separate statements do in parallel (`Transaction.waits`).
        alone = mode is False or (mode is True and batches is None and not _transaction(sql).waits)
        limit = UNLIMITED if alone else reads_in_flight
        single = mode != "always"
        writes = (sql.acquire, sql.renew, sql.release, sql.transfer)
        if batches is None:
            send = self._transaction_sender(
                _transaction(sql), True, tuple(s.sql for s in writes), WRITE_OPERATIONS
            )
        else:
            send = self._grouped(self._writes_sender(batches, tuple(s.columns for s in writes)))
        write_limit = limit if alone else max(WRITES_IN_FLIGHT, writes_in_flight)
        shared = Coalescer(
            send,
            limit=write_limit,
            batch_limit=min(write_limit, writes_in_flight),
            single=single,
            kinds=len(writes),
        )
        self._acquires, self._renews, self._releases, self._transfers = (
            Lane(shared, kind) for kind in range(len(writes))
        )

        # The reads share one coalescer too: each one-row read's columns start the read
        # batch's (after the key), so one statement over the keys answers all three kinds.
        reads = (sql.get_owner, sql.get_lease, sql.holder)
        if batches is None:
            send = self._transaction_sender(
                _transaction(sql), False, tuple(r.sql for r in reads), READ_OPERATIONS
            )
        else:
            send = self._grouped(
                self._reads_sender(batches.read.sql, tuple(len(r.columns) for r in reads))
            )
        coalescer = Coalescer(send, limit=limit, single=single, shared_keys=True, kinds=len(reads))
        self._owner_reads, self._lease_reads, self._holder_reads = (
            Lane(coalescer, kind) for kind in range(len(reads))
        )

    @property
    def coalesce(self) -> Coalesce:
        """The coalescing mode given at construction (True, False or "always")."""
        return self._coalesce

    def coalescing_stats(self) -> dict[str, tuple[int, int]]:
        """Diagnostics: per operation kind, (multi-row statements that carried calls of the
        kind, those calls). A write statement may carry several kinds: it counts for each."""
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
        lane: Lane,
        operation: str,
        write: bool,
        sql: str,
        args: tuple[object, ...],
        seconds: float | None = None,
    ) -> list[Any]:
        """One call's rows: its own statement now, or its share of the next batch."""
        if lane.enter():
            try:
                rows: list[Any] = await self._run(operation, write, sql, args, seconds)
                return rows
            finally:
                lane.leave()
        return await self._queued(lane, operation, write, args, seconds)

    async def _queued(
        self,
        lane: Lane,
        operation: str,
        write: bool,
        args: tuple[object, ...],
        seconds: float | None = None,
    ) -> list[Any]:
        """The slow path of a call that `Lane.enter` did not admit: its share of the next
        batch (the contract methods inline the fast path, one frame less)."""
        if self._closed:
            raise self._closed_error(operation)
        return await lane.wait(
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

    def _writes_sender(self, batches: Batches, columns: tuple[tuple[str, ...], ...]) -> Send:
        """Send the queued writes as one multi-row statement (`Batches.writes`); split its
        rows by kind and key, each as the kind's one-row statement returns it (``columns``).

        A batch of several calls waits at most `LOCK_WAIT` for a row lock; when the server
        gives up on one (a call's row is locked by a long transaction: nothing was applied),
        each call runs again on its own. A call on its own (a batch of one, or one running
        again) may wait for locks for the server's share of what is left of its deadline, as
        a one-row statement does: the server then ends a statement stuck on a lock before the
        call's deadline, so the caller learns that nothing was applied. Observers see a
        statement of several kinds as ``"BATCH"``; each caller's error names its own method.
        """
        pick = [itemgetter(*(2 + WRITE_COLUMNS.index(name) for name in names)) for names in columns]

        async def statement(waiters: list[Waiter], wait: int, seconds: float) -> list[list[Row]]:
            by_kind: list[list[Waiter]] = [[] for _ in WRITE_KINDS]
            for waiter in sorted(waiters, key=_key):  # same lock order in every statement
                by_kind[waiter.kind].append(waiter)
            kinds = tuple(kind for kind, calls in enumerate(by_kind) if calls)
            batch = batches.writes(kinds)
            args: list[object] = []
            for kind in kinds:
                columns_of = zip(*(w.args for w in by_kind[kind]), strict=True)
                args.extend(list(column) for column in columns_of)
            args.append(wait)
            sql = batch.sql
            operation = _named(kinds, WRITE_OPERATIONS)

            def going_out(fetch: Fetch) -> Awaitable[list[Row]]:
                _mark_sent(waiters)
                return fetch(sql, *args)

            rows = await self._run(operation, True, sql, tuple(args), seconds, via=going_out)
            found: dict[tuple[int, bytes], list[Row]] = {}
            for row in rows:
                found.setdefault((row[0], row[1]), []).append(pick[row[0]](row))
            return [found.get((w.kind, w.key), []) for w in waiters]

        async def alone(waiter: Waiter) -> list[Row]:
            left = waiter.deadline - monotonic()
            if left <= 0:
                operation = WRITE_OPERATIONS[waiter.kind]
                raise LeaseTimeoutError(
                    f"{operation}: no answer within the timeout", operation=operation
                )
            rows = await statement([waiter], server_millis(left), left)
            return rows[0]

        async def send(batch: list[Waiter], seconds: float) -> list[list[Row] | BaseException]:
            if len(batch) == 1:
                return [await alone(batch[0])]
            try:
                return list(await statement(batch, LOCK_WAIT, seconds))
            except LeaseTimeoutError as exc:
                if not exc.outcome_unknown:
                    return await asyncio.gather(*(alone(w) for w in batch), return_exceptions=True)
                error: LeaseError = exc
            except LeaseError as exc:
                error = exc
            return _for_each(error, batch, WRITE_OPERATIONS)

        return send

    def _key_groups(self, keys: list[bytes]) -> list[list[int]] | None:
        """The indexes of ``keys`` by the statement that takes them (`Backend.key_groups`),
        or None: one statement for all."""
        return self._backend.key_groups(self._engine.sync_engine.pool, self._sql, keys)

    def _grouped(self, send: Send) -> Send:
        """``send`` once per group of the batch's keys that the database takes in one
        statement (`Backend.key_groups`; Citus: per worker), the groups at once: each group's
        statement succeeds or fails on its own, its callers with it."""

        async def grouped(batch: list[Waiter], seconds: float) -> list[list[Row] | BaseException]:
            groups = self._key_groups([w.key for w in batch]) if len(batch) > 1 else None
            if groups is None or len(groups) == 1:
                return await send(batch, seconds)
            parts = await asyncio.gather(*(send([batch[i] for i in g], seconds) for g in groups))
            results: list[list[Row] | BaseException] = [[] for _ in batch]
            for group, part in zip(groups, parts, strict=True):
                for i, result in zip(group, part, strict=True):
                    results[i] = result
            return results

        return grouped

    def _reads_sender(self, sql: str, widths: tuple[int, ...]) -> Send:
        """Send queued reads (of `READ_OPERATIONS`) as one statement over their keys; split
        its rows by key, each cut to its kind's ``widths`` columns after the key."""

        async def send(batch: list[Waiter], seconds: float) -> list[list[Row] | BaseException]:
            keys = [w.key for w in batch]
            operation = _named({w.kind for w in batch}, READ_OPERATIONS)

            def going_out(fetch: Fetch) -> Awaitable[list[Row]]:
                _mark_sent(batch)
                return fetch(sql, keys)

            try:
                rows = await self._run(operation, False, sql, (keys,), seconds, via=going_out)
            except LeaseError as exc:
                return _for_each(exc, batch, READ_OPERATIONS)
            found: dict[bytes, list[Row]] = {}
            for row in rows:
                found.setdefault(row[0], []).append(row)
            return [[r[1 : 1 + widths[w.kind]] for r in found.get(w.key, ())] for w in batch]

        return send

    def _transaction_sender(
        self,
        texts: Transaction,
        write: bool,
        singles: tuple[str, ...],
        operations: tuple[str, ...],
    ) -> Send:
        """Send a batch as its calls' one-row statements (``singles[kind]``, serving
        ``operations[kind]``) in one transaction on one connection (one commit for all;
        SQLite's writers queue for the file anyway), with the catalogue's ``texts``, in key
        order (concurrent MariaDB batches in any other order deadlock)."""
        begin = texts.begin_write if write else texts.begin
        commit, rollback = texts.commit, texts.rollback

        async def script(fetch: Fetch, batch: list[Waiter]) -> list[list[Row]]:
            _mark_sent(batch)
            await fetch(begin)
            found: dict[int, list[Row]] = {}
            try:
                # In key order: the same lock order in every batch (MariaDB's row locks).
                for w in sorted(batch, key=_key):
                    found[id(w)] = await fetch(singles[w.kind], *w.args)
            except Exception:
                await fetch(rollback)
                raise
            await fetch(commit)
            return [found[id(w)] for w in batch]

        async def send(batch: list[Waiter], seconds: float) -> list[list[Row] | BaseException]:
            name = _named({w.kind for w in batch}, operations)
            try:
                result: list[list[Row] | BaseException] = await self._run(
                    name, write, "", (), seconds, via=lambda fetch: script(fetch, batch)
                )
            except LeaseError as exc:
                return _for_each(exc, batch, operations)
            return result

        return send


def _transaction(catalogue: Catalogue) -> Transaction:
    """The statement texts of a batch sent as one transaction (a catalogue without batches)."""
    if catalogue.transaction is None:
        raise ValueError(f"the {catalogue.dialect} catalogue has neither batches nor a transaction")
    return catalogue.transaction


def _key(waiter: Waiter) -> bytes:
    return waiter.key


def _mark_sent(batch: list[Waiter]) -> None:
    """The batch's statement goes out now: a caller timing out from here on may have had
    its call applied (``outcome_unknown``); before, it certainly was not."""
    for waiter in batch:
        waiter.sent = True


def _named(kinds: Collection[int], operations: tuple[str, ...]) -> str:
    """The operation a batch of calls of ``kinds`` is observed as: its one kind's method, or
    ``"BATCH"`` (OpenTelemetry's name for a batch of several operations)."""
    return operations[next(iter(kinds))] if len(kinds) == 1 else "BATCH"


def _for_each(
    error: LeaseError, batch: list[Waiter], operations: tuple[str, ...]
) -> list[list[Row] | BaseException]:
    """A failed batch's error for each of its calls, naming the call's own method."""
    return [_for_call(error, operations[w.kind]) for w in batch]


def _for_call(error: LeaseError, operation: str) -> LeaseError:
    """``error`` of a batch as the error of one of its calls, ``operation``: the same type,
    outcome and cause, its message naming the caller's method."""
    if not isinstance(error, LeaseDatabaseError) or error.operation == operation:
        return error
    message = str(error)
    if error.operation and message.startswith(error.operation):
        message = operation + message[len(error.operation) :]
    copy = type(error)(message, operation=operation, outcome_unknown=error.outcome_unknown)
    copy.__cause__ = error.__cause__
    return copy
