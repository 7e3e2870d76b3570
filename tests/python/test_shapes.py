"""qfuse.shapes and the ctypes view of libqfuse, without torch or a GPU: the formulas libqfuse
gives evaluate to its own fake shapes, symbolic sizes stay symbolic, bad queries raise
QfuseError, and the ctypes structs match the C ones (a device-less context accepts valid calls
built from them, and names a wrong field)."""
import ctypes
import glob
import os
import re
import types

import pytest

from qfuse import QfuseError, _lib, shapes

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
RECIPES = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(ROOT, "recipes",
                                                                          "*.lua")))
SIZES = [(64, 96, 128), (1040, 48, 4128)]  # (M, N, K): multiples of 16, one of 128 and not


def queries():
    for recipe in RECIPES:
        for m, n, k in SIZES:
            for norm in ("layernorm", "rmsnorm"):
                for outs in (1, 2, 3):
                    yield recipe, dict(op="norm_quantize", norm=norm, outputs=outs, M=m, K=k)
            for role in ("input", "weight", "grad"):
                yield recipe, dict(op="quantize", role=role, outputs=3, M=m, K=k)
            for outs in (0, _lib.OUT_FP32):
                yield recipe, dict(op="gemm", outputs=outs, M=m, N=n, K=k)
            yield recipe, dict(op="norm_backward", norm="layernorm", M=m, K=k, dtype="fp32")
            yield recipe, dict(op="dbias", M=m, N=n, dtype="bf16")


def test_recipes_found():
    assert {"mxfp8", "nvfp4", "fp8_current", "fp8_delayed"} <= set(RECIPES)


@pytest.mark.parametrize("recipe,q", list(queries()))
def test_formulas_give_fake_shapes(recipe, q):
    assert shapes.outputs(recipe, **q) == shapes.concrete(recipe, **q)


class Sym:
    """A stand-in for a symbolic size (a torch SymInt): records the arithmetic done on it,
    refuses int(), and has an example value (node.hint) as a SymInt does."""

    def __init__(self, s, hint=256):
        self.s = s
        self.node = types.SimpleNamespace(hint=hint)

    def __add__(self, o):
        return Sym("(%s+%s)" % (self.s, o.s if isinstance(o, Sym) else o))

    def __sub__(self, o):
        return Sym("(%s-%s)" % (self.s, o.s if isinstance(o, Sym) else o))

    def __floordiv__(self, o):
        return Sym("(%s//%s)" % (self.s, o.s if isinstance(o, Sym) else o))

    def __mul__(self, o):
        return Sym("(%s*%s)" % (self.s, o.s if isinstance(o, Sym) else o))

    def __int__(self):
        raise AssertionError("a symbolic size was made concrete")


def test_symbolic_sizes_stay_symbolic():
    m = Sym("M")
    got = shapes.evaluate("roundup(cdiv(M,32),4)", {"M": m, "N": 1, "K": 1})
    assert isinstance(got, Sym)
    assert got.s == "(((((((M+32)-1)//32)+4)-1)//4)*4)"
    assert shapes.evaluate("cdiv(K,2)", {"M": m, "N": 1, "K": 4128}) == 2064
    outs = shapes.outputs("mxfp8", "norm_quantize", norm="layernorm", outputs=3, M=m, K=4096)
    assert [o.name for o in outs] == ["rowwise_data", "rowwise_scale_inv", "columnwise_data",
                                      "columnwise_scale_inv", "mu", "rsigma"]
    assert outs[0].dims[0] is m and outs[0].dims[1] == 4096
    assert isinstance(outs[3].dims[0], Sym) and outs[3].dims[1] == 4096


def test_evaluate_rejects_bad_formulas():
    for bad in ("", "roundup(M,128", "cdiv(M)", "Q", "M+1"):
        with pytest.raises(ValueError):
            shapes.evaluate(bad, {"M": 1, "N": 1, "K": 1})
    deep = "cdiv(" * 5000 + "M" + ",2)" * 5000  # no RecursionError: refused by its depth
    with pytest.raises(ValueError, match="nested deeper than"):
        shapes.evaluate(deep, {"M": 1})
    nested = "cdiv(" * 30 + "M" + ",1)" * 30  # within the depth: evaluated
    assert shapes.evaluate(nested, {"M": 7}) == 7


