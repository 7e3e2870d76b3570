#!/usr/bin/env python3
"""bench_report.py: merges qfuse.csv and peers.csv of `make bench` into results, plot and tables.

Reads DIR/qfuse.csv (build/qfuse-bench) and DIR/peers.csv (scripts/bench_peers.py), fills the
speedup_eager / speedup_compile columns of every qfuse row that has a peer doing the same work
(same family, op, norm, dtype, outputs and shape; speedup = peer time / qfuse time), and writes:
  DIR/results.csv    all rows of both files, the header comments of both;
  DIR/bandwidth.png  achieved TB/s of each norm + quantize kernel with bf16 input per shape,
                     qfuse beside eager and torch.compile, a line at the measured copy bandwidth;
  docs/bench.md      the part between <!-- bench:begin --> and <!-- bench:end --> (--doc; not
                     with --quick: a smoke run does not replace the reference numbers).
Prints the merged table. Exits 0 with a message when there is nothing to report (no GPU run:
DIR holds no qfuse.csv); exits 1, writing nothing, when an input cannot be read, lacks a column
or holds no row with a kind and an op, or when the page to update is missing or lacks its
markers in order; 1 also when an output cannot be written; 2 on bad usage. A text cell's '|' is
escaped and its control characters become spaces; a number that is not positive and finite is
shown as an empty cell.
"""
import csv
import math
import os
import re
import statistics
import sys

import qf_stdout

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
PEER_KINDS = {"peer_eager": "speedup_eager", "peer_compile": "speedup_compile"}
MATCH_FIELDS = ("op", "norm", "dtype", "outputs", "M", "K", "N")
# The columns this script reads from both CSVs (qfuse-bench writes them all, bench_peers.py too).
REQUIRED = ("kind", "recipe") + MATCH_FIELDS + ("us_median",)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ReportError(Exception):
    """An input the report cannot use; main prints it and exits 1 before writing anything."""

# ============================================================================ reading


def parse_comment(line, meta):
    """`# key=value, key=value` into meta; a value may contain commas not followed by key=."""
    for part in re.split(r",\s*(?=[A-Za-z_][A-Za-z0-9_]*=)", line.lstrip("#").strip()):
        key, sep, value = part.partition("=")
        if sep:
            meta.setdefault(key.strip(), value.strip())


def clean(text):
    """A cell as the tables can show it: control characters as spaces, '|' escaped for
    Markdown (the cells of results.csv carry the same text)."""
    return re.sub(r"[\x00-\x1f\x7f]", " ", text).replace("|", "\\|")


def read_csv(path):
    """(meta, comment lines, rows) of a bench CSV; rows are dicts of cleaned strings (a short
    row's missing cells are empty; a row without kind or op is left out, with a warning).
    ReportError when the file cannot be read as text or its header lacks a column of REQUIRED."""
    meta, comments, body = {}, [], []
    try:
        with qf_stdout.open_input(path, newline="", encoding="utf-8-sig") as f:
            for line in f:
                if line.startswith("#"):
                    comments.append(line.rstrip("\n"))
                    parse_comment(line, meta)
                elif line.strip():
                    body.append(line)
        reader = csv.DictReader(body, restval="")
        rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ReportError("cannot read %s: %s" % (path, qf_stdout.why(e))) from e
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if body and missing:
        raise ReportError("%s lacks the column(s) %s: not a CSV of build/qfuse-bench or "
                          "scripts/bench_peers.py" % (path, ", ".join(missing)))
    rows = [{k: clean(v) if isinstance(v, str) else v for k, v in r.items()} for r in rows]
    kept = [r for r in rows if r["kind"].strip() and r["op"].strip()]
    if len(kept) < len(rows):
        print("warning: %s: %d row(s) without a kind or an op left out"
              % (path, len(rows) - len(kept)), file=sys.stderr)
    return meta, comments, kept


