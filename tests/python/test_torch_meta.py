"""The qfuse custom ops without a GPU: on meta tensors an op runs its fake implementation, so
this checks the shapes libqfuse's formulas give under symbolic tracing, the autograd wiring, and
torch.compile (backend aot_eager) over three batch sizes: one graph, no break, no recompile.
Skipped, saying why, without torch."""
import ctypes
import re
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch): "
                                            "the qfuse custom-op tests need it")

import qfuse.ops as qops  # noqa: E402
from qfuse import shapes  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

RECIPES = ["fp8_current", "mxfp8", "mxfp8_2d", "nvfp4", "nvfp4_nort", "fp8_block"]
K, N = 512, 384


def params(recipe, device="meta"):
    def p(*shape):
        return torch.nn.Parameter(torch.empty(*shape, dtype=torch.bfloat16, device=device))
    wq = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype], device=device)
          for o in qops._weight_outs(recipe, N, K)]
    return p(N, K), p(K), p(K), p(N), wq


@pytest.mark.parametrize("recipe", RECIPES)
def test_symbolic_shapes(recipe):
    layer = qops.new_layer()

    def f(x, w, g, b, bias, *wq):
        out = torch.ops.qfuse.layernorm_linear_fwd(x, w, g, b, list(wq), bias, layer, recipe, 1,
                                                   1e-5, False, True, None, None)
        bw = torch.ops.qfuse.layernorm_linear_bwd(torch.empty_like(out[0]), x, w, g, b,
                                                  list(wq), out[1:], layer, recipe, 1, 1e-5,
                                                  False, True, None, None)
        return out + list(bw)

    w, g, b, bias, wq = params(recipe, "cpu")
    x = torch.empty(64, 2, K, dtype=torch.bfloat16)
    gm = make_fx(f, tracing_mode="symbolic")(x, w.data, g.data, b.data, bias.data, *wq)
    out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    vals = [a.meta["val"] for a in out]
    y = vals[0]
    assert not any(isinstance(d, int) for d in y.shape[:2]), y.shape  # the batch dims stay symbolic
    m_sym = y.shape[0] * y.shape[1]
    want = shapes.outputs(recipe, "norm_quantize", norm="layernorm", outputs=3, M=m_sym,
                          K=gm_k(vals))
    assert len(vals) == 1 + len(want) + 5
    for v, o in zip(vals[1:], want):
        assert [str(d) for d in v.shape] == [str(d) for d in o.dims], (o.name, v.shape, o.dims)


def gm_k(vals):
    """K as the trace has it: the last dim of dx (x's shape)."""
    return vals[-5].shape[-1]


@pytest.mark.parametrize("recipe", RECIPES)
def test_autograd_on_meta(recipe):
    layer = qops.new_layer()
    w, g, b, bias, wq = params(recipe)
    x = torch.empty(64, 2, K, dtype=torch.bfloat16, device="meta", requires_grad=True)
    out = torch.ops.qfuse.layernorm_linear_fwd(x, w, g, b, wq, bias, layer, recipe, 1, 1e-5,
                                               False, True, None, None)
    assert out[0].shape == (64, 2, N) and out[0].dtype == torch.bfloat16
    out[0].backward(torch.empty_like(out[0]))
    for t, shape in ((x, (64, 2, K)), (w, (N, K)), (g, (K,)), (b, (K,)), (bias, (N,))):
        assert t.grad is not None and t.grad.shape == shape and t.grad.dtype == t.dtype


@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4"])
def test_compile_one_graph_over_batch_sizes(recipe):
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    layer = qops.new_layer()
    w, g, b, bias, wq = params(recipe)

    def f(x):
        torch.ops.qfuse.quantize_weight_(w, wq, layer, recipe)
        return torch.ops.qfuse.layernorm_linear_fwd(x, w, g, b, wq, bias, layer, recipe, 1,
                                                    1e-5, False, True, None, None)[0]

    cf = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
    for m in (64, 128, 192):
        x = torch.empty(m, 2, K, dtype=torch.bfloat16, device="meta", requires_grad=True)
        y = cf(x)
        y.sum().backward()
        assert y.shape == (m, 2, N) and x.grad.shape == (m, 2, K)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


@pytest.mark.parametrize("act", ["gelu", "swiglu", "relu"])
@pytest.mark.parametrize("recipe", ["fp8_current", "mxfp8", "nvfp4"])
def test_mlp_autograd_and_compile_on_meta(recipe, act):
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    F = 256
    fin = 2 * F if act == "swiglu" else F
    layer = qops.new_layer()

    def p(*shape):
        return torch.nn.Parameter(torch.empty(*shape, dtype=torch.bfloat16, device="meta"))
    w1, w2, g, b, b1, b2 = p(fin, K), p(K, F), p(K), p(K), p(fin), p(K)
    w1q = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype], device="meta")
           for o in qops._weight_outs(recipe, fin, K)]
    w2q = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype], device="meta")
           for o in qops._weight_outs(recipe, K, F)]

    def f(x):
        return torch.ops.qfuse.layernorm_mlp_fwd(x, w1, w2, g, b, w1q, w2q, b1, b2, layer,
                                                 recipe, 1, 1e-5, False,
                                                 qops.ACT_NAMES.index(act), True, None, None)[0]

    cf = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
    for m in (64, 128, 192):
        x = torch.empty(m, 2, K, dtype=torch.bfloat16, device="meta", requires_grad=True)
        for t in (w1, w2, g, b, b1, b2):
            t.grad = None
        y = cf(x)
        y.sum().backward()
        assert y.shape == (m, 2, K) and x.grad.shape == (m, 2, K)
        for t in (w1, w2, g, b, b1, b2):
            assert t.grad is not None and t.grad.shape == t.shape and t.grad.dtype == t.dtype
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


# ------------------------------------------------------------------ the ops' C calls, no GPU

@pytest.fixture
def qt(monkeypatch):
    """qfuse.torch with its fused modules' GPU decision forced to "fused", so that they run the
    ops (their fakes) on meta tensors."""
    import qfuse.torch as qt
    from qfuse.torch import modules
    monkeypatch.setattr(modules._FusedNorm, "_decide", lambda self, gemms: (True, ""))
    return qt


@pytest.fixture
def host_ops(monkeypatch):
    """The ops' real implementations on CPU tensors against a device-less sm_90 context:
    libqfuse checks every argument they build (shapes, dtypes, alignment of every slot and
    stage) and answers QF_ERR_NO_DEVICE, "arguments are valid", instead of launching."""
    from qfuse import _lib
    ctx = _lib.host_context(90)
    monkeypatch.setattr(qops, "_ctx", lambda dev: ctx)
    monkeypatch.setattr(qops, "_stream", lambda dev: None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    yield
    _lib.lib.qf_ctx_free(ctx)


def expect_valid(fn, *args):
    with pytest.raises(qops._lib.QfuseError) as e:
        fn(*args)
    assert e.value.status == "QF_ERR_NO_DEVICE" and "arguments are valid" in str(e.value), e.value


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("recipe", RECIPES)
def test_linear_ops_arguments_on_host_context(host_ops, recipe, norm):
    layer = qops.new_layer()
    w, g, b, bias, wq = params(recipe, "cpu")
    beta = b.data if norm == 1 else None
    expect_valid(torch.ops.qfuse.quantize_weight_, w.data, wq, layer, recipe)
    x = torch.randn(32, 2, K).to(torch.bfloat16)
    expect_valid(torch.ops.qfuse.layernorm_linear_fwd, x, w.data, g.data, beta, wq, bias.data,
                 layer, recipe, norm, 1e-5, False, True, None, None)
    xq = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype])
          for o in qops._x_outs(recipe, norm, 64, K, True)]
    dy = torch.randn(32, 2, N).to(torch.bfloat16)
    for has_bias in (True, False):
        expect_valid(torch.ops.qfuse.layernorm_linear_bwd, dy, x, w.data, g.data, beta, wq, xq,
                     layer, recipe, norm, 1e-5, False, has_bias, None, None)


