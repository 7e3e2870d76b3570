"""PyTorch modules over libqfuse's fused ops (docs/python.md)."""
from .modules import LayerNormLinear, LayerNormMLP  # noqa: F401
