"""The documentation's code examples run, against real servers, so a stale example fails CI.

A fenced ``python`` block in ``docs/**/*.md`` or ``README.md`` that follows the line
``<!-- doctest: run -->`` is a complete program. Each runs in its own interpreter, in an empty
folder, on a fresh empty PostgreSQL database: the placeholder URL the pages use
(``postgresql://app:secret@db.internal:5432/app``) is replaced by that database's URL, which is
also ``SQL_LEASE_DATABASE_URL``. A relative ``sqlite:///`` file lands in the empty folder.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- doctest: run -->"
PLACEHOLDER = "postgresql://app:secret@db.internal:5432/app"
_FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def runnable_blocks() -> list[tuple[str, str]]:
    """(``page:line``, source) of every block marked runnable."""
    found = []
    for page in _pages():
        if "_build" in page.parts:
            continue
        text = page.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            if before.strip() == MARKER:
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return found


BLOCKS = runnable_blocks()


def test_the_pages_have_runnable_examples_and_every_marker_is_on_a_python_block() -> None:
    markers = sum(
        line.strip() == MARKER
        for page in _pages()
        if "_build" not in page.parts
        for line in page.read_text(encoding="utf-8").splitlines()
    )
    blocks = runnable_blocks()
    assert len(blocks) >= 6, [where for where, _ in blocks]
    assert markers == len(blocks), "a doctest marker is not right before a ```python block"


@pytest.mark.parametrize(("where", "source"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_the_example_runs(
    where: str, source: str, make_database: Callable[[], str], tmp_path: Path
) -> None:
    url = make_database()
    program = tmp_path / "example.py"
    program.write_text(source.replace(PLACEHOLDER, url), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(program)],
        cwd=tmp_path,
        env={**os.environ, "SQL_LEASE_DATABASE_URL": url, "PYTHONWARNINGS": "error"},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, f"{where} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
