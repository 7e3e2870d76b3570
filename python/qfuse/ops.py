"""libqfuse's ops as PyTorch custom ops (namespace `qfuse`), with fake implementations from
libqfuse's fake-shape formulas (qfuse.shapes: no shape formula is written here) and autograd.
The fakes of qfuse::quantize and qfuse::gemm also make their real op's libqfuse call, against a
device-less context with placeholder addresses (_Target), so that they refuse what libqfuse
refuses.

Ops:
  qfuse::quantize(x, gamma, beta, scale, recipe, role, norm, eps, zero_centered_gamma, outputs,
      seed, offset) -> [slots...]: qf_quantize (with a fused norm or none), the slots in the
      recipe's fake-shape order.
  qfuse::gemm(a, b, bias, recipe, a_spec, b_spec, a_copy, b_copy, out_fp32) -> y: qf_gemm_ex
      on one copy of each of two qfuse::quantize outputs (fprop, dgrad or wgrad).
  qfuse::scale_update_(amax, history, scale, scale_inv, fmt, recipe): delayed scaling's update
      of n tensors (qf_scale_update), in place.
  qfuse::quantize_weight_(weight, wq, layer, recipe, scale)   the weight cache: quantizes `weight`
      (weight role, both copies) into the buffers `wq` unless they already hold this weight's
      values (same storage, same torch version counter, same recipe); always while a CUDA graph
      is being captured, so that a replay never reads stale copies. Buffers made with
      weight_buffers(keep_bf16=True) end in both copies' bf16 values, written with them.
  qfuse::layernorm_linear_fwd(x, weight, gamma, beta, wq, bias, layer, recipe, norm, eps,
      zero_centered_gamma, for_backward, scales, amax) -> [y, *xq]: libqfuse's
      qf_layernorm_linear_fwd with the weight's copies as given (norm + quantize of x, the
      columnwise copy too when for_backward, and the fprop GEMM y = q(xn) q(W)^T + bias in
      bf16). Autograd: qfuse::layernorm_linear_bwd.
  qfuse::layernorm_linear_bwd(dy, x, weight, gamma, beta, wq, xq, layer, recipe, norm, eps,
      zero_centered_gamma, has_bias, scales, amax) -> (dx, dgamma, dbeta, dweight, dbias):
      qf_layernorm_linear_bwd (q(dy), dgrad, wgrad, dbias, the norm backward); dbeta and dbias
      are 0-element tensors when absent.
  qfuse::layernorm_mlp_fwd / _bwd: the same for LayerNorm/RMSNorm + fc1 + activation (gelu,
      swiglu, relu) + fc2 (qf_layernorm_mlp_fwd / _bwd); the forward returns [y, h, a, *xq, *aq].

Recipes: every shipped or .lua recipe. Delayed scaling (fp8_delayed) takes its scales as a
tensor (`scale`, `scales`: one row per tensor of the layer, LINEAR_TENSORS / MLP_TENSORS order)
and max-merges this step's amaxes into `amax` (the backward ops mutate it); the modules keep that
state (qfuse.torch). A layer's amax group (set_amax_group) MAX-reduces the per-tensor amaxes of
current scaling and NVFP4 inside the ops (qf_set_amax_reduce).
"""
from typing import List, Optional, Tuple

import ctypes
import itertools
import threading

from . import _lib, shapes

torch = _lib.import_torch("qfuse.ops")

# Quantized slots travel as bytes (uint8): the fake shapes give their dtypes to libqfuse, and
# torch has no arithmetic on float8 tensors (opcheck and other tools compare inputs with it).
TORCH_DTYPE = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
               "e4m3": torch.uint8, "e5m2": torch.uint8, "e8m0": torch.uint8, "e2m1": torch.uint8}
QF_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
NORM_NAMES = ("none", "layernorm", "rmsnorm")
# Delayed scaling's tensors of each module, in the order of its scale, amax and history rows.
LINEAR_TENSORS = ("x", "w", "dy")
MLP_TENSORS = ("x", "w1", "a", "w2", "dy", "dh")
ROWWISE, COLUMNWISE = _lib.OUT_ROWWISE, _lib.OUT_COLUMNWISE


# ------------------------------------------------------------------ layer state

class _LayerState:
    """Host state of one module: the weight cache's key, the stochastic-rounding stream of its
    gradients (numerics 2.4: a fresh offset each backward) and the torch.distributed group over
    which its ops MAX-reduce per-tensor amaxes (None: none)."""

    def __init__(self, seed, advance_rng):
        self.key = None
        self.seed = seed
        self.offset = 0
        self.advance_rng = advance_rng
        self.amax_group = None


_layers = {}
_layers_lock = threading.Lock()
_layer_ids = itertools.count(1)  # ids are never reused: a freed one stays unknown


def new_layer(seed=0, advance_rng=True, offset=0):
    """A layer id for the ops' host state (the weight cache, the rng offset, starting at
    `offset`). advance_rng=False keeps the offset fixed (reproducible gradients, e.g. for
    torch.library.opcheck)."""
    state = _LayerState(seed, advance_rng)
    state.offset = offset
    with _layers_lock:
        i = next(_layer_ids)
        _layers[i] = state
        return i


def free_layers(layers):
    """Forgets the host state of the layer ids in `layers` (the modules call it when they are
    collected); ids already unknown are skipped. An op given a freed id raises ValueError."""
    with _layers_lock:
        for i in layers:
            _layers.pop(i, None)


def layer_settings(layer):
    """(seed, advance_rng, offset) of `layer`: new_layer's arguments for a layer that goes on
    where it stands (a module loaded in another process)."""
    s = _layer_state(layer)
    return s.seed, s.advance_rng, s.offset


def copy_layer(layer):
    """A new layer id whose host state starts as `layer`'s (seed, rng offset, amax group) with
    no weight cached: for a copy of a module, whose weights are its own."""
    c = new_layer(*layer_settings(layer))
    set_amax_group(c, _layer_state(layer).amax_group)
    return c


def set_amax_group(layer, group):  # the modules check group (qfuse.torch.check_group)
    """The ops of `layer` then MAX-reduce every amax a quantization computes for its own scale
    (fp8_current, NVFP4's global amaxes; numerics 2.2) over torch.distributed `group` before
    the scale is computed: an all-reduce inside the op, between its amax pass and its cast pass
    (qf_set_amax_reduce), so every rank of the group quantizes with the same scale. None: no
    reduction. Every rank must run the same ops in the same order."""
    _layer_state(layer).amax_group = group


class _DeviceFloat:
    """One fp32 at a device address, for torch.as_tensor (__cuda_array_interface__)."""

    def __init__(self, address):
        self.__cuda_array_interface__ = {"shape": (1,), "typestr": "<f4",
                                         "data": (address, False), "version": 3}


def _run(layer, device, fn, *args):
    """_lib.check(fn(*args)): one libqfuse call of a layer's op. With the layer's amax group,
    the call's per-tensor amaxes are all-reduced (MAX) over it (qf_set_amax_reduce, this thread
    only; the thread's earlier reduction is put back after), and an exception the all-reduce
    raised is re-raised."""
    group = _layer_state(layer).amax_group
    if group is None:
        _lib.check(fn(*args))
        return
    failed = []

    def reduce(user, amax, stream):
        try:
            t = torch.as_tensor(_DeviceFloat(amax), device=device)
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX, group=group)
            return 0
        except BaseException as e:  # noqa: B036 (a C callback must not raise)
            failed.append(e)
            return _lib.STATUS.index("QF_ERR_INVALID_ARG")

    hook = _lib.AMAX_REDUCE_FN(reduce)
    old_user = ctypes.c_void_p()
    old_hook = _lib.lib.qf_get_amax_reduce(ctypes.byref(old_user))  # a C caller's, kept
    _lib.lib.qf_set_amax_reduce(hook, None)
    try:
        _lib.check(fn(*args))
    except _lib.QfuseError as e:
        if failed:
            raise failed[0] from e
        raise
    finally:
        _lib.lib.qf_set_amax_reduce(old_hook, old_user)


# ------------------------------------------------------------------ helpers

def _contiguous(t):
    """t, refused (ValueError) when it is not contiguous: libqfuse reads and writes dense
    row-major buffers from their data pointers."""
    if not t.is_contiguous():
        raise ValueError("qfuse: a %s %s tensor argument is not contiguous (strides %s); pass "
                         "t.contiguous()" % (tuple(t.shape), t.dtype, t.stride()))
    return t


def _data_ptr(t):
    """The device address of torch tensor t (contiguous: ValueError otherwise)."""
    return _contiguous(t).data_ptr()


def _c(t, dtype=None, dims=None, address=_data_ptr):
    """qf_tensor of torch tensor t (contiguous), its dtype (or the qfuse name given), its dims
    (a symbolic one at its example value), at address(t)."""
    return _lib.c_tensor(address(t), dtype or _dtype_name(t),
                         [shapes._hint(d) for d in (t.shape if dims is None else dims)])


def _dtype_name(t):
    try:
        return QF_DTYPE[t.dtype]
    except KeyError:
        raise TypeError("qfuse: %s tensors are not taken here (bf16, fp16 or fp32)" % t.dtype)


def _ctx(device):
    """The libqfuse context of a torch CUDA device ("cuda" means the current one)."""
    if device.type != "cuda":
        raise ValueError("qfuse: the ops run on CUDA tensors; these are on %s" % device)
    idx = device.index if device.index is not None else torch.cuda.current_device()
    return _lib.context(idx)


NO_DEVICE = _lib.STATUS.index("QF_ERR_NO_DEVICE")
FAKE_ARCH = 90  # the architecture the fakes check against where no GPU says (meta tensors)
_PLACEHOLDER_BASE = 1 << 40  # the first placeholder address of a fake call (_Target)


