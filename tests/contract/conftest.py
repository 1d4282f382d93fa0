"""The contract suite runs against every provider: add a backend here and it joins."""

from __future__ import annotations

import pytest

from sql_lease import InMemoryLeaseProvider, SqlLeaseProvider

PROVIDERS = ["memory", "postgresql", "sqlite"]


@pytest.fixture(params=PROVIDERS)
def provider(
    request: pytest.FixtureRequest,
) -> InMemoryLeaseProvider | SqlLeaseProvider:
    if request.param == "memory":
        return InMemoryLeaseProvider()
    fixture = {"postgresql": "sql_provider", "sqlite": "sqlite_provider"}[request.param]
    sql: SqlLeaseProvider = request.getfixturevalue(fixture)
    return sql
