#!/usr/bin/env bash
# The test command: sets up what the tests need (PostgreSQL server binaries; libfaketime for U3 and F13;
# MariaDB for U1–U5 and a Docker engine's tools for F15 when it can), then runs every test of the
# workspace against real, throwaway servers. Extra arguments go to the test runner.
#
# The runner is cargo-nextest when it is installed (`.config/nextest.toml`: three server-starting
# tests at a time across every test binary and three container tests beside them, per-test
# timeouts): measured on this 2-core machine when the suite was smaller, 261 s against `cargo
# test`'s 365 s for the same build, since `cargo test` runs the binaries one after the other and
# most tests wait on a lease's TTL. Without it, `cargo test`. (nextest runs no
# doctests; the workspace has none.)
set -euo pipefail
cd "$(dirname "$0")/.."
# Builds write no incremental state unless CARGO_INCREMENTAL says otherwise: it only pays when
# the same crates are built again after an edit. Measured like for like on this 2-core machine,
# back to back from empty target directories: the lab and holder's dev build with every
# feature 150 s with it, 145 s without (2026-12-04); the workspace's crates and test binaries
# alone 77 s → 62 s (2026-12-03). The same default in scripts/test.sh and
# ./run.sh, so that either reuses the other's build; CARGO_INCREMENTAL=1 for both suits an
# edit-and-rerun loop.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
scripts/ensure-postgres.sh
scripts/ensure-faketime.sh
scripts/ensure-python-holder.sh || true  # the example Python holder's test says skip without it
scripts/ensure-java-holder.sh || true    # the example Java holder's test says skip without it
scripts/ensure-library-holders.sh >/dev/null || true  # the library card's test says skip without it
features=$(scripts/ensure-mariadb.sh)
containers=$(scripts/ensure-containers.sh)
# A test whose dependency is missing (a Docker engine, MariaDB, libfaketime) passes having said
# `skip` (harness::require; with LAB_REQUIRE naming the dependency it fails instead). The runners
# keep a passing test's output to themselves, so each such test also appends its line to
# $LAB_SKIPPED, printed here after the runner's summary.
LAB_SKIPPED=$(mktemp)
export LAB_SKIPPED
# The tests' temp directories — every embedded cluster's and MariaDB server's data, the lab runs'
# evidence — on tmpfs when /dev/shm is one with room (4 GiB free), not on the disk: creating
# and deleting thousands of small files there was most of the suite's system time (perf: ext4's
# inode allocation under postgres and initdb). Measured on this 2-core machine, 44 embedded
# tests: 82 s wall, 58 s system CPU on ext4; 60 s, 24 s on tmpfs. A server killed by a crash
# experiment keeps what it wrote either way (a process crash, not a power cut). LAB_TEST_TMPDIR
# chooses another place ("" keeps $TMPDIR).
tests_tmp=
if [ -z "${LAB_TEST_TMPDIR+set}" ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] \
  && [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -ge $((4 * 1024 * 1024)) ]; then
  LAB_TEST_TMPDIR=/dev/shm
fi
if [ -n "${LAB_TEST_TMPDIR:-}" ]; then
  tests_tmp=$(mktemp -d "$LAB_TEST_TMPDIR/fencing-lab-tests.XXXXXX")
  chmod 0755 "$tests_tmp"
  export TMPDIR=$tests_tmp
  echo "test: the tests' temp directories are in $tests_tmp (LAB_TEST_TMPDIR= keeps \$TMPDIR)" >&2
fi
trap 'rm -f "$LAB_SKIPPED"; [ -z "$tests_tmp" ] || rm -rf "$tests_tmp"' EXIT
# The runner runs in the background so that this script can print that list after it; a SIGTERM
# or SIGINT sent to this script is passed on to it as SIGTERM (an asynchronous command ignores the
# terminal's SIGINT, and bash would hold a signal to the script until a foreground child ended),
# and the script waits for it to end: every test's servers and holders are stopped on the way out.
child=
pass_on() { [ -n "$child" ] && kill -TERM "$child" 2>/dev/null || true; }
trap pass_on TERM INT
if cargo nextest --version >/dev/null 2>&1; then
  # shellcheck disable=SC2086 # $features and $containers are empty or one flag each
  cargo nextest run --workspace --locked $features $containers "$@" &
else
  # shellcheck disable=SC2086
  cargo test --workspace --locked $features $containers "$@" &
fi
child=$!
status=0
while :; do
  if wait "$child"; then status=0; else status=$?; fi
  # `wait` also returns when a trapped signal arrives: wait again until the runner has ended.
  kill -0 "$child" 2>/dev/null || break
done
if [ -s "$LAB_SKIPPED" ]; then
  echo "test: skipped for a missing dependency, each listed once (LAB_REQUIRE=docker,mariadb,faketime,chromium,psycopg,jdbc,libraries makes these failures):" >&2
  sort -u "$LAB_SKIPPED" | sed 's/^/  /' >&2
fi
exit "$status"
