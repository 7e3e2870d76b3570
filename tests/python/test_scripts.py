"""The helper scripts' environment handling, without the network: scripts/get-real-weights keeps
its download cache at an absolute path (a relative QFUSE_DATA_CACHE would put an 80 MB wheel in
whatever directory the command runs from)."""
import importlib.machinery
import importlib.util
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def load_get_real_weights():
    path = os.path.join(ROOT, "scripts", "get-real-weights")
    loader = importlib.machinery.SourceFileLoader("get_real_weights", path)
    spec = importlib.util.spec_from_loader("get_real_weights", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


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
