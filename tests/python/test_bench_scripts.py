"""The benchmark's operand data (--gemm-data), without a GPU: qfuse-bench and
scripts/bench_peers.py take the same choices, and the peers' FP8 block-scaling quantizer follows
numerics 2.5 on its examples (that part needs PyTorch; it runs on the CPU)."""
import os
import subprocess

import pytest

import script_module

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def load_script(name):
    """scripts/<name>.py as a module (script_module.load)."""
    return script_module.load(name + ".py")


def load_bench_peers():
    return load_script("bench_peers")


def load_bench_report():
    return load_script("bench_report")


def test_peers_gemm_data_option(capsys):
    bp = load_bench_peers()
    assert bp.parse_args([]).gemm_data == "quantized"
    assert bp.parse_args(["--gemm-data", "bytes"]).gemm_data == "bytes"
    with pytest.raises(SystemExit) as e:
        bp.parse_args(["--gemm-data", "random"])
    assert e.value.code == 2
    assert "invalid choice: 'random'" in capsys.readouterr().err


def test_bench_gemm_data_option(built_tool):
    tool = built_tool("qfuse-bench")
    r = subprocess.run([tool, "--gemm-data", "random"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert "--gemm-data 'random': expected quantized or bytes" in r.stderr
    r = subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--gemm-data D" in r.stdout


def test_fp8_block_quantize_examples():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: the peers' quantizer "
                                                "needs it")
    bp = load_bench_peers()
    y = torch.zeros(2, 256)
    y[0, :128] = torch.linspace(-3.0, 3.0, 128)      # amax 3: 448 / 3 rounds down to 128
    y[0, 128:] = torch.linspace(-448.0, 448.0, 128)  # amax 448: scale 1
    y[1, :128] = 1e-38                               # 448 / 1e-38 is inf: bf16 max, then 2^127
    # y[1, 128:] stays zero: scale 1, zero data
    q, scale_inv = bp.fp8_block_quantize(y, False)
    assert scale_inv.shape == (2, 2)
    assert scale_inv.tolist() == [[1 / 128, 1.0], [2.0 ** -127, 1.0]]
    assert q[0, 127].float().item() == 384.0  # 3 * 128
    assert q[0, 255].float().item() == 448.0
    assert torch.all(q[1, 128:].float() == 0)
    w = torch.ones(256, 128)
    w[128:, :] = 2.0  # the second 128x128 tile
    qw, sw = bp.fp8_block_quantize(w, True)
    assert sw.shape == (2, 1)
    assert sw.flatten().tolist() == [1 / 256, 1 / 128]  # 448 -> 256 and 224 -> 128
    assert torch.all(qw.float() == 256.0)


def test_report_names_the_gemm_data():
    br = load_bench_report()
    row = {"kind": "qfuse", "op": "gemm_nvfp4_wkept",
           "note": "fprop: qf_gemm of the fprop copies, compact scales, random bytes, unit scales; "
                   "x0.950 of bf16 cuBLASLt in this run"}
    assert br.block_gemm_data([row]) == " (operands: random bytes, unit scales)"
    assert br.block_gemm_data([dict(row, note=row["note"].replace(
        "random bytes, unit scales", "quantized N(0, 1) data"))]) == \
        " (operands: quantized N(0, 1) data)"
    assert br.block_gemm_data([dict(row, op="gemm_fp8")]) == ""  # per-tensor FP8: not these rows


def test_report_takes_the_ratio_timed_beside_the_row():
    """The block-scaled GEMM table's "qfuse / bf16" is the ratio qfuse-bench measured with the
    bf16 ceiling timed beside the row (ratio_cublaslt), not the two rows' TFLOP/s, which were
    timed apart; a CSV without it falls back on them."""
    br = load_bench_report()
    dims = {"M": "2048", "K": "14336", "N": "4096", "norm": "", "dtype": "", "outputs": ""}
    ceiling = dict(dims, kind="ceiling", recipe="", op="cublaslt_bf16_gemm", tflops="800")
    row = dict(dims, kind="qfuse", recipe="mxfp8", op="gemm_mxfp8_wkept", tflops="714",
               ratio_cublaslt="0.9125", note="dgrad: qf_gemm of the dgrad copies")

    def ratio_cell(q):
        lines = br.block_gemm_table([ceiling, q], [], {})
        assert len(lines) == 3, lines
        return lines[2].split("|")[9].strip()

    assert ratio_cell(row) == "0.912"  # side by side, not 714 / 800
    assert ratio_cell(dict(row, ratio_cublaslt="")) == "0.892"  # 714 / 800
    # "qfuse / bf16 on these values": the quotient of the two rows' ratios timed beside the
    # ceiling (0.9125 / 1.0125), not of their TFLOP/s (714 / 760)
    values = dict(dims, kind="ceiling", recipe="mxfp8", op="cublaslt_bf16_gemm_mxfp8_values",
                  tflops="760", ratio_cublaslt="1.0125")
    cells = br.block_gemm_table([ceiling, row, values], [], {})[2].split("|")
    assert cells[10].strip() == "0.901", cells
    cells = br.block_gemm_table([ceiling, dict(row, ratio_cublaslt=""),
                                 dict(values, ratio_cublaslt="")], [], {})[2].split("|")
    assert cells[10].strip() == "0.939", cells  # an older CSV: 714 / 760
    assert ratio_cell(dict(row, ratio_cublaslt="abc")) == ""  # a bad cell: no ratio, no fallback
    for bad in ("nan", "inf", "0", "-1"):
        assert ratio_cell(dict(row, ratio_cublaslt=bad)) == "", bad


def test_report_lists_the_gemm_modules_apart():
    """The JIT lines: medians over the quantizers and scale updates, without the GEMM modules
    (the largest compiles), which get a line per instance with their three times."""
    br = load_bench_report()

    def jit(kind, op, us, outputs=""):
        return {"kind": kind, "recipe": "mxfp8", "op": op, "outputs": outputs, "us_median": us}

    rows = [jit("jit_cold", "qf_mxfp8_quant_input_bf16", "20000", "rowwise"),
            jit("jit_cold", "qf_mxfp8_scale_x", "40000"),
            jit("jit_cold", "qf_mxfp8_gemm", "1500000"),
            jit("jit_disk", "qf_mxfp8_gemm", "900"), jit("jit_memory", "qf_mxfp8_gemm", "0.2"),
            jit("jit_cold", "qf_mxfp8_gemm", "300000", "staged"),
            jit("jit_disk", "qf_mxfp8_gemm", "400", "staged"),
            jit("jit_cold", "qf_nvfp4_gemm", "abc")]  # a bad cell: no line
    assert br.jit_summary(rows) == [
        "- cold NVRTC compile: median 30 ms over 2 kernels (20 to 40)",
        "- GEMM module qf_mxfp8_gemm: cold NVRTC compile 1500 ms, disk-cache load (fresh "
        "context) 0.9 ms, in-memory lookup 0.2 us",
        "- GEMM module qf_mxfp8_gemm, its staged instance: cold NVRTC compile 300 ms, "
        "disk-cache load (fresh context) 0.4 ms"]
    # one kernel; values that round to 1000, and tiny ones: no exponent
    assert br.jit_summary([jit("jit_cold", "qf_mxfp8_scale_x", "999700")]) == [
        "- cold NVRTC compile: median 1000 ms over 1 kernel (1000 to 1000)"]
    assert [br.sig3(v) for v in (999.4, 999.5, 0.00005, 0.0)] == ["999", "1000", "0.000050",
                                                                   "0.000000"]


HEADER = ("kind,recipe,op,norm,dtype,outputs,M,K,N,bytes,flops,us_median,tbps,tflops,ratio_copy,"
          "ratio_cublaslt,speedup_eager,speedup_compile,note\n")
ROW = "qfuse,mxfp8,norm_quantize,layernorm,bf16,rowwise,16384,4096,,1,,100.0,1.0,,0.5,,,,\"n\"\n"
PAGE = "# page\n<!-- bench:begin -->\nold tables\n<!-- bench:end -->\ntail\n"


def report_run(tmp_path, csv_text, *args, page=PAGE):
    """bench_report.py's main on a folder holding qfuse.csv = csv_text (bytes or str; None: no
    file) and a page: (exit status, the page afterwards, the files written in the folder)."""
    d = tmp_path / "bench"
    d.mkdir(parents=True)
    if csv_text is not None:
        (d / "qfuse.csv").write_bytes(csv_text if isinstance(csv_text, bytes) else
                                      csv_text.encode())
    doc = tmp_path / "bench.md"
    doc.write_text(page)
    rc = load_bench_report().main(["--dir", str(d), "--doc", str(doc)] + list(args))
    return rc, doc.read_text(), sorted(f.name for f in d.iterdir() if f.name != "qfuse.csv")


def test_report_refuses_bad_inputs_and_writes_nothing(tmp_path, capsys):
    """An empty or header-only qfuse.csv, one whose rows have no time, one that lacks a column or
    is not text, and a --doc that is missing: exit 1 with one line naming the file, the page and the folder untouched."""
    untimed = ("quant,mxfp8,norm_quantize,rmsnorm,bf16,rowwise,abc,4096,0,1,0,nan,x,y,z,,,,\n"
               "quant,mxfp8,norm_quantize,rmsnorm,bf16,rowwise,16,16,16,1,1,-3,,,,,,,\n")
    cases = [("", "has no rows"), (HEADER, "has no rows"),
             (HEADER + untimed, "has no row with a time"),
             ("kind,recipe,op\nqfuse,mxfp8,gemm_mxfp8\n", "lacks the column(s) norm, dtype"),
             (b"\xff\xfe\x00\x01", "cannot read")]
    for i, (text, message) in enumerate(cases):
        rc, page, written = report_run(tmp_path / str(i), text)
        err = capsys.readouterr().err
        assert rc == 1 and message in err and "Traceback" not in err, (text, err)
        assert page == PAGE and written == [], text
    for i, page in enumerate(("# no markers\n", "a\n<!-- bench:end -->\nb\n<!-- bench:begin -->\n")):
        rc, after, written = report_run(tmp_path / ("page%d" % i), HEADER + ROW, page=page)
        err = capsys.readouterr().err
        assert rc == 1 and "markers in that order" in err and "Traceback" not in err, err
        assert after == page and written == []
    rc, page, written = report_run(tmp_path / "kindless", HEADER + ",,,,,,,,,,,,,,,,,,\nqfuse\n")
    assert rc == 1 and "has no rows" in capsys.readouterr().err and page == PAGE
    d = tmp_path / "nodoc"
    d.mkdir()
    (d / "qfuse.csv").write_text(HEADER + ROW)
    rc = load_bench_report().main(["--dir", str(d), "--doc", str(d / "missing.md")])
    assert rc == 1 and "No such file" in capsys.readouterr().err
    assert sorted(f.name for f in d.iterdir()) == ["qfuse.csv"]


def test_report_dir_must_exist(tmp_path, capsys):
    """A --dir that does not exist is bad usage (2); an existing one without qfuse.csv is a run
    without a GPU: nothing to report, exit 0."""
    with pytest.raises(SystemExit) as e:
        load_bench_report().main(["--dir", str(tmp_path / "typo")])
    assert e.value.code == 2 and "no such directory" in capsys.readouterr().err
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SystemExit) as e:
        load_bench_report().main(["--dir", str(tmp_path / "a_file")])
    assert e.value.code == 2 and "a_file: not a directory" in capsys.readouterr().err
    rc, page, written = report_run(tmp_path, None)
    assert rc == 0 and page == PAGE and written == []
    assert "nothing to report" in capsys.readouterr().out


