"""A throwaway primary and streaming standby on free loopback ports (never the shared server).

`Replicated` runs ``initdb`` for the primary, ``pg_basebackup -R`` for the standby (as the
``postgres`` system user when the tests run as root), with synchronous or asynchronous
replication, and offers the failover steps: `crash_primary` (``pg_ctl stop -m immediate``),
`promote`, and a replication link the tests can stall and cut (`WalLink`): the standby streams
through it, so stalling it lets the standby fall behind while the primary keeps acknowledging
asynchronous commits, and cutting it before the crash loses what was not delivered (what a host
crash or a partition does). Authentication is ``trust`` over TCP: these clusters hold no data.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import selectors
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from ..reliability._cluster import find_bindir, free_port

__all__ = ["Node", "Replicated", "WalLink", "find_bindir"]


class WalLink:
    """A loopback TCP forwarder in its own thread: `stall` stops delivering, `cut` drops all.

    While stalled, nothing is read from either side (the kernel buffers fill up and the sender
    blocks, as on a dead link). `cut` closes every connection, discarding what was not delivered,
    and refuses new ones: the standby never sees the bytes the stall held back. `hold_replies`
    delivers the WAL but not the standby's replies: a synchronous commit then reaches the
    standby while the primary goes on waiting for its confirmation.
    """

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port = int(self._listener.getsockname()[1])
        self._open = threading.Event()
        self._open.set()
        self._paused = threading.Event()  # set by the forwarder once it stopped delivering
        self._stop = threading.Event()
        self._replies_held = threading.Event()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._thread = threading.Thread(target=self._run, name="wal-link", daemon=True)
        self._thread.start()

    def stall(self) -> None:
        """Stop delivering; returns once the forwarder has stopped (nothing sent afterwards
        gets through until `resume`)."""
        self._paused.clear()
        self._open.clear()
        if not self._paused.wait(5):
            raise RuntimeError("the WAL link did not stall")

    def resume(self) -> None:
        self._open.set()
        self._replies_held.clear()

    def hold_replies(self) -> None:
        """Stop delivering what the standby sends (its flush confirmations), WAL still flows."""
        self._replies_held.set()

    def cut(self) -> None:
        """Close everything for good (the standby's walreceiver then retries in vain)."""
        self._stop.set()  # not reopened: a stalled link delivers nothing more
        self._thread.join(timeout=5)

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, None)
        peers: dict[socket.socket, socket.socket] = {}
        standby_side: set[socket.socket] = set()
        try:
            while not self._stop.is_set():
                if not self._open.is_set():
                    self._paused.set()
                    self._open.wait(0.05)
                    continue
                held = False
                for key, _ in sel.select(0.05):
                    if not self._open.is_set() or self._stop.is_set():
                        break  # stalled or cut while selecting: leave the rest unread
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock in standby_side and self._replies_held.is_set():
                        held = True  # left unread: the standby's replies wait in the kernel
                        continue
                    if sock is self._listener:
                        with contextlib.suppress(BlockingIOError):
                            client, _ = self._listener.accept()
                            try:
                                upstream = socket.create_connection(self.target, timeout=5)
                            except OSError:
                                client.close()
                                continue
                            for s in (client, upstream):
                                s.setblocking(True)
                                s.settimeout(5)
                            peers[client], peers[upstream] = upstream, client
                            standby_side.add(client)
                            sel.register(client, selectors.EVENT_READ, None)
                            sel.register(upstream, selectors.EVENT_READ, None)
                        continue
                    other = peers.get(sock)
                    if other is None:
                        continue
                    try:
                        data = sock.recv(65536)
                        if data:
                            other.sendall(data)
                            continue
                    except OSError:
                        pass
                    for s in (sock, other):
                        with contextlib.suppress(KeyError, ValueError):
                            sel.unregister(s)
                        peers.pop(s, None)
                        standby_side.discard(s)
                        s.close()
                if held:
                    time.sleep(0.005)  # select returns at once while replies wait unread
        finally:
            for s in list(peers):
                s.close()
            self._listener.close()
            sel.close()