@pytest.mark.parametrize("act", [0, 1, 2])
@pytest.mark.parametrize("recipe", RECIPES + ["fp8_delayed"])
def test_mlp_ops_arguments_on_host_context(host_ops, recipe, act):
    """Every argument the MLP ops build is valid for libqfuse (device-less context); under
    fp8_delayed with the six tensors' scales, and the forward is refused without them."""
    F = 256
    fin = 2 * F if act == 1 else F
    layer = qops.new_layer()

    def p(*shape):
        return torch.randn(*shape).to(torch.bfloat16)
    w1, w2, g, b, b1, b2 = p(fin, K), p(K, F), p(K), p(K), p(fin), p(K)
    w1q = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype])
           for o in qops._weight_outs(recipe, fin, K)]
    w2q = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype])
           for o in qops._weight_outs(recipe, K, F)]
    x = torch.randn(64, K).to(torch.bfloat16)
    delayed = recipe == "fp8_delayed"
    scales, amax = (torch.ones(6), torch.zeros(6)) if delayed else (None, None)
    if delayed:
        expect_valid(torch.ops.qfuse.quantize_weight_, w1, w1q, layer, recipe, scales[1:2])
        with pytest.raises(qops._lib.QfuseError, match="scale"):
            torch.ops.qfuse.layernorm_mlp_fwd(x, w1, w2, g, b, w1q, w2q, b1, b2, layer, recipe,
                                              1, 1e-5, False, act, True, None, None)
    expect_valid(torch.ops.qfuse.layernorm_mlp_fwd, x, w1, w2, g, b, w1q, w2q, b1, b2, layer,
                 recipe, 1, 1e-5, False, act, True, scales, amax)
    h, a = p(64, fin), p(64, F)
    xq = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype])
          for o in qops._x_outs(recipe, 1, 64, K, True)]
    _, _, aqo, _ = qops._mlp_outs(recipe, 1, act, 64, K, fin, F, K, True)
    aq = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype]) for o in aqo]
    expect_valid(torch.ops.qfuse.layernorm_mlp_bwd, p(64, K), x, w1, w2, g, b, w1q, w2q, xq, aq,
                 h, a, layer, recipe, 1, 1e-5, False, act, True, True, scales, amax)


KINDS = {"fprop": (0, 0), "dgrad": (0, 1), "wgrad": (1, 1)}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("recipe", RECIPES)
def test_quantize_gemm_ops(host_ops, recipe, kind):
    """qfuse::quantize of each GEMM operand (its role, both copies) and qfuse::gemm of the copies
    the training GEMM reads: real implementations against the device-less context, fake ones on
    meta tensors with libqfuse's shapes."""
    m, k, n = 64, 256, 96  # x [m, k], W [n, k], dy [m, n]
    operands = {"fprop": (("input", m, k), ("weight", n, k)),
                "dgrad": (("grad", m, n), ("weight", n, k)),
                "wgrad": (("grad", m, n), ("input", m, k))}[kind]
    a_copy, b_copy = KINDS[kind]
    roles = {"input": 0, "weight": 1, "grad": 2}
    specs, slots = [], []
    for role, rows, cols in operands:
        spec = [roles[role], 0, 3, rows, cols]
        x = torch.randn(rows, cols).to(torch.bfloat16)
        expect_valid(torch.ops.qfuse.quantize, x, None, None, None, recipe, roles[role], 0, 0.0,
                     False, 3, 1, 0)
        outs = qops._q_outs(recipe, roles[role], 0, 3, rows, cols)
        slots.append([torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype]) for o in outs])
        meta = torch.ops.qfuse.quantize(x.to("meta"), None, None, None, recipe, roles[role], 0,
                                        0.0, False, 3, 1, 0)
        assert [tuple(t.shape) for t in meta] == [o.dims for o in outs]
        specs.append(spec)
    expect_valid(torch.ops.qfuse.gemm, slots[0], slots[1], None, recipe, specs[0], specs[1],
                 a_copy, b_copy, kind == "wgrad")
    y = torch.ops.qfuse.gemm([t.to("meta") for t in slots[0]], [t.to("meta") for t in slots[1]],
                             None, recipe, specs[0], specs[1], a_copy, b_copy, kind == "wgrad")
    want = {"fprop": (m, n), "dgrad": (m, k), "wgrad": (n, k)}[kind]
    assert tuple(y.shape) == want
    assert y.dtype == (torch.float32 if kind == "wgrad" else torch.bfloat16)
    with pytest.raises(ValueError, match="operand a has"):
        torch.ops.qfuse.gemm(slots[0][:-1], slots[1], None, recipe, specs[0], specs[1], a_copy,
                             b_copy, False)