def test_sizes_left_out():
    """A size the op's outputs use must be given (it used to default to 1); one they do not use
    may be left out."""
    for call in (dict(op="gemm", M=4096, K=4096), dict(op="gemm", N=64, K=64),
                 dict(op="norm_quantize", norm="layernorm", outputs=1, K=64),
                 dict(op="quantize", role="weight", outputs=3, M=64)):
        for fn in (shapes.outputs, shapes.formulas, shapes.concrete):
            with pytest.raises(ValueError, match="needs [MNK]"):
                fn("mxfp8", **call)
    with pytest.raises(ValueError, match="needs M and K"):
        shapes.outputs("fp8_delayed", "quantize", role="input", outputs=1)
    q = dict(op="quantize", role="weight", outputs=3, M=64, K=64)
    assert shapes.outputs("mxfp8", **q) == shapes.outputs("mxfp8", N=7, **q)
    assert shapes.concrete("mxfp8", **q) == shapes.outputs("mxfp8", **q)
    with pytest.raises(QfuseError) as e:  # an unknown recipe stays what it is
        shapes.outputs("no_such_recipe", "gemm", M=1)
    assert e.value.status == "QF_ERR_NOT_FOUND"


def test_recipe_file_follows_cwd(tmp_path, monkeypatch):
    """A relative recipe path is the file it names under the working directory of each call
    (libqfuse and the formula cache key files by their absolute path); a path that is not
    UTF-8 is passed in the file system's encoding."""
    for sub, family in (("a", "mxfp8"), ("b", "nvfp4")):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "x.lua").write_text("return {family = '%s'}" % family)
    kw = dict(role="weight", outputs=1, M=32, K=32)
    monkeypatch.chdir(tmp_path / "a")
    mx = shapes.concrete("x.lua", "quantize", **kw)
    monkeypatch.chdir(tmp_path / "b")
    nv = shapes.concrete("x.lua", "quantize", **kw)
    nv_formulas = shapes.formulas("x.lua", "quantize", **kw)
    assert mx[0].dims == (32, 32) and mx[0].dtype == "e4m3"
    assert nv[0].dims == (32, 16) and nv[0].dtype == "e2m1"
    assert nv_formulas == shapes.formulas(str(tmp_path / "b" / "x.lua"), "quantize", **kw)
    odd = os.fsencode(str(tmp_path)) + b"/d\xff"
    os.mkdir(odd)
    with open(odd + b"/mx.lua", "w") as f:
        f.write("return {family = 'mxfp8'}")
    assert shapes.concrete(os.fsdecode(odd + b"/mx.lua"), "quantize", **kw) == mx


def test_rejected_query_names_sizes_left_out():
    """A refused query's message shows the sizes the caller gave, and the others as not given
    (libqfuse checked it at 1024)."""
    with pytest.raises(QfuseError) as e:
        shapes.outputs("fp8_delayed", "scale_update", M=3)
    assert "M=3 N=(not given) K=(not given)" in str(e.value)
    assert e.value.status == "QF_ERR_INVALID_ARG"
    with pytest.raises(QfuseError) as e:
        shapes.outputs("fp8_delayed", "scale_update", M=3, N=1024, K=5)
    assert "M=3 N=1024 K=5" in str(e.value)


def test_symbolic_sizes_checked():
    """A SymInt-like size is hashed by its example value, and one without an int example value
    is refused saying so; a recipe of the wrong type is refused before any lookup."""
    node = types.SimpleNamespace
    unhashable = type("Sym", (), {"__hash__": None, "__init__":
                                  lambda self, h: setattr(self, "node", node(hint=h))})
    q = dict(op="quantize", role="weight", outputs=3, K=64)
    assert shapes.formulas("mxfp8", M=unhashable(64), **q) == shapes.formulas("mxfp8", M=64, **q)
    with pytest.raises(TypeError, match="without an example value"):
        shapes.formulas("mxfp8", M=unhashable(None), **q)
    with pytest.raises(TypeError, match="not an int"):
        shapes.formulas("mxfp8", M=unhashable(64.5), **q)
    with pytest.raises(TypeError, match="recipe must be a name"):
        shapes.formulas(["mxfp8"], M=64, **q)


