"""Fixtures of the reliability suite: fresh migrated databases and a throwaway cluster."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from sql_lease import migrate

from ._cluster import Cluster, find_bindir


@pytest.fixture
def fresh_database(make_database: Callable[[], str]) -> str:
    """A new database on the shared server with the migrations applied (for fault tests that
    terminate every backend of "their" database)."""
    url = make_database()
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A private PostgreSQL cluster (password auth over TCP) that tests may crash and restart."""
    bindir = find_bindir()
    if bindir is None:
        pytest.fail(
            "PostgreSQL server binaries (initdb, pg_ctl) not found: set SQL_LEASE_PG_BIN",
            pytrace=False,
        )
    c = Cluster(bindir)
    try:
        c.init()
        c.start()
        yield c
    finally:
        c.destroy()


@pytest.fixture
def cluster_database(cluster: Cluster) -> str:
    """A migrated database on the private cluster (URL with the admin password)."""
    url = cluster.create_database(f"lease_{uuid.uuid4().hex[:10]}")
    migrate.upgrade(url)
    return url


@pytest.fixture(params=["postgresql", "mariadb"])
def history_url(request: pytest.FixtureRequest) -> str:
    """The database the processes race on: the session's PostgreSQL database, or a MariaDB
    database of the test's own."""
    if request.param == "mariadb":
        made: str = request.getfixturevalue("make_mariadb_database")()
        migrate.upgrade(made)
        return made
    url: str = request.getfixturevalue("database_url")
    return url