def test_quantize_gemm_fakes_check_arguments():
    """The fakes of qfuse::quantize and qfuse::gemm refuse what the real ops refuse, naming the
    argument, instead of answering with another role's shapes or an IndexError."""
    recipe = "mxfp8"
    x = torch.empty(64, 256, dtype=torch.bfloat16, device="meta")
    q = torch.ops.qfuse.quantize
    for role, norm, outputs, msg in ((-1, 0, 3, "role is -1"), (5, 0, 3, "role is 5"),
                                     (0, -1, 3, "norm is -1"), (0, 7, 3, "norm is 7"),
                                     (1, 1, 3, "norm .* input role"), (0, 0, 0, "outputs is 0")):
        with pytest.raises(ValueError, match=msg):
            q(x, None, None, None, recipe, role, norm, 0.0, False, outputs, 0, 0)
    for bad in (torch.empty((), device="meta"), torch.empty(4, 0, device="meta"),
                torch.empty(4, 8, dtype=torch.int64, device="meta")):
        with pytest.raises(ValueError, match="expected \\[..., K\\]"):
            q(bad, None, None, None, recipe, 2, 0, 0.0, False, 3, 0, 0)
    g = torch.empty(256, dtype=torch.bfloat16, device="meta")
    for gamma, beta, norm, eps, scale, msg in (
            (None, None, 1, 1e-5, None, "norm 1 takes a gamma"),
            (g, None, 1, 1e-5, None, "norm 1 takes a beta"),
            (g, g, 2, 1e-5, None, "norm 2 takes no beta"),
            (g[:100], g, 1, 1e-5, None, "gamma is \\(100,\\)"),
            (g, g, 1, -1.0, None, "eps is -1.0"),
            (g, g, 1, float("nan"), None, "eps is nan"),
            (torch.empty(512, dtype=torch.bfloat16, device="meta")[::2], g, 1, 1e-5, None,
             "gamma is not contiguous")):
        with pytest.raises(ValueError, match=msg):
            q(x, gamma, beta, scale, recipe, 0 if norm else 2, norm, eps, False, 3, 0, 0)
    with pytest.raises(ValueError, match="scale is \\(5,\\) torch.int32"):
        q(x, None, None, torch.ones(5, dtype=torch.int32, device="meta"), "fp8_delayed", 2, 0,
          0.0, False, 3, 0, 0)
    a = q(x, None, None, None, recipe, 2, 0, 0.0, False, 3, 0, 0)  # dy [64, 256]
    w = q(torch.empty(128, 256, dtype=torch.bfloat16, device="meta"), None, None, None, recipe,
          1, 0, 0.0, False, 3, 0, 0)
    sa, sw = [2, 0, 3, 64, 256], [1, 0, 3, 128, 256]
    g = torch.ops.qfuse.gemm
    assert tuple(g(a, w, None, recipe, sa, sw, 0, 0, False).shape) == (64, 128)
    for args, msg in (((a, w, None, recipe, sa, [1, 0, 3, 129, 256], 0, 0, False),
                       "operand b's rowwise_data is \\(128, 256\\)"),
                      ((a, w, None, recipe, sa, sw, 5, 0, False), "a_copy is 5"),
                      ((a, w, None, recipe, sa[:3], sw, 0, 0, False), "a_spec is"),
                      ((a, w, None, recipe, sa, [1, 0, 1, 128, 256], 0, 1, False),
                       "operand b has|b_copy 1 is a copy the quantization did not make"),
                      ((a, w, None, recipe, sa, [1, 0, 3, 128, 256], 0, 1, False),
                       "a reduces over K = 256, b over K = 128"),
                      (([], w, None, recipe, sa, sw, 0, 0, False), "operand a has 0"),
                      ((a, w, None, recipe, sa, sw, 1, 0, False), "no training GEMM reads"),
                      ((a, w, torch.empty(129, dtype=torch.bfloat16, device="meta"), recipe, sa,
                        sw, 0, 0, False), "bias is \\(129,\\)"),
                      ((a, w, torch.empty(128, device="meta"), recipe, sa, sw, 0, 0, False),
                       "bias is \\(128,\\) torch.float32"),
                      ((a, w, torch.empty(128, dtype=torch.bfloat16), recipe, sa, sw, 0, 0,
                        False), "bias is on cpu, a's first tensor on meta"),
                      ((a, [torch.empty_like(w[0], device="cpu")] + w[1:], None, recipe, sa,
                        sw, 0, 0, False), "b\\[0\\] is on cpu")):
        with pytest.raises(ValueError, match=msg):
            g(*args)


def real_and_fake(fn, make_args, exc, msg):
    """fn on CPU tensors (the real op against the device-less context) and on meta tensors (its
    fake) raises exc, with msg in the message, alike: both ask libqfuse the same. The messages."""
    said = []
    for device in ("cpu", "meta"):
        with pytest.raises(exc, match=re.escape(msg)) as e:
            fn(*make_args(device))
        said.append(str(e.value))
    return said


@pytest.mark.parametrize("recipe,a_role,b_role,msg", [
    # cuBLASLt's FP8 GEMM reads an E4M3 b only: a gradient's E5M2 copy (fp8_delayed and
    # fp8_current's hybrid format) is refused as b
    ("fp8_delayed", 0, 2, "b.rowwise_data e4m3 (got e4m3, e5m2)"),
    ("fp8_current", 2, 2, "b.rowwise_data e4m3 (got e5m2, e5m2)"),
    # fp8_block's fprop reads a's 1x128 scales: a weight's 128x128 tiles are refused
    ("fp8_block", 1, 1, "a.rowwise_scale_inv has 4 elements"),
])
def test_gemm_fake_applies_libqfuse_rules(host_ops, recipe, a_role, b_role, msg):
    """qfuse::gemm's fake hands its operands to libqfuse (a device-less context, placeholder
    addresses) as the real op does, so it refuses what libqfuse refuses of the recipe's GEMM
    beyond the operands' shapes, with the real op's error; the operands of the training GEMM
    pass both."""
    m, n, k = 64, 128, 256

    def slots(role, rows, device):
        return [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype], device=device)
                for o in qops._q_outs(recipe, role, 0, 3, rows, k)]

    def args(a_role, b_role):
        return lambda device: (slots(a_role, m, device), slots(b_role, n, device), None, recipe,
                               [a_role, 0, 3, m, k], [b_role, 0, 3, n, k], 0, 0, False)
    said = real_and_fake(torch.ops.qfuse.gemm, args(a_role, b_role), qops._lib.QfuseArgumentError,
                         msg)
    assert said[0] == said[1]
    expect_valid(torch.ops.qfuse.gemm, *args(0, 1)("cpu"))  # fprop: x and W
    assert tuple(torch.ops.qfuse.gemm(*args(0, 1)("meta")).shape) == (m, n)


def test_quantize_refuses_unread_scale_and_negative_stream(host_ops):
    """qfuse::quantize, real and fake: a scale where the recipe computes its scales (libqfuse
    ignores it there) and a negative seed or offset (a uint64 in libqfuse) are refused by name;
    delayed scaling's scale and a zero stream pass."""
    def x(device):
        return torch.empty(64, 256, dtype=torch.bfloat16, device=device)

    for recipe in ("fp8_current", "mxfp8", "nvfp4", "fp8_block"):
        real_and_fake(torch.ops.qfuse.quantize,
                      lambda d: (x(d), None, None, torch.ones(1, device=d), recipe, 2, 0, 0.0,
                                 False, 3, 0, 0),
                      ValueError, "scale is given, but recipe %r" % recipe)
    for seed, offset, msg in ((-1, 0, "seed is -1"), (0, -2, "offset is -2")):
        real_and_fake(torch.ops.qfuse.quantize,
                      lambda d: (x(d), None, None, None, "nvfp4", 2, 0, 0.0, False, 3, seed,
                                 offset),
                      ValueError, msg)
    scale = torch.ones(1)
    expect_valid(torch.ops.qfuse.quantize, x("cpu"), None, None, scale, "fp8_delayed", 2, 0, 0.0,
                 False, 3, 0, 0)
    out = torch.ops.qfuse.quantize(x("meta"), None, None, scale.to("meta"), "fp8_delayed", 2, 0,
                                   0.0, False, 3, 0, 0)
    assert [tuple(t.shape) for t in out] == [(64, 256), (256, 64), (1,), (1,)]


def test_quantize_fake_applies_libqfuse_rules(host_ops):
    """qfuse::quantize's fake hands its arguments to libqfuse as the real op does, at addresses
    aligned as the tensors' own: an NVFP4 x that starts 2 bytes into its storage (libqfuse's
    vector loads need 16-byte alignment) is refused by both; 16 bytes in, it passes."""
    def x(offset):
        return lambda d: (torch.empty(64 * 256 + 8, dtype=torch.bfloat16, device=d)[offset:]
                          [:64 * 256].view(64, 256), None, None, None, "nvfp4", 2, 0, 0.0,
                          False, 3, 0, 0)
    real_and_fake(torch.ops.qfuse.quantize, x(1), qops._lib.QfuseArgumentError,
                  "is not 16-byte aligned")
    expect_valid(torch.ops.qfuse.quantize, *x(8)("cpu"))
    assert len(torch.ops.qfuse.quantize(*x(8)("meta"))) == 6


