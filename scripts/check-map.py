#!/usr/bin/env python3
"""The check-level mutation map: for every check of a default run, which planted flaws
have been seen failing it — and, for each check never seen failing, why (a line of
scripts/check-map-argued.txt), or UNEXPLAINED.

A check is named by its experiment (the case id without its fenced-mode or lock-service suffix:
F4-fenced-single and F4-redis are F4) and its description with every number masked and the write
mode's name (fenced-scope, fenced-single, fenced-shared, sut) read as MODE — so that a check run
once per mode or store is one check, and one failing under any of them counts.

Where failures come from (each optional; missing ones are said, not silently skipped):
  evidence/mutant-checks.tsv   the generated SQL mutants' failed checks (scripts/mutants.sh --generated)
  evidence/store-mutant-checks.tsv  the lock services' own mutants' failed checks
                               (scripts/store-mutants-run.py)
  --failures DIR ...           the event logs (events.jsonl, searched below DIR) of runs of broken
                               variants: `lab grade` (its planted-flaw designs), a lock service
                               without a token (--lease-store redis-plain, zookeeper-suffix), a
                               --mode control of chaos; each failed check counts, named by DIR

The failures of the broken variants are kept in evidence/broken-checks.tsv (source, case, check
with digits masked), written by --failures (scripts/check-map-failures.sh runs the variants and
calls it), so that the map can be made again from the records the repository holds.

Usage: scripts/check-map.py RUN_DIR [--failures DIR ...] [--out evidence/check-map.md]
       scripts/check-map.py RUN_DIR --check
  RUN_DIR  the evidence of a default `lab run` (./run.sh): its events.jsonl is the inventory
  --check  writes nothing: fails when evidence/check-map.md is not the map this run and the
           records make — a check of the run missing from it, a check it names that the run no
           longer has, a check it places in the wrong section — and names each (CI runs it on
           its own default run)
Exit status: 0, or 1 when a check is neither seen failing nor argued (or, with --check, when the
map is not current).
"""
import argparse
import json
import re
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = re.compile(r"\b(fenced-scope|fenced-single|fenced-shared|sut)\b")


HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
# A hexadecimal number whose digits were masked already (a record's "NxNebN").
MASKED_HEX = re.compile(r"\bNx[0-9a-fA-FN]+\b")


def key(case, description):
    base = case.split("-")[0]
    masked = MASKED_HEX.sub("N", re.sub(r"\d+", "N", HEX.sub("N", description)))
    return base, MODES.sub("MODE", masked)


def checks_of(events):
    """(case, description, passed) of every check of an event log; a check the run waived (a
    note `n/a  DESCRIPTION — why`: U1's probe of a lease's last millisecond when no attempt landed
    in it) is there too, with `passed` None — the run has the check, it could not judge it."""
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "check":
            yield e.get("case", ""), e.get("description", ""), e.get("passed")
        elif e.get("event") == "note" and e.get("text", "").startswith("n/a  "):
            yield e.get("case", ""), e["text"][5:].rsplit(" — ", 1)[0], None


