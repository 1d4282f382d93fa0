"""Counting leases under a real race: 6 processes x 2 clients on one ``limit=3`` key for 6 s
never have more than 3 live holders by the database's clock, and do reach 3; fences strictly
increase per key in grant order."""

from __future__ import annotations

import multiprocessing
import uuid
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ._counting_workers import Grant, contend

LIMIT = 3


def most_at_once(grants: list[Grant]) -> int:
    """The largest number of grants live at one instant ([start, end): an end at the very
    instant another starts does not overlap it)."""
    edges = sorted(
        [(end, -1) for _, _, _, end in grants] + [(start, 1) for _, _, start, _ in grants]
    )
    live = most = 0
    for _, step in edges:
        live += step
        most = max(most, live)
    return most


def test_the_checker_counts_overlaps() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    ms = timedelta(milliseconds=1)
    grants = [("a", 1, t0, t0 + 10 * ms), ("b", 2, t0 + 5 * ms, t0 + 20 * ms)]
    assert most_at_once(grants) == 2
    assert most_at_once([*grants, ("c", 3, t0 + 10 * ms, t0 + 30 * ms)]) == 2
    assert most_at_once([*grants, ("c", 3, t0 + 9 * ms, t0 + 30 * ms)]) == 3


@pytest.fixture(params=["postgresql", "sqlite", "mariadb"])
def race_url(request: pytest.FixtureRequest) -> str:
    fixture = {"postgresql": "database_url", "sqlite": "sqlite_url", "mariadb": "mariadb_url"}[
        request.param
    ]
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.mark.timeout(180)
def test_six_processes_of_two_clients_never_exceed_the_limit(race_url: str) -> None:
    key = f"{uuid.uuid4().hex[:8]}\0sem"
    processes = 6
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        futures = [
            pool.submit(contend, race_url, key, LIMIT, 6.0, 500 + p) for p in range(processes)
        ]
        results: list[dict[str, Any]] = [f.result(timeout=150) for f in futures]
    grants = [g for r in results for g in r["grants"]]
    refused = sum(r["refused"] for r in results)
    most = most_at_once(grants)
    print(f"{len(grants)} grants, {refused} refused, at most {most} at once")
    assert most <= LIMIT, most
    assert most == LIMIT, (most, len(grants))
    assert refused > 0
    by_start = sorted(grants, key=lambda g: (g[2], g[1]))
    fences = [g[1] for g in by_start]
    assert len(set(fences)) == len(fences)
    assert fences == sorted(fences), "fences must increase in grant order"
