#!/usr/bin/env bash
# Measures the gate (`lab run --gate`, scripts/gate.py): its wall time on the lab's own design,
# and its kill rate — each mutant of scripts/sql-mutants.txt applied to a copy of its profile and
# run through the gate as the system under test (`--sut`), and the broken holder
# (scripts/broken-holder.sh) run through it. A mutant the gate lets pass is a survivor: the
# script says so and exits 1. Prints one line per planted bug and the figures at the end.
#
# Usage: scripts/gate-check.sh [DIR]      (default: a temporary directory; LAB= the lab binary,
#                                          default target/debug/lab, built with every feature)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d /tmp/lab-gate-check.XXXXXX)}
lab=${LAB:-target/debug/lab}
mkdir -p "$out"
[ -x "$lab" ] || { echo "gate-check: no $lab: build it first (./run.sh builds it)" >&2; exit 2; }

t0=$SECONDS
"$lab" run --gate --evidence-dir "$out/own" >"$out/own.log" 2>&1 || {
  echo "gate-check: the gate fails on the lab's own design: see $out/own.log" >&2; exit 1; }
own=$((SECONDS - t0))
echo "gate-check: the lab's own design passes the gate in $own s ($(grep -m1 '^SUMMARY' "$out/own.log"))"

killed=0 survived=0 unrun=0 total=0
while IFS='|' read -r id file text becomes what; do
  id=$(echo "$id" | xargs)
  case "$id" in ''|'#'*) continue ;; esac
  file=$(echo "$file" | xargs)
  total=$((total + 1))
  mutant="$out/$id.toml"
  python3 - "$file" "$mutant" "$(echo "$text" | sed 's/^ //; s/ $//')" "$(echo "$becomes" | sed 's/^ //; s/ $//')" <<'PY'
import sys
src, dst, old, new = sys.argv[1:5]
s = open(src).read()
if s.count(old) != 1:
    sys.exit(f"gate-check: {old!r} is not found once in {src}")
open(dst, "w").write(s.replace(old, new))
PY
  t=$SECONDS
  status=0
  "$lab" run --gate --sut "$mutant" --evidence-dir "$out/ev-$id" >"$out/$id.log" 2>&1 || status=$?
  # Killed only by a check of the experiment's own that failed (exit 1, a FAIL line that is not
  # the run's own bookkeeping: an experiment that could not run to its end, or made another
  # number of checks than it declares, shows no check guarding the flaw); a lab that could not
  # run the mutant (exit 2: a design on MariaDB and a lab built without it, say) killed nothing.
  guard=$(grep '  FAIL' "$out/$id.log"     | grep -v -e 'FAIL the scenario ran to its end' -e 'FAIL the scenario made the number of checks'     | head -1 || true)
  if [ "$status" = 0 ]; then
    survived=$((survived + 1))
    echo "gate-check: SURVIVED $id ($what) in $((SECONDS - t)) s"
  elif [ "$status" = 1 ] && [ -n "$guard" ]; then
    killed=$((killed + 1))
    echo "gate-check: killed $id in $((SECONDS - t)) s: $(echo "$guard" | cut -c1-140)"
  elif [ "$status" = 1 ]; then
    survived=$((survived + 1))
    echo "gate-check: SURVIVED $id ($what): only aborts failed, no check of its own: $(grep -m1 '  FAIL' "$out/$id.log" | cut -c1-140)"
  else
    unrun=$((unrun + 1))
    echo "gate-check: COULD NOT RUN $id (exit $status): $(tail -1 "$out/$id.log" | cut -c1-200)"
  fi
done < scripts/sql-mutants.txt
"$lab" clean >/dev/null 2>&1 || true

total=$((total + 1))
t=$SECONDS
# broken-holder.sh exits 0 when the run failed a check, as it must; 1 when it passed; 2 when it
# could not build or run the broken holder.
status=0
scripts/broken-holder.sh "$out/broken" --gate >"$out/broken.log" 2>&1 || status=$?
case $status in
  0) killed=$((killed + 1))
     echo "gate-check: killed the broken holder in $((SECONDS - t)) s (its build included)" ;;
  1) survived=$((survived + 1))
     echo "gate-check: SURVIVED the broken holder (it skips its local-deadline check): $(tail -1 "$out/broken.log")" ;;
  *) unrun=$((unrun + 1))
     echo "gate-check: COULD NOT RUN the broken holder (exit $status): $(tail -1 "$out/broken.log")" ;;
esac
echo "gate-check: the gate ($(cat lab/src/gate.txt)) killed $killed of $total planted bugs; $own s on the lab's own design; logs in $out"
[ "$unrun" = 0 ] || { echo "gate-check: $unrun planted bugs could not be run: no kill rate" >&2; exit 2; }
[ "$survived" = 0 ]
