#!/usr/bin/env python3
"""Generates SQL mutants by operator from every statement of the built-in profiles, as
cargo-mutants does for Rust: the catalogue scripts/sql-mutants.txt is hand-picked; this is the
systematic one. Each SQL line of a profile's statements gets, where it applies:

  drop-conjunct  each conjunct of a WHERE / ON / AND chain dropped
  flip           each comparison flipped: <= <-> <, >= <-> >, = -> >=, <> -> =
  drop-set       each assignment of a SET list dropped
  const          each arithmetic constant (+ 1, - 300 ...) moved by one either way
  refuse         each WHERE condition made `FALSE AND …`: the statement never matches (a design
                 that refuses every caller — what a liveness check must catch; the profiles'
                 conditions have no top-level OR, so `FALSE AND` refuses the whole of it)
  refuse-insert  each INSERT's `VALUES (…)` made `SELECT … WHERE FALSE`: it inserts nothing
  no-gap         each fence `X <= :token` made `X <= :token AND :token <= X + 1`: a token more
                 than one above the floor refused — a design that counts on consecutive tokens,
                 which fencing does not promise (a token is greater after a takeover, gaps
                 allowed). It accepts a fresh scope's first write and a current holder's writes at
                 its own token, and refuses a later, greater one: what the checks of a current
                 holder's write after the experiment's first must catch

Prints the mutants in the catalogue's format (id | file | the exact text | what it becomes | what
it breaks), which scripts/mutants.sh reads with --catalogue FILE. A line whose text is not unique
in its file cannot be mutated by exact replacement: it is counted and listed on stderr, not
silently dropped.

Usage: scripts/sql-mutants-gen.py [--count] [PROFILE.toml ...]
  (default: seed004, seed004-single, seed004-shared and seed000 under fencing/profiles)
  --count  a table of mutants per profile and statement instead of the catalogue
"""
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["seed004", "seed004-single", "seed004-shared", "seed000"]
# Comparison operators, longest first; `=` only where it is not part of another operator.
COMPARISON = re.compile(r"<=|>=|<>|!=|(?<![<>!:=])=(?![>=])|(?<![<-])<(?![=>])|(?<![-=])>(?![=])")
FLIPS = {"<=": "<", "<": "<=", ">=": ">", ">": ">=", "=": ">=", "<>": "=", "!=": "="}
KEYWORD_AND = re.compile(r"\bAND\b", re.I)


def statements(profile):
    """(dotted key, SQL text) of every string value of the profile that holds SQL."""
    data = tomllib.loads(profile.read_text())

    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from walk(f"{prefix}.{k}" if prefix else k, v)
        elif isinstance(value, str) and re.search(
            r"\b(SELECT|UPDATE|INSERT|DELETE|WITH|CREATE)\b", value
        ):
            yield prefix, value

    yield from walk("", data)


def top_level_spans(line, pattern):
    """Positions of `pattern` in `line` outside parentheses and quotes."""
    depth, quote, spans = 0, False, []
    i = 0
    while i < len(line):
        c = line[i]
        if c == "'":
            quote = not quote
        elif not quote and c == "(":
            depth += 1
        elif not quote and c == ")":
            depth -= 1
        elif not quote and depth == 0:
            m = pattern.match(line, i)
            if m:
                spans.append((m.start(), m.end()))
                i = m.end()
                continue
        i += 1
    return spans


SET = re.compile(r"\bSET\b", re.I)
ENDS_SET = re.compile(r"\b(WHERE|FROM|RETURNING|SELECT|ON CONFLICT)\b", re.I)


def assignment_regions(lines):
    """Per line, the (start, end) span of a SET list's assignments on it, or None: from `SET`
    to `WHERE` (or the line's end, the list going on to the next lines until one that starts a
    clause)."""
    regions, in_set = [], False
    for line in lines:
        region = None
        m = SET.search(line)
        if m:
            stop = ENDS_SET.search(line, m.end())
            region = (m.end(), stop.start() if stop else len(line.rstrip()))
            in_set = stop is None
        elif in_set:
            stop = ENDS_SET.search(line)
            region = (len(line) - len(line.lstrip()), stop.start() if stop else len(line.rstrip()))
            in_set = stop is None
            if region[0] >= region[1]:
                region = None
        regions.append(region)
    return regions


