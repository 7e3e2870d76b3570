#!/usr/bin/env python3
"""bench_peers.py: the PyTorch peers of `make bench`: qfuse's work in eager mode and torch.compile.

For the shapes of runtime/tools/qfuse_bench.c and bf16 input it times, in PyTorch eager and under
torch.compile (dynamic=False, compile time excluded by the warm-up):
  - LayerNorm / RMSNorm + per-tensor FP8 E4M3 with amax, rowwise and rowwise + transposed copy
    (numerics 2.1, 3), and the same quantization without a norm (weight quantize);
  - RMSNorm + MXFP8 1x32 with E8M0 scales, ceil rounding (numerics 2.3; compact scales [M, K/32]);
  - RMSNorm + NVFP4: 16-element E2M1 blocks, E4M3 block scales, fp32 global scale (numerics 2.4;
    rowwise, no RHT or stochastic rounding, compact scales [M, K/16]);
  - FP8 E4M3 GEMM through torch._scaled_mm with per-tensor scales, and with FP8 block scaling's
    1x128 / 128x128 block scales;
  - one LayerNorm + MLP training step in bf16 (--section step): LayerNorm, fc1 [2F, K] + bias,
    SwiGLU, fc2 [K, F] + bias, forward and backward (torch.autograd.grad of every parameter and x
    for a given dy), at qfuse-bench's step shape (tokens 16384, hidden 4096, ffn 14336).
Every quantizer is written in torch ops with the numerics of docs/numerics.md (statistics and y in fp32, one
rounding to the element format). Times: CUDA events around batches of back-to-back calls, median
over batches of the batch time / batch size, after a warm-up; inputs rotated between sets that
together exceed twice the L2 cache; random data. A peer that fails writes a row with the error in
`note` instead of stopping the script. Writes out/bench/peers.csv with qfuse.csv's columns
(kind = peer_eager / peer_compile); scripts/bench_report.py merges both. Without torch or a GPU it
says so and exits 0.
"""
import argparse
import csv
import datetime
import errno
import os
import re
import statistics
import sys
import tempfile

try:
    import torch
except ImportError:  # the quantizers below need torch; main() reports it
    torch = None

import qf_stdout

COLUMNS = ["kind", "recipe", "op", "norm", "dtype", "outputs", "M", "K", "N", "bytes", "flops",
           "us_median", "tbps", "tflops", "ratio_copy", "ratio_cublaslt", "speedup_eager",
           "speedup_compile", "note"]
# The same shapes as runtime/tools/qfuse_bench.c (tokens x hidden; GEMMs as M, K, N).
NQ_SHAPES_FULL = [(16384, 4096), (16384, 8192), (4096, 12288), (8192, 4096), (2048, 16384)]
NQ_SHAPES_QUICK = [(8192, 4096)]
# qfuse-bench's GEMM shapes (M, K, N): real layers' fprop and the TN GEMMs of their backward
# (dgrad M, N -> K; wgrad N, M -> K).
# (M, K, N, weight): weight when the GEMM's second operand is a weight (fprop, dgrad), whose
# dequantized copy can be kept across micro-batches: those shapes also get "weight kept" rows.
GEMM_SHAPES_FULL = [(8192, 8192, 8192, True),
                    (16384, 4096, 14336, True), (16384, 14336, 4096, True),
                    (14336, 16384, 4096, False),
                    (2048, 4096, 14336, True), (2048, 14336, 4096, True),
                    (14336, 2048, 4096, False)]
GEMM_SHAPES_QUICK = [(8192, 8192, 8192, True)]
# qfuse-bench's LayerNorm + MLP step (tokens, hidden, ffn), runtime/tools/bench_step.c.
STEP_SHAPE_FULL = (16384, 4096, 14336)
STEP_SHAPE_QUICK = (2048, 4096, 14336)
WARMUP = 5
EPS = 1e-5
E4M3_MAX = 448.0
FLT_MAX = 3.4028234663852886e38

# ============================================================================ quantizers (docs/numerics.md)


def layernorm(x, gamma, beta):
    """LayerNorm in fp32 (numerics 3): y, mu [M, 1], rsigma [M, 1]."""
    return torch.native_layer_norm(x.float(), [x.shape[-1]], gamma.float(), beta.float(), EPS)


def rmsnorm(x, gamma):
    """RMSNorm in fp32 (numerics 3): y = (x * rsigma) * g, rsigma = 1/sqrt(mean(x^2) + eps)."""
    xf = x.float()
    rsigma = torch.rsqrt(xf.square().mean(-1, keepdim=True) + EPS)
    return (xf * rsigma) * gamma.float(), rsigma


