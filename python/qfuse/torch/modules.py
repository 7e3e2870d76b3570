"""qfuse.torch.LayerNormLinear and LayerNormMLP: LayerNorm or RMSNorm followed by a Linear (or a
two-layer MLP) under a qfuse recipe, forward and backward through the qfuse custom ops
(qfuse.ops), usable under torch.compile(fullgraph=True) with dynamic batch dimensions."""
import os
import warnings
import weakref

import torch

from .. import _lib, ops, shapes

_NORMS = {"LayerNorm": 1, "RMSNorm": 2}
_M_HINT = 128  # a token count every recipe's block shape divides (shape queries at construction)


def _size(what, v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError("%s must be a positive int, not %r" % (what, v))
    return v


def _eps(v):
    if not ops.eps_ok(v):
        raise ValueError("eps must be a finite number >= 0 that fp32 holds (inside the square "
                         "root), not %r" % (v,))
    return float(v)


def _flag(what, v):
    if not isinstance(v, bool) and v not in (0, 1):
        raise TypeError("%s must be a bool, not %r" % (what, v))
    return bool(v)


def _seed(v):
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 64:
        raise ValueError("rng_seed must be an int in [0, 2**64), not %r" % (v,))
    return v


def check_group(group):
    """None, or a torch.distributed process group (TypeError otherwise)."""
    if group is None:
        return None
    dist = torch.distributed
    if not (dist.is_available() and isinstance(group, dist.ProcessGroup)):
        raise TypeError("amax_group must be None or a torch.distributed process group "
                        "(e.g. torch.distributed.group.WORLD), not %r" % (group,))
    return group


def _recipe(recipe):
    """The recipe, checked: a shipped name or a .lua file libqfuse loads (ValueError if not). A
    file is kept by its absolute path: the module's recipe is the file named when it was made,
    whatever the working directory of later calls."""
    if isinstance(recipe, os.PathLike):
        recipe = os.fspath(recipe)
    if not isinstance(recipe, str):
        raise TypeError("recipe must be a recipe name or a .lua path (str or path), not %r"
                        % (recipe,))
    try:
        ops.recipe_family(recipe)
    except _lib.QfuseError as e:
        raise ValueError("recipe %r: %s" % (recipe, e)) from None
    return shapes._abs_path(recipe) if shapes._is_path(recipe) else recipe


class _HostState:
    """A module's host state in the ops: its layer ids (qfuse.ops.new_layer: a weight cache key
    and a stochastic-rounding stream each) and its amax group. copy.deepcopy gives the copy layers
    of its own that start as these (ops.copy_layer) and the same group (a process group is a
    handle, not data). Pickled, it keeps each layer's seed, rng mode and offset, and loads as new
    layers of the loading process (layer ids are per process) with no group."""

    def __init__(self, layers, group=None):
        self.layers, self.group = list(layers), group
        self._free()

    def _free(self):
        """The layers' host state is forgotten when this object is collected (with its module);
        the list is read then, so layers appended or replaced later are the ones freed."""
        weakref.finalize(self, ops.free_layers, self.layers)

    def __deepcopy__(self, memo):
        return _HostState([ops.copy_layer(i) for i in self.layers], self.group)

    def __getstate__(self):
        return {"layers": [ops.layer_settings(i) for i in self.layers]}

    def __setstate__(self, state):
        self.layers, self.group = [ops.new_layer(*s) for s in state["layers"]], None
        self._free()


def _host_layer(i, doc):
    """A module property: layer id i of the module's _HostState (settable)."""
    def get(self):
        return self._host.layers[i]

    def put(self, layer):
        self._host.layers[i] = layer
    return property(get, put, doc=doc)


class _FusedNorm(torch.nn.Module):
    """What both modules share: the norm's parameters, the fused-or-fallback decision (made once,
    at construction, and reported once), the weight cache's buffers and the host state."""

    def __init__(self, in_features, recipe, normalization, eps, zero_centered_gamma, params_dtype,
                 device, rng_seed, return_layernorm_output):
        super().__init__()
        self._host = _HostState([])
        if not isinstance(normalization, str) or normalization not in _NORMS:
            raise ValueError("normalization must be 'LayerNorm' or 'RMSNorm', not %r"
                             % (normalization,))
        if not isinstance(params_dtype, torch.dtype) or params_dtype not in ops.QF_DTYPE:
            raise ValueError("params_dtype must be torch.bfloat16, torch.float16 or "
                             "torch.float32, not %r" % (params_dtype,))
        self.in_features = _size("in_features", in_features)
        self.recipe, self.normalization = _recipe(recipe), normalization
        self.eps = _eps(eps)
        self.zero_centered_gamma = _flag("zero_centered_gamma", zero_centered_gamma)
        self.return_layernorm_output = _flag("return_layernorm_output", return_layernorm_output)
        rng_seed = _seed(rng_seed)
        if not isinstance(device, (str, torch.device)):
            raise TypeError("device must be a torch device or its name ('cuda', 'cuda:1', "
                            "'cpu'), not %r" % (device,))
        self._dev = torch.device(device)
        if self._dev.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("device=%r, but PyTorch sees no CUDA device here: pass device='cpu' "
                               "(the unfused path) on a machine without a GPU" % (device,))
        self._dtype = params_dtype
        self.layer_norm_weight = self._param(in_features, fill=0.0 if zero_centered_gamma else 1.0)
        self.layer_norm_bias = (self._param(in_features, fill=0.0)
                                if normalization == "LayerNorm" else None)
        self._host.layers.append(ops.new_layer(rng_seed))

    _layer = _host_layer(0, "The layer id of the (first) weight's ops (ops.new_layer).")

    def _param(self, *shape, fill=None):
        t = torch.empty(*shape, dtype=self._dtype, device=self._dev)
        if fill is None:
            torch.nn.init.normal_(t, std=shape[-1] ** -0.5)
        else:
            t.fill_(fill)
        return torch.nn.Parameter(t)

    def _decide(self, gemms):
        """(fused, reason) for GEMMs [(N, K)]: whether the recipe's fused path takes them here."""
        try:
            if self._dev.type != "cuda":
                raise ValueError("the fused path runs on CUDA devices, not %s" % self._dev)
            for n, k in gemms:
                ops._weight_outs(self.recipe, n, k)
                shapes.outputs(self.recipe, "gemm", M=128, N=n, K=k)
            ops._layout(self.recipe, self._dev)
            return True, ""
        except (_lib.QfuseError, ValueError, OSError) as e:
            warnings.warn("qfuse.torch.%s(recipe=%r): runs unfused in PyTorch (in params_dtype, "
                          "bf16 output): %s" % (type(self).__name__, self.recipe, e),
                          stacklevel=3)
            return False, str(e)

    def _delayed_state(self, tensors):
        """Delayed scaling's state (fp8_delayed recipes), one row per tensor of a step in the
        order `tensors` names them (ops.LINEAR_TENSORS, ops.MLP_TENSORS): fp8_amax [n] (this
        step's, max-merged by the forward and backward), fp8_history [n, amax_history_len],
        fp8_scale, fp8_scale_inv [n] and fp8_fmt [n] (the E4M3 / E5M2 code of each tensor's
        role). Persistent buffers; update_scales() rolls them once per step. The unfused fallback
        of such a recipe keeps them too, unused, so that one state_dict loads into the module
        fused or not (a checkpoint moves between a GPU and a CPU machine)."""
        family, fmts, hist = ops.recipe_info(self.recipe)
        self._delayed = self.fused and family == "fp8_delayed"
        if family != "fp8_delayed":
            return
        roles = {"x": "input", "a": "input", "dy": "grad", "dh": "grad"}
        codes = [_lib.DTYPES[fmts[roles.get(t, "weight")]] for t in tensors]
        n, dev = len(tensors), self._dev
        f32 = dict(dtype=torch.float32, device=dev)
        self.register_buffer("fp8_amax", torch.zeros(n, **f32))
        self.register_buffer("fp8_history", torch.zeros(n, hist, **f32))
        self.register_buffer("fp8_scale", torch.ones(n, **f32))
        self.register_buffer("fp8_scale_inv", torch.ones(n, **f32))
        self.register_buffer("fp8_fmt", torch.tensor(codes, dtype=torch.uint8, device=dev))

    def _scales(self):
        """(scales, amax) for the ops: the delayed-scaling buffers, or (None, None)."""
        return (self.fp8_scale, self.fp8_amax) if self._delayed else (None, None)

    def _quantize_weight(self, weight, names, layer, index):
        """The weight cache of `weight` (qfuse::quantize_weight_), and under delayed scaling its
        scale (row `index`) and its amax (the buffer named *_amax) merged into fp8_amax."""
        wq = [getattr(self, n) for n in names]
        scale = self.fp8_scale[index:index + 1] if self._delayed else None
        torch.ops.qfuse.quantize_weight_(weight, wq, layer, self.recipe, scale)
        if self._delayed:
            ops.merge_amax(self.fp8_amax, index,
                           next(t for n, t in zip(names, wq) if n.endswith("_amax")))
        return wq

    def _x_outs(self, for_backward):
        return ops._x_outs(self.recipe, _NORMS[self.normalization], _M_HINT, self.in_features,
                           for_backward)

    def _slots(self, outs):
        """(count, position of the amax) of the fake-shape outputs of one quantization: asked
        at construction, so that forward() runs no shape query (neither depends on M)."""
        return len(outs), ops._amax_slot(outs)

    def _merge(self, out, first, slots, index):
        """Delayed scaling: the amax among out[first:] (at slots[1]) into fp8_amax row `index`;
        returns the position after that quantization's outputs."""
        n, at = slots
        ops.merge_amax(self.fp8_amax, index, out[first + at])
        return first + n

    @property
    def amax_group(self):
        """The torch.distributed group over which amaxes are MAX-reduced (None: none): current
        scaling's and NVFP4's per-tensor amaxes inside every op, before the scale is computed
        from them (numerics 2.2), and delayed scaling's in update_scales(). Every rank of the
        group must run the module's forward and backward in the same order."""
        return self._host.group

    @amax_group.setter
    def amax_group(self, group):
        self._host.group = check_group(group)
        for layer in self._host.layers:
            ops.set_amax_group(layer, group)

    def update_scales(self, group=None):
        """Delayed scaling (fp8_delayed): this step's amaxes into the histories and new scales
        (qfuse::scale_update_, numerics 2.1); the amaxes start again from 0. The amaxes are
        first MAX-reduced over torch.distributed `group` (default: the module's amax_group), so
        that every rank gets the same scales. Call once per training step, after the optimizer
        step (or use qfuse.torch.update_scales(model, group)). Nothing to do for recipes that
        compute their own scales."""
        group = self._host.group if group is None else check_group(group)
        if not self._delayed:
            return
        if group is not None:
            torch.distributed.all_reduce(self.fp8_amax, op=torch.distributed.ReduceOp.MAX,
                                         group=group)
        torch.ops.qfuse.scale_update_(self.fp8_amax, self.fp8_history, self.fp8_scale,
                                      self.fp8_scale_inv, self.fp8_fmt, self.recipe)

    def _keeps_bf16(self, keep_weight_bf16):
        """Whether the weight cache also keeps the weights' bf16 values: asked for, and useful
        here (a fused MXFP8 or NVFP4 recipe on a GPU whose GEMM reads compact scales)."""
        return (_flag("keep_weight_bf16", keep_weight_bf16) and self.fused and
                ops.keeps_bf16(self.recipe, self._dev))

    def _cache_buffers(self, prefix, weight):
        """Registers the weight cache's buffers of `weight` (non-persistent; with
        keeps_weight_bf16 both copies' bf16 values last); their names."""
        names = []
        kept = ["rowwise_bf16", "columnwise_bf16"] if self.keeps_weight_bf16 else []
        for name, t in zip([o.name for o in ops._weight_outs(self.recipe, *weight.shape)] + kept,
                           ops.weight_buffers(self.recipe, weight, self.keeps_weight_bf16)):
            names.append("_%s_%s" % (prefix, name))
            self.register_buffer(names[-1], t, persistent=False)
        return names

    def _norm(self, x):
        g = self.layer_norm_weight + 1 if self.zero_centered_gamma else self.layer_norm_weight
        if self.normalization == "LayerNorm":
            return torch.nn.functional.layer_norm(x, (self.in_features,), g,
                                                  self.layer_norm_bias, self.eps)
        return torch.nn.functional.rms_norm(x, (self.in_features,), g, self.eps)

    def _out(self, y, x, xn=None):
        """y, or (y, norm(x)) with return_layernorm_output: the norm's output in x's dtype,
        computed by PyTorch (in params_dtype) beside the fused path, or the fallback's xn; its
        gradient flows into x and the norm's parameters."""
        if not self.return_layernorm_output:
            return y
        if xn is None:
            xn = self._norm(x.to(self.layer_norm_weight.dtype))
        return y, xn.to(x.dtype)

    def _check_x(self, x):
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.dtype not in ops.QF_DTYPE:
            raise TypeError("qfuse.torch.%s: x must be a tensor [..., in_features] of bf16, "
                            "fp16 or fp32, not %s" % (type(self).__name__, (
                                "%s %s" % (tuple(x.shape), x.dtype)
                                if isinstance(x, torch.Tensor) else type(x).__name__)))
        if x.shape[-1] != self.in_features:
            raise ValueError("qfuse.torch.%s: x has last dim %d, expected in_features=%d"
                             % (type(self).__name__, x.shape[-1], self.in_features))

    def _norm_params(self, x):
        """gamma and beta as the ops take them for x: as they are where their dtype is x's or
        fp32, else cast to fp32 (exact from bf16 or fp16; autograd follows the cast back)."""
        g, b = self.layer_norm_weight, self.layer_norm_bias
        if g.dtype in (x.dtype, torch.float32):
            return g, b
        return g.float(), None if b is None else b.float()

    def _check_tokens(self, x, for_backward, weights):
        """A forward whose backward could not run (its GEMMs over x's tokens refused:
        ops.check_backward) is refused before it runs (where delayed scaling would have merged
        its amaxes already). Under torch.compile the backward op's fake makes the same check
        while tracing."""
        if not for_backward or torch.compiler.is_compiling():
            return
        m = x.numel() // x.shape[-1]
        ok = self.__dict__.setdefault("_tokens_ok", set())  # token counts already asked
        if m not in ok:
            ops.check_backward(type(self).__name__, self.recipe, _NORMS[self.normalization], m,
                               weights)
            ok.add(m)

    @staticmethod
    def _bias(b):
        """A bias as the ops take it: bf16 (a cast of fp32/fp16 parameters, which autograd
        follows back)."""
        return None if b is None else b.to(torch.bfloat16)

    def _for_backward(self, x):
        return torch.is_grad_enabled() and (x.requires_grad or any(
            p.requires_grad for p in self.parameters()))


class LayerNormLinear(_FusedNorm):
    """y = norm(x) W^T + b with the norm fused with x's quantization and the GEMM run on the
    quantized copies (docs/numerics.md sections 3 and 6). x [..., in_features] bf16/fp16/fp32, y
    [..., out_features] bf16. Parameters: layer_norm_weight, layer_norm_bias (LayerNorm), weight
    [out_features, in_features], bias.

    recipe: a shipped recipe name ("mxfp8", "nvfp4", "fp8_current", "fp8_delayed", ...) or the
    path of a .lua recipe. Under delayed scaling (fp8_delayed) the module keeps each tensor's
    amax history and scale in buffers (fp8_amax, fp8_history, fp8_scale, fp8_scale_inv) and
    update_scales() advances them: call it once per training step. The weight's quantized copies
    are kept in buffers and made again only when the weight changed (its storage or torch's
    version counter, which every in-place optimizer step bumps) or, under delayed scaling, its
    scale did: micro-batches between two optimizer steps reuse them. Gradients of NVFP4 recipes
    round stochastically with seed `rng_seed` and an offset that advances every backward.

    return_layernorm_output=True makes forward return (y, norm(x)): the norm's output in x's
    dtype, computed by PyTorch beside the fused path, for residual connections that need it.

    amax_group (a torch.distributed group, also settable later as the attribute): every amax a
    quantization takes its scale from is MAX-reduced over it first, so all ranks quantize alike:
    current scaling's and NVFP4's inside the ops (no collective in the compiled graph), delayed
    scaling's in update_scales().

    Whether this configuration runs fused is decided once, here: a device, dtype, recipe or size
    the fused path refuses (its message is reported once, as a warning) makes the module run the
    same math in plain PyTorch (in params_dtype, bf16 output), never re-deciding per call. An
    unknown recipe is an error (ValueError). device defaults to "cuda"; on a machine without a
    GPU pass device="cpu" (unfused).

    keep_weight_bf16=True keeps the weight's bf16 values (2 bytes per element for each of its
    two copies) beside its quantized copies, made with them, so that the GEMMs of micro-batches
    that reuse the weight read them instead of dequantizing the weight at every call (fprop and
    dgrad; H200, docs/bench.md: MXFP8 fprop at 2048 x 4096 -> 14336 ran 0.90x of bf16
    cuBLASLt's best algorithm without and 0.97x with, in one run).
    It applies to MXFP8 and NVFP4 recipes on Hopper-class GPUs (sm_89..99), whose GEMMs multiply
    bf16 values; elsewhere it has no effect. keeps_weight_bf16 says whether it took effect."""

    def __init__(self, in_features, out_features, recipe="mxfp8", bias=True,
                 normalization="LayerNorm", eps=1e-5, zero_centered_gamma=False,
                 params_dtype=torch.bfloat16, device="cuda", rng_seed=0,
                 return_layernorm_output=False, amax_group=None, keep_weight_bf16=False):
        super().__init__(in_features, recipe, normalization, eps, zero_centered_gamma,
                         params_dtype, device, rng_seed, return_layernorm_output)
        self.out_features = _size("out_features", out_features)
        self.weight = self._param(out_features, in_features)
        self.bias = self._param(out_features, fill=0.0) if _flag("bias", bias) else None
        self.fused, self.fallback_reason = self._decide([(out_features, in_features)])
        self.keeps_weight_bf16 = self._keeps_bf16(keep_weight_bf16)
        self._wq_names = self._cache_buffers("wq", self.weight) if self.fused else []
        self._delayed_state(ops.LINEAR_TENSORS)
        self.amax_group = amax_group
        if self._delayed:
            self._x_slots = {fb: self._slots(self._x_outs(fb)) for fb in (False, True)}

    def extra_repr(self):
        return "%d -> %d, recipe=%r, normalization=%s, bias=%s, fused=%s" % (
            self.in_features, self.out_features, self.recipe, self.normalization,
            self.bias is not None, self.fused)

    def forward(self, x):
        self._check_x(x)
        if not self.fused or ops.is_empty(x):  # no rows: the ops take at least one
            xn = self._norm(x.to(self.weight.dtype))
            y = torch.nn.functional.linear(xn, self.weight, self.bias)
            return self._out(y.to(torch.bfloat16), x, xn)
        t = ops.LINEAR_TENSORS
        for_backward = self._for_backward(x)
        self._check_tokens(x, for_backward, [tuple(self.weight.shape)])
        wq = self._quantize_weight(self.weight, self._wq_names, self._layer, t.index("w"))
        gamma, beta = self._norm_params(x)
        out = torch.ops.qfuse.layernorm_linear_fwd(
            x, self.weight, gamma, beta, wq,
            self._bias(self.bias), self._layer, self.recipe, _NORMS[self.normalization],
            self.eps, self.zero_centered_gamma, for_backward, *self._scales())
        if self._delayed:
            self._merge(out, 1, self._x_slots[for_backward], t.index("x"))
        return self._out(out[0], x)


class LayerNormMLP(_FusedNorm):
    """y = fc2(act(fc1(norm(x)))) (docs/numerics.md section 6): the norm fused with x's
    quantization, both GEMMs on quantized copies, activation "gelu" (tanh), "swiglu" (fc1 of
    width 2 ffn_hidden_size) or "relu". x [..., hidden_size], y [..., hidden_size] bf16.
    Parameters: layer_norm_weight, layer_norm_bias (LayerNorm), fc1_weight [Fin, hidden_size],
    fc1_bias, fc2_weight [hidden_size, ffn_hidden_size], fc2_bias. Recipes, the weight cache
    (keep_weight_bf16 keeps both weights' bf16 values), stochastic rounding,
    return_layernorm_output and the fused-or-fallback decision as LayerNormLinear."""

    def __init__(self, hidden_size, ffn_hidden_size, recipe="mxfp8", bias=True,
                 normalization="LayerNorm", activation="gelu", eps=1e-5,
                 zero_centered_gamma=False, params_dtype=torch.bfloat16, device="cuda",
                 rng_seed=0, return_layernorm_output=False, amax_group=None,
                 keep_weight_bf16=False):
        super().__init__(hidden_size, recipe, normalization, eps, zero_centered_gamma,
                         params_dtype, device, rng_seed, return_layernorm_output)
        if activation not in ops.ACT_NAMES:
            raise ValueError("activation must be one of %s, not %r" % (ops.ACT_NAMES,
                                                                       activation))
        self.activation = activation
        self.ffn_hidden_size = _size("ffn_hidden_size", ffn_hidden_size)
        fin = 2 * self.ffn_hidden_size if activation == "swiglu" else self.ffn_hidden_size
        self.fc1_weight = self._param(fin, hidden_size)
        bias = _flag("bias", bias)
        self.fc1_bias = self._param(fin, fill=0.0) if bias else None
        self.fc2_weight = self._param(hidden_size, ffn_hidden_size)
        self.fc2_bias = self._param(hidden_size, fill=0.0) if bias else None
        self.fused, self.fallback_reason = self._decide([(fin, hidden_size),
                                                         (hidden_size, ffn_hidden_size)])
        self.keeps_weight_bf16 = self._keeps_bf16(keep_weight_bf16)
        self._w1_names = self._cache_buffers("w1q", self.fc1_weight) if self.fused else []
        self._w2_names = self._cache_buffers("w2q", self.fc2_weight) if self.fused else []
        self._host.layers.append(ops.new_layer(rng_seed))  # the second weight's: _layer_w2
        self._delayed_state(ops.MLP_TENSORS)
        self.amax_group = amax_group
        if self._delayed:  # x's and a's quantizations: (count, amax position) per for_backward
            self._slots_xa = {fb: (self._slots(self._x_outs(fb)), self._slots(ops._mlp_outs(
                self.recipe, _NORMS[normalization], ops.ACT_NAMES.index(activation), _M_HINT,
                hidden_size, fin, self.ffn_hidden_size, hidden_size, fb)[2]))
                for fb in (False, True)}

    _layer_w2 = _host_layer(1, "The layer id of the second weight's ops.")

    def extra_repr(self):
        return "%d -> %d -> %d, recipe=%r, normalization=%s, activation=%s, bias=%s, fused=%s" % (
            self.in_features, self.ffn_hidden_size, self.in_features, self.recipe,
            self.normalization, self.activation, self.fc1_bias is not None, self.fused)

    def _act(self, h):
        if self.activation == "gelu":
            return torch.nn.functional.gelu(h, approximate="tanh")
        if self.activation == "relu":
            return torch.relu(h)
        h1, h2 = h.chunk(2, dim=-1)
        return torch.nn.functional.silu(h1) * h2

    def forward(self, x):
        self._check_x(x)
        if not self.fused or ops.is_empty(x):  # no rows: the ops take at least one
            xn = self._norm(x.to(self.fc1_weight.dtype))
            h = torch.nn.functional.linear(xn, self.fc1_weight, self.fc1_bias)
            y = torch.nn.functional.linear(self._act(h), self.fc2_weight, self.fc2_bias)
            return self._out(y.to(torch.bfloat16), x, xn)
        t = ops.MLP_TENSORS
        for_backward = self._for_backward(x)
        self._check_tokens(x, for_backward, [tuple(self.fc1_weight.shape),
                                             tuple(self.fc2_weight.shape)])
        w1q = self._quantize_weight(self.fc1_weight, self._w1_names, self._layer, t.index("w1"))
        w2q = self._quantize_weight(self.fc2_weight, self._w2_names, self._layer_w2,
                                    t.index("w2"))
        act = ops.ACT_NAMES.index(self.activation)
        gamma, beta = self._norm_params(x)
        out = torch.ops.qfuse.layernorm_mlp_fwd(
            x, self.fc1_weight, self.fc2_weight, gamma, beta,
            w1q, w2q, self._bias(self.fc1_bias), self._bias(self.fc2_bias), self._layer,
            self.recipe, _NORMS[self.normalization], self.eps, self.zero_centered_gamma, act,
            for_backward, *self._scales())
        if self._delayed:  # [y, h, a, *xq, *aq]: x's amax, then a's
            xs, as_ = self._slots_xa[for_backward]
            self._merge(out, self._merge(out, 3, xs, t.index("x")), as_, t.index("a"))
        return self._out(out[0], x)
