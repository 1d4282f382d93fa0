"""The counting calls of the SQL providers, written once for the async and the sync provider:
what to send and what the rows mean, no I/O.

`count_answer` judges a counting acquire's row, `holders_of` lists a row's grants,
`grant_of` finds one owner's grant; `acquire_all_steps` is ``acquire_leases`` as a generator
of the statements to send (`Send`), fed each one's rows, returning the result; `renew_misses`
names the items of a batched renewal that may be grants of counting rows. The providers
(`sql_lease._sqlprovider.counting`, `sql_lease.sync._counting`) run the statements.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, NamedTuple

from ..capabilities import Renewal
from ..catalogue import AllRow, Catalogue, CountingStatements, CountRow, name_of
from ..errors import LeaseLimitMismatchError, LeaseValueError
from .contract import AcquireResult, Lease
from .counting import RESERVED_OWNER, AcquireAllResult, Grant

__all__ = [
    "Send",
    "acquire_all_steps",
    "count_answer",
    "counting_of",
    "grant_of",
    "holders_of",
    "is_counting",
    "renew_misses",
    "renewal_of",
]


class Send(NamedTuple):
    """One statement a counting call sends: operation name, write or read, text, values."""

    operation: str
    write: bool
    sql: str
    args: tuple[object, ...]


def _soonest(grants: tuple[Grant, ...]) -> Grant:
    """The holder whose grant ends first: when a slot may free up."""
    return min(grants, key=lambda g: g.expires_at)


def _lease(key: str, grant: Grant) -> Lease:
    owner = name_of(grant.owner, "owner", None)
    return Lease(key, owner, grant.fence, grant.expires_at, grant.acquired_at, grant.metadata)


def counting_of(catalogue: Catalogue, title: str) -> CountingStatements:
    """The catalogue's counting statements; `LeaseValueError` on a backend (``title``)
    that has none."""
    if catalogue.counting is None:
        raise LeaseValueError(f"{title} has no counting leases, metadata or all-or-none calls")
    return catalogue.counting


def count_answer(key: str, k: bytes, o: bytes, limit: int, row: CountRow) -> AcquireResult:
    """The answer of a counting acquire (``limit`` slots) of ``k`` for ``o`` from its row:
    granted or renewed, or refused naming the holder whose grant ends first; a limit other
    than the holders' raises `LeaseLimitMismatchError`."""
    if row.owner != RESERVED_OWNER:  # a live plain lease, left as it was
        if limit != 1:
            raise LeaseLimitMismatchError(key, limit, 1)
        return AcquireResult(False, name_of(row.owner, "owner", k), row.fence, row.expires_at)
    if row.grants and row.slot_limit != limit:
        raise LeaseLimitMismatchError(key, limit, row.slot_limit or 1)
    mine = grant_of(row, o)
    if mine is not None:
        return AcquireResult(True, o.decode("utf-8", "surrogatepass"), mine.fence, mine.expires_at)
    holder = _soonest(row.grants)
    return AcquireResult(False, name_of(holder.owner, "owner", k), holder.fence, holder.expires_at)


def holders_of(key: str, row: CountRow) -> list[Lease]:
    """The live holders of a `CountRow` of ``key``, oldest grant first."""
    return [_lease(key, grant) for grant in row.grants]


def grant_of(row: CountRow, o: bytes) -> Grant | None:
    """The grant of owner ``o`` (stored form) in ``row``, or None."""
    for grant in row.grants:
        if grant.owner == o:
            return grant
    return None


def renewal_of(grant: Grant | None) -> Renewal | None:
    return None if grant is None else Renewal(grant.fence, grant.expires_at)


def is_counting(lease: Lease) -> bool:
    """A listed row that is a counting key (its owner reserved): list its grants instead."""
    return getattr(lease, "owner_bytes", None) == RESERVED_OWNER


def renew_misses(
    counting: CountingStatements | None,
    renewed: Sequence[Renewal | None],
    pairs: Sequence[tuple[bytes, bytes]],
) -> list[tuple[bytes, bytes]]:
    """The distinct ``(key, owner)`` pairs a batched renewal missed that may be grants of
    counting rows (one counting renewal each); none on a backend without counting."""
    if counting is None:
        return []
    return list(dict.fromkeys(p for p, r in zip(pairs, renewed, strict=True) if r is None))


def settled(found: list[AllRow]) -> bool:
    """Whether an all-or-none answer is final: a key blocked (refused whatever the missing
    rows), or every key answered. No row at all (MariaDB answers only for rows that exist)
    or a key without an answer: placeholders are needed first."""
    if any(r.acquired is False for r in found):
        return True
    return bool(found) and all(r.acquired is not None for r in found)


def acquire_all_steps(
    counting: CountingStatements, stored: list[bytes], o: bytes, owner: str, ttl: int
) -> Generator[Send, list[Any], tuple[AcquireAllResult, str | None]]:
    """``acquire_leases`` of the sorted stored keys ``stored``: yields each statement to send
    and takes its rows; returns the result and, when the blocking key's holder is a counting
    row's or unknown, that key (the caller names its owner with ``get_lease_owner``)."""
    statement = counting.acquire_all(len(stored))
    keys_args = counting.keys_args(stored)
    found: list[AllRow] = []
    for _ in range(3):
        rows = yield Send("acquire_leases", True, statement.sql, (*keys_args, o, ttl))
        found = [statement.decode(row) for row in rows]
        if counting.ensure is None or settled(found):
            break
        # Keys without a row (PostgreSQL and MariaDB lock only rows that exist):
        # placeholders, then again.
        yield Send("acquire_leases", True, counting.ensure(len(stored)).sql, keys_args)
    taken = {r.key: r for r in found if r.acquired}
    if len(taken) == len(stored):
        leases = {
            name_of(k, "key"): AcquireResult(True, owner, r.fence, r.expires_at)
            for k, r in taken.items()
        }
        return AcquireAllResult(True, leases), None
    blocked = [r for r in found if r.acquired is False]
    if not blocked and counting.blocker is not None:
        reader = counting.blocker(len(stored))
        rows = yield Send("acquire_leases", False, reader.sql, (*keys_args, o))
        blocked = [reader.decode(row) for row in rows]
    if not blocked:
        return AcquireAllResult(False, {}), None
    first = blocked[0]
    blocked_key = name_of(first.key, "key")
    if first.holder is None or first.holder == RESERVED_OWNER:
        return AcquireAllResult(False, {}, blocked_key), blocked_key
    holder = name_of(first.holder, "owner", first.key)
    return AcquireAllResult(False, {}, blocked_key, holder), None
