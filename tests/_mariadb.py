"""The MariaDB server under test and the databases tests make on it.

The server comes from ``SQL_LEASE_TEST_MARIADB`` (default ``mariadb://root@127.0.0.1:3306/test``).
When it cannot be reached, a test that needs it fails under ``CI=true`` (never skips there) and
is skipped elsewhere with the reason. Each database made here is ``sql_lease_t_<random>`` and is
dropped when the session finishes (`drop_made`).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pymysql
import pytest
from sqlalchemy.engine import URL, make_url

DEFAULT_URL = "mariadb://root@127.0.0.1:3306/test"

_MADE: list[str] = []


def server_url() -> URL:
    return make_url(os.environ.get("SQL_LEASE_TEST_MARIADB", DEFAULT_URL))


def admin_connect(url: URL | None = None, database: str | None = None) -> pymysql.Connection:
    url = url or server_url()
    return pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        database=database,
        autocommit=True,
        connect_timeout=5,
    )


def require_server() -> URL:
    """The server's URL; fails (CI) or skips (elsewhere) the test when it is unreachable."""
    url = server_url()
    try:
        admin_connect(url).close()
    except pymysql.err.MySQLError as exc:
        message = (
            f"MariaDB is not reachable at {url.render_as_string(hide_password=True)} ({exc}). "
            "Start it (`service mariadb start`) or set SQL_LEASE_TEST_MARIADB."
        )
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return url


def make_database(url: URL) -> str:
    """A new empty database on the server of ``url``; its URL (mariadb://...)."""
    name = f"sql_lease_t_{uuid.uuid4().hex[:12]}"
    with admin_connect(url) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}`")
    _MADE.append(name)
    return url.set(drivername="mariadb", database=name).render_as_string(hide_password=False)


def drop_database(name: str) -> None:
    with admin_connect() as conn, conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    if name in _MADE:
        _MADE.remove(name)


def drop_made() -> None:
    """Drop every database `make_database` made in this process (the session's end)."""
    while _MADE:
        try:
            drop_database(_MADE[-1])
        except pymysql.err.MySQLError:
            _MADE.pop()


def stray_files(*directories: Path) -> set[Path]:
    """Files named like a database these fixtures make (``sql_lease_t_*``) in ``directories``.

    A test that hands such a name to ``sqlite3.connect`` creates an empty file of that name in
    the working directory (two were committed once); `tests/conftest.py` fails a session that
    leaves a new one behind.
    """
    return {path for d in directories for path in d.glob("sql_lease_t_*") if path.is_file()}
