"""The counting model of the linearizability checker (`_counting_model`), on crafted histories:
it rejects what no order of the calls explains (N+1 live holders, a refusal while a slot was
free, a fence going backwards, a stale holders list, a release reporting a grant it did not
remove) and accepts the legal histories next to each."""

from __future__ import annotations

from datetime import UTC, datetime

from ._counting_model import check_counting
from ._linearize import Op, Verdict, us

T0 = us(datetime(2026, 1, 1, tzinfo=UTC))
LONG = 60_000


def ms(x: float) -> int:
    return T0 + round(x * 1000)


class C:
    """A crafted history of counting calls, times in milliseconds after T0."""

    def __init__(self, limit: int = 3) -> None:
        self.ops: list[Op] = []
        self.limits = {"k": limit}

    def add(
        self,
        kind: str,
        owner: str,
        lo: float,
        hi: float | None,
        result: object = None,
        *,
        key: str = "k",
        to: str | None = None,
        ttl: int | None = None,
        unknown: bool = False,
    ) -> C:
        n = len(self.ops)
        error = "LeaseTimeoutError" if unknown else None
        end = None if hi is None else ms(hi)
        op = Op(n, f"c{n}", key, kind, owner, ms(lo), end, result, to, ttl, unknown, error)
        self.ops.append(op)
        return self

    def take(self, owner: str, lo: float, hi: float, at: float, fence: int, ttl: int = LONG) -> C:
        result = (True, owner, fence, ms(at) + ttl * 1000)
        return self.add("acquire", owner, lo, hi, result, ttl=ttl)

    def refused(
        self, owner: str, lo: float, hi: float, holder: str, fence: int, expires: float
    ) -> C:
        return self.add("acquire", owner, lo, hi, (False, holder, fence, ms(expires)), ttl=LONG)

    def holders(self, lo: float, hi: float, *grants: tuple[str, int, float]) -> C:
        result = tuple((o, f, ms(e)) for o, f, e in grants)
        return self.add("holders", "", lo, hi, result)

    def release(self, owner: str, lo: float, hi: float, fence: int | None, at: float = 0) -> C:
        return self.add("release", owner, lo, hi, None if fence is None else (fence, ms(at)))

    def check(self) -> Verdict:
        return check_counting(self.ops, self.limits)


def three() -> C:
    """a, b and c hold the three slots of ``k`` for a minute (fences 1, 2, 3)."""
    return C().take("a", 0, 2, at=1, fence=1).take("b", 3, 5, 4, 2).take("c", 6, 8, 7, 3)


def test_it_rejects_a_fourth_live_holder_of_a_limit_3_key() -> None:
    verdict = three().take("d", 10, 12, at=11, fence=4).check()
    assert not verdict.ok
    report = verdict.report()
    print(report)
    assert "not linearizable with respect to the counting model" in report
    assert "acquire('d'" in report and "limit 3, grants:" in report
    # Concurrent acquires cannot all win either: the fourth one had no slot at any order.
    racing = C().take("a", 0, 10, 5, 1).take("b", 0, 10, 6, 2).take("c", 0, 10, 7, 3)
    assert racing.check().ok
    assert not racing.take("d", 0, 10, 8, 4).check().ok


def test_it_accepts_a_fourth_holder_once_a_slot_was_released_or_expired() -> None:
    released = three().release("b", 9, 10, 2, at=9.5).take("d", 11, 12, at=11.5, fence=4)
    assert released.check().ok
    short = C().take("a", 0, 2, 1, 1, ttl=10).take("b", 3, 5, 4, 2).take("c", 6, 8, 7, 3)
    assert short.take("d", 20, 22, at=21, fence=4).check().ok  # a's grant ended at 11 ms
    # ... but not while a's grant still lived (it ends at 11 ms, d's stamp is 10 ms).
    early = C().take("a", 0, 2, 1, 1, ttl=10).take("b", 3, 5, 4, 2).take("c", 6, 8, 7, 3)
    assert not early.take("d", 9, 10.5, at=10, fence=4).check().ok


