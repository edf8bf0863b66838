"""torch.optim on tvk: its multi-tensor paths, which `import torchvk` turns on for tvk parameters.

torch.optim picks its foreach path (one kernel per `_foreach_*` op for all parameters, torch's
default on CUDA) for tvk parameters, and takes fused=True (`_fused_sgd_` / `_fused_adam_` /
`_fused_adamw_`: one kernel per step for all parameters); both run on torchvk/aten/foreach.py.
torch only takes plain tensors (`type(p) in _foreach_supported_types`) there, and a tvk
parameter is a TVKTensor, so TVKTensor joins those lists here.

SGD, Adam and AdamW are torch.optim's own classes, kept under these names for older code:
`torchvk.optim.SGD is torch.optim.SGD`.
"""
from __future__ import annotations

from torch.optim import SGD, Adam, AdamW, optimizer
from torch.utils import _foreach_utils

from ._tensor import TVKTensor

__all__ = ["SGD", "Adam", "AdamW"]


def _allow_multi_tensor_paths():
    """Let torch.optim and clip_grad_norm_ choose foreach / fused for tvk tensors (the lists are
    torch's, in torch 2.11 through 2.13)."""
    for module in (optimizer, _foreach_utils):
        types = getattr(module, "_foreach_supported_types", None)
        if types is not None and TVKTensor not in types:
            types.append(TVKTensor)


_allow_multi_tensor_paths()