def test_real_ops_refuse_non_contiguous_tensors(host_ops):
    """libqfuse reads dense buffers from data pointers: a strided gamma, bias or operand slot is
    refused by name, not read as if dense."""
    x = torch.randn(64, 256).to(torch.bfloat16)
    gamma = torch.ones(512, dtype=torch.bfloat16)[::2]
    with pytest.raises(ValueError, match="not contiguous"):
        torch.ops.qfuse.quantize(x, gamma, torch.zeros(256, dtype=torch.bfloat16), None,
                                 "mxfp8", 0, 1, 1e-5, False, 3, 0, 0)
    outs = qops._q_outs("mxfp8", 2, 0, 1, 64, 256)
    a = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype]) for o in outs]
    wo = qops._q_outs("mxfp8", 1, 0, 1, 128, 256)
    w = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype]) for o in wo]
    w[0] = torch.empty(tuple(reversed(w[0].shape)), dtype=w[0].dtype).t()  # a transposed view
    with pytest.raises(ValueError, match="not contiguous"):
        torch.ops.qfuse.gemm(a, w, None, "mxfp8", [2, 0, 1, 64, 256], [1, 0, 1, 128, 256], 0, 0,
                             False)


def test_quantize_with_norm(host_ops):
    x = torch.randn(64, K).to(torch.bfloat16)
    g, b = torch.ones(K, dtype=torch.bfloat16), torch.zeros(K, dtype=torch.bfloat16)
    for recipe in RECIPES:
        expect_valid(torch.ops.qfuse.quantize, x, g, b, None, recipe, 0, 1, 1e-5, False, 3, 0, 0)
        expect_valid(torch.ops.qfuse.quantize, x, g, None, None, recipe, 0, 2, 1e-5, True, 1, 0,
                     0)
    scale = torch.ones(1)
    expect_valid(torch.ops.qfuse.quantize, x, None, None, scale, "fp8_delayed", 1, 0, 0.0, False,
                 3, 0, 0)
    with pytest.raises(qops._lib.QfuseError, match="scale"):  # delayed scaling needs its scale
        torch.ops.qfuse.quantize(x, None, None, None, "fp8_delayed", 1, 0, 0.0, False, 3, 0, 0)


def test_bad_arguments_fail_at_trace_time():
    """The fake implementations check what the real ones check: a bad call fails while
    torch.compile traces it, with the argument named, not at run time."""
    recipe = "mxfp8"
    layer = qops.new_layer()
    w, g, b, bias, wq = params(recipe)
    x = torch.empty(64, K, dtype=torch.bfloat16, device="meta")

    def fwd(**kw):
        a = dict(x=x, weight=w, gamma=g, beta=b, wq=wq, bias=bias, layer=layer, recipe=recipe,
                 norm=1, eps=1e-5, zero_centered_gamma=False, for_backward=True, scales=None,
                 amax=None)
        a.update(kw)
        return torch.ops.qfuse.layernorm_linear_fwd(**a)

    cases = [
        (dict(x=torch.empty(64, 500, dtype=torch.bfloat16, device="meta")), "gamma is"),
        (dict(gamma=torch.empty(7, dtype=torch.bfloat16, device="meta")), "gamma is (7,)"),
        (dict(bias=torch.empty(N - 1, dtype=torch.bfloat16, device="meta")), "bias 0 is"),
        (dict(wq=wq[:1]), "cache buffers are"),
        (dict(wq=[]), "cache buffers are"),
        (dict(wq=wq + [torch.empty(N, K, dtype=torch.bfloat16, device="meta")]),
         "cache buffers are"),  # one kept bf16 copy: both or none
        (dict(wq=wq + [torch.empty(N, K, dtype=torch.float32, device="meta")] * 2),
         "also [(384, 512), (384, 512)] in bf16"),
        (dict(weight=torch.empty(N, dtype=torch.bfloat16, device="meta")), "expected 2-D"),
        (dict(norm=3), "norm is 3"),
        (dict(norm=-1), "norm is -1"),
        (dict(x=torch.empty(64, K, dtype=torch.int32, device="meta")), "bf16, fp16 or fp32"),
        (dict(x=torch.empty(64, K, dtype=torch.bfloat16)), "is on meta, x on cpu"),
        # what libqfuse refuses or could not see (eps, dtypes, contiguity, the layer id)
        (dict(eps=float("nan")), "eps is nan"),
        (dict(eps=-1.0), "eps is -1.0"),
        (dict(eps=1e39), "eps is 1e+39"),  # beyond fp32
        (dict(bias=bias.float()), "bias 0 is torch.float32"),
        (dict(gamma=g.float()), "beta is torch.bfloat16"),
        (dict(gamma=torch.empty(2 * K, dtype=torch.bfloat16, device="meta")[::2]),
         "gamma is not contiguous"),
        (dict(layer=10 ** 9), "layer 1000000000 is not a layer id"),
    ]
    for kw, msg in cases:
        with pytest.raises((ValueError, TypeError), match=re.escape(msg)):
            fwd(**kw)
    # delayed scaling: its scales, and the state tensors' dtype and length (read by address)
    dwq = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype], device="meta")
           for o in qops._weight_outs("fp8_delayed", N, K)]
    ones = torch.ones(3, device="meta")
    for kw, msg in ((dict(), "scales (fp32 [3]"),
                    (dict(scales=torch.ones(2, device="meta")), "scales is (2,)"),
                    (dict(scales=ones.double()), "scales is (3,) torch.float64"),
                    (dict(scales=ones, amax=torch.zeros(3, dtype=torch.int32, device="meta")),
                     "amax is (3,) torch.int32")):
        with pytest.raises(ValueError, match=re.escape(msg)):
            fwd(recipe="fp8_delayed", wq=dwq, **kw)
    # scales where the recipe computes its own (libqfuse would ignore them), and a weight scale
    with pytest.raises(ValueError, match="scales is given, but recipe 'mxfp8'"):
        fwd(scales=ones)
    with pytest.raises(ValueError, match="scale is given, but recipe 'mxfp8'"):
        torch.ops.qfuse.quantize_weight_(w, wq, layer, recipe, torch.ones(1, device="meta"))
    # the delayed scale of quantize and quantize_weight_ takes the layer ops' form: contiguous
    # fp32 [>= n] (a [1, 1] scale was accepted by one and refused by the other)
    dw = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype], device="meta")
          for o in qops._weight_outs("fp8_delayed", N, K)]
    for bad, shown in ((torch.ones(1, 1, device="meta"), "(1, 1) torch.float32 on meta"),
                       (torch.ones(0, device="meta"), "(0,) torch.float32 on meta"),
                       (torch.ones(4, device="meta")[::2],
                        "(2,) torch.float32 on meta (not contiguous)")):
        want = "scale is %s; expected a contiguous fp32 [1] (the delayed scale)" % shown
        with pytest.raises(ValueError, match=re.escape(want)):
            torch.ops.qfuse.quantize_weight_(w, dw, layer, "fp8_delayed", bad)
        with pytest.raises(ValueError, match=re.escape(want)):
            torch.ops.qfuse.quantize(w, None, None, bad, "fp8_delayed", 1, 0, 0.0, False, 3, 0,
                                     0)
    torch.ops.qfuse.quantize(w, None, None, torch.ones(2, device="meta"), "fp8_delayed", 1, 0,
                             0.0, False, 3, 0, 0)  # [>= 1]: element 0 is read
    with pytest.raises(ValueError, match="dy is"):
        out = fwd()
        torch.ops.qfuse.layernorm_linear_bwd(torch.empty(64, N + 1, dtype=torch.bfloat16,
                                                         device="meta"), x, w, g, b, wq, out[1:],
                                             layer, recipe, 1, 1e-5, False, True, None, None)
    F = 128
    w1 = torch.empty(2 * F, K, dtype=torch.bfloat16, device="meta")
    w2 = torch.empty(K, 2 * F, dtype=torch.bfloat16, device="meta")
    w1q = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype], device="meta")
           for o in qops._weight_outs(recipe, 2 * F, K)]
    w2q = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype], device="meta")
           for o in qops._weight_outs(recipe, K, 2 * F)]
    for act, msg in ((1, "under swiglu fc2's input is half"), (-1, "act is -1"),
                     (3, "act is 3")):
        with pytest.raises(ValueError, match=msg):
            torch.ops.qfuse.layernorm_mlp_fwd(x, w1, w2, g, b, w1q, w2q, None, None, layer,
                                              recipe, 1, 1e-5, False, act, True, None, None)
    with pytest.raises(ValueError, match="CUDA tensors"):  # the real op, on CPU tensors
        wc, gc, bc, biasc, wqc = params(recipe, "cpu")
        torch.ops.qfuse.quantize_weight_(wc.data, wqc, layer, recipe)
    with pytest.raises(ValueError, match="not a layer id"):
        qops._layer_state(987654)


