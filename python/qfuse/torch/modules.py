"""qfuse.torch.LayerNormLinear: LayerNorm or RMSNorm + Linear under a qfuse recipe, forward and
backward through the qfuse custom ops (qfuse.ops), usable under torch.compile(fullgraph=True)."""
import warnings

import torch

from .. import _lib, ops, shapes

_NORMS = {"LayerNorm": 1, "RMSNorm": 2}


class LayerNormLinear(torch.nn.Module):
    """y = norm(x) W^T + b with the norm fused with x's quantization and the GEMM run on the
    quantized copies (docs/numerics.md sections 3 and 6). x [..., in_features] bf16/fp16/fp32, y
    [..., out_features] bf16.

    recipe: a shipped recipe name ("mxfp8", "nvfp4", "fp8_current", ...) or the path of a .lua
    recipe. The weight's quantized copies are kept in buffers and made again only when the
    weight changed (its storage or torch's version counter, which every in-place optimizer step
    bumps): micro-batches between two optimizer steps reuse them. Gradients of NVFP4 recipes
    round stochastically with seed `rng_seed` and an offset that advances every backward.

    Whether this configuration runs fused is decided once, here: a recipe or size the fused path
    refuses (its message is reported once, as a warning) makes the module run the same math in
    plain PyTorch (bf16), never re-deciding per call."""

    def __init__(self, in_features, out_features, recipe="mxfp8", bias=True,
                 normalization="LayerNorm", eps=1e-5, zero_centered_gamma=False,
                 params_dtype=torch.bfloat16, device="cuda", rng_seed=0):
        super().__init__()
        if normalization not in _NORMS:
            raise ValueError("normalization must be 'LayerNorm' or 'RMSNorm', not %r"
                             % (normalization,))
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.recipe, self.normalization = str(recipe), normalization
        self.eps, self.zero_centered_gamma = float(eps), bool(zero_centered_gamma)
        dev = torch.device(device)
        g0 = 0.0 if zero_centered_gamma else 1.0
        self.layer_norm_weight = torch.nn.Parameter(
            torch.full((in_features,), g0, dtype=params_dtype, device=dev))
        self.layer_norm_bias = (torch.nn.Parameter(torch.zeros(in_features, dtype=params_dtype,
                                                               device=dev))
                                if normalization == "LayerNorm" else None)
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features,
                                                     dtype=params_dtype, device=dev))
        torch.nn.init.normal_(self.weight, std=in_features ** -0.5)
        self.bias = (torch.nn.Parameter(torch.zeros(out_features, dtype=params_dtype,
                                                    device=dev)) if bias else None)
        self.fused, self.fallback_reason = self._decide(dev)
        self._layer = ops.new_layer(rng_seed)
        self._wq_names = []
        if self.fused:
            for o, t in zip(ops._weight_outs(self.recipe, out_features, in_features),
                            ops.weight_buffers(self.recipe, self.weight)):
                name = "_wq_" + o.name
                self.register_buffer(name, t, persistent=False)
                self._wq_names.append(name)

    def _decide(self, dev):
        """(fused, reason): whether the recipe's fused path takes this layer on this GPU."""
        try:
            if dev.type != "cuda":
                raise ValueError("the fused path runs on CUDA devices, not %s" % dev)
            if self.weight.dtype not in ops.QF_DTYPE:
                raise ValueError("params_dtype %s (bf16, fp16 or fp32)" % self.weight.dtype)
            ops._weight_outs(self.recipe, self.out_features, self.in_features)
            shapes.outputs(self.recipe, "gemm", M=128, N=self.out_features,
                           K=self.in_features)
            ops._layout(self.recipe, dev)
            fam = ops.recipe_family(self.recipe)
            if fam == "fp8_delayed":
                raise ValueError("delayed scaling keeps scale state the module does not "
                                 "carry yet; use fp8_current")
            return True, ""
        except (_lib.QfuseError, ValueError, OSError) as e:
            warnings.warn("qfuse.torch.LayerNormLinear(recipe=%r, %d -> %d): runs unfused in "
                          "bf16 PyTorch: %s" % (self.recipe, self.in_features, self.out_features,
                                                e), stacklevel=3)
            return False, str(e)

    def extra_repr(self):
        return "%d -> %d, recipe=%r, normalization=%s, bias=%s, fused=%s" % (
            self.in_features, self.out_features, self.recipe, self.normalization,
            self.bias is not None, self.fused)

    def _norm(self, x):
        g = self.layer_norm_weight + 1 if self.zero_centered_gamma else self.layer_norm_weight
        if self.normalization == "LayerNorm":
            return torch.nn.functional.layer_norm(x, (self.in_features,), g,
                                                  self.layer_norm_bias, self.eps)
        return torch.nn.functional.rms_norm(x, (self.in_features,), g, self.eps)

    def forward(self, x):
        if x.shape[-1] != self.in_features:
            raise ValueError("qfuse LayerNormLinear: x has last dim %d, expected in_features=%d"
                             % (x.shape[-1], self.in_features))
        if not self.fused:
            xn = self._norm(x.to(self.weight.dtype))
            return torch.nn.functional.linear(xn, self.weight, self.bias).to(torch.bfloat16)
        wq = [getattr(self, n) for n in self._wq_names]
        torch.ops.qfuse.quantize_weight_(self.weight, wq, self._layer, self.recipe)
        for_backward = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad
            for t in (x, self.weight, self.layer_norm_weight, self.layer_norm_bias, self.bias))
        out = torch.ops.qfuse.layernorm_linear_fwd(
            x, self.weight, self.layer_norm_weight, self.layer_norm_bias, wq, self.bias,
            self._layer, self.recipe, _NORMS[self.normalization], self.eps,
            self.zero_centered_gamma, for_backward)
        return out[0]
