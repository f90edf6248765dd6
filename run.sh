#!/usr/bin/env bash
# The fencing lab in one command. Builds the lab and runs every experiment, or:
#   ./run.sh --only F4,F5        any `lab run` option (./run.sh --help lists them)
#   ./run.sh --gate              the few experiments that kill every planted bug (a PR's CI)
#   ./run.sh list                any other lab subcommand
#   ./run.sh library             the library card (lock libraries from PyPI; a Docker engine)
#   ./run.sh holder check --cmd examples/holders/java/holder.sh   your own holder, conformance
#   ./run.sh --quiet …           no build progress nor phase lines (for scripts)
# Evidence goes to evidence/. Exit status: 0 passed, 1 a check failed, 2 the lab could not run.
# The experiments run on the dev build (unoptimised: they wait on servers and timers, not on the
# CPU), which builds faster than a release build and which scripts/test.sh shares; `./run.sh
# bench` builds and runs the release build, the one whose figures mean something.
# LAB_PROFILE=release or dev chooses.
set -euo pipefail
cd "$(dirname "$0")"
# No incremental state unless CARGO_INCREMENTAL says otherwise: the same default as
# scripts/test.sh (why, measured, is there), so that either reuses the other's build.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
quiet=
args=()
for a in "$@"; do
  if [ "$a" = --quiet ]; then quiet=--quiet; else args+=("$a"); fi
done
set -- ${args[@]+"${args[@]}"}
say() { [ -n "$quiet" ] || echo "run.sh: $* (${SECONDS} s)" >&2; }
say "setting up: PostgreSQL, libfaketime, MariaDB, Docker's tools (installed once, when missing)"
scripts/ensure-postgres.sh
scripts/ensure-faketime.sh
features=$(scripts/ensure-mariadb.sh)
containers=$(scripts/ensure-containers.sh)
# The example holders' set-up, when a command names one (--holder-cmd, --cmd).
case " $* " in
  *examples/holders/python*) scripts/ensure-python-holder.sh ;;
esac
case " $* " in
  *examples/holders/java*) scripts/ensure-java-holder.sh ;;
esac
profile=${LAB_PROFILE:-}
if [ -z "$profile" ]; then
  if [ "${1:-}" = bench ]; then profile=release; else profile=dev; fi
fi
case "$profile" in
  release) dir=release ;;
  dev) dir=debug ;;
  *) echo "run.sh: LAB_PROFILE must be release or dev, not $profile" >&2; exit 2 ;;
esac
say "building the lab and its holder ($profile build${features:+, $features}${containers:+ $containers}; cargo shows its progress)"
# shellcheck disable=SC2086 # $features and $containers are empty or one flag each
cargo build --profile "$profile" --locked ${quiet:+--quiet} -p lab -p holder $features $containers
say "built; the lab starts"
# The lab's hints name the command the user ran (`./run.sh clean`, not `lab clean`).
export LAB_INVOKED_AS=./run.sh
case "${1:-}" in
  library)
    shift
    say "the library holders' packages (pinned, from PyPI, into target/library-holders/venv once)"
    python=$(scripts/ensure-library-holders.sh)
    exec "target/$dir/lab" library --python "$python" "$@" ;;
  list | run | clean | bench | chaos | check | profile | holder | exercise | grade | help | -V | --version) exec "target/$dir/lab" "$@" ;;
  *)
    # The full run, with a Docker engine's tools: the library card after the experiments.
    if [ $# -eq 0 ] && [ -n "$containers" ]; then
      status=0
      "target/$dir/lab" run || status=$?
      say "the library card: the published lock libraries, frozen as they ship (./run.sh library)"
      lib=0
      # Its cases are in evidence/library/output.txt; the terminal gets a line per library as it
      # starts (about 20 s each), so that the card's minutes are not silent.
      python=$(scripts/ensure-library-holders.sh) || lib=$?
      if [ "$lib" -eq 0 ]; then
        set +e
        "target/$dir/lab" library --python "$python" | while IFS= read -r line; do
          case $line in "CASE "*/F1" "*) line=${line#CASE }; say "library card: ${line%%/*}" ;; esac
        done
        lib=${PIPESTATUS[0]}
        set -e
      fi
      [ "$status" -ne 0 ] || status=$lib
      exit "$status"
    fi
    exec "target/$dir/lab" run "$@" ;;
esac