COMMA = re.compile(",")


def split_top(text):
    """`text` split at commas outside parentheses and quotes: (start, end) of each piece."""
    cuts = [(-1, 0)] + top_level_spans(text, COMMA) + [(len(text), len(text))]
    pieces = [(a_end, b_start) for (_, a_end), (b_start, _) in zip(cuts, cuts[1:])]
    return [(a, b) for a, b in pieces if text[a:b].strip()]


def values_refused(code, dialect):
    """The line with its `VALUES (…)` list (closed on the same line) made `SELECT … WHERE FALSE`:
    the INSERT inserts nothing. None where the line has no such list."""
    m = re.search(r"\bVALUES\s+\(", code)
    if not m or code[: m.start()].count("'") % 2:
        return None
    depth, i = 0, m.end() - 1
    while i < len(code):
        if code[i] == "(":
            depth += 1
        elif code[i] == ")":
            depth -= 1
            if depth == 0:
                break
        i += 1
    if depth:
        return None
    never = "FROM DUAL WHERE FALSE" if dialect == "mariadb" else "WHERE FALSE"
    return code[: m.start()] + "SELECT " + code[m.end() : i] + " " + never + code[i + 1 :]


def mutate(line, region, dialect="postgres"):
    """(operator, new line, what) for every mutant of one SQL line; `region` is the span of its
    SET assignments, if any."""
    out = []
    code = line.rstrip()
    # drop-conjunct: each ` AND x` at top level, and the first conjunct after WHERE/ON.
    ands = top_level_spans(code, KEYWORD_AND)
    bounds = [s for s, _ in ands] + [len(code)]
    for k, (s, e) in enumerate(ands):
        end = bounds[k + 1]
        conj = code[e:end].strip()
        new = code[:s].rstrip() + (" " + code[end:].lstrip() if code[end:].strip() else "")
        if not new.strip():
            new = code[:s] + "AND TRUE"
        out.append(("drop-conjunct", new, f"the condition `{conj}` dropped"))
    m = re.search(r"\b(WHERE|ON)\s+", code)
    if m and ands and ands[0][0] > m.end():
        first = code[m.end() : ands[0][0]].strip()
        new = code[: m.end()] + code[ands[0][1] :].lstrip()
        out.append(("drop-conjunct", new, f"the condition `{first}` dropped"))
    # refuse: an INSERT's VALUES list made a SELECT that yields no row.
    refused = values_refused(code, dialect)
    if refused:
        out.append(("refuse-insert", refused, "the VALUES list made `SELECT … WHERE FALSE`: the INSERT inserts nothing"))
    # refuse: the WHERE condition made FALSE.
    w = re.search(r"\bWHERE\s+", code)
    if w and not code[: w.start()].count("'") % 2:
        new = code[: w.end()] + "FALSE AND " + code[w.end() :]
        out.append(("refuse", new, "the WHERE condition made `FALSE AND …`: the statement never matches"))
    # no-gap: a fence's `X <= :token` also bounded above by X + 1.
    for gm in re.finditer(r"([a-z_.]+)\s*<=\s*:token\b", code):
        if code[: gm.start()].count("'") % 2:
            continue
        floor = gm.group(1)
        new = code[: gm.end()] + f" AND :token <= {floor} + 1" + code[gm.end() :]
        out.append(("no-gap", new, f"`{gm.group(0)}` made `{gm.group(0)} AND :token <= {floor} + 1`: a token more than one above the floor refused (a gap)"))
    # flip: comparisons outside the SET list.
    for cm in COMPARISON.finditer(code):
        op = cm.group(0)
        if op not in FLIPS or code[: cm.start()].count("'") % 2:
            continue
        if region and region[0] <= cm.start() < region[1]:
            continue
        new = code[: cm.start()] + FLIPS[op] + code[cm.end() :]
        out.append(("flip", new, f"`{op}` made `{FLIPS[op]}`"))
    # drop-set: each assignment of the SET list on this line (not the list's only one).
    if region:
        a, b = region
        body = code[a:b]
        pieces = split_top(body)
        whole_list = len(pieces) > 1 or body.rstrip().endswith(",") or code[:a].rstrip().endswith(",")
        if whole_list:
            for pa, pb in pieces:
                assignment = body[pa:pb].strip()
                # The piece and one comma beside it.
                lo, hi = a + pa, a + pb
                if code[hi : hi + 1] == ",":
                    hi += 1
                elif code[:lo].rstrip().endswith(","):
                    lo = code[:lo].rstrip().rfind(",")
                new = (code[:lo].rstrip() + " " + code[hi:].lstrip()).rstrip()
                if new.strip() and new.strip() != code.strip():
                    out.append(("drop-set", new, f"the assignment `{assignment}` dropped"))
    # const: arithmetic constants.
    for km in re.finditer(r"([+-])\s*(\d+)\b", code):
        if code[: km.start()].count("'") % 2:
            continue
        n = int(km.group(2))
        for m2 in (n - 1, n + 1):
            if m2 < 0:
                continue
            new = code[: km.start(2)] + str(m2) + code[km.end(2) :]
            out.append(("const", new, f"`{km.group(0)}` made `{km.group(1)} {m2}`"))
    return [(op, new, what) for op, new, what in out if new.strip() != code.strip()]


