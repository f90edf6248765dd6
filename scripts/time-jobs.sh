#!/usr/bin/env bash
# How much `--jobs` saves: the full run one experiment at a time, then with the default jobs
# (the number of cores), on the same build, one after the other; each run's wall time and
# SUMMARY line, and the ratio. Extra arguments go to both runs. Usage:
#   scripts/time-jobs.sh [lab run options]      (LAB_PROFILE=dev|release as for run.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d /tmp/lab-time-jobs.XXXXXX)
trap 'rm -rf "$out"' EXIT
declare -A took
for jobs in 1 default; do
  args=(--evidence-dir "$out/$jobs")
  [ "$jobs" = 1 ] && args+=(--jobs 1)
  start=$(date +%s.%N)
  ./run.sh "${args[@]}" "$@" >"$out/$jobs.out" 2>&1 || { echo "the run with jobs=$jobs failed:"; tail -5 "$out/$jobs.out"; exit 1; }
  end=$(date +%s.%N)
  took[$jobs]=$(python3 -c "print($end - $start)")
  printf 'jobs=%-7s %6.1f s  %s\n' "$jobs" "${took[$jobs]}" "$(grep '^SUMMARY' "$out/$jobs.out")"
done
printf 'default jobs / jobs 1 = %.2f\n' "$(python3 -c "print(${took[default]} / ${took[1]})")"
