"""Alembic environment for sql_lease's migrations (checkout and installed package alike).

Settings, first found wins: ``config.attributes`` (the `sql_lease.migrate` facade), ``-x``
arguments (``url``, ``table``, ``schema``), the environment (``SQL_LEASE_DATABASE_URL``,
``SQL_LEASE_TABLE``, ``SQL_LEASE_SCHEMA``). A facade may hand over an open connection in
``config.attributes["connection"]``.

Run by the ``alembic`` command (an ini file), it logs as that file says and reports failures
as one line (Alembic's ``FAILED: ...``); the facade configures no logging.
"""

from __future__ import annotations

from logging.config import fileConfig
from typing import Any

from alembic import context
from alembic.runtime.migration import MigrationInfo
from alembic.util import CommandError
from sqlalchemy import MetaData, text
from sqlalchemy.engine import Connection

from sql_lease.errors import LeaseError
from sql_lease.migrate import MigrationNames, resolve_settings, run_env_online
from sql_lease.schema import lease_table

config = context.config
if config.config_file_name is not None and "sql_lease_names" not in config.attributes:
    fileConfig(config.config_file_name, disable_existing_loggers=False)
try:
    settings = resolve_settings(config)
except LeaseError as exc:
    raise CommandError(str(exc)) from None
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


def _schema_missing(schema: str) -> bool:
    """Offline, assume so; online, look: ``CREATE SCHEMA IF NOT EXISTS`` needs CREATE on the
    database even when the schema exists, which a schema owner on a managed service lacks."""
    if context.is_offline_mode():
        return True
    found = context.get_bind().execute(
        text("SELECT 1 FROM pg_namespace WHERE nspname = :name"), {"name": schema}
    )
    return found.first() is None


def _run() -> None:
    with context.begin_transaction():
        schema = names.schema
        postgres = context.get_context().dialect.name != "sqlite"
        if schema is not None and postgres and _schema_missing(schema):
            context.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        context.run_migrations()
        if _reached_base:
            # `downgrade base` removes everything, the version table included.
            dialect = context.get_context().dialect
            table = names.qualified(names.version_table)
            if dialect.name == "mariadb":  # no double-quoted names in its default sql_mode
                table = dialect.identifier_preparer.quote(names.version_table)
            context.execute(f"DROP TABLE IF EXISTS {table}")


def run_offline() -> None:
    _configure(url=settings.url, literal_binds=True, dialect_opts={"paramstyle": "named"})
    _run()


def _run_on(connection: Connection) -> None:
    _configure(connection=connection)
    _run()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)  # the facade's, in the facade's transaction
    else:
        run_env_online(config, settings.url, _run_on)


if context.is_offline_mode():
    run_offline()
else:
    run_online()