def num(row, key):
    """Float value of row[key], or None when empty, absent, not a number, NaN, infinite or not
    positive (every number the benches write is positive: times, rates, sizes, ratios)."""
    try:
        v = float(row.get(key) or "")
    except ValueError:
        return None
    return v if math.isfinite(v) and v > 0 else None


# ============================================================================ merging


def family_map(meta):
    """recipe name -> family from qfuse.csv's `# recipes=name:family;...` line."""
    pairs = (p.split(":", 1) for p in meta.get("recipes", "").split(";") if ":" in p)
    return {name: fam for name, fam in pairs}


def match_key(row, families):
    """What a row measures: (family, op, norm, dtype, outputs, M, K, N). Peers name the family
    in `recipe`; qfuse rows name the recipe, mapped to its family."""
    recipe = row["recipe"]
    family = recipe if row["kind"].startswith("peer") else families.get(recipe, recipe)
    return (family,) + tuple(row[f] for f in MATCH_FIELDS)


def fill_speedups(qrows, prows, families):
    """Sets speedup_eager / speedup_compile of qfuse rows from peers with the same key."""
    peers = {}
    for p in prows:
        if p["kind"] in PEER_KINDS and num(p, "us_median"):
            peers[(p["kind"],) + match_key(p, families)] = num(p, "us_median")
    for q in qrows:
        us = num(q, "us_median")
        if q["kind"] != "qfuse" or not us:
            continue
        for kind, col in PEER_KINDS.items():
            peer_us = peers.get((kind,) + match_key(q, families))
            q[col] = "%.3f" % (peer_us / us) if peer_us else ""


def peer_lookup(prows, families):
    """(kind, key) -> peer row, for the tables."""
    return {(p["kind"],) + match_key(p, families): p for p in prows if p["kind"] in PEER_KINDS}


def write_results(path, qcomments, pcomments, columns, rows):
    with open(path, "w", newline="") as f:
        for c in qcomments:
            f.write(c + "\n")
        for c in pcomments:
            f.write("# peers: " + c.lstrip("#").strip() + "\n")
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in columns})


# ============================================================================ tables


def fmt(v, spec):
    return spec % v if v is not None else ""


def percent(ratio):
    return "%.0f%%" % (100 * ratio) if ratio is not None else ""


def shape_of(r):
    """"M x K -> N" of a row with an M, each of its dims (N may be empty) a positive integer;
    else ""."""
    dims = [r.get(d) for d in "MKN" if r.get(d)]
    if not r.get("M") or not all(re.fullmatch(r"[0-9]{1,18}", d) and int(d) > 0 for d in dims):
        return ""
    s = "%s x %s" % (r["M"], r["K"])
    return s + (" -> %s" % r["N"] if r.get("N") else "")


def kernel_label(r):
    """Short name of a norm + quantize kernel: 'fp8_delayed layernorm rowwise+columnwise'."""
    what = r["norm"] if r["op"] == "norm_quantize" else "weight"
    return "%s %s %s" % (r["recipe"], what, r["outputs"])


def nq_table(qrows, prows, families, dtype):
    """Markdown table of the norm + quantize rows with x dtype `dtype`, peers beside."""
    peers = peer_lookup(prows, families)
    lines = ["| kernel | M x K | qfuse us | TB/s | of copy | eager us | compile us | "
             "vs eager | vs compile |", "|---|---|---|---|---|---|---|---|---|"]
    for r in qrows:
        if r["kind"] != "qfuse" or r["op"] not in ("norm_quantize", "quantize_weight") \
                or r["dtype"] != dtype:
            continue
        e = peers.get(("peer_eager",) + match_key(r, families), {})
        c = peers.get(("peer_compile",) + match_key(r, families), {})
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            kernel_label(r), shape_of(r), fmt(num(r, "us_median"), "%.1f"),
            fmt(num(r, "tbps"), "%.2f"), percent(num(r, "ratio_copy")),
            fmt(num(e, "us_median"), "%.1f"), fmt(num(c, "us_median"), "%.1f"),
            fmt(num(r, "speedup_eager"), "%.2fx"), fmt(num(r, "speedup_compile"), "%.2fx")))
    return lines


