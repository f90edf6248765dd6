#!/usr/bin/env python3
"""The gate: the smallest set of experiments that still kills every planted bug the mutation map
records — each mutant of scripts/sql-mutants.txt (evidence/mutants.md, the catalogue's table:
which cases of `./run.sh` failed on it) and each broken variant of the lab's code, by the
experiments whose guarding check it was recorded failing (evidence/broken-checks.tsv:
scripts/broken-holder.sh). Computed, not chosen:

    scripts/gate.py            prints the gate's experiment ids, comma-separated, and why
    scripts/gate.py --write    writes them to lab/src/gate.txt, which `lab run --gate` runs

A case id names an experiment and, after it, a fenced mode (`F6-fenced-shared`); `lab run --only
F6` runs the experiment in every fenced mode, so the gate names experiments and runs each in all
of its modes. The set is a minimum set cover over experiments (exhaustive: the universe is small),
ties broken by fewer experiments that need a second server, then by id. A mutant only the chaos
run killed cannot be gated by experiments: the script says so and fails."""
import itertools
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "evidence/mutants.md"
BROKEN_CHECKS = ROOT / "evidence/broken-checks.tsv"
GATE = ROOT / "lab/src/gate.txt"


def experiment(case):
    """`F6-fenced-shared` → `F6`."""
    return re.match(r"[A-Z]+\d+", case).group(0)


def catalogue():
    """{mutant: set of experiments that killed it} from the catalogue's table."""
    kills = {}
    text = MUTANTS.read_text()
    table = text.split("<!-- generated SQL mutants")[0]
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 6 or cells[0] in ("mutant", "---"):
            continue
        m = re.match(r"killed \(([^)]*)\)", cells[2])
        kills[cells[0]] = {experiment(c) for c in m.group(1).split(",")} if m else set()
    return kills


# The broken variants of the lab's code, by the source name their failed checks are recorded
# under in evidence/broken-checks.tsv (scripts/check-map-failures.sh), and the checks that guard
# against each: a kill counts on those alone (what the variant's own script requires).
BROKEN = {
    "holder-skips-its-deadline-check": ("scripts/broken-holder.sh", re.compile(r"deadline passed")),
}


def broken_variants():
    """{variant: experiments whose guarding check it was seen failing} from the recorded failures."""
    seen = {}
    for row in BROKEN_CHECKS.read_text().splitlines()[1:]:
        source, case, check = row.split("\t", 2)
        variant = BROKEN.get(source.split("/", 1)[0])
        if variant and variant[1].search(check):
            seen.setdefault(variant[0], set()).add(experiment(case))
    missing = sorted(v for v, _ in BROKEN.values() if v not in seen)
    if missing:
        sys.exit(f"gate: no guarding check recorded failing for {', '.join(missing)} in {BROKEN_CHECKS}")
    return seen


def main():
    planted = catalogue()
    planted.update(broken_variants())
    if not planted:
        sys.exit("gate: no mutation map found (evidence/mutants.md, evidence/broken-checks.tsv)")
    unkillable = sorted(m for m, e in planted.items() if not e)
    if unkillable:
        sys.exit(f"gate: killed by no experiment (only chaos, or not at all): {', '.join(unkillable)}")
    experiments = sorted({e for es in planted.values() for e in es},
                         key=lambda e: (e[0], int(re.sub(r"\D", "", e))))
    # Containers (F14–F17) and MariaDB (U) need a second server: prefer the embedded ones.
    def cost(ids):
        heavy = sum(1 for e in ids if e[0] == "U" or int(re.sub(r"\D", "", e)) >= 14)
        return (len(ids), heavy, ids)

    best = None
    for n in range(1, len(experiments) + 1):
        for ids in itertools.combinations(experiments, n):
            if all(planted[m] & set(ids) for m in planted):
                if best is None or cost(ids) < cost(best):
                    best = ids
        if best:
            break
    gate = ",".join(best)
    for m in sorted(planted):
        by = sorted(planted[m] & set(best))
        print(f"  {m}: killed by {', '.join(by)}", file=sys.stderr)
    print(f"gate: {len(best)} experiments kill all {len(planted)} planted bugs", file=sys.stderr)
    if "--write" in sys.argv[1:]:
        GATE.write_text(gate + "\n")
        print(f"gate: wrote {GATE.relative_to(ROOT)}", file=sys.stderr)
    print(gate)


main()
