#!/usr/bin/env bash
# The gate's own gate, in two parts.
#
# 1. The SQL catalogue (scripts/sql-mutants.txt — a fence condition dropped, `<=` made `<`, no
#    token bump, expiry ignored, an early takeover, a renew after expiry, a release that resets
#    the token, each join condition of the completion): each mutant applied to a scratch copy of
#    this checkout's HEAD, built, and run through the lab's gates — the full `lab run` (every
#    fence-dependent experiment with both fenced modes), a seeded chaos run, and the system under
#    test's own cargo tests. A baseline of the unmutated copy must pass every gate first.
#    → evidence/mutants.md, the kill matrix (mutant × what caught it).
# 2. cargo-mutants (crates.io; installed with `cargo install --locked` when missing) on
#    fencing: pass one tests each mutant with the system under test's own tests
#    (`cargo test -p fencing`, real PostgreSQL and MariaDB); pass two takes every mutant pass one
#    missed, applies its diff to a scratch copy of HEAD and runs the lab's gates on it (the full
#    `lab run` and the seeded chaos run). → evidence/cargo-mutants.md.
#
# 3. --generated: the SQL mutants scripts/sql-mutants-gen.py generates by operator from every
#    statement of the built-in profiles (141 without the refuse operators, 175 with them), each run as the system under test —
#    `lab run --sut MUTANT`, then `lab chaos --sut MUTANT` — by scripts/sql-mutants-run.py on the
#    lab built once: a profile needs no build. → the generated section of evidence/mutants.md,
#    evidence/mutant-checks.tsv (every check each mutant failed). About 40 s a mutant here.
#
# Usage: scripts/mutants.sh [--sql-only | --cargo-only] [--only ID,ID] [--chaos-time 30s]
#                           [--cargo-out DIR] [--catalogue FILE]
#        scripts/mutants.sh --generated [--only ID,ID] [--chaos-time 30s] [--resume [--again-survivors | --again]]
#                                       [--parallel N]
#   --catalogue FILE  the SQL mutants to run instead of scripts/sql-mutants.txt — e.g. the ones
#                     scripts/sql-mutants-gen.py generates by operator from every statement
#                     (`scripts/sql-mutants-gen.py > gen.txt; scripts/mutants.sh --sql-only
#                     --catalogue gen.txt`); a literal \n in a text stands for a newline.
#   --cargo-out DIR  reuse (or keep) pass one's output in DIR instead of running it again.
# On 2 cores: about 3 minutes per SQL mutant; pass one about 30 s per mutant (184 mutants),
# pass two about 2 minutes per mutant it takes (seconds for one of the U-series' store, which
# only the U-series runs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
only=""
chaos_time=30s
sql=1
cargo_part=1
cargo_out=""
catalogue=scripts/sql-mutants.txt
generated=0
resume=""
while [ $# -gt 0 ]; do
  case "$1" in
    --generated) generated=1; shift ;;
    --resume) resume="$resume --resume"; shift ;;
    --again-survivors) resume="$resume --again-survivors"; shift ;;
    --again) resume="$resume --again"; shift ;;
    --parallel) resume="$resume --parallel $2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --chaos-time) chaos_time="$2"; shift 2 ;;
    --sql-only) cargo_part=0; shift ;;
    --cargo-only) sql=0; shift ;;
    --cargo-out) cargo_out="$2"; shift 2 ;;
    --catalogue) catalogue="$2"; shift 2 ;;
    *) echo "usage: scripts/mutants.sh [--sql-only | --cargo-only] [--only ID,ID] [--chaos-time 30s] [--cargo-out DIR] [--catalogue FILE]" >&2
       echo "       scripts/mutants.sh --generated [--only ID,ID] [--chaos-time 30s] [--resume [--again-survivors | --again]]" >&2
       exit 2 ;;
  esac
done
scripts/ensure-postgres.sh
scripts/ensure-faketime.sh
features=$(scripts/ensure-mariadb.sh)
if [ "$generated" = 1 ]; then
  # The lab as ./run.sh builds it (F15 and F16 need the containers feature), from this checkout.
  all=$(echo "$features $(scripts/ensure-containers.sh)" | grep -oE 'lab/[a-z-]+|scenarios/[a-z-]+|holder/[a-z-]+' | paste -sd, -)
  echo "mutants: building the lab (${all:-no features})" >&2
  cargo build --quiet -p lab -p holder ${all:+--features "$all"}