def dtypes_table(qrows, dtypes):
    """qfuse's norm + quantize rows of other x dtypes side by side: us, TB/s, of copy each."""
    cells = {}
    for r in qrows:
        if r["kind"] == "qfuse" and r["op"] in ("norm_quantize", "quantize_weight") \
                and r["dtype"] in dtypes:
            cells.setdefault((kernel_label(r), shape_of(r)), {})[r["dtype"]] = r
    head = "| kernel | M x K |" + "".join(" %s us | %s TB/s | of copy |" % (d, d) for d in dtypes)
    lines = [head, "|---|---|" + "---|---|---|" * len(dtypes)]
    for (label, shape), by_dt in cells.items():
        line = "| %s | %s |" % (label, shape)
        for d in dtypes:
            r = by_dt.get(d, {})
            line += " %s | %s | %s |" % (fmt(num(r, "us_median"), "%.1f"),
                                         fmt(num(r, "tbps"), "%.2f"), percent(num(r, "ratio_copy")))
        lines.append(line)
    return lines if len(lines) > 2 else []


def peer_only_table(qrows, prows, families):
    """Peers with no qfuse row yet (formats qfuse does not ship): eager and compile times."""
    have = {match_key(r, families) for r in qrows if r["kind"] == "qfuse"}
    lines = ["| kernel | M x K | eager us | eager TB/s | compile us | compile TB/s | note |",
             "|---|---|---|---|---|---|---|"]
    compile_rows = peer_lookup(prows, families)
    for e in prows:
        key = match_key(e, families)
        if e["kind"] != "peer_eager" or key in have or e["op"].startswith(("gemm", "mlp_step")):
            continue
        c = compile_rows.get(("peer_compile",) + key, {})
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            kernel_label(e), shape_of(e), fmt(num(e, "us_median"), "%.1f"),
            fmt(num(e, "tbps"), "%.2f"), fmt(num(c, "us_median"), "%.1f"),
            fmt(num(c, "tbps"), "%.2f"), (e.get("note") or c.get("note") or "")[:80]))
    return lines if len(lines) > 2 else []


def gemm_rows(qrows, prows, families, ops):
    """Each qfuse row of a GEMM op in ops, with the ceiling rows measured at its shape (by op) and
    its eager and compiled peers: (row, ceilings, eager, compiled); a missing one is {}."""
    peers = peer_lookup(prows, families)
    lt = {(r["op"], r["M"], r["K"], r["N"]): r for r in qrows if r["kind"] == "ceiling"}
    for r in qrows:
        if r["kind"] != "qfuse" or r["op"] not in ops:
            continue
        dims, key = (r["M"], r["K"], r["N"]), match_key(r, families)
        ceilings = {op: lt.get((op,) + dims, {})
                    for op in ("cublaslt_fp8_gemm", "cublaslt_bf16_gemm")}
        yield (r, ceilings, peers.get(("peer_eager",) + key, {}),
               peers.get(("peer_compile",) + key, {}))


def gemm_kind(r):
    """The training GEMM a qfuse GEMM row's shape is ("fprop", "dgrad of 2048 x 4096 -> 14336"):
    the start of its note, up to the first colon."""
    note = r.get("note") or ""
    return note.split(":", 1)[0] if ":" in note else ""


def gemm_table(qrows, prows, families):
    """GEMM rows: qfuse FP8 against cuBLASLt FP8 alone, bf16 and torch._scaled_mm."""
    lines = ["| M x K -> N | training GEMM | qfuse FP8 TFLOP/s | cuBLASLt FP8 | cuBLASLt bf16 | "
             "_scaled_mm eager | compiled | qfuse / cuBLASLt FP8 |",
             "|---|---|---|---|---|---|---|---|"]
    for r, lt, e, c in gemm_rows(qrows, prows, families, ("gemm_fp8",)):
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            shape_of(r), gemm_kind(r), fmt(num(r, "tflops"), "%.0f"),
            fmt(num(lt["cublaslt_fp8_gemm"], "tflops"), "%.0f"),
            fmt(num(lt["cublaslt_bf16_gemm"], "tflops"), "%.0f"), fmt(num(e, "tflops"), "%.0f"),
            fmt(num(c, "tflops"), "%.0f"), fmt(num(r, "ratio_cublaslt"), "%.3f")))
    return lines