class _Target:
    """Where one libqfuse call of an op goes, and the device addresses it hands over. The real op
    (fake=False): the device's context and current stream, the tensors' own addresses. Its fake
    implementation (fake=True: meta or fake tensors, which have no memory): the device-less
    context of the device's architecture (a CUDA device's own where torch sees a GPU, sm_90
    otherwise; _lib.checking_context), no stream, and placeholder addresses: each tensor a range
    of its own, non-null and apart from every other one, on a 256-byte boundary plus its storage
    offset (the alignment its own allocation would give it), sized from its bytes.
    libqfuse checks every argument of the call as on the device, never reads through an address
    on a device-less context, and answers QF_ERR_NO_DEVICE ("arguments are valid") where the real
    op would launch: check() takes that answer as valid in the fake and raises any other failure
    as the real op raises it."""

    def __init__(self, device, fake):
        self.fake = fake
        if fake:
            gpu = device.type == "cuda" and torch.cuda.is_available()
            arch = _lib.lib.qf_ctx_arch(_ctx(device)) if gpu else FAKE_ARCH
            self.ctx, self.stream = _lib.checking_context(arch), None
            self._next, self._placed = _PLACEHOLDER_BASE, {}
        else:
            self.ctx, self.stream = _ctx(device), _stream(device)

    def address(self, t):
        """The device address of tensor t (contiguous: ValueError otherwise) in this call; the
        same tensor object has the same one."""
        _contiguous(t)
        if not self.fake:
            return t.data_ptr()
        placed = self._placed.get(id(t))
        if placed is None:
            size = t.element_size()
            offset = shapes._hint(t.storage_offset(), "a storage offset") * size
            nbytes = offset + max(shapes._hint(t.numel(), "a size"), 1) * size
            base = self._next
            self._next = (base + nbytes + 2 * 256 - 1) // 256 * 256  # a gap before the next
            placed = self._placed[id(t)] = (t, base + offset)  # t kept: its id stays its own
        return placed[1]

    def pointer(self, t):
        """address(t) as a void pointer argument; None for None."""
        return None if t is None else ctypes.c_void_p(self.address(t))

    def layout(self, recipe):
        """The scale layout the GEMM of the call's architecture reads for the recipe."""
        return _arch_layout(recipe, _lib.lib.qf_ctx_arch(self.ctx))

    def check(self, status):
        """_lib.check(status) of the call; QF_ERR_NO_DEVICE passes in a fake."""
        if not (self.fake and status == NO_DEVICE):
            _lib.check(status)


def _ptr(t, index=0):
    """The device address of element `index` of fp32 tensor t (a delayed-scaling scale), or
    None."""
    return None if t is None else ctypes.c_void_p(t.data_ptr() + 4 * index)


def _merge_amax(amax, index, outs, tensors):
    """amax[index] = max(amax[index], the "amax" slot among `tensors` (fake-shape `outs`)): the
    delayed-scaling amax of one tensor of a step. No-op when amax is None."""
    at = _amax_slot(outs)
    if amax is not None and at is not None:
        merge_amax(amax, index, tensors[at])


def _amax_slot(outs):
    """The position of the "amax" output among fake-shape `outs`, or None."""
    return next((i for i, o in enumerate(outs) if o.name == "amax"), None)


def merge_amax(amax, index, t):
    """amax[index] = max(amax[index], t) for a one-element fp32 t: a delayed-scaling amax of one
    tensor of a step merged into the state (plain torch ops, traceable by torch.compile; not
    recorded by autograd: amaxes are state, not differentiable)."""
    with torch.no_grad():
        amax[index:index + 1].copy_(torch.maximum(amax[index:index + 1], t))


def _save(ctx, **parts):
    """Saves tensors, lists of tensors and Nones for the backward; _saved(ctx) returns them by
    name."""
    flat, layout = [], []
    for name, v in parts.items():
        if v is None:
            layout.append((name, None))
        elif isinstance(v, (list, tuple)):
            layout.append((name, len(v)))
            flat += list(v)
        else:
            layout.append((name, -1))
            flat.append(v)
    ctx.layout = layout
    ctx.save_for_backward(*flat)


def _saved(ctx):
    t, out, i = list(ctx.saved_tensors), {}, 0
    for name, n in ctx.layout:
        if n is None:
            out[name] = None
        elif n == -1:
            out[name], i = t[i], i + 1
        else:
            out[name], i = list(t[i:i + n]), i + n
    return out


def _layer_state(layer):
    try:
        return _layers[layer]
    except KeyError:
        raise ValueError("qfuse: layer %r is not a layer id of this process (qfuse.ops.new_layer)"
                         % (layer,)) from None


def _check_layer(op, x, gamma, beta, norm, weights, biases, buffers, recipe):
    """The argument checks both implementations of an op make (so that a bad call fails at
    trace time too): x [..., K] bf16/fp16/fp32; norm 1 (LayerNorm) or 2 (RMSNorm); gamma and
    beta [K] on x's device; each weight 2-D [N_i, K_i] with K_0 = K; its bias [N_i] or None;
    its cache buffers the recipe's weight outputs. Raises ValueError or TypeError naming the
    argument."""
    def fail(msg, *a):
        raise ValueError("qfuse::%s: %s" % (op, msg % a))
    if x.dim() < 1 or x.dtype not in QF_DTYPE:
        raise TypeError("qfuse::%s: x must be [..., K] bf16, fp16 or fp32, not %s %s"
                        % (op, tuple(x.shape), x.dtype))
    if norm not in (1, 2):
        fail("norm is %r: 1 (LayerNorm) or 2 (RMSNorm)", norm)
    k = x.shape[-1]
    tensors = [("gamma", gamma), ("beta", beta)] + [("weight %d" % i, w)
                                                    for i, w in enumerate(weights)]
    tensors += [("bias %d" % i, b) for i, b in enumerate(biases)]
    tensors += [("buffer", t) for ts in buffers for t in ts]
    for name, t in tensors:
        if t is not None and t.device != x.device:
            fail("%s is on %s, x on %s", name, t.device, x.device)
    for name, t in (("gamma", gamma), ("beta", beta)):
        if t is not None and (t.dim() != 1 or t.shape[0] != k):
            fail("%s is %s; expected [K] = [%s] (x's last dim)", name, tuple(t.shape), k)
    for i, (w, b, wq) in enumerate(zip(weights, biases, buffers)):
        if w.dim() != 2:
            fail("weight %d is %s; expected 2-D [N, K]", i, tuple(w.shape))
        if b is not None and (b.dim() != 1 or b.shape[0] != w.shape[0]):
            fail("bias %d is %s; expected [%s]", i, tuple(b.shape), w.shape[0])
        outs = _weight_outs(recipe, w.shape[0], w.shape[1])
        keeps = recipe_family(recipe) in KEEPS_BF16
        kept = wq[len(outs):]
        if (len(wq) not in ((len(outs), len(outs) + 2) if keeps else (len(outs),)) or
                any(tuple(t.shape) != tuple(o.dims) for t, o in zip(wq, outs)) or
                (kept and ([tuple(t.shape) for t in kept] != _kept_dims(recipe, *w.shape) or
                           any(t.dtype != torch.bfloat16 for t in kept)))):
            also = (", and to keep its bf16 values also %s in bf16 (weight_buffers)"
                    % (_kept_dims(recipe, *w.shape),) if keeps else "")
            fail("weight %d's cache buffers are %s; recipe %r keeps %s%s", i,
                 [tuple(t.shape) for t in wq], recipe, [o.dims for o in outs], also)
    if weights and weights[0].shape[1] != k:
        fail("weight 0 is %s but x's last dim is %s", tuple(weights[0].shape), k)


def _arg_error(message):
    """The exception libqfuse's own refusal of an argument becomes (QF_ERR_INVALID_ARG): a
    QfuseArgumentError, i.e. a QfuseError and a ValueError."""
    return _lib.QfuseArgumentError(_lib.STATUS.index("QF_ERR_INVALID_ARG"), message)


def _check_layer_id(layer):
    """A layer id of this process (ValueError otherwise); a symbolic one (torch.compile traces
    the modules' ids as SymInts, so that layers share one graph) is left to the real op."""
    if not isinstance(layer, torch.SymInt):
        _layer_state(layer)


FLT_MAX = 3.4028234663852886e38  # eps travels as fp32


def eps_ok(eps):
    """Whether eps is a number >= 0 that fp32 holds (NaN compares false, and an int compares
    exactly: 10**400 is not converted)."""
    return not isinstance(eps, bool) and isinstance(eps, (int, float)) and 0 <= eps <= FLT_MAX


def _check_eps(op, eps):
    if not eps_ok(eps):
        raise ValueError("qfuse::%s: eps is %r; expected a finite number >= 0 that fp32 holds"
                         % (op, eps))


def _check_fp32_vector(op, name, t, n, what, device, device_name):
    """t, a per-tensor state argument (`what`: its elements), is a contiguous 1-D fp32 tensor of
    at least n elements on device (libqfuse reads elements 0..n-1 there)."""
    if (t.dtype != torch.float32 or t.dim() != 1 or t.numel() < n or not t.is_contiguous() or
            t.device != device):
        raise _arg_error("qfuse::%s: %s is %s %s on %s%s; expected a contiguous fp32 [%d] (%s) "
                         "on %s" % (op, name, tuple(t.shape), t.dtype, t.device,
                                    "" if t.is_contiguous() else " (not contiguous)", n, what,
                                    device_name))


def _check_delayed_scale(op, recipe, scale, name, n, what, device, device_name):
    """Delayed scaling's scale argument `name`, n scales (`what`): given where the recipe scales
    so, in _check_fp32_vector's form; None where it computes its scales (libqfuse would ignore
    one there)."""
    family = recipe_family(recipe)
    if scale is None and family == "fp8_delayed":
        raise _arg_error("qfuse::%s: recipe %r scales by delayed scaling: %s (fp32 [%d], %s) is "
                         "needed" % (op, recipe, name, n, what))
    if scale is not None and family != "fp8_delayed":
        raise _arg_error("qfuse::%s: %s is given, but recipe %r (%s) computes its scales in the "
                         "quantizer and reads none; only delayed scaling (fp8_delayed) takes "
                         "one: pass None" % (op, name, recipe, family))
    if scale is not None:
        _check_fp32_vector(op, name, scale, n, what, device, device_name)


