"""The tools' command lines without a GPU: qfuse-bench and qfuse-demo refuse a second value of a
single-valued option (exit 2, naming it), stop at the first bad value and add up repeated --recipe
and --section values; an output that is not a regular file is refused with that reason; and
scripts/gpu-compare keeps its own --csv (docs/tools.md)."""
import os
import shutil
import subprocess

import pytest

import script_module


def run(args, cwd=None):
    return subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize("name,args,opt", [
    ("qfuse-bench", ["--iters", "5", "--iters", "6"], "--iters"),
    ("qfuse-bench", ["--dtype", "bf16", "--dtype", "fp16"], "--dtype"),
    ("qfuse-bench", ["--csv", "a.csv", "--csv", "b.csv"], "--csv"),
    ("qfuse-demo", ["--iters", "1", "--iters", "2"], "--iters"),
    ("qfuse-demo", ["--tokens", "64", "--tokens=128"], "--tokens"),
    ("qfuse-bench", ["--iters=5", "--iters", "6"], "--iters"),
])
def test_option_given_twice(built_tool, name, args, opt):
    r = run([built_tool(name)] + args)
    assert r.returncode == 2
    assert "%s: %s given twice" % (name, opt) in r.stderr
    assert "Try '%s --help'." % name in r.stderr


@pytest.mark.parametrize("name,arg,says", [
    ("qfuse-bench", "--it", "option '--it' is not spelled in full (--iters)"),
    ("qfuse-bench", "--he", "option '--he' is not spelled in full (--help)"),
    ("qfuse-demo", "--tok=64", "option '--tok' is not spelled in full (--tokens)"),
    ("qfuse-bench", "-q", "invalid option -- 'q'"),
    ("qfuse-demo", "-t", "invalid option -- 't'"),
])
def test_options_spelled_in_full(built_tool, name, arg, says):
    # only the long options --help lists, in full: getopt_long alone takes abbreviations, and
    # the tools had short options of their own that no help named
    r = run([built_tool(name), arg, "64"] if "=" not in arg and not arg.startswith("--he")
            else [built_tool(name), arg])
    assert r.returncode == 2 and says in r.stderr and "usage:" not in r.stdout, r.stderr


@pytest.mark.parametrize("name", ["qfuse-bench", "qfuse-demo"])
def test_short_help(built_tool, name):
    # -h is --help in every C tool (qfuse-gen and qfuse-cache took it, these two refused it)
    long, short = run([built_tool(name), "--help"]), run([built_tool(name), "-h"])
    assert short.returncode == 0 and short.stdout == long.stdout and "usage:" in short.stdout
    assert "--help, -h" in short.stdout


@pytest.mark.parametrize("cmd,says", [
    (["qfuse-bench", "--csv", "--help"], "option '--csv' needs a value (the next argument, "
     "'--help', is an option"),
    (["qfuse-demo", "--weights", "w", "--loss-csv", "--quick"], "option '--loss-csv' needs a value"),
    (["qfuse-cache", "warm", "--kernel", "--jobs", "mxfp8"], "warm: --kernel needs a pattern"),
])
def test_value_is_not_the_next_option(built_tool, tmp_path, cmd, says):
    # an option's value is never the next argument when that is an option: "--csv --help" ran
    # the bench with a CSV called --help
    r = run([built_tool(cmd[0])] + cmd[1:], cwd=tmp_path)
    assert r.returncode == 2 and says in r.stderr and not list(tmp_path.iterdir()), r.stderr


def test_gen_output_paths_said_plainly(built_tool, tmp_path):
    # -o through a link to nothing says so (it said "File exists"); a path is shown escaped in
    # the "ok" line as in the errors, never as raw control bytes
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    r = run([built_tool("qfuse-gen"), "-o", str(tmp_path / "dangling"), "recipes/mxfp8.lua"])
    assert r.returncode == 1, r.stderr
    assert "cannot create directory (a symbolic link to nothing); nothing was made" in r.stderr
    assert not (tmp_path / "nothing").exists()
    odd = tmp_path / "a\nb"
    odd.mkdir()
    (odd / "x.lua").write_text('return {family = "mxfp8"}\n')
    r = run([built_tool("qfuse-gen"), "--check", str(odd / "x.lua")])
    assert r.returncode == 0 and r.stdout == "%s/a\\x0Ab/x.lua: ok\n" % tmp_path, r.stdout