def test_report_rewrites_the_page_between_its_markers(tmp_path, capsys):
    """A good CSV (with a short row) replaces only the tables between the markers."""
    rc, page, written = report_run(tmp_path, HEADER + ROW + "qfuse,mxfp8,norm_quantize\n")
    assert rc == 0, capsys.readouterr().err
    assert page.startswith("# page\n<!-- bench:begin -->\n") and page.endswith(
        "<!-- bench:end -->\ntail\n") and "old tables" not in page
    assert "results.csv" in written and "tables.md" in written
    # a run without the ceiling rows or the JIT section says so, with no empty cells in the prose
    # and no empty JIT heading
    assert "(not in this run's rows); cuBLASLt bf16 8192^3: not in this run's rows." in page
    assert "( TB/s)" not in page and "JIT (per kernel)" not in page


def test_report_names_an_output_it_cannot_write(tmp_path, capsys):
    d = tmp_path / "bench"
    d.mkdir()
    (d / "qfuse.csv").write_text(HEADER + ROW)
    (d / "results.csv").mkdir()
    rc = load_bench_report().main(["--dir", str(d), "--no-doc"])
    err = capsys.readouterr().err
    assert rc == 1 and "cannot write" in err and "results.csv" in err and "Traceback" not in err


def test_report_cells_stay_in_their_columns():
    """A '|', a newline or a NUL in a text cell cannot break a table line, a number that is not
    positive is left blank, and PyTorch's step rows are not taken for a format qfuse lacks."""
    br = load_bench_report()
    peer = {"kind": "peer_eager", "recipe": "fam|x", "op": "norm_quantize", "norm": "rmsnorm",
            "dtype": "bf16", "outputs": "rowwise", "M": "16", "K": "32", "N": "",
            "us_median": "-5", "tbps": "2.0", "note": "a | b\nc\x00d"}
    step = dict(peer, recipe="bf16", op="mlp_step_swiglu", note="")
    rows = [{k: br.clean(v) for k, v in r.items()} for r in (peer, step)]
    lines = br.peer_only_table([], rows, {})
    assert len(lines) == 3, lines  # the step row is not listed
    assert lines[2].count("|") - lines[2].count("\\|") == 8, lines[2]  # 7 cells
    assert "\n" not in lines[2] and "\x00" not in lines[2]
    assert lines[2].split(" | ")[2] == ""  # eager us: -5 left blank


