"""``sql-lease sql``: the PostgreSQL statement catalogue, for clients in other languages."""

from __future__ import annotations

import json

import click

from .._export import export_catalogue
from ._errors import ExitCode

__all__ = ["sql_cmd"]


@click.command("sql")
@click.option("--json", "as_json", is_flag=True, help="The catalogue as one JSON document.")
def sql_cmd(as_json: bool) -> int:
    """Print the statements this version sends, with {table}-style placeholders (no database).

    --json prints the whole catalogue as data: SQL, parameters, result columns, naming rules
    and limits (the TypeScript client `@sql-lease/mastra` ships a copy of it).
    """
    catalogue = export_catalogue()
    if as_json:
        click.echo(json.dumps(catalogue, indent=2, sort_keys=True))
        return ExitCode.OK
    statements = catalogue["statements"]
    assert isinstance(statements, dict)
    for name, statement in statements.items():
        params = ", ".join(
            f"${i} {p['name']} {p['type']}" for i, p in enumerate(statement["params"], start=1)
        )
        click.echo(f"-- {name}({params})\n{statement['sql']};\n")
    return ExitCode.OK
