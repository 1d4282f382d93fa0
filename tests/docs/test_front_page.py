"""The README stays a front page: short, its links into docs/ resolve, its test command is CI's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(README.splitlines()) <= 250


def test_every_relative_link_of_the_readme_names_a_file_that_exists() -> None:
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README)
    assert any(t.startswith("docs/") for t in targets)
    assert [t for t in targets if not (ROOT / t).exists()] == []


def test_ci_runs_the_readmes_test_command_and_builds_the_docs() -> None:
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8")
    assert "scripts/test" in README and re.search(r"^scripts/test\b", ci, re.M)
    assert re.search(r"^scripts/docs\b", ci, re.M)
    assert re.search(r"^scripts/package-check", ci, re.M)


def test_no_install_line_sends_users_to_a_registry_that_has_nothing_yet() -> None:
    """Until a release, `pip install 'sql-lease[...]'` and `npm install @sql-lease/mastra` find
    nothing: every install line names the git route or a packed tarball instead, or its
    paragraph says it is for after the release."""
    pages = [ROOT / "README.md", ROOT / "integrations/mastra/README.md"]
    pages += [p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts]
    registry_line = re.compile(
        r"pip install ['\"]?sql-lease\[[^\]]*\](?!\s+@)|npm install @sql-lease/mastra"
    )
    bad = [
        f"{page.relative_to(ROOT)}: {paragraph.strip()[:200]}"
        for page in pages
        for paragraph in re.split(r"\n\s*\n", page.read_text(encoding="utf-8"))
        if registry_line.search(paragraph)
        and not re.search(r"published|once|yet|until", paragraph, re.I)
    ]
    assert bad == []
