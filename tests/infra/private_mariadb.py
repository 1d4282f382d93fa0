"""A private MariaDB server for tests that stop and start it: a temporary data directory
(``mariadb-install-db``), its own loopback port and socket, never the shared server at 3306.

It runs as root with ``--user=root`` (the tests' user) and ``--skip-grant-tables`` (the only
client is the test), with a small buffer pool so it starts in about a second. `restart` stops it
with SIGTERM (a clean shutdown: open connections are cut) and starts it again on the same port
and data, as an operator's restart would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pymysql

from .pgbouncer import free_port

__all__ = ["PrivateMariadb", "find_mariadbd"]


def find_mariadbd() -> tuple[str, str] | None:
    """``(mariadbd, mariadb-install-db)``, or None when either is missing."""
    server = shutil.which("mariadbd") or shutil.which("mariadbd", path="/usr/sbin:/usr/bin")
    install = shutil.which("mariadb-install-db") or shutil.which(
        "mariadb-install-db", path="/usr/bin:/usr/sbin"
    )
    return (server, install) if server and install else None


class PrivateMariadb:
    """``with PrivateMariadb() as server:`` a running server; ``server.url(db)``."""

    def __init__(self) -> None:
        found = find_mariadbd()
        if found is None:
            raise RuntimeError("mariadbd or mariadb-install-db is not installed")
        self._server, self._install = found
        self._dir = Path(tempfile.mkdtemp(prefix="sql_lease_mariadb_"))
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def _data(self) -> Path:
        return self._dir / "data"

    def url(self, database: str) -> str:
        return f"mariadb://root@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str | None = None) -> pymysql.Connection:
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            database=database,
            autocommit=True,
            connect_timeout=2,
        )

    def __enter__(self) -> PrivateMariadb:
        subprocess.run(
            [
                self._install,
                "--no-defaults",
                f"--datadir={self._data}",
                "--user=root",
                "--skip-test-db",
                "--auth-root-authentication-method=normal",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def start(self) -> None:
        log = (self._dir / "server.log").open("ab")
        self._process = subprocess.Popen(
            [
                self._server,
                "--no-defaults",
                f"--datadir={self._data}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--socket={self._dir / 'mariadb.sock'}",
                f"--pid-file={self._dir / 'mariadb.pid'}",
                "--user=root",
                "--skip-grant-tables",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=32M",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 60
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"mariadbd exited: {self.log_tail()}")
            try:
                self.connect().close()
                return
            except pymysql.err.MySQLError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self) -> str:
        path = self._dir / "server.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
