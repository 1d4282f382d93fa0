"""Coalescing: calls of one kind that wait at the same time go out as one statement.

A provider keeps one `Coalescer` per operation kind (acquire, renew, release, transfer and each
read). A call first asks `enter`: when fewer than ``limit`` statements of its kind are in
flight and none is queued, it runs its own one-row statement at once, in its own task, and
calls `leave` afterwards. A lone caller therefore pays two counter updates: no timer, no task,
no added latency. Otherwise the call queues (`wait`); as soon as a statement of the kind ends,
the queued calls go out together in one multi-row statement run by a task of its own, and each
caller receives the rows its one-row statement would have returned.

Rules that keep every answer exactly what the one-row statement would have answered at some
instant inside the call (linearizable): a batch is sent only after each of its calls began and
is answered before any of them returns; a write batch carries at most one call per key (the
next call on that key waits for the next statement), so the rows of one statement never
interact, and while a batch is in flight no other batch carries a write of any of its keys
(with several batches in flight at once: behind a transaction pooler); reads of one key may
share a statement (they see one instant). A caller's own
deadline is its own: one that passes while it is queued or in flight fails that caller alone
(a call still queued was never sent), and a batch runs until the latest deadline among its
calls. Bad input never reaches the queue (calls are checked first). A statement that does not
end (waiting for a row lock that a long transaction holds) does not hold up the others: when
no statement of the kind has ended for `STALL` seconds, the queued calls go out beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from time import monotonic
from typing import Any, Final

from .._core.deadlines import Deadlines
from ..catalogue import Row

__all__ = ["MAX_BATCH", "UNLIMITED", "Coalescer", "Lane", "Waiter"]

#: `Lane.enter` and `Lane.leave` of a lane whose calls never queue: C callables (no frame).
_ADMIT: Final[Callable[[], bool]] = True.__bool__
_NOTHING: Final[Callable[[], None]] = [].clear

#: Calls per multi-row statement at most.
MAX_BATCH: Final = 512
#: Seconds without any statement of a kind ending (one is stuck, on a row lock say) after
#: which queued calls go out anyway, beside it, up to `MAX_STALLED` more statements.
STALL: Final = 0.05
MAX_STALLED: Final = 16
#: A ``limit`` no count of statements in flight reaches: every call is admitted (never queues).
UNLIMITED: Final = 1 << 30


class Waiter:
    """One queued call: its kind (the `Lane` it came by), its key, its one-row arguments, its
    deadline and its future; ``sent`` once its batch's statement went out (the sender marks
    it)."""

    __slots__ = ("args", "deadline", "future", "key", "kind", "sent")

    def __init__(
        self,
        key: bytes,
        args: tuple[object, ...],
        deadline: float,
        future: asyncio.Future[Any],
        kind: int = 0,
    ) -> None:
        self.key = key
        self.args = args
        self.deadline = deadline
        self.future: asyncio.Future[list[Row]] = future
        self.kind = kind
        self.sent = False


#: Runs one batch within ``seconds``: per waiter, in the waiters' order, its rows or its own
#: error.
Send = Callable[[list[Waiter], float], Awaitable[list[list[Row] | BaseException]]]
#: Builds the error of a waiter whose deadline passed (``sent``: its batch may have run).
TimeoutFor = Callable[[bool], BaseException]


class Coalescer:
    """The in-flight count and the queue of one provider's calls of ``kinds`` operation kinds
    that may share a statement (the writes share one: at most one write per key in it).

    ``limit``: statements in flight at once (one-row or batches), ``batch_limit`` (at most
    ``limit``; the default) of them multi-row: with ``limit=2, batch_limit=1`` two lone callers
    never wait for each other, while under load the queue goes out as one batch at a time (the
    fewer statements in flight, the more calls each carries); with ``batch_limit`` above 1
    (behind a transaction pooler, whose round trip bounds one batch at a time) a write's key
    in flight in one batch keeps the calls on it queued until that batch ends. ``single``:
    False makes every call go through the queue (every statement a batch; for tests).
    ``shared_keys``: reads, whose calls on one key may share a statement. Calls come in by
    `Lane`, one per kind; the sender sees each waiter's kind. With ``limit=UNLIMITED`` (and
    ``single``) no call ever queues (`queues` is False).
    """

    __slots__ = (
        "_batch_limit",
        "_batching",
        "_holding",
        "_in_flight",
        "_in_flight_keys",
        "_limit",
        "_progress",
        "_queue",
        "_send",
        "_shared_keys",
        "_single",
        "_stall_timer",
        "_tasks",
        "batched_calls",
        "batches",
        "kind_batches",
        "kind_calls",
    )

    def __init__(
        self,
        send: Send,
        *,
        limit: int = 1,
        batch_limit: int | None = None,
        single: bool = True,
        shared_keys: bool = False,
        kinds: int = 1,
    ) -> None:
        batch_limit = limit if batch_limit is None else batch_limit
        if not 1 <= batch_limit <= limit:
            raise ValueError("limit and batch_limit must be at least 1, batch_limit <= limit")
        self._send = send
        self._limit = limit
        self._batch_limit = batch_limit
        self._batching = 0  # multi-row statements in flight (`_in_flight` counts them too)
        self._holding = False  # the callers of a batch just answered are making their next calls
        self._single = single
        self._shared_keys = shared_keys
        self._in_flight = 0
        #: The keys of the batches in flight (writes only: a key is in one batch at a time).
        self._in_flight_keys: set[bytes] = set()
        self._progress = 0  # statements of this kind ended so far
        self._stall_timer: asyncio.TimerHandle | None = None
        self._queue: list[Waiter] = []
        self._tasks: set[asyncio.Task[None]] = set()
        #: Diagnostics: multi-row statements sent, and the calls they carried; per kind, the
        #: statements that carried calls of the kind, and those calls.
        self.batches = 0
        self.batched_calls = 0
        self.kind_batches = [0] * kinds
        self.kind_calls = [0] * kinds

    @property
    def queues(self) -> bool:
        """False when `enter` admits every call (then nothing ever queues)."""
        return not (self._single and self._limit >= UNLIMITED)

    def enter(self) -> bool:
        """True: run the one-row statement now, then call `leave`. False: call `wait`."""
        if self._in_flight < self._limit and not self._queue and self._single and not self._holding:
            self._in_flight += 1
            return True
        return False

    def leave(self) -> None:
        """A one-row statement admitted by `enter` ended (however it ended)."""
        self._in_flight -= 1
        self._progress += 1
        if self._queue:
            self._flush()

    async def wait(
        self,
        key: bytes,
        args: tuple[object, ...],
        seconds: float,
        deadlines: Deadlines,
        timeout_for: TimeoutFor,
        kind: int = 0,
    ) -> list[Row]:
        """Queue this call (of ``kind``) for the next batch; its rows, or the batch's error, or
        a timeout error of its own once ``seconds`` have passed."""
        future: asyncio.Future[list[Row]] = asyncio.get_running_loop().create_future()
        waiter = Waiter(key, args, monotonic() + seconds, future, kind)
        self._queue.append(waiter)
        if self._holding:
            pass  # `_hold_released` sends the queue
        elif self._in_flight < self._limit and self._batching < self._batch_limit:
            self._flush()
        elif self._stall_timer is None:
            self._watch_stall()
        task = deadlines.start(seconds)
        try:
            return await future
        except asyncio.CancelledError:
            if deadlines.timed_out(task):
                raise timeout_for(waiter.sent) from None
            raise
        finally:
            deadlines.finish(task)

    def _watch_stall(self) -> None:
        self._stall_timer = asyncio.get_running_loop().call_later(
            STALL, self._unstall, self._progress
        )

    def _unstall(self, seen: int) -> None:
        """`STALL` seconds after calls queued: if no statement ended since, send them anyway."""
        self._stall_timer = None
        if not self._queue:
            return
        if self._progress == seen and self._in_flight < self._limit + MAX_STALLED:
            self._flush(stalled=True)
        if self._queue:
            self._watch_stall()

    def _flush(self, stalled: bool = False) -> None:
        """Send the queued calls, as many batches as the in-flight limits allow (``stalled``:
        one batch more, beside a statement that does not end)."""
        while self._queue and (
            stalled or (self._in_flight < self._limit and self._batching < self._batch_limit)
        ):
            batch: list[Waiter] = []
            rest: list[Waiter] = []
            shared = self._shared_keys
            # A write's key already in flight (in this batch or another) waits for the next.
            keys = self._in_flight_keys
            for waiter in self._queue:
                if waiter.future.done():  # timed out or cancelled while queued
                    continue
                if len(batch) >= MAX_BATCH or (not shared and waiter.key in keys):
                    rest.append(waiter)
                    continue
                if not shared:
                    keys.add(waiter.key)
                batch.append(waiter)
            self._queue = rest
            if not batch:
                return
            self._in_flight += 1
            self._batching += 1
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            stalled = False

    async def _run(self, batch: list[Waiter]) -> None:
        try:
            seconds = max(w.deadline for w in batch) - monotonic()
            if seconds <= 0:
                return  # every caller has already timed out (never sent)
            self.batches += 1
            self.batched_calls += len(batch)
            kinds = set()
            for waiter in batch:
                self.kind_calls[waiter.kind] += 1
                kinds.add(waiter.kind)
            for kind in kinds:
                self.kind_batches[kind] += 1
            results = await self._send(batch, seconds)
            for waiter, rows in zip(batch, results, strict=True):
                if waiter.future.done():
                    continue
                if isinstance(rows, BaseException):
                    waiter.future.set_exception(rows)
                else:
                    waiter.future.set_result(rows)
        except asyncio.CancelledError:
            for waiter in batch:
                waiter.future.cancel()
            raise
        except BaseException as exc:
            for waiter in batch:
                if not waiter.future.done():
                    waiter.future.set_exception(exc)
        finally:
            self._in_flight -= 1
            self._batching -= 1
            self._progress += 1
            if not self._shared_keys:
                self._in_flight_keys.difference_update(w.key for w in batch)
            if len(batch) > 1 and not self._holding:
                # Its callers resume on the loop's next turns and most make their next call at
                # once: let those calls queue for one batch rather than the first of them take
                # the fast path alone and the rest wait for it.
                self._holding = True
                asyncio.get_running_loop().call_soon(self._hold_released)
            elif self._queue and not self._holding:
                self._flush()

    def _hold_released(self) -> None:
        self._holding = False
        if self._queue:
            self._flush()


class Lane:
    """One operation kind's way into a `Coalescer` (which may carry several kinds in one
    statement): `enter`, `leave` and `wait` as the coalescer's, with the kind attached.

    `enter` and `leave` are the coalescer's own bound methods, set once (a call pays no frame
    of the lane's); on a coalescer that never queues a call (`Coalescer.queues` False:
    coalescing off, or a backend whose calls never wait for a batch), `enter` is a constant
    True and `leave` does nothing, both C callables: a lone call runs no Python code of the
    coalescer at all.
    """

    __slots__ = ("_coalescer", "enter", "kind", "leave")

    #: True: run the one-row statement now, then call `leave`. False: call `wait`.
    enter: Callable[[], bool]
    #: A one-row statement admitted by `enter` ended (however it ended).
    leave: Callable[[], None]

    def __init__(self, coalescer: Coalescer, kind: int = 0) -> None:
        self._coalescer = coalescer
        self.kind = kind
        if coalescer.queues:
            self.enter, self.leave = coalescer.enter, coalescer.leave
        else:
            self.enter, self.leave = _ADMIT, _NOTHING

    def wait(
        self,
        key: bytes,
        args: tuple[object, ...],
        seconds: float,
        deadlines: Deadlines,
        timeout_for: TimeoutFor,
    ) -> Awaitable[list[Row]]:
        """`Coalescer.wait` for a call of this lane's kind."""
        return self._coalescer.wait(key, args, seconds, deadlines, timeout_for, self.kind)

    @property
    def batches(self) -> int:
        """Multi-row statements that carried calls of this kind."""
        return self._coalescer.kind_batches[self.kind]

    @property
    def batched_calls(self) -> int:
        """Calls of this kind that went out in multi-row statements."""
        return self._coalescer.kind_calls[self.kind]