def test_module_default_device_without_gpu(monkeypatch):
    """device="cuda" (the default) where PyTorch sees no GPU: qfuse's error, naming device='cpu',
    not the driver's from the first allocation."""
    from qfuse.torch import LayerNormLinear, LayerNormMLP
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CUDA device here: pass device='cpu'"):
        LayerNormLinear(K, N)
    with pytest.raises(RuntimeError, match="device='cuda:0'.*no CUDA device"):
        LayerNormMLP(K, 64, device="cuda:0")


def test_module_arguments_and_cpu_fallback():
    import warnings
    from qfuse.torch import LayerNormLinear, LayerNormMLP
    with pytest.raises(ValueError, match="recipe 'nope'.*not found"):
        LayerNormLinear(K, N, recipe="nope", device="cpu")
    with pytest.raises(TypeError, match="recipe must be"):
        LayerNormLinear(K, N, recipe=None, device="cpu")
    with pytest.raises(ValueError, match="params_dtype"):
        LayerNormLinear(K, N, params_dtype=torch.int32, device="cpu")
    with pytest.raises(ValueError, match="in_features must be a positive int"):
        LayerNormLinear(0, N, device="cpu")
    with pytest.raises(ValueError, match="ffn_hidden_size must be a positive int"):
        LayerNormMLP(K, 0, device="cpu")
    with pytest.raises(ValueError, match="activation"):
        LayerNormMLP(K, 64, activation="tanh", device="cpu")
    with pytest.warns(UserWarning, match="runs unfused in PyTorch.*CUDA devices"):
        mlp = LayerNormMLP(K, 64, activation="swiglu", device="cpu")
    assert not mlp.fused
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once, at construction
        x = torch.randn(4, 3, K, requires_grad=True)
        y = mlp(x)
        y.float().sum().backward()
    assert y.shape == (4, 3, K) and y.dtype == torch.bfloat16 and x.grad.shape == x.shape
    with pytest.raises(ValueError, match="last dim 5"):
        mlp(torch.randn(2, 5))
    for bad in (torch.tensor(1.0), None, torch.zeros(2, K, dtype=torch.int64)):
        with pytest.raises(TypeError, match="x must be a tensor"):
            mlp(bad)
    for kw, err, msg in ((dict(eps=-1.0), ValueError, "eps must be"),
                         (dict(eps=float("nan")), ValueError, "eps must be"),
                         (dict(zero_centered_gamma="false"), TypeError, "zero_centered_gamma"),
                         (dict(bias="yes"), TypeError, "bias must be a bool"),
                         (dict(rng_seed=-1), ValueError, "rng_seed"),
                         (dict(rng_seed=1 << 64), ValueError, "rng_seed"),
                         (dict(amax_group=5), TypeError, "amax_group must be"),
                         (dict(keep_weight_bf16="yes"), TypeError, "keep_weight_bf16")):
        with pytest.raises(err, match=msg), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            LayerNormLinear(K, N, device="cpu", **kw)
    with pytest.raises(TypeError, match="amax_group must be"):
        mlp.amax_group = "world"
    import qfuse.torch as qt
    with pytest.raises(TypeError, match="model must be"):
        qt.update_scales(5)
    with pytest.raises(TypeError, match="amax_group must be"):
        qt.update_scales(mlp, group=object())


@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4", "mxfp8_2d"])
def test_kept_weight_bf16_on_host_context(host_ops, monkeypatch, recipe):
    """weight_buffers(keep_bf16=True) ends in both copies' bf16 values (libqfuse's
    qf_dequantized_dims: MXFP8's columnwise copy as stored, NVFP4's in elements), and the layer
    ops hand them to libqfuse (wq_bf16, w1q_bf16, w2q_bf16), which accepts them (device-less
    context); given of the wrong dims, libqfuse's GEMM refuses them by name, so the ctypes
    structs put them where libqfuse reads them. Recipes without bf16 GEMM operands refuse."""
    layer = qops.new_layer()
    w, g, b, bias, _ = params(recipe, "cpu")
    wq = qops.weight_buffers(recipe, w.data, keep_bf16=True)
    n = len(qops._weight_outs(recipe, N, K))
    kept = qops._kept_dims(recipe, N, K)
    # MXFP8's columnwise copy is stored as is ([N, K], 32x1 blocks), NVFP4's transposed
    assert kept == [(N, K), (N, K) if recipe.startswith("mxfp8") else (K, N)]
    assert [tuple(t.shape) for t in wq[n:]] == kept and all(
        t.dtype == torch.bfloat16 for t in wq[n:])
    expect_valid(torch.ops.qfuse.quantize_weight_, w.data, wq, layer, recipe)
    x = torch.randn(32, K).to(torch.bfloat16)
    expect_valid(torch.ops.qfuse.layernorm_linear_fwd, x, w.data, g.data, b.data, wq, bias.data,
                 layer, recipe, 1, 1e-5, False, True, None, None)
    xq = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype])
          for o in qops._x_outs(recipe, 1, 32, K, True)]
    dy = torch.randn(32, N).to(torch.bfloat16)
    expect_valid(torch.ops.qfuse.layernorm_linear_bwd, dy, x, w.data, g.data, b.data, wq, xq,
                 layer, recipe, 1, 1e-5, False, True, None, None)
    F = 256
    w1, w2 = torch.randn(2 * F, K).to(torch.bfloat16), torch.randn(K, F).to(torch.bfloat16)
    w1q = qops.weight_buffers(recipe, w1, keep_bf16=True)
    w2q = qops.weight_buffers(recipe, w2, keep_bf16=True)
    expect_valid(torch.ops.qfuse.layernorm_mlp_fwd, x, w1, w2, g.data, b.data, w1q, w2q, None,
                 None, layer, recipe, 1, 1e-5, False, 1, True, None, None)
    # the kept copies of the wrong dims, past Python's check: libqfuse names them
    bad = [torch.empty(N, K + 32, dtype=torch.bfloat16) for _ in range(2)]
    real_kept_dims = qops._kept_dims
    monkeypatch.setattr(qops, "_kept_dims", lambda r, n_out, k: [(N, K + 32)] * 2)
    with pytest.raises(qops._lib.QfuseArgumentError, match="fprop|GEMM of ll->xq.*b_dequantized"):
        torch.ops.qfuse.layernorm_linear_fwd(x, w.data, g.data, b.data, wq[:n] + bad,
                                             bias.data, layer, recipe, 1, 1e-5, False, True,
                                             None, None)
    with pytest.raises(ValueError, match="no bf16 GEMM operands to keep"):
        qops.weight_buffers("fp8_current", w.data, keep_bf16=True)
    monkeypatch.setattr(qops, "_kept_dims", real_kept_dims)
    # kept copies that would overwrite something, or that libqfuse cannot take: refused by
    # quantize_weight_ before it quantizes anything (a ValueError, not libqfuse's answer)
    big = torch.empty(N * K + 8, dtype=torch.bfloat16)
    for bad, msg in (([wq[n], wq[n].view(kept[1])],
                      "kept rowwise copy overlaps the cache buffer %d" % (n + 1)),
                     ([w.data, wq[n + 1]], "kept rowwise copy overlaps the weight"),
                     ([big[1:1 + N * K].view(N, K), wq[n + 1]], "16-byte aligned")):
        with pytest.raises(ValueError, match=msg):
            torch.ops.qfuse.quantize_weight_(w.data, wq[:n] + bad, layer, recipe)
    with pytest.raises(TypeError, match="keep_bf16 must be a bool"):
        qops.weight_buffers(recipe, w.data, keep_bf16="no")
    for bad_w in (torch.empty(N), torch.empty(2, N, K), torch.empty(N, K, dtype=torch.int32)):
        with pytest.raises(ValueError, match="weight must be a 2-D"):
            qops.weight_buffers(recipe, bad_w)


