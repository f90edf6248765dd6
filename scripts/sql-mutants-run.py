#!/usr/bin/env python3
"""Runs the SQL mutants scripts/sql-mutants-gen.py generates, each as the system under test.

A mutant of a built-in profile is a profile: it needs no build. Each one is written to a file
of its own and run through the gate a profile's author runs — `lab run --sut FILE` (every
experiment that reads the profile), then, for a PostgreSQL profile the run did not kill, the
seeded chaos run `lab chaos --sut FILE`. A mutant the lab's profile check refuses (its SQL does
not prepare) is killed by that check. What survives both is looked up in
scripts/equivalent-mutants.txt (one line each: the mutant's id | why no run can tell it apart);
the rest is a survivor, and the exit status is 1.

Each profile, unmutated, must pass the same gate first (the baseline), or nothing is judged.

Writes, as it goes (a run cut short keeps what it judged, and resumes with --resume):
  evidence/mutants.md        the section between the markers below: one row per mutant
  evidence/mutant-checks.tsv every check each mutant's run failed: mutant, case, check
                             (digits masked), for the check map

Called by `scripts/mutants.sh --generated` with the lab built; by hand:
  scripts/sql-mutants-run.py LAB_BIN [--only ID,ID] [--chaos-time 30s] [--resume [--again | --again-survivors]]
"""
import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "fencing/profiles"
BEGIN = "<!-- generated SQL mutants: scripts/mutants.sh --generated writes from here -->"
END = "<!-- generated SQL mutants: to here -->"
# The experiments that read a PostgreSQL profile (its lease statements or its fence), but F17:
# the Patroni failover takes about 150 s a run here, and what it adds to the profile's gate —
# the same statements on a Patroni leader — F14 asks on a streaming standby in 6 s.
PG_ONLY = "F1,F2,F3,F4,F5,F6,F7,F8,F9,F10,F11,F12,F13,F14,F15,F16"
# A MariaDB job-lease profile: the U-series runs it, nothing else does.
JOB_ONLY = "U1,U2,U3,U4,U5"


def catalogue():
    """(id, profile name, from, to, what) of every generated mutant."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/sql-mutants-gen.py")],
        check=True, capture_output=True, text=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        mid, file, frm, to, what = [c.strip() for c in line.split(" | ", 4)]
        rows.append((mid, Path(file).stem, frm.replace("\\n", "\n"), to.replace("\\n", "\n"), what))
    return rows


def is_job(name):
    return 'dialect = "mariadb"' in (PROFILES / f"{name}.toml").read_text()


def lab_call(argv, timeout):
    """(exit status, stdout, stderr) of a lab command; one that outlives `timeout` is
    interrupted as Ctrl-C would (the lab then stops its clusters and holders), exit None."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate()
        return None, out, err


def failed_checks(evidence):
    """(case, check) of every failed check of a run's event log."""
    out = []
    path = evidence / "events.jsonl"
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "check" and e.get("passed") is False:
            out.append((e.get("case", ""), e.get("description", "")))
    return out


def run_gate(lab, profile_file, only, evidence):
    """(cell, failed checks): the `lab run --sut` cell of the table."""
    rc, out, err = lab_call(
        [lab, "run", "--sut", str(profile_file), "--only", only, "--evidence-dir", str(evidence)],
        1200,
    )
    (evidence.parent / f"{evidence.name}.out").write_text(out + err)
    if rc != 0:
        # A failing run keeps its clusters for a look inside: not here, a mutant at a time.
        subprocess.run([lab, "clean"], capture_output=True)
    if rc is None:
        return "killed (the run did not end within 1200 s: a hang)", failed_checks(evidence)
    if rc == 0:
        return "passed", []
    checks = failed_checks(evidence)
    if rc == 1 and checks:
        cases = sorted({c for c, _ in checks}, key=lambda c: (len(c), c))
        return f"killed ({','.join(cases)})", checks
    refused = [l for l in err.splitlines() if "--sut" in l]
    if refused:
        return f"refused by the profile check ({refused[0].strip()[:140]})", []
    tail = (err.strip().splitlines() or ["no output"])[-1]
    return f"could not run (exit {rc}: {tail[:140]})", []