def test_bad_queries_raise():
    with pytest.raises(QfuseError) as e:
        shapes.outputs("nvfp4", "quantize", role="grad", outputs=3, M=20, K=64)
    assert e.value.status == "QF_ERR_INVALID_ARG" and "rejects the shape query" in str(e.value)
    assert isinstance(e.value, ValueError)  # QfuseArgumentError: an argument error
    import copy
    import pickle
    e.value.add_note("a note")
    assert type(e.value).__module__ == "qfuse"  # tracebacks name qfuse.QfuseArgumentError
    assert b"qfuse\nQfuseArgumentError" in pickle.dumps(e.value, protocol=2)
    for c in (pickle.loads(pickle.dumps(e.value)), copy.copy(e.value)):  # crosses processes
        assert type(c) is type(e.value) and str(c) == str(e.value) and c.status == e.value.status
        assert c.__notes__ == ["a note"]
    with pytest.raises(QfuseError) as e:
        shapes.outputs("no_such_recipe", "gemm", M=1, N=1, K=1)
    assert e.value.status == "QF_ERR_NOT_FOUND" and not isinstance(e.value, ValueError)
    with pytest.raises(QfuseError):
        shapes.outputs("mxfp8", "quantize", role="weight", outputs=0, M=32, K=32)
    with pytest.raises(ValueError, match="NUL"):
        shapes.outputs("fp8_block\0x", "gemm", M=1, N=1, K=1)
    for (recipe, op, kw), why in (  # the reason names the failed check
            (("fp8_block", "gemm", dict(M=5, N=130, K=256)),
             "N = 130 is not a multiple of 16 (numerics 4)"),
            (("nvfp4", "quantize", dict(role="grad", outputs=3, M=20, K=64)),
             "M = 20 is not a multiple of 16"),
            (("mxfp8", "scale_update", dict(M=1, K=1)), "the family has no such op"),
            (("fp8_delayed", "scale_update", dict(M=1, K=1)), "the op has no fake shapes"),
            (("mxfp8", "quantize", dict(role="weight", outputs=0, M=32, K=32)),
             "a quantizer needs outputs rowwise (1) and/or columnwise (2)"),
            (("mxfp8", "norm_quantize", dict(norm="layernorm", outputs=7, M=128, K=128)),
             "outputs has fp32 (4), which norm_quantize does not take (it takes "
             "rowwise (1) | columnwise (2))"),
            (("fp8_block", "gemm", dict(outputs=5, M=128, N=128, K=128)),
             "outputs has rowwise (1), which gemm does not take (it takes fp32 (4))"),
            (("fp8_delayed", "quantize", dict(outputs=1, M=2 ** 62, K=2 ** 62)),
             "an output's size overflows int64"),
            # dims that fit, bytes between 2^63 and 2^64 (unsigned arithmetic does not overflow)
            (("mxfp8", "quantize", dict(outputs=1, M=1, K=2 ** 61)),
             "an output's size overflows int64"),
            (("fp8_current", "quantize", dict(outputs=1, M=8, K=2 ** 60 + 16)),
             "an output's size overflows int64"),
            # a plain quantize fuses no norm; a quantizer's dtype is its input's
            (("mxfp8", "quantize", dict(norm="layernorm", outputs=3, M=64, K=64)),
             "a plain quantize takes norm none (a norm + quantize is op 'norm_quantize')"),
            (("nvfp4", "quantize", dict(role="grad", norm="rmsnorm", outputs=1, M=64, K=64)),
             "a plain quantize takes norm none"),
            (("mxfp8", "quantize", dict(outputs=3, M=64, K=64, dtype="e4m3")),
             "the op takes dtype bf16, fp16 or fp32"),
            (("fp8_block", "norm_quantize", dict(norm="layernorm", outputs=1, M=64, K=64,
                                                 dtype="e2m1")),
             "the op takes dtype bf16, fp16 or fp32")):
        with pytest.raises(QfuseError, match="rejects the shape query .*: " + re.escape(why)) as e:
            shapes.outputs(recipe, op, **kw)
        assert "QF_OUT_" not in str(e.value) and "QF_OP_" not in str(e.value), e.value  # C names
    for dtype in ("bf16", "fp16", "fp32"):  # the inputs a quantizer takes
        for op, norm in (("quantize", "none"), ("norm_quantize", "rmsnorm")):
            assert shapes.outputs("mxfp8", op, norm=norm, outputs=1, M=64, K=64, dtype=dtype)
            assert shapes.formulas("mxfp8", op, norm=norm, outputs=1, M=64, K=64, dtype=dtype)
    with pytest.raises(QfuseError, match="a plain quantize takes norm none"):
        shapes.formulas("fp8_delayed", "quantize", role="grad", norm="layernorm", outputs=1,
                        M=64, K=64)
    for recipe in ("mxfp8", "fp8_block"):  # a norm + quantize is the input role's only
        with pytest.raises(QfuseError, match="a norm . quantize is the input role's only"):
            shapes.outputs(recipe, "norm_quantize", role="weight", norm="layernorm", outputs=3,
                           M=256, K=512)