def test_kept_weight_bf16_refused_where_not_kept():
    """Under a recipe whose GEMM multiplies its quantized copies (per-tensor FP8, FP8 block
    scaling) the layer ops take no extra bf16 buffers, and their message offers none."""
    w, g, b, bias, wq = params("fp8_current")
    x = torch.empty(64, K, dtype=torch.bfloat16, device="meta")
    extra = [torch.empty(d, dtype=torch.bfloat16, device="meta")
             for d in qops._kept_dims("fp8_current", N, K)]
    with pytest.raises(ValueError, match="cache buffers are") as e:
        torch.ops.qfuse.layernorm_linear_fwd(x, w, g, b, wq + extra, bias, qops.new_layer(),
                                             "fp8_current", 1, 1e-5, False, True, None, None)
    assert "bf16" not in str(e.value)


def test_kept_weight_bf16_module_on_meta(monkeypatch, qt):
    """LayerNormMLP(keep_weight_bf16=True) with its fused path forced on, on meta tensors: the
    weight cache registers both weights' bf16 copies last (non-persistent, out of the
    state_dict), forward and backward run, and torch.compile traces one graph; under a recipe
    without bf16 GEMM operands the option has no effect."""
    monkeypatch.setattr(qops, "_layout", lambda recipe, dev: qops._lib.LAYOUT_COMPACT)
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    m = qt.LayerNormMLP(K, 128, recipe="nvfp4", activation="swiglu", device="meta",
                        keep_weight_bf16=True)
    assert m.keeps_weight_bf16
    assert m._w1_names[-2:] == ["_w1q_rowwise_bf16", "_w1q_columnwise_bf16"]
    assert tuple(getattr(m, m._w2_names[-1]).shape) == qops._kept_dims("nvfp4", K, 128)[1]
    assert not any(k.endswith("_bf16") for k in m.state_dict())
    cm = torch.compile(m, backend="aot_eager", fullgraph=True, dynamic=True)
    for rows in (64, 128, 192):  # NVFP4's wgrad takes M in whole 32-element blocks
        x = torch.empty(rows, K, dtype=torch.bfloat16, device="meta", requires_grad=True)
        cm(x).sum().backward()
        assert x.grad.shape == (rows, K)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    plain = qt.LayerNormLinear(K, N, recipe="fp8_current", device="meta", keep_weight_bf16=True)
    assert not plain.keeps_weight_bf16
    assert not any(n.endswith("_bf16") for n in plain._wq_names)


def test_amax_reduction_of_a_c_caller_is_kept(host_ops):
    """An op of a layer with an amax group installs its all-reduce for the C call only and puts
    back the reduction the thread had (a C caller's), user pointer included."""
    from qfuse import _lib
    keep = _lib.AMAX_REDUCE_FN(lambda user, amax, stream: 0)
    _lib.lib.qf_set_amax_reduce(keep, ctypes.c_void_p(1234))
    try:
        layer = qops.new_layer()
        qops.set_amax_group(layer, "a group")  # the modules check it; the ops only look it up
        w, g, b, bias, wq = params("fp8_current", "cpu")
        expect_valid(torch.ops.qfuse.quantize_weight_, w.data, wq, layer, "fp8_current")
        user = ctypes.c_void_p()
        fn = _lib.lib.qf_get_amax_reduce(ctypes.byref(user))
        assert ctypes.cast(fn, ctypes.c_void_p).value == ctypes.cast(keep, ctypes.c_void_p).value
        assert user.value == 1234
    finally:
        _lib.lib.qf_set_amax_reduce(_lib.AMAX_REDUCE_FN(), None)
    assert not _lib.lib.qf_get_amax_reduce(None)


def test_scale_update_op(host_ops):
    """qfuse::scale_update_: valid state reaches libqfuse (device-less context); a bad state is
    named, in the fake implementation too; a recipe without delayed scaling is refused."""
    n, hist = 3, 1024  # fp8_delayed.lua's amax_history_len

    def state(device="cpu", **bad):
        s = dict(amax=torch.zeros(n), history=torch.zeros(n, hist), scale=torch.ones(n),
                 scale_inv=torch.ones(n), fmt=torch.tensor([3, 3, 4], dtype=torch.uint8))
        s.update(bad)
        return [s[k].to(device) for k in ("amax", "history", "scale", "scale_inv", "fmt")]
    expect_valid(torch.ops.qfuse.scale_update_, *state(), "fp8_delayed")
    with pytest.raises(qops._lib.QfuseError, match="amax_history_len|H"):
        torch.ops.qfuse.scale_update_(*state(history=torch.zeros(n, 16)), "fp8_delayed")
    with pytest.raises(qops._lib.QfuseError) as e:
        torch.ops.qfuse.scale_update_(*state(), "mxfp8")
    assert e.value.status == "QF_ERR_UNSUPPORTED"
    for bad, msg in ((dict(amax=torch.zeros(n + 1)), "amax is"),
                     (dict(fmt=torch.zeros(n)), "fmt must be"),
                     (dict(history=torch.zeros(n)), "history is"),
                     (dict(amax=torch.zeros(0), history=torch.zeros(0, hist),
                           scale=torch.ones(0), scale_inv=torch.ones(0),
                           fmt=torch.zeros(0, dtype=torch.uint8)), "n, H >= 1")):
        with pytest.raises(ValueError, match=msg):
            torch.ops.qfuse.scale_update_(*state("meta", **bad), "fp8_delayed")
    # the recipe, checked by the fake implementation as libqfuse checks it, with its statuses
    with pytest.raises(qops._lib.QfuseArgumentError, match="keeps H = 1024 amaxes"):
        torch.ops.qfuse.scale_update_(*state("meta", history=torch.zeros(n, 16)), "fp8_delayed")
    with pytest.raises(qops._lib.QfuseError, match="computes its scales in the quantizer") as e:
        torch.ops.qfuse.scale_update_(*state("meta"), "mxfp8")
    assert e.value.status == "QF_ERR_UNSUPPORTED"
    with pytest.raises(qops._lib.QfuseError) as e:
        torch.ops.qfuse.scale_update_(*state("meta"), "nosuch")
    assert e.value.status == "QF_ERR_NOT_FOUND"


