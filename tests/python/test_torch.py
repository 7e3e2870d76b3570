"""qfuse.torch.LayerNormLinear and the qfuse custom ops on a GPU: gradients against the
unquantized layer in fp64 (the bounds of test_gpu_ln_linear.c), eager equal to torch.compile
(fullgraph, dynamic batch: one graph, no break, no recompile over three batch sizes), CUDA-graph
capture under mode="reduce-overhead" without skips, torch.library.opcheck of every op, the
weight cache, and clear errors. Skipped, saying why, without torch or a GPU."""
import copy
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch): "
                                            "the qfuse.torch tests need it")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU: the qfuse.torch tests run on one", allow_module_level=True)

import qfuse.ops as qops  # noqa: E402
from qfuse.torch import LayerNormLinear, LayerNormMLP  # noqa: E402

RECIPES = ["fp8_current", "mxfp8", "mxfp8_2d", "nvfp4", "nvfp4_nort", "fp8_block"]
M, K, N = 256, 512, 384


def bound(recipe):
    """Rel err bound against the unquantized layer (test_gpu_ln_linear.c): two quantized
    operands per GEMM; NVFP4's E2M1 codes with stochastic rounding of dy give 15-20%."""
    return 0.40 if recipe.startswith("nvfp4") else 0.15


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def randomize(module):
    """The norm's parameters near their defaults and the biases nonzero, so that every gradient
    is exercised."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name == "layer_norm_weight":
                p.uniform_(0.7, 1.3)
            elif name == "layer_norm_bias":
                p.uniform_(-0.2, 0.2)
            elif name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
    return module


def make(recipe, norm="LayerNorm", seed=0, bias=True):
    torch.manual_seed(seed)
    return randomize(LayerNormLinear(K, N, recipe=recipe, normalization=norm, bias=bias))


def clone(layer):
    """A copy with host state of its own (weight caches, rng offset 0)."""
    c = copy.deepcopy(layer)
    c._layer = qops.new_layer()
    if hasattr(c, "_layer_w2"):
        c._layer_w2 = qops.new_layer()
    return c


def inputs(m, seed=1, n_out=N):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m // 2, 2, K, device="cuda", generator=g).to(torch.bfloat16)
    dy = (torch.randn(m // 2, 2, n_out, device="cuda", generator=g) * 0.05).to(torch.bfloat16)
    return x.requires_grad_(), dy


def grads(layer, x, dy):
    """y and the gradients of x and every parameter, after one backward."""
    for p in layer.parameters():
        p.grad = None
    x.grad = None
    y = layer(x)
    y.backward(dy)
    return [y.detach(), x.grad] + [p.grad for p in layer.parameters()]


def reference(layer, x, dy):
    """The same outputs from the unquantized layer in fp64."""
    ref = copy.deepcopy(layer)
    ref = ref.double()
    ref.fused = False
    xd = x.detach().double().requires_grad_()
    g = ref.layer_norm_weight + 1 if ref.zero_centered_gamma else ref.layer_norm_weight
    if ref.normalization == "LayerNorm":
        xn = torch.nn.functional.layer_norm(xd, (K,), g, ref.layer_norm_bias, ref.eps)
    else:
        xn = torch.nn.functional.rms_norm(xd, (K,), g, ref.eps)
    y = torch.nn.functional.linear(xn, ref.weight, ref.bias)
    y.backward(dy.double())
    return [y.detach(), xd.grad] + [p.grad for p in ref.parameters()]


@pytest.mark.parametrize("norm", ["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_against_fp64(recipe, norm):
    check_against_fp64(make(recipe, norm), reference, N, "bias", bound(recipe), (recipe, norm))


def check_against_fp64(module, reference_fn, n_out, out_bias, limit, label):
    """y and every gradient of `module` against reference_fn's fp64 ones: within `limit`, and
    the output bias's gradient (sum_M dy, exact up to its bf16 rounding) within 2^-8."""
    assert module.fused, module.fallback_reason
    x, dy = inputs(M, n_out=n_out)
    got, want = grads(module, x, dy), reference_fn(module, x, dy)
    names = ["y", "dx"] + [n for n, _ in module.named_parameters()]
    errs = {n: rel(g, w) for n, g, w in zip(names, got, want)}
    print(*label, {n: "%.3f" % e for n, e in errs.items()})
    assert got[0].dtype == torch.bfloat16 and got[0].shape == (M // 2, 2, n_out)
    for n, e in errs.items():
        assert e <= (2 ** -8 if n == out_bias else limit), (n, e)


def check_compile_equals_eager(base, n_out, group=None):
    """A compiled copy of module `base` (fullgraph, dynamic; amax_group `group`) against fresh
    eager copies at three batch sizes: y and every gradient bit for bit, one graph, no graph
    break."""
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    compiled_layer = clone(base)
    compiled_layer.amax_group = group
    compiled = torch.compile(compiled_layer, fullgraph=True, dynamic=True)
    for m in (M, 2 * M, 3 * M):
        eager_layer = clone(base)  # rng offset 0, as the compiled one's
        x, dy = inputs(m, seed=m, n_out=n_out)
        want = grads(eager_layer, x, dy)
        x2 = x.detach().clone().requires_grad_()
        for p in compiled_layer.parameters():
            p.grad = None
        y = compiled(x2)
        y.backward(dy)
        got = [y.detach(), x2.grad] + [p.grad for p in compiled_layer.parameters()]
        for g, w in zip(got, want):
            assert torch.equal(g, w)
        qops._layers[compiled_layer._layer].offset = 0  # the eager copies start at 0 too
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


@pytest.mark.parametrize("recipe", RECIPES)
def test_compile_equals_eager_dynamic_batch(recipe):
    check_compile_equals_eager(make(recipe), N)


def test_reduce_overhead_captures():
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    layer = make("mxfp8")
    eager = clone(layer)
    compiled = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
    x, dy = inputs(M)
    with torch.no_grad():
        want = eager(x)
        for _ in range(4):
            got = compiled(x)
    assert torch.equal(got, want)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    with torch.no_grad():  # an update between replays: the captured graph quantizes again
        layer.weight.mul_(0.5)
        eager.weight.mul_(0.5)
        assert torch.equal(compiled(x).clone(), eager(x))


def state(layer, recipe):
    """(scale row of w, scales, amax) for the ops: delayed scaling's state, scales of 1 under
    fp8_delayed (every tensor then quantizes with scale 1), else Nones."""
    if recipe != "fp8_delayed":
        return None, None, None
    return layer.fp8_scale[1:2], layer.fp8_scale, layer.fp8_amax


@pytest.mark.parametrize("recipe", RECIPES + ["fp8_delayed"])
def test_opcheck(recipe):
    layer = make(recipe)
    qops._layers[layer._layer].advance_rng = False
    x, dy = inputs(64)
    x = x.detach().requires_grad_()
    wq = [getattr(layer, n) for n in layer._wq_names]
    w_scale, scales, amax = state(layer, recipe)
    torch.ops.qfuse.quantize_weight_(layer.weight, wq, layer._layer, recipe, w_scale)
    fwd_args = (x, layer.weight, layer.layer_norm_weight, layer.layer_norm_bias, wq, layer.bias,
                layer._layer, recipe, 1, 1e-5, False, True, scales, amax)
    torch.library.opcheck(torch.ops.qfuse.layernorm_linear_fwd.default, fwd_args)
    out = torch.ops.qfuse.layernorm_linear_fwd(*fwd_args)
    bwd_args = (dy, x.detach(), layer.weight.detach(), layer.layer_norm_weight.detach(),
                layer.layer_norm_bias.detach(), wq, [t.detach() for t in out[1:]], layer._layer,
                recipe, 1, 1e-5, False, True, scales, amax)
    torch.library.opcheck(torch.ops.qfuse.layernorm_linear_bwd.default, bwd_args)
    torch.library.opcheck(torch.ops.qfuse.quantize_weight_.default,
                          (layer.weight.detach(), wq, layer._layer, recipe, w_scale))


def test_weight_cache():
    layer = make("nvfp4")
    x, _ = inputs(M)
    st = qops._layers[layer._layer]
    with torch.no_grad():
        y1 = layer(x)
        key = st.key
        before = [getattr(layer, n).clone() for n in layer._wq_names]
        y2 = layer(x)  # the same weight: its copies are reused
        assert st.key == key and torch.equal(y1, y2)
        layer.weight.mul_(0.5)  # an optimizer-style in-place update bumps the version
        y3 = layer(x)
        assert st.key != key
        assert any(not torch.equal(b, getattr(layer, n)) for b, n in
                   zip(before, layer._wq_names))
        assert torch.equal(y3, clone(layer)(x))


@pytest.mark.parametrize("module", ["LayerNormLinear", "LayerNormMLP"])
@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4", "fp8_delayed"])
def test_pipelined_micro_batches(recipe, module):
    """Two micro-batches forward before either backward (a pipeline schedule), through the weight
    cache (and delayed scaling's amaxes, which both forwards and backwards merge): the gradients
    and amaxes equal those of one forward and backward per micro-batch, bit for bit."""
    a = make(recipe) if module == "LayerNormLinear" else make_mlp(recipe, "swiglu")
    b = clone(a)
    n_out = N if module == "LayerNormLinear" else K
    batches = [inputs(M, seed=s, n_out=n_out) for s in (1, 2)]
    for x, dy in batches:
        a(x).backward(dy)
    xs = [x.detach().clone().requires_grad_() for x, _ in batches]
    ys = [b(x) for x in xs]
    for y, (_, dy) in zip(ys, batches):
        y.backward(dy)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p.grad, q.grad), name
    for (x, _), x2 in zip(batches, xs):
        assert torch.equal(x.grad, x2.grad)
    if recipe == "fp8_delayed":
        assert torch.equal(a.fp8_amax, b.fp8_amax) and bool((a.fp8_amax > 0).all())