def bf16_ratio(r, q, b):
    """A block-scaled GEMM row's speed over bf16 cuBLASLt's: the ratio qfuse-bench measured with
    the ceiling timed beside the row (its ratio_cublaslt), else, where that cell is empty, q / b
    from the two rows' TFLOP/s (a CSV from before the side-by-side timing). A cell that is not a
    positive finite number is reported on stderr and gives no ratio."""
    cell = (r.get("ratio_cublaslt") or "").strip()
    if not cell:
        return q / b if q and b else None
    ratio = num(r, "ratio_cublaslt")  # None unless positive and finite
    if ratio is None:
        print("warning: %s %s at %s: ratio_cublaslt %r is not a positive number; its ratio to "
              "bf16 is left out" % (r.get("recipe"), r.get("op"), shape_of(r), cell),
              file=sys.stderr)
        return None
    return ratio


def block_gemm_table(qrows, prows, families):
    """The MXFP8 and NVFP4 GEMMs (Hopper: generated kernels) against bf16 cuBLASLt (the fastest of
    its heuristic algorithms) and the emulation peer (dequantize + bf16 matmul, one sequence);
    the "weight kept" rows read the weight's bf16 copy made once (qfuse: qf_dequantize and
    qf_gemm_opts.b_dequantized), beside the emulation that keeps it too. "qfuse / bf16 on these
    values" is the quotient of the two rows' ratios to bf16 (each timed beside the ceiling), so
    that the clocks of neither row's own rounds enter it."""
    lines = ["| GEMM | M x K -> N | training GEMM | qfuse TFLOP/s | cuBLASLt bf16 | "
             "cuBLASLt bf16 on these values | emulation eager | emulation compiled | "
             "qfuse / bf16 | qfuse / bf16 on these values | qfuse / compiled emulation |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    values = {(r["op"], r["M"], r["K"], r["N"]): r for r in qrows
              if r["kind"] == "ceiling" and r["op"].endswith("_values")}
    ops = tuple("gemm_" + f + s for f in ("mxfp8", "nvfp4") for s in ("", "_wkept"))
    for r, lt, e, c in gemm_rows(qrows, prows, families, ops):
        q, b, ce = num(r, "tflops"), num(lt["cublaslt_bf16_gemm"], "tflops"), num(c, "tflops")
        vrow = values.get(("cublaslt_bf16_gemm_%s_values" % r["op"][5:].split("_")[0],
                           r["M"], r["K"], r["N"]), {})
        v = num(vrow, "tflops")
        rq, rv = bf16_ratio(r, q, b), bf16_ratio(vrow, v, b) if vrow else None
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["op"][5:].replace("_wkept", ", weight kept"), shape_of(r), gemm_kind(r),
            fmt(q, "%.0f"), fmt(b, "%.0f"), fmt(v, "%.0f"), fmt(num(e, "tflops"), "%.0f"),
            fmt(ce, "%.0f"), fmt(rq, "%.3f"), fmt(rq / rv if rq and rv else None, "%.3f"),
            fmt(q / ce if q and ce else None, "%.3f")))
    return lines if len(lines) > 2 else []