def main(argv):
    count = "--count" in argv
    names = [a for a in argv if a != "--count"] or DEFAULT
    rows, skipped, table = [], [], []
    for name in names:
        path = Path(name) if name.endswith(".toml") else ROOT / "fencing/profiles" / f"{name}.toml"
        rel = path.resolve().relative_to(ROOT)
        text = path.read_text()
        dialect = tomllib.loads(text).get("dialect", "postgres")
        for key, sql in statements(path):
            n, apart = 0, {"refuse": 0, "refuse-insert": 0, "no-gap": 0}
            lines = sql.splitlines()
            for i, (line, region) in enumerate(zip(lines, assignment_regions(lines))):
                if not line.strip() or line.strip().startswith("--"):
                    continue
                for op, new, what in mutate(line, region, dialect):
                    # The line, widened by the lines before it (joined with a literal \\n, which
                    # scripts/mutants.sh reads back as a newline) until the text is unique.
                    j = i
                    while True:
                        before = "\n".join(lines[j:i] + [line.rstrip()]).strip()
                        after = "\n".join(lines[j:i] + [new.rstrip()]).strip()
                        if text.count(before) == 1 or j == 0:
                            break
                        j -= 1
                    if text.count(before) != 1:
                        skipped.append(f"{rel} [{key}]: {line.strip()!r} is not unique in the file")
                        continue
                    from_text = before.replace("\n", "\\n")
                    to_text = after.replace("\n", "\\n")
                    # The refuse and no-gap operators' mutants are numbered apart: the ids of the others
                    # stay what they were before those were added (verdicts and arguments name
                    # them).
                    if op in apart:
                        apart[op] += 1
                        ident = f"{path.stem}.{key}.{op}.{apart[op]}".replace("_", "-")
                    else:
                        n += 1
                        ident = f"{path.stem}.{key}.{op}.{n}".replace("_", "-")
                    rows.append(f"{ident} | {rel} | {from_text} | {to_text} | {key}: {what}")
            table.append((path.stem, key, n))
    if count:
        print("| profile | statement | mutants |\n|---|---|---|")
        for stem, key, n in table:
            print(f"| {stem} | {key} | {n} |")
        print(f"\n{len(rows)} mutants; {len(skipped)} not applicable by exact text (not unique)")
    else:
        print("# Generated by scripts/sql-mutants-gen.py: id | file | the exact text | what it becomes | what it breaks")
        for r in rows:
            print(r)
    for s in sorted(set(skipped)):
        print(f"sql-mutants-gen: skipped: {s}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
