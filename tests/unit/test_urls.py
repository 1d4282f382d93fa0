"""Database URLs, without a database: what is refused, what each libpq parameter becomes."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from sql_lease import SqlLeaseProvider
from sql_lease.backends._urls import normalize_url, redact
from sql_lease.backends.postgres.libpq import SUPPORTED, connect_arguments
from sql_lease.errors import LeaseValueError


def refused(url: str) -> str:
    with pytest.raises(LeaseValueError) as caught:
        normalize_url(url)
    return str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres:hun@ter2@127.0.0.1/appdb",
        "postgresql://postgres:hun@ter2:x@127.0.0.1/appdb",  # the ':' made the parser crash
        "postgresql://postgres:hun@ter2/x@127.0.0.1/appdb",
        "postgresql://postgres:hun@ter2?x@127.0.0.1/appdb",
        "postgresql://postgres:hun?ter2@x@127.0.0.1/appdb",
    ],
)
def test_an_unencoded_at_in_the_password_is_refused_without_a_fragment_of_it(url: str) -> None:
    message = refused(url)
    assert "%40" in message and "\n" not in message
    for fragment in ("hun", "ter2", "x@"):
        assert fragment not in message
    with pytest.raises(LeaseValueError):
        SqlLeaseProvider.from_url(url)  # at construction, before any I/O


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://postgres@127.0.0.1:abc/appdb", "not a number"),
        ("postgresql://postgres:s3cret/appdb", "not a number"),  # a forgotten host: no quote
        ("postgresql://postgres@127.0.0.1:99999/appdb", "out of range"),
        ("postgresql://postgres@127.0.0.1:0/appdb", "out of range"),
        ("postgresql://postgres@h1:5432,h2:70000/appdb", "out of range"),
    ],
)
def test_a_bad_port_is_refused_before_connecting(url: str, says: str) -> None:
    message = refused(url)
    assert says in message
    assert "abc" not in message and "s3cret" not in message and "99999" not in message


def test_a_port_out_of_range_in_a_url_object_is_refused() -> None:
    with pytest.raises(LeaseValueError, match="out of range"):
        normalize_url(make_url("postgresql://u@h/db").set(port=70000))


def test_the_libpq_host_list_becomes_sqlalchemys_and_reads_back() -> None:
    url = normalize_url("postgresql://u:p%40ss@h1:5433,h2/db?target_session_attrs=read-write")
    assert url.host is None and url.password == "p@ss" and url.database == "db"
    assert dict(url.query) == {
        "host": "h1,h2",
        "port": "5433,5432",  # a host without a port gets libpq's default
        "target_session_attrs": "read-write",
    }
    assert normalize_url(url.render_as_string(hide_password=False)) == url  # idempotent
    assert (
        redact(url)
        == "postgresql+asyncpg://u:***@h1:5433,h2:5432/db?target_session_attrs=read-write"
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:a?b/c@h1,h2:7/db", "postgresql+asyncpg://u:***@h1:5432,h2:7/db"),
        (
            "postgresql://u:pw@h1,h2?sslmode=require",
            "postgresql+asyncpg://u:***@h1:5432,h2:5432?ssl=require",
        ),
        ("postgresql://h1,h2", "postgresql+asyncpg://h1:5432,h2:5432"),
    ],
)
def test_a_host_list_after_a_password_with_slashes_or_without_a_path(url: str, shown: str) -> None:
    parsed = normalize_url(url)
    assert redact(parsed) == shown
    assert parsed.password in (None, "a?b/c", "pw")


def test_a_single_at_in_a_parameter_or_a_question_mark_in_the_password_is_fine() -> None:
    assert normalize_url("postgresql://u:a?b@h/db").password == "a?b"
    assert normalize_url("postgresql://h/db?application_name=me@host").query == {
        "application_name": "me@host"
    }


def test_a_host_list_takes_ipv6_hosts_and_refuses_a_second_list_or_an_empty_host() -> None:
    url = normalize_url("postgresql://[::1]:5433,[::2]/db")
    assert (url.query["host"], url.query["port"]) == ("::1,::2", "5433,5432")
    assert "both" in refused("postgresql://h1,h2/db?host=h3")
    assert "empty host" in refused("postgresql://h1,,h2/db")


def test_the_mapped_parameters_become_asyncpg_connect_arguments() -> None:
    url = normalize_url(
        "postgresql://u@h/db?application_name=billing&connect_timeout=7"
        "&options=-c%20statement_timeout%3D1234%20--lock-timeout=99%20-csearch_path=a\\%20b"
        "&keepalives_idle=30&keepalives_interval=5&keepalives_count=3&tcp_user_timeout=9000"
        "&sslmode=require&target_session_attrs=read-write"
    )
    driver_url, arguments = connect_arguments(url)
    assert arguments == {
        "server_settings": {
            "statement_timeout": "1234",
            "lock_timeout": "99",
            "search_path": "a b",
            "tcp_keepalives_idle": "30",
            "tcp_keepalives_interval": "5",
            "tcp_keepalives_count": "3",
            "tcp_user_timeout": "9000",
            "application_name": "billing",
        },
        "timeout": 7.0,
    }
    # What is left is what asyncpg takes as keyword arguments.
    assert dict(driver_url.query) == {"ssl": "require", "target_session_attrs": "read-write"}


def test_keepalives_0_asks_the_server_for_nothing_and_fallback_name_yields() -> None:
    url = normalize_url("postgresql://u@h/db?keepalives=0&keepalives_idle=30")
    assert connect_arguments(url)[1] == {}
    url = normalize_url("postgresql://u@h/db?fallback_application_name=tool&application_name=mine")
    assert connect_arguments(url)[1] == {"server_settings": {"application_name": "mine"}}
    url = normalize_url("postgresql://u@h/db?fallback_application_name=tool")
    assert connect_arguments(url)[1] == {"server_settings": {"application_name": "tool"}}


def test_dbname_is_asyncpgs_database_and_tls_parameters_still_go_through_the_dsn() -> None:
    url = normalize_url("postgresql://u@h?dbname=app&sslmode=verify-full&sslrootcert=/ca.pem")
    assert url.query["database"] == "app" and url.query["ssl"] == "verify-full"
    assert url.query["dsn"] == "postgresql://?sslrootcert=%2Fca.pem"
    assert "sslrootcert=" in redact(url)


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("foo=1", "foo is not supported"),
        ("sslmode=bogus", "sslmode must be one of"),
        ("target_session_attrs=primaryish", "target_session_attrs must be one of"),
        ("keepalives=2", "keepalives must be one of"),
        ("keepalives_idle=-1", "keepalives_idle must be a whole number"),
        ("connect_timeout=0", "connect_timeout must be a number of seconds above 0"),
        ("connect_timeout=soon", "connect_timeout must be a number of seconds above 0"),
        ("options=-d%205", "options may only set server settings"),
        ("options=-c%20nonsense", "is not name=value"),
        ("application_name=a&application_name=b", "application_name more than once"),
        ("dbname=a&database=b", "both dbname and database"),
        ("dsn=postgresql://h/x", "dsn is not supported"),
    ],
)
def test_a_parameter_that_cannot_be_honoured_is_refused_by_name(query: str, names: str) -> None:
    message = refused(f"postgresql://u@h/db?{query}")
    assert names in message
    with pytest.raises(LeaseValueError, match=names.split()[0]):
        SqlLeaseProvider.from_url(f"postgresql://u@127.0.0.1:1/db?{query}")


def test_the_unknown_parameter_message_lists_the_supported_ones() -> None:
    message = refused("postgresql://u@h/db?statement_timeout=5")
    assert "statement_timeout is not supported" in message
    assert all(name in message for name in SUPPORTED - {"dsn"})


def test_a_parameter_that_is_not_a_name_is_not_quoted() -> None:
    message = refused("postgresql://u@h/db?x%3Fy=1")
    assert "x?y" not in message and "%40" in message


def test_sqlite_urls_keep_their_own_rules() -> None:
    assert normalize_url("sqlite:///tmp/a@b/leases.db").database == "tmp/a@b/leases.db"
    assert "in-memory" in refused("sqlite://")


@pytest.mark.parametrize("url", [False, None, 5, "", "not a url"])
def test_what_is_not_a_url_is_refused_as_a_value_error(url: object) -> None:
    with pytest.raises(LeaseValueError, match="URL"):
        normalize_url(url)  # type: ignore[arg-type]
