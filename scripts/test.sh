#!/usr/bin/env bash
# The test command: sets up what the tests need (PostgreSQL server binaries), then runs every test
# of the workspace against real, throwaway PostgreSQL clusters. Extra arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-postgres.sh
exec cargo test --workspace --locked "$@"
