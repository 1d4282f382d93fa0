"""A primary and a streaming standby for the TypeScript failover test, from the Python tests' own
`tests.infra.cluster.Replicated` (initdb, pg_basebackup, as the ``postgres`` user under root).

``cluster.py`` starts the pair (synchronous replication: an acknowledged commit is on the
standby), creates and migrates the database ``leases`` on the primary, waits until the standby
has it, and prints one JSON line: ``{"primary": port, "standby": port, "url": host list URL}``.
Then it reads commands, one a line, and answers ``ok`` (or ``error: ...``) after each:

- ``promote``: promote the standby and wait until it accepts writes;
- ``stop-primary``: stop the old primary (``pg_ctl stop -m fast``);
- ``quit``, or the end of stdin: stop both and delete everything.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the repository: its tests package

from sql_lease import migrate
from tests.infra.cluster import Replicated


def main() -> None:
    with Replicated(synchronous=True) as cluster:
        cluster.create_database("leases")
        migrate.upgrade(f"postgresql://postgres@127.0.0.1:{cluster.primary.port}/leases")
        cluster.wait_replayed()
        info = {
            "primary": cluster.primary.port,
            "standby": cluster.standby.port,
            "url": cluster.url("leases"),
        }
        print(json.dumps(info), flush=True)
        for line in sys.stdin:
            command = line.strip()
            try:
                if command == "promote":
                    cluster.promote()
                elif command == "stop-primary":
                    cluster.primary.stop("fast")
                elif command == "quit":
                    break
                else:
                    raise ValueError(f"unknown command {command!r}")
            except Exception as error:
                print(f"error: {error}", flush=True)
                continue
            print("ok", flush=True)


if __name__ == "__main__":
    main()