def fp8_block_gemm_table(qrows, prows, families):
    """FP8 block scaling's GEMMs (cuBLASLt with 1x128 / 128x128 block scales, numerics 2.5)
    beside torch._scaled_mm with the same block scales, and cuBLASLt's per-tensor FP8 and bf16
    GEMMs at the same shape, one run."""
    lines = ["| M x K -> N | training GEMM | qfuse TFLOP/s | _scaled_mm, block scales | "
             "cuBLASLt FP8 per-tensor | cuBLASLt bf16 | qfuse / _scaled_mm | qfuse / bf16 |",
             "|---|---|---|---|---|---|---|---|"]
    for r, lt, e, _ in gemm_rows(qrows, prows, families, ("gemm_fp8_block",)):
        q, s, b = num(r, "tflops"), num(e, "tflops"), num(lt["cublaslt_bf16_gemm"], "tflops")
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            shape_of(r), gemm_kind(r), fmt(q, "%.0f"), fmt(s, "%.0f"),
            fmt(num(lt["cublaslt_fp8_gemm"], "tflops"), "%.0f"), fmt(b, "%.0f"),
            fmt(q / s if q and s else None, "%.3f"), fmt(bf16_ratio(r, q, b), "%.3f")))
    return lines if len(lines) > 2 else []


def step_table(qrows, prows):
    """The LayerNorm + MLP training step of every recipe beside PyTorch bf16 eager and compiled of
    the same block (peer rows recipe bf16, op mlp_step_swiglu), with its GEMM / other split."""
    peers = {r["kind"]: r for r in prows if r["op"] == "mlp_step_swiglu"}
    e, c = (num(peers.get(k, {}), "us_median") for k in ("peer_eager", "peer_compile"))
    lines = ["| recipe | tokens x hidden -> ffn | step ms | TFLOP/s (GEMM FLOPs / step) | vs bf16 eager (%s ms) | "
             "vs bf16 torch.compile (%s ms) | GEMM stages / other |" % (
                 fmt(e / 1e3 if e else None, "%.1f"), fmt(c / 1e3 if c else None, "%.1f")),
             "|---|---|---|---|---|---|---|"]
    torch_rows = [r for r in prows if r["kind"] == "qfuse_torch" and r["op"] == "mlp_step_swiglu"]
    for r in [r for r in qrows if r["kind"] == "qfuse"] + torch_rows:
        if r["op"] != "mlp_step_swiglu":
            continue
        us = num(r, "us_median")
        name = r["recipe"]
        if r["kind"] == "qfuse_torch":
            name, split = name + ", qfuse.torch.LayerNormMLP compiled", "(not split)"
        else:
            split = (r.get("note") or "").split("GEMM stages ", 1)[-1].split("; most", 1)[0] + ")"
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            name, shape_of(r), fmt(us / 1e3 if us else None, "%.1f"),
            fmt(num(r, "tflops"), "%.0f"), fmt(e / us if e and us else None, "%.2fx"),
            fmt(c / us if c and us else None, "%.2fx"), split))
    return lines if len(lines) > 2 else []


JIT_KINDS = (("jit_cold", "cold NVRTC compile", "ms", 1e-3),
             ("jit_disk", "disk-cache load (fresh context)", "ms", 1e-3),
             ("jit_memory", "in-memory lookup", "us", 1.0))


def sig3(v):
    """v (>= 0) to 3 significant digits, without an exponent."""
    if v >= 999.5:
        return "%.0f" % v
    return "%.3g" % v if v >= 1e-4 else "%.6f" % v


def jit_summary(qrows):
    """One line per JIT kind: median and range over the quantizers and scale updates; then one
    line per GEMM module instance (kernel names ending in _gemm; the staged one is the rows whose
    outputs cell says "staged"), its three times."""
    out = []
    kinds = {k[0] for k in JIT_KINDS}
    jit = [r for r in qrows if r["kind"] in kinds and num(r, "us_median")]
    for kind, what, unit, scale in JIT_KINDS:
        v = [num(r, "us_median") * scale for r in jit
             if r["kind"] == kind and not r["op"].endswith("_gemm")]
        if v:
            out.append("- %s: median %s %s over %d kernel%s (%s to %s)" % (
                what, sig3(statistics.median(v)), unit, len(v), "" if len(v) == 1 else "s",
                sig3(min(v)), sig3(max(v))))
    for op, inst in sorted({(r["op"], r.get("outputs", "")) for r in jit
                            if r["op"].endswith("_gemm")}):
        t = {r["kind"]: num(r, "us_median") for r in jit
             if r["op"] == op and r.get("outputs", "") == inst}
        out.append("- GEMM module %s%s: %s" % (op, ", its staged instance" if inst else "", ", ".join(
            "%s %s %s" % (what, sig3(t[kind] * scale), unit)
            for kind, what, unit, scale in JIT_KINDS if kind in t)))
    return out


