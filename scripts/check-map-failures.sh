#!/usr/bin/env bash
# Runs the broken variants the check map reads besides the SQL mutants, and records every check
# each one failed in evidence/broken-checks.tsv (scripts/check-map.py --failures), so that the map
# can be made again from what the repository holds:
#
#   grade                            `lab grade`: the report card's planted-flaw designs, the
#                                    modelled lock tables, the lock services without a token
#   holder-skips-its-deadline-check  scripts/broken-holder.sh: the holder's local-deadline check
#                                    made `if false` (F10, F13, F16)
#   f17-<mutant>                     F17 (Patroni, Docker) on four SQL mutants of seed004, which the
#                                    mutation run leaves out for its 150 s a run
#   s-<mutant>                       the S-series (the databases' own locks) on two mutants of
#                                    seed004's fence
#   ttl-tenfold-F8                   F8 on seed004 with the acquire's lease ten times the TTL asked
#
# Then the map: scripts/check-map.py RUN_DIR (the evidence of a default `lab run`).
#
# Usage: scripts/check-map-failures.sh DIR      (LAB= the lab binary, default target/debug/lab,
#                                                built with every feature the machine allows;
#                                                a step done before in DIR is kept)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/check-map-failures.sh DIR}
lab=${LAB:-target/debug/lab}
[ -x "$lab" ] || { echo "check-map-failures: no $lab: build it first (./run.sh builds it)" >&2; exit 2; }
mkdir -p "$out"
trap '"$lab" clean >/dev/null 2>&1 || true' EXIT

# A step done in an earlier call on the same DIR (its DIR/NAME.done) is not run again: the whole
# takes about half an hour.
done_before() {
  if [ -e "$out/$1.done" ]; then
    echo "check-map-failures: $1 done before, kept ($out/$1.done)" >&2
    return 0
  fi
  return 1
}

# Each variant is expected to fail a check (exit 1): exit 0 means it showed nothing, and any other
# status that it could not run — either stops the recording, which would otherwise lose a source.
expect_failure() {
  local name=$1
  shift
  done_before "$name" && return 0
  local t=$SECONDS status=0
  "$@" >"$out/$name.log" 2>&1 || status=$?
  case $status in
    1) echo "check-map-failures: $name failed checks as it must ($((SECONDS - t)) s)" >&2
       touch "$out/$name.done" ;;
    0) echo "check-map-failures: $name passed: it shows no flaw; see $out/$name.log" >&2; exit 1 ;;
    *) echo "check-map-failures: $name could not run (exit $status); see $out/$name.log" >&2; exit 2 ;;
  esac
}

# The card passes (exit 0) when every design comes out as expected — the flawed ones unsafe, by
# the checks they fail, which are what is recorded; the sound ones safe, failing none.
if ! done_before grade; then
  t=$SECONDS
  "$lab" grade --evidence-dir "$out/grade" >"$out/grade.log" 2>&1 \
    || { echo "check-map-failures: lab grade did not come out as expected: see $out/grade.log" >&2; exit 1; }
  echo "check-map-failures: grade: every design as expected ($((SECONDS - t)) s)" >&2
  touch "$out/grade.done"
fi

# broken-holder.sh exits 0 when the run failed the checks that guard the deadline, as it must.
if ! done_before holder-skips-its-deadline-check; then
  t=$SECONDS
  scripts/broken-holder.sh "$out" >"$out/broken-holder.log" 2>&1 \
    || { echo "check-map-failures: scripts/broken-holder.sh: see $out/broken-holder.log" >&2; exit 2; }
  echo "check-map-failures: holder-skips-its-deadline-check failed its guarding checks as it must ($((SECONDS - t)) s)" >&2
  touch "$out/holder-skips-its-deadline-check.done"
fi

# A mutant of seed004's profile, written to FILE: the catalogue's text for ID replaced.
mutant() {
  python3 - "$1" "$2" <<'PY'
import subprocess, sys
mid, dst = sys.argv[1:3]
rows = subprocess.run([sys.executable, "scripts/sql-mutants-gen.py"], check=True,
                      capture_output=True, text=True).stdout.splitlines()
row = next((r for r in rows if r.split(" | ", 1)[0].strip() == mid), None)
if row is None:
    sys.exit(f"check-map-failures: no generated mutant {mid}")
_, file, frm, to, _ = [c.strip() for c in row.split(" | ", 4)]
frm, to = frm.replace("\\n", "\n"), to.replace("\\n", "\n")
src = open(file).read()
if src.count(frm) != 1:
    sys.exit(f"check-map-failures: {mid}'s text is not found once in {file}")
open(dst, "w").write(src.replace(frm, to))
PY
}
for id in seed004.lease.acquire.const.2 seed004.lease.acquire.refuse-insert.1 \
          seed004.lease.acquire.refuse.1 seed004.resource.write.check.refuse.1; do
  mutant "$id" "$out/$id.toml"
  expect_failure "f17-$id" "$lab" run --sut "$out/$id.toml" --only F17 \
    --evidence-dir "$out/f17-$id"
done

# The S-series (the databases' own locks) writes through the profile's fence too: two of its
# mutants, the floor's comparison dropped and the check refusing everyone, run through it.
for id in seed004.resource.write.check.drop-conjunct.1 seed004.resource.write.check.refuse.1; do
  mutant "$id" "$out/$id.toml"
  expect_failure "s-$id" "$lab" run --sut "$out/$id.toml" --only S1,S2,S3,S4,S5,S6 \
    --evidence-dir "$out/s-$id"
done

python3 - fencing/profiles/seed004.toml "$out/ttl-tenfold.toml" <<'PY'
import sys
src, dst = sys.argv[1:3]
s = open(src).read()
old = "VALUES (:name, :holder, 1, now() + make_interval(secs => :ttl_ms::float8 / 1000))"
if s.count(old) != 1:
    sys.exit(f"check-map-failures: the acquire's expiry is not found once in {src}")
open(dst, "w").write(s.replace(old, old.replace("/ 1000", "/ 100")))
PY
expect_failure ttl-tenfold-F8 "$lab" run --sut "$out/ttl-tenfold.toml" --only F8 \
  --evidence-dir "$out/ttl-tenfold-F8"

# Every event log under DIR: grade/…, holder-skips-its-deadline-check, f17-…, ttl-tenfold-F8.
inventory=$(mktemp -d /tmp/lab-check-map-inv.XXXXXX)
trap 'rm -rf "$inventory"; "$lab" clean >/dev/null 2>&1 || true' EXIT
# check-map.py needs a run to write a map; the records are what this script is for: written by
# --failures, the map left as it is (--out to a scratch file).
echo '{"event":"environment","environment":{}}' >"$inventory/events.jsonl"
python3 scripts/check-map.py "$inventory" --failures "$out" --out "$inventory/map.md" 2>/dev/null || true
echo "check-map-failures: $(($(wc -l <evidence/broken-checks.tsv) - 1)) failed checks recorded in evidence/broken-checks.tsv" >&2
