#!/usr/bin/env bash
# A broken variant of the lab's holder for the check map (scripts/check-map.py --failures): the
# holder's local-deadline check made `if false` (it never stops itself), built from a scratch copy
# of this checkout's HEAD, run through the experiments that show the check — F10 (paused before
# it), F13 (a slow clock), F16 (partitioned from the lease store). Their event logs go to
# DIR/holder-skips-its-deadline-check; the run is expected to fail a check (that is the point):
# exit 0 when it did — on the checks that guard the deadline, each named — 1 when it passed or
# failed only elsewhere, 2 when the broken holder could not be built or run.
# With ONLY (e.g. `--gate`, or `--only F10`), those experiments instead (scripts/gate-check.sh).
#
# Usage: scripts/broken-holder.sh DIR [ONLY...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/broken-holder.sh DIR [ONLY...]}
shift
only=("$@")
[ ${#only[@]} -gt 0 ] || only=(--only F10,F13,F16)
root=$(pwd)
features=$(echo "$(scripts/ensure-mariadb.sh) $(scripts/ensure-containers.sh)" \
  | grep -oE 'lab/[a-z-]+|scenarios/[a-z-]+|holder/[a-z-]+' | paste -sd, -)
work=$(mktemp -d /tmp/lab-broken-holder.XXXXXX)
trap 'rm -rf "$work"' EXIT
git archive HEAD | tar -x -C "$work"
python3 - "$work/holder/src/main.rs" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
old = "    if now >= deadline {"
if s.count(old) != 1:
    sys.exit(f"broken-holder: the local-deadline check is not found once in {p}")
open(p, "w").write(s.replace(old, "    if false {"))
PY
(cd "$work" && CARGO_TARGET_DIR="$root/target/variant" cargo build --quiet -p lab -p holder ${features:+--features "$features"}) \
  || { echo "broken-holder: the broken holder did not build" >&2; exit 2; }
lab="$root/target/variant/debug/lab"
status=0
(cd "$work" && "$lab" run "${only[@]}" --evidence-dir "$out/holder-skips-its-deadline-check") || status=$?
"$lab" clean >/dev/null 2>&1 || true
if [ "$status" = 0 ]; then
  echo "broken-holder: ${only[*]} passed with a holder that skips its deadline check: they do not show it" >&2
  exit 1
fi
# Exit 1 is a check that failed; any other status is a lab that could not run (exit 2) or was
# stopped — not the broken holder shown.
if [ "$status" != 1 ]; then
  echo "broken-holder: the lab did not run the experiments through (exit $status); see $out/holder-skips-its-deadline-check" >&2
  exit 2
fi
# A failed check is not enough: the checks that guard the local deadline must be the ones that
# failed — each experiment's "… finds its (local) deadline passed …" check,
# which a holder that never stops itself cannot pass. An abort or another experiment's failure
# elsewhere in the run shows nothing about this flaw.
python3 - "$out/holder-skips-its-deadline-check/events.jsonl" "${only[*]}" <<'PY' || exit 1
import json, re, sys
log, only = sys.argv[1], sys.argv[2]
guard = re.compile(r"deadline passed")
failed, judged = {}, set()
for line in open(log):
    e = json.loads(line)
    if e.get("event") != "check":
        continue
    case = e.get("case", "").split("-")[0]
    if guard.search(e.get("description", "")):
        judged.add(case)
        if e.get("passed") is False:
            failed.setdefault(case, e["description"])
# The default experiments each have a guard; a custom ONLY (the gate) needs one somewhere.
want = {"F10", "F13", "F16"} if only == "--only F10,F13,F16" else judged
missing = sorted(want - set(failed)) if want else ["any experiment"]
if missing:
    sys.exit(f"broken-holder: the guarding check (a 'deadline passed' check) did not fail in "
             f"{', '.join(missing)}: the run failed elsewhere, which does not show this flaw")
for case, desc in sorted(failed.items()):
    print(f"broken-holder: {case}: FAIL {desc}", file=sys.stderr)
PY
echo "broken-holder: failed as it must (exit $status), on the guarding checks; event logs in $out/holder-skips-its-deadline-check" >&2