def test_repeatable_options_add_up(built_tool):
    # --help after the repeats: parsing got past them (and nothing runs, GPU or not)
    r = run([built_tool("qfuse-bench"), "--recipe", "fp8_current", "--recipe", "fp8_delayed",
             "--section", "step", "--section", "gemm", "--quick", "--quick", "--help"])
    assert r.returncode == 0 and r.stdout.startswith("usage: qfuse-bench")
    r = run([built_tool("qfuse-demo"), "--recipe", "fp8_current", "--recipe", "mxfp8", "--help"])
    assert r.returncode == 0 and "usage: qfuse-demo" in r.stdout


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="no /dev/null")
def test_output_not_a_regular_file(built_tool):
    r = run([built_tool("qfuse-bench"), "--csv", "/dev/null"])
    assert r.returncode == 2
    assert "--csv /dev/null: not a regular file" in r.stderr


def test_output_dash_is_no_file(built_tool, tmp_path):
    # "-" is neither the standard output (which carries the tools' tables) nor a file called "-"
    w = tmp_path / "w.safetensors"
    w.write_bytes(b"")
    for cmd in ([built_tool("qfuse-bench"), "--csv", "-"],
                [built_tool("qfuse-demo"), "--weights", str(w), "--loss-csv", "-"]):
        r = run(cmd, cwd=tmp_path)
        assert r.returncode == 2 and "'-' does not mean the standard output" in r.stderr
        assert not (tmp_path / "-").exists()


def test_bad_value_stops_parsing(built_tool):
    # the first bad value is the one error: parsing stops there (no --help, no second message)
    for name in ("qfuse-bench", "qfuse-demo"):
        r = run([built_tool(name), "--iters", "0", "--help", "--iters", "5"])
        assert r.returncode == 2 and "usage:" not in r.stdout
        assert r.stderr.splitlines() == ["%s: --iters '0': expected an integer in 1..%s"
                                         % (name, "1000000" if name == "qfuse-bench" else "100000"),
                                         "Try '%s --help'." % name]


@pytest.mark.parametrize("name,opt,value", [
    ("qfuse-bench", "--iters", "+5"), ("qfuse-bench", "--iters", " 5"),
    ("qfuse-bench", "--batch", "05"), ("qfuse-bench", "--batch", "1000001"),
    ("qfuse-bench", "--iters", "99999999999999999999"), ("qfuse-bench", "--iters", ""),
    ("qfuse-demo", "--tokens", "-1"), ("qfuse-demo", "--tokens", "1048577"),
    ("qfuse-demo", "--train-steps", "+0"), ("qfuse-demo", "--iters", "2 "),
    ("qfuse-bench", "--shape", "08192x8192x8192"), ("qfuse-bench", "--shape", "8192x 8192x8192"),
    ("qfuse-bench", "--shape", "8192x8192x8192x1"), ("qfuse-bench", "--shape", "8192xx8192"),
])
def test_integer_values_are_digits(built_tool, name, opt, value):
    # a count is decimal digits in its range and nothing else: no sign, space or leading zero
    # (strtol would read "+5", " 5" and "08" as 5 and 8); the value is named, then the hint
    r = run([built_tool(name), opt, value] + (["--section", "gemm"] if opt == "--shape" else []))
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert lines[0].startswith("%s: %s '%s': expected " % (name, opt, value)), lines
    assert lines[1:] == ["Try '%s --help'." % name]


