"""Helpers of the observer tests: unique keys, and a lock held by another connection."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.engine import make_url

from .. import _mariadb


def key() -> str:
    return f"obs:{uuid.uuid4().hex[:12]}"


@contextmanager
def row_locked(url: str, backend: str, k: str) -> Iterator[None]:
    """Another connection holds a write lock on ``k``'s row (PostgreSQL, MariaDB) or the file
    (SQLite)."""
    if backend == "mariadb":
        u = make_url(url)
        with _mariadb.admin_connect(u, u.database) as conn, conn.cursor() as cursor:
            cursor.execute("START TRANSACTION")
            cursor.execute("SELECT 1 FROM leases WHERE `key` = %s FOR UPDATE", (k.encode(),))
            try:
                yield
            finally:
                cursor.execute("ROLLBACK")
    elif backend == "postgresql":
        u = make_url(url)
        pg = psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database)
        try:
            pg.execute("SELECT 1 FROM leases WHERE key = %s FOR UPDATE", (k.encode(),))
            yield
        finally:
            pg.rollback()
            pg.close()
    elif backend == "sqlite" and make_url(url).get_backend_name() == "sqlite":
        db = sqlite3.connect(make_url(url).database or "", isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            yield
        finally:
            db.rollback()
            db.close()
    else:
        # Never a fall-through to SQLite: sqlite3.connect on another backend's database name
        # made an empty file of that name in the working directory (sql_lease_t_<hex>).
        raise ValueError(f"row_locked knows no backend {backend!r} for this URL")