def test_it_rejects_a_refusal_while_a_slot_was_free() -> None:
    two = C().take("a", 0, 2, 1, 1).take("b", 3, 5, 4, 2)
    assert not two.refused("c", 6, 8, "a", 1, 1 + LONG).check().ok
    # Full: a refusal is justified, naming the holder whose grant ends first ...
    assert three().refused("d", 9, 10, "a", 1, 1 + LONG).check().ok
    # ... not one ending later, nor an owner holding no slot, nor a holder's wrong fence.
    assert not three().refused("d", 9, 10, "b", 2, 4 + LONG).check().ok
    assert not three().refused("d", 9, 10, "z", 1, 1 + LONG).check().ok
    assert not three().refused("d", 9, 10, "a", 2, 1 + LONG).check().ok
    # A refusal concurrent with a release may come before it.
    assert three().release("c", 9, 12, 3, at=11).refused("d", 9, 10, "a", 1, 1 + LONG).check().ok


def test_it_rejects_fences_that_go_backwards() -> None:
    assert not C().take("a", 0, 2, 1, 5).take("b", 3, 4, 3.5, 4).check().ok
    # Across releases too: every grant of the key is above every earlier one.
    freed = C().take("a", 0, 2, 1, 5).release("a", 3, 4, 5, at=3.5)
    assert not freed.take("b", 5, 6, 5.5, 5).check().ok
    # A re-acquire by a holder keeps its fence; a new fence there is a violation.
    assert C().take("a", 0, 2, 1, 5).take("a", 3, 4, 3.5, 5).check().ok
    assert not C().take("a", 0, 2, 1, 5).take("a", 3, 4, 3.5, 6).check().ok
    # A renewal reports the grant's own fence.
    renewed = C().take("a", 0, 2, 1, 5).add("renew", "a", 3, 4, (5, ms(3.5) + 1000), ttl=1)
    assert renewed.check().ok
    bad = C().take("a", 0, 2, 1, 5).add("renew", "a", 3, 4, (6, ms(3.5) + 1000), ttl=1)
    assert not bad.check().ok


def test_it_rejects_a_stale_holders_list() -> None:
    assert (
        three()
        .holders(9, 10, ("a", 1, 1 + LONG), ("b", 2, 4 + LONG), ("c", 3, 7 + LONG))
        .check()
        .ok
    )

    # After a release completed, its grant is not listed; concurrent with it, either way.
    def gone() -> C:
        return three().release("b", 9, 10, 2, at=9.5)

    assert (
        not gone()
        .holders(11, 12, ("a", 1, 1 + LONG), ("b", 2, 4 + LONG), ("c", 3, 7 + LONG))
        .check()
        .ok
    )
    assert gone().holders(11, 12, ("a", 1, 1 + LONG), ("c", 3, 7 + LONG)).check().ok
    both = (
        three()
        .release("b", 9, 12, 2, at=11)
        .holders(10, 11, ("a", 1, 1 + LONG), ("b", 2, 4 + LONG), ("c", 3, 7 + LONG))
    )
    assert both.check().ok
    # A live holder left out, an expired one listed, a wrong fence or expiry: all stale.
    assert not three().holders(9, 10, ("a", 1, 1 + LONG), ("c", 3, 7 + LONG)).check().ok
    short = C().take("a", 0, 2, 1, 1, ttl=10)
    assert not short.holders(20, 21, ("a", 1, 11)).check().ok
    assert C().take("a", 0, 2, 1, 1, ttl=10).holders(20, 21).check().ok
    assert (
        not three()
        .holders(9, 10, ("a", 1, 1 + LONG), ("b", 2, 4 + LONG), ("c", 4, 7 + LONG))
        .check()
        .ok
    )
    assert (
        not three()
        .holders(9, 10, ("a", 1, 2 + LONG), ("b", 2, 4 + LONG), ("c", 3, 7 + LONG))
        .check()
        .ok
    )


