"""How `sql_lease.sync` connects to PostgreSQL: libpq parameters from a URL, psycopg's pool.

psycopg (the ``sync`` extra) is imported only when an executor is made, so a sync provider
on SQLite needs only the standard library.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import URL, Engine

from ..._core.deadlines import server_millis
from ...errors import LeaseValueError
from .. import CatalogueNow
from .pooler_text import PoolerStatements
from .sync import EnginePgSource, PgExecutor, open_pool
from .sync_citus import SyncCitus
from .urls import host_port

__all__ = ["engine_executor", "libpq_kwargs", "url_executor"]


def libpq_kwargs(url: URL) -> dict[str, Any]:
    """psycopg's connection keywords for ``url`` (libpq parameters of its query passed on)."""
    kwargs: dict[str, Any] = {}
    for name, value in (
        ("host", url.host),
        ("port", url.port),
        ("user", url.username),
        ("password", url.password),
        ("dbname", url.database),
    ):
        if value is not None:
            kwargs[name] = value
    if "host" in url.query and "port" not in url.query:
        kwargs.update(_host_list(url.query["host"]))
    for name, given in url.query.items():
        if name in kwargs and name in ("host", "port"):
            continue
        if not isinstance(given, str):
            raise LeaseValueError(f"the URL gives {name} more than once")
        if name == "ssl":  # asyncpg's spelling
            kwargs.setdefault("sslmode", given)
        elif name != "dsn":
            kwargs[name] = given
    return kwargs


def _host_list(given: str | tuple[str, ...]) -> dict[str, str]:
    """SQLAlchemy's ``?host=h1:p1&host=h2:p2`` (or ``?host=h1:p1,h2:p2``) as libpq's
    ``host=h1,h2 port=p1,p2`` (a host without a port gets 5432)."""
    parts = (given,) if isinstance(given, str) else given
    tokens = [token for part in parts for token in part.split(",")]
    if not any(t.startswith("[") or t.count(":") == 1 for t in tokens):
        return {}  # plain host names (or bare IPv6 addresses): libpq reads them as they are
    pairs = [host_port(t) for t in tokens]
    return {
        "host": ",".join(host for host, _ in pairs),
        "port": ",".join(str(port or 5432) for _, port in pairs),
    }


def url_executor(
    url: URL,
    table: str,
    *,
    where: str,
    timeout: float,
    connect_timeout: float,
    synchronous_commit: bool,
    pool_size: int,
    pooler: str | None = None,
    listen_url: URL | None = None,
    catalogue: CatalogueNow | None = None,
) -> PgExecutor:
    """An executor owning a psycopg pool for ``url``: autocommit, server-side statement and
    lock timeouts at `SERVER_SHARE` of ``timeout``, no prepared statements.

    Straight to the server the timeouts are startup options. Behind a pooler (``pooler``:
    ``"transaction"`` or ``"session"``) nothing but ``application_name`` is sent at startup
    (a pooler refuses the rest) and each call is one simple query that sets them for itself
    (`pooler_text`). The LISTEN connection of waiters connects to ``listen_url`` when given,
    else to ``url`` except behind a transaction pooler (which cannot carry LISTEN: waiters
    then poll).
    """
    kwargs = libpq_kwargs(url)
    kwargs.setdefault("application_name", "sql_lease")
    kwargs["connect_timeout"] = max(1, round(connect_timeout))
    kwargs["autocommit"] = True
    kwargs["prepare_threshold"] = None
    listen: dict[str, Any] | None = {
        k: v for k, v in kwargs.items() if k not in ("options", "prepare_threshold")
    }
    if listen_url is not None:
        listen = libpq_kwargs(listen_url)
        listen.setdefault("application_name", kwargs["application_name"])
        listen["connect_timeout"] = kwargs["connect_timeout"]
        listen["autocommit"] = True
    elif pooler == "transaction":
        listen = None
    statements = None
    citus = None if catalogue is None else SyncCitus(catalogue)
    if pooler is None:
        millis = server_millis(timeout)
        options = f"-c statement_timeout={millis} -c lock_timeout={millis} -c TimeZone=UTC"
        if not synchronous_commit:
            options += " -c synchronous_commit=off"
        kwargs["options"] = (kwargs.get("options", "") + " " + options).strip()
    else:
        statements = PoolerStatements(timeout, catalogue)
    pool = open_pool(kwargs, size=pool_size, timeout=timeout)
    return PgExecutor(
        pool,
        where=where,
        table=table,
        listen_kwargs=listen,
        statements=statements,
        citus=citus if statements is None else None,
    )


def engine_executor(
    engine: Engine,
    table: str,
    *,
    where: str,
    timeout: float,
    catalogue: CatalogueNow | None = None,
) -> PgExecutor:
    """An executor borrowing connections from a caller's ``engine`` (never disposed);
    ``catalogue``: the provider's (its Citus calls)."""
    kwargs = libpq_kwargs(engine.url.set(drivername="postgresql"))
    kwargs["autocommit"] = True
    kwargs.setdefault("connect_timeout", max(1, round(timeout)))
    citus = None if catalogue is None else SyncCitus(catalogue)
    source = EnginePgSource(engine)
    return PgExecutor(source, where=where, table=table, listen_kwargs=kwargs, citus=citus)