def ceiling(qrows, op, field):
    for r in qrows:
        if r["kind"] == "ceiling" and r["op"] == op and num(r, field):
            return num(r, field)
    return None


# ============================================================================ docs/bench.md


def block_gemm_data(qrows):
    """What the block-scaled GEMM rows multiplied, from their notes (qfuse-bench --gemm-data)."""
    for r in qrows:
        if r["kind"] == "qfuse" and r["op"].startswith(("gemm_mxfp8", "gemm_nvfp4",
                                                         "gemm_fp8_block")):
            for data in ("quantized N(0, 1) data", "random bytes, unit scales"):
                if data in (r.get("note") or ""):
                    return " (operands: %s)" % data
    return ""


def doc_section(qmeta, pmeta, qrows, prows, families):
    copy, bf16 = ceiling(qrows, "copy_d2d", "tbps"), ceiling(qrows, "cublaslt_bf16_gemm", "tflops")
    lines = ["Measured by `make bench` on %s, %s (CUDA %s, driver %s, cuBLASLt %s, NVRTC %s; "
             "PyTorch %s, Triton %s)." % (
                 qmeta.get("gpu", "?"), qmeta.get("date", "?"), qmeta.get("cuda", "?"),
                 qmeta.get("driver", "?"), qmeta.get("cublaslt", "?"), qmeta.get("nvrtc", "?"),
                 pmeta.get("torch", "not run"), pmeta.get("triton", "?")),
             "Times are medians over batches of back-to-back launches between two CUDA events "
             "(batch time / batch size), inputs rotated between sets larger than twice the L2, "
             "random data. TB/s counts x and gamma/beta read and every output written; "
             "\"of copy\" is the ratio to the device-to-device copy measured in the same run "
             "(%s); cuBLASLt bf16 8192^3: %s. Peers: the same work in PyTorch "
             "eager and torch.compile (`scripts/bench_peers.py`); speedups are peer time / "
             "qfuse time. All rows: `out/bench/results.csv`; plot: `out/bench/bandwidth.png`."
             % (fmt(copy, "%.2f TB/s") or "not in this run's rows",
                fmt(bf16, "%.0f TFLOP/s") or "not in this run's rows"), "",
             "Norm + quantize, bf16 input:", ""]
    lines += nq_table(qrows, prows, families, "bf16")
    lines += ["", "Norm + quantize, fp16 and fp32 input (qfuse only):", ""]
    lines += dtypes_table(qrows, ("fp16", "fp32"))
    other = peer_only_table(qrows, prows, families)
    if other:
        lines += ["", "Formats qfuse does not ship yet (PyTorch only, RMSNorm, bf16):", ""] + other
    lines += ["", "FP8 GEMM (TN, per-tensor scales, bf16 out):", ""]
    lines += gemm_table(qrows, prows, families)
    block = block_gemm_table(qrows, prows, families)
    if block:
        lines += ["", "Block-scaled GEMMs on this GPU%s:" % block_gemm_data(qrows), ""] + block
    fp8_block = fp8_block_gemm_table(qrows, prows, families)
    if fp8_block:
        lines += ["", "FP8 block scaling GEMMs (cuBLASLt, 1x128 / 128x128 block scales)%s:"
                  % block_gemm_data(qrows), ""] + fp8_block
    step = step_table(qrows, prows)
    if step:
        lines += ["", "One LayerNorm + MLP training step (SwiGLU; forward + backward, weights "
                  "quantized every step):", ""] + step
    jit = jit_summary(qrows)
    if jit:
        lines += ["", "JIT (per kernel):", ""] + jit
    return lines


