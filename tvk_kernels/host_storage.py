"""Host (numpy) arrays in a kernel dtype's storage and back: what checks and benchmarks upload.

bf16 has no numpy dtype: it is stored as the upper 16 bits of each float32 (uint16 arrays),
rounded to nearest even. numpy is imported on use: importing the kernels loads no numpy.
"""
from __future__ import annotations


def storage_dtype(dtype: str):
    """The numpy dtype of `dtype` storage (bf16: uint16 words)."""
    import numpy as np  # lazy: importing the kernels loads no numpy

    return {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}[dtype]


def to_storage(x, dtype: str):
    """Values (any float array) -> a numpy array holding them in `dtype` storage."""
    import numpy as np  # lazy: importing the kernels loads no numpy

    if dtype == "float16":
        return x.astype(np.float16)
    if dtype == "bfloat16":
        u = x.astype(np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return x.astype(np.float32)


def from_storage(x, dtype: str):
    """A `dtype` storage array -> its values as float64."""
    import numpy as np  # lazy: importing the kernels loads no numpy

    if dtype == "bfloat16":
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return x.astype(np.float64)
