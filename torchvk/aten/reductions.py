"""Reductions on tvk_kernels.kernels.reduce: sum, mean, amax/amin, max/min (values + indices),
argmax/argmin, prod, var/std, norms; plus cat/stack (copies into views)."""
from __future__ import annotations

import torch

from tvk_kernels.kernels import reduce as reduce_kernels
from tvk_kernels.kernels import scan as scan_kernels

from ..op_registry import register, register_decomposition
from .._repeat import FreshOutputs, mark, offer
from .._tensor import TVKTensor, alias, new_tensor
from ._util import addr, dev, norm_dims
from .copies import KeptCopy, cast, contig, copies_into_fresh, device_copy, fill
from .elementwise import ew, ne

aten = torch.ops.aten


_KERNEL_DTYPE = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_HALF_RESULTS = (torch.float16, torch.bfloat16)


def _input(t):
    """A float32/float16/bfloat16 view the kernel can read (casts other dtypes)."""
    if t.dtype not in _KERNEL_DTYPE:
        t = cast(t, torch.float32)
    return t


# what a reduction over nothing gives; max/min/argmax/argmin have none, and torch refuses them
_EMPTY_RESULT = {"sum": 0.0, "mean": float("nan"), "prod": 1.0}


def _refuse_empty(name, self, dim):
    """torch's error for max/min/amax/amin/argmax/argmin over an empty range (`dim` None or (): all)."""
    if self.numel():
        return
    if dim is None or (not isinstance(dim, int) and not list(dim)):
        if name in ("argmax", "argmin"):
            raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                           f"Specify the reduction dim with the 'dim' argument.")
    for d in norm_dims(self.dim(), dim):
        if self.dim() and self.shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _reduce(op, self, dims, keepdim, out_dtype=None, empty_result=None):
    dims = norm_dims(self.dim(), dims)
    if op == "sum" and not self.dtype.is_floating_point:
        res = _int_sum(self, dims, keepdim)
        return res if out_dtype in (None, res.dtype) else cast(res, out_dtype)
    x = _input(self)
    shape = list(self.shape)
    out_shape = [1 if i in dims else s for i, s in enumerate(shape)] if keepdim else \
        [s for i, s in enumerate(shape) if i not in dims]
    if self.dim() == 0:
        dims, out_shape = [], []
    idx = op in ("argmax", "argmin")
    # a float16/bfloat16 result is written so by the kernel (rounded once from its float32 value), not cast after
    res_dtype = torch.int64 if idx else out_dtype if out_dtype in _HALF_RESULTS else torch.float32
    res = new_tensor(out_shape, res_dtype, dev(self))
    if res.numel():
        if empty_result is None:
            empty_result = _EMPTY_RESULT.get(op)
        if x.numel() == 0 and empty_result is not None:
            fill(res, empty_result)
        else:
            d, geometry = dev(self), (tuple(x.shape) or (1,), tuple(x.stride()) or (1,), dims if self.dim() else [0])
            res_shape, kernel_dtype = list(res.shape), _KERNEL_DTYPE[x.dtype]
            written = _KERNEL_DTYPE.get(res_dtype, "float32")  # argmax/argmin: int64 indices, their own path

            def run(operands):
                out = new_tensor(res_shape, res_dtype, d)
                reduce_kernels.reduce(d, op, addr(operands[0]), addr(out), *geometry, keepdim, dtype=kernel_dtype,
                                      out_dtype=written)
                return out

            begun = mark()
            reduce_kernels.reduce(d, op, addr(x), addr(res), *geometry, keepdim, dtype=kernel_dtype, out_dtype=written)
            if out_dtype is None or out_dtype == res.dtype:
                offer(begun, res, (x,), run)  # kept where x is the op's own input (torchvk/_repeat.py)
    if out_dtype is not None and out_dtype != res.dtype:
        res = cast(res, out_dtype)
    return res


def _int_sum(self, dims, keepdim):
    """An integer or bool sum, exact in int64 (float32 partial sums lose digits past 2**24): the
    reduced dims moved last into an int64 copy, one scan along them, its last column."""
    dims = dims if self.dim() else []
    kept = [d for d in range(self.dim()) if d not in dims]
    out_shape = [1 if d in dims else s for d, s in enumerate(self.shape)] if keepdim else \
        [self.shape[d] for d in kept]
    n = 1
    for d in dims:
        n *= self.shape[d]
    res = new_tensor(out_shape, torch.int64, dev(self))
    if res.numel() == 0:
        return res
    if n == 0:
        return fill(res, 0)
    x = contig(cast(self.permute(kept + dims), torch.int64))
    rows = res.numel()
    scanned = new_tensor([rows, n], torch.int64, dev(self))
    scan_kernels.scan(dev(self), "sum", addr(x), addr(scanned), rows, n, 1, dtype="int64")
    return device_copy(res, scanned[:, n - 1].view(res.shape))