# ------------------------------------------------------------------ scripts/bench_compare.py

BENCH_HEAD = ("# gpu=test\nkind,recipe,op,norm,dtype,outputs,M,K,N,bytes,flops,us_median,"
              "tbps,tflops,ratio_copy,ratio_cublaslt,speedup_eager,speedup_compile,note\n")


def bench_csv(d, name, times):
    """d/name: a qfuse-bench CSV with one quant row per (M, us_median text) in times."""
    p = d / name
    p.write_text(BENCH_HEAD + "".join(
        "quant,mxfp8,nq,layernorm,bf16,rowwise,%d,4096,,1,,%s,,,,,,,\n" % (m, us)
        for m, us in times))
    return str(p)


def bench_compare(args, stdout=subprocess.PIPE):
    return subprocess.run(["python3", os.path.join(ROOT, "scripts", "bench_compare.py")] + args,
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60)


def test_bench_compare_rows(tmp_path):
    """Matched rows compared, a slowdown past --limit marked and exit 1; rows without a finite
    positive time left out."""
    a = bench_csv(tmp_path, "a.csv", [(1024, "100.0"), (2048, "200.0"), (4096, "nan")])
    b = bench_csv(tmp_path, "b.csv", [(1024, "102.0"), (2048, "220.0"), (4096, "300.0")])
    r = bench_compare([a, b])
    assert r.returncode == 1, r.stderr
    assert "2 rows compared, 1 more than 3% slower" in r.stdout
    assert "untimed before: quant,mxfp8,nq,layernorm,bf16,rowwise,4096,4096," in r.stdout
    assert "only " not in r.stdout
    r = bench_compare([a, b, "--limit", "0.2"])
    assert r.returncode == 0 and "2 rows compared, 0 more than 20% slower" in r.stdout
    r = bench_compare([a, b, "--markdown"])  # a blank line ends the table before the notes
    rows = r.stdout.split("\n\n")[0].splitlines()
    assert len(rows) == 4 and all(ln.startswith("|") for ln in rows), r.stdout
    assert "\n\nuntimed before: " in r.stdout