def argued():
    """[(case regex, check regex, why)] of scripts/check-map-argued.txt."""
    out = []
    path = ROOT / "scripts/check-map-argued.txt"
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) != 3:
            sys.exit(f"check-map: {path}:{n}: not `CASE | CHECK | why`: {line}")
        out.append((re.compile(parts[0]), re.compile(parts[1]), parts[2]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--failures", nargs="*", default=[])
    ap.add_argument("--out", default=str(ROOT / "evidence/check-map.md"))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    if a.check and a.failures:
        sys.exit("check-map: --check reads the recorded failures (evidence/broken-checks.tsv), not --failures")
    inventory = Path(a.run_dir) / "events.jsonl"
    if not inventory.exists():
        sys.exit(f"check-map: {inventory}: no such event log (run ./run.sh first)")
    env = {}
    for line in inventory.read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "environment":
            env = e.get("environment", {})
            break
    made_by = f"`{env.get('command_line', '?')}` at {env.get('git_revision', '?')}, {env.get('date', '?')[:16]}"
    checks = {}
    for case, desc, _ in checks_of(inventory):
        checks.setdefault(key(case, desc), (case, desc))

    seen = defaultdict(set)
    sources = []
    tsv = ROOT / "evidence/mutant-checks.tsv"
    if tsv.exists():
        rows = tsv.read_text().splitlines()[1:]
        mutants = set()
        for row in rows:
            mid, case, desc = row.split("\t", 2)
            seen[key(case, desc)].add(mid)
            mutants.add(mid)
        sources.append(f"{tsv.relative_to(ROOT)}: {len(rows)} failed checks of {len(mutants)} killed SQL mutants")
    else:
        sources.append(f"{tsv.relative_to(ROOT)}: missing (scripts/mutants.sh --generated writes it)")
    stores = ROOT / "evidence/store-mutant-checks.tsv"
    if stores.exists():
        rows = stores.read_text().splitlines()[1:]
        for row in rows:
            mid, case, desc = row.split("\t", 2)
            seen[key(case, desc)].add(mid)
        killed = {r.split("\t", 1)[0] for r in rows}
        sources.append(f"{stores.relative_to(ROOT)}: {len(rows)} failed checks of {len(killed)} killed mutants of the lock services' own code")
    else:
        sources.append(f"{stores.relative_to(ROOT)}: missing (scripts/store-mutants-run.py writes it)")
    broken = ROOT / "evidence/broken-checks.tsv"
    if a.failures:
        # The broken variants' failed checks, recorded for the next map.
        recorded = []
        for d in a.failures:
            for log in sorted(Path(d).rglob("events.jsonl")):
                name = str(log.parent.relative_to(Path(d)))
                for case, desc, passed in checks_of(log):
                    if passed is False:
                        masked = re.sub(r"\d+", "N", desc).replace("\t", " ")
                        recorded.append(f"{name}\t{case}\t{masked}")
        broken.write_text("source\tcase\tcheck (digits masked)\n" + "".join(f"{r}\n" for r in sorted(set(recorded))))
    if broken.exists():
        rows = broken.read_text().splitlines()[1:]
        for row in rows:
            source, case, desc = row.split("\t", 2)
            seen[key(case, desc)].add(source)
        runs = sorted({r.split("\t", 1)[0].split("/", 1)[0] for r in rows})
        sources.append(f"{broken.relative_to(ROOT)}: {len(rows)} failed checks of broken variants ({', '.join(runs)})")
    else:
        sources.append(f"{broken.relative_to(ROOT)}: missing (scripts/check-map-failures.sh writes it)")

    why = argued()
    rows_seen, rows_argued, rows_open = [], [], []
    for k, (case, desc) in sorted(checks.items()):
        if seen.get(k):
            by = sorted(seen[k])
            rows_seen.append(f"| {k[0]} | {desc.replace('|', '/')} | {len(by)}: {', '.join(by[:4])}{' …' if len(by) > 4 else ''} |")
            continue
        reason = next((w for c, d, w in why if c.fullmatch(k[0]) and d.search(desc)), None)
        if reason:
            rows_argued.append(f"| {k[0]} | {desc.replace('|', '/')} | {reason} |")
        else:
            rows_open.append(f"| {k[0]} | {desc.replace('|', '/')} | **UNEXPLAINED** |")

    text = [
        "# The check map",
        "",
        f"Every check of a default run ({made_by}: {len(checks)} checks, each",
        "experiment's fenced modes and lock services counted once), and whether a planted flaw has been",
        f"seen failing it. Made by scripts/check-map.py on {datetime.now(timezone.utc):%Y-%m-%d}. The failures read:",
        "",
        *[f"- {s}" for s in sources],
        "",
        f"**{len(checks)} checks: {len(rows_seen)} seen failing, {len(rows_argued)} argued "
        f"(scripts/check-map-argued.txt), {len(rows_open)} unexplained.**",
        "",
    ]
    if rows_open:
        text += ["## Never seen failing, not argued", "", "| experiment | check | |", "|---|---|---|", *rows_open, ""]
    text += ["## Never seen failing, argued", "", "| experiment | check | why it is not seen failing: no fault of the system under test can fail it, or the step where one fails first |", "|---|---|---|", *rows_argued, ""]
    text += ["## Seen failing", "", "| experiment | check | failed by |", "|---|---|---|", *rows_seen, ""]
    if a.check:
        return check_current(Path(a.out), rows_seen, rows_argued, rows_open)
    Path(a.out).write_text("\n".join(text))
    print(f"check-map: {len(checks)} checks: {len(rows_seen)} seen failing, {len(rows_argued)} argued, "
          f"{len(rows_open)} unexplained; {a.out}", file=sys.stderr)
    return 1 if rows_open else 0


def placed(rows, section):
    """{(experiment, masked check): section} of map rows `| experiment | check | … |`."""
    out = {}
    for r in rows:
        cells = [c.strip() for c in r.strip().strip("|").split("|")]
        if len(cells) >= 2:
            out[key(cells[0], cells[1])] = section
    return out


def check_current(path, rows_seen, rows_argued, rows_open):
    """0 when the map at `path` places every check as this run and the records do; 1, naming
    what differs, otherwise."""
    want = {**placed(rows_seen, "seen failing"), **placed(rows_argued, "argued"),
            **placed(rows_open, "UNEXPLAINED")}
    have, section = {}, None
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            section = {"## Seen failing": "seen failing", "## Never seen failing, argued": "argued",
                       "## Never seen failing, not argued": "UNEXPLAINED"}.get(line.strip())
        elif section and line.startswith("| ") and not line.startswith("| experiment |"):
            have.update(placed([line], section))
    missing = sorted(k for k in want if k not in have)
    gone = sorted(k for k in have if k not in want)
    moved = sorted(k for k in want if k in have and want[k] != have[k])
    for k in missing:
        print(f"check-map: missing from the map: {k[0]} | {k[1]} ({want[k]})", file=sys.stderr)
    for k in gone:
        print(f"check-map: the map names a check the run no longer has: {k[0]} | {k[1]}", file=sys.stderr)
    for k in moved:
        print(f"check-map: the map says {have[k]}, the records say {want[k]}: {k[0]} | {k[1]}", file=sys.stderr)
    if rows_open:
        print(f"check-map: {len(rows_open)} check(s) neither seen failing nor argued", file=sys.stderr)
    if missing or gone or moved or rows_open:
        print(f"check-map: {path} is not current ({len(missing)} missing, {len(gone)} gone, "
              f"{len(moved)} placed otherwise, {len(rows_open)} unexplained): make it again with "
              "scripts/check-map.py RUN_DIR (scripts/check-map-failures.sh first if the broken "
              "variants' records are stale)", file=sys.stderr)
        return 1
    print(f"check-map: {path} is current: {len(want)} checks, {len(rows_seen)} seen failing, "
          f"{len(rows_argued)} argued", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
