#!/usr/bin/env bash
# The fencing lab in one command. Builds in release mode and runs every experiment, or:
#   ./run.sh --only F4,F5        any `lab run` option (./run.sh --help lists them)
#   ./run.sh list                any other lab subcommand
# Evidence goes to evidence/. Exit status: 0 passed, 1 a check failed, 2 the lab could not run.
set -euo pipefail
cd "$(dirname "$0")"
scripts/ensure-postgres.sh
scripts/ensure-faketime.sh
features=$(scripts/ensure-mariadb.sh)
containers=$(scripts/ensure-containers.sh)
# shellcheck disable=SC2086 # $features and $containers are empty or one flag each
cargo build --release --locked --quiet -p lab -p holder $features $containers
case "${1:-}" in
  list | run | clean | bench | chaos | help | -V | --version) exec target/release/lab "$@" ;;
  *) exec target/release/lab run "$@" ;;
esac
