#!/usr/bin/env bash
# The test command: sets up what the tests need (PostgreSQL server binaries; libfaketime for U3 and F13;
# MariaDB for U1–U5 and a Docker engine's tools for F15 when it can), then runs every test of the workspace against real, throwaway servers. Extra
# arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-postgres.sh
scripts/ensure-faketime.sh
features=$(scripts/ensure-mariadb.sh)
containers=$(scripts/ensure-containers.sh)
# shellcheck disable=SC2086 # $features and $containers are empty or one flag each
exec cargo test --workspace --locked $features $containers "$@"
