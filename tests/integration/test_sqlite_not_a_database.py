"""A SQLite file that is not a database is a connection failure everywhere it shows.

SQLAlchemy wraps the sqlite3 error it meets while setting a connection up; the SQLite
backend's classifier looks through the wrapper (it used to say "database failure", exit 5).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sql_lease import LeaseConnectionError, SqlLeaseProvider

from ..cli.conftest import run_cli


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    return path


def _content(path: Path) -> bytes:
    return path.read_bytes()


async def test_the_provider_reports_a_connection_failure(notes: Path) -> None:
    before = _content(notes)
    provider = SqlLeaseProvider.from_url(f"sqlite:///{notes}")
    try:
        with pytest.raises(LeaseConnectionError, match="not a database") as info:
            await provider.acquire_lease("k", "a", 10_000)
    finally:
        await provider.aclose()
    assert not info.value.outcome_unknown
    assert _content(notes) == before  # left as it was


@pytest.mark.parametrize("command", [("check",), ("current",), ("get", "k")])
def test_the_cli_exits_3_with_one_line(
    notes: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    # `check` and `current` met the error wrapped by SQLAlchemy: they used to exit 5.
    result = run_cli(*command, "--url", f"sqlite:///{notes}", state=str(tmp_path))
    assert result.code == 3, result.err
    assert len(result.err.splitlines()) == 1 and "not a database" in result.err