def _sum_dtype(self, dtype):
    if dtype is not None:
        return dtype
    if not self.dtype.is_floating_point:  # bool and every integer dtype, as torch
        return torch.int64
    return self.dtype


@register(aten.sum.dim_IntList)
def sum_dim(self, dim, keepdim=False, *, dtype=None):
    return _reduce("sum", self, dim, keepdim, _sum_dtype(self, dtype))


@register(aten.sum.default)
def sum_all(self, *, dtype=None):
    return _reduce("sum", self, None, False, _sum_dtype(self, dtype))


@register(aten.mean.dim)
def mean_dim(self, dim, keepdim=False, *, dtype=None):
    return _reduce("mean", self, dim, keepdim, dtype or self.dtype)


@register(aten.mean.default)
def mean_all(self, *, dtype=None):
    return _reduce("mean", self, None, False, dtype or self.dtype)


@register(aten.prod.default)
def prod_all(self, *, dtype=None):
    return _reduce("prod", self, None, False, _sum_dtype(self, dtype))


@register(aten.prod.dim_int)
def prod_dim(self, dim, keepdim=False, *, dtype=None):
    return _reduce("prod", self, [dim], keepdim, _sum_dtype(self, dtype))


@register(aten.amax.default)
def amax(self, dim=(), keepdim=False):
    _refuse_empty("amax", self, dim)
    return _reduce("max", self, dim, keepdim, self.dtype)


@register(aten.amin.default)
def amin(self, dim=(), keepdim=False):
    _refuse_empty("amin", self, dim)
    return _reduce("min", self, dim, keepdim, self.dtype)


@register(aten.max.default)
def max_all(self):
    _refuse_empty("max", self, None)
    return _reduce("max", self, None, False, self.dtype)


@register(aten.min.default)
def min_all(self):
    _refuse_empty("min", self, None)
    return _reduce("min", self, None, False, self.dtype)


def _minmax_dim(op, self, dim, keepdim):
    _refuse_empty(op, self, dim)
    dims = norm_dims(self.dim(), [dim])
    x = _input(self)
    shape = list(self.shape)
    out_shape = [1 if i in dims else s for i, s in enumerate(shape)] if keepdim else \
        [s for i, s in enumerate(shape) if i not in dims]
    if self.dim() == 0:
        out_shape = []
    vals = new_tensor(out_shape, torch.float32, dev(self))
    idx = new_tensor(out_shape, torch.int64, dev(self))
    if vals.numel():
        reduce_kernels.reduce(dev(self), op, addr(x), addr(vals), tuple(x.shape) or (1,), tuple(x.stride()) or (1,),
                  dims if self.dim() else [0], keepdim, dtype=_KERNEL_DTYPE[x.dtype],
                  index_addr=addr(idx))
    return cast(vals, self.dtype), idx


@register(aten.max.dim)
def max_dim(self, dim, keepdim=False):
    return _minmax_dim("max", self, dim, keepdim)


@register(aten.min.dim)
def min_dim(self, dim, keepdim=False):
    return _minmax_dim("min", self, dim, keepdim)


@register(aten.argmax.default)
def argmax(self, dim=None, keepdim=False):
    if self.dtype == torch.bool:  # as torch on every device
        raise RuntimeError("argmax(): does not support bool input")
    _refuse_empty("argmax", self, dim)
    if dim is None:
        r = _reduce("argmax", self.reshape(-1) if self.is_contiguous() else self, None, False)
        return r.reshape([1] * self.dim()) if keepdim else r
    return _reduce("argmax", self, [dim], keepdim)


@register(aten.argmin.default)
def argmin(self, dim=None, keepdim=False):
    if self.dtype == torch.bool:  # as torch on every device
        raise RuntimeError("argmin(): does not support bool input")
    _refuse_empty("argmin", self, dim)
    if dim is None:
        r = _reduce("argmin", self, None, False)
        return r.reshape([1] * self.dim()) if keepdim else r
    return _reduce("argmin", self, [dim], keepdim)


@register(aten.count_nonzero.dim_IntList)
def count_nonzero(self, dim):
    return _reduce("sum", ne(self, 0), dim, False, torch.int64)