@pytest.mark.parametrize("case,msg", [
    ("missing", "cannot read"),
    ("garbage", "not a qfuse-bench CSV (no kind column)"),
    ("bad_time", "us_median 'fast' is not a number"),
])
def test_bench_compare_bad_files(tmp_path, case, msg):
    good = bench_csv(tmp_path, "good.csv", [(1024, "100.0")])
    other = {"missing": str(tmp_path / "nope.csv"),
             "bad_time": bench_csv(tmp_path, "t.csv", [(1024, "fast")])}.get(case)
    if case == "garbage":
        other = str(tmp_path / "g.csv")
        (tmp_path / "g.csv").write_text("a,b\n1,2\n")
    r = bench_compare([good, other])
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert msg in r.stderr and "Traceback" not in r.stderr


def test_bench_compare_nothing_in_common(tmp_path):
    a = bench_csv(tmp_path, "a.csv", [(1024, "100.0")])
    b = bench_csv(tmp_path, "b.csv", [(2048, "100.0")])
    r = bench_compare([a, b])
    assert r.returncode == 1
    assert "no timed row is in both files" in r.stderr


@pytest.mark.parametrize("limit", ["-1", "nan", "inf", "1e400", "101", "x"])
def test_bench_compare_bad_limit(tmp_path, limit):
    a = bench_csv(tmp_path, "a.csv", [(1024, "100.0")])
    r = bench_compare([a, a, "--limit", limit])
    assert r.returncode == 2
    assert "'%s': expected a fraction from 0 to 100" % limit in r.stderr


