"""The helper scripts, without the network or a GPU: scripts/get-real-weights keeps
its download cache at an absolute path (a relative QFUSE_DATA_CACHE would put an 80 MB wheel in
whatever directory the command runs from); scripts/run-tests sums cmocka binaries' results, one
at a time or several at once (--jobs), on stand-in binaries."""
import os
import re
import subprocess

import pytest

import script_module

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def load_get_real_weights():
    return script_module.load("get-real-weights")


def test_relative_data_cache_is_ignored(tmp_path, monkeypatch, capsys):
    grw = load_get_real_weights()
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("QFUSE_DATA_CACHE", "relative/cache")
    monkeypatch.chdir(cwd)
    d = grw.cache_dir()
    assert d == str(home / ".cache" / "qfuse-data")
    assert os.path.isdir(d)
    assert list(cwd.iterdir()) == []  # nothing written where the command ran
    assert "QFUSE_DATA_CACHE=relative/cache is not an absolute path" in capsys.readouterr().err


def test_absolute_data_cache_is_used(tmp_path, monkeypatch):
    grw = load_get_real_weights()
    monkeypatch.setenv("QFUSE_DATA_CACHE", str(tmp_path / "dl"))
    assert grw.cache_dir() == str(tmp_path / "dl")
    assert (tmp_path / "dl").is_dir()


def test_failed_build_leaves_no_outdir(tmp_path, monkeypatch):
    """A run that fails (here: the download folder is a file) removes the OUTDIR it made."""
    grw = load_get_real_weights()
    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.setenv("QFUSE_DATA_CACHE", str(afile))
    out = tmp_path / "new" / "o"
    (tmp_path / "new").mkdir()
    try:
        grw.cmd_build(str(out))
        raise AssertionError("cmd_build should have failed")
    except grw.Failure as e:
        assert "is not a directory" in str(e)
    assert not out.exists()


def test_empty_data_cache_warns(tmp_path, monkeypatch, capsys):
    grw = load_get_real_weights()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("QFUSE_DATA_CACHE", "")
    assert grw.cache_dir() == str(tmp_path / ".cache" / "qfuse-data")
    assert "QFUSE_DATA_CACHE is set but empty" in capsys.readouterr().err


# ------------------------------------------------------------------ scripts/run-tests

RUN_TESTS = os.path.join(ROOT, "scripts", "run-tests")


def fake_binary(d, name, body):
    """An executable shell script d/name printing cmocka-like lines."""
    p = d / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return str(p)


