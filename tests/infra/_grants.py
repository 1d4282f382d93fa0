"""The check of a history of acquires only (no renewals, releases or transfers) on a few keys:
what the pooler tests assert of their concurrent callers."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable
from datetime import datetime, timedelta

from sql_lease import AcquireResult


def check_acquires(
    answers: Iterable[tuple[str, AcquireResult]], ttl_ms: int, keys: Collection[str]
) -> None:
    """Every key was granted; a fence belongs to one owner; the next owner of a key was
    granted only after the last one's lease expired (database times: start = expiry - TTL);
    a refused acquire names a holder that was granted that fence."""
    answers = list(answers)
    grants: dict[tuple[str, int], tuple[str | None, datetime, datetime]] = {}
    for key, result in answers:
        assert result.fence is not None and result.expires_at is not None
        if result.acquired:
            start = result.expires_at - timedelta(milliseconds=ttl_ms)
            owner, began, ended = grants.get((key, result.fence), (result.owner, start, start))
            assert owner == result.owner  # a fence belongs to one owner
            grants[(key, result.fence)] = (owner, began, max(ended, result.expires_at))
    assert {k for k, _ in grants} == set(keys)
    for key in keys:
        tenures = [grants[(k, f)] for k, f in sorted(grants) if k == key]
        for (_, _, ended), (_, began, _) in itertools.pairwise(tenures):
            assert began >= ended
    for key, result in answers:
        if not result.acquired:
            assert result.fence is not None
            granted = grants.get((key, result.fence))
            assert granted is not None and granted[0] == result.owner
