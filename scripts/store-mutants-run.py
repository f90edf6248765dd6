#!/usr/bin/env python3
"""Runs the lock services' own mutants (scripts/store-mutants-gen.py) through
the experiments on that store, one at a time, each on a scratch worktree of this checkout's HEAD
with a target directory of its own (incremental builds: only the mutated crate and those above it
compile again).

Per mutant: the line replaced (exactly as generated; `gone` when the line is no longer there), the
lab and the holder built (`unviable` when that fails), then each of its experiments in turn with
its --lease-store and LAB_REQUIRE=docker (a container that cannot start is a failure, not a skip)
until one fails: `killed` by it, with the checks that failed. A mutant of the token-regression
check that passes R1–R3 meets the check's unit tests next (`killed unit tests`): their planted
histories hold the small and the lost regressions the runs' own never show. What passes every experiment on a
lock service then meets the seeded chaos run on it (`lab chaos --lease-store S --seed 4 --time
30s`: holders that renew for the whole run), as a surviving SQL mutant does. What passes is
looked up in scripts/equivalent-mutants.txt (`argued`, with the reason); the rest `SURVIVED`.
Before any mutant, each (store, experiments) pair runs unmutated and must pass (the baseline), or
its mutants are not judged.

What a killing run keeps — a failing lab keeps its servers for a look — is removed after it is
recorded: the labs run with a TMPDIR of the script's own (target/store-mutants/tmp), where `lab
clean` then removes their cluster directories and the containers they kept (a kept container
carries its lab's temp dir; another temp dir's are left alone).

Writes as it goes, so that a run cut short resumes with --resume:
  evidence/store-mutants.md          one row per mutant, between the markers below
  evidence/store-mutant-checks.tsv   every check a killing run failed: mutant, case, check (digits
                                     masked) — read by scripts/check-map.py
Usage: scripts/store-mutants-run.py [--only ID,ID | --store S] [--resume [--again-survivors | --record-only]]
About 2–3 minutes a mutant here (a build of the mutated crate upwards, then the experiments).
Exit status: 1 when a mutant survived (or a baseline failed), else 0.
"""
import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_MD = ROOT / "evidence/store-mutants.md"
OUT_TSV = ROOT / "evidence/store-mutant-checks.tsv"
BEGIN = "<!-- store mutants: scripts/store-mutants-run.py writes from here -->"
END = "<!-- store mutants: to here -->"
FEATURES = "lab/containers,lab/lock-services,holder/lock-services"
RUN_TIMEOUT = 900
CHAOS_TIME = "30s"


# The child running now (a build, a lab run): stopped with this script on SIGINT / SIGTERM, so
# that no lab (and no container it started) outlives it; the lab stops what it started on SIGTERM.
CURRENT = []


def stop_child_and_exit(signum, _frame):
    for child in CURRENT:
        child.terminate()
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
    sys.exit(128 + signum)


def run(args, timeout=None, **kw):
    """subprocess.run with the child known to the signal handler; stdout and stderr captured."""
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    CURRENT.append(child)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.terminate()
        out, err = child.communicate()
        raise
    finally:
        CURRENT.remove(child)
    return subprocess.CompletedProcess(args, child.returncode, out, err)


def catalogue():
    out = subprocess.run([sys.executable, str(ROOT / "scripts/store-mutants-gen.py")],
                         check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        mid, where, frm, to, op, store, exps = line.split("\t")
        path, lineno = where.rsplit(":", 1)
        rows.append(dict(id=mid, path=path, line=int(lineno), frm=frm, to=to, op=op, store=store,
                         experiments=exps.split(",")))
    return rows


def equivalents():
    why = {}
    for line in (ROOT / "scripts/equivalent-mutants.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#") and " | " in line:
            mid, reason = line.split(" | ", 1)
            why[mid.strip()] = reason.strip()
    return why


def worktree(work):
    """The scratch worktree at HEAD (made once, cleaned before each mutant)."""
    tree = work / "tree"
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    if not tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), head],
                       check=True, capture_output=True)
    subprocess.run(["git", "-C", str(tree), "checkout", "--detach", "-f", head], check=True,
                   capture_output=True)
    subprocess.run(["git", "-C", str(tree), "checkout", "--", "."], check=True)
    return tree, head


def build(tree, work):
    env = dict(os.environ, CARGO_TARGET_DIR=str(work / "target"), CARGO_INCREMENTAL="1")
    r = run(["cargo", "build", "-q", "--locked", "-p", "lab", "-p", "holder",
             f"--features={FEATURES}"], cwd=tree, env=env)
    first = next((l for l in r.stderr.splitlines() if l.startswith("error")), r.stderr[-300:])
    return r.returncode == 0, first