def run_tests(args, cwd):
    return subprocess.run(["sh", RUN_TESTS] + args, cwd=cwd, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def fakes(tmp_path):
    """Binaries that pass 2 tests (printing their QFUSE_TEST_RECIPE), fail one, crash, skip 3,
    and refuse their environment."""
    return {
        "ok": fake_binary(tmp_path, "ok", 'echo "recipe=${QFUSE_TEST_RECIPE:-none}"\n'
                          'echo "[  PASSED  ] 2 test(s)."\n'),
        "bad": fake_binary(tmp_path, "bad", 'echo "[  PASSED  ] 1 test(s)."\n'
                           'echo "[  FAILED  ] 1 test(s), listed below:"\nexit 1\n'),
        "crash": fake_binary(tmp_path, "crash", 'echo "[  PASSED  ] 1 test(s)."\nexit 139\n'),
        "skip": fake_binary(tmp_path, "skip", 'echo "[  PASSED  ] 1 test(s)."\n'
                            'echo "[  SKIPPED ] 3 test(s), listed below:"\n'),
        "refuse": fake_binary(tmp_path, "refuse", 'echo "unknown recipe" >&2\nexit 2\n'),
    }


@pytest.mark.parametrize("jobs", [[], ["--jobs", "3"], ["--jobs=2"]])
def test_run_tests_counts(fakes, tmp_path, jobs):
    """The same summary serially and with --jobs: each unit's output under its '== ' line, in
    the order given, BINARY@RECIPE passing QFUSE_TEST_RECIPE, and the failed, crashed, refused
    and skipped ones named."""
    f = fakes
    r = run_tests(jobs + [f["ok"] + "@mxfp8", f["bad"], f["crash"], f["skip"], f["refuse"],
                          f["ok"]], tmp_path)
    assert r.returncode == 1
    out = r.stdout
    heads = [line[3:] for line in out.splitlines() if line.startswith("== ")]
    assert heads == [f["ok"] + "@mxfp8", f["bad"], f["crash"], f["skip"], f["refuse"], f["ok"]]
    assert out.index("recipe=mxfp8") < out.index("== " + f["bad"])
    assert out.rstrip().endswith("recipe=none\n[  PASSED  ] 2 test(s).\n"
                                 "refused (exit 2, its message above): %s\n"
                                 "crashed: %s(rc=139)\n"
                                 "skipped in: skip(3) (each skipped test says why above)\n"
                                 "tests: 7 passed, 1 failed, 3 skipped"
                                 % (f["refuse"], f["crash"]))


def test_run_tests_all_pass_in_parallel(fakes, tmp_path):
    f = fakes
    r = run_tests(["--jobs", "4"] + [f["ok"] + "@r%d" % i for i in range(6)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.endswith("tests: 12 passed, 0 failed, 0 skipped\n")
    assert [line for line in r.stdout.splitlines() if line.startswith("recipe=")] == \
        ["recipe=r%d" % i for i in range(6)]


@pytest.mark.parametrize("args,msg", [
    ([], "usage: run-tests"),
    (["--jobs"], "--jobs needs a count"),
    (["--jobs", "0", "x"], "expected a count from 1 to 999"),
    (["--jobs", "-1", "x"], "expected a count from 1 to 999"),
    (["--jobs", "two", "x"], "expected a count from 1 to 999"),
    (["--jobs", "1000", "x"], "at most 999"),
    (["--jobs=", "x"], "expected a count from 1 to 999"),
])
def test_run_tests_bad_usage(tmp_path, args, msg):
    r = run_tests(args, tmp_path)
    assert r.returncode == 2
    assert msg in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("args,msg", [
    (["--bogus", "ok"], "unknown option '--bogus'"),
    (["ok", "--jobs"], "--jobs needs a count"),
    (["ok", "-x"], "unknown option '-x'"),
    (["missing"], "'missing': no such test binary"),
    (["ok", "missing@mxfp8"], "'missing': no such test binary"),
    (["folder"], "'folder': not an executable file"),
    (["plain"], "'plain': not an executable file"),
    (["ok@a@b"], "'ok@a': no such test binary"),
    (["ok@x ls -la"], "a recipe name is letters, digits"),
    (["ok@a;b"], "a recipe name is letters, digits"),
    (["@mxfp8"], "no binary before the @"),
    (["ok@"], "no recipe name after the @"),
    (["--"], "usage: run-tests"),
])
def test_run_tests_bad_units(fakes, tmp_path, args, msg):
    """Options anywhere before `--`, and every unit checked before any runs: bad usage exits 2
    with nothing run (ok would print its recipe line)."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "plain").write_text("not a program\n")
    r = run_tests(args, tmp_path)
    assert (r.returncode, r.stdout) == (2, ""), r.stdout + r.stderr
    assert msg in r.stderr


def test_run_tests_options_anywhere(fakes, tmp_path):
    """--jobs after the units, and `--` before a unit whose name starts with '-'."""
    f = fakes
    dash = fake_binary(tmp_path, "-dash", 'echo "[  PASSED  ] 1 test(s)."\n')
    assert os.path.dirname(f["ok"]) == os.path.dirname(dash) == str(tmp_path)
    r = run_tests(["ok@r1", "ok", "--jobs", "2", "--", "-dash"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [line for line in r.stdout.splitlines() if line.startswith("recipe=")] == \
        ["recipe=r1", "recipe=none"]
    assert r.stdout.endswith("tests: 5 passed, 0 failed, 0 skipped\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_run_tests_output_full(fakes, tmp_path):
    """A summary that cannot be written is a failed run."""
    with open("/dev/full", "w") as full:
        r = subprocess.run(["sh", RUN_TESTS, fakes["ok"]], stdout=full, stderr=subprocess.PIPE,
                           cwd=tmp_path, timeout=60)
    assert r.returncode == 1


@pytest.mark.parametrize("jobs", [[], ["--jobs", "3"]])
def test_run_tests_odd_names(fakes, tmp_path, jobs):
    """Names with blanks, quotes, a backslash, a leading '-' under a folder, and a '@' in a
    folder's name run as given, serially and in parallel; nothing else is touched."""
    body = 'echo "recipe=${QFUSE_TEST_RECIPE:-none}"\necho "[  PASSED  ] 1 test(s)."\n'
    (tmp_path / "-d").mkdir()
    (tmp_path / "a@b").mkdir()
    names = ["t x", "it's", "b\\1", "-d/t", "a@b/t"]
    for n in names:
        fake_binary(tmp_path, n, body)
    victim = fake_binary(tmp_path, "victim", body)
    before = open(victim).read()
    r = run_tests(jobs + ["--", names[0], names[1] + "@mxfp8", names[2], names[3],
                          names[4] + "@nvfp4"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.endswith("tests: 5 passed, 0 failed, 0 skipped\n")
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("recipe=")] == \
        ["recipe=none", "recipe=mxfp8", "recipe=none", "recipe=none", "recipe=nvfp4"]
    assert "== b\\1\n" in r.stdout
    assert open(victim).read() == before
    assert sorted(os.listdir(tmp_path)) == sorted(names[:3] + ["-d", "a@b", "victim", "ok", "bad",
                                                               "crash", "skip", "refuse"])


def test_run_tests_no_summary_fails(fakes, tmp_path):
    """A binary that exits 0 without cmocka's summary ran no tests: named, exit 1."""
    silent = fake_binary(tmp_path, "silent", "exit 0\n")
    r = run_tests([fakes["ok"], silent], tmp_path)
    assert r.returncode == 1
    assert "ran no tests (no cmocka summary): %s\n" % silent in r.stdout
    assert r.stdout.endswith("tests: 2 passed, 0 failed, 0 skipped\n")
    # a filter that matches none of a binary's tests: cmocka's summary of 0 tests, exit 0
    none = fake_binary(tmp_path, "none", 'echo "[==========] 0 test(s) run."\n'
                       'echo "[  PASSED  ] 0 test(s)."\n')
    r = run_tests([fakes["ok"], none], tmp_path)
    assert r.returncode == 0, r.stdout
    assert r.stdout.endswith("tests: 2 passed, 0 failed, 0 skipped\n")


def make_env():
    """This environment without what an outer make passes down (MAKEFLAGS carries its command
    line's variables, TEST_JOBS among them, into every make these tests run)."""
    return {k: v for k, v in os.environ.items()
            if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "TEST_JOBS")}


def make_test_line(jobs):
    """The arguments `make test` gives scripts/run-tests (make -n: nothing runs); TEST_JOBS=jobs
    unless jobs is None."""
    args = ["make", "-n", "-C", ROOT, "test"] + ([] if jobs is None else ["TEST_JOBS=%s" % jobs])
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, env=make_env())
    assert r.returncode == 0, r.stderr
    text = r.stdout.replace("\\\n", " ")  # make -n shows a continued line as it is written
    line = [ln for ln in text.splitlines() if "scripts/run-tests" in ln]
    assert len(line) == 1, r.stdout[-2000:]
    return line[0].split("scripts/run-tests", 1)[1].split(";", 1)[0].split()


def test_make_test_jobs():
    """TEST_JOBS=N passes --jobs N and splits test_gpu_quantize into one unit per shipped
    recipe; by default the binaries run one at a time, unsplit."""
    recipes = sorted(f[:-4] for f in os.listdir(os.path.join(ROOT, "recipes"))
                     if f.endswith(".lua"))
    serial = make_test_line(None)
    assert serial[:2] == ["--jobs", "1"]
    assert [u for u in serial if "@" in u] == []
    assert any(u.endswith("/tests/test_gpu_quantize") for u in serial)
    par = make_test_line(4)
    assert par[:2] == ["--jobs", "4"]
    split = [u for u in par if "test_gpu_quantize" in u]
    assert sorted(u.split("@")[1] for u in split) == recipes
    assert [u for u in par[2:] if "@" not in u] == \
        [u for u in serial[2:] if not u.endswith("/tests/test_gpu_quantize")]


def test_gpu_test_units():
    """make gpu-test-units (scripts/gpu-check --parallel's list) is the GPU part of make test's
    split units."""
    r = subprocess.run(["make", "-s", "--no-print-directory", "-C", ROOT, "gpu-test-units"],
                       capture_output=True, text=True, timeout=120, env=make_env())
    assert r.returncode == 0, r.stderr
    gpu = [u for u in make_test_line(4)[2:] if "/tests/test_gpu_" in u]
    assert r.stdout.split() == gpu and any("@" in u for u in gpu)


@pytest.mark.parametrize("jobs,ok", [("4", True), ("1", True), ("999", True), ("0", False),
                                     ("abc", False), ("", False), ("2 3", False),
                                     ("01", False), ("1000", False), ("2'", False),
                                     ("x", False), ("2x", False), ("x1", False)])
def test_make_test_jobs_checked_first(jobs, ok):
    """make test checks TEST_JOBS as make reads the Makefile, before anything is built (make -n
    stops there too)."""
    r = subprocess.run(["make", "-n", "-C", ROOT, "test", "TEST_JOBS=" + jobs],
                       capture_output=True, text=True, timeout=120, env=make_env())
    assert r.returncode == (0 if ok else 2), r.stderr
    if not ok:
        # no command: only make's own lines ("make[1]: Entering directory" under another make)
        assert all(re.match(r"make(\[\d+\])?: ", ln) for ln in r.stdout.splitlines()), r.stdout
        assert ("*** make test: TEST_JOBS='%s': expected a count from 1 to 999.  Stop." % jobs
                in r.stderr)


def test_block_layout_checked():
    """A block file must hold its tensors end to end, as qfuse's reader requires: trailing bytes
    or a gap make check_block refuse it (so make demo rebuilds it)."""
    grw = load_get_real_weights()
    names = list(grw.EXPECTED.items())
    header, off = {}, 0
    for name, shape in names:
        n = 4 * shape[0] * (shape[1] if len(shape) > 1 else 1)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    def blob(h, extra=b""):
        text = grw.json.dumps(h).encode()
        text += b" " * (-len(text) % 8)
        return grw.struct.pack("<Q", len(text)) + text + bytes(off) + extra
    grw.check_block(blob(header), "ok")
    with pytest.raises(grw.Failure, match="8 data bytes after the last tensor"):
        grw.check_block(blob(header, bytes(8)), "trailing")
    first = names[0][0]
    lo, hi = header[first]["data_offsets"]
    gap = dict(header)
    gap[first] = dict(header[first], data_offsets=[lo + 4, hi + 4])
    with pytest.raises(grw.Failure):
        grw.check_block(blob(gap, bytes(4)), "gap")


def test_gpu_check_debs_checked(tmp_path):
    """gpu-check --debs: a folder that is not there (exit 2) or holds no .deb (exit 1) stops it
    before any build, instead of building with an empty prefix."""
    script = os.path.join(ROOT, "scripts", "gpu-check")
    log = str(tmp_path / "log")
    r = subprocess.run([script, "--debs", str(tmp_path / "none"), "--logdir", log, "--skip-tests",
                        "--skip-demo"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and "is not a directory" in r.stderr, r.stderr
    assert not os.path.exists(log)  # refused before the log folder is made
    (tmp_path / "empty").mkdir()
    r = subprocess.run([script, "--debs", str(tmp_path / "empty"), "--logdir", log,
                        "--skip-tests", "--skip-demo"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 1 and "no .deb in" in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(log, "build.log"))


@pytest.mark.parametrize("args", [["--logdir", ""], ["--logdir", "file/sub"],
                                  ["--logdir", "file"], ["--debs", ""],
                                  ["--logdir", "--quick"], ["--debs", "--logdir", "x"]])
def test_gpu_check_folders_checked(tmp_path, args):
    """gpu-check --logdir / --debs: an empty value, an option taken for the folder, or a folder
    that cannot be made is refused (exit 2) before anything runs, not logged into / or a folder
    named like an option."""
    (tmp_path / "file").write_text("")
    script = os.path.join(ROOT, "scripts", "gpu-check")
    r = subprocess.run([script] + args + ["--skip-tests", "--skip-demo"],
                       capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.startswith("gpu-check: %s " % args[0]) and r.stderr.count("\n") == 1, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["file"]


@pytest.mark.parametrize("args", [["--download"], ["--download", ""], ["--download", "a", "b"],
                                  ["--download", "file/sub"], ["--download", "--check"],
                                  ["--tool", "plot", "extra"]])
def test_install_deps_download_checked(tmp_path, args):
    """install-deps --download DIR: one folder it can make and write (not an option), else exit 2
    before any download, one line; --tool takes one name."""
    (tmp_path / "file").write_text("")
    script = os.path.join(ROOT, "scripts", "install-deps")
    r = subprocess.run([script] + args, capture_output=True, text=True, timeout=60,
                       cwd=str(tmp_path))
    assert r.returncode == 2 and r.stderr.startswith("install-deps: "), r.stderr
    assert r.stderr.count("\n") == 1 and "downloading" not in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["file"]