def test_a_transfer_hands_one_slot_on_with_a_new_fence_seen_later() -> None:
    moved = three().add("transfer", "b", 9, 10, True, to="d", ttl=LONG)
    listed = ("a", 1, 1 + LONG), ("c", 3, 7 + LONG)
    assert moved.holders(11, 12, *listed, ("d", 4, 9.5 + LONG)).check().ok
    # The new grant's fence is above every earlier one, and its expiry is now + ttl.
    moved = three().add("transfer", "b", 9, 10, True, to="d", ttl=LONG)
    assert not moved.holders(11, 12, *listed, ("d", 2, 9.5 + LONG)).check().ok
    moved = three().add("transfer", "b", 9, 10, True, to="d", ttl=LONG)
    assert not moved.holders(11, 12, *listed, ("d", 4, 12 + LONG)).check().ok
    # Nothing to hand on, or to an owner holding a slot already: a transfer must fail.
    assert not three().add("transfer", "z", 9, 10, True, to="d", ttl=LONG).check().ok
    assert not three().add("transfer", "b", 9, 10, True, to="a", ttl=LONG).check().ok
    assert three().add("transfer", "b", 9, 10, False, to="a", ttl=LONG).check().ok
    # It never adds a slot: a fourth owner is still refused.
    moved = three().add("transfer", "b", 9, 10, True, to="d", ttl=LONG)
    assert not moved.take("e", 11, 12, 11.5, 9).check().ok


def test_a_release_reports_the_grant_it_removed_not_an_earlier_one() -> None:
    """The owner's grant expired and the owner took a slot again (a new fence): its release
    then removes the new grant and must report that one's fence."""
    history = C().take("a", 0, 2, 1, 5, ttl=10).take("a", 20, 22, 21, 7)
    assert history.release("a", 23, 24, 7, at=23.5).check().ok
    history = C().take("a", 0, 2, 1, 5, ttl=10).take("a", 20, 22, 21, 7)
    assert not history.release("a", 23, 24, 5, at=23.5).check().ok
    # An expired grant nobody pruned may still be released (and reported) by its owner.
    assert C().take("a", 0, 2, 1, 5, ttl=10).release("a", 20, 21, 5, at=20.5).check().ok
    assert C().take("a", 0, 2, 1, 5, ttl=10).release("a", 20, 21, None).check().ok
    # ... but a live grant must be released when its owner asks.
    assert not C().take("a", 0, 2, 1, 5).release("a", 20, 21, None).check().ok


def test_unknown_outcomes_are_maybe_and_fences_one_sequence() -> None:
    maybe = C(limit=1).add("acquire", "a", 0, None, ttl=LONG, unknown=True)
    assert maybe.holders(50, 51, ("a", 9, 30 + LONG)).check().ok  # it took the slot
    maybe = C(limit=1).add("acquire", "a", 0, None, ttl=LONG, unknown=True)
    assert maybe.holders(50, 51).check().ok  # or never applied
    maybe = C(limit=1).add("acquire", "a", 0, None, ttl=LONG, unknown=True)
    assert maybe.refused("b", 50, 51, "a", 9, 30 + LONG).check().ok
    # Once listed, it holds the slot for the rest of its minute.
    maybe = C(limit=1).add("acquire", "a", 0, None, ttl=LONG, unknown=True)
    assert not maybe.holders(50, 51, ("a", 9, 30 + LONG)).holders(52, 53).check().ok
    # A fence names one key only: a grant of another key with the same fence is a violation.
    two = C().take("a", 0, 2, 1, 5)
    two.limits["other"] = 2
    two.add("acquire", "a", 0, 2, (True, "a", 5, ms(1) + LONG * 1000), key="other", ttl=LONG)
    verdict = two.check()
    assert not verdict.ok and "fence 5 was seen on several keys" in verdict.report()
