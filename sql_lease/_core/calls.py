"""The arguments and answers of the SQL providers' calls, written once for the async and the
sync provider: no I/O.

Each ``*_args`` function checks a call's arguments before any I/O and returns the statement's
bound values (keys and owners as their stored bytes); `renew_chunks` and `renewed_in_order`
split a batched renewal into statements and fan the rows back out per item; `purge_rounds` is
the purge loop (one short statement per batch) as a generator its driver feeds with the count
of each batch. The providers (`sql_lease._sqlprovider`, `sql_lease.sync`) run the statements.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import Any

from ..capabilities import Renewal
from ..catalogue import Catalogue
from .validate import (
    Millis,
    check_items,
    check_limit,
    check_millis,
    check_name,
    check_prefix,
    check_ttl,
)

__all__ = [
    "key_owner",
    "list_args",
    "purge_args",
    "purge_rounds",
    "renew_args",
    "renew_chunks",
    "renewed_in_order",
    "transfer_args",
    "want_args",
]


def key_owner(key: str, owner: str) -> tuple[bytes, bytes]:
    return check_name("key", key), check_name("owner", owner)


def transfer_args(
    key: str, from_owner: str, to_owner: str, ttl_ms: Millis
) -> tuple[bytes, bytes, bytes, int]:
    k = check_name("key", key)
    return (
        k,
        check_name("from_owner", from_owner),
        check_name("to_owner", to_owner),
        check_ttl(ttl_ms),
    )


def want_args(key: str, wait_ms: Millis) -> tuple[bytes, int]:
    """``mark_wanted``'s: the key, and how long it is wanted (1 ms to 365 days)."""
    return check_name("key", key), check_ttl(wait_ms, "wait_ms")


def list_args(prefix: str | None, limit: int, after: str | None) -> tuple[bytes, bytes | None, int]:
    """``list_leases``'s: the ``[low, high)`` key range (past ``after``) and the page size."""
    low, high = check_prefix(prefix)
    count = check_limit(limit)
    if after is not None:
        low = max(low, check_name("after", after) + b"\0")
    return low, high, count


def purge_args(
    min_age_ms: Millis, batch_size: int, max_batches: int | None
) -> tuple[int, int, int | None]:
    """``purge_expired``'s: the age in ms, the batch size, and how many batches at most."""
    age = check_millis("min_age_ms", min_age_ms)
    batch = check_limit(batch_size, what="batch_size", most=100_000)
    batches = None if max_batches is None else check_limit(max_batches, "max_batches", 10**9)
    return age, batch, batches


def purge_rounds(batch: int, batches: int | None) -> Generator[None, int, int]:
    """The purge loop: send it each batch's deleted count; it stops (returning the total)
    after a short batch or ``batches`` of them."""
    total = done = 0
    while batches is None or done < batches:
        deleted = yield
        total += deleted
        done += 1
        if deleted < batch:
            break
    return total


def renew_args(items: object, ttl_ms: Millis) -> tuple[list[tuple[bytes, bytes]], int]:
    """``renew_many``'s: the ``(key, owner)`` pairs' stored forms, and the TTL."""
    return check_items(items), check_ttl(ttl_ms)


def renew_chunks(
    catalogue: Catalogue, pairs: Sequence[tuple[bytes, bytes]], ttl: int
) -> Iterator[tuple[str, tuple[object, ...]]]:
    """The statements (text, bound values) that renew ``pairs`` with ``ttl``: each pair once
    (a duplicate would match one row twice), at most ``max_batch`` per statement."""
    unique = list(dict.fromkeys(pairs))
    step = catalogue.max_batch
    for start in range(0, len(unique), step):
        chunk = unique[start : start + step]
        yield catalogue.renew_many(len(chunk)).sql, catalogue.renew_many_args(chunk, ttl)


def renewed_in_order(
    catalogue: Catalogue, rows: Sequence[Any], pairs: Sequence[tuple[bytes, bytes]]
) -> list[Renewal | None]:
    """Per item of ``pairs``, in order, its `Renewal` in ``rows`` (the statements' rows), or
    None when it was not renewed."""
    decode = catalogue.renew_many(1).decode
    renewed = dict(decode(row) for row in rows)
    return [renewed.get(pair) for pair in pairs]
