"""The coalescer's queueing rules, with a send function of our own (no database: these are the
rules of who goes out with whom; tests/integration/test_coalescing.py runs the real statements)."""

from __future__ import annotations

import asyncio

import pytest

from sql_lease._core.deadlines import Deadlines
from sql_lease._sqlprovider import coalescer as coalesce
from sql_lease._sqlprovider.coalescer import Coalescer, Waiter
from sql_lease.catalogue import Row


class Recorder:
    """A send that records each batch's keys and answers each call with its own key, after
    the test opens ``gate``."""

    def __init__(self) -> None:
        self.batches: list[list[bytes]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(
        self, batch: list[Waiter], seconds: float
    ) -> list[list[Row] | BaseException]:
        self.batches.append([w.key for w in batch])
        for w in batch:
            w.sent = True  # senders mark their calls sent as the statement goes out
        await self.gate.wait()
        return [[(w.key,)] for w in batch]


def timeout_error(sent: bool) -> BaseException:
    return TimeoutError(f"timed out (sent={sent})")


async def test_a_lone_call_is_admitted_and_never_queues() -> None:
    send = Recorder()
    c = Coalescer(send)
    assert c.enter()
    assert not c.enter()  # the kind is busy: the next call would queue
    c.leave()
    assert c.enter()
    c.leave()
    assert send.batches == []


async def test_calls_that_wait_together_go_out_together_with_one_write_per_key() -> None:
    send = Recorder()
    c = Coalescer(send)
    deadlines = Deadlines()
    assert c.enter()  # a one-row statement in flight
    keys = [b"a", b"b", b"a", b"c", b"a"]
    calls = [asyncio.ensure_future(c.wait(k, (k,), 5.0, deadlines, timeout_error)) for k in keys]
    await asyncio.sleep(0)
    assert send.batches == []  # nothing goes out while the kind is busy
    c.leave()
    results = await asyncio.gather(*calls)
    assert results == [[(k,)] for k in keys]  # each its own rows
    # Batches in arrival order, never a key twice in one.
    assert send.batches == [[b"a", b"b", b"c"], [b"a"], [b"a"]]
    assert (c.batches, c.batched_calls) == (3, 5)


async def test_reads_of_one_key_share_a_batch() -> None:
    send = Recorder()
    c = Coalescer(send, shared_keys=True)
    deadlines = Deadlines()
    assert c.enter()
    calls = [
        asyncio.ensure_future(c.wait(b"k", (b"k",), 5.0, deadlines, timeout_error))
        for _ in range(4)
    ]
    await asyncio.sleep(0)
    c.leave()
    await asyncio.gather(*calls)
    assert send.batches == [[b"k"] * 4]


async def test_a_queued_call_that_times_out_fails_alone_and_unsent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(coalesce, "STALL", 60.0)  # the statement in flight is not stuck
    send = Recorder()
    c = Coalescer(send)
    deadlines = Deadlines()
    assert c.enter()
    short = asyncio.ensure_future(c.wait(b"a", (b"a",), 0.02, deadlines, timeout_error))
    long = asyncio.ensure_future(c.wait(b"b", (b"b",), 5.0, deadlines, timeout_error))
    with pytest.raises(TimeoutError, match="sent=False"):
        await short
    c.leave()
    assert await long == [(b"b",)]
    assert send.batches == [[b"b"]]  # the timed-out call never went out


async def test_a_call_whose_batch_is_in_flight_times_out_as_sent() -> None:
    send = Recorder()
    send.gate.clear()
    c = Coalescer(send, single=False)
    deadlines = Deadlines()
    short = asyncio.ensure_future(c.wait(b"a", (b"a",), 0.3, deadlines, timeout_error))
    other = asyncio.ensure_future(c.wait(b"b", (b"b",), 5.0, deadlines, timeout_error))
    with pytest.raises(TimeoutError, match="sent=True"):
        await short
    send.gate.set()
    assert await other == [(b"b",)]


async def test_one_callers_error_reaches_only_that_caller() -> None:
    async def send(batch: list[Waiter], seconds: float) -> list[list[Row] | BaseException]:
        return [ValueError("mine") if w.key == b"bad" else [(w.key,)] for w in batch]

    c = Coalescer(send, single=False)
    deadlines = Deadlines()
    bad = asyncio.ensure_future(c.wait(b"bad", (), 5.0, deadlines, timeout_error))
    good = asyncio.ensure_future(c.wait(b"good", (), 5.0, deadlines, timeout_error))
    with pytest.raises(ValueError, match="mine"):
        await bad
    assert await good == [(b"good",)]


async def test_a_stuck_statement_lets_the_queue_go_out_beside_it() -> None:
    send = Recorder()
    c = Coalescer(send)
    deadlines = Deadlines()
    assert c.enter()  # stuck: never leaves during the test
    queued = asyncio.ensure_future(c.wait(b"a", (b"a",), 5.0, deadlines, timeout_error))
    assert await queued == [(b"a",)]
    assert send.batches == [[b"a"]]
    c.leave()


async def test_always_mode_sends_even_a_lone_call_as_a_batch() -> None:
    send = Recorder()
    c = Coalescer(send, single=False)
    assert not c.enter()
    assert await c.wait(b"a", (b"a",), 5.0, Deadlines(), timeout_error) == [(b"a",)]
    assert send.batches == [[b"a"]]


def test_a_batch_error_reaches_each_caller_under_its_own_method() -> None:
    from sql_lease._sqlprovider.batch_senders import _for_call
    from sql_lease.errors import LeaseConnectionError, LeaseTimeoutError

    cause = OSError("reset")
    error = LeaseConnectionError("BATCH: lost connection (reset)", operation="BATCH")
    error.__cause__ = cause
    error.outcome_unknown = True
    mine = _for_call(error, "renew_lease")
    assert type(mine) is LeaseConnectionError and mine.operation == "renew_lease"
    assert str(mine) == "renew_lease: lost connection (reset)"
    assert mine.outcome_unknown and mine.__cause__ is cause
    same = LeaseTimeoutError("renew_lease: no answer", operation="renew_lease")
    assert _for_call(same, "renew_lease") is same


async def test_callers_of_a_batch_making_their_next_calls_go_out_together() -> None:
    """Two lone callers run side by side (limit 2); under load one batch is in flight at a
    time (batch_limit 1), and the callers a batch answers, calling again at once, form the
    next batch rather than the first of them going out alone ahead of the rest."""
    send = Recorder()
    c = Coalescer(send, limit=2, batch_limit=1)
    deadlines = Deadlines()
    assert c.enter() and c.enter()  # two lone callers: neither waits for the other
    assert not c.enter()
    c.leave()
    c.leave()

    async def caller(n: int) -> None:
        for step in range(3):
            key = f"{n}:{step}".encode()
            if c.enter():
                c.leave()
                continue
            assert await c.wait(key, (key,), 5.0, deadlines, timeout_error) == [(key,)]

    send.gate.clear()
    assert c.enter() and c.enter()  # two statements in flight: the callers below queue
    callers = [asyncio.ensure_future(caller(n)) for n in range(8)]
    await asyncio.sleep(0)
    c.leave()
    c.leave()
    await asyncio.sleep(0)
    send.gate.set()
    await asyncio.gather(*callers)
    assert [len(b) for b in send.batches] == [8, 8, 8]


def test_the_batch_limit_is_within_the_limit() -> None:
    with pytest.raises(ValueError, match="batch_limit"):
        Coalescer(Recorder(), limit=1, batch_limit=2)


class InFlight(Recorder):
    """A `Recorder` that also checks, as each batch goes out, that none of its keys is in
    another batch in flight, and counts the most batches in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.flying: list[set[bytes]] = []
        self.most = 0
        self.overlaps: list[bytes] = []

    async def __call__(
        self, batch: list[Waiter], seconds: float
    ) -> list[list[Row] | BaseException]:
        keys = {w.key for w in batch}
        for other in self.flying:
            self.overlaps.extend(keys & other)
        self.flying.append(keys)
        self.most = max(self.most, len(self.flying))
        try:
            await asyncio.sleep(0.001 * (len(self.batches) % 3))  # batches end out of order
            return await super().__call__(batch, seconds)
        finally:
            self.flying.remove(keys)


async def test_several_batches_in_flight_never_share_a_write_key() -> None:
    """With three batches in flight (behind a pooler), a key in flight in one batch keeps its
    next calls queued until that batch ends: 24 callers on 6 keys, 5 calls each."""
    send = InFlight()
    c = Coalescer(send, limit=3, batch_limit=3, single=False)
    deadlines = Deadlines()

    async def caller(n: int) -> None:
        for step in range(5):
            key = f"k{(n + step) % 6}".encode()
            assert await c.wait(key, (key,), 5.0, deadlines, timeout_error) == [(key,)]

    await asyncio.gather(*(caller(n) for n in range(24)))
    assert send.overlaps == []
    assert send.most >= 2  # batches really were in flight side by side
    assert all(len(set(b)) == len(b) for b in send.batches)
    assert sum(len(b) for b in send.batches) == 24 * 5


async def test_a_key_in_flight_waits_for_its_batch_while_other_keys_go_out() -> None:
    send = Recorder()
    c = Coalescer(send, limit=2, batch_limit=2, single=False)
    deadlines = Deadlines()
    send.gate.clear()
    first = asyncio.ensure_future(c.wait(b"a", (b"a",), 5.0, deadlines, timeout_error))
    await asyncio.sleep(0)
    again = asyncio.ensure_future(c.wait(b"a", (b"a",), 5.0, deadlines, timeout_error))
    other = asyncio.ensure_future(c.wait(b"b", (b"b",), 5.0, deadlines, timeout_error))
    for _ in range(3):  # the queued calls, then the batch's task
        await asyncio.sleep(0)
    # The second batch slot takes b alone: a is in flight in the first batch.
    assert send.batches == [[b"a"], [b"b"]]
    send.gate.set()
    assert await asyncio.gather(first, again, other) == [[(b"a",)], [(b"a",)], [(b"b",)]]
    assert send.batches == [[b"a"], [b"b"], [b"a"]]


async def test_reads_of_a_key_in_flight_go_out_in_another_batch() -> None:
    send = Recorder()
    c = Coalescer(send, limit=2, batch_limit=2, single=False, shared_keys=True)
    deadlines = Deadlines()
    send.gate.clear()
    first = asyncio.ensure_future(c.wait(b"a", (b"a",), 5.0, deadlines, timeout_error))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(c.wait(b"a", (b"a",), 5.0, deadlines, timeout_error))
    for _ in range(3):
        await asyncio.sleep(0)
    assert send.batches == [[b"a"], [b"a"]]  # reads see one instant each: no need to wait
    send.gate.set()
    await asyncio.gather(first, second)


async def test_a_lane_enters_its_coalescer_and_an_unlimited_one_admits_every_call() -> None:
    """Lanes bind the coalescer's own `enter`/`leave`; on a coalescer that never queues
    (``limit=UNLIMITED``: coalescing off) they are constants, and every call is admitted."""
    send = Recorder()
    shared = Coalescer(send, limit=1)
    lane = coalesce.Lane(shared, 1)
    assert shared.queues
    assert lane.enter() and not lane.enter()  # the coalescer's own count
    lane.leave()
    assert shared.enter()
    shared.leave()
    alone = Coalescer(send, limit=coalesce.UNLIMITED)
    assert not alone.queues
    lanes = [coalesce.Lane(alone, kind) for kind in range(2)]
    assert all(lane.enter() for _ in range(1000) for lane in lanes)
    assert all(lane.leave() is None for lane in lanes)
    assert Coalescer(send, limit=coalesce.UNLIMITED, single=False).queues  # "always"
    assert send.batches == []
