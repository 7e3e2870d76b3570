#!/usr/bin/env python3
"""Compare two qfuse-bench CSV files (before and after a change, measured in one run).

Rows are matched on kind, recipe, op, norm, dtype, outputs and shape; each matched row prints its
two median times and after/before. Rows slower by more than --limit (default 3%) are marked, and
the exit status is 1 when there is one, or when no timed row is in both files. Rows present in
only one file are listed after the table; rows without a finite positive time are not compared.
Exit 2 for bad usage or a file that cannot be read or is not a qfuse-bench CSV.

    scripts/bench_compare.py before.csv after.csv [--limit 0.03] [--markdown]
"""
import argparse
import csv
import math
import os
import sys

KEY = ("kind", "recipe", "op", "norm", "dtype", "outputs", "M", "K", "N")


class BadInput(Exception):
    """A file that cannot be read or is not a qfuse-bench CSV."""


def load(path):
    """The timed rows of a qfuse-bench CSV (its '#' lines are run metadata), keyed by KEY: rows
    whose us_median is a finite positive number."""
    rows = {}
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(line for line in f if not line.startswith("#"))
            missing = [k for k in KEY + ("us_median",) if k not in (reader.fieldnames or [])]
            if missing:
                raise BadInput("%s: not a qfuse-bench CSV (no %s column)" % (path, missing[0]))
            for r in reader:
                try:
                    us = float(r["us_median"] or "nan")
                except ValueError:
                    raise BadInput("%s: line %d: us_median %r is not a number"
                                   % (path, reader.line_num, r["us_median"])) from None
                if math.isfinite(us) and us > 0:
                    rows[tuple(r[k] for k in KEY)] = us
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise BadInput("cannot read %s: %s" % (path, e)) from None
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--limit", type=float, default=0.03, help="slowdown that fails (0.03 = 3%%)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    a = ap.parse_args()
    if not (math.isfinite(a.limit) and a.limit >= 0):
        ap.error("--limit %r: expected a fraction >= 0 (0.03 = 3%%)" % a.limit)
    try:
        before, after = load(a.before), load(a.after)
    except BadInput as e:
        print("bench_compare.py: %s" % e, file=sys.stderr)
        return 2
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
    if not common:
        print("bench_compare.py: no timed row is in both files", file=sys.stderr)
    return 1 if slow or not common else 0


if __name__ == "__main__":
    try:
        rc = main()
        sys.stdout.flush()
    except OSError as e:  # the standard output full or closed
        print("bench_compare.py: cannot write the comparison: %s" % e, file=sys.stderr)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        rc = 1
    sys.exit(rc)
