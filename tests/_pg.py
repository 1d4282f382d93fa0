"""Small PostgreSQL helpers shared by the test layers (plain psycopg, outside the library)."""

from __future__ import annotations

import psycopg
from sqlalchemy.engine import make_url


def terminate_backends(url: str, application_name: str = "sql_lease") -> int:
    """Kill every backend of ``application_name`` on the database of ``url``; how many died."""
    u = make_url(url)
    with psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    ) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s"
            " AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)
