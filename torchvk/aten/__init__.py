"""The aten op table, one module per op group; importing this package fills it.

An op group whose kernel module cannot be imported (missing from this build) is skipped
with a warning: its ops then raise NotImplementedError like any op without a kernel.
"""
import importlib
import logging

from . import copies, factories, views  # noqa: F401

GROUPS = ("elementwise", "matmul", "reductions", "softmax", "losses", "embedding", "conv", "rnn", "rnn_layers", "norm", "pool", "rng",
          "misc", "sorting", "indexing", "one_hot", "resample", "attention", "shape_ops",
          "adaptive_max_pool", "amp", "foreach", "composites", "counting", "ctc", "distributions", "linalg")
unavailable: dict = {}

for _name in GROUPS:
    try:
        importlib.import_module(f"{__name__}.{_name}")
    except (ImportError, AttributeError) as _e:  # a kernel module (or an aten op) missing here
        unavailable[_name] = str(_e)
        logging.getLogger("torchvk").warning("TorchVK: op group %s is unavailable: %s", _name, _e)