def fp8_per_tensor(y, scale, columnwise):
    """Per-tensor E4M3 (numerics 2.1): q = rn_sat(y * scale), amax of y, scale_inv, optional q^T."""
    amax = y.abs().amax()
    q = (y * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    col = q.t().contiguous() if columnwise else None
    return q, col, amax, scale.reciprocal()


def e8m0_exponent(v):
    """E = ceil(log2(v)) for fp32 v >= 0, exactly, from the bits; clamped to [-127, 127]."""
    bits = v.view(torch.int32)
    exp = (bits >> 23) & 0xFF
    man = bits & 0x7FFFFF
    e = exp - 127 + (man != 0).to(torch.int32)
    # Subnormal v = man * 2^-149: above 2^-127 it rounds up to 2^-126, else clamps to 2^-127.
    e = torch.where(exp == 0, torch.where(man > 0x400000, -126, -127), e)
    return e.clamp(-127, 127)


def pow2(k):
    """2^k as fp32, exactly, for int32 k in [-127, 127] (2^-127 is subnormal)."""
    bits = torch.where(k >= -126, (k + 127) << 23, 0x400000)
    return bits.to(torch.int32).view(torch.float32)


def mxfp8_quantize(y):
    """MXFP8 1x32 rowwise (numerics 2.3): E4M3 q [M, K], E8M0 bytes [M, K/32] (compact).

    byte = ceil(log2(fl(amax * fl(1/448)))) + 127; zero block -> 0; NaN in a block -> 0xFF and
    NaN elements. K must be a multiple of 32 (the benchmark shapes are)."""
    m, k = y.shape
    blocks = y.view(m, k // 32, 32)
    bamax = blocks.abs().amax(-1)
    nan = torch.isnan(bamax)
    e = e8m0_exponent(bamax * (1.0 / E4M3_MAX))
    sbytes = torch.where(nan, 255, e + 127).to(torch.uint8)
    s = torch.where(nan, float("nan"), pow2(-e))
    q = (blocks * s.unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q.view(m, k), sbytes


def e2m1_codes(v):
    """rn_sat E2M1 codes (numerics 1) of fp32 v, ties to even: |v| -> 0..7, sign in bit 3."""
    a = v.abs()
    c = ((a > 0.25).to(torch.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5)
         + (a >= 3.5) + (a > 5.0))
    return c | (torch.signbit(v).to(torch.uint8) << 3)


def nvfp4_global_scale(y):
    """S_enc = fl(2688 / amax) capped at FLT_MAX, 1 when amax is 0 (numerics 2.4); and amax."""
    amax = y.abs().amax()
    s_enc = (torch.full_like(amax, 2688.0) / amax).clamp(max=FLT_MAX)
    return torch.where(amax == 0, torch.ones_like(amax), s_enc), amax


def nvfp4_quantize(y):
    """NVFP4 rowwise (numerics 2.4): packed E2M1 [M, K/2], E4M3 block scales [M, K/16], amax.

    K must be a multiple of 16. No RHT (columnwise only) and no stochastic rounding (grads)."""
    m, k = y.shape
    s_enc, amax = nvfp4_global_scale(y)
    s_dec = s_enc.reciprocal()
    blocks = y.view(m, k // 16, 16)
    bamax = blocks.abs().amax(-1)
    sf = (bamax * (s_enc * (1.0 / 6.0))).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    enc = (sf.float() * s_dec).reciprocal().clamp(max=FLT_MAX)
    codes = e2m1_codes(blocks * enc.unsqueeze(-1)).view(m, k // 2, 2)
    packed = codes[..., 0] | (codes[..., 1] << 4)
    return packed, sf.view(torch.uint8), amax


BF16_MAX = 3.3895313892515355e38  # 0x7F7F


def fp8_block_quantize(y, tile):
    """FP8 block scaling (numerics 2.5; power_2_scales, amax_epsilon 0) of y [M, K] (bf16 values
    in fp32): E4M3 q [M, K] and fp32 scale_inv [M, K/128] (1x128 blocks) or, when tile, one per
    128x128 tile, [M/128, K/128]. M (tile) and K multiples of 128 (the benchmark shapes are)."""
    m, k = y.shape
    if tile:
        blocks = y.view(m // 128, 128, k // 128, 128)
        amax = blocks.abs().amax(dim=(1, 3))
    else:
        blocks = y.view(m, k // 128, 128)
        amax = blocks.abs().amax(-1)
    ok = torch.isfinite(amax) & (amax > 0)
    scale = torch.where(ok, E4M3_MAX / torch.where(ok, amax, 1.0), 1.0)
    scale = torch.where(torch.isinf(scale), BF16_MAX, scale)
    scale = torch.ldexp(torch.ones_like(scale), torch.frexp(scale).exponent - 1)  # 2^floor(log2)
    q = blocks * (scale[:, None, :, None] if tile else scale.unsqueeze(-1))
    q = q.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(m, k)
    return q, scale.reciprocal()


def nvfp4_gemm_alpha(amax_a, amax_b):
    """fl(fl(amax_a * amax_b) * fl(1/7225344)), 7225344 = 6*6*448*448 (numerics 2.4)."""
    return (amax_a * amax_b) * torch.tensor(1.0 / 7225344.0, dtype=torch.float32,
                                            device=amax_a.device)


def gemm_operand(rows, cols):
    """fp32 values of one GEMM operand's data under --gemm-data quantized: N(0, 1) rounded to bf16,
    as qfuse-bench quantizes them."""
    return torch.randn(rows, cols, device="cuda").to(torch.bfloat16).float()


# ============================================================================ the work items


def ln_fp8(x, gamma, beta, scale, columnwise):
    y, mu, rsigma = layernorm(x, gamma, beta)
    return fp8_per_tensor(y, scale, columnwise) + (mu, rsigma)


def rms_fp8(x, gamma, beta, scale, columnwise):
    y, rsigma = rmsnorm(x, gamma)
    return fp8_per_tensor(y, scale, columnwise) + (rsigma,)


def weight_fp8(x, gamma, beta, scale, columnwise):
    return fp8_per_tensor(x.float(), scale, columnwise)


def rms_mxfp8(x, gamma, beta, scale, columnwise):
    y, rsigma = rmsnorm(x, gamma)
    return mxfp8_quantize(y) + (rsigma,)


def rms_nvfp4(x, gamma, beta, scale, columnwise):
    y, rsigma = rmsnorm(x, gamma)
    return nvfp4_quantize(y) + (rsigma,)


def gemm_fp8(a, w, sa, sw):
    """y[M, N] = sa * sw * a[M, K] @ w[N, K]^T in bf16 (cuBLASLt underneath, TN)."""
    return torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)


def mxfp8_dequant(q, sbytes):
    """bf16 values of MXFP8 rowwise data q [M, K] (E4M3) with E8M0 bytes [M, K/32]: exact
    (numerics 7) for every scale in [2^-117, 2^119]."""
    m, k = q.shape
    s = pow2(sbytes.to(torch.int32) - 127)
    return (q.view(m, k // 32, 32).float() * s.unsqueeze(-1)).view(m, k).to(torch.bfloat16)


E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0,
               -4.0, -6.0]


def nvfp4_dequant(packed, sf, table):
    """bf16 values of NVFP4 rowwise data (packed E2M1 [M, K/2], low nibble first) with E4M3 block
    scales [M, K/16] (as bytes): exact (numerics 7); the global alpha is the GEMM's."""
    m, k = packed.shape[0], packed.shape[1] * 2
    codes = torch.stack((packed & 0xF, packed >> 4), -1).view(m, k).long()
    s = sf.view(torch.float8_e4m3fn).float()
    return (table[codes].view(m, k // 16, 16) * s.unsqueeze(-1)).view(m, k).to(torch.bfloat16)


def gemm_mxfp8_emulated(a, sa, w, sw):
    """What a PyTorch user writes for an MXFP8 GEMM on Hopper: dequantize both operands to bf16,
    then one bf16 matmul (y = A W^T)."""
    return torch.matmul(mxfp8_dequant(a, sa), mxfp8_dequant(w, sw).t())


def gemm_nvfp4_emulated(a, sa, w, sw, alpha, table):
    return torch.matmul(nvfp4_dequant(a, sa, table), nvfp4_dequant(w, sw, table).t()) * alpha


def gemm_mxfp8_wkept(a, sa, w_bf16):
    """The MXFP8 emulation with the weight dequantized once and kept (w_bf16 [N, K])."""
    return torch.matmul(mxfp8_dequant(a, sa), w_bf16.t())


def gemm_nvfp4_wkept(a, sa, w_bf16, alpha, table):
    return torch.matmul(nvfp4_dequant(a, sa, table), w_bf16.t()) * alpha


def nq_bytes(recipe, op, norm, columnwise, m, k):
    """Bytes moved, counted as qfuse_bench.c counts them: x and gamma/beta read, outputs written."""
    n = 2 * m * k + {"layernorm": 4 * k, "rmsnorm": 2 * k, "none": 0}[norm]
    n += {"layernorm": 8 * m, "rmsnorm": 4 * m, "none": 0}[norm]  # mu, rsigma
    if recipe == "mxfp8":
        return n + m * k + m * k // 32
    if recipe == "nvfp4":
        return n + m * k // 2 + m * k // 16 + 4
    return n + m * k * (2 if columnwise else 1) + 8  # + amax, scale_inv


# (recipe, op, norm, outputs, fn): the bf16 rows of qfuse.csv that have a peer, and the formats
# qfuse does not ship yet. recipe names the family; bench_report.py matches on it.
NQ_CASES = [
    ("fp8_delayed", "norm_quantize", "layernorm", "rowwise", ln_fp8),
    ("fp8_delayed", "norm_quantize", "layernorm", "rowwise+columnwise", ln_fp8),
    ("fp8_delayed", "norm_quantize", "rmsnorm", "rowwise", rms_fp8),
    ("fp8_delayed", "norm_quantize", "rmsnorm", "rowwise+columnwise", rms_fp8),
    ("fp8_delayed", "quantize_weight", "none", "rowwise", weight_fp8),
    ("fp8_delayed", "quantize_weight", "none", "rowwise+columnwise", weight_fp8),
    ("mxfp8", "norm_quantize", "rmsnorm", "rowwise", rms_mxfp8),
    ("nvfp4", "norm_quantize", "rmsnorm", "rowwise", rms_nvfp4),
]

# ============================================================================ timing


def rotation_count(set_bytes, l2):
    """Sets to rotate between so that together they exceed twice the L2 (as qfuse_bench.c)."""
    return max(2, min(64, int(2 * l2 / set_bytes) + 1))


def time_calls(fn, arg_sets, iters, batch):
    """Median microseconds per call: WARMUP calls (compilation included), then `iters` batches of
    `batch` back-to-back calls between two CUDA events, cycling through arg_sets."""
    k = 0
    for _ in range(WARMUP):
        fn(*arg_sets[k % len(arg_sets)])
        k += 1
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        e0.record()
        for _ in range(batch):
            fn(*arg_sets[k % len(arg_sets)])
            k += 1
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / batch)
    return statistics.median(times)


def compiled(fn):
    return torch.compile(fn, dynamic=False)


def raise_recompile_limit():
    """Every shape x variant is its own static graph: lift dynamo's per-function cache limit."""
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 256)


def mismatch(a, b):
    """Fraction of differing bytes between two outputs (tuples compared on their first tensor)."""
    a, b = (a[0], b[0]) if isinstance(a, tuple) else (a, b)
    a, b = a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    return (a != b).float().mean().item()


# ============================================================================ rows


def new_row(kind, recipe, op, norm, dtype, outputs, m, k, n=""):
    return {"kind": kind, "recipe": recipe, "op": op, "norm": norm, "dtype": dtype,
            "outputs": outputs, "M": m, "K": k, "N": n, "note": ""}


def finish_row(row, us, nbytes, flops):
    row["us_median"] = "%.3f" % us
    if nbytes:
        row["bytes"], row["tbps"] = nbytes, "%.4f" % (nbytes / (us * 1e6))
    if flops:
        row["flops"], row["tflops"] = flops, "%.2f" % (flops / (us * 1e6))
    return row


def error_note(exc):
    text = str(exc).strip().splitlines()
    return "error: %s: %s" % (type(exc).__name__, (text[0] if text else "")[:160])


def run_peer(rows, row, fn, arg_sets, args, nbytes, flops):
    """Times fn into row and appends it; a failure appends the row with the error instead."""
    try:
        finish_row(row, time_calls(fn, arg_sets, args.iters, args.batch), nbytes, flops)
    except Exception as exc:  # noqa: BLE001 - a peer must not stop the others
        row["note"] = error_note(exc)
    rows.append(row)
    print_row(row)


def nq_inputs(m, k, l2):
    """Rotated bf16 x sets plus gamma, beta and a device scale (random data)."""
    n = rotation_count(2 * m * k, l2)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    gamma = (1.0 + 0.1 * torch.randn(k, device="cuda")).to(torch.bfloat16)
    beta = (0.02 * torch.randn(k, device="cuda")).to(torch.bfloat16)
    scale = torch.ones(1, device="cuda")
    return xs, gamma, beta, scale


def bench_nq_case(rows, case, inputs, m, k, args):
    recipe, op, norm, outputs, fn = case
    xs, gamma, beta, scale = inputs
    col = outputs != "rowwise"
    arg_sets = [(x, gamma, beta, scale, col) for x in xs]
    nbytes = nq_bytes(recipe, op, norm, col, m, k)
    eager = new_row("peer_eager", recipe, op, norm, "bf16", outputs, m, k)
    run_peer(rows, eager, fn, arg_sets, args, nbytes, 0)
    comp = new_row("peer_compile", recipe, op, norm, "bf16", outputs, m, k)
    cfn = compiled(fn)
    run_peer(rows, comp, cfn, arg_sets, args, nbytes, 0)
    if not comp["note"] and not eager["note"]:
        diff = mismatch(fn(*arg_sets[0]), cfn(*arg_sets[0]))
        comp["note"] = "quantized bytes differ from eager: %.2e" % diff


def bench_gemm_shape(rows, shape, l2, args):
    m, k, n, weight = shape
    sets = rotation_count(m * k + n * k, l2)
    arg_sets = []
    for _ in range(sets):
        a = torch.empty(m, k, device="cuda").uniform_(-200, 200).to(torch.float8_e4m3fn)
        w = torch.empty(n, k, device="cuda").uniform_(-200, 200).to(torch.float8_e4m3fn)
        arg_sets.append((a, w, torch.full((), 1 / 64, device="cuda"),
                         torch.full((), 1 / 32, device="cuda")))
    nbytes, flops = m * k + n * k + 2 * m * n, 2 * m * n * k
    for kind, fn in (("peer_eager", gemm_fp8), ("peer_compile", compiled(gemm_fp8))):
        row = new_row(kind, "fp8_delayed", "gemm_fp8", "", "e4m3", "", m, k, n)
        run_peer(rows, row, fn, arg_sets, args, nbytes, flops)
    del arg_sets
    # FP8 block scaling (numerics 2.5) on operands drawn as qfuse-bench's rows draw them (a GEMM's
    # speed depends on its data): --gemm-data quantized, the quantization of N(0, 1) data (a's
    # 1x128 blocks; the weight's 128x128 tiles for fprop and dgrad, the other operand's 1x128
    # blocks for wgrad); bytes, random bytes with bit 3 clear (never NaN) and every scale 1.0.
    # a's scales [M, K/128] are stored K-block-major, in the layouts torch._scaled_mm takes for
    # cuBLASLt's VEC128 / BLK128x128 modes
    kb = -(-k // 128)
    block_sets = []
    for _ in range(sets):
        if args.gemm_data == "bytes":
            a = (torch.randint(0, 256, (m, k), device="cuda", dtype=torch.uint8) & 0xF7).view(
                torch.float8_e4m3fn)
            w = (torch.randint(0, 256, (n, k), device="cuda", dtype=torch.uint8) & 0xF7).view(
                torch.float8_e4m3fn)
            sa = torch.ones(kb, m, device="cuda").t()
            sw = torch.ones(-(-n // 128), kb, device="cuda").t() if weight else \
                torch.ones(kb, n, device="cuda")
        else:
            a, sa = fp8_block_quantize(gemm_operand(m, k), False)
            w, sw = fp8_block_quantize(gemm_operand(n, k), weight)
            sa = sa.t().contiguous().t()
            sw = sw.t() if weight else sw.t().contiguous()
        block_sets.append((a, w, sa, sw))
    row = new_row("peer_eager", "fp8_block", "gemm_fp8_block", "", "e4m3", "", m, k, n)
    run_peer(rows, row, gemm_fp8, block_sets, args, nbytes, flops)
    row["note"] = row["note"] or ("torch._scaled_mm, 1x128 x %s block scales, operands as "
                                  "qfuse-bench's (%s)" % ("128x128" if weight else "1x128",
                                                          gemm_data_note(args)))
    del block_sets
    bench_block_gemm_emulated(rows, shape, l2, args)


def gemm_data_note(args):
    """The operands' data as the rows' notes name it (--gemm-data, as qfuse-bench's notes)."""
    return "random bytes, unit scales" if args.gemm_data == "bytes" else "quantized N(0, 1) data"


def bench_block_gemm_emulated(rows, shape, l2, args):
    """The emulation peers of the MXFP8 and NVFP4 GEMMs: dequantize + bf16 matmul as one
    torch.compile'd sequence (and eager), on operands drawn as qfuse-bench's rows draw them
    (--gemm-data: the rowwise quantization of N(0, 1) data, or random data bytes with every block
    scale 1.0 and NVFP4 alpha 1). Where the second operand is a weight, also with its bf16 copy
    dequantized once, outside the timing, and kept (op gemm_<family>_wkept, beside qfuse-bench's
    rows of that name)."""
    m, k, n, weight = shape
    table = torch.tensor(E2M1_VALUES, device="cuda")
    quantized = args.gemm_data != "bytes"
    mx_sets, nv_sets = [], []
    for _ in range(rotation_count(m * k + n * k, l2)):
        if quantized:
            mx_sets.append(mxfp8_quantize(gemm_operand(m, k)) +
                           mxfp8_quantize(gemm_operand(n, k)))
            continue
        a = torch.randint(0, 256, (m, k), device="cuda", dtype=torch.uint8) & 0xF7
        w = torch.randint(0, 256, (n, k), device="cuda", dtype=torch.uint8) & 0xF7
        mx_sets.append((a.view(torch.float8_e4m3fn), torch.full((m, k // 32), 127, device="cuda",
                        dtype=torch.uint8), w.view(torch.float8_e4m3fn),
                        torch.full((n, k // 32), 127, device="cuda", dtype=torch.uint8)))
    nbytes = m * k + n * k + (m + n) * (k // 32) + 2 * m * n
    emulated_peers(rows, "mxfp8", "e4m3", gemm_mxfp8_emulated, mx_sets, (m, k, n), args, nbytes)
    if weight:
        kept = [(a, sa, mxfp8_dequant(w, sw)) for a, sa, w, sw in mx_sets]
        emulated_peers(rows, "mxfp8", "e4m3", gemm_mxfp8_wkept, kept, (m, k, n), args, nbytes,
                       "_wkept")
        del kept
    del mx_sets
    for _ in range(rotation_count((m * k + n * k) // 2, l2)):
        if quantized:
            a, sa, amax_a = nvfp4_quantize(gemm_operand(m, k))
            w, sw, amax_w = nvfp4_quantize(gemm_operand(n, k))
            nv_sets.append((a, sa, w, sw, nvfp4_gemm_alpha(amax_a, amax_w), table))
            continue
        a = torch.randint(0, 256, (m, k // 2), device="cuda", dtype=torch.uint8)
        w = torch.randint(0, 256, (n, k // 2), device="cuda", dtype=torch.uint8)
        nv_sets.append((a, torch.full((m, k // 16), 0x38, device="cuda", dtype=torch.uint8), w,
                        torch.full((n, k // 16), 0x38, device="cuda", dtype=torch.uint8),
                        torch.ones((), device="cuda"), table))
    nbytes = (m * k + n * k) // 2 + (m + n) * (k // 16) + 2 * m * n
    emulated_peers(rows, "nvfp4", "e2m1", gemm_nvfp4_emulated, nv_sets, (m, k, n), args, nbytes)
    if weight:
        kept = [(a, sa, nvfp4_dequant(w, sw, t), alpha, t) for a, sa, w, sw, alpha, t in nv_sets]
        emulated_peers(rows, "nvfp4", "e2m1", gemm_nvfp4_wkept, kept, (m, k, n), args, nbytes,
                       "_wkept")


def emulated_peers(rows, family, dtype, fn, arg_sets, shape, args, nbytes, suffix=""):
    """The eager and torch.compile'd rows of one emulation fn (op gemm_<family><suffix>)."""
    m, k, n = shape
    for kind, f in (("peer_eager", fn), ("peer_compile", compiled(fn))):
        row = new_row(kind, family, "gemm_" + family + suffix, "", dtype, "", m, k, n)
        run_peer(rows, row, f, arg_sets, args, nbytes, 2 * m * n * k)
        row["note"] = row["note"] or ("dequantize to bf16 + bf16 matmul, one sequence, %s" % (
            gemm_data_note(args)) + ("; the weight dequantized once, outside the timing"
                                     if suffix else ""))


# ============================================================================ output


def mlp_block(x, gamma, beta, w1, b1, w2, b2):
    """The LayerNorm + SwiGLU MLP of qf_layernorm_mlp_fwd (h = [h1 | h2], a = silu(h1) h2)."""
    xn = torch.nn.functional.layer_norm(x, (x.shape[-1],), gamma, beta, EPS)
    h1, h2 = torch.nn.functional.linear(xn, w1, b1).chunk(2, dim=-1)
    return torch.nn.functional.linear(torch.nn.functional.silu(h1) * h2, w2, b2)


def bench_mlp_step(rows, args):
    """bf16 training step of the block, eager and compiled: forward, then every gradient."""
    m, k, f = STEP_SHAPE_QUICK if args.quick else STEP_SHAPE_FULL
    bf = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(m, k, **bf).requires_grad_()
    params = [torch.randn(k, **bf), torch.randn(k, **bf), torch.randn(2 * f, k, **bf) / 64,
              torch.randn(2 * f, **bf), torch.randn(k, f, **bf) / 64, torch.randn(k, **bf)]
    params = [p.requires_grad_() for p in params]
    dy = torch.randn(m, k, **bf) / 16
    flops = 3 * (2 * m * k * 2 * f + 2 * m * f * k)
    for kind, block in (("peer_eager", mlp_block), ("peer_compile", compiled(mlp_block))):
        def step(block=block):
            y = block(x, *params)
            return torch.autograd.grad(y, [x] + params, dy)
        row = new_row(kind, "bf16", "mlp_step_swiglu", "layernorm", "bf16", "", m, k, f)
        args_one = argparse.Namespace(iters=min(args.iters, 20), batch=1)
        run_peer(rows, row, step, [()], args_one, 0, flops)
        row["note"] = row["note"] or "fwd+bwd in bf16, N = ffn"


def bench_module_step(rows, args):
    """The same step through qfuse.torch.LayerNormMLP compiled (fullgraph), per recipe: kind
    qfuse_torch, recipe the qfuse recipe. Both weights are bumped (in place, by 0) before every
    step, so each step quantizes them again, as qfuse-bench's step does (fp8_delayed: with the
    module's initial scales; the once-per-step update_scales() is not timed)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    try:
        import qfuse.torch as qt
    except Exception as exc:  # noqa: BLE001 - the C rows and peers do not need it
        print("qfuse.torch not importable (%s): no qfuse_torch step rows" % exc)
        return
    m, k, f = STEP_SHAPE_QUICK if args.quick else STEP_SHAPE_FULL
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16).requires_grad_()
    dy = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) / 16
    flops = 3 * (2 * m * k * 2 * f + 2 * m * f * k)
    for recipe in ("fp8_delayed", "fp8_current", "mxfp8", "nvfp4"):
        mlp = qt.LayerNormMLP(k, f, recipe=recipe, activation="swiglu")
        step_mlp = torch.compile(mlp, fullgraph=True)
        params = list(mlp.parameters())

        def step(step_mlp=step_mlp, mlp=mlp, params=params):
            with torch.no_grad():
                mlp.fc1_weight.add_(0)
                mlp.fc2_weight.add_(0)
            y = step_mlp(x)
            return torch.autograd.grad(y, [x] + params, dy)
        row = new_row("qfuse_torch", recipe, "mlp_step_swiglu", "layernorm", "bf16", "", m, k, f)
        run_peer(rows, row, step, [()], argparse.Namespace(iters=min(args.iters, 20), batch=1),
                 0, flops)
        row["note"] = row["note"] or ("qfuse.torch.LayerNormMLP under torch.compile(fullgraph), "
                                      "fwd+bwd, weights quantized every step")
        del mlp, step_mlp
        torch.cuda.empty_cache()


def print_row(r):
    shape = "%s x %s" % (r["M"], r["K"]) + (" -> %s" % r["N"] if r["N"] != "" else "")
    print("| %-12s | %-11s | %-15s | %-9s | %-18s | %-22s | %10s | %8s | %8s | %s" % (
        r["kind"], r["recipe"], r["op"], r["norm"], r["outputs"], shape, r.get("us_median", ""),
        r.get("tbps", ""), r.get("tflops", ""), r["note"]), flush=True)


def header_lines(l2):
    props = torch.cuda.get_device_properties(0)
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return ["gpu=%s, torch=%s, cuda=%s, triton=%s, date=%s" % (
                props.name, torch.__version__, torch.version.cuda, triton_version, date),
            "l2_bytes=%d, timing=median over iters batches of batch back-to-back calls between "
            "two CUDA events / batch; warm-up %d (includes torch.compile)" % (l2, WARMUP)]


def csv_check(path):
    """Raises the OSError that writing the CSV at path would (naming the path, or the folder that
    refuses it), before any timing and GPU or not, leaving nothing behind: an empty path or "-",
    a path ending in "/", an existing path that is not a regular file (a folder, a device such as
    /dev/null), a "." or ".." after a folder that does not exist yet, or where no file can be
    made: the nearest existing folder is tried with a temporary file, made and removed, as
    qfuse-bench's --csv is (docs/tools.md)."""
    if path in ("", "-") or path.endswith("/"):
        raise OSError(errno.EINVAL, "not a file name (a path to a .csv file to write)", path)
    if os.path.lexists(path):
        if not os.path.isfile(path):
            raise OSError(errno.EINVAL, "not a regular file", path)
        with open(path, "a"):  # opened for writing, its bytes kept
            return
    # the nearest existing folder, walked down from the top; once one is missing, a later "."
    # or ".." would name another file when the folders are made (qfuse-bench's rule)
    parts = path.split("/")
    folder = "/" if path.startswith("/") else "."
    for i in range(len(parts) - 1):
        prefix = "/".join(parts[:i + 1]) or "/"
        if not os.path.lexists(prefix):
            if any(p in (".", "..") for p in parts[i + 1:]):
                raise OSError(errno.ENOENT, "a '.' or '..' after a folder that does not exist "
                              "yet", path)
            break
        folder = prefix
    if not os.path.isdir(folder):
        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), folder)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".bench_peers-")
    except OSError as e:
        raise OSError(e.errno, "no file can be made in that folder: %s" % e.strerror,
                      folder) from None
    os.close(fd)
    os.remove(probe)


def write_csv(path, comments, rows):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as f:
        for c in comments:
            f.write("# %s\n" % c)
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in COLUMNS})


def count_arg(text):
    """--iters, --batch: a count from 1 to 1000000, in plain digits (as qfuse-bench's)."""
    if not re.fullmatch(r"[1-9][0-9]{0,6}", text) or int(text) > 1000000:
        raise argparse.ArgumentTypeError("%r: expected an integer in 1..1000000" % text)
    return int(text)


def parse_args(argv):
    p = qf_stdout.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Exit status: 0 success (or no GPU: nothing timed), 1 the CSV could not be "
               "written, 2 bad usage (an option's value, or a --csv that cannot be written: "
               "checked first, GPU or not).")
    p.add_argument("--csv", default="out/bench/peers.csv", help="output CSV")
    p.add_argument("--quick", action="store_true", help="one shape per section, 10 iterations")
    p.add_argument("--iters", type=count_arg, default=None,
                   help="timed batches, 1..1000000 (default 50, quick 10)")
    p.add_argument("--batch", type=count_arg, default=10,
                   help="calls per timed batch, 1..1000000 (default 10)")
    p.add_argument("--section", action="append", choices=("quant", "gemm", "step"),
                   help="only this section (repeatable; default all), as qfuse-bench's")
    p.add_argument("--gemm-data", choices=("quantized", "bytes"), default="quantized",
                   help="operands of the block-scaled GEMM peers, as qfuse-bench's: the "
                        "quantization of N(0, 1) data (default) or random bytes, unit scales")
    args = p.parse_args(argv)
    args.section = args.section or ["quant", "gemm", "step"]
    args.iters = args.iters or (10 if args.quick else 50)
    return args


def main(argv):
    args = parse_args(argv)
    try:
        csv_check(args.csv)
    except OSError as e:
        print("bench_peers.py: --csv %s: %s%s" % (
            args.csv, e.strerror or e, "" if e.filename in (None, args.csv)
            else " (%s)" % e.filename), file=sys.stderr)
        return 2
    if torch is None or not torch.cuda.is_available():
        print("no GPU (or no torch): no PyTorch peers to benchmark")
        return 0
    raise_recompile_limit()
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    torch.manual_seed(0)
    rows = []
    nq_shapes = NQ_SHAPES_QUICK if args.quick else NQ_SHAPES_FULL
    gemm_shapes = GEMM_SHAPES_QUICK if args.quick else GEMM_SHAPES_FULL
    for m, k in nq_shapes if "quant" in args.section else []:
        inputs = nq_inputs(m, k, l2)
        for case in NQ_CASES:
            bench_nq_case(rows, case, inputs, m, k, args)
        del inputs
        torch.cuda.empty_cache()
    for shape in gemm_shapes if "gemm" in args.section else []:
        bench_gemm_shape(rows, shape, l2, args)
        torch.cuda.empty_cache()
    if "step" in args.section:
        bench_mlp_step(rows, args)
        torch.cuda.empty_cache()
        bench_module_step(rows, args)
    try:
        write_csv(args.csv, header_lines(l2), rows)
    except OSError as e:
        print("bench_peers.py: cannot write --csv %s: %s" % (args.csv, e.strerror or e),
              file=sys.stderr)
        return 1
    print("wrote %s" % args.csv)
    return 0


if __name__ == "__main__":
    qf_stdout.run("bench_peers.py", main, sys.argv[1:])
