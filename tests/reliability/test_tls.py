"""TLS to PostgreSQL: libpq-style URLs (sslmode, sslrootcert) work end to end, a server that
cannot be verified or a refused plain connection fails with a typed error, never a hang.

Runs a private cluster with ``ssl = on`` and a self-signed certificate for 127.0.0.1; only
TLS connections are accepted over TCP (``hostssl``), so a test that passes used TLS.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sql_lease import LeaseConnectionError, LeaseError, SqlLeaseProvider, migrate

from ._cluster import ADMIN_PASSWORD, Cluster, find_bindir

pytestmark = pytest.mark.timeout(120)


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make a test certificate", pytrace=False)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    command = (
        f"openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN={name}"
        f" -addext subjectAltName=IP:127.0.0.1 -keyout {key} -out {cert}"
    )
    subprocess.run(
        command.split(),
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    """A private cluster that accepts TCP connections over TLS only; and its certificate."""
    bindir = find_bindir()
    if bindir is None:
        pytest.fail("PostgreSQL server binaries not found: set SQL_LEASE_PG_BIN", pytrace=False)
    c = Cluster(bindir)
    try:
        c.init()
        cert, key = _self_signed(c.base, "server")
        c.give_to_server(key)
        c.give_to_server(cert, 0o644)
        (c.data / "pg_hba.conf").write_text(
            "local all all trust\n"
            "hostssl all all 127.0.0.1/32 scram-sha-256\n"
            "hostnossl all all 127.0.0.1/32 reject\n",
            encoding="utf-8",
        )
        c.extra_options = f"-c ssl=on -c ssl_cert_file={cert} -c ssl_key_file={key}"
        c.start()
        yield c, cert
    finally:
        c.destroy()


def _database(cluster: Cluster, query: str) -> str:
    name = f"tls_{uuid.uuid4().hex[:10]}"
    with _admin(cluster) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return cluster.url(name).render_as_string(hide_password=False) + query


def _admin(cluster: Cluster) -> psycopg.Connection:
    return psycopg.connect(
        host="127.0.0.1",
        port=cluster.port,
        user="postgres",
        password=ADMIN_PASSWORD,
        dbname="postgres",
        autocommit=True,
        sslmode="require",
        connect_timeout=10,
    )


async def _lifecycle(url: str) -> list[bool]:
    async with SqlLeaseProvider.from_url(url, timeout=5) as p:
        got = await p.acquire_lease("k\0tls", "a", 30_000)
        moved = await p.transfer_lease("k\0tls", "a", "b", 30_000)
        owner = await p.get_lease_owner("k\0tls")
        await p.release_lease("k\0tls", "b")
        return [got.acquired, moved, owner == "b", await p.get_lease_owner("k\0tls") is None]


def _ssl_of_lease_connections(cluster: Cluster) -> list[bool]:
    with _admin(cluster) as conn:
        rows = conn.execute(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)"
            " WHERE a.application_name = 'sql_lease'"
        ).fetchall()
    return [row[0] for row in rows]


def test_sslmode_require_migrates_and_runs_every_operation(
    tls_cluster: tuple[Cluster, Path],
) -> None:
    cluster, _ = tls_cluster
    url = _database(cluster, "?sslmode=require")
    migrate.upgrade(url)  # migrations take the same URL
    assert migrate.current(url) == migrate.head()

    async def run() -> tuple[list[bool], list[bool]]:
        async with SqlLeaseProvider.from_url(url) as p:
            await p.acquire_lease("k", "a", 30_000)  # its connection stays open (held)
            return await _lifecycle(url), _ssl_of_lease_connections(cluster)

    ok, ssl = asyncio.run(run())
    assert ok == [True, True, True, True]
    assert ssl and all(ssl)


def test_verify_full_with_the_root_certificate_named_in_the_url(
    tls_cluster: tuple[Cluster, Path],
) -> None:
    cluster, cert = tls_cluster
    url = _database(cluster, f"?sslmode=verify-full&sslrootcert={cert}")
    migrate.upgrade(url)
    assert asyncio.run(_lifecycle(url)) == [True, True, True, True]


def test_an_unverifiable_server_is_a_typed_error_without_secrets(
    tls_cluster: tuple[Cluster, Path], tmp_path: Path
) -> None:
    cluster, _ = tls_cluster
    other_ca, _ = _self_signed(tmp_path, "someone-else")
    url = _database(cluster, f"?sslmode=verify-full&sslrootcert={other_ca}")
    started = time.monotonic()
    with pytest.raises(LeaseConnectionError) as caught:
        asyncio.run(_lifecycle(url))
    assert time.monotonic() - started < 15  # refused, not hung
    text = str(caught.value)
    assert ADMIN_PASSWORD not in text and "certificate" in text.lower(), text


def test_a_plain_connection_the_server_refuses_is_a_typed_error(
    tls_cluster: tuple[Cluster, Path],
) -> None:
    cluster, _ = tls_cluster
    url = _database(cluster, "?sslmode=disable")
    with pytest.raises(LeaseError) as caught:
        asyncio.run(_lifecycle(url))
    assert ADMIN_PASSWORD not in str(caught.value)
    assert "pg_hba" in str(caught.value) or "no encryption" in str(caught.value), caught.value
