"""``sql-lease top`` on PostgreSQL and SQLite: its JSON, its refreshes, and in a real terminal.

The terminal test runs the command in a tmux pane of a tmux server of its own (``-L``), reads
the screen with ``capture-pane`` while another client changes the leases, and ends it with
Ctrl-C (exit 0).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import SqlLeaseProvider, migrate

from .conftest import Cli

T = TypeVar("T")


@pytest.fixture(params=["postgresql", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        return str(request.getfixturevalue("cli_url"))
    sqlite = f"sqlite:///{tmp_path / 'top.db'}"
    migrate.upgrade(sqlite)
    return sqlite


class Leases:
    """Another client of the lease table, used from synchronous tests (the in-process
    command line runs its own event loop)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, call: Callable[[SqlLeaseProvider], Awaitable[T]]) -> T:
        async def main() -> T:
            async with SqlLeaseProvider.from_url(self.url, timeout=10) as p:
                return await call(p)

        return asyncio.run(main())


@pytest.fixture
def leases(url: str) -> Leases:
    return Leases(url)


def prefix() -> str:
    return f"top{uuid.uuid4().hex[:8]}"


def test_once_as_json_shows_live_ended_and_wanted_leases(
    sql_lease: Cli, url: str, leases: Leases
) -> None:
    p = prefix()

    async def setup(provider: SqlLeaseProvider) -> int | None:
        held = await provider.acquire_lease(f"{p}:a", "w1", 60_000)
        await provider.acquire_lease(f"{p}:b", "w2", 60_000)
        await provider.release_lease(f"{p}:b", "w2")
        assert await provider.mark_wanted(f"{p}:a", 30_000) is not None  # a waiter
        return held.fence

    fence = leases(setup)
    result = sql_lease("top", "--once", "--json", "--prefix", p, "--url", url)
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    rows = {lease["key"]: lease for lease in doc["leases"]}
    assert list(rows) == [f"{p}:a", f"{p}:b"]
    a, b = rows[f"{p}:a"], rows[f"{p}:b"]
    assert (a["owner"], a["fence"], a["live"], a["wanted"]) == ("w1", fence, True, True)
    assert 0 < a["expires_in_ms"] <= 60_000 and a["wanted_until"] is not None
    assert (b["owner"], b["live"], b["wanted"]) == ("w2", False, False)
    assert b["expires_in_ms"] <= 0
    changes = {(c["key"], c["change"]) for c in doc["changes"]}
    assert {(f"{p}:a", "acquired"), (f"{p}:b", "acquired"), (f"{p}:b", "ended")} <= changes


def test_leases_that_ended_before_the_window_are_left_out(
    sql_lease: Cli, url: str, leases: Leases
) -> None:
    p = prefix()
    leases(lambda provider: provider.acquire_lease(f"{p}:old", "w1", 60_000))
    leases(lambda provider: provider.release_lease(f"{p}:old", "w1"))
    time.sleep(0.3)  # let it age past a 200 ms window
    leases(lambda provider: provider.acquire_lease(f"{p}:new", "w2", 60_000))
    result = sql_lease("top", "--once", "--json", "--prefix", p, "--recent", "200ms", "--url", url)
    assert [lease["key"] for lease in json.loads(result.out)["leases"]] == [f"{p}:new"]


def test_classes_replace_keys(sql_lease: Cli, url: str, leases: Leases) -> None:
    p = prefix()

    async def setup(provider: SqlLeaseProvider) -> None:
        for name, owner in [("import-1", "a"), ("import-2", "b"), ("mail-1", "c")]:
            await provider.acquire_lease(f"{p}/{name.split('-')[0]}:{name}", owner, 60_000)

    leases(setup)
    result = sql_lease("top", "--once", "--json", "--prefix", p, "--classes", ":", "--url", url)
    doc = json.loads(result.out)
    assert "leases" not in doc
    assert [(c["class"], c["held"], c["wanted"], c["ended"]) for c in doc["classes"]] == [
        (f"{p}/import", 2, 0, 0),
        (f"{p}/mail", 1, 0, 0),
    ]
    assert all("key" not in c and ":" not in c["class"] for c in doc["changes"])
    shown = sql_lease("top", "--once", "--prefix", p, "--classes", ":", "--url", url)
    assert f"{p}/import" in shown.out and f"{p}/import:import-1" not in shown.out


