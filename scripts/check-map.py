#!/usr/bin/env python3
"""The check-level mutation map (issue 30): for every check of a default run, which planted flaws
have been seen failing it — and, for each check never seen failing, why (a line of
scripts/check-map-argued.txt), or UNEXPLAINED.

A check is named by its experiment (the case id without its fenced-mode or lock-service suffix:
F4-fenced-single and F4-redis are F4) and its description with every number masked and the write
mode's name (fenced-scope, fenced-single, fenced-shared, sut) read as MODE — so that a check run
once per mode or store is one check, and one failing under any of them counts.

Where failures come from (each optional; missing ones are said, not silently skipped):
  evidence/mutant-checks.tsv   the generated SQL mutants' failed checks (scripts/mutants.sh --generated)
  --failures DIR ...           the event logs (events.jsonl, searched below DIR) of runs of broken
                               variants: `lab grade` (its planted-flaw designs), a lock service
                               without a token (--lease-store redis-plain, zookeeper-suffix), a
                               --mode control of chaos; each failed check counts, named by DIR

Usage: scripts/check-map.py RUN_DIR [--failures DIR ...] [--out evidence/check-map.md]
  RUN_DIR  the evidence of a default `lab run` (./run.sh): its events.jsonl is the inventory
Exit status: 0, or 1 when a check is neither seen failing nor argued.
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


def key(case, description):
    base = case.split("-")[0]
    return base, MODES.sub("MODE", re.sub(r"\d+", "N", description))


def checks_of(events):
    """(case, description, passed, waived?) of every check of an event log."""
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "check":
            yield e.get("case", ""), e.get("description", ""), e.get("passed")


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
    a = ap.parse_args()
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
    for d in a.failures:
        logs = sorted(Path(d).rglob("events.jsonl"))
        n = 0
        for log in logs:
            name = str(log.parent.relative_to(Path(d).parent))
            for case, desc, passed in checks_of(log):
                if passed is False:
                    seen[key(case, desc)].add(name)
                    n += 1
        runs = sorted({log.relative_to(Path(d)).parts[0] for log in logs})
        sources.append(f"{d}: {n} failed checks in {len(logs)} event logs ({', '.join(runs)})")

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
    Path(a.out).write_text("\n".join(text))
    print(f"check-map: {len(checks)} checks: {len(rows_seen)} seen failing, {len(rows_argued)} argued, "
          f"{len(rows_open)} unexplained; {a.out}", file=sys.stderr)
    return 1 if rows_open else 0


if __name__ == "__main__":
    sys.exit(main())
