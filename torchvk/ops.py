"""Drop-ins with torch's signatures that accept CPU or tvk tensors.

With tvk inputs they are torch's own functions (the ops run on Vulkan through the op
table). With CPU inputs the tensors are moved to tvk (`.to("tvk")`, differentiable), the
op runs on Vulkan, and the result comes back to the CPU: gradients flow back to CPU
leaves too. Mixing is allowed: CPU tensors are uploaded.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ._tensor import TVKTensor

__all__ = ["matmul", "mm", "bmm", "addmm", "linear", "conv1d", "conv2d", "softmax", "log_softmax", "sum", "mean",
           "amax", "max", "argmax", "add", "sub", "mul", "div", "relu", "gelu", "silu", "sigmoid", "tanh", "exp",
           "log", "sqrt", "layer_norm", "batch_norm", "cross_entropy", "nll_loss", "mse_loss", "max_pool2d",
           "avg_pool2d", "adaptive_avg_pool2d", "embedding", "dropout", "where", "cat", "stack", "tril", "triu",
           "var", "std", "scaled_dot_product_attention"]


def _to_tvk(x):
    if isinstance(x, torch.Tensor) and not isinstance(x, TVKTensor):
        return x.to("tvk"), True
    if isinstance(x, (list, tuple)):
        items = [_to_tvk(y) for y in x]
        return type(x)(i[0] for i in items), any(i[1] for i in items)
    return x, False


def _to_cpu(x):
    if isinstance(x, TVKTensor):
        return x.to("cpu")
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # torch.return_types
        return type(x)(tuple(_to_cpu(y) for y in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu(y) for y in x)
    return x


def _dropin(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        moved = False
        new_args = []
        for a in args:
            a, m = _to_tvk(a)
            new_args.append(a)
            moved |= m
        new_kwargs = {}
        for k, v in kwargs.items():
            v, m = _to_tvk(v)
            new_kwargs[k] = v
            moved |= m
        out = fn(*new_args, **new_kwargs)
        return _to_cpu(out) if moved else out

    wrapper.__doc__ = f"torchvk drop-in for {getattr(fn, '__module__', 'torch')}.{fn.__name__}: CPU or tvk inputs.\n\n" \
        + (fn.__doc__ or "")
    return wrapper


matmul = _dropin(torch.matmul)
mm = _dropin(torch.mm)
bmm = _dropin(torch.bmm)
addmm = _dropin(torch.addmm)
linear = _dropin(F.linear)
conv1d = _dropin(F.conv1d)
conv2d = _dropin(F.conv2d)
softmax = _dropin(F.softmax)
log_softmax = _dropin(F.log_softmax)
sum = _dropin(torch.sum)  # noqa: A001
mean = _dropin(torch.mean)
amax = _dropin(torch.amax)
max = _dropin(torch.max)  # noqa: A001
argmax = _dropin(torch.argmax)
add = _dropin(torch.add)
sub = _dropin(torch.sub)
mul = _dropin(torch.mul)
div = _dropin(torch.div)
relu = _dropin(F.relu)
gelu = _dropin(F.gelu)
silu = _dropin(F.silu)
sigmoid = _dropin(torch.sigmoid)
tanh = _dropin(torch.tanh)
exp = _dropin(torch.exp)
log = _dropin(torch.log)
sqrt = _dropin(torch.sqrt)
layer_norm = _dropin(F.layer_norm)
batch_norm = _dropin(F.batch_norm)
cross_entropy = _dropin(F.cross_entropy)
nll_loss = _dropin(F.nll_loss)
mse_loss = _dropin(F.mse_loss)
max_pool2d = _dropin(F.max_pool2d)
avg_pool2d = _dropin(F.avg_pool2d)
adaptive_avg_pool2d = _dropin(F.adaptive_avg_pool2d)
embedding = _dropin(F.embedding)
dropout = _dropin(F.dropout)
where = _dropin(torch.where)
cat = _dropin(torch.cat)
stack = _dropin(torch.stack)
tril = _dropin(torch.tril)
triu = _dropin(torch.triu)
var = _dropin(torch.var)
std = _dropin(torch.std)
scaled_dot_product_attention = _dropin(F.scaled_dot_product_attention)