def run_chaos(lab, profile_file, chaos_time, evidence):
    rc, out, err = lab_call(
        [lab, "chaos", "--sut", str(profile_file), "--seed", "1", "--time", chaos_time,
         "--evidence-dir", str(evidence)],
        900,
    )
    (evidence.parent / f"{evidence.name}.out").write_text(out + err)
    if rc != 0:
        subprocess.run([lab, "clean"], capture_output=True)
    if rc is None:
        return "killed (the chaos run did not end within 900 s: a hang)"
    broken = [
        re.sub(r"^  FAIL +([^:(]*).*", r"\1", l).strip()
        for l in out.splitlines()
        if l.startswith("  FAIL") and "negative control" not in l
    ]
    if broken:
        return f"killed ({'; '.join(broken)})"
    if "SUMMARY" in out:
        return "passed"
    tail = (err.strip().splitlines() or ["no output"])[-1]
    return f"could not run ({tail[:140]})"


def equivalents():
    path = ROOT / "scripts/equivalent-mutants.txt"
    argued = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#") and " | " in line:
            name, why = line.split(" | ", 1)
            argued[name.strip()] = why.strip()
    return argued


def mask(text):
    return re.sub(r"\d+", "N", text)


def write_section(rows, head, chaos_time, totals):
    path = ROOT / "evidence/mutants.md"
    text = path.read_text() if path.exists() else ""
    if BEGIN in text:
        text = text[: text.index(BEGIN)].rstrip() + "\n"
    killed, argued, survived, pending = totals
    lines = [
        BEGIN,
        "",
        "## The SQL mutants generated by operator",
        "",
        "scripts/sql-mutants-gen.py mutates every statement of the built-in profiles line by line — each",
        "WHERE/ON conjunct dropped, each comparison flipped, each SET assignment dropped, each",
        "arithmetic constant moved by one — and scripts/mutants.sh --generated runs each mutant as the",
        "system under test, the gate a profile's author runs: `lab run --sut MUTANT` (a PostgreSQL",
        f"profile: {PG_ONLY}; seed000, on MariaDB: {JOB_ONLY}), then, when that passes, `lab chaos --sut",
        f"MUTANT --seed 1 --time {chaos_time}`. The profile check refusing a mutant's SQL kills it too.",
        "Each profile, unmutated, passed the same gate first. A survivor is argued equivalent in",
        "scripts/equivalent-mutants.txt or it fails this gate. Which checks each run failed:",
        f"evidence/mutant-checks.tsv. Last run on {datetime.now(timezone.utc):%Y-%m-%d} at {head}; a resumed",
        "run (--resume) keeps the verdicts before it — a kill stays a kill, since checks are only",
        "added — and --again-survivors runs the survivors again with the lab as it is now.",
        "",
        f"**{killed + argued} of {killed + argued + survived + pending} killed or argued equivalent: {killed} killed, {argued} argued "
        f"equivalent, {survived} survived{f', {pending} not yet run' if pending else ''}.**",
        "",
        "| mutant | what it breaks | lab run --sut | lab chaos --sut | verdict |",
        "|---|---|---|---|---|",
        *rows,
        "",
        END,
        "",
    ]
    path.write_text(text + ("\n" if text else "") + "\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lab")
    ap.add_argument("--only", default="")
    ap.add_argument("--chaos-time", default="30s")
    ap.add_argument("--resume", action="store_true",
                    help="keep the verdicts of evidence/mutant-verdicts.tsv and run the rest")
    ap.add_argument("--parallel", type=int, default=1,
                    help="how many mutants run at once (each its own lab run; their runs mostly wait)")
    ap.add_argument("--again-survivors", action="store_true",
                    help="with --resume: run again the mutants no gate killed (after a new check)")
    ap.add_argument("--again", action="store_true",
                    help="with --resume and --only: run those mutants again whatever their verdict "
                         "(their failed checks recorded anew, e.g. for the check map)")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    every = catalogue()
    mutants = [m for m in every if not only or m[0] in only]
    argued = equivalents()
    work = Path(tempfile.mkdtemp(prefix="lab-sql-mutants."))
    done_file = ROOT / "evidence/mutant-verdicts.tsv"
    checks_file = ROOT / "evidence/mutant-checks.tsv"
    done = {}
    if a.resume and done_file.exists():
        for line in done_file.read_text().splitlines()[1:]:
            mid, run_cell, chaos_cell = line.split("\t")
            killed = "killed" in run_cell + chaos_cell or run_cell.startswith("refused")
            # --again-survivors with --only: those of the survivors only; --again: those.
            if a.again and mid in only:
                continue
            if killed or not a.again_survivors or (only and mid not in only):
                done[mid] = (run_cell, chaos_cell)
        # What is run again is written again, after the rest — its failed checks too.
        done_file.write_text("mutant\tlab run --sut\tlab chaos --sut\n" + "".join(
            f"{mid}\t{r}\t{c}\n" for mid, (r, c) in done.items()))
        if checks_file.exists():
            rows = checks_file.read_text().splitlines()
            checks_file.write_text("\n".join(
                [rows[0]] + [r for r in rows[1:] if r.split("\t", 1)[0] in done]) + "\n")
    else:
        done_file.write_text("mutant\tlab run --sut\tlab chaos --sut\n")
        checks_file.write_text("mutant\tcase\tcheck (digits masked)\n")

    # The baseline: each profile unmutated passes the gate, or nothing is judged.
    for name in sorted({m[1] for m in mutants if m[0] not in done}):
        plain = work / f"{name}.toml"
        plain.write_text((PROFILES / f"{name}.toml").read_text())
        t = time.monotonic()
        cell, checks = run_gate(a.lab, plain, JOB_ONLY if is_job(name) else PG_ONLY, work / f"base-{name}")
        print(f"mutants: baseline {name}: {cell} ({time.monotonic() - t:.0f} s)", file=sys.stderr)
        if cell != "passed":
            print(f"mutants: the unmutated {name} does not pass its gate; see {work}", file=sys.stderr)
            for c in checks:
                print(f"  {c[0]}: {c[1]}", file=sys.stderr)
            return 1

    # The mutants to run, shared by `--parallel` workers (threads: each waits on its lab
    # processes); every verdict is appended to the done file as it comes, the table rebuilt
    # from it.
    todo = [m for m in mutants if m[0] not in done]
    lock = threading.Lock()
    failed = []

    def table():
        # Every mutant of the catalogue, not only those of this run (--only): the section is
        # the whole table, with what earlier runs judged.
        rows, killed, survived, equiv, pending = [], 0, 0, 0, 0
        for mid, _, _, _, what in every:
            if mid not in done:
                pending += 1
                continue
            run_cell, chaos_cell = done[mid]
            cells = run_cell + " " + chaos_cell
            if "killed" in cells or run_cell.startswith("refused"):
                verdict = "killed"
                killed += 1
            elif mid in argued:
                verdict = f"equivalent: {argued[mid]}"
                equiv += 1
            else:
                verdict = "**SURVIVED**"
                survived += 1
            rows.append(f"| {mid} | {what.replace('|', '/')} | {run_cell.replace('|', '/')} | "
                        f"{chaos_cell.replace('|', '/')} | {verdict.replace('|', '/')} |")
        write_section(rows, head, a.chaos_time, (killed, equiv, survived, pending))
        return killed, equiv, survived

    def worker():
        while True:
            with lock:
                if not todo or failed:
                    return
                mid, name, frm, to, what = todo.pop(0)
                n = len(mutants) - len(todo)
            source = (PROFILES / f"{name}.toml").read_text()
            if source.count(frm) != 1:
                failed.append(f"{mid}: its text is not found exactly once in {name}.toml")
                return
            mutant = work / mid / f"{name}.toml"
            mutant.parent.mkdir(parents=True)
            mutant.write_text(source.replace(frm, to))
            t = time.monotonic()
            job = is_job(name)
            run_cell, checks = run_gate(a.lab, mutant, JOB_ONLY if job else PG_ONLY, work / mid / "run")
            if run_cell == "passed" and not job:
                chaos_cell = run_chaos(a.lab, mutant, a.chaos_time, work / mid / "chaos")
            elif run_cell == "passed":
                chaos_cell = "not run (a MariaDB job lease: chaos runs PostgreSQL profiles)"
            else:
                chaos_cell = "not needed"
            with lock:
                with checks_file.open("a") as f:
                    for case, check in checks:
                        f.write(f"{mid}\t{case}\t{mask(check)}\n")
                with done_file.open("a") as f:
                    f.write(f"{mid}\t{run_cell}\t{chaos_cell}\n")
                done[mid] = (run_cell, chaos_cell)
                print(f"mutants: [{n}/{len(mutants)}] {mid}: {run_cell} | {chaos_cell} "
                      f"({time.monotonic() - t:.0f} s)", file=sys.stderr)
                table()

    threads = [threading.Thread(target=worker) for _ in range(max(1, a.parallel))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        print(f"mutants: {failed[0]}; fix the catalogue", file=sys.stderr)
        return 2
    killed, equiv, survived = table()
    print(f"mutants: {killed} killed, {equiv} argued equivalent, {survived} survived of "
          f"{len(every)} generated SQL mutants; evidence/mutants.md", file=sys.stderr)
    return 0 if survived == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
