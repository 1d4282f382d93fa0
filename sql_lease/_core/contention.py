"""Which keys are contended right now, so that acquire can look before it writes.

An acquire of a key that another owner holds is bound to fail. Its full statement (insert or
update, gated on the snapshot) costs the server about twice a plain read, even when it changes
nothing, because it plans and starts the data-modifying parts. A crowd polling a held key would
pay that on every attempt. So after an acquire has seen a key held by someone else, the next
acquires of that key in this process first read the holder (the `holder` statement, as cheap as
`get_lease_owner`): a live other holder is the answer, with no write attempted (the classic
test-and-test-and-set). Only when the key looks free or the caller's own do they run the full
statement, which re-checks everything under the row lock as always.

Both answers are linearizable on their own: a failed acquire takes effect at the read's
snapshot, when that holder was live. The hint only picks which statement goes first, so a stale
or missing hint costs a round trip at most, never correctness. Uncontended keys never get a hint
and keep their single statement.

What the rows of either statement answer is decided here too (`ContentionHints.answer`,
`ContentionHints.seen_held`), the same for the async and the sync provider.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import monotonic
from typing import Any, Final

from ..catalogue import AcquireRow, name_of
from .contract import AcquireResult, result

__all__ = ["HINT_SECONDS", "MAX_HINTS", "ContentionHints"]

#: How long after a key was last seen held by another owner acquires still read first.
HINT_SECONDS: Final = 1.0
#: Keys remembered at most; the oldest hint goes first.
MAX_HINTS: Final = 4096


class ContentionHints:
    """Keys recently seen held by another owner (bounded; entries go stale on their own)."""

    __slots__ = ("_until",)

    def __init__(self) -> None:
        self._until: dict[bytes, float] = {}

    def __len__(self) -> int:
        return len(self._until)

    def contended(self, key: bytes) -> bool:
        """True when an acquire of ``key`` should read the holder before writing."""
        until = self._until.get(key)
        if until is None:
            return False
        if until < monotonic():
            del self._until[key]
            return False
        return True

    def held(self, key: bytes) -> None:
        """An acquire of ``key`` just saw it held by another owner."""
        hints = self._until
        hints.pop(key, None)
        hints[key] = monotonic() + HINT_SECONDS
        if len(hints) > MAX_HINTS:
            del hints[next(iter(hints))]

    def free(self, key: bytes) -> None:
        """An acquire of ``key`` saw it free or held by its caller."""
        self._until.pop(key, None)

    def seen_held(self, rows: Sequence[Any], k: bytes, o: bytes) -> AcquireResult | None:
        """What the ``holder`` statement's ``rows`` (owner, fence, expires_at) answer an
        acquire of ``k`` by ``o``: a live other holder (the acquire failed; the key stays
        hinted), or None (free or the caller's: run the acquire statement)."""
        if rows:
            row = rows[0]
            if row[0] != o:
                self.held(k)
                return result(False, name_of(row[0], "owner", k), row[1], row[2])
        return None

    def answer(
        self,
        rows: Sequence[Any],
        k: bytes,
        o: bytes,
        owner: str,
        decode: Any,
    ) -> AcquireResult | None:
        """What the acquire statement's ``rows`` answer ``owner`` (stored form ``o``) for key
        ``k``: won, or held by another (``decode``: the statement's `AcquireRow` decoder);
        None when neither (a concurrent writer committed after the statement's snapshot: run
        it again, the next snapshot sees it)."""
        for row in rows:
            if row[0]:
                self.free(k)
                return result(True, owner, row[1], row[2])
        if rows and rows[0][3] != o:
            self.held(k)
            won: AcquireRow = decode(rows[0])
            holder = "" if won.holder is None else name_of(bytes(won.holder), "owner", k)
            return result(False, holder, won.fence, won.expires_at)
        return None
