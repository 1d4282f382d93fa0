"""The package's shape, checked from its source (no database): no import cycles, drivers only
behind the backend seam, small modules. Every import counts, those inside functions and under
``TYPE_CHECKING`` too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sql_lease"
DRIVERS = ("asyncpg", "aiosqlite", "sqlite3", "psycopg", "psycopg_pool")
MAX_LINES = 420  # "about 400" (the bar is 450)
MAX_PRIVATE_TOP_LEVEL = 6
#: A string that starts like a statement sent to a database (messages that quote SQL as advice
#: to the user do not start with it).
SQL_TEXT = re.compile(
    r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|PRAGMA"
    r"|LISTEN|UNLISTEN|NOTIFY|CREATE|DROP|ALTER|SET|SHOW|VACUUM|LOCK|TRUNCATE|CALL|DO)\b"
)
#: Every backend package: a folder of `sql_lease/backends/` (postgres, sqlite, and any added).
BACKEND_PACKAGES = tuple(
    sorted(
        f"sql_lease.backends.{path.parent.name}"
        for path in (PACKAGE / "backends").glob("*/__init__.py")
    )
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path) -> set[str]:
    """The absolute names of every module ``name`` imports (sql_lease's and others')."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: {m for m in _imports(name, path) if m in modules and m != name}
        for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_a_package_imports_its_submodules_but_nothing_imports_in_a_circle() -> None:
    graph = _graph()
    # A package's __init__ may re-export its submodules; a submodule importing its package
    # back (for shared names) is the seam's normal shape and not a cycle of concerns.
    for name in list(graph):
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    assert _cycles(graph) == []


def test_drivers_are_imported_only_by_backend_modules() -> None:
    offenders = {
        name: sorted(d for d in DRIVERS if any(i == d or i.startswith(d + ".") for i in found))
        for name, path in _modules().items()
        if not name.startswith("sql_lease.backends.")
        for found in [_imports(name, path)]
    }
    assert {n: d for n, d in offenders.items() if d} == {}


def test_no_module_is_much_over_400_lines() -> None:
    sizes = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in _modules().items()
    }
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}


def test_at_most_six_private_modules_sit_directly_in_the_package() -> None:
    """Private modules live in wings (`_core`, `_holding`, `_sqlprovider`, `_migrating`); the
    package's top level keeps the public modules and a few private ones of their own."""
    private = sorted(
        path.name
        for path in PACKAGE.glob("_*.py")
        if not (path.name.startswith("__") and path.name.endswith("__.py"))
    )
    assert len(private) <= MAX_PRIVATE_TOP_LEVEL, private


def test_only_the_backends_package_imports_a_backend_package() -> None:
    """The rest of the package reaches a database through `sql_lease.backends`' registry."""
    importers = {
        name
        for name, path in _modules().items()
        if not name.startswith("sql_lease.backends")
        and any(
            i == b or i.startswith(b + ".") for i in _imports(name, path) for b in BACKEND_PACKAGES
        )
    }
    assert importers == set()


def test_only_the_registry_imports_a_backend_package_inside_the_seam() -> None:
    """Within `sql_lease/backends/` too: only the registry (`backends/__init__.py`) imports a
    backend package; the seam's own modules (`_urls`, `_plan`...) ask the registry, and no
    backend package imports another."""
    assert {"sql_lease.backends.postgres", "sql_lease.backends.sqlite"} <= set(BACKEND_PACKAGES)
    importers = {
        (name, b)
        for name, path in _modules().items()
        if name != "sql_lease.backends"
        for i in _imports(name, path)
        for b in BACKEND_PACKAGES
        if (i == b or i.startswith(b + ".")) and not (name == b or name.startswith(b + "."))
    }
    assert importers == set()


def test_migrations_and_alembic_ini_stay_at_the_top_level() -> None:
    root = PACKAGE.parent
    assert (root / "migrations" / "env.py").is_file()
    assert (root / "alembic.ini").is_file()
    assert not (PACKAGE / "_migrations").exists()  # the wheel maps it there, never the checkout


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _sql_texts(path: Path) -> list[str]:
    """The string literals (f-strings by their first literal part) in ``path`` that start
    like a SQL statement, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            text = head.value if isinstance(head, ast.Constant) else ""
        elif isinstance(node, ast.Constant) and id(node) not in skip:
            text = node.value
        else:
            continue
        if isinstance(text, str) and SQL_TEXT.match(text):
            found.append(f"{path.name}:{node.lineno}: {text[:40]!r}")
    return found


def test_no_statement_text_is_written_outside_the_backends() -> None:
    """Every statement a database runs comes from a backend's catalogue (batches and
    transactions included): the rest of the package is dialect-free."""
    found = [
        text
        for name, path in _modules().items()
        if not name.startswith("sql_lease.backends")
        for text in _sql_texts(path)
    ]
    assert found == []