# ------------------------------------------------------------------ the structs, on a host ctx


def fake_ptrs():
    """Fake device addresses (a host context never touches them), 256-byte aligned and far enough
    apart that no two of this file's tensors overlap: a call's checks refuse outputs that share
    bytes with its inputs."""
    addr = [0x100000]

    def nxt(nbytes=1 << 20):
        addr[0] += (max(int(nbytes), 1) + 255) // 256 * 256 + 256
        return addr[0]
    return nxt


def quantized(outs, nxt, layout=_lib.LAYOUT_COMPACT):
    q = _lib.Quantized()
    q.layout = layout
    for o in outs:
        q.t[_lib.SLOTS.index(o.name)] = _lib.c_tensor(nxt(1 << 20), o.dtype, o.dims)
    return q


@pytest.fixture(scope="module")
def host_ctx():
    ctx = _lib.host_context(90)
    yield ctx
    _lib.lib.qf_ctx_free(ctx)


def expect(status, want, *subs):
    msg = (_lib.lib.qf_last_error() or b"").decode()
    assert _lib.STATUS[status] == want, msg
    for s in subs:
        assert s in msg, msg


@pytest.mark.parametrize("recipe", ["fp8_current", "mxfp8", "nvfp4"])
def test_structs_on_host_context(host_ctx, recipe):
    m, n, k = 64, 96, 128
    nxt = fake_ptrs()
    norm = _lib.NormDesc(norm=1, eps=1e-5)
    norm.gamma = _lib.c_tensor(nxt(), "bf16", (k,))
    norm.beta = _lib.c_tensor(nxt(), "bf16", (k,))
    x = _lib.c_tensor(nxt(), "bf16", (m, k))
    xq = quantized(shapes.concrete(recipe, "norm_quantize", norm="layernorm", outputs=3, M=m,
                                   K=k), nxt)
    st = _lib.lib.qf_quantize(host_ctx, recipe.encode(), 0, ctypes.byref(x), ctypes.byref(norm),
                              None, None, ctypes.byref(xq), None)
    expect(st, "QF_ERR_NO_DEVICE", "arguments are valid")
    wq = quantized(shapes.concrete(recipe, "quantize", role="weight", outputs=3, M=n, K=k), nxt)
    y = _lib.c_tensor(nxt(), "bf16", (m, n))
    bias = _lib.c_tensor(nxt(), "bf16", (n,))
    a = _lib.Operand(ctypes.pointer(xq), 0)
    b = _lib.Operand(ctypes.pointer(wq), 0)
    st = _lib.lib.qf_gemm_ex(host_ctx, recipe.encode(), ctypes.byref(a), ctypes.byref(b),
                             ctypes.byref(bias), ctypes.byref(y), None, None)
    expect(st, "QF_ERR_NO_DEVICE", "arguments are valid")
    opts = _lib.GemmOpts()
    opts.reserved[3] = 1  # the last field: a wrong layout would not reach it
    st = _lib.lib.qf_gemm_ex(host_ctx, recipe.encode(), ctypes.byref(a), ctypes.byref(b),
                             ctypes.byref(bias), ctypes.byref(y), ctypes.byref(opts), None)
    expect(st, "QF_ERR_INVALID_ARG", "opts->reserved[3] is 1")
    # the backward composition: every field of qf_ln_linear and qf_ln_linear_grads
    ll = _lib.LnLinear(norm=norm, xq=xq, wq=wq)
    ll.weight = _lib.c_tensor(nxt(), "bf16", (n, k))
    ll.bias = bias
    g = _lib.LnLinearGrads()
    g.dyq = quantized(shapes.concrete(recipe, "quantize", role="grad", outputs=3, M=m, K=n), nxt)
    g.rng = _lib.Rng(1, 2)
    g.dxn = _lib.c_tensor(nxt(), "bf16", (m, k))
    g.norm.dx = _lib.c_tensor(nxt(), "bf16", (m, k))
    g.norm.dgamma = _lib.c_tensor(nxt(), "fp32", (k,))
    g.norm.dbeta = _lib.c_tensor(nxt(), "fp32", (k,))
    g.dweight = _lib.c_tensor(nxt(), "bf16", (n, k))
    g.dbias = _lib.c_tensor(nxt(), "bf16", (n,))
    dy = _lib.c_tensor(nxt(), "bf16", (m, n))
    st = _lib.lib.qf_layernorm_linear_bwd(host_ctx, recipe.encode(), ctypes.byref(x),
                                          ctypes.byref(dy), ctypes.byref(ll), ctypes.byref(g),
                                          None)
    expect(st, "QF_ERR_NO_DEVICE", "arguments are valid")
    g.dbias = _lib.c_tensor(nxt(), "bf16", (n - 1,))  # the last field of the grads struct
    st = _lib.lib.qf_layernorm_linear_bwd(host_ctx, recipe.encode(), ctypes.byref(x),
                                          ctypes.byref(dy), ctypes.byref(ll), ctypes.byref(g),
                                          None)
    expect(st, "QF_ERR_INVALID_ARG", "dbias")


