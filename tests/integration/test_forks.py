"""Providers across a fork: the child is refused at once, the parent is never affected.

Before, on the async API the child got an opaque "different loop" error and the parent's next
call hung 5 s and timed out (the child's failed call terminated the parent's connection); on
the sync API the child's first acquire went over the parent's socket. Each case runs a real
program (`_fork_workers`) that forks with `multiprocessing` (fork start method) or `os.fork`
(the child ending with ``os._exit``, or with ``sys.exit`` so that the interpreter's
finalization runs in it), on PostgreSQL and SQLite, async and sync.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sql_lease import migrate

ROOT = Path(__file__).resolve().parents[2]
PARENT_BOUND_S = 0.5


@pytest.fixture(scope="module")
def pg_url(make_database: Callable[[], str]) -> str:
    url = make_database()
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('forks') / 'leases.db'}"
    migrate.upgrade(url)
    return url


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
@pytest.mark.parametrize("how", ["mp", "fork", "fork-exit"])
@pytest.mark.parametrize("api", ["async", "sync"])
def test_the_child_is_refused_at_once_and_the_parent_is_not_affected(
    api: str, how: str, backend: str, pg_url: str, sqlite_url: str
) -> None:
    url = pg_url if backend == "postgresql" else sqlite_url
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration._fork_workers", api, how, url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    refused, own = report["child"]
    kind, seconds, message = refused.split(" ", 2)
    assert kind == "LeaseForkedError"
    assert float(seconds) < PARENT_BOUND_S
    assert "create the provider after the fork" in message
    assert own == "own True"  # a provider made in the child works
    assert max(report["parent_s"]) < PARENT_BOUND_S, report["parent_s"]
    assert "Traceback" not in done.stderr