def test_return_layernorm_output_unfused():
    import warnings
    from qfuse.torch import LayerNormLinear
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unfused on the CPU
        layer = LayerNormLinear(K, N, device="cpu", return_layernorm_output=True)
    x = torch.randn(6, K, dtype=torch.bfloat16, requires_grad=True)
    y, xn = layer(x)
    want = torch.nn.functional.layer_norm(x, (K,), layer.layer_norm_weight,
                                          layer.layer_norm_bias, layer.eps)
    assert y.shape == (6, N) and torch.equal(xn, want)
    (y.float().sum() + xn.float().sum()).backward()
    assert x.grad is not None and layer.layer_norm_bias.grad is not None


def test_delayed_scaling_ops(host_ops):
    """fp8_delayed through the ops: the real implementations take the scales (device-less
    context: every argument valid), and on meta tensors a compiled step (aot_eager) runs the
    backward op that max-merges dy's amax into the state: one graph over two batch sizes."""
    recipe = "fp8_delayed"
    layer = qops.new_layer()
    w, g, b, bias, wq = params(recipe, "cpu")
    scales, amax = torch.ones(3), torch.zeros(3)
    expect_valid(torch.ops.qfuse.quantize_weight_, w.data, wq, layer, recipe, scales[1:2])
    x = torch.randn(32, K).to(torch.bfloat16)
    expect_valid(torch.ops.qfuse.layernorm_linear_fwd, x, w.data, g.data, b.data, wq, bias.data,
                 layer, recipe, 1, 1e-5, False, True, scales, amax)
    with pytest.raises(qops._lib.QfuseError, match="scale"):  # delayed scaling needs its scales
        torch.ops.qfuse.layernorm_linear_fwd(x, w.data, g.data, b.data, wq, bias.data, layer,
                                             recipe, 1, 1e-5, False, True, None, None)
    xq = [torch.empty(o.dims, dtype=qops.TORCH_DTYPE[o.dtype])
          for o in qops._x_outs(recipe, 1, 32, K, True)]
    dy = torch.randn(32, N).to(torch.bfloat16)
    expect_valid(torch.ops.qfuse.layernorm_linear_bwd, dy, x, w.data, g.data, b.data, wq, xq,
                 layer, recipe, 1, 1e-5, False, True, scales, amax)


def test_delayed_scaling_compiles_on_meta():
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    recipe = "fp8_delayed"
    layer = qops.new_layer()
    w, g, b, bias, wq = params(recipe)
    scales = torch.ones(3, device="meta")
    amax = torch.zeros(3, device="meta")

    def f(x):
        torch.ops.qfuse.quantize_weight_(w, wq, layer, recipe, scales[1:2])
        out = torch.ops.qfuse.layernorm_linear_fwd(x, w, g, b, wq, bias, layer, recipe, 1,
                                                   1e-5, False, True, scales, amax)
        return out[0]

    cf = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
    for m in (64, 128):
        x = torch.empty(m, K, dtype=torch.bfloat16, device="meta", requires_grad=True)
        cf(x).sum().backward()
        assert x.grad.shape == (m, K)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


@pytest.mark.parametrize("module", ["LayerNormLinear", "LayerNormMLP"])
def test_delayed_scaling_modules_on_meta(qt, module):
    """The fp8_delayed modules on meta tensors (their fused path forced on: the ops run their
    fakes): two micro-batches forward, then both backwards, eager (the amax state the forwards
    and backwards mutate is not a versioned saved tensor), then compiled (aot_eager) over three
    batch sizes: forward() asks no shape query while traced, one graph, no break."""
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    m = (qt.LayerNormLinear(K, N, recipe="fp8_delayed", device="meta") if module ==
         "LayerNormLinear" else qt.LayerNormMLP(K, 256, recipe="fp8_delayed", device="meta"))
    assert m.fused and m._delayed
    xs = [torch.empty(32 * i, K, dtype=torch.bfloat16, device="meta", requires_grad=True)
          for i in (1, 2)]
    ys = [m(x) for x in xs]  # micro-batches: both forwards merge amaxes before any backward
    for x, y in zip(xs, ys):
        y.sum().backward()
        assert x.grad.shape == x.shape
    cm = torch.compile(m, backend="aot_eager", fullgraph=True, dynamic=True)
    for rows in (48, 96, 144):
        x = torch.empty(rows, K, dtype=torch.bfloat16, device="meta", requires_grad=True)
        cm(x).sum().backward()
        assert x.grad.shape == (rows, K)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


@pytest.mark.parametrize("module", ["LayerNormLinear", "LayerNormMLP"])
def test_deepcopy_shares_the_group_not_the_host_state(tmp_path, module):
    """copy.deepcopy of a module with an amax group (a one-rank gloo group on the CPU): the copy
    has the same group (a process group cannot be copied), equal parameters in storage of its
    own, and host state of its own that starts as the original's (rng seed and offset, group)."""
    import warnings
    import copy
    import torch.distributed as dist
    import qfuse.torch as qt
    if not dist.is_available():
        pytest.skip("this torch has no torch.distributed")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0,
                            world_size=1)  # a file rendezvous: no TCP port to collide
    try:
        group = dist.group.WORLD
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the CPU fallback's report
            m = (qt.LayerNormLinear(K, N, recipe="fp8_current", device="cpu", rng_seed=7,
                                    amax_group=group) if module == "LayerNormLinear" else
                 qt.LayerNormMLP(K, 64, recipe="nvfp4", device="cpu", rng_seed=7,
                                 amax_group=group))
        qops._layer_state(m._layer).offset = 5
        c = copy.deepcopy(m)
        assert c.amax_group is group
        assert len(c._host.layers) == len(m._host.layers)
        for a, b in zip(c._host.layers, m._host.layers):
            sa, sb = qops._layer_state(a), qops._layer_state(b)
            assert a != b and sa is not sb
            assert (sa.seed, sa.amax_group, sa.key) == (7, group, None)
        assert qops._layer_state(c._layer).offset == 5
        for (n, p), q in zip(m.named_parameters(), c.parameters()):
            assert torch.equal(p, q) and p.data_ptr() != q.data_ptr(), n
        c.amax_group = None  # the original keeps its group
        assert m.amax_group is group and qops._layer_state(m._layer).amax_group is group
        cm = copy.deepcopy(torch.compile(m, backend="eager"))  # the compiled wrapper is kept
        assert isinstance(cm, torch._dynamo.eval_frame.OptimizedModule)
        assert cm._orig_mod is not m and cm._orig_mod.amax_group is group
        assert cm._orig_mod._layer not in m._host.layers
        import io
        buf = io.BytesIO()  # pickled (torch.save): new layers of this process, no group
        torch.save(m, buf)
        buf.seek(0)
        p = torch.load(buf, weights_only=False)
        assert p.amax_group is None and p._layer not in m._host.layers
        assert [qops.layer_settings(i) for i in p._host.layers] == \
               [qops.layer_settings(i) for i in m._host.layers]
        for (n, a), b in zip(m.named_parameters(), p.parameters()):
            assert torch.equal(a, b), n
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("module", ["LayerNormLinear", "LayerNormMLP"])
def test_delayed_state_dict_moves_between_fused_and_fallback(monkeypatch, module):
    """An fp8_delayed module's state_dict (with its fp8_* scaling buffers) loads strictly into
    the same module unfused (the CPU fallback keeps the buffers, unused) and back."""
    import warnings
    import qfuse.torch as qt
    from qfuse.torch import modules

    def make(device):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fallback's report
            return (qt.LayerNormLinear(K, N, recipe="fp8_delayed", device=device)
                    if module == "LayerNormLinear" else
                    qt.LayerNormMLP(K, 256, recipe="fp8_delayed", device=device))
    cpu = make("cpu")
    assert not cpu.fused and not cpu._delayed and "fp8_history" in cpu.state_dict()
    monkeypatch.setattr(modules._FusedNorm, "_decide", lambda self, gemms: (True, ""))
    fused = make("meta")
    assert fused.fused and fused._delayed
    assert set(fused.state_dict()) == set(cpu.state_dict())
    sd = {k: torch.full(v.shape, 3, dtype=v.dtype) for k, v in cpu.state_dict().items()}
    cpu.load_state_dict(sd)  # strict
    fused.load_state_dict(cpu.state_dict(), assign=True)
    assert torch.equal(fused.fp8_history, sd["fp8_history"])



