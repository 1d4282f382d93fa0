"""The contract suite runs against every provider: add a backend here and it joins."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy.engine import make_url

from sql_lease import InMemoryLeaseProvider, SqlLeaseProvider

from ..conftest import emptied_provider
from ..infra.pgbouncer import PgBouncer

PROVIDERS = [
    "memory",
    "postgresql",
    "sqlite",
    "postgresql-batched",
    "sqlite-batched",
    "pgbouncer-transaction",
    "mariadb",
    "mariadb-batched",
]


@pytest.fixture(params=PROVIDERS)
def provider(
    request: pytest.FixtureRequest,
) -> InMemoryLeaseProvider | SqlLeaseProvider:
    if request.param == "memory":
        return InMemoryLeaseProvider()
    fixture = {
        "postgresql": "sql_provider",
        "sqlite": "sqlite_provider",
        # Every call through the coalesced multi-row statements (PostgreSQL) or transactions.
        "postgresql-batched": "batched_sql_provider",
        "sqlite-batched": "batched_sqlite_provider",
        # Through a real PgBouncer in transaction pooling (server connections move).
        "pgbouncer-transaction": "pgbouncer_provider",
        "mariadb": "mariadb_provider",
        "mariadb-batched": "batched_mariadb_provider",
    }[request.param]
    sql: SqlLeaseProvider = request.getfixturevalue(fixture)
    return sql


@pytest.fixture(scope="session")
def pgbouncer_tx(pg_server: object) -> Iterator[PgBouncer]:
    """One PgBouncer per session in transaction mode, with fewer server connections (4) than a
    provider's pool, its defaults otherwise (no ``ignore_startup_parameters``)."""
    with PgBouncer(pool_mode="transaction", pool_size=4) as bouncer:
        yield bouncer


@pytest.fixture
async def pgbouncer_provider(
    pgbouncer_tx: PgBouncer, database_url: str
) -> AsyncIterator[SqlLeaseProvider]:
    """As `sql_provider`, through `pgbouncer_tx` with ``pooler="transaction"``."""
    url = pgbouncer_tx.url(make_url(database_url).database or "postgres")
    async for provider in emptied_provider(url, pooler="transaction"):
        yield provider


#: The modules whose cases also run with every call through a batch: the statements'
#: semantics and what they report. Bad input is refused before a call can queue, and holding,
#: waiting and the coordinator call the same methods (and run with the default, adaptive
#: coalescing on the other providers): running them batched too would only lengthen the suite.
#: Modules of calls a backend does not have yet, by provider parameter prefix: MariaDB has no
#: counting leases (its refusal is tested in tests/integration/test_mariadb.py).
NOT_ON = {"mariadb": frozenset({"test_counting", "test_hold_keys"})}

BATCHED_MODULES = frozenset(
    {"test_semantics", "test_reporting_forms", "test_extensions", "test_counting"}
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        param = callspec.params.get("provider") if callspec is not None else None
        module = item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
        batched = isinstance(param, str) and param.endswith("-batched")
        missing = isinstance(param, str) and module in NOT_ON.get(param.split("-")[0], ())
        if missing or (
            batched and "tests/contract/" in item.nodeid and module not in BATCHED_MODULES
        ):
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