def test_bad_options_are_usage_errors(sql_lease: Cli, url: str) -> None:
    for args in (["--classes", ""], ["--interval", "0s"], ["--count", "0"]):
        result = sql_lease("top", *args, "--url", url)
        assert result.code == 2, (args, result)


def test_not_a_terminal_shows_one_view_as_a_table(sql_lease: Cli, url: str) -> None:
    result = sql_lease("top", "--prefix", prefix(), "--url", url)  # no --once: stdout is a pipe
    assert result.code == 0
    assert "no live, recent or wanted leases" in result.out and "recent changes" in result.out


def test_refreshing_json_writes_one_document_per_line_with_the_changes(
    url: str, tmp_path: Path
) -> None:
    p = prefix()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQL_LEASE_")}
    args = ["top", "--json", "--prefix", p, "--interval", "300ms", "--count", "300", "--url", url]
    with subprocess.Popen(
        [sys.executable, "-m", "sql_lease", *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**env, "XDG_STATE_HOME": str(tmp_path)},
    ) as top:
        assert top.stdout is not None
        first = json.loads(top.stdout.readline())
        assert first["leases"] == []
        cli = [sys.executable, "-m", "sql_lease"]
        subprocess.run([*cli, "acquire", f"{p}:k", "w1", "--url", url], check=True, env=env)
        seen = None
        for line in top.stdout:
            doc = json.loads(line)
            if doc["leases"]:
                seen = doc
                break
        top.kill()
    assert seen is not None
    assert [(c["key"], c["change"], c["owner"]) for c in seen["changes"]] == [
        (f"{p}:k", "acquired", "w1")
    ]


# -- in a real terminal ----------------------------------------------------------------------


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``tmux(*args)`` on a tmux server of this test's own; killed afterwards."""
    binary = shutil.which("tmux")
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("tmux is missing (apt-get install -y tmux)")
        pytest.skip("tmux is not installed")
    socket = f"sql-lease-top-{uuid.uuid4().hex[:8]}"

    def run(*args: str) -> str:
        done = subprocess.run(
            [binary, "-L", socket, *args], capture_output=True, text=True, check=True, timeout=30
        )
        return done.stdout

    yield run
    subprocess.run([binary, "-L", socket, "kill-server"], capture_output=True, check=False)


def wait_for_screen(tmux: Callable[..., str], predicate: Callable[[str], bool]) -> str:
    """The pane once ``predicate`` holds for its text with runs of whitespace as one space: a
    header longer than the pane (a long temporary path in the URL) wraps between words."""
    deadline = time.monotonic() + 30
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-t", "top")
        if predicate(" ".join(screen.split())):
            return screen
        time.sleep(0.1)
    raise AssertionError(f"the screen never matched; it shows:\n{screen}")


