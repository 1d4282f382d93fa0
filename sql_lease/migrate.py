"""Apply the library's Alembic migrations from Python (the installed package ships them).

    from sql_lease import migrate
    migrate.upgrade("postgresql://user:pass@host/db")          # to head
    print(migrate.upgrade(None, sql=True))                      # the SQL, no database
    await migrate.upgrade_async(engine)                          # inside an event loop

The migrations record their version in ``<table>_alembic_version`` (``leases_alembic_version``
by default), never in ``alembic_version``, so they coexist with an application's own history.
"""

from __future__ import annotations

import asyncio
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import NullPool

from ._dberrors import translate
from ._urls import build_engine, normalize_url, redact
from ._validate import check_identifier
from .errors import LeaseError, LeaseValueError
from .schema import DEFAULT_TABLE, fence_sequence_name, version_table_name

__all__ = [
    "ENV_URL",
    "MigrationNames",
    "check",
    "check_async",
    "current",
    "current_async",
    "downgrade",
    "downgrade_async",
    "head",
    "make_config",
    "migration_names",
    "script_location",
    "upgrade",
    "upgrade_async",
]

ENV_URL = "SQL_LEASE_DATABASE_URL"
ENV_TABLE = "SQL_LEASE_TABLE"
ENV_SCHEMA = "SQL_LEASE_SCHEMA"
_OFFLINE_URL = "postgresql+asyncpg://"


@dataclass(frozen=True, slots=True)
class MigrationNames:
    """The database objects one set of migrations manages."""

    table: str = DEFAULT_TABLE
    schema: str | None = None

    def __post_init__(self) -> None:
        check_identifier("table_name", self.table)
        if self.schema is not None:
            check_identifier("schema", self.schema)

    @property
    def sequence(self) -> str:
        return fence_sequence_name(self.table)

    @property
    def version_table(self) -> str:
        return version_table_name(self.table)

    def qualified(self, name: str) -> str:
        """``name`` quoted, with the schema when there is one."""
        quoted = f'"{check_identifier("name", name)}"'
        return quoted if self.schema is None else f'"{self.schema}".{quoted}'


@dataclass(frozen=True, slots=True)
class _Settings:
    url: str
    names: MigrationNames


def script_location() -> str:
    """The migrations folder: shipped in the wheel, or the checkout's ``migrations/``."""
    shipped = Path(__file__).resolve().parent / "_migrations"
    if (shipped / "env.py").is_file():
        return str(shipped)
    checkout = Path(__file__).resolve().parent.parent / "migrations"
    if (checkout / "env.py").is_file():
        return str(checkout)
    raise LeaseError("sql_lease's migrations are missing from this installation")


def make_config(
    url: str | URL | None = None,
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
    output: Any = None,
) -> Config:
    """An Alembic `Config` for the library's migrations (no ini file needed)."""
    names = MigrationNames(table_name, schema)
    cfg = Config(output_buffer=output) if output is not None else Config()
    cfg.set_main_option("script_location", script_location())
    cfg.attributes["sql_lease_names"] = names
    if url is not None:
        cfg.attributes["sql_lease_url"] = normalize_url(url).render_as_string(hide_password=False)
    return cfg


def resolve_settings(cfg: Config) -> _Settings:
    """Settings for ``migrations/env.py``: attributes, then ``-x``, then the environment."""
    from alembic import context

    x: dict[str, str] = context.get_x_argument(as_dictionary=True)
    names = cfg.attributes.get("sql_lease_names")
    if names is None:
        schema = x.get("schema") or os.environ.get(ENV_SCHEMA) or None
        names = MigrationNames(x.get("table") or os.environ.get(ENV_TABLE) or DEFAULT_TABLE, schema)
    url = cfg.attributes.get("sql_lease_url") or x.get("url") or os.environ.get(ENV_URL)
    if url:
        url = normalize_url(url).render_as_string(hide_password=False)
    elif cfg.attributes.get("connection") is None:
        if not context.is_offline_mode():
            raise LeaseValueError(
                f"no database URL: set {ENV_URL} (or pass -x url=...) to run migrations"
            )
        url = _OFFLINE_URL
    return _Settings(url=str(url or _OFFLINE_URL), names=names)


def migration_names() -> MigrationNames:
    """The names the running migration applies to (for revision scripts)."""
    from alembic import context

    names: MigrationNames = context.config.attributes["sql_lease_names"]
    return names


def head() -> str:
    """The newest revision the installed library ships."""
    cfg = make_config()
    heads = ScriptDirectory.from_config(cfg).get_heads()
    return heads[0]


