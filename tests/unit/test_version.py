"""One version for both packages: sql_lease.__version__ (which the wheel reads) and npm's."""

from __future__ import annotations

import json
from pathlib import Path

import sql_lease

ROOT = Path(__file__).resolve().parents[2]


def test_the_typescript_package_has_the_python_packages_version() -> None:
    package = json.loads((ROOT / "integrations/mastra/package.json").read_text(encoding="utf-8"))
    assert package["version"] == sql_lease.__version__


def test_pyproject_reads_the_version_from_the_package_instead_of_repeating_it() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dynamic = ["version"]' in text and '\nversion = "' not in text
