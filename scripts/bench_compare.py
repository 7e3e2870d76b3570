#!/usr/bin/env python3
"""Compare two qfuse-bench CSV files (before and after a change, measured in one run).

Rows are matched on kind, recipe, op, norm, dtype, outputs and shape; each matched row prints its
two median times and after/before. Rows slower by more than --limit (default 3%) are marked, and
the exit status is 1 when there is one. Rows present in only one file are listed after the table.

    scripts/bench_compare.py before.csv after.csv [--limit 0.03] [--markdown]
"""
import argparse
import csv
import sys

KEY = ("kind", "recipe", "op", "norm", "dtype", "outputs", "M", "K", "N")


def load(path):
    """The timed rows of a qfuse-bench CSV (its '#' lines are run metadata), keyed by KEY."""
    rows = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            us = r.get("us_median", "")
            if us:
                rows[tuple(r.get(k, "") for k in KEY)] = float(us)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--limit", type=float, default=0.03, help="slowdown that fails (0.03 = 3%%)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    a = ap.parse_args()
    before, after = load(a.before), load(a.after)
    common = [k for k in before if k in after]
    slow = 0
    sep = " | " if a.markdown else "  "
    head = ["kind", "recipe", "op", "shape", "before us", "after us", "after/before", ""]
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    for k in common:
        b, t = before[k], after[k]
        ratio = t / b if b > 0 else float("nan")
        mark = "SLOWER" if ratio > 1 + a.limit else ""
        slow += mark != ""
        shape = "x".join(v for v in k[6:9] if v)
        cells = [k[0], k[1], " ".join(v for v in (k[2], k[3], k[4], k[5]) if v), shape,
                 "%.1f" % b, "%.1f" % t, "%.3f" % ratio, mark]
        print(("| " if a.markdown else "") + sep.join(cells) + (" |" if a.markdown else ""))
    for name, only in (("before", set(before) - set(after)), ("after", set(after) - set(before))):
        for k in sorted(only):
            print("only %s: %s" % (name, ",".join(k)))
    print("%d rows compared, %d more than %.0f%% slower" % (len(common), slow, 100 * a.limit))
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
