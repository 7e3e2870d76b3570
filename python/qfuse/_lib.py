"""ctypes view of libqfuse (runtime/qfuse.h): the structs the ops take, the functions, the error
type, and one context per CUDA device. Needs no torch.

The library is found, in order, at $QFUSE_LIB, next to this file (an installed package), or at
build/libqfuse.so of the checkout this file lives in (`make` builds it).
"""
import ctypes
import os
import threading

MAX_DIMS = 8  # QF_MAX_DIMS
SLOT_COUNT = 10  # QF_SLOT_COUNT

# qf_formats.h enums (ORDER DTYPE etc.); append-only in C, so the values are stable.
DTYPES = {"fp32": 0, "fp16": 1, "bf16": 2, "e4m3": 3, "e5m2": 4, "e8m0": 5, "e2m1": 6}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
NORMS = {"none": 0, "layernorm": 1, "rmsnorm": 2}
ROLES = {"input": 0, "weight": 1, "grad": 2}
OPS = {"norm_quantize": 0, "quantize": 1, "scale_update": 2, "gemm": 3, "norm_backward": 4,
       "dbias": 5, "activation": 6}
OUT_ROWWISE, OUT_COLUMNWISE, OUT_FP32, OUT_GATED = 1, 2, 4, 8
COPY_ROWWISE, COPY_COLUMNWISE = 0, 1
LAYOUT_COMPACT, LAYOUT_SWIZZLED = 0, 1
SLOTS = ("rowwise_data", "rowwise_scale_inv", "columnwise_data", "columnwise_scale_inv", "amax",
         "scale_inv", "amax_rowwise", "amax_columnwise", "mu", "rsigma")  # qf_slot order

STATUS = ("QF_OK", "QF_ERR_INVALID_ARG", "QF_ERR_UNSUPPORTED", "QF_ERR_NO_DEVICE", "QF_ERR_CUDA",
          "QF_ERR_NVRTC", "QF_ERR_CUBLAS", "QF_ERR_CACHE", "QF_ERR_OUT_OF_MEMORY",
          "QF_ERR_NOT_FOUND", "QF_ERR_INTERNAL")


def import_torch(module):
    """PyTorch, imported for `module` (qfuse.ops, qfuse.torch), or an ImportError that names the
    version pyproject.toml asks for; qfuse.shapes needs no torch."""
    try:
        import torch
    except ImportError as e:
        raise ImportError("%s needs PyTorch 2.9 or newer (pip install 'torch>=2.9'); qfuse.shapes "
                          "works without it" % module) from e
    return torch


class QfuseError(RuntimeError):
    """A libqfuse call failed: .status is its qf_status name (.code the number), the message
    qf_last_error()'s (.message)."""

    def __init__(self, status, message):
        self.code, self.message = status, message
        self.status = STATUS[status] if 0 <= status < len(STATUS) else str(status)
        super().__init__("%s (%s)" % (message, self.status))

    def __reduce__(self):  # pickle and copy: the constructor's arguments, then the attributes
        return type(self), (self.code, self.message), self.__dict__


class QfuseArgumentError(QfuseError, ValueError):
    """A libqfuse call refused its arguments (QF_ERR_INVALID_ARG): a QfuseError and a
    ValueError, as Python's own argument errors are."""


# Shown (and pickled) by the names the package documents and exports: qfuse.QfuseError.
QfuseError.__module__ = QfuseArgumentError.__module__ = "qfuse"


class Tensor(ctypes.Structure):  # qf_tensor
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("dims", ctypes.c_int64 * MAX_DIMS)]


class Shape(ctypes.Structure):  # qf_shape
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("dims", ctypes.c_int64 * 4), ("bytes", ctypes.c_uint64)]


class ShapeFormula(ctypes.Structure):  # qf_shape_formula
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("dims", ctypes.c_char_p * 4)]


class ShapeQuery(ctypes.Structure):  # qf_shape_query (registry.h)
    _fields_ = [("op", ctypes.c_int), ("role", ctypes.c_int), ("norm", ctypes.c_int),
                ("outputs", ctypes.c_uint), ("M", ctypes.c_int64), ("N", ctypes.c_int64),
                ("K", ctypes.c_int64), ("dtype", ctypes.c_int)]


class Quantized(ctypes.Structure):  # qf_quantized
    _fields_ = [("t", Tensor * SLOT_COUNT), ("layout", ctypes.c_int)]


class Operand(ctypes.Structure):  # qf_operand
    _fields_ = [("q", ctypes.POINTER(Quantized)), ("copy", ctypes.c_int)]


class NormDesc(ctypes.Structure):  # qf_norm_desc
    _fields_ = [("norm", ctypes.c_int), ("zero_centered_gamma", ctypes.c_int),
                ("eps", ctypes.c_float), ("gamma", Tensor), ("beta", Tensor)]


class Rng(ctypes.Structure):  # qf_rng
    _fields_ = [("seed", ctypes.c_uint64), ("offset", ctypes.c_uint64)]


