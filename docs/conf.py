"""Sphinx configuration of the sql_lease documentation (built by scripts/docs)."""

from __future__ import annotations

import logging
from pathlib import Path

import sql_lease
from sql_lease import migrate

project = "sql_lease"
author = "sql_lease developers"
copyright = "2026, sql_lease developers"
release = sql_lease.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_click",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = f"sql_lease {release}"

# Pages are MyST Markdown; headings up to ### get anchors that links between pages use.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
# The docs' code examples run in the test suite (tests/docs); nothing is executed here.

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
# Nitpicky (-n) but offline: types from other libraries and the standard library have no
# inventory here (intersphinx would need the network), so references to them are not links.
nitpick_ignore_regex = [
    ("py:.*", r"(sqlalchemy|asyncio|datetime|collections|typing|enum|types|psycopg|asyncpg)\b.*"),
    ("py:.*", r"(int|str|bool|float|bytes|None|object|Exception|BaseException|Any|Self)"),
    ("py:.*", r"(TypeError|ValueError|RuntimeError|TimeoutError|ConnectionError|LookupError)"),
    ("py:.*", r"(T|P|R|_T|Callable|Awaitable|Coroutine|Iterator|Sequence|Mapping|Iterable)"),
    ("py:.*", r"(alembic|opentelemetry)\b.*"),
    # Private bases and helpers the public classes name in their signatures (not documented).
    ("py:.*", r"sql_lease(\.\w+)*\._\w+.*"),
    ("py:.*", r"sql_lease\.coordinator\.S|Duration|HoldingProvider|Exclusive"),
]
linkcheck_ignore = [r"https?://.*"]

# Importing alembic.autogenerate (for autodoc) logs its plugins at INFO; keep the build quiet.
logging.getLogger("alembic").setLevel(logging.WARNING)

# The schema reference shows the DDL the migrations emit (offline, no database), written at each
# build so that it can never drift from them.
_GENERATED = Path(__file__).parent / "_generated"
_GENERATED.mkdir(exist_ok=True)
(_GENERATED / "upgrade-postgresql.sql").write_text(str(migrate.upgrade(None, sql=True)))
exclude_patterns.append("_generated")
