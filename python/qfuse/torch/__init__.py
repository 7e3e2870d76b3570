"""PyTorch modules over libqfuse's fused ops (docs/python.md)."""
from .._lib import import_torch

torch = import_torch("qfuse.torch")

from .modules import LayerNormLinear, LayerNormMLP, check_group  # noqa: F401


def update_scales(model, group=None):
    """Delayed scaling's once-per-step update of every qfuse module in `model` (its amaxes,
    MAX-reduced over the torch.distributed `group` when one is given, into the histories, new
    scales; numerics 2.1): call it after each optimizer step. Modules of other recipes have
    nothing to update."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError("qfuse.torch.update_scales: model must be a torch.nn.Module, not %r"
                        % (model,))
    check_group(group)
    for m in model.modules():
        if isinstance(m, (LayerNormLinear, LayerNormMLP)):
            m.update_scales(group)
