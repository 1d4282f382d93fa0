"""Commands on the schema: migrate, downgrade, current, check (the readiness probe)."""

from __future__ import annotations

import asyncio

import click

from .. import migrate
from ._errors import CliError, ExitCode
from ._options import Settings, database_options
from ._output import emit_json, say
from ._session import announce

__all__ = ["COMMANDS"]

_SQL = click.option(
    "--sql", is_flag=True, help="Print the SQL instead of running it (no database is used)."
)


def _offline_url(settings: Settings) -> str | None:
    """The URL for offline SQL: only one the user named (it selects the dialect)."""
    return settings.target.url if settings.target.note is None else None


def _current(settings: Settings) -> str | None:
    return asyncio.run(
        migrate.current_async(
            settings.target.url, table_name=settings.table, schema=settings.schema
        )
    )


@click.command("migrate")
@click.option("--to", "revision", default="head", show_default=True, help="Target revision.")
@_SQL
@database_options
def migrate_cmd(settings: Settings, revision: str, sql: bool) -> int:
    """Upgrade the leases schema (to head by default); idempotent."""
    if sql:
        text = migrate.upgrade(
            _offline_url(settings),
            revision,
            table_name=settings.table,
            schema=settings.schema,
            sql=True,
        )
        click.echo(text or "", nl=False)
        return ExitCode.OK
    announce(settings)

    async def run() -> str | None:
        await migrate.upgrade_async(
            settings.target.url, revision, table_name=settings.table, schema=settings.schema
        )
        return await migrate.current_async(
            settings.target.url, table_name=settings.table, schema=settings.schema
        )

    now_at = asyncio.run(run())
    head = migrate.head()
    if settings.as_json:
        emit_json({"current": now_at, "head": head})
    else:
        suffix = " (head)" if now_at == head else ""
        say(f"leases schema at {now_at or 'base (not installed)'}{suffix}")
    return ExitCode.OK


@click.command("downgrade")
@click.option("--to", "revision", default="base", show_default=True, help="Target revision.")
@click.option("--yes", is_flag=True, help="Confirm: downgrading to base drops every lease.")
@_SQL
@database_options
def downgrade_cmd(settings: Settings, revision: str, yes: bool, sql: bool) -> int:
    """Downgrade the leases schema (to base by default: drops the table)."""
    if sql:
        span = revision if ":" in revision else f"head:{revision}"
        text = migrate.downgrade(
            _offline_url(settings),
            span,
            table_name=settings.table,
            schema=settings.schema,
            sql=True,
        )
        click.echo(text or "", nl=False)
        return ExitCode.OK
    if not yes:
        raise CliError(
            "downgrade removes lease tables and the leases in them: pass --yes to confirm",
            ExitCode.USAGE,
        )
    announce(settings)
    asyncio.run(
        migrate.downgrade_async(
            settings.target.url, revision, table_name=settings.table, schema=settings.schema
        )
    )
    now_at = _current(settings)
    if settings.as_json:
        emit_json({"current": now_at, "head": migrate.head()})
    else:
        say(f"leases schema at {now_at or 'base (not installed)'}")
    return ExitCode.OK


@click.command("current")
@database_options
def current_cmd(settings: Settings) -> int:
    """Show the revision the database is at, and the head this version ships."""
    announce(settings)
    now_at, head = _current(settings), migrate.head()
    if settings.as_json:
        emit_json({"current": now_at, "head": head, "at_head": now_at == head})
    else:
        say(f"current: {now_at or 'none (not installed)'}  head: {head}")
    return ExitCode.OK


@click.command("check")
@database_options
def check_cmd(settings: Settings) -> int:
    """Exit 0 when the schema is at head, 4 when it is behind or missing (readiness check)."""
    announce(settings)
    now_at, head = _current(settings), migrate.head()
    if settings.as_json:
        emit_json({"current": now_at, "head": head, "at_head": now_at == head})
    elif now_at == head:
        say(f"ok: leases schema at head ({head})")
    if now_at == head:
        return ExitCode.OK
    if settings.as_json:
        return ExitCode.SCHEMA
    raise CliError(
        f"the leases schema is at {now_at or 'nothing (not installed)'}, this version needs "
        f"{head}: run `sql-lease migrate`",
        ExitCode.SCHEMA,
    )


COMMANDS = [migrate_cmd, downgrade_cmd, current_cmd, check_cmd]