def lab_env(work):
    """The environment of a lab run here: a container that cannot start is a failure, and what a
    failing run keeps goes to a TMPDIR of this script's own (removed by `clean_kept`)."""
    tmp = work / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return dict(os.environ, LAB_REQUIRE="docker", TMPDIR=str(tmp))


def clean_kept(work):
    """What a killing run kept, once recorded: `lab clean` in this script's TMPDIR."""
    r = run([str(work / "target/debug/lab"), "clean"], cwd=work, env=lab_env(work), timeout=300)
    said = (r.stdout or "").strip().replace("\n", "; ")
    print(f"    {said}" if r.returncode == 0 else f"    lab clean failed: {r.stderr[-200:]}",
          flush=True)


def run_experiment(tree, work, store, exp, evidence):
    """`lab run --only EXP` on `store`: (passed, failed checks as (case, masked description))."""
    # The holder is found beside the lab (target/debug/holder of the same build).
    args = [str(work / "target/debug/lab"), "run", "--only", exp, "--evidence-dir", str(evidence)]
    if store != "-":
        args += ["--lease-store", store]
    if evidence.exists():
        shutil.rmtree(evidence)
    try:
        r = run(args, cwd=tree, env=lab_env(work), timeout=RUN_TIMEOUT)
        code = r.returncode
    except subprocess.TimeoutExpired:
        clean_kept(work)
        return False, [(exp, f"the run did not end in {RUN_TIMEOUT} s")]
    if code != 0:
        clean_kept(work)
    failed = []
    log = evidence / "events.jsonl"
    if log.exists():
        for line in log.read_text().splitlines():
            e = json.loads(line)
            if e.get("event") == "check" and e.get("passed") is False:
                desc = re.sub(r"\d+", "N", e.get("description", "")).replace("\t", " ")
                failed.append((e.get("case", exp), desc))
    if code != 0 and not failed:
        failed.append((exp, f"exit {code}: {(r.stderr or r.stdout)[-200:].strip()}"))
    return code == 0, failed


def run_unit_tests(tree, work, module):
    """The unit tests of the lab's own judge `module` (the token-regression check): histories
    planted in the tests, which the R-series' runs, every regression in them large, cannot
    plant. (passed, the failing tests as ("unit", name))."""
    env = dict(os.environ, CARGO_TARGET_DIR=str(work / "target"), CARGO_INCREMENTAL="1")
    r = run(["cargo", "test", "-q", "--locked", "-p", "scenarios", "--lib", module], cwd=tree,
            env=env, timeout=RUN_TIMEOUT)
    # (-q prints a dot per test; a failure is named in its "---- NAME stdout ----" section.)
    failing = re.findall(r"^---- (\S+) stdout ----$", r.stdout, re.M)
    if r.returncode == 0:
        return True, []
    return False, [("unit", name) for name in failing] or \
        [("unit", f"exit {r.returncode}: {(r.stderr or r.stdout)[-200:].strip()}")]


def run_chaos(tree, work, store, evidence):
    """The seeded chaos run on `store` (looping holders that renew for its whole time, paused
    and cut off by a nemesis; a history checker): what a survivor of the experiments meets
    next, as a SQL mutant does. (passed, failed checks)."""
    args = [str(work / "target/debug/lab"), "chaos", "--lease-store", store, "--seed", "4",
            "--time", CHAOS_TIME, "--evidence-dir", str(evidence)]
    if evidence.exists():
        shutil.rmtree(evidence)
    try:
        r = run(args, cwd=tree, env=lab_env(work), timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        clean_kept(work)
        return False, [("chaos", f"the run did not end in {RUN_TIMEOUT} s")]
    if r.returncode == 0:
        return True, []
    clean_kept(work)
    said = [l.strip() for l in r.stdout.splitlines() if "FAIL" in l or "violation" in l]
    return False, [("chaos", re.sub(r"\d+", "N", l)) for l in said[:5]] or \
        [("chaos", f"exit {r.returncode}: {(r.stderr or r.stdout)[-200:].strip()}")]


def write(results, head, catalogue_ids=()):
    rows = []
    for m, verdict, by, checks in results:
        first = checks[0][1] if checks else ""
        rows.append(f"| `{m['id']}` | `{shown(m['frm'])}` → `{shown(m['to'])}` | {verdict} | "
                    f"{by} | {shown(first)[:160]} |")
    counts = {}
    for _, verdict, _, _ in results:
        counts[verdict] = counts.get(verdict, 0) + 1
    body = [BEGIN, "",
            f"Run by scripts/store-mutants-run.py at {head[:7]}, "
            f"{datetime.now(timezone.utc):%Y-%m-%d}: " +
            ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) + f" of {len(results)}." +
            not_yet(results, catalogue_ids), "",
            "| mutant | the line → what it becomes | verdict | by | the first check it failed, or why |",
            "|---|---|---|---|---|", *rows, "", END]
    text = OUT_MD.read_text() if OUT_MD.exists() else ""
    if BEGIN in text:
        text = text[:text.index(BEGIN)] + "\n".join(body) + text[text.index(END) + len(END):]
    else:
        text = HEADER + "\n".join(body) + "\n"
    OUT_MD.write_text(text)
    tsv = ["mutant\tcase\tcheck (digits masked)"]
    for m, verdict, _, checks in results:
        if verdict == "killed":
            tsv += [f"{m['id']}\t{c}\t{d}" for c, d in checks]
    OUT_TSV.write_text("\n".join(tsv) + "\n")


