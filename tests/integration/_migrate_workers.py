"""One migrator process for `test_migrate_concurrent`: ``python -m ... MODE URL [POOLER]``.

It prints ``ready``, waits for a line on stdin (so that every process starts its upgrade at
the same moment), upgrades to head by ``MODE`` (``async``: `migrate.upgrade_async`; ``sync``:
`migrate.upgrade`; ``alembic``: ``alembic upgrade head`` through the project's ``env.py``),
prints each revision it applied (``applied 0001``...) from Alembic's log (``alembic`` logs
``Running upgrade`` on stderr itself, as ``alembic.ini`` says), then ``ok`` or the error, and
exits 0 or 1.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

from sql_lease import migrate

ROOT = Path(__file__).resolve().parents[2]


class _Applied(logging.Handler):
    """Alembic's ``Running upgrade A -> B, ...`` lines, as ``applied B``."""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Running upgrade"):
            revision = message.split("->", 1)[1].split(",", 1)[0].strip()
            print(f"applied {revision}", flush=True)


def main(mode: str, url: str, pooler: str | None) -> int:
    log = logging.getLogger("alembic.runtime.migration")
    log.setLevel(logging.INFO)
    log.addHandler(_Applied())
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        if mode == "async":
            asyncio.run(migrate.upgrade_async(url, timeout=90, pooler=pooler))
        elif mode == "sync":
            migrate.upgrade(url, timeout=90, pooler=pooler)
        else:
            from alembic.config import main as alembic_main

            os.environ[migrate.ENV_URL] = url
            os.chdir(ROOT)
            alembic_main(["-c", str(ROOT / "alembic.ini"), "upgrade", "head"])
    except BaseException as exc:  # reported to the test, whatever it is
        print(f"error {type(exc).__name__}: {exc}", flush=True)
        return 1
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
