#!/usr/bin/env bash
# The gate's own gate: each SQL mutant of the system under test (scripts/sql-mutants.txt — a
# fence condition dropped, `<=` made `<`, no token bump, expiry ignored, an early takeover, a renew
# after expiry, a release that resets the token, each join condition of the completion) is applied
# to a scratch copy of this checkout's HEAD, built, and run through the lab's gates: the full
# `lab run`, the fence-dependent experiments with fenced-single, a seeded chaos run, and the
# system under test's own cargo tests. A baseline of the unmutated copy must pass every gate first.
# Writes evidence/mutants.md: the kill matrix (mutant × what caught it). Usage:
#   scripts/mutants.sh [--only ID,ID] [--chaos-time 30s]
# About 3 minutes per mutant on 2 cores (cargo-mutants on lab/fencing is not run here yet).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
only=""
chaos_time=30s
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --chaos-time) chaos_time="$2"; shift 2 ;;
    *) echo "usage: scripts/mutants.sh [--only ID,ID] [--chaos-time 30s]" >&2; exit 2 ;;
  esac
done
scripts/ensure-postgres.sh
scripts/ensure-faketime.sh
features=$(scripts/ensure-mariadb.sh)
work=$(mktemp -d /tmp/lab-mutants.XXXXXX)
trap 'rm -rf "$work"' EXIT
export CARGO_TARGET_DIR="$root/target/mutants"

# Failed experiments of a `lab run`, from its event log: "F2,F4" (or "" when none failed).
failed_cases() {
  grep '"passed":false' "$1/events.jsonl" 2>/dev/null | grep -o '"case":"[A-Z][0-9]*"' \
    | cut -d'"' -f4 | sort -u | paste -sd, - || true
}

# Runs every gate against the copy in $1; prints four cells: run | single | chaos | cargo test.
gates() {
  local copy=$1 ev=$2 bin="$CARGO_TARGET_DIR/debug"
  # shellcheck disable=SC2086 # $features is empty or one flag
  (cd "$copy" && cargo build --quiet -p lab -p holder $features) >"$ev/build.log" 2>&1 \
    || { echo "build failed | build failed | build failed | build failed"; return; }
  local run single chaos tests
  if timeout 900 "$bin/lab" run --evidence-dir "$ev/run" >"$ev/run.out" 2>&1; then run="passed"
  else run="killed ($(failed_cases "$ev/run"))"; fi
  if timeout 600 "$bin/lab" run --fenced-mode fenced-single --only F4,F6,F7 \
      --evidence-dir "$ev/single" >"$ev/single.out" 2>&1; then single="passed"
  else single="killed ($(failed_cases "$ev/single"))"; fi
  timeout 600 "$bin/lab" chaos --seed 1 --time "$chaos_time" --evidence-dir "$ev/chaos" \
    >"$ev/chaos.out" 2>&1 || true
  # The checker's verdict at the scope under test (its control failing is not a kill).
  local broken
  broken=$(grep '^  FAIL' "$ev/chaos.out" | grep -v 'negative control' \
    | sed -E 's/^  FAIL +([^:]*):.*/\1/' | paste -sd, - || true)
  if [ -n "$broken" ]; then chaos="killed ($broken)"
  elif grep -q '^SUMMARY' "$ev/chaos.out"; then chaos="passed"
  else chaos="could not run"; fi
  # The system under test's own tests (its MariaDB ones when MariaDB is here).
  local own=""
  [ -n "$features" ] && own="--features fencing/mariadb"
  # shellcheck disable=SC2086
  if (cd "$copy" && timeout 900 cargo test --quiet --locked -p fencing $own) \
      >"$ev/test.out" 2>&1; then tests="passed"
  else tests="killed"; fi
  echo "$run | $single | $chaos | $tests"
}

copy_of_head() {
  mkdir -p "$1"
  git -C "$root" archive HEAD | tar -x -C "$1"
}

out="$root/evidence/mutants.md"
rows=""
echo "mutants: baseline (HEAD unmutated)" >&2
mkdir -p "$work/baseline"
copy_of_head "$work/baseline/src"
baseline=$(gates "$work/baseline/src" "$work/baseline")
echo "  $baseline" >&2
if [ "$baseline" != "passed | passed | passed | passed" ]; then
  echo "mutants: the unmutated baseline does not pass every gate ($baseline); see $work/baseline (kept)" >&2
  trap - EXIT
  exit 1
fi
killed=0 total=0
while IFS='|' read -r id file from to what; do
  id=$(echo "$id" | xargs); file=$(echo "$file" | xargs)
  from=$(echo "$from" | sed -E 's/^ //; s/ $//'); to=$(echo "$to" | sed -E 's/^ //; s/ $//')
  what=$(echo "$what" | sed -E 's/^ //')
  case "$id" in ''|'#'*) continue ;; esac
  if [ -n "$only" ] && ! echo ",$only," | grep -q ",$id,"; then continue; fi
  total=$((total + 1))
  dir="$work/$id"
  mkdir -p "$dir"
  copy_of_head "$dir/src"
  target="$dir/src/$file"
  if [ "$(grep -cF -- "$from" "$target")" != 1 ]; then
    echo "mutants: $id: the text is not found exactly once in $file; fix scripts/sql-mutants.txt" >&2
    exit 2
  fi
  FROM="$from" TO="$to" perl -0pi -e 's/\Q$ENV{FROM}\E/$ENV{TO}/' "$target"
  echo "mutants: $id ($what)" >&2
  cells=$(gates "$dir/src" "$dir")
  echo "  $cells" >&2
  if echo "$cells" | grep -q killed; then verdict="killed"; killed=$((killed + 1)); else verdict="**SURVIVED**"; fi
  rows+="| $id | $what | $cells | $verdict |"$'\n'
  rm -rf "$dir/src"
done < scripts/sql-mutants.txt

{
  echo "# Mutation testing: the SQL catalogue"
  echo
  echo "Each mutant of scripts/sql-mutants.txt applied to a copy of $(git rev-parse --short HEAD), built and"
  echo "run through every gate; a cell says which experiments (or checks) failed on it. Made by"
  echo "scripts/mutants.sh on $(date -u +%Y-%m-%d)."
  echo
  echo "| mutant | what it breaks | ./run.sh (F, U) | fenced-single F4,F6,F7 | chaos --seed 1 --time $chaos_time | cargo test -p fencing | verdict |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s' "$rows"
  echo
  echo "$killed of $total mutants killed."
} >"$out"
echo "mutants: $killed of $total killed; the matrix is in $out" >&2
[ "$killed" = "$total" ]