# -- running commands ----------------------------------------------------------------------


def _engine_for(target: str | URL | AsyncEngine) -> tuple[AsyncEngine, bool]:
    if isinstance(target, AsyncEngine):
        return target, False
    return build_engine(normalize_url(target), poolclass=NullPool), True


async def _with_connection(
    target: str | URL | AsyncEngine, fn: Any, *args: Any, transaction: bool = True
) -> Any:
    engine, owned = _engine_for(target)
    try:
        if transaction:
            async with engine.begin() as conn:
                return await conn.run_sync(fn, *args)
        async with engine.connect() as conn:
            return await conn.run_sync(fn, *args)
    except LeaseError:
        raise
    except Exception as exc:
        if getattr(exc, "__module__", "").startswith("alembic"):
            raise
        raise translate(
            exc, operation="migrate", where=redact(engine.url), sent=True, table="(migrations)"
        ) from exc
    finally:
        if owned:
            await engine.dispose()


def _command(
    conn: Connection, name: str, revision: str, table_name: str, schema: str | None
) -> None:
    cfg = make_config(table_name=table_name, schema=schema)
    cfg.attributes["connection"] = conn
    getattr(command, name)(cfg, revision)


def _current(conn: Connection, table_name: str, schema: str | None) -> str | None:
    names = MigrationNames(table_name, schema)
    ctx = MigrationContext.configure(
        conn, opts={"version_table": names.version_table, "version_table_schema": schema}
    )
    heads = ctx.get_current_heads()
    return heads[0] if heads else None


async def upgrade_async(
    target: str | URL | AsyncEngine,
    revision: str = "head",
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
) -> None:
    """Upgrade the leases schema of ``target`` (a URL or an `AsyncEngine`) to ``revision``."""
    await _with_connection(target, _command, "upgrade", revision, table_name, schema)


async def downgrade_async(
    target: str | URL | AsyncEngine,
    revision: str = "base",
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
) -> None:
    """Downgrade to ``revision``; ``base`` drops the table, sequence and version table."""
    await _with_connection(target, _command, "downgrade", revision, table_name, schema)


async def current_async(
    target: str | URL | AsyncEngine, *, table_name: str = DEFAULT_TABLE, schema: str | None = None
) -> str | None:
    """The revision the database is at, or None when the migrations were never applied."""
    result: str | None = await _with_connection(
        target, _current, table_name, schema, transaction=False
    )
    return result


async def check_async(
    target: str | URL | AsyncEngine, *, table_name: str = DEFAULT_TABLE, schema: str | None = None
) -> bool:
    """True when the database is at the head revision this library ships."""
    return await current_async(target, table_name=table_name, schema=schema) == head()


def upgrade(
    url: str | URL | None,
    revision: str = "head",
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
    sql: bool = False,
) -> str | None:
    """Upgrade to ``revision``. With ``sql=True`` return the SQL instead (no database used)."""
    if sql:
        buffer = io.StringIO()
        cfg = make_config(url, table_name=table_name, schema=schema, output=buffer)
        command.upgrade(cfg, revision, sql=True)
        return buffer.getvalue()
    if url is None:
        raise LeaseValueError("upgrade needs a database URL unless sql=True")
    asyncio.run(upgrade_async(url, revision, table_name=table_name, schema=schema))
    return None


def downgrade(
    url: str | URL | None,
    revision: str = "base",
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
    sql: bool = False,
) -> str | None:
    """Downgrade to ``revision``. With ``sql=True`` return the SQL (offline needs ``FROM:TO``)."""
    if sql:
        buffer = io.StringIO()
        cfg = make_config(url, table_name=table_name, schema=schema, output=buffer)
        command.downgrade(cfg, revision, sql=True)
        return buffer.getvalue()
    if url is None:
        raise LeaseValueError("downgrade needs a database URL unless sql=True")
    asyncio.run(downgrade_async(url, revision, table_name=table_name, schema=schema))
    return None


def current(
    url: str | URL, *, table_name: str = DEFAULT_TABLE, schema: str | None = None
) -> str | None:
    """The revision the database is at, or None."""
    result: str | None = asyncio.run(current_async(url, table_name=table_name, schema=schema))
    return result


def check(url: str | URL, *, table_name: str = DEFAULT_TABLE, schema: str | None = None) -> bool:
    """True when the database is at head (a readiness check for deploy pipelines)."""
    result: bool = asyncio.run(check_async(url, table_name=table_name, schema=schema))
    return result