fi
work=$(mktemp -d /tmp/lab-mutants.XXXXXX)
trap 'rm -rf "$work"' EXIT
export CARGO_TARGET_DIR="$root/target/mutants"
head_rev=$(git rev-parse --short HEAD)
if [ "$generated" = 1 ]; then
  # A copy of the lab and its holder: a build meanwhile does not change them under the run.
  mkdir -p "$work/bin"
  cp target/debug/lab target/debug/holder "$work/bin/"
  status=0
  python3 scripts/sql-mutants-run.py "$work/bin/lab" ${only:+--only "$only"} --chaos-time "$chaos_time" $resume || status=$?
  exit "$status"
fi

# Failed experiments of a `lab run`, from its event log: "F2,F4-fenced-single" (or "").
failed_cases() {
  grep '"passed":false' "$1/events.jsonl" 2>/dev/null \
    | grep -oE '"case":"[A-Z][0-9]+(-[a-z-]+)?"' | cut -d'"' -f4 | sort -u | paste -sd, - || true
}

# The lab's gates on the copy in $1 (evidence under $2): two cells, run | chaos. With $3, the
# run is `lab run --only $3` and there is no chaos run: the mutant's code has no other caller.
lab_gates() {
  local copy=$1 ev=$2 only=${3:-} bin="$CARGO_TARGET_DIR/debug"
  # shellcheck disable=SC2086 # $features is empty or one flag
  (cd "$copy" && cargo build --quiet -p lab -p holder $features) >"$ev/build.log" 2>&1 \
    || { echo "build failed | build failed"; return; }
  local run chaos
  if timeout 900 "$bin/lab" run ${only:+--only "$only"} --evidence-dir "$ev/run" >"$ev/run.out" 2>&1
  then run="passed${only:+ (--only $only)}"
  else run="killed ($(failed_cases "$ev/run"))"; fi
  # Pass two needs one kill: the rest is not run once the lab run killed the mutant.
  if [ "${short_circuit:-0}" = 1 ] && [ "${run#killed}" != "$run" ]; then
    echo "$run | not needed"
    return
  fi
  if [ -n "$only" ]; then
    echo "$run | not run (only the U-series calls this code)"
    return
  fi
  timeout 600 "$bin/lab" chaos --seed 1 --time "$chaos_time" --evidence-dir "$ev/chaos" \
    >"$ev/chaos.out" 2>&1 || true
  # The checker's verdict at the scope under test (its control failing is not a kill).
  local broken
  broken=$(grep '^  FAIL' "$ev/chaos.out" | grep -v 'negative control' \
    | sed -E 's/^  FAIL +([^:]*):.*/\1/' | paste -sd, - || true)
  if [ -n "$broken" ]; then chaos="killed ($broken)"
  elif grep -q '^SUMMARY' "$ev/chaos.out"; then chaos="passed"
  else chaos="could not run"; fi
  echo "$run | $chaos"
}

# Every gate on the copy in $1 ($3 as for lab_gates): three cells, run | chaos | cargo test.
gates() {
  local copy=$1 ev=$2 cells tests own=""
  cells=$(lab_gates "$copy" "$ev" "${3:-}")
  if [ "${short_circuit:-0}" = 1 ] && echo "$cells" | grep -q killed; then
    echo "$cells | not needed"
    return
  fi
  # The system under test's own tests (its MariaDB ones when MariaDB is here).
  [ -n "$features" ] && own="--features fencing/mariadb"
  # shellcheck disable=SC2086
  if (cd "$copy" && timeout 900 cargo test --quiet --locked -p fencing $own) \
      >"$ev/test.out" 2>&1; then tests="passed"
  else tests="killed"; fi
  echo "$cells | $tests"
}

# The commit the run started at, whatever is committed meanwhile.
copy_of_head() {
  mkdir -p "$1"
  git -C "$root" archive "$head_rev" | tar -x -C "$1"
}