def test_layer_ops_take_mixed_norm_dtypes(host_ops):
    """gamma fp32 with bf16 x and gamma of x's dtype are what libqfuse takes (numerics 3): the
    real op's arguments are valid for both; a bf16 gamma with fp32 x is refused alike by the
    fake and the real op."""
    w, g, b, bias, wq = (t.detach() if isinstance(t, torch.Tensor) else t
                         for t in params("mxfp8", "cpu"))
    layer = qops.new_layer()

    def fwd(xdt, gdt):
        return torch.ops.qfuse.layernorm_linear_fwd(
            torch.empty(64, K, dtype=xdt), w, g.to(gdt), b.to(gdt), wq, bias, layer, "mxfp8", 1,
            1e-5, False, True, None, None)
    for xdt, gdt in ((torch.bfloat16, torch.float32), (torch.float32, torch.float32),
                     (torch.float16, torch.float16)):
        expect_valid(fwd, xdt, gdt)
    with pytest.raises(ValueError, match="gamma is torch.bfloat16"):
        fwd(torch.float32, torch.bfloat16)


def training_refused(m, x, msg):
    """Module m refuses x's training forward (ValueError matching msg) before it runs; without
    gradients it runs it: its output."""
    with pytest.raises(ValueError, match=msg):
        m(x)
    with torch.no_grad():
        return m(x)


def test_backward_gemms_refused_before_the_forward(qt):
    """A fused LayerNormLinear whose backward GEMMs a recipe refuses (MXFP8's dgrad over
    out_features = 48, its wgrad over 17 tokens: K a multiple of 32) refuses the training forward
    before it runs; without gradients the forward runs; the backward op's fake refuses the same
    while tracing. An empty batch runs (the ops take at least one row: the unfused path)."""
    m = qt.LayerNormLinear(K, 48, recipe="mxfp8", device="meta")
    x = torch.empty(64, K, dtype=torch.bfloat16, device="meta", requires_grad=True)
    assert training_refused(m, x, "dgrad GEMM").shape == (64, 48)
    m = qt.LayerNormLinear(K, N, recipe="mxfp8", device="meta")
    with pytest.raises(ValueError, match="wgrad GEMM"):
        m(torch.empty(17, K, dtype=torch.bfloat16, device="meta", requires_grad=True))
    y = m(torch.empty(0, 3, K, dtype=torch.bfloat16, device="meta", requires_grad=True))
    assert y.shape == (0, 3, N)
    w, g, b, _, wq = params("mxfp8")
    with pytest.raises(ValueError, match="wgrad GEMM"):
        torch.ops.qfuse.layernorm_linear_bwd(
            torch.empty(17, N, dtype=torch.bfloat16, device="meta"),
            torch.empty(17, K, dtype=torch.bfloat16, device="meta"), w, g, b, wq, [],
            qops.new_layer(), "mxfp8", 1, 1e-5, False, True, None, None)


def test_norm_backward_size_refused_while_tracing(qt):
    """The norm backward holds K <= 24576 (its column sums in shared memory): at K = 24608 the
    fake shapes refuse it, so the training forward of a fused module and the backward op's fake
    refuse it while tracing, before anything runs; K = 24576 passes; without gradients the
    forward runs."""
    with pytest.raises(qops._lib.QfuseError, match="K = 24577 is more than the op's kernel"):
        shapes.outputs("mxfp8", "norm_backward", norm="layernorm", M=32, K=24577)
    assert len(shapes.outputs("mxfp8", "norm_backward", norm="layernorm", M=32,
                              K=24576)) == 3
    big = 24608  # a multiple of 32, as MXFP8's GEMMs need
    m = qt.LayerNormLinear(big, 64, recipe="mxfp8", device="meta")
    x = torch.empty(64, big, dtype=torch.bfloat16, device="meta", requires_grad=True)
    assert training_refused(m, x, "norm backward over x \\[64, 24608\\] is refused").shape == \
        (64, 64)
    w, g, b = m.weight.detach(), m.layer_norm_weight.detach(), m.layer_norm_bias.detach()
    with pytest.raises(ValueError, match="norm backward over x"):
        torch.ops.qfuse.layernorm_linear_bwd(
            torch.empty(64, 64, dtype=torch.bfloat16, device="meta"), x.detach(), w, g, b,
            qops.weight_buffers("mxfp8", w), [], qops.new_layer(), "mxfp8", 1, 1e-5, False,
            True, None, None)
    qt.LayerNormLinear(24576, 64, recipe="mxfp8", device="meta")(
        torch.empty(64, 24576, dtype=torch.bfloat16, device="meta", requires_grad=True))
    rms = qt.LayerNormLinear(big, 64, recipe="mxfp8", device="meta", normalization="RMSNorm")
    with pytest.raises(ValueError, match="norm rmsnorm"):  # the query names the module's norm
        rms(x)


def test_module_host_state_freed_with_the_module():
    """A module's layer ids are forgotten once it is collected, and ids are not reused."""
    import gc
    import qfuse.torch as qt
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = qt.LayerNormMLP(K, 64, recipe="mxfp8", device="cpu")
    ids = list(m._host.layers)
    assert all(i in qops._layers for i in ids)
    del m
    gc.collect()
    assert not any(i in qops._layers for i in ids)
    assert qops.new_layer() > max(ids)


@pytest.mark.parametrize("module", ["LayerNormLinear", "LayerNormMLP"])
def test_module_takes_every_input_dtype(qt, module):
    """A fused module takes bf16, fp16 and fp32 x whatever its params_dtype (the norm's
    parameters reach the ops in fp32 where their dtype is not x's: exact), forward and backward
    on meta tensors (the ops' fakes check the dtypes libqfuse takes)."""
    for pdt in (torch.bfloat16, torch.float16):
        m = (qt.LayerNormLinear(K, N, recipe="mxfp8", device="meta", params_dtype=pdt)
             if module == "LayerNormLinear" else
             qt.LayerNormMLP(K, 256, recipe="mxfp8", device="meta", params_dtype=pdt))
        for xdt in (torch.bfloat16, torch.float16, torch.float32):
            x = torch.empty(64, K, dtype=xdt, device="meta", requires_grad=True)
            y = m(x)
            y.sum().backward()
            assert y.dtype == torch.bfloat16 and x.grad.shape == x.shape
            assert m.layer_norm_weight.grad.dtype == pdt
