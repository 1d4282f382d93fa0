"""A Citus cluster for the on-demand scale-out suite (``scripts/citus-suite``, marker ``citus``).

The cluster is ``../shared/citus/cluster.sh``'s (or any): the coordinator is
``SQL_LEASE_TEST_DSN`` and ``SQL_LEASE_TEST_CITUS_WORKERS`` lists the workers' ports (same
host and user). With it set, every database the tests make is a Citus database: made on the
coordinator and on each worker, ``CREATE EXTENSION citus`` on each, the workers registered on
the coordinator. When Citus is missing the run fails: the suite never skips.
"""

from __future__ import annotations

import os

import psycopg
import pytest
from sqlalchemy.engine import URL

__all__ = ["citus_workers", "drop_on_workers", "make_citus"]


def citus_workers() -> list[int]:
    """The workers' ports, or [] when the tests run on a plain PostgreSQL."""
    raw = os.environ.get("SQL_LEASE_TEST_CITUS_WORKERS", "").strip()
    return [int(p) for p in raw.split(",") if p.strip()]


def _connect(url: URL, port: int | None, dbname: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(
        host=url.host,
        port=port or url.port,
        user=url.username,
        password=url.password,
        dbname=dbname,
        autocommit=True,
        connect_timeout=10,
    )


def make_citus(server: URL, name: str) -> None:
    """Make database ``name`` (already made on the coordinator) a Citus database."""
    workers = citus_workers()
    for port in workers:
        with _connect(server, port, server.database or "postgres") as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    for port in [None, *workers]:
        with _connect(server, port, name) as conn:
            try:
                conn.execute("CREATE EXTENSION citus")
            except psycopg.Error as exc:
                pytest.fail(f"Citus is not installed on port {port or server.port}: {exc}")
    with _connect(server, None, name) as conn:
        for port in workers:
            conn.execute("SELECT citus_add_node(%s, %s)", (server.host, port))


def drop_on_workers(server: URL, name: str) -> None:
    for port in citus_workers():
        with _connect(server, port, server.database or "postgres") as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