def test_bench_compare_rows_checked(tmp_path):
    """A second row for one key, with the file's own line number ('#' lines counted), is
    refused; so is a row with fewer or more fields than the header (qfuse-bench writes every
    cell); the rows only in one file are listed with M, K and N in numeric order."""
    a = bench_csv(tmp_path, "a.csv", [(1024, "100.0"), (2048, "90.0"), (1024, "10.0")])
    r = bench_compare([a, a])
    assert r.returncode == 2 and r.stdout == ""
    assert "a.csv: line 5: a second row for quant,mxfp8,nq,layernorm,bf16,rowwise,1024," \
        in r.stderr  # the '#' line and the header are lines 1 and 2
    head = "us_median," + ",".join(load_script("bench_compare").KEY)
    odd = tmp_path / "odd.csv"
    for row, n in (("5", 1), ("5" + "," * 9 + ",x", 11)):
        odd.write_text(head + "\n" + row + "\n")
        r = bench_compare([str(odd), str(odd)])
        assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
        assert "odd.csv: line 2: %d fields where the header has 10 (not a qfuse-bench row)" % n \
            in r.stderr, r.stderr
    for m in ("1\u00b2", "9" * 5000):  # a digit int() refuses, a number past its limit
        odd.write_text(head + "\n5,quant,r,o,n,d,o,%s,1,1\n" % m, encoding="utf-8")
        r = bench_compare([str(odd), str(odd)])
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    odd.write_text(head + "\n5" + "," * 9 + "\n")  # every field, the key's empty
    r = bench_compare([str(odd), str(odd)])
    assert r.returncode == 0 and r.stdout.endswith("1 rows compared, 0 more than 3% slower\n")
    b = bench_csv(tmp_path, "b.csv", [(64, "1.0"), (4096, "1.0"), (512, "1.0")])
    c = bench_csv(tmp_path, "c.csv", [(8, "1.0")])
    r = bench_compare([b, c])
    only = [ln.split(",")[6] for ln in r.stdout.splitlines() if ln.startswith("only before")]
    assert only == ["64", "512", "4096"]


def test_bench_compare_stdout_closed(tmp_path):
    a = bench_csv(tmp_path, "a.csv", [(1024, "100.0")])
    r = subprocess.run(["python3", os.path.join(ROOT, "scripts", "bench_compare.py"), a, a],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60,
                       pass_fds=(), close_fds=True,
                       preexec_fn=lambda: os.close(1))
    assert r.returncode == 1
    assert r.stderr == "bench_compare.py: cannot write the standard output: Bad file descriptor\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_bench_compare_output_full(tmp_path):
    a = bench_csv(tmp_path, "a.csv", [(1024, "100.0")])
    with open("/dev/full", "w") as full:
        r = bench_compare([a, a], stdout=full)
    assert r.returncode == 1
    assert r.stderr == "bench_compare.py: cannot write the standard output: No space left on " \
        "device\n"


@pytest.mark.parametrize("arg,value", [("--iters", "-5"), ("--iters", "0"), ("--batch", "0"),
                                       ("--iters", "08"), ("--batch", "1000001")])
