"""Fake shapes (docs/numerics.md section 4) from libqfuse, for concrete or symbolic sizes.

`outputs(recipe, op, M=..., K=...)` asks libqfuse's generated shape functions which outputs an op
writes; each dim comes back as its formula (`qf_fake_shape_formulas`: "M", "roundup(cdiv(K,32),4)")
and is evaluated here for the sizes given, which may be torch SymInts: the formulas are libqfuse's,
this module only knows the two operators of their notation. Needs no torch and no GPU.
"""
import collections
import ctypes
import os

from . import _lib

Output = collections.namedtuple("Output", "name dtype dims")

_formula_cache = {}


def _hint(v, what="a size"):
    """A concrete int for size v (an int, or a torch SymInt: its example value): libqfuse checks
    the query with it; the output's dims are evaluated with v itself. Anything else (a float, a
    bool, a str) is a TypeError."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    node = getattr(v, "node", None)
    if node is None:
        raise TypeError("qfuse.shapes: %s must be an int (or a torch SymInt), not %r"
                        % (what, v))
    hint = getattr(node, "hint", None)
    if hint is None:
        raise TypeError("qfuse.shapes: %s = %r is a symbolic size without an example value (an "
                        "unbacked SymInt); libqfuse checks the query at one" % (what, v))
    if not isinstance(hint, int) or isinstance(hint, bool):
        raise TypeError("qfuse.shapes: %s = %r has the example value %r, not an int"
                        % (what, v, hint))
    return hint


# The `outputs` bits as this package names them in its messages ("rowwise (1)"), and all of them.
_OUTPUT_NAMES = [("rowwise", _lib.OUT_ROWWISE), ("columnwise", _lib.OUT_COLUMNWISE),
                 ("fp32", _lib.OUT_FP32), ("gated", _lib.OUT_GATED)]
_SAID_BIT = {name: "%s (%d)" % (name, bit) for name, bit in _OUTPUT_NAMES}
_OUTPUT_BITS = sum(bit for _, bit in _OUTPUT_NAMES)  # distinct bits: their sum is their OR


def _is_path(recipe):
    """libqfuse's rule (qf_recipe_is_path): a recipe file's path holds a '/' or ends in .lua."""
    return "/" in recipe or recipe.endswith(".lua")


def _recipe(recipe):
    """A recipe name or .lua path as bytes for libqfuse (a path in the file system's encoding)."""
    if isinstance(recipe, os.PathLike):
        recipe = os.fspath(recipe)
    if not isinstance(recipe, str):
        raise TypeError("qfuse: recipe must be a name or a .lua path (str), not %s"
                        % type(recipe).__name__)
    if "\0" in recipe:
        raise ValueError("qfuse: recipe %r holds a NUL character" % (recipe,))
    return os.fsencode(recipe)


def _abs_path(p):
    """A recipe path made absolute as libqfuse makes it (qf_recipe_file_key): joined to the
    working directory, nothing resolved or normalized; p itself when that directory is gone."""
    if os.path.isabs(p):
        return p
    try:
        return os.path.join(os.getcwdb() if isinstance(p, bytes) else os.getcwd(), p)
    except OSError:
        return p


def _recipe_key(rb):
    """The cache key of recipe bytes rb: a file by its path made absolute (as libqfuse keys it),
    so that a relative path after a chdir is the file it names then."""
    return _abs_path(rb) if _is_path(os.fsdecode(rb)) else rb


def _query(op, role, norm, outputs, M, N, K, dtype):
    """A qf_shape_query; unknown names raise ValueError, naming the choices. A size left out
    (None) goes to libqfuse as 1024, a multiple of every block size, so that the query is checked
    on the sizes given; formulas() refuses it where the op's outputs use that size."""
    def pick(table, what, name):
        try:
            return table[name]
        except (KeyError, TypeError):
            raise ValueError("qfuse.shapes: %s %r is not one of %s" % (what, name,
                                                                       ", ".join(table)))
    def size(what, v):
        if v is None:
            return 1024
        v = _hint(v, what)
        if not -2 ** 63 <= v < 2 ** 63:
            raise ValueError("qfuse.shapes: %s = %d does not fit in int64" % (what, v))
        return v
    out = _hint(outputs, "outputs")
    if out & ~_OUTPUT_BITS or out < 0:
        said = list(_SAID_BIT.values())
        raise ValueError("qfuse.shapes: outputs = %r has bits other than %s and %s"
                         % (outputs, ", ".join(said[:-1]), said[-1]))
    return _lib.ShapeQuery(op=pick(_lib.OPS, "op", op), role=pick(_lib.ROLES, "role", role),
                           norm=pick(_lib.NORMS, "norm", norm), outputs=out, M=size("M", M),
                           N=size("N", N), K=size("K", K), dtype=pick(_lib.DTYPES, "dtype", dtype))


# libqfuse's C names in a refused query's reason, and this package's for the same things: the
# `outputs` bits as _query's own message names them, the ops as formulas() takes them.
_C_TERMS = [("QF_OUT_" + name.upper(), said) for name, said in _SAID_BIT.items()] + sorted(
    (("QF_OP_" + op.upper(), "op '%s'" % op) for op in _lib.OPS), key=lambda t: -len(t[0]))


def _said(e, missing):
    """e in this package's terms: libqfuse's C names of outputs bits and ops as formulas() takes
    them (_C_TERMS), and the sizes the caller left out shown as such in the query ("N=1024" was
    the value libqfuse checked the query at, not one the caller gave)."""
    msg = e.message
    for c, py in _C_TERMS:
        msg = msg.replace(c, py)
    for m in missing:
        msg = msg.replace(" %s=1024" % m, " %s=(not given)" % m, 1)
    return type(e)(e.code, msg)


def _missing(op, missing):
    return ValueError("qfuse.shapes: %s needs %s (its outputs' shapes use %s)"
                      % (op, " and ".join(missing), "them" if len(missing) > 1 else "it"))


def formulas(recipe, op, role="input", norm="none", outputs=0, M=None, N=None, K=None,
             dtype="bf16"):
    """((name, dtype name, (dim formulas...)), ...) of one query, in libqfuse's order. The sizes
    its outputs' shapes use must be given (quantize, norm_quantize, norm_backward: M and K;
    gemm, activation: M and N; dbias: N): one left out is a ValueError, one they do not use is
    checked at 1024.
    Raises QfuseError for a query the recipe refuses (sizes the op uses not positive, not the
    multiples its family needs or more than its kernel holds, no copy asked of a quantizer,
    an `outputs` bit the op does not take, ...; a size, role, norm or dtype the op does not use is
    ignored, as in libqfuse's qf_shape_query; its reason names outputs bits and ops as this
    function takes them), ValueError or TypeError for bad arguments."""
    rb = _recipe(recipe)  # checks the arguments, every call
    q = _query(op, role, norm, outputs, M, N, K, dtype)
    given = {n: v is not None for n, v in (("M", M), ("N", N), ("K", K))}
    # SymInts hashed by their example values
    key = (_recipe_key(rb), q.op, q.role, q.norm, q.outputs, q.dtype,
           tuple(getattr(q, n) if g else None for n, g in given.items()))
    hit = _formula_cache.get(key)
    if hit is not None:
        return hit
    missing = [n for n, g in given.items() if not g]
    out = (_lib.ShapeFormula * 16)()
    n = ctypes.c_int()
    try:
        _lib.check(_lib.lib.qf_fake_shape_formulas(rb, ctypes.byref(q), out, 16,
                                                   ctypes.byref(n)))
    except _lib.QfuseError as e:
        raise _said(e, missing) from None
    res = tuple((out[i].name.decode(), _lib.DTYPE_NAMES[out[i].dtype],
                 tuple(out[i].dims[d].decode() for d in range(out[i].ndim)))
                for i in range(n.value))
    used = [m for m in missing if any(m in f for _, _, dims in res for f in dims)]
    if used:
        raise _missing(op, used)
    if len(_formula_cache) > 4096:
        _formula_cache.clear()
    _formula_cache[key] = res
    return res


_FORMULA_DEPTH = 32  # libqfuse's formulas nest two deep; deeper ones are refused, not recursed


def evaluate(formula, sizes):
    """The value of one formula for sizes {"M": ..., "N": ..., "K": ...} (ints or SymInts)."""
    if not isinstance(formula, str):
        raise TypeError("a shape formula is a str, not %s" % type(formula).__name__)
    pos = [0]

    def expr(depth=0):
        if depth > _FORMULA_DEPTH:
            raise ValueError("bad shape formula %r: nested deeper than %d" % (
                formula if len(formula) <= 80 else formula[:80] + "...", _FORMULA_DEPTH))
        for fn, name in (("roundup", "roundup("), ("cdiv", "cdiv(")):
            if formula.startswith(name, pos[0]):
                pos[0] += len(name)
                a = expr(depth + 1)
                _expect(",")
                b = expr(depth + 1)
                _expect(")")
                if isinstance(b, int) and b <= 0:
                    raise ValueError("bad shape formula %r: %s by %d" % (formula, fn, b))
                c = (a + b - 1) // b
                return c * b if fn == "roundup" else c
        ch = formula[pos[0]:pos[0] + 1]
        if ch and ch in "MNK":
            pos[0] += 1
            if ch not in sizes:
                raise ValueError("shape formula %r needs a value of %s" % (formula, ch))
            return sizes[ch]
        j = pos[0]
        while pos[0] < len(formula) and formula[pos[0]].isdigit():
            pos[0] += 1
        if j == pos[0]:
            raise ValueError("bad shape formula %r" % formula)
        return int(formula[j:pos[0]])

    def _expect(c):
        if formula[pos[0]:pos[0] + 1] != c:
            raise ValueError("bad shape formula %r" % formula)
        pos[0] += 1

    v = expr()
    if pos[0] != len(formula):
        raise ValueError("bad shape formula %r" % formula)
    return v


def outputs(recipe, op, role="input", norm="none", outputs=0, M=None, N=None, K=None,
            dtype="bf16"):
    """[Output(name, dtype name, dims)] of one query, dims evaluated for M, N, K as given (ints
    or SymInts; libqfuse checks the query at their example values); the sizes the op uses must
    be given (formulas)."""
    def hint(v, what):
        return None if v is None else _hint(v, what)
    fs = formulas(recipe, op, role, norm, outputs, hint(M, "M"), hint(N, "N"), hint(K, "K"),
                  dtype)
    sizes = {"M": M, "N": N, "K": K}
    return [Output(name, dt, tuple(evaluate(f, sizes) for f in dims)) for name, dt, dims in fs]


def concrete(recipe, op, role="input", norm="none", outputs=0, M=None, N=None, K=None,
             dtype="bf16"):
    """[Output(name, dtype name, dims)] from qf_fake_shapes itself (concrete ints only; the
    sizes the op uses must be given, as for formulas)."""
    formulas(recipe, op, role, norm, outputs, M, N, K, dtype)  # refuses a size left out
    q = _query(op, role, norm, outputs, M, N, K, dtype)
    out = (_lib.Shape * 16)()
    n = ctypes.c_int()
    _lib.check(_lib.lib.qf_fake_shapes(_recipe(recipe), ctypes.byref(q), out, 16,
                                       ctypes.byref(n)))
    return [Output(out[i].name.decode(), _lib.DTYPE_NAMES[out[i].dtype],
                   tuple(out[i].dims[d] for d in range(out[i].ndim))) for i in range(n.value)]