def test_recipe_query():
    info = _lib.RecipeInfo()
    for recipe in RECIPES:
        assert _lib.lib.qf_recipe_query(recipe.encode(), ctypes.byref(info)) == 0
        name = _lib.lib.qf_family_name(info.family).decode()
        assert recipe.startswith(name), (recipe, name)
        hist = info.amax_history_len
        assert hist == (1024 if recipe == "fp8_delayed" else 0), (recipe, hist)
        fmts = [_lib.DTYPE_NAMES[info.fmt[i]] for i in range(3)]
        want = {"fp8_delayed": ["e4m3", "e4m3", "e5m2"], "fp8_current": ["e4m3", "e4m3", "e5m2"],
                "nvfp4": ["e2m1"] * 3, "nvfp4_nort": ["e2m1"] * 3}.get(recipe, ["e4m3"] * 3)
        assert fmts == want, (recipe, fmts)
        assert list(info.reserved) == [0] * 8
    assert _lib.lib.qf_recipe_query(b"no_such_recipe", ctypes.byref(info)) == 9
    assert "qf_recipe_query: recipe 'no_such_recipe' not found" in \
        _lib.lib.qf_last_error().decode()


@pytest.mark.parametrize("module", ["qfuse.ops", "qfuse.torch"])
def test_torch_modules_say_what_they_need(module, monkeypatch):
    """Without PyTorch, importing the modules that need it raises an ImportError naming the
    module and the version to install (torch hidden here by a None in sys.modules)."""
    import importlib
    import sys
    for name in list(sys.modules):
        if name == "torch" or name.startswith("torch.") or name in ("qfuse.ops", "qfuse.torch",
                                                                    "qfuse.torch.modules"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"%s needs PyTorch 2\.9 or newer \(pip install "
                       r"'torch>=2\.9'\)" % re.escape(module)):
        importlib.import_module(module)