class Node:
    """One PostgreSQL server (data directory, port, log) driven through ``pg_ctl``."""

    def __init__(self, bindir: Path, base: Path, name: str) -> None:
        self.bindir = bindir
        self.name = name
        self.data = base / name
        self.log = base / f"{name}.log"
        self.socket_dir = base
        self.port = free_port()
        self.running = False

    def run(self, *args: str, timeout: float = 60) -> str:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if out.returncode:
            raise RuntimeError(f"{args[0]} failed ({out.returncode}): {out.stderr.strip()[-800:]}")
        return out.stdout

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 "
            "-c max_connections=80 -c shared_buffers=16MB -c fsync=off "
            "-c wal_sender_timeout=5s -c wal_receiver_status_interval=1s "
            f"-c cluster_name={self.name}"
        )
        self.run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        if self.running:
            self.running = False
            self.run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def connect(self, database: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            dbname=database,
            autocommit=True,
            connect_timeout=10,
        )

    def query(self, sql: str, database: str = "postgres") -> list[tuple[object, ...]]:
        with self.connect(database) as conn:
            cur = conn.execute(sql.encode())
            return list(cur.fetchall()) if cur.description else []


class Replicated:
    """A primary and one streaming standby; see the module docstring.

    ``synchronous``: the primary waits for the standby's flush before acknowledging a commit
    (``synchronous_standby_names``); otherwise replication is asynchronous. The standby streams
    through `link` (a `WalLink`) so the tests can lag it.
    """

    def __init__(self, *, synchronous: bool, bindir: Path | None = None) -> None:
        found = bindir or find_bindir()
        if found is None:
            raise RuntimeError("PostgreSQL server binaries not found: set SQL_LEASE_PG_BIN")
        self.synchronous = synchronous
        self.base = Path(tempfile.mkdtemp(prefix="sql_lease_replicated_"))
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.base, pw.pw_uid, pw.pw_gid)
        self.primary = Node(found, self.base, "primary")
        self.standby = Node(found, self.base, "standby")
        self.link: WalLink | None = None

    def start(self) -> None:
        p = self.primary
        p.run(
            "initdb", "-D", str(p.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"
        )
        p.start()
        self.link = WalLink(p.port)
        s = self.standby
        direct = f"host=127.0.0.1 port={p.port} user=postgres"
        s.run("pg_basebackup", "-d", direct, "-D", str(s.data), "-R", "-X", "stream", "-c", "fast")
        # The base backup goes direct; the WAL stream afterwards through the link (last wins).
        conninfo = f"host=127.0.0.1 port={self.link.port} user=postgres application_name=standby"
        with (s.data / "postgresql.auto.conf").open("a", encoding="utf-8") as conf:
            conf.write(f"primary_conninfo = '{conninfo}'\n")
        s.start()
        if self.synchronous:
            p.query("ALTER SYSTEM SET synchronous_standby_names = 'standby'")
            p.query("SELECT pg_reload_conf()")
        self.wait_streaming()

    def wait_streaming(self, timeout: float = 30.0) -> None:
        """Until the primary sees the standby streaming (and, if synchronous, as ``sync``)."""
        want = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = self.primary.query(
                "SELECT state, sync_state FROM pg_stat_replication"
                " WHERE application_name = 'standby'"
            )
            if rows and rows[0] == ("streaming", want):
                return
            time.sleep(0.05)
        raise RuntimeError(f"standby not streaming ({want}) after {timeout}s")

    def create_database(self, name: str) -> None:
        self.primary.query(f'CREATE DATABASE "{name}"')

    def wait_replayed(self, timeout: float = 30.0) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        (lsn,) = self.primary.query("SELECT pg_current_wal_lsn()::text")[0]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            (ok,) = self.standby.query(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn")[0]
            if ok:
                return
            time.sleep(0.05)
        raise RuntimeError("standby did not catch up")

    def wait_received_replayed(self, timeout: float = 30.0) -> None:
        """Until the standby has replayed all the WAL it received (a synchronous commit waits for
        the standby's flush, not its replay: a read before this can miss acknowledged writes)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            (ok,) = self.standby.query(
                "SELECT pg_last_wal_receive_lsn() IS NULL"
                " OR pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()"
            )[0]
            if ok:
                return
            time.sleep(0.02)
        raise RuntimeError("standby did not replay what it received")

    def url(self, database: str) -> str:
        """A libpq multi-host URL (primary first) that follows the writable server."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
            f"/{database}?target_session_attrs=read-write"
        )

    def crash_primary(self) -> None:
        """``pg_ctl stop -m immediate``: no shutdown checkpoint, no final WAL sent."""
        self.primary.stop("immediate")

    def promote(self) -> None:
        """Promote the standby and wait until it accepts writes."""
        self.standby.run("pg_ctl", "-D", str(self.standby.data), "-w", "promote")

    def destroy(self) -> None:
        if self.link is not None:
            self.link.cut()
        for node in (self.standby, self.primary):
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                node.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> Replicated:
        try:
            self.start()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()