class GemmOpts(ctypes.Structure):  # qf_gemm_opts
    _fields_ = [("accumulate", ctypes.c_int), ("b_dequantized", ctypes.POINTER(Tensor)),
                ("reserved", ctypes.c_int * 4)]


class NormGrads(ctypes.Structure):  # qf_norm_grads
    _fields_ = [("dx", Tensor), ("dgamma", Tensor), ("dbeta", Tensor)]


class WeightKey(ctypes.Structure):  # qf_weight_key
    _fields_ = [("data", ctypes.c_void_p * 2), ("kept", ctypes.c_void_p * 4),
                ("version", ctypes.c_uint64),
                ("recipe", ctypes.c_void_p), ("valid", ctypes.c_int)]


class LnLinear(ctypes.Structure):  # qf_ln_linear
    _fields_ = [("norm", NormDesc), ("weight", Tensor), ("bias", Tensor),
                ("x_scale", ctypes.c_void_p), ("w_scale", ctypes.c_void_p), ("xq", Quantized),
                ("wq", Quantized), ("wq_bf16", Tensor * 2), ("weight_changed", ctypes.c_int),
                ("weight_version", ctypes.c_uint64), ("cached", WeightKey)]


class LnLinearGrads(ctypes.Structure):  # qf_ln_linear_grads
    _fields_ = [("dyq", Quantized), ("dy_scale", ctypes.c_void_p), ("rng", Rng),
                ("dxn", Tensor), ("norm", NormGrads), ("dweight", Tensor),
                ("accumulate_wgrad", ctypes.c_int), ("defer_wgrad", ctypes.c_int),
                ("dbias", Tensor)]


class LnMlp(ctypes.Structure):  # qf_ln_mlp
    _fields_ = [("norm", NormDesc), ("act", ctypes.c_int), ("w1", Tensor), ("b1", Tensor),
                ("w2", Tensor), ("b2", Tensor), ("x_scale", ctypes.c_void_p),
                ("w1_scale", ctypes.c_void_p), ("a_scale", ctypes.c_void_p),
                ("w2_scale", ctypes.c_void_p), ("xq", Quantized), ("w1q", Quantized),
                ("w2q", Quantized), ("w1q_bf16", Tensor * 2), ("w2q_bf16", Tensor * 2),
                ("aq", Quantized), ("h", Tensor), ("a", Tensor),
                ("weight_changed", ctypes.c_int), ("weight_version", ctypes.c_uint64),
                ("cached", WeightKey)]


class LnMlpGrads(ctypes.Structure):  # qf_ln_mlp_grads
    _fields_ = [("dyq", Quantized), ("dhq", Quantized), ("dy_scale", ctypes.c_void_p),
                ("dh_scale", ctypes.c_void_p), ("rng_dy", Rng), ("rng_dh", Rng), ("da", Tensor),
                ("dh", Tensor), ("dxn", Tensor), ("norm", NormGrads), ("dw1", Tensor),
                ("dw2", Tensor), ("accumulate_wgrad", ctypes.c_int), ("db1", Tensor),
                ("db2", Tensor)]


class RecipeInfo(ctypes.Structure):  # qf_recipe_info
    _fields_ = [("family", ctypes.c_int), ("fmt", ctypes.c_int * 3),
                ("amax_history_len", ctypes.c_int64), ("reserved", ctypes.c_int * 8)]



def _candidates():
    env = os.environ.get("QFUSE_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "libqfuse.so"),
            os.path.join(here, "..", "..", "build", "libqfuse.so")]


def _load():
    env = os.environ.get("QFUSE_LIB")
    if env and not os.path.isfile(env):
        raise OSError("QFUSE_LIB=%s is not a file: point it at a libqfuse.so, or unset it" % env)
    tried = []
    for path in _candidates():
        if os.path.isfile(path):
            try:
                dll = ctypes.CDLL(path)
            except OSError as e:
                raise OSError("cannot load %s: %s" % (path, e)) from e
            if not hasattr(dll, "qf_dequantized_dims"):  # the newest function these structs need
                raise OSError("%s is not a libqfuse of this version (no qf_dequantized_dims):"
                              " rebuild it with `make`" % path)
            return dll
        tried.append(path)
    raise OSError("libqfuse.so not found (looked at %s): run `make` in the qfuse checkout, "
                  "install the package with pip, or set QFUSE_LIB" % ", ".join(tried))


