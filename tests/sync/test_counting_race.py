"""Counting leases under a real race on the sync provider: 6 processes x 2 threads (sharing
one provider each) on one ``limit=3`` key for 6 s never have more than 3 live holders by the
database's clock, and reach 3; fences strictly increase in grant order."""

from __future__ import annotations

import multiprocessing
import uuid
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from tests.integration.test_counting_race import most_at_once

from ._counting_workers import contend

LIMIT = 3


@pytest.fixture(params=["postgresql", "sqlite", "mariadb"])
def race_url(request: pytest.FixtureRequest) -> str:
    fixture = {"postgresql": "database_url", "sqlite": "sqlite_url", "mariadb": "mariadb_url"}[
        request.param
    ]
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.mark.timeout(180)
def test_six_processes_of_two_threads_never_exceed_the_limit(race_url: str) -> None:
    key = f"{uuid.uuid4().hex[:8]}\0sem"
    processes = 6
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        futures = [
            pool.submit(contend, race_url, key, LIMIT, 6.0, 700 + p, 2) for p in range(processes)
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