def test_peers_counts_checked(arg, value):
    """--iters and --batch are counts in 1..1000000, as qfuse-bench's: refused at once (exit 2),
    GPU or not, never a traceback on a GPU."""
    r = subprocess.run(["python3", os.path.join(ROOT, "scripts", "bench_peers.py"), arg, value],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "expected an integer in 1..1000000" in r.stderr, r.stderr


def test_peers_csv_checked_first(tmp_path):
    """bench_peers.py's --csv is tried before the timing, GPU or not, making nothing: a new path
    (its folders too) left as it was, an existing file's bytes kept, and a path that cannot be
    written an OSError (main: one line, exit 2, as qfuse-bench's --csv)."""
    bp = load_bench_peers()
    new = tmp_path / "sub" / "peers.csv"
    bp.csv_check(str(new))
    assert sorted(os.listdir(tmp_path)) == []
    old = tmp_path / "old.csv"
    old.write_text("kept\n")
    bp.csv_check(str(old))
    assert old.read_text() == "kept\n"
    blocker = tmp_path / "file"
    blocker.write_text("")
    bad = ["", "-", str(tmp_path / "x.csv") + "/", str(blocker / "peers.csv"), str(tmp_path),
           "/dev/null", str(tmp_path) + "/nx/../x.csv"]
    if os.path.isdir("/proc"):
        bad.append("/proc/x.csv")
    for path in bad:
        with pytest.raises(OSError):
            bp.csv_check(path)
        r = subprocess.run(["python3", os.path.join(ROOT, "scripts", "bench_peers.py"), "--csv",
                            path], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stdout == "", (path, r.stdout, r.stderr)
        assert r.stderr.startswith("bench_peers.py: --csv ") and r.stderr.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["file", "old.csv"]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_inputs_are_regular_files(tmp_path):
    """The Python tools read regular files only: a device (which never ends) or a folder is one
    line and its exit status, never a read without end or a traceback."""
    load_script("bench_peers")  # puts scripts/ on sys.path
    import qf_stdout
    for bad in ("/dev/zero", str(tmp_path)):
        with pytest.raises(OSError) as e:
            qf_stdout.open_input(bad)
        assert "not a regular file" in str(e.value) and e.value.filename == bad
    ok = tmp_path / "ok.csv"
    ok.write_text("a\n")
    with qf_stdout.open_input(str(ok)) as f:
        assert f.read() == "a\n"
    br = load_bench_report()
    with pytest.raises(br.ReportError, match="not a regular file"):
        br.read_page("/dev/zero")
    with pytest.raises(br.ReportError, match="not a regular file"):
        br.read_csv("/dev/zero")
    for cmd, rc in ((["plot-loss", "/dev/zero", str(tmp_path / "x.png")], 1),
                    (["bench_compare.py", "/dev/zero", str(ok)], 2)):
        r = subprocess.run([os.path.join(ROOT, "scripts", cmd[0])] + cmd[1:],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == rc and "not a regular file" in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
        assert r.stderr.endswith(": not a regular file\n") and "[Errno" not in r.stderr


def test_compare_reads_a_bom(tmp_path):
    """A CSV saved with a UTF-8 byte-order mark (as some editors and spreadsheets write it) is
    read as bench_report reads it, not refused for a "\\ufeffkind" column."""
    a = bench_csv(tmp_path, "a.csv", [(1024, "100.0")])
    b = tmp_path / "b.csv"
    b.write_bytes(b"\xef\xbb\xbf" + open(a, "rb").read())
    r = bench_compare([a, str(b)])
    assert r.returncode == 0 and "1 rows compared" in r.stdout, r.stderr


def test_compare_refuses_an_unterminated_quote(tmp_path):
    """A quoted field that never ends (a file cut short) is not a qfuse-bench CSV (exit 2), not
    a field that swallows the rest of the file."""
    a = bench_csv(tmp_path, "a.csv", [(1024, "100.0")])
    b = tmp_path / "b.csv"
    b.write_text(open(a).read() + 'quant,mxfp8,"nq\n')
    r = bench_compare([a, str(b)])
    assert r.returncode == 2 and "unexpected end of data" in r.stderr, r.stderr


@pytest.mark.parametrize("script,args", [("bench_peers.py", ["--cs", "x.csv"]),
                                         ("bench_compare.py", ["a", "b", "--lim", "1"]),
                                         ("bench_report.py", ["--di", "x"])])
def test_python_options_spelled_in_full(script, args):
    """The Python tools take options spelled in full, as the C tools do: an abbreviation is an
    unrecognized argument (exit 2), not the option it starts."""
    r = subprocess.run(["python3", os.path.join(ROOT, "scripts", script)] + args,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unrecognized arguments: %s" % args[-2] in r.stderr, r.stderr
