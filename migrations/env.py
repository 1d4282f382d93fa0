"""Alembic environment for sql_lease's migrations (checkout and installed package alike).

Settings, first found wins: ``config.attributes`` (the `sql_lease.migrate` facade), ``-x``
arguments (``url``, ``table``, ``schema``), the environment (``SQL_LEASE_DATABASE_URL``,
``SQL_LEASE_TABLE``, ``SQL_LEASE_SCHEMA``). A facade may hand over an open connection in
``config.attributes["connection"]``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from alembic import context
from alembic.runtime.migration import MigrationInfo
from sqlalchemy import MetaData
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from sql_lease.migrate import MigrationNames, resolve_settings
from sql_lease.schema import lease_table

config = context.config
settings = resolve_settings(config)
names: MigrationNames = settings.names
config.attributes["sql_lease_names"] = names

target_metadata = MetaData()
lease_table(target_metadata, names.table, names.schema)
_owned = {names.table, names.sequence}


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """Autogenerate looks at the leases table only, never at the application's objects."""
    if type_ == "table":
        return name in _owned
    return True


_reached_base: list[bool] = []


def on_version_apply(*, ctx: Any, step: MigrationInfo, heads: set[str], run_args: Any) -> None:
    if not step.is_upgrade and not heads:
        _reached_base.append(True)


def _configure(**kwargs: Any) -> None:
    context.configure(
        target_metadata=target_metadata,
        version_table=names.version_table,
        version_table_schema=names.schema,
        include_object=include_object,
        include_schemas=names.schema is not None,
        on_version_apply=on_version_apply,
        compare_type=True,
        **kwargs,
    )


def _run() -> None:
    with context.begin_transaction():
        if names.schema is not None and context.get_context().dialect.name != "sqlite":
            context.execute(f'CREATE SCHEMA IF NOT EXISTS "{names.schema}"')
        context.run_migrations()
        if _reached_base:
            # `downgrade base` removes everything, the version table included.
            context.execute(f"DROP TABLE IF EXISTS {names.qualified(names.version_table)}")


def run_offline() -> None:
    _configure(url=settings.url, literal_binds=True, dialect_opts={"paramstyle": "named"})
    _run()


def _run_on(connection: Connection) -> None:
    _configure(connection=connection)
    _run()


async def _run_online_async() -> None:
    engine = create_async_engine(settings.url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_on)
            await connection.commit()
    finally:
        await engine.dispose()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
    else:
        asyncio.run(_run_online_async())


if context.is_offline_mode():
    run_offline()
else:
    run_online()