def _any_all_dtype(self):
    return torch.uint8 if self.dtype == torch.uint8 else torch.bool  # uint8 stays uint8, as in torch


@register(aten.any.default, aten.any.dim, aten.any.dims)
def any_(self, dim=None, keepdim=False):
    return _reduce("max", ne(self, 0), None if dim is None else dim, keepdim, _any_all_dtype(self), empty_result=0.0)


@register(aten.all.default, aten.all.dim, aten.all.dims)
def all_(self, dim=None, keepdim=False):
    return _reduce("min", ne(self, 0), None if dim is None else dim, keepdim, _any_all_dtype(self), empty_result=1.0)


def _var(self, dim, correction, keepdim):
    if not self.dtype.is_floating_point:  # torch's meta kernel lets integers through, its CPU one does not
        raise RuntimeError(f"std and var only support floating point and complex dtypes, got {self.dtype}; "
                           f"convert the input with .float() first")

    dims = norm_dims(self.dim(), dim)
    n = 1
    for d in dims:
        n *= self.shape[d] if self.dim() else 1
    c = 1 if correction is None else correction
    mean = _reduce("mean", self, dims, True, torch.float32)
    dev2 = _reduce("sum", ew("square", ew("sub", self, mean, scalars=(1,))), dims, keepdim, torch.float32)
    var = ew("div", dev2, float(max(n - c, 0)))
    return var, (mean if keepdim else mean.squeeze(dims) if dims and self.dim() else mean.reshape(var.shape))


@register(aten.var.correction)
def var(self, dim=None, *, correction=None, keepdim=False):
    return cast(_var(self, dim, correction, keepdim)[0], self.dtype)


@register(aten.std.correction)
def std(self, dim=None, *, correction=None, keepdim=False):
    return cast(ew("sqrt", _var(self, dim, correction, keepdim)[0]), self.dtype)


@register(aten.var_mean.correction)
def var_mean(self, dim=None, *, correction=None, keepdim=False):
    v, m = _var(self, dim, correction, keepdim)
    return cast(v, self.dtype), cast(m, self.dtype)


@register(aten.std_mean.correction)
def std_mean(self, dim=None, *, correction=None, keepdim=False):
    v, m = _var(self, dim, correction, keepdim)
    return cast(ew("sqrt", v), self.dtype), cast(m, self.dtype)


# norms: torch's decompositions into the ops above and elementwise ones
register_decomposition(aten.linalg_vector_norm.default, aten.norm.Scalar,
                       aten.norm.ScalarOpt_dim, aten.logsumexp.default)


def foreach_norm_per_tensor(self, ord=2, dtype=None):
    """aten._foreach_norm one tensor at a time (aten/foreach.py declares the op: its fused kernel first)."""
    out = []
    for t in self:
        if ord == 2:
            out.append(ew("sqrt", _reduce("sum", ew("square", t), None, False, torch.float32)))
        elif ord == float("inf"):
            out.append(_reduce("max", ew("abs", t), None, False, t.dtype))
        elif ord == 1:
            out.append(_reduce("sum", ew("abs", t), None, False, t.dtype))
        else:
            raise NotImplementedError(f"TorchVK: _foreach_norm with ord={ord}")
    return out


# ------------------------------------------------------------------ cat / stack
@register(aten.cat.default)
def cat(tensors, dim=0):
    begun = mark()
    ts = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)]
    if not ts:
        return new_tensor([0], tensors[0].dtype, dev(tensors[0]))
    ref = ts[0]
    dim = dim % ref.dim()
    dtype = ref.dtype
    for t in ts[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    size = list(ref.shape)
    size[dim] = sum(t.shape[dim] for t in ts)
    out = new_tensor(size, dtype, dev(ref))
    stride, step = out.stride(), out.stride()[dim]
    off, pieces, copies = 0, [], []
    for t in ts:
        n = t.shape[dim]
        if n and t.numel():  # out.narrow(dim, off, n), made here: a view through the dispatcher costs more than its copy
            if t._tvk.device is not out._tvk.device:
                raise RuntimeError(f"copy between tvk devices {t.device} and {out.device} is not supported")
            pieces.append(t)
            copies.append(KeptCopy(alias(out, t.shape, stride, off * step), t))
        off += n
    if begun is not None:
        offer(begun, out, tuple(pieces), FreshOutputs((out,), copies_into_fresh(copies)))
    return out


@register(aten.stack.default)
def stack(tensors, dim=0):
    dim = dim % (tensors[0].dim() + 1)
    return cat([t.unsqueeze(dim) for t in tensors], dim)
