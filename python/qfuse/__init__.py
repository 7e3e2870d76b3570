"""qfuse for Python: libqfuse's fake shapes (qfuse.shapes, no torch needed) and, with PyTorch,
its ops as torch.library custom ops (qfuse.ops) and modules (qfuse.torch.LayerNormLinear).

    import qfuse.torch
    layer = qfuse.torch.LayerNormLinear(4096, 14336, recipe="mxfp8").cuda()
    y = torch.compile(layer, fullgraph=True, dynamic=True)(x)
"""
from . import shapes  # noqa: F401 (no torch; libqfuse is loaded at the first query)
from ._lib import QfuseArgumentError, QfuseError  # noqa: F401

__version__ = "0.1.0"