status=0
if [ "$sql" = 1 ]; then
  out="$root/evidence/mutants.md"
  rows=""
  echo "mutants: baseline (HEAD unmutated)" >&2
  mkdir -p "$work/baseline"
  copy_of_head "$work/baseline/src"
  baseline=$(gates "$work/baseline/src" "$work/baseline")
  echo "  $baseline" >&2
  if [ "$baseline" != "passed | passed | passed" ]; then
    echo "mutants: the unmutated baseline does not pass every gate ($baseline); see $work/baseline (kept)" >&2
    trap - EXIT
    exit 1
  fi
  rm -rf "$work/baseline"
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
    # A literal \n in a catalogue's text stands for a newline (a text widened to be unique).
    if [ "$(FROM="$from" perl -0ne '($f = $ENV{FROM}) =~ s/\\n/\n/g; $n = () = /\Q$f\E/g; print $n' "$target")" != 1 ]; then
      echo "mutants: $id: the text is not found exactly once in $file; fix $catalogue" >&2
      exit 2
    fi
    FROM="$from" TO="$to" perl -0pi -e '($f = $ENV{FROM}) =~ s/\\n/\n/g; ($t = $ENV{TO}) =~ s/\\n/\n/g; s/\Q$f\E/$t/' "$target"
    echo "mutants: $id ($what)" >&2
    cells=$(gates "$dir/src" "$dir")
    echo "  $cells" >&2
    # Killed by the lab itself: ./run.sh or the chaos run (the cargo tests are shown beside).
    lab_cells=$(echo "$cells" | cut -d'|' -f1-2)
    if echo "$lab_cells" | grep -q killed; then verdict="killed"; killed=$((killed + 1))
    else verdict="**SURVIVED**"; fi
    rows+="| $id | $what | $cells | $verdict |"$'\n'
    rm -rf "$dir"
  done < "$catalogue"

  {
    echo "# Mutation testing: the SQL catalogue"
    echo
    echo "Each mutant of $catalogue applied to a copy of $head_rev, built and run through"
    echo "every gate; a cell says which experiments (or checks) failed on it. A mutant counts as killed"
    echo "when \`./run.sh\` (every experiment, each fence-dependent one with every fenced mode) or the"
    echo "chaos run kills it; \`cargo test -p fencing\` is shown beside. Made by scripts/mutants.sh on"
    echo "$(date -u +%Y-%m-%d). cargo-mutants' mutants of fencing: cargo-mutants.md."
    echo
    echo "| mutant | what it breaks | ./run.sh (F, U) | chaos --seed 1 --time $chaos_time | cargo test -p fencing | verdict |"
    echo "|---|---|---|---|---|---|"
    printf '%s' "$rows"
    echo
    echo "$killed of $total mutants killed by ./run.sh and the chaos run."
  } >"$out"
  echo "mutants: $killed of $total SQL mutants killed; the matrix is in $out" >&2
  [ "$killed" = "$total" ] || status=1
fi

if [ "$cargo_part" = 1 ]; then
  command -v cargo-mutants >/dev/null || cargo install --locked cargo-mutants
  own=""
  [ -n "$features" ] && own="--features mariadb"
  pass1=${cargo_out:-$work/cargo-mutants}
  if [ ! -f "$pass1/mutants.out/outcomes.json" ] \
      || ! python3 -c "import json,sys; sys.exit(0 if json.load(open('$pass1/mutants.out/outcomes.json')).get('end_time') else 1)"; then
    echo "mutants: cargo-mutants pass one on fencing (its own tests) into $pass1" >&2
    mkdir -p "$pass1"
    # A missed mutant is not an error here: pass two takes it.
    # shellcheck disable=SC2086
    (unset CARGO_TARGET_DIR; cargo mutants -p fencing $own --test-package fencing -j 1 \
      --no-shuffle --output "$pass1") >"$pass1/run.log" 2>&1 || true
  fi
  outcomes="$pass1/mutants.out/outcomes.json"
  # name <TAB> summary <TAB> diff path, one line per mutant
  python3 - "$outcomes" >"$work/outcomes.tsv" <<'EOF'
import json, sys
for o in json.load(open(sys.argv[1]))["outcomes"]:
    m = o["scenario"]
    if not isinstance(m, dict) or "Mutant" not in m:
        continue
    print("\t".join([m["Mutant"]["name"], o["summary"], o.get("diff_path") or ""]))