def read_page(path):
    """The text of the page to update (line ends as they are); ReportError when it is missing,
    not text, or lacks the markers in order."""
    try:
        with qf_stdout.open_input(path, newline="") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError("--doc %s: %s (the page whose tables are rewritten; --no-doc leaves it "
                          "alone)" % (path, qf_stdout.why(e))) from e
    if BEGIN not in text or END not in text.split(BEGIN, 1)[1]:
        raise ReportError("--doc %s has no %s ... %s markers in that order (the tables go "
                          "between them; --no-doc leaves the page alone)" % (path, BEGIN, END))
    return text


def update_doc(path, text, lines):
    """Writes text (read_page's: its markers checked) with the part between the markers replaced
    by lines."""
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    with open(path, "w", newline="") as f:
        f.write(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail)
    print("updated %s" % path)


# ============================================================================ plot


def plot_groups(qrows, prows):
    """{kernel label: {shape: {kind: TB/s}}} for bf16 norm + quantize rows, qfuse and peers."""
    groups = {}
    for r in qrows + prows:
        if r["dtype"] != "bf16" or r["op"] not in ("norm_quantize", "quantize_weight"):
            continue
        if r["kind"] in ("qfuse",) + tuple(PEER_KINDS) and num(r, "tbps"):
            groups.setdefault(kernel_label(r), {}).setdefault(shape_of(r), {})[r["kind"]] = \
                num(r, "tbps")
    return groups


def plot(path, qrows, prows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: %s not written" % path)
        return
    groups, copy = plot_groups(qrows, prows), ceiling(qrows, "copy_d2d", "tbps")
    if not groups:
        print("no bf16 norm + quantize rows: %s not written" % path)
        return
    cols = 2
    rows_n = (len(groups) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(7 * cols, 3.6 * rows_n), squeeze=False)
    top = max([copy or 0.0] + [v for g in groups.values() for s in g.values() for v in s.values()])
    for ax, (label, shapes) in zip(axes.flat, sorted(groups.items())):
        plot_panel(ax, label, shapes, copy)
        ax.set_ylim(0, 1.12 * top)
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=4, bbox_to_anchor=(0.5, 0.965))
    fig.suptitle("Achieved bandwidth of norm + quantize, bf16 input (higher is better)", y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=110)
    print("wrote %s" % path)


def plot_panel(ax, label, shapes, copy):
    bars = (("qfuse", "qfuse", "#1f77b4"), ("peer_eager", "PyTorch eager", "#ff7f0e"),
            ("peer_compile", "torch.compile", "#2ca02c"))
    names = list(shapes)
    width = 0.27
    for i, (kind, legend, color) in enumerate(bars):
        xs = [j + (i - 1) * width for j in range(len(names))]
        ax.bar(xs, [shapes[s].get(kind, 0.0) for s in names], width, label=legend, color=color)
    if copy:
        ax.axhline(copy, color="black", linestyle="--", linewidth=1,
                   label="D2D copy %.2f TB/s" % copy)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([qf_stdout.plot_text(n) for n in names], fontsize=8)
    ax.set_ylabel("TB/s")
    no_qfuse = not any("qfuse" in v for v in shapes.values())
    ax.set_title(qf_stdout.plot_text(label) + (" (no qfuse kernel yet)" if no_qfuse else ""),
                 fontsize=10)


# ============================================================================ main


