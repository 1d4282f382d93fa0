"""The sync provider through a failover (issue 13): libpq's multi-host URLs and
``target_session_attrs``, and a server that turned read-only.

As the async provider's tests (tests/infra/test_read_only.py): a database set
``default_transaction_read_only`` stands in for a demoted primary (a typed error, nothing
applied, the connection dropped so the next call reconnects); against a real streaming standby,
the standby alone refuses, and with both hosts and ``target_session_attrs=read-write`` the
provider reaches the writable one, in libpq's comma form and in SQLAlchemy's ``?host=`` form.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sql_lease import LeaseConnectionError, LeaseValueError, migrate
from sql_lease.backends.postgres.sync_connect import libpq_kwargs
from sql_lease.sync import SqlLeaseProvider
from sql_lease.sync._connect import parse

from ..infra.cluster import Replicated
from ..infra.test_read_only import set_read_only

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [
        ("postgresql://u@h1:5433,h2/db?target_session_attrs=read-write", "h1,h2", "5433,5432"),
        ("postgresql://u@/db?host=h1:5433&host=h2:5434", "h1,h2", "5433,5434"),
        ("postgresql://u@/db?host=[::1]:5433&host=h2", "::1,h2", "5433,5432"),
        ("postgresql://u@h1/db", "h1", None),
    ],
)
def test_host_lists_reach_libpq_as_its_host_and_port_lists(
    url: str, host: str, port: str | None
) -> None:
    kwargs = libpq_kwargs(parse(url).url)
    assert kwargs["host"] == host
    assert kwargs.get("port") == port


def test_a_bad_host_list_is_refused_before_any_io() -> None:
    with pytest.raises(LeaseValueError, match="empty host"):
        SqlLeaseProvider.from_url("postgresql://u@h1,/db")
    with pytest.raises(LeaseValueError, match="port"):
        SqlLeaseProvider.from_url("postgresql://u@h1:99999,h2/db")


def test_a_read_only_connection_is_a_typed_error_and_is_dropped(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    migrate.upgrade(url)
    set_read_only(url, True)
    with SqlLeaseProvider.from_url(url, timeout=5, pool_size=1) as provider:
        with pytest.raises(LeaseConnectionError, match="read-only") as caught:
            provider.acquire_lease("k", "a", 30_000)
        assert caught.value.outcome_unknown is False  # refused before anything applied
        set_read_only(url, False)
        # The read-only connection was dropped (on it the write would fail again: the setting
        # is the session's from its start). The pool replaces a dropped connection at once, in
        # the background, so its replacement may have connected before the setting was lifted:
        # that one is dropped alike, and a later connection takes the write.
        refused = 0
        while True:
            try:
                result = provider.acquire_lease("k", "b", 30_000)
            except LeaseConnectionError as exc:
                assert "read-only" in str(exc) and exc.outcome_unknown is False
                refused += 1
                assert refused <= 2
                continue
            break
        assert result.acquired
        assert provider.get_lease_owner("k") == "b"  # "a" never got it


@pytest.mark.infra
def test_a_standby_refuses_and_target_session_attrs_finds_the_primary() -> None:
    with Replicated(synchronous=False) as cluster:
        cluster.create_database("leases")
        primary = f"postgresql://postgres@127.0.0.1:{cluster.primary.port}/leases"
        migrate.upgrade(primary)
        cluster.wait_replayed()
        standby = f"postgresql://postgres@127.0.0.1:{cluster.standby.port}/leases"
        with SqlLeaseProvider.from_url(standby, timeout=5) as alone:
            with pytest.raises(LeaseConnectionError, match="target_session_attrs") as caught:
                alone.acquire_lease("k", "a", 30_000)
            assert caught.value.outcome_unknown is False
        s, p = cluster.standby.port, cluster.primary.port
        for both in (
            f"postgresql://postgres@127.0.0.1:{s},127.0.0.1:{p}/leases"
            "?target_session_attrs=read-write",
            f"postgresql://postgres@/leases?host=127.0.0.1:{s}&host=127.0.0.1:{p}"
            "&target_session_attrs=read-write",
        ):
            with SqlLeaseProvider.from_url(both, timeout=5) as provider:
                provider.release_lease("k", "a")
                assert provider.acquire_lease("k", "a", 30_000).acquired
                rows = provider.executor.run("where", False, "SELECT inet_server_port()", (), 5)
                assert rows == [(p,)]
