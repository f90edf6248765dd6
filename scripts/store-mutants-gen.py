#!/usr/bin/env python3
"""Generates the mutants of the lock services' own code, by operator, the way
scripts/sql-mutants-gen.py does for the lease table's SQL: over each store's Lua scripts (Redis,
Redlock) and over the Rust lines that decide a lease — the functions that take, renew, release
and judge a holding (etcd, ZooKeeper, Redis, Redlock), and the token-regression check of R1–R3.

One mutant per line on stdout, its fields separated by tabs (the code has `|` of its own):
  id, file:line, the line as written (stripped), what it becomes, operator, store, experiments
where `store` is the --lease-store the experiments run on (`-` for the default), and the
experiments are the ones that exercise that code. scripts/store-mutants-run.py runs them.

Operators, on a line of a target function (comments and string contents left alone) or of a Lua
script:
  rust: == ↔ !=, < ↔ <=, > ↔ >=, && ↔ ||, a leading ! dropped, Ok(true) ↔ Ok(false), + 1 / - 1 dropped
  lua:  == → ~=, an `if …` guard made `if true`, the key's expiry (PX …) dropped, the token's INCR
        made a read, SET's NX dropped, PEXPIRE / DEL answered 1 without doing it
Usage: scripts/store-mutants-gen.py [--count]
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
F_SERIES = "F1,F3,F4,F5,F10,F12,F16"

# (file, store, experiments, the Rust functions that decide a lease, the Lua scripts' consts)
TARGETS = [
    ("fencing/src/lease/redis.rs", "redis", F_SERIES,
     ["acquire_now", "renew_now", "release_now", "inspect_now"], ["ACQUIRE", "RENEW", "RELEASE"]),
    # Not redis-plain (the same script with ARGV[3] = '0'): a design without a token fails F1 and
    # F4 unmutated — it is one of the lab's broken variants — so no baseline passes to judge on.
    ("fencing/src/lease/redlock.rs", "-", "RL1,RL2,RL3,RL4",
     ["validity", "quorum", "acquire_now", "renew_now", "release_now"], ["LOCK", "EXTEND", "UNLOCK"]),
    ("fencing/src/lease/etcd.rs", "etcd", F_SERIES,
     ["current", "lease_of", "acquire_now", "put_if_absent", "lease_for", "keep_alive", "renew_now",
      "release_now", "inspect_now"], []),
    ("fencing/src/lease/etcd.rs", "etcd-session", F_SERIES,
     ["take", "renew_session", "renew_one"], []),
    ("fencing/src/lease/zookeeper.rs", "zookeeper", F_SERIES,
     ["sequence", "node_of", "own_node", "acquire_now", "holds", "renew_now", "asked_by_its_session",
      "release_now", "inspect_now"], []),
    ("fencing/src/lease/zookeeper.rs", "zookeeper-session", F_SERIES, ["renew_shared"], []),
    ("scenarios/src/kit/regression.rs", "-", "R1,R2,R3",
     ["acknowledged", "harms", "regressions", "finds_the_smallest"], []),
]

RUST_OPS = [
    ("eq-ne", r"(?<![=!<>])==(?!=)", "!="),
    ("ne-eq", r"!=", "=="),
    ("lt-le", r"(?<=\s)<(?=\s)", "<="),
    ("le-lt", r"(?<=\s)<=(?=\s)", "<"),
    ("gt-ge", r"(?<=\s)>(?=\s)", ">="),
    ("ge-gt", r"(?<=\s)>=(?=\s)", ">"),
    ("and-or", r"&&", "||"),
    ("or-and", r"(?<=\s)\|\|(?=\s)", "&&"),
    ("not-dropped", r"(?<![\w)\]!])!(?=[\w(*&])", ""),
    ("true-false", r"Ok\(true\)", "Ok(false)"),
    ("false-true", r"Ok\(false\)", "Ok(true)"),
    ("plus-one-dropped", r" \+ 1\b", ""),
    ("minus-one-dropped", r" - 1\b", ""),
]

LUA_OPS = [
    ("lua-eq-ne", r"==", "~="),
    ("lua-guard-true", r"^if .* then", "if true then"),
    ("lua-no-expiry", r", 'PX', ARGV\[2\]", ""),
    ("lua-incr-read", r"redis\.call\('INCR', KEYS\[2\]\)",
     "tonumber(redis.call('GET', KEYS[2]) or '0')"),
    ("lua-nx-dropped", r"'NX', ", ""),
    ("lua-pexpire-noop", r"redis\.call\('PEXPIRE', KEYS\[1\], ARGV\[2\]\)", "1"),
    ("lua-del-noop", r"redis\.call\('DEL', KEYS\[1\]\)", "1"),
]


def blank_strings_and_comments(line):
    """The line with string contents blanked and a trailing // comment removed: where an operator
    may apply (positions kept)."""
    out, i, quote = [], 0, None
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                out.append("  ")
                i += 2
                continue
            out.append(" " if c != quote else c)
            if c == quote:
                quote = None
        elif c == '"':
            quote = c
            out.append(c)
        elif line.startswith("//", i):
            break
        else:
            out.append(c)
        i += 1
    return "".join(out).ljust(len(line))


def function_lines(lines, name):
    """The 0-based line numbers of the body of `fn name` (the first one in the file outside the
    tests), found by its braces."""
    pat = re.compile(rf"^\s*(pub(\(\w+\))? )?(async )?fn {re.escape(name)}\b")
    for i, line in enumerate(lines):
        if "#[cfg(test)]" in line:
            break
        if pat.search(line):
            depth, started = 0, False
            for j in range(i, len(lines)):
                code = blank_strings_and_comments(lines[j])
                depth += code.count("{") - code.count("}")
                started = started or "{" in code
                if started and depth <= 0:
                    return range(i + 1, j)
    sys.exit(f"store-mutants-gen: no fn {name}")


def lua_lines(lines, const):
    """The 0-based line numbers of the Lua script `const NAME: &str = r"…";`."""
    for i, line in enumerate(lines):
        if re.match(rf"^\s*const {const}: &str = r\"", line):
            j = i
            while not lines[j].rstrip().endswith('";'):
                j += 1
            return range(i + 1, j + 1)
    sys.exit(f"store-mutants-gen: no Lua script {const}")


def mutants():
    rows = []
    for path, store, experiments, functions, scripts in TARGETS:
        lines = (ROOT / path).read_text().split("\n")
        stem = Path(path).stem
        targets = [(n, "rust", function_lines(lines, n)) for n in functions]
        targets += [(n, "lua", lua_lines(lines, n)) for n in scripts]
        for name, kind, span in targets:
            for i in span:
                line = lines[i]
                stripped = line.strip()
                if not stripped or stripped.startswith("//"):
                    continue
                ops = RUST_OPS if kind == "rust" else LUA_OPS
                where = blank_strings_and_comments(line) if kind == "rust" else line
                for op, pattern, to in ops:
                    for n, m in enumerate(re.finditer(pattern, where, flags=re.M)):
                        mutated = line[:m.start()] + to + line[m.end():]
                        if kind == "lua" and op == "lua-guard-true" and "if true then" in line:
                            continue
                        mid = f"{stem}.{name}.{op}.{i + 1}" + (f".{n + 1}" if n else "")
                        if store not in ("-", stem):
                            mid = f"{store}:{mid}"
                        rows.append((mid, f"{path}:{i + 1}", stripped, mutated.strip(), op, store,
                                     experiments))
    return rows


def main():
    rows = mutants()
    if "--count" in sys.argv:
        for store in sorted({r[5] for r in rows}):
            print(f"{store}: {sum(1 for r in rows if r[5] == store)}")
        print(f"all: {len(rows)}")
        return
    print("# id\tfile:line\tthe line as written\twhat it becomes\toperator\tstore\texperiments")
    for r in rows:
        print("\t".join(r))


if __name__ == "__main__":
    main()
