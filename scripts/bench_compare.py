#!/usr/bin/env python3
"""Compare two qfuse-bench CSV files (before and after a change, measured in one run).

Rows are matched on kind, recipe, op, norm, dtype, outputs and shape; each matched row prints its
two median times and after/before. Rows slower by more than --limit (default 3%) are marked, and
the exit status is 1 when there is one, or when no timed row is in both files. Rows present in
only one file, and rows untimed (no finite positive time) in one of them, are listed after the
table.
Exit 2 for bad usage or a file that cannot be read or is not a qfuse-bench CSV.

    scripts/bench_compare.py before.csv after.csv [--limit 0.03] [--markdown]
"""
import argparse
import csv
import math
import re
import sys

import qf_stdout

KEY = ("kind", "recipe", "op", "norm", "dtype", "outputs", "M", "K", "N")


class BadInput(Exception):
    """A file that cannot be read or is not a qfuse-bench CSV."""


def load(path):
    """The rows of a qfuse-bench CSV (its '#' lines are run metadata), keyed by KEY: a dict of
    the timed ones (us_median a finite positive number) and the set of the others."""
    timed, untimed = {}, set()
    try:
        with qf_stdout.open_input(path, newline="", encoding="utf-8-sig") as f:
            lines = [(n, line) for n, line in enumerate(f, 1) if not line.startswith("#")]
        reader = csv.DictReader((line for _, line in lines), strict=True)
        missing = [k for k in KEY + ("us_median",) if k not in (reader.fieldnames or [])]
        if missing:
            raise BadInput("%s: not a qfuse-bench CSV (no %s column)" % (path, missing[0]))
        for r in reader:
            where = "%s: line %d" % (path, lines[reader.line_num - 1][0])
            if None in r or None in r.values():  # qfuse-bench writes every cell, empty or not
                raise BadInput("%s: %d fields where the header has %d (not a qfuse-bench row)"
                               % (where, len(reader.fieldnames) + len(r.get(None, []))
                                  - list(r.values()).count(None), len(reader.fieldnames)))
            key = tuple(r[k] for k in KEY)
            if key in timed or key in untimed:
                raise BadInput("%s: a second row for %s" % (where, ",".join(key)))
            try:
                us = float(r["us_median"] or "nan")
            except ValueError:
                raise BadInput("%s: us_median %r is not a number"
                               % (where, r["us_median"])) from None
            if math.isfinite(us) and us > 0:
                timed[key] = us
            else:
                untimed.add(key)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise BadInput("cannot read %s: %s" % (path, qf_stdout.why(e))) from None
    return timed, untimed


def row_order(k):
    """Rows in order of their text fields, then of M, K and N as numbers."""
    return k[:6], tuple(int(v) if re.fullmatch(r"[0-9]{1,18}", v) else -1 for v in k[6:9])


def limit_arg(text):
    """--limit: a fraction from 0 to 100 (0.03 = 3%)."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (0 <= v <= 100):
        raise argparse.ArgumentTypeError("%r: expected a fraction from 0 to 100 (0.03 = 3%%)"
                                         % text)
    return v


def main():
    ap = qf_stdout.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Exit status: 0 no matched row slower than --limit, 1 a slower row or no timed "
               "row in both files, 2 bad usage or a file that cannot be read or is not a "
               "qfuse-bench CSV.")
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--limit", type=limit_arg, default=0.03,
                    help="slowdown that fails (0.03 = 3%%)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    a = ap.parse_args()
    try:
        (before, b_untimed), (after, a_untimed) = load(a.before), load(a.after)
    except BadInput as e:
        print("bench_compare.py: %s" % e, file=sys.stderr)
        return 2
    common = sorted((k for k in before if k in after), key=row_order)
    slow = 0
    sep = " | " if a.markdown else "  "
    head = ["kind", "recipe", "op", "shape", "before us", "after us", "after/before", ""]
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    for k in common:
        b, t = before[k], after[k]
        ratio = t / b
        mark = "SLOWER" if ratio > 1 + a.limit else ""
        slow += mark != ""
        shape = "x".join(v for v in k[6:9] if v)
        cells = [k[0], k[1], " ".join(v for v in (k[2], k[3], k[4], k[5]) if v), shape,
                 "%.1f" % b, "%.1f" % t, "%.3f" % ratio, mark]
        print(("| " if a.markdown else "") + sep.join(cells) + (" |" if a.markdown else ""))
    if a.markdown:
        print()  # the lines below are not table rows
    b_all, a_all = set(before) | b_untimed, set(after) | a_untimed
    for what, keys in (("only before", b_all - a_all), ("only after", a_all - b_all),
                       ("untimed before", b_untimed & a_all),
                       ("untimed after", a_untimed & b_all - b_untimed)):
        for k in sorted(keys, key=row_order):
            print("%s: %s" % (what, ",".join(k)))
    print("%d rows compared, %d more than %g%% slower" % (len(common), slow, 100 * a.limit))
    if not common:
        print("bench_compare.py: no timed row is in both files", file=sys.stderr)
    return 1 if slow or not common else 0


if __name__ == "__main__":
    qf_stdout.run("bench_compare.py", main)
