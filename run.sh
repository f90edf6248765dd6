#!/usr/bin/env bash
# The fencing lab in one command. Builds in release mode and runs every experiment, or:
#   ./run.sh --only F4,F5        any `lab run` option (./run.sh --help lists them)
#   ./run.sh list                any other lab subcommand
# Evidence goes to evidence/. Exit status: 0 passed, 1 a check failed, 2 the lab could not run.
# LAB_PROFILE=dev builds (or reuses) the debug build instead of the release one: CI does, after the
# test command has built it, to save the release build's minutes.
set -euo pipefail
cd "$(dirname "$0")"
scripts/ensure-postgres.sh
scripts/ensure-faketime.sh
features=$(scripts/ensure-mariadb.sh)
containers=$(scripts/ensure-containers.sh)
profile=${LAB_PROFILE:-release}
case "$profile" in
  release) dir=release ;;
  dev) dir=debug ;;
  *) echo "run.sh: LAB_PROFILE must be release or dev, not $profile" >&2; exit 2 ;;
esac
# shellcheck disable=SC2086 # $features and $containers are empty or one flag each
cargo build --profile "$profile" --locked --quiet -p lab -p holder $features $containers
# The lab's hints name the command the user ran (`./run.sh clean`, not `lab clean`).
export LAB_INVOKED_AS=./run.sh
case "${1:-}" in
  list | run | clean | bench | chaos | profile | exercise | grade | help | -V | --version) exec "target/$dir/lab" "$@" ;;
  *) exec "target/$dir/lab" run "$@" ;;
esac