def not_yet(results, catalogue_ids):
    """The catalogue's mutants not run yet, by store, said beside the counts."""
    done = {m["id"] for m, _, _, _ in results}
    left = [i for i in catalogue_ids if i not in done]
    if not left:
        return ""
    by = {}
    for i in left:
        by.setdefault(i.split(".", 1)[0], []).append(i)
    return (f" Not run yet: {len(left)} of the catalogue's {len(catalogue_ids)} (" +
            ", ".join(f"{k} {len(v)}" for k, v in sorted(by.items())) + ").")


HEADER = """# The lock services' own mutants

Mutants of the code each lock-service store runs — its Lua scripts (Redis, Redlock) and the Rust
lines that take, renew, release and judge a holding (etcd, ZooKeeper, Redis, Redlock), and the
token-regression check of R1–R3 — generated by operator (`scripts/store-mutants-gen.py`), each run
through the experiments on that store (`scripts/store-mutants-run.py`). A mutant is killed by the
first experiment that fails on it — for the token-regression check, or by the check's own unit
tests, whose planted histories hold what the runs never show; a survivor of the experiments on a
lock service meets the seeded chaos run on it; argued ones are in scripts/equivalent-mutants.txt
with why. A SURVIVED row is a gap: a probe that could reach it is not written yet.

"""


def shown(text):
    """A line as the record's table shows it (no `|`)."""
    return text.replace("|", "/")


def unnumbered(mid):
    """A mutant's id without its line number (and occurrence): what stays when lines above it move."""
    return re.sub(r"\.\d+(\.\d+)?$", "", mid)