def print_table(qrows):
    print("\n%-10s %-26s %-9s %-5s %-18s %-22s %9s %8s %8s %7s %7s %7s" % (
        "kind", "op", "norm", "dtype", "outputs", "shape", "us", "TB/s", "TFLOP/s", "x copy",
        "vs eag", "vs comp"))
    for r in qrows:
        print("%-10s %-26s %-9s %-5s %-18s %-22s %9s %8s %8s %7s %7s %7s" % (
            r["kind"], r["op"][:26], r["norm"], r["dtype"], r["outputs"], shape_of(r),
            fmt(num(r, "us_median"), "%.1f"), fmt(num(r, "tbps"), "%.3f"),
            fmt(num(r, "tflops"), "%.1f"), fmt(num(r, "ratio_copy"), "%.3f"),
            fmt(num(r, "speedup_eager"), "%.2f"), fmt(num(r, "speedup_compile"), "%.2f")))


def main(argv):
    p = qf_stdout.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Exit status: 0 success, or nothing to report (DIR holds no qfuse.csv); 1 an "
               "input that cannot be read or used, or an output that cannot be written; 2 bad "
               "usage.")
    p.add_argument("--dir", default="out/bench", help="folder of qfuse.csv and peers.csv")
    p.add_argument("--doc", "--readme", dest="doc", default=os.path.join(ROOT, "docs", "bench.md"),
                   help="page whose tables between the markers are rewritten (default: this "
                        "checkout's docs/bench.md)")
    p.add_argument("--quick", action="store_true", help="smoke run: leave the page alone")
    p.add_argument("--no-doc", action="store_true",
                   help="some sections only: leave the page alone (the tables still go to "
                        "tables.md in --dir)")
    args = p.parse_args(argv)
    if not os.path.isdir(args.dir):
        p.error("--dir %s: %s (`make bench` writes its CSVs into out/bench)"
                % (args.dir, "not a directory" if os.path.exists(args.dir)
                   else "no such directory"))
    qpath, ppath = os.path.join(args.dir, "qfuse.csv"), os.path.join(args.dir, "peers.csv")
    if not os.path.exists(qpath):
        print("no %s (no GPU run): nothing to report" % qpath)
        return 0
    try:
        return report(args, qpath, ppath)
    except ReportError as e:
        print("bench_report.py: %s" % e, file=sys.stderr)
        return 1


def report(args, qpath, ppath):
    """Reads both CSVs and writes results.csv, bandwidth.png, tables.md and the page; every input
    is checked (ReportError) before the first of them is written, and an output that cannot be
    written ends the run with a ReportError naming it."""
    update = not (args.quick or args.no_doc)
    page = read_page(args.doc) if update else None
    qmeta, qcomments, qrows = read_csv(qpath)
    if not qrows:
        raise ReportError("%s has no rows: nothing to report, %s left alone" % (qpath, args.doc))
    if not any(num(r, "us_median") for r in qrows):
        raise ReportError("%s has no row with a time (us_median, a positive number): nothing to "
                          "report, %s left alone" % (qpath, args.doc))
    pmeta, pcomments, prows = read_csv(ppath) if os.path.exists(ppath) else ({}, [], [])
    families = family_map(qmeta)
    fill_speedups(qrows, prows, families)
    print_table(qrows)
    columns = [c for c in qrows[0] if c is not None]  # None: the cells past a long row's header
    lines = doc_section(qmeta, pmeta, qrows, prows, families)
    path = os.path.join(args.dir, "results.csv")
    try:
        write_results(path, qcomments, pcomments, columns, qrows + prows)
        path = os.path.join(args.dir, "bandwidth.png")
        plot(path, qrows, prows)
        path = os.path.join(args.dir, "tables.md")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        print("wrote %s" % path)
        if update:
            path = args.doc
            update_doc(path, page, lines)
    except OSError as e:
        raise ReportError("cannot write %s: %s" % (path, qf_stdout.why(e))) from e
    if not update:
        print("%s not updated (%s)" % (args.doc, "--quick: smoke run" if args.quick else
                                       "--no-doc: some sections only"))
    return 0


if __name__ == "__main__":
    qf_stdout.run("bench_report.py", main, sys.argv[1:])
