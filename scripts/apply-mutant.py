#!/usr/bin/env python3
"""Applies one cargo-mutants diff (scripts/mutants.sh, pass two) to a file that may have moved on
since the diff was made: the changed lines, with the context between them, are looked up and
replaced wherever they now are — exactly once (with as much of the diff's context as that takes),
or not at all (exit 1: the mutated code is gone).
Usage: apply-mutant.py FILE DIFF"""
import sys

path, diff = sys.argv[1], sys.argv[2]
lines = open(diff).read().split("\n")
# A blank context line may have lost its leading space; the split leaves a last empty string.
hunk = [l if l else " " for l in lines[2:] if not l.startswith("@@")]
changed = [i for i, l in enumerate(hunk) if l[:1] in ("+", "-")]
if not changed:
    sys.exit(1)
text = open(path).read()
# The changed lines with the context between them, widened by the hunk's own context one line
# each way until the block is found exactly once.
start, end = changed[0], changed[-1] + 1
while True:
    inner = hunk[start:end]
    before = "\n".join(l[1:] for l in inner if l[:1] in (" ", "-")) + "\n"
    after = "\n".join(l[1:] for l in inner if l[:1] in (" ", "+")) + "\n"
    if text.count(before) == 1:
        break
    if start == 0 and end == len(hunk):
        sys.exit(1)
    start, end = max(start - 1, 0), min(end + 1, len(hunk))
open(path, "w").write(text.replace(before, after, 1))