def test_in_a_terminal_it_refreshes_in_place_and_ctrl_c_ends_it(
    url: str, leases: Leases, tmux: Callable[..., str], tmp_path: Path
) -> None:
    p = prefix()
    leases(lambda provider: provider.acquire_lease(f"{p}:first", "w1", 60_000))
    top = ["top", "--prefix", p, "--interval", "200ms", "--url", url]
    command = shlex.join([sys.executable, "-m", "sql_lease", *top])
    env = f"env -u SQL_LEASE_DATABASE_URL XDG_STATE_HOME={shlex.quote(str(tmp_path))}"
    # top's exit status goes to a file: tmux 3.3 sometimes never reaps a pane's process (a
    # zombie for 30 s, #{pane_dead_status} empty). The shell waits for top and then writes $?;
    # `trap : INT` keeps the shell itself alive through the Ctrl-C (dash, tmux's /bin/sh when
    # SHELL is unset, would die of it), and top gets the default SIGINT, as a trap resets on exec.
    status = tmp_path / "status"
    script = f"trap : INT; {env} {command}; echo $? > {shlex.quote(str(status))}"
    tmux("new-session", "-d", "-s", "top", "-x", "150", "-y", "40", script)
    tmux("set-option", "-t", "top", "remain-on-exit", "on")
    first = wait_for_screen(tmux, lambda s: f"{p}:first" in s and "1 live" in s)
    assert "w1" in first and "recent changes" in first
    leases(lambda provider: provider.acquire_lease(f"{p}:second", "w2", 60_000))
    second = wait_for_screen(tmux, lambda s: f"{p}:second" in s and "2 live" in s)
    assert second.count("sql-lease top") == 1  # redrawn in place, not appended
    leases(lambda provider: provider.release_lease(f"{p}:first", "w1"))
    wait_for_screen(tmux, lambda s: "released" in s and "1 live" in s)
    tmux("send-keys", "-t", "top", "C-c")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not status.exists():
        time.sleep(0.1)
    time.sleep(0.1)  # the shell's write of one short line
    assert status.exists() and status.read_text().strip() == "0"


def rename_table(url: str, old: str, new: str) -> None:
    """Another client renames the lease table (the view's reads fail until it is back)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute(f'ALTER TABLE "{old}" RENAME TO "{new}"')
        return
    u = make_url(url)
    with psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    ) as pg:
        pg.execute(f'ALTER TABLE "{old}" RENAME TO "{new}"'.encode())


def test_in_a_terminal_a_failing_read_is_shown_and_the_view_recovers(
    url: str, leases: Leases, tmux: Callable[..., str], tmp_path: Path
) -> None:
    p = prefix()
    leases(lambda provider: provider.acquire_lease(f"{p}:kept", "w1", 60_000))
    top = ["top", "--prefix", p, "--interval", "200ms", "--timeout", "2s", "--url", url]
    command = shlex.join([sys.executable, "-m", "sql_lease", *top])
    env = f"env -u SQL_LEASE_DATABASE_URL XDG_STATE_HOME={shlex.quote(str(tmp_path))}"
    tmux("new-session", "-d", "-s", "top", "-x", "150", "-y", "40", f"{env} {command}")
    wait_for_screen(tmux, lambda s: f"{p}:kept" in s)
    rename_table(url, "leases", "leases_away")
    try:
        failing = wait_for_screen(tmux, lambda s: "retrying" in s)
        assert f"{p}:kept" in failing  # the last rows stay
    finally:
        rename_table(url, "leases_away", "leases")
    wait_for_screen(tmux, lambda s: "retrying" not in s and f"{p}:kept" in s)


def test_a_counting_lease_shows_its_holders_and_an_ended_one_nothing(
    sql_lease: Cli, url: str, leases: Leases
) -> None:
    p = prefix()

    async def setup(provider: SqlLeaseProvider) -> None:
        for owner in ("w1", "w2"):
            assert await provider.acquire_lease(f"{p}:pool", owner, 60_000, limit=3) is not None
        await provider.acquire_lease(f"{p}:held", "w3", 60_000)
        # A counting row whose every grant ended: nobody holds it, nothing to show.
        assert await provider.acquire_lease(f"{p}:done", "w4", 60_000, limit=2) is not None
        await provider.release_lease(f"{p}:done", "w4")

    leases(setup)
    result = sql_lease("top", "--once", "--json", "--prefix", p, "--url", url)
    assert result.code == 0, result.err
    shown = sorted((lease["key"], lease["owner"]) for lease in json.loads(result.out)["leases"])
    assert shown == [(f"{p}:held", "w3"), (f"{p}:pool", "w1"), (f"{p}:pool", "w2")]
