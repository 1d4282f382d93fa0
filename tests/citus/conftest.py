"""The on-demand scale-out suite (marker ``citus``, deselected by default; ``scripts/citus-suite``
runs it against a Citus cluster). It fails, never skips, when Citus is not there."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .._citus import citus_workers


@pytest.fixture(scope="session")
def citus_url(make_database: Callable[[], str]) -> str:
    """A fresh Citus database (coordinator + workers), not migrated."""
    if not citus_workers():
        pytest.fail(
            "the citus suite needs a Citus cluster: SQL_LEASE_TEST_DSN (the coordinator) and"
            " SQL_LEASE_TEST_CITUS_WORKERS (the workers' ports); see scripts/citus-suite",
            pytrace=False,
        )
    return make_database()
