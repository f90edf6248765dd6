#!/usr/bin/env bash
# Repeats the lab and reports how often it passed:
#   scripts/stress.sh N [--load] [lab run options]     e.g. scripts/stress.sh 20 --only F4
# --load keeps every core busy with stress-ng (installed with apt-get when missing and root) for
# the whole series, and stops it on every exit path. Prints `runs=N passed=P failed=F` and the
# wall times (min / median / max). Each failing run keeps its evidence and log under
# target/stress/<stamp>/run-K (and the lab keeps its cluster directory, named in that log);
# passing runs' evidence is removed. Exit status 0 when every run passed, else 1.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/stress.sh N [--load] [lab run options]" >&2; exit 2; }
[ $# -ge 1 ] || usage
n=$1; shift
[[ "$n" =~ ^[1-9][0-9]*$ ]] || usage
load=0
if [ "${1:-}" = "--load" ]; then load=1; shift; fi

# ./run.sh sets up and builds what a user's run uses (the dev build unless LAB_PROFILE=release,
# with the container and lock services' features where a Docker engine answers); the runs below
# call the binary it built.
profile=${LAB_PROFILE:-dev}
case "$profile" in
  release) bin=target/release/lab ;;
  dev) bin=target/debug/lab ;;
  *) echo "stress: LAB_PROFILE must be release or dev, not $profile" >&2; exit 2 ;;
esac
LAB_PROFILE=$profile ./run.sh --quiet --version >/dev/null

stamp=$(date +%Y%m%d-%H%M%S)
out="target/stress/$stamp"
mkdir -p "$out"

loader=""
cleanup() { if [ -n "$loader" ]; then kill "$loader" 2>/dev/null || true; wait "$loader" 2>/dev/null || true; fi; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if [ "$load" -eq 1 ]; then
  if ! command -v stress-ng >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "stress: installing stress-ng with apt-get" >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null 2>&1; }
    fi
    command -v stress-ng >/dev/null 2>&1 || { echo "stress: --load needs stress-ng (apt-get install -y stress-ng)" >&2; exit 2; }
  fi
  stress-ng --cpu "$(nproc)" --timeout 0 --quiet &
  loader=$!
  echo "stress: stress-ng --cpu $(nproc) running (pid $loader)" >&2
fi

passed=0; failed=0; times=()
for i in $(seq 1 "$n"); do
  dir="$out/run-$i"
  start=$(date +%s.%N)
  set +e
  "$bin" run --evidence-dir "$dir" "$@" >"$dir.log" 2>&1
  rc=$?
  set -e
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.3f", e - s }')
  times+=("$secs")
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1)); rm -rf "$dir" "$dir.log"
  else
    failed=$((failed + 1))
    echo "stress: run $i failed (exit $rc): $(grep -m1 -E '^ *FAIL|^lab:' "$dir.log" || true); kept $dir.log" >&2
  fi
  printf 'stress: run %d/%d exit=%d %.1fs\n' "$i" "$n" "$rc" "$secs" >&2
done

sorted=$(printf '%s\n' "${times[@]}" | sort -n)
min=$(echo "$sorted" | head -1); max=$(echo "$sorted" | tail -1)
median=$(echo "$sorted" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
printf 'runs=%d passed=%d failed=%d\n' "$n" "$passed" "$failed"
printf 'wall seconds: min=%.2f median=%.2f max=%.2f%s\n' "$min" "$median" "$max" "$([ $load -eq 1 ] && echo ' (under stress-ng load)')"
[ "$failed" -eq 0 ] && rmdir "$out" 2>/dev/null || true
[ "$failed" -eq 0 ]