def test_integer_values_at_their_bounds(built_tool):
    # the bounds themselves are taken: parsing gets past them to --help (exit 0)
    for name, args in (("qfuse-bench", ["--iters", "1000000", "--batch", "1"]),
                       ("qfuse-demo", ["--tokens", "1048576", "--train-steps", "0"]),
                       ("qfuse-bench", ["--section", "gemm", "--shape", "8192x8192x8192"])):
        r = run([built_tool(name)] + args + ["--help"])
        assert r.returncode == 0 and r.stdout.startswith("usage: " + name), r.stderr


def test_gpu_compare_keeps_its_csv(tmp_path):
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    out = tmp_path / "out"
    r = run(["sh", os.path.join(root, "scripts", "gpu-compare"), str(tmp_path), str(out),
             "--quick", "--csv=x.csv"])
    assert r.returncode == 2 and "--csv is the script's own" in r.stderr
    assert not out.exists()
    r = run(["sh", os.path.join(root, "scripts", "gpu-compare")])
    assert r.returncode == 2 and r.stderr.startswith("usage: scripts/gpu-compare")


def test_gpu_compare_usage(tmp_path):
    """--help; a PREV_DIR that is no tree refused before OUT_DIR is made; bench options the
    bench refuses refused before PREV_DIR is built; a relative OUT_DIR holds the logs (the PREV
    build runs in PREV_DIR)."""
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    script = os.path.join(root, "scripts", "gpu-compare")
    r = subprocess.run(["sh", script, "--help"], capture_output=True, text=True, cwd=root)
    assert r.returncode == 0 and "PREV_DIR OUT_DIR" in r.stdout and "Exit 0" in r.stdout
    assert r.stdout.rstrip().endswith(".")  # the whole text, not cut mid-sentence
    out = tmp_path / "out"
    r = subprocess.run(["sh", script, str(tmp_path / "nope"), str(out)], capture_output=True,
                       text=True, cwd=root)
    assert r.returncode == 2 and "is not a qfuse tree" in r.stderr and not out.exists()
    r = subprocess.run(["sh", script, str(tmp_path), str(out)], capture_output=True, text=True,
                       cwd=str(tmp_path))
    assert r.returncode == 2 and "top folder" in r.stderr and not out.exists()
    prev = tmp_path / "prev"
    prev.mkdir()
    (prev / "Makefile").write_text("build/qfuse-bench:\n\t@echo prev-built; false\n")
    tree = tmp_path / "tree"  # a stand-in for this tree's top folder, its bench a stub that
    (tree / "scripts").mkdir(parents=True)  # refuses --bogus as qfuse-bench's parse does
    (tree / "build").mkdir()
    (tree / "Makefile").write_text("build/qfuse-bench:\n\t@true\n")
    bench = tree / "build" / "qfuse-bench"
    bench.write_text("#!/bin/sh\nfor a; do [ \"$a\" = --bogus ] && "
                     "{ echo \"qfuse-bench: unrecognized option '--bogus'\" >&2; exit 2; }; "
                     "done\nexit 0\n")
    bench.chmod(0o755)
    shutil.copy(script, tree / "scripts" / "gpu-compare")
    # an option the bench refuses: exit 2 before PREV_DIR is built, an earlier run's results kept
    (tree / "rel" / "out").mkdir(parents=True)
    (tree / "rel" / "out" / "before.csv").write_text("earlier\n")
    r = subprocess.run(["sh", "scripts/gpu-compare", str(prev), "rel/out", "--quick", "--bogus"],
                       capture_output=True, text=True, cwd=str(tree))
    assert r.returncode == 2 and "unrecognized option '--bogus'" in r.stderr, r.stderr
    assert "refuses these options" in r.stderr
    assert not (tree / "rel" / "out" / "build-prev.log").exists()
    assert (tree / "rel" / "out" / "before.csv").read_text() == "earlier\n"
    r = subprocess.run(["sh", "scripts/gpu-compare", str(prev), "rel/out"], capture_output=True,
                       text=True, cwd=str(tree))
    assert r.returncode == 1 and "PREV_DIR's build failed" in r.stderr, r.stderr
    assert "prev-built" in (tree / "rel" / "out" / "build-prev.log").read_text()

    # benches that time nothing (no GPU) write no CSV: exit 1, saying so, and an earlier run's
    # CSVs in OUT_DIR are not compared again
    for d in (prev, tree):
        (d / "Makefile").write_text("build/qfuse-bench:\n\t@true\n")
        (d / "build").mkdir(exist_ok=True)
        bench = d / "build" / "qfuse-bench"
        bench.write_text("#!/bin/sh\necho 'no GPU: nothing timed'\n")
        bench.chmod(0o755)
    out = tree / "rel" / "out"
    for f in ("before.csv", "after.csv"):
        (out / f).write_text("kind,recipe,op,norm,dtype,outputs,M,K,N,us_median\n"
                             "quant,mxfp8,nq,,bf16,,1,1,,5.0\n")
    r = subprocess.run(["sh", "scripts/gpu-compare", str(prev), "rel/out"], capture_output=True,
                       text=True, cwd=str(tree))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no before.csv: the bench timed nothing (a GPU is needed" in r.stderr
    assert r.stdout == "" and not (out / "after.csv").exists()


@pytest.mark.parametrize("name", ["quantize_linear", "recipe_file"])
def test_example_arguments(built_tool, name):
    # an unknown option or a second argument: exit 2, the program and the argument named, the
    # usage; --help: the usage on stdout, exit 0 (nothing runs, GPU or not)
    tool = built_tool(os.path.join("examples", name))
    r = run([tool, "--bogus"])
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("%s: unknown option '--bogus'; usage: %s" % (name, name))
    r = run([tool, "a", "b"])
    assert r.returncode == 2
    assert r.stderr.startswith("%s: one argument at most, not also 'b'; usage:" % name)
    r = run([tool, "--help"])
    assert r.returncode == 0 and r.stdout.startswith("usage: %s" % name) and r.stderr == ""


@pytest.mark.parametrize("args,opt,section", [
    (["--shape", "8192x8192x8192", "--section", "quant"], "--shape", "gemm"),
    (["--gemm-data", "bytes", "--section", "step"], "--gemm-data", "gemm"),
    (["--dtype", "bf16", "--section", "jit"], "--dtype", "quant"),
])
def test_bench_option_outside_its_section(built_tool, args, opt, section):
    # an option that picks one section's rows, with --section leaving that section out: exit 2
    # before any work, naming the section to add
    r = run([built_tool("qfuse-bench")] + args)
    assert r.returncode == 2
    assert r.stderr.startswith("qfuse-bench: %s acts on the" % opt)
    assert r.stderr.splitlines() == [r.stderr.splitlines()[0], "Try 'qfuse-bench --help'."]
    assert r.stderr.splitlines()[0].endswith("add --section %s" % section)


def test_cache_tool_without_home(built_tool, tmp_path):
    # the default cache below a HOME that does not exist: list, clear and warm all say so and
    # fail (exit 1); the missing HOME is never created
    home = tmp_path / "nohome"
    env = {k: v for k, v in os.environ.items()
           if k not in ("QFUSE_CACHE_DIR", "XDG_CACHE_HOME", "QFUSE_DISABLE_DISK_CACHE")}
    env["HOME"] = str(home)
    tool = built_tool("qfuse-cache")
    for args in (["list"], ["clear"], ["warm", "--kernel", "qf_mxfp8_act_bf16", "mxfp8"]):
        r = subprocess.run([tool] + args, capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 1, (args, r.stderr)
        # said first, before warm's choice of architecture or anything else
        assert r.stderr.startswith("qfuse-cache: HOME=%s is not an existing directory, so there "
                                   "is no ~/.cache/qfuse" % home), (args, r.stderr)
    assert not home.exists()
    # a relative QFUSE_CACHE_DIR is refused in the runtime's words, never made below the cwd
    env["QFUSE_CACHE_DIR"] = "rel/cache"
    r = subprocess.run([tool, "list"], capture_output=True, text=True, timeout=60, env=env,
                       cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("qfuse-cache: QFUSE_CACHE_DIR=rel/cache is not an absolute path"
                               " (set QFUSE_CACHE_DIR to an absolute path, or pass --dir)")
    assert not (tmp_path / "rel").exists()


def test_cache_tool_directory_said_first(built_tool, tmp_path):
    # warm on a machine without a GPU says a refused cache directory (open to every user)
    # before anything else, and never that it is warming; a path longer than PATH_MAX is said
    # as such, with its remedy
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    env = {k: v for k, v in os.environ.items() if k != "QFUSE_DISABLE_DISK_CACHE"}
    env["QFUSE_CACHE_DIR"] = str(shared)
    tool = built_tool("qfuse-cache")
    r = subprocess.run([tool, "warm", "--kernel", "qf_mxfp8_act_bf16", "mxfp8"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1, r.stderr
    assert "writable by every user" in r.stderr.splitlines()[0], r.stderr
    assert "warming for" not in r.stderr
    long_dir = "/tmp/" + "d" * 5000
    for args in (["--dir", long_dir, "list"], ["warm", "--kernel", "x", "mxfp8"]):
        env["QFUSE_CACHE_DIR"] = long_dir
        r = subprocess.run([tool] + args, capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 1, (args, r.stderr)
        assert r.stderr.startswith("qfuse-cache: the kernel cache directory's path "
                                   "(QFUSE_CACHE_DIR, or qfuse-cache's --dir) is longer than"), \
            r.stderr
        assert r.stderr.rstrip().endswith("bytes; give a shorter one"), r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("name", ["quantize_linear", "recipe_file"])
def test_example_output_full(built_tool, name):
    # what an example prints is its result: a standard output that cannot be written is exit 1
    tool = built_tool(os.path.join("examples", name))
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    with open("/dev/full", "w") as full:
        r = subprocess.run([tool], stdout=full, stderr=subprocess.PIPE, text=True, cwd=root,
                           timeout=120)
    assert r.returncode == 1
    assert r.stderr.endswith("%s: cannot write the standard output\n" % name), r.stderr
    with open("/dev/full", "w") as full:  # its help too
        r = subprocess.run([tool, "--help"], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=60)
    assert r.returncode == 1 and "cannot write the standard output" in r.stderr


@pytest.mark.parametrize("name", ["quantize_linear", "recipe_file"])
def test_example_double_dash(built_tool, name):
    # "--" ends the options: what follows is the argument, even with a leading '-'
    tool = built_tool(os.path.join("examples", name))
    r = run([tool, "--", "-x.lua", "y"])
    assert r.returncode == 2 and "one argument at most, not also 'y'" in r.stderr
    r = run([tool, "--", "-no-such-recipe.lua"])
    assert r.returncode != 0 and "unknown option" not in r.stderr and "-no-such-recipe" in r.stderr


def test_cache_warm_names_its_target(built_tool, tmp_path):
    # without a GPU, warm says which target it compiles for as its summary line does (sm_90
    # devices get sm_90a code: qf_arch_feature)
    r = subprocess.run([built_tool("qfuse-cache"), "--dir", str(tmp_path / "c"), "warm", "--jobs",
                        "1", "--kernel", "qf_fp8_block_dbias_bf16", "fp8_block"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    if "no usable GPU" not in r.stderr:
        pytest.skip("a GPU is present: warm compiles for it and says nothing of a default")
    assert "warming for sm_90a (--arch chooses)" in r.stderr, r.stderr
    assert r.stdout.splitlines()[-1].startswith("warm: sm_90a, 4 variants: 4 compiled"), r.stdout


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("name,args", [
    ("qfuse-gen", ["--fields"]), ("qfuse-gen", ["--help"]), ("qfuse-cache", ["--help"]),
    ("qfuse-bench", ["--help"]), ("qfuse-demo", ["--help"]),
])
def test_stdout_write_error(built_tool, name, args):
    # stdout on a full device: the tool says so and fails (exit 1), never 0 on a cut-off output
    with open("/dev/full", "w") as full:
        r = subprocess.run([built_tool(name)] + args, stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr == "%s: cannot write the standard output: No space left on device\n" % name


@pytest.mark.parametrize("name,args", [
    ("qfuse-gen", ["--check", "recipes/mxfp8.lua"]), ("qfuse-gen", ["--list", "recipes/mxfp8.lua"]),
    ("qfuse-cache", ["--help"]), ("qfuse-bench", ["--help"]), ("qfuse-demo", ["--help"]),
])
def test_stdout_closed(built_tool, name, args):
    # started with stdout closed: one reason, whichever write found it (--check flushes as it
    # goes), and no file of the tool takes descriptor 1
    r = subprocess.run([built_tool(name)] + args, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=60,
                       preexec_fn=lambda: os.close(1))
    assert r.returncode == 1
    assert r.stderr == "%s: cannot write the standard output: Bad file descriptor\n" % name


SCRIPTS = ["install-deps", "run-pytest", "run-tests", "gpu-check", "gpu-compare", "plot-loss",
           "get-real-weights", "bench_compare.py", "bench_peers.py", "bench_report.py"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("name", SCRIPTS)
def test_script_help_output_error(name):
    # the scripts' --help as the C tools': a standard output full or closed is exit 1 with a
    # message (the shell scripts' is sed's own), never 0 on a help that was not written
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    script = os.path.join(root, "scripts", name)
    r = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and name.replace(".py", "") in r.stdout, r.stderr
    with open("/dev/full", "w") as full:
        r = subprocess.run([script, "--help"], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=60)
    assert r.returncode == 1 and "No space left on device" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr
    r = subprocess.run([script, "--help"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, timeout=60, preexec_fn=lambda: os.close(1))
    assert r.returncode == 1 and "Bad file descriptor" in r.stderr, r.stderr
    if name in ("plot-loss", "get-real-weights") or name.endswith(".py"):  # qf_stdout.run
        assert r.stderr == "%s: cannot write the standard output: Bad file descriptor\n" % name


@pytest.mark.parametrize("args", [["warm", "--jobs", "+2"], ["warm", "--jobs", "08"],
                                  ["warm", "--jobs", " 2"], ["prune", "--older-than", "08"],
                                  ["prune", "--older-than", "+5m"]])
def test_cache_tool_integer_values_are_digits(built_tool, tmp_path, args):
    # the same strict digits as the other tools' counts: refused before any work
    r = run([built_tool("qfuse-cache"), "--dir", str(tmp_path)] + args + ["mxfp8"] * (
        args[0] == "warm"))
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("qfuse-cache: %s: %s '%s'" % (args[0], args[1], args[2]))
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["qfuse-bench", "qfuse-demo"])
def test_unknown_recipe_has_the_hint(built_tool, name):
    r = run([built_tool(name), "--recipe", "nope"])
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert lines[0].startswith("%s: --recipe 'nope': no such recipe; the registry has: " % name)
    assert lines[1:] == ["Try '%s --help'." % name]


def write_block(path, M=4, K=8, F=16, poke=None):
    """A small safetensors LayerNorm + MLP block of zeros, the tensors qfuse-demo --weights reads;
    poke = (tensor, index, float value) sets one element."""
    import json
    import struct
    shapes = {"x": [M, K], "ln.weight": [K], "ln.bias": [K], "fc1.weight": [F, K],
              "fc1.bias": [F], "fc2.weight": [K, F], "fc2.bias": [K]}
    header, off = {}, 0
    for name, shape in shapes.items():
        n = 4 * shape[0] * (shape[1] if len(shape) == 2 else 1)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    data = bytearray(off)
    if poke:
        name, i, v = poke
        struct.pack_into("<f", data, header[name]["data_offsets"][0] + 4 * i, v)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes(data))


@pytest.mark.parametrize("poke,what", [
    (("x", 5, float("nan")), "tensor 'x' holds NaN at element 5 (in bf16, as the demo uploads"),
    (("fc1.weight", 0, float("inf")), "tensor 'fc1.weight' holds an infinity at element 0"),
    (("x", 3, 3.4e38), "tensor 'x' holds an infinity at element 3 (in bf16"),
    (("fc1.weight", 7, 3.4e38), "tensor 'fc1.weight' holds an infinity at element 7 (in bf16"),
    (("ln.bias", 1, -3.4e38), "tensor 'ln.bias' holds an infinity at element 1 (in bf16"),
])
def test_demo_refuses_non_finite_weights(built_tool, tmp_path, poke, what):
    """A checkpoint with a NaN or an infinity in the bf16 the demo uploads (3.4e38 rounds up to
    one) is refused as it is read, before any work, GPU or not (make demo reads a finite one)."""
    w = tmp_path / "block.safetensors"
    write_block(w, poke=poke)
    r = run([built_tool("qfuse-demo"), "--weights", str(w), "--train-steps", "0"])
    assert r.returncode == 1 and what in r.stderr, r.stderr
    assert "compiled" not in r.stdout and "recipe" not in r.stderr.split("holds")[0], r.stdout


def test_demo_loss_csv_never_the_weights(built_tool, tmp_path):
    # --loss-csv naming the checkpoint itself (another spelling, or a link to it) is refused
    # before any work: the file is left as it was
    w = tmp_path / "block.safetensors"
    write_block(w)
    before = w.read_bytes()
    os.symlink(w, tmp_path / "link.csv")
    for csv in (str(tmp_path / "." / "block.safetensors"), str(tmp_path / "link.csv")):
        r = run([built_tool("qfuse-demo"), "--weights", str(w), "--loss-csv", csv])
        assert r.returncode == 2 and r.stdout == "", r.stderr  # a usage error: no work, no output
        assert "qfuse-demo: --loss-csv %s: the --weights file itself\n" % csv in r.stderr
        assert r.stderr.endswith("Try 'qfuse-demo --help'.\n")
    assert w.read_bytes() == before
    # nor through a folder that does not exist yet and back out of it: "new" would be made before
    # the CSV is opened, and the path would then name the checkpoint
    csv = str(tmp_path / "new" / ".." / "block.safetensors")
    r = run([built_tool("qfuse-demo"), "--weights", str(w), "--loss-csv", csv])
    assert r.returncode == 2, r.stderr
    assert ("qfuse-demo: --loss-csv %s: a '.' or '..' after a folder that does not exist yet\n"
            % csv) in r.stderr
    assert not (tmp_path / "new").exists() and w.read_bytes() == before


def test_demo_names_the_chosen_recipes(built_tool, tmp_path):
    """The opening line counts the registry, and the recipes --recipe chose when it is given."""
    missing = str(tmp_path / "none.safetensors")  # stops the run after that line
    r = run([built_tool("qfuse-demo"), "--recipe", "mxfp8", "--recipe", "nvfp4", "--recipe",
             "mxfp8", "--weights", missing])
    assert r.returncode == 1
    first = r.stdout.splitlines()[0]
    assert first.endswith(" kernel variant(s) in the registry; 2 recipe(s) chosen by --recipe")
    r = run([built_tool("qfuse-demo"), "--weights", missing])
    assert r.stdout.splitlines()[0].endswith(" kernel variant(s) in the registry")


@pytest.mark.parametrize("args,why", [(["--bogus", "a.csv", "b.png"], "unknown option '--bogus'"),
                                      (["a.csv"], "expected two arguments, LOSS.csv and OUT.png; "
                                                  "got 1"),
                                      ([], "got 0")])
def test_plot_loss_usage_errors(args, why):
    # a usage error says what was wrong and the usage line (exit 2), not the whole help
    script = os.path.join(script_module.SCRIPTS, "plot-loss")
    r = subprocess.run([script] + args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("plot-loss: ") and why in r.stderr, r.stderr
    assert r.stderr.endswith("usage: scripts/plot-loss LOSS.csv OUT.png (--help: the whole "
                             "text)\n") and "matplotlib" not in r.stderr


@pytest.mark.parametrize("name", ["plot-loss", "get-real-weights", "bench_compare.py",
                                  "bench_peers.py", "bench_report.py"])
def test_python_tool_usage_error_with_stdout_closed(name):
    # started with the standard output closed, a usage error is still one (exit 2 and its own
    # message), as the C tools'; only a write to the standard output is exit 1
    script = os.path.join(script_module.SCRIPTS, name)
    r = subprocess.run([script, "--bogus", "a.csv", "b.csv"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=60,
                       preexec_fn=lambda: os.close(1))
    assert r.returncode == 2, r.stderr
    assert "--bogus" in r.stderr and "cannot write the standard output" not in r.stderr
    assert "Traceback" not in r.stderr


def plot_loss_png(tmp_path, text):
    """plot-loss run on a LOSS.csv holding text (skipped without matplotlib): its
    CompletedProcess, after checking that it exited 0 and wrote a PNG."""
    pytest.importorskip("matplotlib", reason="matplotlib is not installed: plot-loss draws nothing")
    loss, png = tmp_path / "loss.csv", tmp_path / "loss.png"
    loss.write_text(text)
    script = os.path.join(script_module.SCRIPTS, "plot-loss")
    r = subprocess.run([script, str(loss), str(png)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return r


def test_plot_loss_names_are_text(tmp_path):
    # a run name with "$" is drawn as text, not parsed as TeX (which failed with a traceback),
    # while the log axis's own math labels (10^x) are still parsed; a name's characters the font
    # lacks are one warning line; an output named ".png" is that file
    r = plot_loss_png(tmp_path, "run,step,loss\n$\\frac{$,1,0.5\n$\\frac{$,2,0.25\n"
                                "bf16,1,0.4\n\u4e2d\u6587,1,0.3\n")
    assert r.stderr == "plot-loss: warning: characters of the run names that matplotlib's font " \
        "lacks are drawn as boxes\n"
    import matplotlib.pyplot as plt
    mod = script_module.load("plot-loss")
    out = tmp_path / ".png"
    assert mod.main(["plot-loss", str(tmp_path / "loss.csv"), str(out)]) == 0
    assert out.is_file() and not (tmp_path / ".png.png").exists()
    import matplotlib
    assert matplotlib.rcParams["text.parse_math"]  # the axis's labels are math text
    legend = plt.gcf().axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()][:2] == ["\\$\\frac{\\$", "bf16"]
    plt.close("all")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_get_real_weights_full_stdout(tmp_path):
    # its progress lines failing is the standard output's error (exit 1, one line), not reported
    # as a failed extraction, and --if-possible does not turn it into a skip
    script = os.path.join(script_module.SCRIPTS, "get-real-weights")
    env = dict(os.environ, QFUSE_DATA_CACHE=str(tmp_path / "cache"))
    for extra in ([], ["--if-possible"]):
        with open("/dev/full", "w") as full:
            r = subprocess.run([script] + extra + [str(tmp_path / "out")], stdout=full,
                               stderr=subprocess.PIPE, text=True, timeout=60, env=env)
        assert r.returncode == 1, r.stderr
        assert r.stderr == "get-real-weights: cannot write the standard output: No space left " \
            "on device\n"


def test_plot_loss_skips_what_a_log_axis_cannot_draw(tmp_path):
    # a diverged run's NaN, infinite or non-positive losses are counted, not drawn, without
    # matplotlib's warnings; the other points are drawn
    r = plot_loss_png(tmp_path, "run,step,loss\na,1,0.5\na,2,nan\na,3,-1\nb,1,inf\nb,2,0.3\n"
                                "c,1,0\n")
    assert r.stderr == "", r.stderr
    assert "(4 points not drawn: a loss that is NaN, infinite or not positive)" in r.stdout
