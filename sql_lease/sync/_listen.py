"""The sync provider's LISTEN thread lives with the PostgreSQL backend (psycopg is imported
only there); this name is kept for the sync package's modules."""

from __future__ import annotations

from ..backends.postgres.sync_listen import LINGER_S, Listener

__all__ = ["LINGER_S", "Listener"]