_SIGNATURES = {
    "qf_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "qf_last_error": (ctypes.c_char_p, []),
    "qf_ctx_init": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]),
    "qf_ctx_init_host": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]),
    "qf_ctx_free": (None, [ctypes.c_void_p]),
    "qf_ctx_arch": (ctypes.c_int, [ctypes.c_void_p]),
    "qf_fake_shapes": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ShapeQuery),
                                      ctypes.POINTER(Shape), ctypes.c_int,
                                      ctypes.POINTER(ctypes.c_int)]),
    "qf_fake_shape_formulas": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ShapeQuery),
                                              ctypes.POINTER(ShapeFormula), ctypes.c_int,
                                              ctypes.POINTER(ctypes.c_int)]),
    "qf_recipe_query": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(RecipeInfo)]),
    "qf_family_name": (ctypes.c_char_p, [ctypes.c_int]),
    "qf_gemm_scale_layout": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_int)]),
    "qf_quantize": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                   ctypes.POINTER(Tensor), ctypes.POINTER(NormDesc),
                                   ctypes.c_void_p, ctypes.POINTER(Rng),
                                   ctypes.POINTER(Quantized), ctypes.c_void_p]),
    "qf_gemm_ex": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(Operand),
                                  ctypes.POINTER(Operand), ctypes.POINTER(Tensor),
                                  ctypes.POINTER(Tensor), ctypes.POINTER(GemmOpts),
                                  ctypes.c_void_p]),
    "qf_dequantize": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                     ctypes.POINTER(Operand), ctypes.POINTER(Tensor),
                                     ctypes.c_void_p]),
    "qf_dequantized_dims": (ctypes.c_int, [ctypes.POINTER(Quantized), ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_int64 * 2)]),
    "qf_scale_update": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                       ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_void_p]),
    "qf_layernorm_linear_fwd": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p,
                                               ctypes.POINTER(Tensor), ctypes.POINTER(LnLinear),
                                               ctypes.POINTER(Tensor), ctypes.c_void_p]),
    "qf_layernorm_mlp_fwd": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p,
                                            ctypes.POINTER(Tensor), ctypes.POINTER(LnMlp),
                                            ctypes.POINTER(Tensor), ctypes.c_void_p]),
    "qf_layernorm_mlp_writes_a": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p,
                                                 ctypes.c_int64, ctypes.c_int64]),
    "qf_layernorm_mlp_bwd": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p,
                                            ctypes.POINTER(Tensor), ctypes.POINTER(Tensor),
                                            ctypes.POINTER(LnMlp), ctypes.POINTER(LnMlpGrads),
                                            ctypes.c_void_p]),
    "qf_layernorm_linear_bwd": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p,
                                               ctypes.POINTER(Tensor), ctypes.POINTER(Tensor),
                                               ctypes.POINTER(LnLinear),
                                               ctypes.POINTER(LnLinearGrads), ctypes.c_void_p]),
}


# qf_amax_reduce_fn: qf_status (*)(void *user, float *amax, void *stream)
AMAX_REDUCE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_SIGNATURES["qf_set_amax_reduce"] = (None, [AMAX_REDUCE_FN, ctypes.c_void_p])
_SIGNATURES["qf_get_amax_reduce"] = (AMAX_REDUCE_FN, [ctypes.POINTER(ctypes.c_void_p)])


class _Lib:
    """The loaded library with typed functions, loaded on first use."""

    def __init__(self):
        self._dll = None
        self._lock = threading.Lock()

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        with self._lock:
            if self._dll is None:
                dll = _load()
                for fn, (res, args) in _SIGNATURES.items():
                    f = getattr(dll, fn)
                    f.restype, f.argtypes = res, args
                self._dll = dll
        return getattr(self._dll, name)


lib = _Lib()


def check(status, what=""):
    """Raises QfuseError for a failed qf_status (QfuseArgumentError for QF_ERR_INVALID_ARG),
    with qf_last_error()'s message."""
    if status != 0:
        msg = (lib.qf_last_error() or b"").decode(errors="replace")
        invalid = 0 <= status < len(STATUS) and STATUS[status] == "QF_ERR_INVALID_ARG"
        raise (QfuseArgumentError if invalid else QfuseError)(
            status, msg or what or "libqfuse call failed")


_contexts = {}
_ctx_lock = threading.Lock()


def context(device):
    """The qf_ctx_t of CUDA device `device` (an int), created on first use and kept for the
    process (qf_ctx_init binds the device's primary context, the one PyTorch uses)."""
    with _ctx_lock:
        ctx = _contexts.get(device)
        if ctx is None:
            p = ctypes.c_void_p()
            check(lib.qf_ctx_init(ctypes.byref(p), int(device)))
            ctx = _contexts[device] = p
        return ctx


def host_context(arch=90):
    """A device-less context for compute capability `arch`: ops check their arguments and
    return QF_ERR_NO_DEVICE instead of launching (numerics-free argument checks without a GPU).
    Owned by the caller: free it with lib.qf_ctx_free."""
    p = ctypes.c_void_p()
    check(lib.qf_ctx_init_host(ctypes.byref(p), int(arch)))
    return p


_host_contexts = {}


def checking_context(arch):
    """The device-less context (host_context) of compute capability `arch` that the ops' fake
    implementations check their arguments against: created on first use and kept for the
    process (not to be freed)."""
    with _ctx_lock:
        ctx = _host_contexts.get(arch)
        if ctx is None:
            ctx = _host_contexts[arch] = host_context(arch)
        return ctx


def c_tensor(data_ptr, dtype, dims):
    """A qf_tensor of a device pointer, a qfuse dtype name and its dims."""
    t = Tensor()
    t.data = data_ptr or None
    t.dtype = DTYPES[dtype]
    t.ndim = len(dims)
    for i, d in enumerate(dims):
        t.dims[i] = int(d)
    return t