def _check_call(op, x, gamma, beta, biases, eps, layer, recipe, scales, amax, n_state):
    """The layer ops' checks beyond _check_layer, in the real op and its fake alike (what
    libqfuse would refuse, or could not see): a layer id of this process; eps finite, >= 0 and
    an fp32 value; gamma of x's dtype or fp32, beta of gamma's, both contiguous; each bias
    contiguous bf16 (the modules cast theirs); delayed scaling's scales given; scales and amax,
    when given, contiguous fp32 [>= n_state] on x's device (one element per tensor of the step,
    LINEAR_TENSORS or MLP_TENSORS, read at its index). Raises what libqfuse's refusal raises,
    QfuseArgumentError (a ValueError)."""
    def fail(msg, *a):
        raise _arg_error("qfuse::%s: %s" % (op, msg % a))
    _check_layer_id(layer)
    _check_eps(op, eps)
    if gamma.dtype not in (x.dtype, torch.float32):
        fail("gamma is %s; expected x's dtype (%s) or fp32", gamma.dtype, x.dtype)
    if beta is not None and beta.dtype != gamma.dtype:
        fail("beta is %s; expected gamma's dtype (%s)", beta.dtype, gamma.dtype)
    named = [("gamma", gamma), ("beta", beta)] + [("bias %d" % i, b) for i, b in enumerate(biases)]
    for name, t in named:
        if t is not None and not t.is_contiguous():
            fail("%s is not contiguous (strides %s); pass .contiguous()", name, t.stride())
    for i, b in enumerate(biases):
        if b is not None and b.dtype != torch.bfloat16:
            fail("bias %d is %s; expected bf16 (qfuse.torch's modules cast theirs)", i, b.dtype)
    _check_delayed_scale(op, recipe, scales, "scales", n_state,
                         "one scale per tensor of the step", x.device, "x's device")
    if amax is not None:
        _check_fp32_vector(op, "amax", amax, n_state, "one amax per tensor of the step",
                           x.device, "x's device")


def check_backward(op, recipe, norm, m, weights):
    """The backward over m tokens, refused by its fake shapes as libqfuse would refuse it: the
    norm's (norm 1 LayerNorm, 2 RMSNorm), over x [m, K] with K the first weight's (K <= 24576,
    numerics 4), and for each weight [N, K] the dgrad GEMM (dX [m, K] = dY [m, N] W, whose K is
    N) and the wgrad (dW [N, K] = dY^T X, whose K is m: a multiple of 32 for MXFP8 and NVFP4, of
    16 for the FP8 recipes).
    Raises QfuseArgumentError (a ValueError) naming the stage, as libqfuse's refusal would. The
    modules ask it before a forward whose backward would fail (after delayed scaling's amaxes
    were merged)."""
    try:
        shapes.outputs(recipe, "norm_backward", norm=NORM_NAMES[norm], M=m, K=weights[0][1])
    except _lib.QfuseError as e:
        raise _arg_error("qfuse::%s: the norm backward over x [%s, %s] is refused: %s"
                         % (op, m, weights[0][1], e.message)) from None
    for i, (n, k) in enumerate(weights):
        for what, mm, nn, kk in (("dgrad", m, k, n), ("wgrad", n, k, m)):
            try:
                shapes.outputs(recipe, "gemm", M=mm, N=nn, K=kk)
            except _lib.QfuseError as e:
                raise _arg_error("qfuse::%s: weight %d's %s GEMM (M = %s, N = %s, K = %s) is "
                                 "refused: %s" % (op, i, what, mm, nn, kk, e.message)) from None



def _check_linear_fwd(x, weight, gamma, beta, wq, bias, layer, recipe, norm, eps, scales, amax):
    """qfuse::layernorm_linear_fwd's checks, in the real op and its fake alike."""
    op = "layernorm_linear_fwd"
    _check_layer(op, x, gamma, beta, norm, [weight], [bias], [wq], recipe)
    _check_call(op, x, gamma, beta, [bias], eps, layer, recipe, scales, amax, len(LINEAR_TENSORS))