EOF
  total=$(wc -l <"$work/outcomes.tsv")
  caught=$(grep -c $'\tCaughtMutant\t' "$work/outcomes.tsv" || true)
  unviable=$(grep -c $'\tUnviable\t' "$work/outcomes.tsv" || true)
  timeouts=$(grep -c $'\tTimeout\t' "$work/outcomes.tsv" || true)
  rows=""
  killed2=0 survived=0 equivalent=0 gone=0
  # One copy for every mutant (each diff applied, then undone): cargo rebuilds only what a
  # mutant touched. Verdicts are kept in $pass1/pass2.tsv, so that a run cut short resumes.
  dir="$work/cm"
  mkdir -p "$dir"
  copy_of_head "$dir/src"
  cache="$pass1/pass2.tsv"
  touch "$cache"
  short_circuit=1
  while IFS=$'\t' read -r name summary diff; do
    [ "$summary" = "MissedMutant" ] || continue
    file=${name%%:*}
    cp "$dir/src/$file" "$dir/original"
    if ! scripts/apply-mutant.py "$dir/src/$file" "$pass1/mutants.out/$diff"; then
      cp "$dir/original" "$dir/src/$file"
      rows+="| \`$name\` | the diff no longer applies to $head_rev (the code was changed or removed since pass one) | - | - | gone |"$'\n'
      gone=$((gone + 1))
      continue
    fi
    echo "mutants: $name" >&2
    cells=$(awk -F'\t' -v n="$name" '$1 == n { print $2 }' "$cache" | head -1)
    if [ -z "$cells" ]; then
      # The fenced job lease (seed000's statements, the store that runs them) is the
      # U-series' (and the holder's for U2): nothing else runs it.
      only=""
      case "$file" in
        fencing/src/fenced_job.rs | fencing/profiles/seed000.toml) only=U1,U2,U3,U4,U5 ;;
      esac
      rm -rf "$dir/run" "$dir/chaos"
      cells=$(gates "$dir/src" "$dir" "$only")
      printf '%s\t%s\n' "$name" "$cells" >>"$cache"
    fi
    cp "$dir/original" "$dir/src/$file"
    echo "  $cells" >&2
    argued=$(awk -F' [|] ' -v n="$name" '$1 == n { print $2 }' scripts/equivalent-mutants.txt)
    if echo "$cells" | grep -q killed; then verdict="killed"; killed2=$((killed2 + 1))
    elif [ -n "$argued" ]; then verdict="equivalent: $argued"; equivalent=$((equivalent + 1))
    else verdict="**SURVIVED**"; survived=$((survived + 1)); fi
    rows+="| \`$name\` | $cells | $verdict |"$'\n'
  done <"$work/outcomes.tsv"
  {
    echo "# Mutation testing: cargo-mutants on fencing"
    echo
    echo "$(python3 -c "import json; print(json.load(open('$outcomes'))['cargo_mutants_version'])" 2>/dev/null \
      | sed 's/^/cargo-mutants /'), on the system under test at $head_rev, made by scripts/mutants.sh on"
    echo "$(date -u +%Y-%m-%d). Pass one tested every mutant with the system under test's own tests"
    echo "(\`cargo test -p fencing\`, real PostgreSQL and MariaDB): of $total mutants, $caught caught,"
    echo "$unviable unviable (do not build), $timeouts timed out, and the rest missed. Pass two ran"
    echo "each missed mutant through the lab's gates — the full \`lab run\` (the U-series only for"
    echo "the U-series' store) and the seeded chaos run — and the cargo tests again, as they are at"
    echo "$head_rev (a test added since pass one counts)."
    echo
    echo "| mutant (missed by cargo test -p fencing in pass one) | ./run.sh (F, U) | chaos --seed 1 --time $chaos_time | cargo test -p fencing | verdict |"
    echo "|---|---|---|---|---|"
    printf '%s' "$rows"
    echo
    viable=$((total - unviable - gone))
    done_=$((caught + timeouts + killed2 + equivalent))
    echo "Killed or argued equivalent: $done_ of $viable viable mutants ($((100 * done_ / viable)) %): $caught by"
    echo "the cargo tests, $timeouts by timing out, $killed2 in pass two, $equivalent argued equivalent"
    echo "(scripts/equivalent-mutants.txt, one line each); $survived survived. $gone missed in pass one are"
    echo "gone: their code was changed or removed since (counted neither way)."
  } >"$root/evidence/cargo-mutants.md"
  echo "mutants: cargo-mutants: $caught caught by cargo test, $killed2 more by the lab, $equivalent argued equivalent, $survived survived; evidence/cargo-mutants.md" >&2
fi
exit "$status"
