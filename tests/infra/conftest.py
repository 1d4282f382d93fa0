"""The infra layer: a real PgBouncer and a replicated primary/standby pair, started per test.

Marked ``infra`` (``-m infra`` runs them alone, ``-m "not infra"`` skips them). They need the
``pgbouncer`` binary (Debian package ``pgbouncer``) and the PostgreSQL server binaries; a missing
binary fails the run loudly, like an unreachable server.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "infra: real PgBouncer and replicated clusters started by the test"
    )