@pytest.mark.parametrize("module", ["LayerNormLinear", "LayerNormMLP"])
@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4"])
def test_keep_weight_bf16(monkeypatch, recipe, module):
    """keep_weight_bf16=True changes no bit: two micro-batches through the weight cache, then an
    in-place weight update and a third, give the outputs and gradients of the same module
    without it (both under QFUSE_HOPPER_GEMM=staged, the way a kept copy takes at every size),
    and the kept copies are rewritten with the weight."""
    monkeypatch.setenv("QFUSE_HOPPER_GEMM", "staged")
    mods = []
    for keep in (False, True):
        torch.manual_seed(0)
        m = (LayerNormLinear(K, N, recipe=recipe, keep_weight_bf16=keep)
             if module == "LayerNormLinear" else
             LayerNormMLP(K, F, recipe=recipe, activation="swiglu", keep_weight_bf16=keep))
        mods.append(randomize(m))
    plain, kept = mods
    assert kept.keeps_weight_bf16 and not plain.keeps_weight_bf16
    names = kept._wq_names if module == "LayerNormLinear" else kept._w2_names
    n_out = N if module == "LayerNormLinear" else K
    for step, seed in enumerate((1, 2, 3)):
        if step == 2:  # an optimizer-style update: both caches quantize (and keep) again
            before = getattr(kept, names[-1]).clone()
            with torch.no_grad():
                for m in mods:
                    for p in m.parameters():
                        p.mul_(0.75)
        x, dy = inputs(M, seed=seed, n_out=n_out)
        got = [grads(m, x, dy) for m in mods]
        for a, b in zip(got[0], got[1]):
            assert torch.equal(a, b), (recipe, module, step)
    assert not torch.equal(before, getattr(kept, names[-1]))


