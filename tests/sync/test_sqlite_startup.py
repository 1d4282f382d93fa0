"""The sync provider's SQLite connections follow the backend's one start-up rule.

No ``PRAGMA journal_mode = WAL`` per connection (the instant "database is locked" of issue 10:
a file still in rollback mode is switched by retrying while others read it), and no database
file is ever created by a provider.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from sql_lease import LeaseConnectionError, LeaseSchemaError, migrate
from sql_lease.backends.sqlite import startup
from sql_lease.sync import SqlLeaseProvider


def _migrated(path: Path, journal: str) -> Path:
    migrate.upgrade(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    try:
        assert conn.execute(f"PRAGMA journal_mode = {journal}").fetchone()[0] == journal.lower()
    finally:
        conn.close()
    return path


def _journal_mode(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


def test_a_connection_never_sets_the_journal_mode_itself() -> None:
    assert not any("journal_mode" in p for p in startup.pragmas(5.0, True))
    assert startup.pragmas(5.0, False)[-1] == "PRAGMA synchronous = NORMAL"


def test_a_rollback_mode_file_written_by_another_process_is_switched_without_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _migrated(tmp_path / "old.db", "DELETE")
    # Another process in a write transaction: the switch to WAL (which needs an exclusive
    # lock after reading the file) cannot wait for it, so SQLite refuses it at once.
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    retried: list[float] = []
    pause_after = startup._WalRetry.pause_after

    def release_reader_then_pause(self: startup._WalRetry, exc: sqlite3.Error) -> float:
        # The first switch failed at once because of the writer (the old rule gave up here
        # with "database is locked"); the writer then finishes, and the retry must succeed.
        retried.append(1.0)
        if writer.in_transaction:
            writer.execute("COMMIT")
        return pause_after(self, exc)

    monkeypatch.setattr(startup._WalRetry, "pause_after", release_reader_then_pause)
    provider = SqlLeaseProvider.from_url(f"sqlite:///{path}", timeout=30)
    try:
        assert provider.acquire_lease("k", "a", 30_000).acquired
    finally:
        provider.close()
        writer.close()
    assert retried, "the switch never met the reader's lock"
    assert _journal_mode(path) == "wal"


def test_a_wal_file_is_used_as_it_is(tmp_path: Path) -> None:
    path = _migrated(tmp_path / "wal.db", "WAL")
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM leases").fetchall()
    provider = SqlLeaseProvider.from_url(f"sqlite:///{path}", timeout=30)
    try:
        assert provider.acquire_lease("k", "a", 30_000).acquired
        assert provider.get_lease_owner("k") == "a"
    finally:
        provider.close()
        reader.close()


def test_a_missing_file_says_to_run_the_migrations_and_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    provider = SqlLeaseProvider.from_url(f"sqlite:///{path}")
    try:
        with pytest.raises(LeaseSchemaError) as info:
            provider.acquire_lease("k", "a", 10_000)
    finally:
        provider.close()
    assert "does not exist" in str(info.value) and "migrat" in str(info.value)
    assert os.listdir(tmp_path) == []


def test_a_file_that_is_not_a_database_is_a_connection_failure(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    provider = SqlLeaseProvider.from_url(f"sqlite:///{path}")
    try:
        with pytest.raises(LeaseConnectionError, match="not a database"):
            provider.get_lease_owner("k")
    finally:
        provider.close()
