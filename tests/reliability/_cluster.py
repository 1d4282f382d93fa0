"""A throwaway PostgreSQL cluster the tests may crash and restart (never the shared server).

It lives in a temporary directory, listens on a free loopback port, requires passwords over TCP
(SCRAM), and runs as the ``postgres`` system user when the tests run as root (PostgreSQL refuses
to run as root). Server binaries come from ``SQL_LEASE_PG_BIN``, ``pg_config --bindir``, or
``/usr/lib/postgresql/<version>/bin``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg
from sqlalchemy.engine import URL

ADMIN_PASSWORD = "adm'in pa%ss@wörd"  # needs quoting in a URL


def find_bindir() -> Path | None:
    candidates = [os.environ.get("SQL_LEASE_PG_BIN", "")]
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.base = Path(tempfile.mkdtemp(prefix="sql_lease_cluster_"))
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(self.base, pw.pw_uid, pw.pw_gid)
        self.restarts = 0
        self.extra_options = ""  # more server options for `start` (e.g. TLS settings)

    def give_to_server(self, path: Path, mode: int = 0o600) -> None:
        """Make ``path`` readable by the server process only (key files must be 0600)."""
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(path, pw.pw_uid, pw.pw_gid)
        path.chmod(mode)

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        pwfile = self.base / "pwfile"
        pwfile.write_text(ADMIN_PASSWORD + "\n", encoding="utf-8")
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(pwfile, pw.pw_uid, pw.pw_gid)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            f"--pwfile={pwfile}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--no-sync",
            "-E",
            "UTF8",
        )
        pwfile.unlink()

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=60 -c shared_buffers=16MB " + self.extra_options
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "immediate") -> None:
        self.stop(mode)
        self.start()
        self.restarts += 1

    def url(self, database: str = "postgres", user: str = "postgres", password: str | None = None):
        return URL.create(
            "postgresql",
            username=user,
            password=ADMIN_PASSWORD if password is None and user == "postgres" else password,
            host="127.0.0.1",
            port=self.port,
            database=database,
        )

    def admin(self, database: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            password=ADMIN_PASSWORD,
            dbname=database,
            autocommit=True,
            connect_timeout=10,
        )

    def create_database(self, name: str) -> str:
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name).render_as_string(hide_password=False)

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)