def test_errors_and_fallback():
    layer = make("mxfp8")
    with pytest.raises(ValueError, match="last dim 100, expected in_features=512"):
        layer(torch.randn(4, 100, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="recipe 'no_such_recipe'.*not found"):
        LayerNormLinear(K, N, recipe="no_such_recipe")  # an unknown recipe is an error
    with pytest.warns(UserWarning, match="runs unfused in PyTorch.*CUDA devices"):
        on_cpu = LayerNormMLP(K, 256, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # decided once: no warning per call
        y = on_cpu(torch.randn(8, K, dtype=torch.bfloat16))
        assert y.shape == (8, K) and y.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="normalization"):
        LayerNormLinear(K, N, normalization="BatchNorm")
    nv = make("nvfp4")
    with pytest.raises(qops._lib.QfuseError, match="rejects the shape query|multiple"):
        nv(torch.randn(10, K, device="cuda", dtype=torch.bfloat16))


# ------------------------------------------------------------------ LayerNormMLP

F = 256


def make_mlp(recipe, act, norm="LayerNorm", seed=0):
    torch.manual_seed(seed)
    return randomize(LayerNormMLP(K, F, recipe=recipe, normalization=norm, activation=act))


def mlp_bound(recipe):
    """test_gpu_ln_mlp.c's bound: two quantized GEMMs in series, each with one layer's error
    (bound()), in quadrature sqrt(2) times one layer's."""
    return 0.60 if recipe.startswith("nvfp4") else 0.25


def reference_mlp(mlp, x, dy):
    ref = copy.deepcopy(mlp).double()
    xd = x.detach().double().requires_grad_()
    if ref.normalization == "LayerNorm":
        xn = torch.nn.functional.layer_norm(xd, (K,), ref.layer_norm_weight, ref.layer_norm_bias,
                                            ref.eps)
    else:
        xn = torch.nn.functional.rms_norm(xd, (K,), ref.layer_norm_weight, ref.eps)
    h = torch.nn.functional.linear(xn, ref.fc1_weight, ref.fc1_bias)
    y = torch.nn.functional.linear(ref._act(h), ref.fc2_weight, ref.fc2_bias)
    y.backward(dy.double())
    return [y.detach(), xd.grad] + [p.grad for p in ref.parameters()]


@pytest.mark.parametrize("act", ["gelu", "swiglu", "relu"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_mlp_against_fp64(recipe, act):
    check_against_fp64(make_mlp(recipe, act), reference_mlp, K, "fc2_bias", mlp_bound(recipe),
                       (recipe, act))


@pytest.mark.parametrize("recipe,act", [("mxfp8", "swiglu"), ("nvfp4", "gelu"),
                                        ("fp8_current", "relu")])
def test_mlp_compile_equals_eager(recipe, act):
    check_compile_equals_eager(make_mlp(recipe, act), K)


@pytest.mark.parametrize("recipe,act", [(r, a) for r in RECIPES + ["fp8_delayed"]
                                        for a in ("gelu", "swiglu", "relu")])
def test_mlp_opcheck(recipe, act):
    mlp = make_mlp(recipe, act)
    qops._layers[mlp._layer].advance_rng = False
    x, dy = inputs(64, n_out=K)
    x = x.detach().requires_grad_()
    w1q = [getattr(mlp, n) for n in mlp._w1_names]
    w2q = [getattr(mlp, n) for n in mlp._w2_names]
    delayed = recipe == "fp8_delayed"
    scales, amax = (mlp.fp8_scale, mlp.fp8_amax) if delayed else (None, None)
    t = qops.MLP_TENSORS
    for w, wq, layer, name in ((mlp.fc1_weight, w1q, mlp._layer, "w1"),
                               (mlp.fc2_weight, w2q, mlp._layer_w2, "w2")):
        i = t.index(name)
        torch.ops.qfuse.quantize_weight_(w, wq, layer, recipe, scales[i:i + 1] if delayed else None)
    a = qops.ACT_NAMES.index(act)
    args = (x, mlp.fc1_weight, mlp.fc2_weight, mlp.layer_norm_weight, mlp.layer_norm_bias, w1q,
            w2q, mlp.fc1_bias, mlp.fc2_bias, mlp._layer, recipe, 1, 1e-5, False, a, True,
            scales, amax)
    torch.library.opcheck(torch.ops.qfuse.layernorm_mlp_fwd.default, args)
    out = torch.ops.qfuse.layernorm_mlp_fwd(*args)
    n_x = len(qops._x_outs(recipe, 1, 64, K, True))
    det = [t.detach() for t in out]
    bwd = (dy, x.detach(), mlp.fc1_weight.detach(), mlp.fc2_weight.detach(),
           mlp.layer_norm_weight.detach(), mlp.layer_norm_bias.detach(), w1q, w2q,
           det[3:3 + n_x], det[3 + n_x:], det[1], det[2], mlp._layer, recipe, 1, 1e-5, False, a,
           True, True, scales, amax)
    torch.library.opcheck(torch.ops.qfuse.layernorm_mlp_bwd.default, bwd)


# ------------------------------------------------------------------ qfuse::quantize, qfuse::gemm

@pytest.mark.parametrize("recipe", RECIPES + ["fp8_delayed"])
def test_quantize_gemm_ops_equal_the_layer(recipe):
    """qfuse::gemm of qfuse::quantize's copies (x with the layer's LayerNorm, W) is the layer's
    fprop bit for bit (fp8_delayed: with the module's scales); opcheck passes for both ops."""
    layer = make(recipe)
    x, _ = inputs(M)
    x = x.detach()
    delayed = recipe == "fp8_delayed"
    sx, sw = (layer.fp8_scale[0:1], layer.fp8_scale[1:2]) if delayed else (None, None)
    with torch.no_grad():
        want = layer(x).reshape(M, N)
        xs = [0, 1, 1, M, K]  # role input, LayerNorm, rowwise
        ws = [1, 0, 1, N, K]  # role weight, rowwise
        qx = torch.ops.qfuse.quantize(x, layer.layer_norm_weight, layer.layer_norm_bias, sx,
                                      recipe, 0, 1, layer.eps, False, 1, 0, 0)
        qw = torch.ops.qfuse.quantize(layer.weight, None, None, sw, recipe, 1, 0, 0.0, False, 1,
                                      0, 0)
        y = torch.ops.qfuse.gemm(qx, qw, layer.bias, recipe, xs, ws, 0, 0, False)
    assert torch.equal(y, want)
    torch.library.opcheck(torch.ops.qfuse.quantize.default,
                          (x, layer.layer_norm_weight.detach(), layer.layer_norm_bias.detach(),
                           sx, recipe, 0, 1, layer.eps, False, 3, 0, 0))
    torch.library.opcheck(torch.ops.qfuse.gemm.default,
                          (qx, qw, layer.bias.detach(), recipe, xs, ws, 0, 0, False))


def test_scale_update_matches_numerics():
    """qfuse::scale_update_ against delayed scaling's rule (numerics 2.1, written out here as an
    independent reference): a tensor whose amax is 0 keeps its history and scale; otherwise the
    history rolls (newest first), scale = fp8_max / max(history), inf -> FLT_MAX; amax reset."""
    n, hist = 4, 1024
    g = torch.Generator().manual_seed(3)
    history = torch.rand(n, hist, generator=g) * 10
    history[2].zero_()  # its only amax 1e-38: 448 / 1e-38 overflows to inf, so FLT_MAX
    amax = torch.tensor([5.0, 0.0, 1e-38, 700.0])
    scale, fmt = torch.full((n,), 2.0), torch.tensor([3, 3, 4, 4], dtype=torch.uint8)
    want_h, want_s = history.clone(), scale.clone()
    for i in range(n):
        if amax[i] == 0:
            continue
        want_h[i] = torch.cat([amax[i:i + 1], history[i, :-1]])
        fp8_max = 448.0 if fmt[i] == 3 else 57344.0
        s = torch.tensor(fp8_max, dtype=torch.float32) / want_h[i].max()
        want_s[i] = s if torch.isfinite(s) else torch.finfo(torch.float32).max
    st = [t.cuda() for t in (amax, history, scale, torch.ones(n), fmt)]
    torch.ops.qfuse.scale_update_(*st, "fp8_delayed")
    a, h, s, si, _ = [t.cpu() for t in st]
    assert torch.equal(a, torch.zeros(n))
    assert torch.equal(h, want_h)
    assert torch.equal(s, want_s)
    assert torch.equal(si[0], 1 / want_s[0]) and si[1] == 1.0  # the skipped tensor: unchanged
    torch.library.opcheck(torch.ops.qfuse.scale_update_.default,
                          (*[t.cuda() for t in (amax, history, scale, torch.ones(n), fmt)],
                           "fp8_delayed"))


def test_return_layernorm_output():
    """return_layernorm_output: y as without it, bit for bit, and norm(x) as PyTorch computes it;
    the gradient of x takes both paths."""
    layer = make("mxfp8")
    with_ln = clone(layer)
    with_ln.return_layernorm_output = True
    x, dy = inputs(M)
    y = layer(x)
    y2, xn = with_ln(x)
    assert torch.equal(y, y2)
    assert torch.equal(xn, torch.nn.functional.layer_norm(x, (K,), layer.layer_norm_weight,
                                                          layer.layer_norm_bias, layer.eps))
    x.grad = None
    y2.backward(dy, retain_graph=True)
    g1 = x.grad.clone()
    x.grad = None
    (y2.float() * dy.float()).sum().add(xn.float().sum()).backward()
    assert not torch.equal(x.grad, g1)  # the norm output's gradient reached x too


# ------------------------------------------------------------------ delayed scaling

def test_delayed_scaling_module():
    """fp8_delayed in LayerNormLinear: a step max-merges the amaxes of xn, W and dy into
    fp8_amax; update_scales() rolls them into the history and sets scale = fp8_max / amax
    (E4M3 448 for x and W, E5M2 57344 for dy, numerics 2.1), amax back to 0; the next step,
    quantized with those scales, stays within the per-tensor FP8 bound of the fp64 layer; eager
    and compiled agree bit for bit."""
    import qfuse.torch as qt
    layer = make("fp8_delayed")
    assert layer.fused and layer._delayed
    x, dy = inputs(M)
    grads(layer, x, dy)
    xn = torch.nn.functional.layer_norm(x.detach().float(), (K,), layer.layer_norm_weight.float(),
                                        layer.layer_norm_bias.float(), layer.eps)
    want = torch.stack([xn.abs().max(), layer.weight.detach().float().abs().max(),
                        dy.float().abs().max()])
    # xn is computed in fp32 by both, in their own order
    assert torch.allclose(layer.fp8_amax, want, rtol=1e-5), (layer.fp8_amax, want)
    amax = layer.fp8_amax.clone()
    qt.update_scales(layer)
    assert torch.equal(layer.fp8_amax, torch.zeros(3, device="cuda"))
    assert torch.equal(layer.fp8_history[:, 0], amax)
    fp8_max = torch.tensor([448.0, 448.0, 57344.0], device="cuda")
    assert torch.equal(layer.fp8_scale, fp8_max / amax)
    compiled_layer = clone(layer)
    got, ref = grads(layer, x, dy), reference(layer, x, dy)
    for name, g_, w_ in zip(["y", "dx", "ln_w", "ln_b", "w", "b"], got, ref):
        assert rel(g_, w_) <= (2 ** -8 if name == "b" else bound("fp8_delayed")), name
    compiled = torch.compile(compiled_layer, fullgraph=True, dynamic=True)
    x2 = x.detach().clone().requires_grad_()
    y = compiled(x2)
    y.backward(dy)
    assert torch.equal(y, got[0]) and torch.equal(x2.grad, got[1])
    assert torch.equal(compiled_layer.fp8_amax, layer.fp8_amax)


def test_delayed_scaling_mlp():
    import qfuse.torch as qt
    mlp = make_mlp("fp8_delayed", "swiglu")
    assert mlp.fused and mlp._delayed
    x, dy = inputs(M, n_out=K)
    grads(mlp, x, dy)
    assert bool((mlp.fp8_amax > 0).all()), mlp.fp8_amax  # every tensor of the step ran
    qt.update_scales(mlp)
    check_against_fp64(mlp, reference_mlp, K, "fc2_bias", mlp_bound("fp8_delayed"),
                       ("fp8_delayed", "swiglu"))


@pytest.fixture
def one_rank_group(tmp_path):
    """A one-rank NCCL process group: a MAX all-reduce over it is the identity, through the
    call path several ranks take. Its rendezvous is a file (no TCP port to collide with another
    run on the machine)."""
    import torch.distributed as dist
    dist.init_process_group("nccl", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0,
                            world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_delayed_scaling_amax_reduced_over_a_group(one_rank_group):
    """update_scales(group): the amaxes are MAX-reduced over the process group first."""
    import qfuse.torch as qt
    layer = make("fp8_delayed")
    x, dy = inputs(M)
    grads(layer, x, dy)
    amax = layer.fp8_amax.clone()
    qt.update_scales(layer, group=one_rank_group)
    assert torch.equal(layer.fp8_history[:, 0], amax)


@pytest.mark.parametrize("module", ["LayerNormLinear", "LayerNormMLP"])
@pytest.mark.parametrize("recipe", ["fp8_current", "nvfp4"])
def test_amax_group_compiled(one_rank_group, recipe, module):
    """amax_group: the all-reduce runs inside the ops (between each quantization's amax pass and
    its cast pass), so torch.compile(fullgraph) sees no collective: compiled with the group
    equals eager without it bit for bit (one rank), one graph, no break."""
    base = make(recipe) if module == "LayerNormLinear" else make_mlp(recipe, "gelu")
    check_compile_equals_eager(base, N if module == "LayerNormLinear" else K,
                               group=one_rank_group)


@pytest.mark.parametrize("recipe,calls", [("fp8_current", 3), ("nvfp4", 6)])
def test_amax_group_reduces_before_the_scale(monkeypatch, one_rank_group, recipe, calls):
    """Each per-tensor amax (fp8_current: x, W, dy; NVFP4: both copies' of each) goes through
    one MAX all-reduce over the module's group before its scale is computed: a stand-in
    all-reduce that makes every amax 3x larger (another rank's larger values; a power of two
    would only shift the floating-point codes' exponents) changes y and
    every gradient but dbias, which stay within the recipe's bound of the fp64 layer. A second
    forward without grad reduces x's amax only (the weight cache keeps the weight)."""
    seen = []

    def all_reduce(t, op=None, group=None, async_op=False):
        seen.append((tuple(t.shape), t.dtype, op, group))
        t.mul_(3)

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    layer = make(recipe)
    plain = clone(layer)
    layer.amax_group = one_rank_group
    x, dy = inputs(M)
    got, want = grads(layer, x, dy), grads(plain, x, dy)
    assert len(seen) == calls, seen
    assert all(s == ((1,), torch.float32, torch.distributed.ReduceOp.MAX, one_rank_group)
               for s in seen), seen
    names = ["y", "x"] + [n for n, _ in layer.named_parameters()]
    for name, g, w in zip(names, got, want):
        assert torch.equal(g, w) == (name == "bias"), name  # dbias = sum of dy, unquantized
    ref = reference(layer, x, dy)
    for g, r in zip(got, ref):
        assert rel(g, r) < bound(recipe)
    with torch.no_grad():
        layer(x)
    assert len(seen) == calls + 1  # x's rowwise copy only
