"""A real PgBouncer process in front of a PostgreSQL server, on a free loopback port.

Each `PgBouncer` writes its own ini and userlist into a temporary directory, runs the Debian
``pgbouncer`` binary in the foreground (as the ``postgres`` system user when the tests run as
root: PgBouncer refuses to run as root), waits until it answers a query, and stops cleanly.
Authentication is ``trust`` on both sides: the pooler stands in front of the shared test server
(127.0.0.1:5432, trust) or a throwaway cluster with trust over TCP.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

import psycopg

PoolMode = Literal["transaction", "session", "statement"]


def find_pgbouncer() -> str | None:
    """The pgbouncer binary (``SQL_LEASE_PGBOUNCER`` or on PATH, /usr/sbin included)."""
    given = os.environ.get("SQL_LEASE_PGBOUNCER")
    if given:
        return given
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    """One PgBouncer process; `start` and `stop` (also a context manager).

    ``ignore_startup_parameters``: names the pooler accepts and drops (by default PgBouncer
    refuses any startup parameter it does not track, e.g. ``statement_timeout``).
    ``extra``: more ``[pgbouncer]`` settings; ``database_options``: more ``[databases]``
    connection options for the ``*`` entry (e.g. ``connect_query``).
    """

    def __init__(
        self,
        *,
        server_host: str = "127.0.0.1",
        server_port: int = 5432,
        pool_mode: PoolMode = "transaction",
        pool_size: int = 10,
        ignore_startup_parameters: tuple[str, ...] = (),
        extra: Mapping[str, str] | None = None,
        database_options: Mapping[str, str] | None = None,
        binary: str | None = None,
    ) -> None:
        found = binary or find_pgbouncer()
        if found is None:
            raise RuntimeError("pgbouncer not found: apt-get install -y pgbouncer")
        self.binary = found
        self.server = (server_host, server_port)
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.ignore_startup_parameters = ignore_startup_parameters
        self.extra = dict(extra or {})
        self.database_options = dict(database_options or {})
        self.base = Path(tempfile.mkdtemp(prefix="sql_lease_pgbouncer_"))
        self.ini = self.base / "pgbouncer.ini"
        self.log = self.base / "pgbouncer.log"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._as_postgres = os.geteuid() == 0

    def _write_config(self) -> None:
        host, port = self.server
        db_opts = " ".join(
            [f"host={host}", f"port={port}"]
            + [f"{k}={v}" for k, v in self.database_options.items()]
        )
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(self.base / "userlist.txt"),
            "pool_mode": self.pool_mode,
            "default_pool_size": str(self.pool_size),
            "min_pool_size": "0",
            "reserve_pool_size": "0",
            "max_client_conn": "500",
            "admin_users": "postgres",
            "logfile": str(self.log),
            "pidfile": str(self.base / "pgbouncer.pid"),
            "server_lifetime": "3600",
            "server_idle_timeout": "60",
            "log_connections": "0",
            "log_disconnections": "0",
        }
        if self.ignore_startup_parameters:
            settings["ignore_startup_parameters"] = ",".join(self.ignore_startup_parameters)
        settings.update(self.extra)
        lines = ["[databases]", f"* = {db_opts}", "", "[pgbouncer]"]
        lines += [f"{k} = {v}" for k, v in settings.items()]
        self.ini.write_text("\n".join(lines) + "\n", encoding="utf-8")
        (self.base / "userlist.txt").write_text('"postgres" ""\n', encoding="utf-8")
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            for p in (self.base, self.ini, self.base / "userlist.txt"):
                os.chown(p, pw.pw_uid, pw.pw_gid)

    def start(self, timeout: float = 15.0) -> None:
        """Start the process and wait until a query through it succeeds."""
        self.port = free_port()
        self._write_config()
        kwargs: dict[str, object] = {}
        if self._as_postgres:
            kwargs = {"user": "postgres", "group": "postgres", "extra_groups": []}
        self._proc = subprocess.Popen(
            [self.binary, str(self.ini)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self.base,
            **kwargs,  # type: ignore[call-overload]
        )
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited ({self._proc.returncode}): {self.log_text()}")
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.Error as exc:
                last = exc
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"pgbouncer not ready after {timeout}s ({last}): {self.log_text()}")

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL) and remove its directory."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def dsn(self, database: str = "postgres", user: str = "postgres") -> str:
        """A libpq DSN through the pooler."""
        return f"host=127.0.0.1 port={self.port} dbname={database} user={user}"

    def url(self, database: str = "postgres", user: str = "postgres") -> str:
        """A ``postgresql://`` URL through the pooler."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def admin(self, command: str) -> list[tuple[object, ...]]:
        """Run a console command (``SHOW POOLS``, ``RECONNECT``...) on the admin database."""
        with psycopg.connect(
            self.dsn("pgbouncer"), autocommit=True, prepare_threshold=None
        ) as conn:
            cur = conn.execute(command.encode(), prepare=False)
            return list(cur.fetchall()) if cur.description else []

    def log_text(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(encoding="utf-8", errors="replace")[-2000:]
        return ""


@contextlib.contextmanager
def running(**kwargs: object) -> Iterator[PgBouncer]:
    """``with running(pool_mode="session") as bouncer:`` a started `PgBouncer`."""
    bouncer = PgBouncer(**kwargs)  # type: ignore[arg-type]
    bouncer.start()
    try:
        yield bouncer
    finally:
        bouncer.stop()
