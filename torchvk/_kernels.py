"""Glue between tvk tensors and tvk_kernels kernel functions (addresses, shapes, strides)."""
from __future__ import annotations

import torch


def copy(dst, src):
    """dst <- src (broadcast, cast), any strides."""
    raise NotImplementedError(
        f"TorchVK needs the strided copy kernel (tvk_kernels.kernels.elementwise) for a copy "
        f"{src.dtype}{list(src.shape)} stride {src.stride()} -> {dst.dtype}{list(dst.shape)} stride {dst.stride()}")


def fill(t, value):
    raise NotImplementedError(f"TorchVK needs the fill kernel for {t.dtype}{list(t.shape)}")
