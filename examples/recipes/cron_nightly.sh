#!/bin/sh
# Plain cron, any language: the same crontab line on every replica; one runs the job per tick.
#
#   SQL_LEASE_DATABASE_URL=postgresql://app@db/app
#   */5 * * * * /app/examples/recipes/cron_nightly.sh /app/bin/nightly-report --full
#
# `sql-lease run` holds the lease while the command runs and exits with the command's code;
# --skip-code 0 keeps cron quiet on the replicas that skip (otherwise 75). Needs sql-lease[cli,sync].
exec sql-lease run --exclusive reports:nightly --at-most 10m --at-least 1m --skip-code 0 -- "$@"
