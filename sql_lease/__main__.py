"""``python -m sql_lease``: the command line (same as the ``sql-lease`` script)."""

from sql_lease.cli import main

if __name__ == "__main__":
    main()