def previous(mutants):
    """The recorded verdicts and killing checks, keyed by the catalogue's ids now: a record whose
    line moved (an edit above it renumbered the id) is the mutant with the same id but for the
    number, the same line and the same replacement."""
    now = {(unnumbered(m["id"]), shown(m["frm"]), shown(m["to"])): m["id"] for m in mutants}
    done, renamed = {}, {}
    if OUT_MD.exists():
        for line in OUT_MD.read_text().splitlines():
            m = re.match(r"\| `([^`]+)` \| `(.*)` → `(.*)` \| (killed|argued|SURVIVED|unviable|gone) \| ([^|]*) \|", line)
            if m:
                mid = now.get((unnumbered(m.group(1)), m.group(2), m.group(3)), m.group(1))
                renamed[m.group(1)] = mid
                done[mid] = (m.group(4), m.group(5).strip())
    checks = {}
    if OUT_TSV.exists():
        for line in OUT_TSV.read_text().splitlines()[1:]:
            mid, case, desc = line.split("\t", 2)
            checks.setdefault(renamed.get(mid, mid), []).append((case, desc))
    return done, checks


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only")
    p.add_argument("--store")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--record-only", action="store_true",
                   help="with --resume: run nothing; write the records again, the survivors "
                        "judged against scripts/equivalent-mutants.txt as it now is")
    p.add_argument("--again-survivors", action="store_true",
                   help="with --resume: run the survivors (and argued ones) again")
    p.add_argument("--work", default=str(ROOT / "target/store-mutants"))
    a = p.parse_args()
    signal.signal(signal.SIGTERM, stop_child_and_exit)
    signal.signal(signal.SIGINT, stop_child_and_exit)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    # One runner at a time on a scratch worktree: a second one would check out and build its own
    # mutant under the first one's experiments (seen: two runs of --resume at once).
    lock = open(work / "runner.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"store-mutants: another runner is working in {work}; wait for it, or stop it")
    mutants = catalogue()
    if a.only:
        wanted = set(a.only.split(","))
        mutants = [m for m in mutants if m["id"] in wanted]
    if a.store:
        mutants = [m for m in mutants if m["store"] == a.store]
    done, done_checks = previous(catalogue()) if a.resume else ({}, {})
    if a.again_survivors:
        # (With --only, only those: the other survivors' records stay.)
        again = {m["id"] for m in mutants}
        done = {k: v for k, v in done.items()
                if v[0] not in ("SURVIVED", "argued") or k not in again}
    by_id = {m["id"]: m for m in catalogue()}
    why = equivalents()
    # A survivor recorded before its argument was written is argued now (the argument is about
    # the line, not the run); an argued one whose argument is gone survives again.
    results = []
    for mid, (v, by) in done.items():
        if mid not in by_id:
            continue
        checks = done_checks.get(mid, [])
        if v == "SURVIVED" and mid in why:
            v, checks = "argued", [("-", why[mid])]
        elif v == "argued":
            v, checks = ("argued", [("-", why[mid])]) if mid in why else ("SURVIVED", [])
        results.append((by_id[mid], v, by, checks))
    if a.record_only:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
        recorded = re.search(r"at ([0-9a-f]{7}),", OUT_MD.read_text()) if OUT_MD.exists() else None
        write(results, recorded.group(1) if recorded else head, list(by_id))
        return 1 if any(v == "SURVIVED" for _, v, _, _ in results) else 0
    tree, head = worktree(work)
    ok, err = build(tree, work)
    if not ok:
        sys.exit(f"store-mutants: the unmutated checkout does not build: {err}")
    baseline = {}
    chaos_baseline = {}

    def chaos_ok(store):
        return chaos_baseline.get(store, False)

    status = 0
    for m in mutants:
        if m["id"] in done:
            continue
        pair = (m["store"], tuple(m["experiments"]))
        if pair not in baseline:
            t0 = time.time()
            # The tree is as HEAD left it (each mutant is undone), built again: the last
            # mutant's binaries are not the baseline's.
            ok, err = build(tree, work)
            if not ok:
                sys.exit(f"store-mutants: the unmutated checkout does not build: {err}")
            fails = []
            for exp in m["experiments"]:
                passed, failed = run_experiment(tree, work, m["store"], exp, work / "baseline")
                fails += [] if passed else failed
            baseline[pair] = fails
            if not fails and m["store"] != "-" and m["store"] not in chaos_baseline:
                # A chaos run that fails unmutated judges no mutant.
                passed, failed = run_chaos(tree, work, m["store"], work / "chaos-baseline")
                chaos_baseline[m["store"]] = passed
                print(f"store-mutants: chaos baseline on {m['store']}: "
                      f"{'passed' if passed else 'FAILED ' + str(failed[:2])}",
                      file=sys.stderr, flush=True)
            print(f"store-mutants: baseline {m['store']} {','.join(m['experiments'])}: "
                  f"{'passed' if not fails else 'FAILED ' + str(fails[:2])} in {time.time() - t0:.0f} s",
                  file=sys.stderr, flush=True)
        if baseline[pair]:
            status = 1
            continue
        t0 = time.time()
        path = tree / m["path"]
        lines = path.read_text().split("\n")
        if lines[m["line"] - 1].strip() != m["frm"]:
            verdict, by, checks = "gone", "", []
        else:
            lines[m["line"] - 1] = lines[m["line"] - 1].replace(m["frm"], m["to"], 1)
            path.write_text("\n".join(lines))
            ok, err = build(tree, work)
            if not ok:
                verdict, by, checks = "unviable", "", [("-", err)]
            else:
                verdict, by, checks = "SURVIVED", "", []
                for exp in m["experiments"]:
                    passed, failed = run_experiment(tree, work, m["store"], exp, work / "run")
                    if not passed:
                        verdict, by, checks = "killed", exp, failed
                        break
                if verdict == "SURVIVED" and m["path"].endswith("kit/regression.rs"):
                    passed, failed = run_unit_tests(tree, work, "chaos::regression")
                    if not passed:
                        verdict, by, checks = "killed", "unit tests", failed
                if verdict == "SURVIVED" and m["store"] != "-" and chaos_ok(m["store"]):
                    passed, failed = run_chaos(tree, work, m["store"], work / "chaos")
                    if not passed:
                        verdict, by, checks = "killed", "chaos", failed
                if verdict == "SURVIVED" and m["id"] in why:
                    verdict, by, checks = "argued", "", [("-", why[m["id"]])]
            subprocess.run(["git", "-C", str(tree), "checkout", "--", "."], check=True)
        if verdict == "SURVIVED":
            status = 1
        results.append((m, verdict, by, checks))
        write(results, head, list(by_id))
        print(f"store-mutants: {m['id']}: {verdict} {by} ({time.time() - t0:.0f} s)"
              f"{': ' + checks[0][1][:120] if checks else ''}", file=sys.stderr, flush=True)
    # The tree back as HEAD left it, built unmutated for the next run.
    subprocess.run(["git", "-C", str(tree), "checkout", "--", "."], check=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
