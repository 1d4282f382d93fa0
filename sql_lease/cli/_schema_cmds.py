"""Commands on the schema: migrate, downgrade, current, check (the readiness probe)."""

from __future__ import annotations

import asyncio
from typing import Any

import click
from alembic.script import ScriptDirectory

from .. import migrate
from ._errors import CliError, ExitCode
from ._options import Settings, database_options, migrate_command
from ._output import emit_json, say
from ._session import announce

__all__ = ["COMMANDS"]

_SQL = click.option(
    "--sql", is_flag=True, help="Print the SQL instead of running it (no database is used)."
)


def _offline_url(settings: Settings) -> str | None:
    """The URL for offline SQL: only one the user named (it selects the dialect)."""
    return None if settings.target.embedded else settings.target.url


def _where(settings: Settings) -> dict[str, Any]:
    """Table, schema, bounds and pooler for `migrate`: ``--timeout`` bounds each call end to
    end."""
    seconds = settings.timeout_ms / 1000
    return {
        "table_name": settings.table,
        "schema": settings.schema,
        "timeout": seconds,
        "connect_timeout": seconds,
        "pooler": settings.pooler,
    }


def _current(settings: Settings) -> str | None:
    return asyncio.run(migrate.current_async(settings.target.url, **_where(settings)))


def _at_head(settings: Settings) -> tuple[str | None, str]:
    """(current, head) for ``check``, whose failures are labelled ``check``: one call when
    the schema is at head, a second one to name the revision when it is not."""

    async def run() -> str | None:
        if await migrate.check_async(settings.target.url, **_where(settings)):
            return migrate.head()
        return await migrate.current_async(settings.target.url, **_where(settings))

    return asyncio.run(run()), migrate.head()


def _report(settings: Settings, now_at: str | None, head: str) -> dict[str, Any]:
    """The JSON of ``current`` and ``check``: the revisions and the database (redacted)."""
    return {
        "current": now_at,
        "head": head,
        "at_head": now_at == head,
        "database": settings.target.shown,
    }


def downgrade_effect(revision: str) -> str:
    """What downgrading to ``revision`` removes, in words (no database needed)."""
    if revision == "base":
        return (
            "downgrade to base drops the leases table with every lease in it, its fence "
            "sequence and its version table"
        )
    if revision.startswith("-") and revision[1:].isdigit():  # relative: depends on the database
        return (
            f"downgrade {revision} undoes the last {revision[1:]} applied revision(s) "
            "(see `sql-lease current`)"
        )
    scripts = ScriptDirectory.from_config(migrate.make_config())
    target = scripts.get_revision(revision)  # an unknown revision: a usage error, before I/O
    undone = [
        f"{script.revision} ({(script.doc or '').strip().rstrip('.')})"
        for script in scripts.iterate_revisions("heads", revision)
        if target is None or script.revision != target.revision
    ]
    if not undone:
        return f"downgrade to {revision} removes nothing this version ships"
    return f"downgrade to {revision} undoes {', '.join(undone)} where applied"


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
        await migrate.upgrade_async(settings.target.url, revision, **_where(settings))
        return await migrate.current_async(settings.target.url, **_where(settings))

    now_at = asyncio.run(run())
    head = migrate.head()
    if settings.as_json:
        emit_json({"current": now_at, "head": head, "database": settings.target.shown})
    else:
        suffix = " (head)" if now_at == head else ""
        where = settings.target.shown
        say(f"leases schema at {now_at or 'base (not installed)'}{suffix} in {where}")
    return ExitCode.OK


@click.command("downgrade")
@click.option("--to", "revision", default="base", show_default=True, help="Target revision.")
@click.option("--yes", is_flag=True, help="Confirm the downgrade (to base it drops every lease).")
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
        raise CliError(f"{downgrade_effect(revision)}: pass --yes to confirm", ExitCode.USAGE)
    announce(settings)
    asyncio.run(migrate.downgrade_async(settings.target.url, revision, **_where(settings)))
    now_at = _current(settings)
    if settings.as_json:
        emit_json({"current": now_at, "head": migrate.head(), "database": settings.target.shown})
    else:
        say(f"leases schema at {now_at or 'base (not installed)'} in {settings.target.shown}")
    return ExitCode.OK


@click.command("current")
@database_options
def current_cmd(settings: Settings) -> int:
    """Show the revision the database is at, and the head this version ships."""
    announce(settings)
    now_at, head = _current(settings), migrate.head()
    if settings.as_json:
        emit_json(_report(settings, now_at, head))
    else:
        say(
            f"current: {now_at or 'none (not installed)'}  head: {head}  in {settings.target.shown}"
        )
    return ExitCode.OK


@click.command("check")
@database_options
def check_cmd(settings: Settings) -> int:
    """Exit 0 when the schema is at head, 4 when it is behind or missing (readiness check)."""
    announce(settings)
    now_at, head = _at_head(settings)
    if settings.as_json:
        emit_json(_report(settings, now_at, head))
    elif now_at == head:
        say(f"ok: leases schema at head ({head}) in {settings.target.shown}")
    if now_at == head:
        return ExitCode.OK
    if settings.as_json:
        return ExitCode.SCHEMA
    raise CliError(
        f"the leases schema in {settings.target.shown} is at "
        f"{now_at or 'nothing (not installed)'}, this version needs {head}: run "
        f"`{migrate_command(settings)}`",
        ExitCode.SCHEMA,
    )


COMMANDS = [migrate_cmd, downgrade_cmd, current_cmd, check_cmd]