def _check_linear_bwd(dy, x, weight, gamma, beta, wq, layer, recipe, norm, eps, scales, amax):
    """qfuse::layernorm_linear_bwd's checks, in the real op and its fake alike."""
    op = "layernorm_linear_bwd"
    _check_layer(op, x, gamma, beta, norm, [weight], [None], [wq], recipe)
    _check_dy(op, dy, x, weight.shape[0])
    _check_call(op, x, gamma, beta, [], eps, layer, recipe, scales, amax, len(LINEAR_TENSORS))
    check_backward(op, recipe, norm, x.numel() // x.shape[-1], [weight.shape])


def _arch_layout(recipe, arch):
    """The scale layout the GEMM of compute capability `arch` reads for the recipe."""
    lay = ctypes.c_int()
    _lib.check(_lib.lib.qf_gemm_scale_layout(shapes._recipe(recipe), arch, ctypes.byref(lay)))
    return lay.value


def _layout(recipe, device):
    """The scale layout this GPU's GEMM reads for the recipe (compact on Hopper)."""
    return _arch_layout(recipe, _lib.lib.qf_ctx_arch(_ctx(device)))


def _quantized(outs, tensors, layout, address=_data_ptr):
    """qf_quantized of the fake-shape outputs `outs` (concrete dims) held in `tensors` (same
    order), each at address(t)."""
    q = _lib.Quantized()
    q.layout = layout
    for o, t in zip(outs, tensors):
        q.t[_lib.SLOTS.index(o.name)] = _lib.c_tensor(address(t), o.dtype, o.dims)
    return q


def _alloc(outs, device):
    """New tensors for fake-shape outputs (amax slots zeroed: per-tensor FP8 max-merges them)."""
    res = []
    for o in outs:
        make = torch.zeros if o.name.startswith("amax") else torch.empty
        res.append(make(o.dims, dtype=TORCH_DTYPE[o.dtype], device=device))
    return res


def _stream(device):
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _norm_desc(norm, gamma, beta, eps, zero_centered_gamma, address=_data_ptr):
    d = _lib.NormDesc()
    d.norm = norm
    d.zero_centered_gamma = int(zero_centered_gamma)
    d.eps = eps
    d.gamma = _c(gamma, address=address)
    if beta is not None:
        d.beta = _c(beta, address=address)
    return d


def _weight_outs(recipe, n_out, k):
    return shapes.outputs(recipe, "quantize", role="weight", outputs=ROWWISE | COLUMNWISE,
                          M=n_out, K=k)


def _kept_dims(recipe, n_out, k):
    """The dims of the bf16 values of a weight [n_out, k]'s two copies, as a layer keeps them
    (qf_ln_linear.wq_bf16): libqfuse's qf_dequantized_dims of its fake-shape copies."""
    q = _lib.Quantized()
    for o in _weight_outs(recipe, n_out, k):
        q.t[_lib.SLOTS.index(o.name)] = _lib.c_tensor(None, o.dtype, o.dims)
    res = []
    for copy in (_lib.COPY_ROWWISE, _lib.COPY_COLUMNWISE):
        d = (ctypes.c_int64 * 2)()
        _lib.check(_lib.lib.qf_dequantized_dims(ctypes.byref(q), copy, ctypes.byref(d)))
        res.append((d[0], d[1]))
    return res


def _set_kept(field, recipe, weight, wq):
    """The kept bf16 copies at the end of a weight's cache buffers wq (if any) into `field`, a
    qf_tensor[2] of the op's struct (wq_bf16, w1q_bf16, w2q_bf16)."""
    kept = wq[len(_weight_outs(recipe, *weight.shape)):]
    for c, t in enumerate(kept):
        field[c] = _c(t)


def _x_outs(recipe, norm, m, k, for_backward):
    return shapes.outputs(recipe, "norm_quantize", role="input", norm=NORM_NAMES[norm],
                          outputs=ROWWISE | (COLUMNWISE if for_backward else 0), M=m, K=k)


def _norm_grad_outs(recipe, norm, x):
    """Fake-shape outputs of the norm backward of x (dx, dgamma, dbeta), by name."""
    k = x.shape[-1]
    return {o.name: o for o in shapes.outputs(recipe, "norm_backward", norm=NORM_NAMES[norm],
                                              M=x.numel() // k, K=k, dtype=QF_DTYPE[x.dtype])}


def _norm_grads(recipe, norm, x):
    """New dx, dgamma, dbeta (0 elements for RMSNorm) for the norm backward of contiguous x, and
    their qf_norm_grads."""
    nb, k, dev = _norm_grad_outs(recipe, norm, x), x.shape[-1], x.device
    dx = torch.empty_like(x)
    dgamma = torch.empty(nb["dgamma"].dims, dtype=torch.float32, device=dev)
    dbeta = torch.empty(nb["dbeta"].dims if "dbeta" in nb else (0,), dtype=torch.float32,
                        device=dev)
    ng = _lib.NormGrads()
    ng.dx, ng.dgamma = _c(dx, dims=(x.numel() // k, k)), _c(dgamma)
    if "dbeta" in nb:
        ng.dbeta = _c(dbeta)
    return ng, dx, dgamma, dbeta


def _rng(st):
    """The stochastic-rounding stream of this backward (seed, offset), advancing the layer's."""
    rng = _lib.Rng(st.seed, st.offset)
    if st.advance_rng:
        st.offset += 1
    return rng


def recipe_info(recipe):
    """(family, {role: format}, amax_history_len) of a recipe (a name or a .lua path):
    ("fp8_delayed", {"input": "e4m3", ...}, 1024), ("mxfp8", ..., 0), ..."""
    info = _lib.RecipeInfo()
    _lib.check(_lib.lib.qf_recipe_query(shapes._recipe(recipe), ctypes.byref(info)))
    fmts = {role: _lib.DTYPE_NAMES[info.fmt[i]] for role, i in _lib.ROLES.items()}
    return _lib.lib.qf_family_name(info.family).decode(), fmts, info.amax_history_len


def recipe_family(recipe):
    """The family of a recipe (a name or a .lua path): "mxfp8", "fp8_delayed", ..."""
    return recipe_info(recipe)[0]


KEEPS_BF16 = ("mxfp8", "nvfp4")  # the families whose Hopper GEMMs multiply bf16 values


def keeps_bf16(recipe, device):
    """Whether a weight's bf16 values can be kept under `recipe` on `device`: an MXFP8 or NVFP4
    recipe whose GEMM there reads compact scales (sm_89..99, which multiply bf16 values); a
    device other than CUDA is not asked (meta and CPU tensors size buffers only)."""
    return recipe_family(recipe) in KEEPS_BF16 and (
        torch.device(device).type != "cuda" or _layout(recipe, device) == _lib.LAYOUT_COMPACT)


def _check_kept_buffers(op, weight, wq, n):
    """The kept bf16 copies wq[n:] (shapes already checked): contiguous, 16-byte aligned (as
    libqfuse's qf_dequantize takes them), apart from each other, the weight and the other cache
    buffers, so that writing them overwrites nothing. Raises ValueError naming the buffer."""
    def span(t):
        return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    for c, t in enumerate(wq[n:]):
        name = "kept %s copy" % ("rowwise", "columnwise")[c]
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError("qfuse::%s: the %s must be contiguous and 16-byte aligned "
                             "(weight_buffers makes it so)" % (op, name))
        lo, hi = span(t)
        for other_name, o in [("weight", weight)] + [("cache buffer %d" % j, o)
                                                     for j, o in enumerate(wq) if j != n + c]:
            olo, ohi = span(o)
            if o.numel() and lo < ohi and olo < hi:
                raise ValueError("qfuse::%s: the %s overlaps the %s; give it memory of its own "
                                 "(weight_buffers makes it so)" % (op, name, other_name))


def weight_buffers(recipe, weight, keep_bf16=False):
    """New buffers for the weight cache of `weight` [N, K] (both copies, the recipe's fake
    shapes), for qfuse::quantize_weight_. keep_bf16 adds the bf16 values of both copies
    (_kept_dims; 2 bytes per element and copy), which quantize_weight_ writes with the copies
    and the layer ops' GEMMs then read instead of dequantizing the weight at every call: MXFP8
    and NVFP4 on GPUs whose GEMM reads compact scales (sm_89..99); ValueError where keeps_bf16
    says no (other recipes; other CUDA GPUs; CPU and meta weights are sized, not asked)."""
    if not isinstance(keep_bf16, bool) and keep_bf16 not in (0, 1):
        raise TypeError("qfuse: weight_buffers: keep_bf16 must be a bool, not %r" % (keep_bf16,))
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.dtype not in QF_DTYPE:
        raise ValueError("qfuse: weight_buffers: weight must be a 2-D [N, K] bf16, fp16 or fp32 "
                         "tensor, not %s" % (("%s %s" % (tuple(weight.shape), weight.dtype))
                                             if isinstance(weight, torch.Tensor)
                                             else type(weight).__name__))
    n_out, k = weight.shape[0], weight.shape[1]
    bufs = _alloc(_weight_outs(recipe, n_out, k), weight.device)
    if keep_bf16:
        if not keeps_bf16(recipe, weight.device):
            raise ValueError("qfuse: weight_buffers(keep_bf16=True): recipe %r (%s) on %s has "
                             "no bf16 GEMM operands to keep: MXFP8 and NVFP4 on sm_89..99 only"
                             % (recipe, recipe_family(recipe), weight.device))
        bufs += [torch.empty(d, dtype=torch.bfloat16, device=weight.device)
                 for d in _kept_dims(recipe, n_out, k)]
    return bufs


# ------------------------------------------------------------------ qfuse::quantize_weight_

@torch.library.custom_op("qfuse::quantize_weight_", mutates_args=("wq",))
def quantize_weight_(weight: torch.Tensor, wq: List[torch.Tensor], layer: int, recipe: str,
                     scale: Optional[torch.Tensor] = None) -> None:
    _check_weight_cache(weight, wq, recipe, scale)
    st = _layer_state(layer)
    ctx = _ctx(weight.device)
    key = (weight.data_ptr(), weight._version, recipe, tuple(t.data_ptr() for t in wq),
           None if scale is None else (scale.data_ptr(), scale._version))
    capturing = torch.cuda.is_current_stream_capturing()
    if key == st.key and not capturing:
        return
    w = weight.contiguous()
    outs = _weight_outs(recipe, w.shape[0], w.shape[1])
    if len(wq) > len(outs):  # the kept bf16 copies: checked before anything is written
        _check_kept_buffers("quantize_weight_", w, wq, len(outs))
        if not keeps_bf16(recipe, w.device):
            raise ValueError("qfuse::quantize_weight_: recipe %r's GEMM on %s reads the quantized "
                             "copies: it keeps no bf16 values (MXFP8 and NVFP4 on sm_89..99); "
                             "make the buffers without keep_bf16" % (recipe, w.device))
    for o, t in zip(outs, wq):
        if o.name.startswith("amax"):
            t.zero_()
    q = _quantized(outs, wq, _layout(recipe, w.device))
    xt = _c(w)
    _run(layer, w.device, _lib.lib.qf_quantize, ctx, shapes._recipe(recipe), _lib.ROLES["weight"],
         ctypes.byref(xt), None, _ptr(scale), None, ctypes.byref(q), _stream(w.device))
    for copy, t in enumerate(wq[len(outs):]):  # the kept bf16 values (weight_buffers)
        op, kt = _lib.Operand(ctypes.pointer(q), copy), _c(t)
        _run(layer, w.device, _lib.lib.qf_dequantize, ctx, shapes._recipe(recipe),
             _lib.ROLES["weight"], ctypes.byref(op), ctypes.byref(kt), _stream(w.device))
    st.key = None if capturing else key


@quantize_weight_.register_fake
def _(weight, wq, layer, recipe, scale=None):
    _check_weight_cache(weight, wq, recipe, scale)
    _check_layer_id(layer)
    return None


def _check_weight_cache(weight, wq, recipe, scale=None):
    """quantize_weight_'s arguments: a 2-D weight and its cache buffers (_check_layer's rules:
    contiguous, of the dtypes the weight outputs have, uint8 for the quantized slots); scale,
    needed under delayed scaling, a contiguous fp32 [>= 1] on the weight's device."""
    op = "qfuse::quantize_weight_"
    if weight.dim() != 2 or weight.dtype not in QF_DTYPE:
        raise ValueError("%s: weight is %s %s; expected [N, K] bf16, fp16 or fp32"
                         % (op, tuple(weight.shape), weight.dtype))
    _check_layer("quantize_weight_", weight, None, None, 1, [weight], [None], [wq], recipe)
    for o, t in zip(_weight_outs(recipe, *weight.shape), wq):
        if t.dtype != TORCH_DTYPE[o.dtype] or not t.is_contiguous():
            raise ValueError("%s: cache buffer %s is %s%s; expected a contiguous %s tensor "
                             "(weight_buffers makes them)" % (
                                 op, o.name, t.dtype,
                                 "" if t.is_contiguous() else ", not contiguous",
                                 TORCH_DTYPE[o.dtype]))
    _check_delayed_scale("quantize_weight_", recipe, scale, "scale", 1, "the delayed scale",
                         weight.device, "the weight's device")


# ------------------------------------------------------------------ qfuse::quantize, qfuse::gemm

def _q_outs(recipe, role, norm, outputs, m, k):
    """The fake-shape outputs of one quantization of x [m, k] (norm + quantize, or plain)."""
    return shapes.outputs(recipe, "norm_quantize" if norm else "quantize", role=_lib_role(role),
                          norm=NORM_NAMES[norm], outputs=outputs, M=m, K=k)


def _lib_role(role):
    return ("input", "weight", "grad")[role]


def is_empty(t):
    """Whether t has no elements; a symbolic size of torch.compile's is taken as nonzero unless
    known to be 0 (guard_size_oblivious: no guard on a data-dependent size)."""
    n = t.numel()
    if isinstance(n, torch.SymInt):
        from torch.fx.experimental.symbolic_shapes import guard_size_oblivious
        return guard_size_oblivious(n == 0)
    return n == 0


def _concrete(v):
    """v, or the value of a SymInt v (torch.compile's dynamic shapes make int arguments symbolic;
    the ops take concrete roles, sizes and flags, so the graph is specialized on them)."""
    return int(v) if isinstance(v, torch.SymInt) else v


def _check_int(op, name, v, allowed):
    if isinstance(v, bool) or not isinstance(v, int) or v not in allowed:
        raise ValueError("qfuse::%s: %s is %r; expected one of %s" % (op, name, v,
                                                                       sorted(allowed)))


def _check_quantize(x, gamma, beta, scale, role, norm, outputs, eps, recipe, seed, offset):
    """qfuse::quantize's arguments, in the real op and its fake alike: role 0..2, norm 0..2
    (a norm with the input role only; gamma [K] for both norms, beta [K] for LayerNorm only,
    of x's dtype or fp32; eps finite >= 0), outputs 1..3, x [..., K] of bf16, fp16 or fp32
    with K >= 1 and at least one row, scale one fp32 value under delayed scaling (fp8_delayed)
    and None under the recipes that compute their scales (libqfuse ignores it there), seed and
    offset ints in [0, 2^63) (uint64 in libqfuse, int64 in the schema; a symbolic one checked at
    its example value).
    Returns (m, k)."""
    _check_int("quantize", "role", role, {0, 1, 2})
    _check_int("quantize", "norm", norm, {0, 1, 2})
    _check_int("quantize", "outputs", outputs, {1, 2, 3})
    if norm and role != 0:
        raise ValueError("qfuse::quantize: a norm (norm %d) is fused with the input role (0) "
                         "only; role is %d" % (norm, role))
    if x.dim() < 1 or x.shape[-1] < 1 or is_empty(x) or x.dtype not in QF_DTYPE:
        raise ValueError("qfuse::quantize: x is %s %s; expected [..., K] bf16, fp16 or fp32 "
                         "with K >= 1 and at least one row" % (tuple(x.shape), x.dtype))
    k = x.shape[-1]
    want = {0: (False, False), 1: (True, True), 2: (True, False)}[norm]  # gamma, beta
    for name, t, needed in (("gamma", gamma, want[0]), ("beta", beta, want[1])):
        if (t is not None) != needed:
            raise ValueError("qfuse::quantize: norm %d %s %s" % (
                norm, "takes a" if needed else "takes no", name))
        if t is not None and (tuple(t.shape) != (k,) or t.dtype not in (x.dtype, torch.float32)
                              or t.device != x.device):
            raise ValueError("qfuse::quantize: %s is %s %s on %s; expected [K] = [%d] of x's "
                             "dtype or fp32, on x's device" % (name, tuple(t.shape), t.dtype,
                                                               t.device, k))
        if t is not None and not t.is_contiguous():
            raise ValueError("qfuse::quantize: %s is not contiguous (strides %s); pass "
                             ".contiguous()" % (name, t.stride()))
    if norm:
        _check_eps("quantize", eps)
    _check_delayed_scale("quantize", recipe, scale, "scale", 1, "the delayed scale", x.device,
                         "x's device")
    for name, v in (("seed", seed), ("offset", offset)):
        h = shapes._hint(v, name) if isinstance(v, torch.SymInt) else v
        if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < 2 ** 63:
            raise ValueError("qfuse::quantize: %s is %r; expected an int in [0, 2^63) (the "
                             "stochastic-rounding stream's %s: a uint64 in libqfuse, an int64 "
                             "in the op's schema)" % (name, v, name))
    return x.numel() // k, k


def _quantize(fake, x, gamma, beta, scale, recipe, role, norm, eps, zero_centered_gamma,
              outputs, seed, offset):
    """qfuse::quantize (fake=False) or its fake implementation: the same checks and the same
    qf_quantize call, on the device or, in the fake, on a device-less context (_Target; sizes
    at their example values). Returns the outputs."""
    role, norm, outputs = _concrete(role), _concrete(norm), _concrete(outputs)
    m, k = _check_quantize(x, gamma, beta, scale, role, norm, outputs, eps, recipe, seed, offset)
    outs = _q_outs(recipe, role, norm, outputs, m, k)
    if fake:
        q = [x.new_empty(o.dims, dtype=TORCH_DTYPE[o.dtype]) for o in outs]
    else:
        q = _alloc(outs, x.device)
    mc, kc = shapes._hint(m, "M"), shapes._hint(k, "K")
    if not (isinstance(m, int) and isinstance(k, int)):  # symbolic: the dims at mc, kc
        outs = _q_outs(recipe, role, norm, outputs, mc, kc)
    to = _Target(x.device, fake)
    qs = _quantized(outs, q, to.layout(recipe), to.address)
    xt = _c(x.contiguous(), dims=(mc, kc), address=to.address)
    nd = (_norm_desc(norm, gamma, beta, eps, zero_centered_gamma, to.address) if norm
          else None)
    rng = _lib.Rng(shapes._hint(seed, "seed"), shapes._hint(offset, "offset"))
    to.check(_lib.lib.qf_quantize(to.ctx, shapes._recipe(recipe), role, ctypes.byref(xt),
                                  ctypes.byref(nd) if nd is not None else None,
                                  to.pointer(scale), ctypes.byref(rng), ctypes.byref(qs),
                                  to.stream))
    return q


@torch.library.custom_op("qfuse::quantize", mutates_args=())
def quantize(x: torch.Tensor, gamma: Optional[torch.Tensor], beta: Optional[torch.Tensor],
             scale: Optional[torch.Tensor], recipe: str, role: int, norm: int, eps: float,
             zero_centered_gamma: bool, outputs: int, seed: int,
             offset: int) -> List[torch.Tensor]:
    """x [..., K] quantized under the recipe's rules for `role` (0 input, 1 weight, 2 grad), with
    a fused norm (1 LayerNorm, 2 RMSNorm; input role) or none (0): the copies `outputs` asks for
    (1 rowwise, 2 columnwise, 3 both) and their scales, amaxes, mu and rsigma, in the order of
    the recipe's fake shapes (qf_quantize). scale: fp8_delayed's [1] fp32 scale (None under the
    other recipes); seed, offset: the stochastic-rounding stream (NVFP4 gradients), ints >= 0."""
    return _quantize(False, x, gamma, beta, scale, recipe, role, norm, eps, zero_centered_gamma,
                     outputs, seed, offset)


@quantize.register_fake
def _(x, gamma, beta, scale, recipe, role, norm, eps, zero_centered_gamma, outputs, seed,
      offset):
    return _quantize(True, x, gamma, beta, scale, recipe, role, norm, eps, zero_centered_gamma,
                     outputs, seed, offset)


def _operand(recipe, q, spec, copy, which):
    """The fake-shape outputs of GEMM operand `which` ("a" or "b") and its (rows, K) in GEMM
    terms: spec is the quantization that made q (role, norm, outputs, M, K of the tensor
    quantized), checked against q's tensors (count, shapes, dtypes), and copy one it holds."""
    op = "gemm"
    spec, copy = [_concrete(v) for v in spec], _concrete(copy)
    if len(spec) != 5 or any(isinstance(v, bool) or not isinstance(v, int) for v in spec):
        raise ValueError("qfuse::gemm: %s_spec is %r; expected [role, norm, outputs, M, K] "
                         "(ints)" % (which, spec))
    role, norm, outputs, m, k = spec
    _check_int(op, which + "_spec role", role, {0, 1, 2})
    _check_int(op, which + "_spec norm", norm, {0, 1, 2})
    _check_int(op, which + "_spec outputs", outputs, {1, 2, 3})
    _check_int(op, which + "_copy", copy, {_lib.COPY_ROWWISE, _lib.COPY_COLUMNWISE})
    if not outputs & (1 << copy):
        raise ValueError("qfuse::gemm: %s_copy %d is a copy the quantization did not make "
                         "(outputs %d)" % (which, copy, outputs))
    outs = _q_outs(recipe, role, norm, outputs, m, k)
    if len(outs) != len(q):
        raise ValueError("qfuse::gemm: operand %s has %d tensors; its quantization (role %d, "
                         "norm %d, outputs %d) gives %d" % (which, len(q), role, norm, outputs,
                                                            len(outs)))
    for o, t in zip(outs, q):
        if tuple(t.shape) != tuple(o.dims) or t.dtype != TORCH_DTYPE[o.dtype]:
            raise ValueError("qfuse::gemm: operand %s's %s is %s %s; its quantization gives %s "
                             "%s" % (which, o.name, tuple(t.shape), t.dtype, tuple(o.dims),
                                     TORCH_DTYPE[o.dtype]))
        if not t.is_contiguous():
            raise ValueError("qfuse::gemm: operand %s's %s is not contiguous (strides %s)"
                             % (which, o.name, t.stride()))
    return outs, ((m, k) if copy == _lib.COPY_ROWWISE else (k, m))


def _gemm_operands(recipe, a, b, a_spec, b_spec, a_copy, b_copy, bias=None):
    """Both operands checked (_operand) with one K, a training GEMM's pair of copies and the bias
    ([N] bf16): (a's outputs, b's outputs, M, N, K)."""
    if (a_copy, b_copy) == (_lib.COPY_COLUMNWISE, _lib.COPY_ROWWISE):
        raise ValueError("qfuse::gemm: a is the columnwise copy and b the rowwise one; no "
                         "training GEMM reads that pair (fprop: both rowwise; dgrad: a rowwise, "
                         "b columnwise; wgrad: both columnwise)")
    ao, (m, k) = _operand(recipe, a, a_spec, a_copy, "a")
    bo, (n, kb) = _operand(recipe, b, b_spec, b_copy, "b")
    if kb != k:
        raise ValueError("qfuse::gemm: a reduces over K = %d, b over K = %d" % (k, kb))
    if bias is not None and (tuple(bias.shape) != (n,) or bias.dtype != torch.bfloat16 or
                             not bias.is_contiguous()):
        raise ValueError("qfuse::gemm: bias is %s %s%s; expected a contiguous [N] = [%d] bf16"
                         % (tuple(bias.shape), bias.dtype,
                            "" if bias.is_contiguous() else " (not contiguous)", n))
    dev = a[0].device  # libqfuse takes every address as one of this device's
    for name, ts in (("a", a), ("b", b), ("bias", [] if bias is None else [bias])):
        for i, t in enumerate(ts):
            if t.device != dev:
                raise ValueError("qfuse::gemm: %s%s is on %s, a's first tensor on %s; every "
                                 "operand tensor and the bias must be on one device"
                                 % (name, "" if name == "bias" else "[%d]" % i, t.device, dev))
    return ao, bo, m, n, k


def _gemm(fake, a, b, bias, recipe, a_spec, b_spec, a_copy, b_copy, out_fp32):
    """qfuse::gemm (fake=False) or its fake implementation: the same checks and the same
    qf_gemm_ex call, on the device or, in the fake, on a device-less context (_Target), which
    applies libqfuse's rules of the recipe's GEMM (operand formats, scale layouts by the GEMM's
    roles, sizes). Returns y."""
    a_copy, b_copy = _concrete(a_copy), _concrete(b_copy)
    ao, bo, m, n, _ = _gemm_operands(recipe, a, b, a_spec, b_spec, a_copy, b_copy, bias)
    to = _Target(a[0].device, fake)
    layout = to.layout(recipe)
    qa, qb = _quantized(ao, a, layout, to.address), _quantized(bo, b, layout, to.address)
    y = a[0].new_empty((m, n), dtype=torch.float32 if out_fp32 else torch.bfloat16)
    oa = _lib.Operand(ctypes.pointer(qa), a_copy)
    ob = _lib.Operand(ctypes.pointer(qb), b_copy)
    yt = _c(y, address=to.address)
    bt = _c(bias, address=to.address) if bias is not None else None
    to.check(_lib.lib.qf_gemm_ex(to.ctx, shapes._recipe(recipe), ctypes.byref(oa),
                                 ctypes.byref(ob), ctypes.byref(bt) if bt is not None else None,
                                 ctypes.byref(yt), None, to.stream))
    return y


@torch.library.custom_op("qfuse::gemm", mutates_args=())
def gemm(a: List[torch.Tensor], b: List[torch.Tensor], bias: Optional[torch.Tensor],
         recipe: str, a_spec: List[int], b_spec: List[int], a_copy: int, b_copy: int,
         out_fp32: bool) -> torch.Tensor:
    """y [M, N] = A B^T (+ bias) from one copy each of two quantized tensors (the outputs of
    qfuse::quantize; a_spec / b_spec: its role, norm, outputs and the [M, K] it quantized), the
    training GEMM the copies name (fprop: both rowwise; dgrad: a rowwise, b columnwise; wgrad:
    both columnwise; qf_gemm). bf16 y, or fp32 with out_fp32."""
    return _gemm(False, a, b, bias, recipe, a_spec, b_spec, a_copy, b_copy, out_fp32)


@gemm.register_fake
def _(a, b, bias, recipe, a_spec, b_spec, a_copy, b_copy, out_fp32):
    return _gemm(True, a, b, bias, recipe, a_spec, b_spec, a_copy, b_copy, out_fp32)


# ------------------------------------------------------------------ qfuse::scale_update_

@torch.library.custom_op("qfuse::scale_update_",
                         mutates_args=("amax", "history", "scale", "scale_inv"))
def scale_update_(amax: torch.Tensor, history: torch.Tensor, scale: torch.Tensor,
                  scale_inv: torch.Tensor, fmt: torch.Tensor, recipe: str) -> None:
    """Delayed scaling's update of n tensors in one launch (qf_scale_update, numerics 2.1):
    amax [n] fp32 (consumed: reset to 0), history [n, H] fp32 (H the recipe's
    amax_history_len, newest first), scale and scale_inv [n] fp32, fmt [n] uint8 (QF_DTYPE_E4M3
    3 or E5M2 4), all on one CUDA device, contiguous."""
    _check_scale_state(amax, history, scale, scale_inv, fmt)
    n, hist = history.shape
    dev = amax.device
    ctx = _ctx(dev)
    _lib.check(_lib.lib.qf_scale_update(ctx, shapes._recipe(recipe), n, hist, amax.data_ptr(),
                                        history.data_ptr(), scale.data_ptr(),
                                        scale_inv.data_ptr(), fmt.data_ptr(), _stream(dev)))


@scale_update_.register_fake
def _(amax, history, scale, scale_inv, fmt, recipe):
    _check_scale_state(amax, history, scale, scale_inv, fmt)
    # what qf_scale_update checks of the recipe, made here while torch.compile traces: a
    # delayed-scaling recipe (an unknown one raises QfuseError) and H its amax_history_len
    # (the errors libqfuse's checks raise in eager mode: QF_ERR_UNSUPPORTED, QF_ERR_INVALID_ARG)
    family, _, hist_len = recipe_info(recipe)
    if hist_len == 0:
        raise _lib.QfuseError(_lib.STATUS.index("QF_ERR_UNSUPPORTED"),
                              "qfuse::scale_update_: recipe %r (%s) computes its scales in the "
                              "quantizer; only delayed scaling has a scale update"
                              % (recipe, family))
    if history.shape[1] != hist_len:
        raise _lib.QfuseArgumentError(_lib.STATUS.index("QF_ERR_INVALID_ARG"),
                                      "qfuse::scale_update_: history is %s; recipe %r keeps "
                                      "H = %d amaxes (amax_history_len)"
                                      % (tuple(history.shape), recipe, hist_len))
    return None


def _check_scale_state(amax, history, scale, scale_inv, fmt):
    if history.dim() != 2 or history.shape[0] < 1 or history.shape[1] < 1:
        raise ValueError("qfuse::scale_update_: history is %s; expected [n, H] with n, H >= 1"
                         % (tuple(history.shape),))
    n = history.shape[0]
    for name, t, dt in (("amax", amax, torch.float32), ("history", history, torch.float32),
                        ("scale", scale, torch.float32), ("scale_inv", scale_inv, torch.float32),
                        ("fmt", fmt, torch.uint8)):
        if t.dtype != dt or not t.is_contiguous() or t.device != history.device:
            raise ValueError("qfuse::scale_update_: %s must be a contiguous %s tensor on %s"
                             % (name, dt, history.device))
        if name != "history" and tuple(t.shape) != (n,):
            raise ValueError("qfuse::scale_update_: %s is %s; expected [n] = [%s]"
                             % (name, tuple(t.shape), n))


# ------------------------------------------------------------------ qfuse::layernorm_linear_fwd

@torch.library.custom_op("qfuse::layernorm_linear_fwd", mutates_args=())
def layernorm_linear_fwd(x: torch.Tensor, weight: torch.Tensor, gamma: torch.Tensor,
                         beta: Optional[torch.Tensor], wq: List[torch.Tensor],
                         bias: Optional[torch.Tensor], layer: int, recipe: str, norm: int,
                         eps: float, zero_centered_gamma: bool, for_backward: bool,
                         scales: Optional[torch.Tensor],
                         amax: Optional[torch.Tensor]) -> List[torch.Tensor]:
    _check_linear_fwd(x, weight, gamma, beta, wq, bias, layer, recipe, norm, eps, scales, amax)
    k, n_out = x.shape[-1], weight.shape[0]
    m = x.numel() // k
    x2 = x.contiguous()
    dev = x.device
    ctx, stream, layout = _ctx(dev), _stream(dev), _layout(recipe, dev)
    xo = _x_outs(recipe, norm, m, k, for_backward)
    xq = _alloc(xo, dev)
    y = torch.empty(*x.shape[:-1], n_out, dtype=torch.bfloat16, device=dev)
    ll = _lib.LnLinear()
    ll.norm = _norm_desc(norm, gamma, beta, eps, zero_centered_gamma)
    ll.weight = _c(weight.contiguous())
    if bias is not None:
        ll.bias = _c(bias)
    ll.xq = _quantized(xo, xq, layout)
    ll.wq = _quantized(_weight_outs(recipe, n_out, k), wq, layout)
    _set_kept(ll.wq_bf16, recipe, weight, wq)
    ll.weight_changed = -1  # qfuse::quantize_weight_ keeps wq (and its bf16 values) current
    ll.x_scale = _ptr(scales, LINEAR_TENSORS.index("x"))
    xt, yt = _c(x2, dims=(m, k)), _c(y, dims=(m, n_out))
    _run(layer, dev, _lib.lib.qf_layernorm_linear_fwd, ctx, shapes._recipe(recipe),
         ctypes.byref(xt), ctypes.byref(ll), ctypes.byref(yt), stream)
    return [y] + xq


@layernorm_linear_fwd.register_fake
def _(x, weight, gamma, beta, wq, bias, layer, recipe, norm, eps, zero_centered_gamma,
      for_backward, scales, amax):
    _check_linear_fwd(x, weight, gamma, beta, wq, bias, layer, recipe, norm, eps, scales, amax)
    k, n_out = x.shape[-1], weight.shape[0]
    m = x.numel() // k
    y_out = shapes.outputs(recipe, "gemm", M=m, N=n_out, K=k)[0]
    y = x.new_empty((*x.shape[:-1], y_out.dims[1]), dtype=TORCH_DTYPE[y_out.dtype])
    return [y] + [x.new_empty(o.dims, dtype=TORCH_DTYPE[o.dtype])
                  for o in _x_outs(recipe, norm, m, k, for_backward)]


# ------------------------------------------------------------------ qfuse::layernorm_linear_bwd

def _wgrad_out(recipe, n_out, k, m, dw_dtype):
    """Fake-shape output of a wgrad: dW [N, K] (bf16, or fp32)."""
    return shapes.outputs(recipe, "gemm", M=n_out, N=k, K=m,
                          outputs=_lib.OUT_FP32 if dw_dtype == torch.float32 else 0)[0]


@torch.library.custom_op("qfuse::layernorm_linear_bwd", mutates_args=("amax",))
def layernorm_linear_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                         gamma: torch.Tensor, beta: Optional[torch.Tensor],
                         wq: List[torch.Tensor], xq: List[torch.Tensor], layer: int, recipe: str,
                         norm: int, eps: float, zero_centered_gamma: bool, has_bias: bool,
                         scales: Optional[torch.Tensor],
                         amax: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor,
                                                                torch.Tensor, torch.Tensor,
                                                                torch.Tensor]:
    _check_linear_bwd(dy, x, weight, gamma, beta, wq, layer, recipe, norm, eps, scales, amax)
    st = _layer_state(layer)
    k, n_out = x.shape[-1], weight.shape[0]
    m = x.numel() // k
    dev = x.device
    ctx, stream, layout = _ctx(dev), _stream(dev), _layout(recipe, dev)
    x2, dy2 = x.contiguous(), dy.contiguous()
    dw_dtype = torch.float32 if weight.dtype == torch.float32 else torch.bfloat16
    dw_out = _wgrad_out(recipe, n_out, k, m, dw_dtype)
    ll = _lib.LnLinear()
    ll.norm = _norm_desc(norm, gamma, beta, eps, zero_centered_gamma)
    ll.weight = _c(weight)
    ll.xq = _quantized(_x_outs(recipe, norm, m, k, True), xq, layout)
    ll.wq = _quantized(_weight_outs(recipe, n_out, k), wq, layout)
    _set_kept(ll.wq_bf16, recipe, weight, wq)
    g = _lib.LnLinearGrads()
    dyo = shapes.outputs(recipe, "quantize", role="grad", outputs=ROWWISE | COLUMNWISE, M=m,
                         K=n_out)
    dyq = _alloc(dyo, dev)
    g.dyq = _quantized(dyo, dyq, layout)
    g.dy_scale = _ptr(scales, LINEAR_TENSORS.index("dy"))
    g.rng = _rng(st)
    dxn = torch.empty(m, k, dtype=torch.bfloat16, device=dev)
    g.dxn = _c(dxn)
    g.norm, dx, dgamma, dbeta = _norm_grads(recipe, norm, x2)
    dweight = torch.empty(dw_out.dims, dtype=dw_dtype, device=dev)
    g.dweight = _c(dweight)
    dbias = torch.empty(n_out if has_bias else 0, dtype=dy.dtype, device=dev)
    if has_bias:
        g.dbias = _c(dbias)
    xt, dyt = _c(x2, dims=(m, k)), _c(dy2, dims=(m, n_out))
    _run(layer, dev, _lib.lib.qf_layernorm_linear_bwd, ctx, shapes._recipe(recipe),
         ctypes.byref(xt), ctypes.byref(dyt), ctypes.byref(ll), ctypes.byref(g), stream)
    _merge_amax(amax, LINEAR_TENSORS.index("dy"), dyo, dyq)
    return dx, dgamma, dbeta, dweight, dbias


@layernorm_linear_bwd.register_fake
def _(dy, x, weight, gamma, beta, wq, xq, layer, recipe, norm, eps, zero_centered_gamma,
      has_bias, scales, amax):
    _check_linear_bwd(dy, x, weight, gamma, beta, wq, layer, recipe, norm, eps, scales, amax)
    k, n_out = x.shape[-1], weight.shape[0]
    dw_dtype = torch.float32 if weight.dtype == torch.float32 else torch.bfloat16
    nb, dw_out = _norm_grad_outs(recipe, norm, x), _wgrad_out(recipe, n_out, k, x.numel() // k,
                                                              dw_dtype)
    fp32 = torch.float32
    dx = torch.empty_like(x)
    dgamma = x.new_empty(nb["dgamma"].dims, dtype=fp32)
    dbeta = x.new_empty(nb["dbeta"].dims if "dbeta" in nb else (0,), dtype=fp32)
    dweight = x.new_empty(dw_out.dims, dtype=dw_dtype)
    db = shapes.outputs(recipe, "dbias", M=x.numel() // x.shape[-1], N=n_out,
                        dtype=QF_DTYPE[dy.dtype])[0]
    dbias = x.new_empty(db.dims if has_bias else (0,), dtype=dy.dtype)
    return dx, dgamma, dbeta, dweight, dbias


# ------------------------------------------------------------------ autograd


def _setup_context(ctx, inputs, output):
    (x, weight, gamma, beta, wq, bias, layer, recipe, norm, eps, zc, for_backward, scales,
     amax) = inputs
    ctx.cfg = (layer, recipe, norm, eps, zc, bias is not None, len(wq), for_backward)
    _save(ctx, x=x, weight=weight, gamma=gamma, beta=beta, xq=output[1:], scales=scales)
    # Module state the ops mutate between this forward and its backward: the weight cache
    # (quantize_weight_ of the next micro-batch, which keeps it unless `weight` changed, and a
    # changed weight fails the saved weight's version check) and the amaxes (max-merged).
    ctx.wq, ctx.amax = wq, amax


def _no_backward(op):
    raise RuntimeError("qfuse: %s ran with for_backward=False, so it kept no columnwise copies "
                       "for the backward; run the forward with for_backward=True to "
                       "differentiate it" % op)


def _backward(ctx, *grads):
    layer, recipe, norm, eps, zc, has_bias, n_wq, for_backward = ctx.cfg
    if not for_backward:
        _no_backward("layernorm_linear_fwd")
    t = _saved(ctx)
    dy = grads[0][0] if isinstance(grads[0], (list, tuple)) else grads[0]
    dx, dgamma, dbeta, dweight, dbias = layernorm_linear_bwd(
        dy, t["x"], t["weight"], t["gamma"], t["beta"], ctx.wq, t["xq"], layer, recipe, norm,
        eps, zc, has_bias, t["scales"], ctx.amax)
    beta = t["beta"]
    return (dx, dweight.to(t["weight"].dtype), dgamma.to(t["gamma"].dtype),
            dbeta.to(beta.dtype) if beta is not None else None, [None] * n_wq,
            dbias if has_bias else None, None, None, None, None, None, None, None, None)


layernorm_linear_fwd.register_autograd(_backward, setup_context=_setup_context)


# ------------------------------------------------------------------ qfuse::layernorm_mlp_fwd

ACT_NAMES = ("gelu", "swiglu", "relu")


def _check_mlp(op, x, w1, w2, gamma, beta, norm, b1, b2, w1q, w2q, recipe, act):
    """_check_layer for both weights, and the activation between them: act 0 gelu, 1 swiglu
    (W1 [2F, K]), 2 relu, with W2 [N, F]."""
    _check_layer(op, x, gamma, beta, norm, [w1, w2], [b1, b2], [w1q, w2q], recipe)
    if act not in (0, 1, 2):
        raise ValueError("qfuse::%s: act is %r: 0 gelu, 1 swiglu, 2 relu" % (op, act))
    fin = w1.shape[0]
    if (act == 1 and fin % 2) or w2.shape[1] != (fin // 2 if act == 1 else fin):
        raise ValueError("qfuse::%s: fc1 is %s and fc2 %s: under %s fc2's input is %s wide"
                         % (op, tuple(w1.shape), tuple(w2.shape), ACT_NAMES[act],
                            "half of fc1's output" if act == 1 else "fc1's output"))


def _check_dy(op, dy, x, n_out):
    if tuple(dy.shape[:-1]) != tuple(x.shape[:-1]) or dy.shape[-1] != n_out:
        raise ValueError("qfuse::%s: dy is %s; expected x's leading dims and %s: %s"
                         % (op, tuple(dy.shape), n_out, (*x.shape[:-1], n_out)))

def _check_mlp_fwd(x, w1, w2, gamma, beta, w1q, w2q, b1, b2, layer, recipe, norm, eps, act,
                   scales, amax):
    """qfuse::layernorm_mlp_fwd's checks, in the real op and its fake alike."""
    op = "layernorm_mlp_fwd"
    _check_mlp(op, x, w1, w2, gamma, beta, norm, b1, b2, w1q, w2q, recipe, act)
    _check_call(op, x, gamma, beta, [b1, b2], eps, layer, recipe, scales, amax, len(MLP_TENSORS))


def _check_mlp_bwd(dy, x, w1, w2, gamma, beta, w1q, w2q, layer, recipe, norm, eps, act, scales,
                   amax):
    """qfuse::layernorm_mlp_bwd's checks, in the real op and its fake alike."""
    op = "layernorm_mlp_bwd"
    _check_mlp(op, x, w1, w2, gamma, beta, norm, None, None, w1q, w2q, recipe, act)
    _check_dy(op, dy, x, w2.shape[0])
    _check_call(op, x, gamma, beta, [], eps, layer, recipe, scales, amax, len(MLP_TENSORS))
    check_backward(op, recipe, norm, x.numel() // x.shape[-1], [w1.shape, w2.shape])


def _mlp_dims(x, w1, w2, act):
    """(M, K, Fin, F, N) of an MLP: x [..., K], W1 [Fin, K], W2 [N, F], Fin = 2F for swiglu."""
    k, fin, n_out = x.shape[-1], w1.shape[0], w2.shape[0]
    return x.numel() // k, k, fin, w2.shape[1], n_out


def _mlp_outs(recipe, norm, act, m, k, fin, f, n_out, for_backward):
    """Fake-shape outputs of the forward: h (fc1's y), a (the activation's), q(a), y."""
    both = ROWWISE | (COLUMNWISE if for_backward else 0)
    h = shapes.outputs(recipe, "gemm", M=m, N=fin, K=k)[0]
    a = shapes.outputs(recipe, "activation", M=m, N=f, dtype="bf16",
                       outputs=_lib.OUT_GATED if ACT_NAMES[act] == "swiglu" else 0)[0]
    aq = shapes.outputs(recipe, "quantize", role="input", outputs=both, M=m, K=f)
    y = shapes.outputs(recipe, "gemm", M=m, N=n_out, K=f)[0]
    return h, a, aq, y


@torch.library.custom_op("qfuse::layernorm_mlp_fwd", mutates_args=())
def layernorm_mlp_fwd(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, gamma: torch.Tensor,
                      beta: Optional[torch.Tensor], w1q: List[torch.Tensor],
                      w2q: List[torch.Tensor], b1: Optional[torch.Tensor],
                      b2: Optional[torch.Tensor], layer: int, recipe: str, norm: int, eps: float,
                      zero_centered_gamma: bool, act: int, for_backward: bool,
                      scales: Optional[torch.Tensor],
                      amax: Optional[torch.Tensor]) -> List[torch.Tensor]:
    _check_mlp_fwd(x, w1, w2, gamma, beta, w1q, w2q, b1, b2, layer, recipe, norm, eps, act,
                   scales, amax)
    m, k, fin, f, n_out = _mlp_dims(x, w1, w2, act)
    dev = x.device
    ctx, stream, layout = _ctx(dev), _stream(dev), _layout(recipe, dev)
    xo = _x_outs(recipe, norm, m, k, for_backward)
    ho, ao, aqo, _ = _mlp_outs(recipe, norm, act, m, k, fin, f, n_out, for_backward)
    xq, aq = _alloc(xo, dev), _alloc(aqo, dev)
    h = torch.empty(ho.dims, dtype=TORCH_DTYPE[ho.dtype], device=dev)
    # where the forward quantizes act(h) in one kernel it leaves a unwritten: zeros, so that the
    # op's outputs are determined by its inputs
    writes_a = _lib.lib.qf_layernorm_mlp_writes_a(ctx, shapes._recipe(recipe), m, f)
    if writes_a < 0:
        _lib.check(-writes_a)
    a = (torch.empty if writes_a else torch.zeros)(ao.dims, dtype=TORCH_DTYPE[ao.dtype], device=dev)
    y = torch.empty(*x.shape[:-1], n_out, dtype=torch.bfloat16, device=dev)
    p = _lib.LnMlp()
    p.norm = _norm_desc(norm, gamma, beta, eps, zero_centered_gamma)
    p.act = act
    p.w1, p.w2 = _c(w1.contiguous()), _c(w2.contiguous())
    if b1 is not None:
        p.b1 = _c(b1)
    if b2 is not None:
        p.b2 = _c(b2)
    p.xq, p.aq = _quantized(xo, xq, layout), _quantized(aqo, aq, layout)
    p.w1q = _quantized(_weight_outs(recipe, fin, k), w1q, layout)
    p.w2q = _quantized(_weight_outs(recipe, n_out, f), w2q, layout)
    _set_kept(p.w1q_bf16, recipe, w1, w1q), _set_kept(p.w2q_bf16, recipe, w2, w2q)
    p.h, p.a = _c(h), _c(a)
    p.weight_changed = -1  # qfuse::quantize_weight_ keeps w1q, w2q current
    p.x_scale = _ptr(scales, MLP_TENSORS.index("x"))
    p.a_scale = _ptr(scales, MLP_TENSORS.index("a"))
    xt, yt = _c(x.contiguous(), dims=(m, k)), _c(y, dims=(m, n_out))
    _run(layer, dev, _lib.lib.qf_layernorm_mlp_fwd, ctx, shapes._recipe(recipe), ctypes.byref(xt),
         ctypes.byref(p), ctypes.byref(yt), stream)
    return [y, h, a] + xq + aq


@layernorm_mlp_fwd.register_fake
def _(x, w1, w2, gamma, beta, w1q, w2q, b1, b2, layer, recipe, norm, eps, zero_centered_gamma,
      act, for_backward, scales, amax):
    _check_mlp_fwd(x, w1, w2, gamma, beta, w1q, w2q, b1, b2, layer, recipe, norm, eps, act,
                   scales, amax)
    m, k, fin, f, n_out = _mlp_dims(x, w1, w2, act)
    ho, ao, aqo, yo = _mlp_outs(recipe, norm, act, m, k, fin, f, n_out, for_backward)
    y = x.new_empty((*x.shape[:-1], yo.dims[1]), dtype=TORCH_DTYPE[yo.dtype])
    rest = [ho, ao] + _x_outs(recipe, norm, m, k, for_backward) + aqo
    return [y] + [x.new_empty(o.dims, dtype=TORCH_DTYPE[o.dtype]) for o in rest]


# ------------------------------------------------------------------ qfuse::layernorm_mlp_bwd

@torch.library.custom_op("qfuse::layernorm_mlp_bwd", mutates_args=("amax",))
def layernorm_mlp_bwd(dy: torch.Tensor, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
                      gamma: torch.Tensor, beta: Optional[torch.Tensor],
                      w1q: List[torch.Tensor], w2q: List[torch.Tensor], xq: List[torch.Tensor],
                      aq: List[torch.Tensor], h: torch.Tensor, a: torch.Tensor, layer: int,
                      recipe: str, norm: int, eps: float, zero_centered_gamma: bool, act: int,
                      has_b1: bool, has_b2: bool, scales: Optional[torch.Tensor],
                      amax: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor,
                                                             torch.Tensor, torch.Tensor,
                                                             torch.Tensor, torch.Tensor,
                                                             torch.Tensor]:
    _check_mlp_bwd(dy, x, w1, w2, gamma, beta, w1q, w2q, layer, recipe, norm, eps, act, scales,
                   amax)
    st = _layer_state(layer)
    m, k, fin, f, n_out = _mlp_dims(x, w1, w2, act)
    dev = x.device
    ctx, stream, layout = _ctx(dev), _stream(dev), _layout(recipe, dev)
    x2, dy2 = x.contiguous(), dy.contiguous()
    p = _lib.LnMlp()
    p.norm = _norm_desc(norm, gamma, beta, eps, zero_centered_gamma)
    p.act = act
    p.w1, p.w2 = _c(w1.contiguous()), _c(w2.contiguous())
    p.xq = _quantized(_x_outs(recipe, norm, m, k, True), xq, layout)
    _, _, aqo, _ = _mlp_outs(recipe, norm, act, m, k, fin, f, n_out, True)
    p.aq = _quantized(aqo, aq, layout)
    p.w1q = _quantized(_weight_outs(recipe, fin, k), w1q, layout)
    p.w2q = _quantized(_weight_outs(recipe, n_out, f), w2q, layout)
    _set_kept(p.w1q_bf16, recipe, w1, w1q), _set_kept(p.w2q_bf16, recipe, w2, w2q)
    p.h, p.a = _c(h), _c(a)
    g = _lib.LnMlpGrads()
    both = ROWWISE | COLUMNWISE
    dyo = shapes.outputs(recipe, "quantize", role="grad", outputs=both, M=m, K=n_out)
    dho = shapes.outputs(recipe, "quantize", role="grad", outputs=both, M=m, K=fin)
    dyq, dhq = _alloc(dyo, dev), _alloc(dho, dev)
    g.dyq, g.dhq = _quantized(dyo, dyq, layout), _quantized(dho, dhq, layout)
    g.rng_dy = _rng(st)  # dy's and dh's streams: two offsets of the layer's
    g.rng_dh = _rng(st)
    g.dy_scale = _ptr(scales, MLP_TENSORS.index("dy"))
    g.dh_scale = _ptr(scales, MLP_TENSORS.index("dh"))
    da = torch.empty(m, f, dtype=torch.bfloat16, device=dev)
    dh = torch.empty(m, fin, dtype=torch.bfloat16, device=dev)
    dxn = torch.empty(m, k, dtype=torch.bfloat16, device=dev)
    g.da, g.dh, g.dxn = _c(da), _c(dh), _c(dxn)
    g.norm, dx, dgamma, dbeta = _norm_grads(recipe, norm, x2)
    dw_dtype = torch.float32 if w1.dtype == torch.float32 else torch.bfloat16
    dw1 = torch.empty(_wgrad_out(recipe, fin, k, m, dw_dtype).dims, dtype=dw_dtype, device=dev)
    dw2 = torch.empty(_wgrad_out(recipe, n_out, f, m, dw_dtype).dims, dtype=dw_dtype,
                      device=dev)
    g.dw1, g.dw2 = _c(dw1), _c(dw2)
    db1 = torch.empty(fin if has_b1 else 0, dtype=torch.bfloat16, device=dev)
    db2 = torch.empty(n_out if has_b2 else 0, dtype=dy.dtype, device=dev)
    if has_b1:
        g.db1 = _c(db1)
    if has_b2:
        g.db2 = _c(db2)
    xt, dyt = _c(x2, dims=(m, k)), _c(dy2, dims=(m, n_out))
    _run(layer, dev, _lib.lib.qf_layernorm_mlp_bwd, ctx, shapes._recipe(recipe), ctypes.byref(xt),
         ctypes.byref(dyt), ctypes.byref(p), ctypes.byref(g), stream)
    _merge_amax(amax, MLP_TENSORS.index("dy"), dyo, dyq)
    _merge_amax(amax, MLP_TENSORS.index("dh"), dho, dhq)
    return dx, dgamma, dbeta, dw1, dw2, db1, db2


@layernorm_mlp_bwd.register_fake
def _(dy, x, w1, w2, gamma, beta, w1q, w2q, xq, aq, h, a, layer, recipe, norm, eps,
      zero_centered_gamma, act, has_b1, has_b2, scales, amax):
    _check_mlp_bwd(dy, x, w1, w2, gamma, beta, w1q, w2q, layer, recipe, norm, eps, act, scales,
                   amax)
    m, k, fin, f, n_out = _mlp_dims(x, w1, w2, act)
    nb = _norm_grad_outs(recipe, norm, x)
    dw_dtype = torch.float32 if w1.dtype == torch.float32 else torch.bfloat16
    w1_out = _wgrad_out(recipe, fin, k, m, dw_dtype)
    w2_out = _wgrad_out(recipe, n_out, f, m, dw_dtype)
    fp32 = torch.float32
    return (torch.empty_like(x), x.new_empty(nb["dgamma"].dims, dtype=fp32),
            x.new_empty(nb["dbeta"].dims if "dbeta" in nb else (0,), dtype=fp32),
            x.new_empty(w1_out.dims, dtype=dw_dtype), x.new_empty(w2_out.dims, dtype=dw_dtype),
            x.new_empty((fin,) if has_b1 else (0,), dtype=torch.bfloat16),
            x.new_empty((n_out,) if has_b2 else (0,), dtype=dy.dtype))


def _mlp_setup_context(ctx, inputs, output):
    (x, w1, w2, gamma, beta, w1q, w2q, b1, b2, layer, recipe, norm, eps, zc, act, for_backward,
     scales, amax) = inputs
    ctx.cfg = (layer, recipe, norm, eps, zc, act, b1.dtype if b1 is not None else None,
               b2 is not None, len(w1q), len(w2q), for_backward)
    n_xq = len(_x_outs(recipe, norm, 16, x.shape[-1], True)) if for_backward else 0
    _save(ctx, x=x, w1=w1, w2=w2, gamma=gamma, beta=beta, h=output[1], a=output[2],
          xq=output[3:3 + n_xq], aq=output[3 + n_xq:], scales=scales)
    ctx.w1q, ctx.w2q, ctx.amax = w1q, w2q, amax  # as in _setup_context


def _mlp_backward(ctx, *grads):
    layer, recipe, norm, eps, zc, act, b1_dtype, has_b2, n1, n2, for_backward = ctx.cfg
    has_b1 = b1_dtype is not None
    if not for_backward:
        _no_backward("layernorm_mlp_fwd")
    t = _saved(ctx)
    dy = grads[0][0] if isinstance(grads[0], (list, tuple)) else grads[0]
    dx, dgamma, dbeta, dw1, dw2, db1, db2 = layernorm_mlp_bwd(
        dy, t["x"], t["w1"], t["w2"], t["gamma"], t["beta"], ctx.w1q, ctx.w2q, t["xq"],
        t["aq"], t["h"], t["a"], layer, recipe, norm, eps, zc, act, has_b1, has_b2,
        t["scales"], ctx.amax)
    beta = t["beta"]
    return (dx, dw1.to(t["w1"].dtype), dw2.to(t["w2"].dtype), dgamma.to(t["gamma"].dtype),
            dbeta.to(beta.dtype) if beta is not None else None, [None] * n1, [None] * n2,
            db1.to(b1_dtype) if has_b1 else None, db2 if has_b2 else None, None, None, None,
            None, None, None, None, None, None)


layernorm_mlp_fwd.register_autograd(_mlp_backward, setup_context=_mlp_setup_context)
