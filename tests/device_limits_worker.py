"""Big tensors under the minimum-limits profile (TVK_DEVICE_LIMITS=minimum), each op against the CPU.

Run by tests/test_device_limits.py in a process of its own (the profile is read when the device
opens). Every case's data is past 2^26 elements or past 65535 rows, workgroups or batches: under
Vulkan's minimums (65535 workgroups a dimension, 128 invocations, 16 KiB shared memory) a launch
plan that puts one workgroup per row, or one element per thread in one grid dimension, cannot
cover it, so a plan that assumes more than the minimum either misses the tail (a wrong result
this catches) or exceeds the grid (the dispatch check raises DeviceLimitError).

Values are small integers in float32 (a 7-periodic -3..3 pattern whose partial sums stay small),
so sums are exact on both sides and a result either matches or is wrong. Prints one JSON object:
{case: "ok" | the failure}.
"""
from __future__ import annotations

import json
import sys
import traceback

import torch
import torch.nn.functional as F

BIG = (1 << 26) + 5          # past 2^26 elements
ROWS = (1 << 17) + 3         # rows of 64: past 65535 rows (and workgroups of one row each)
BIG_ROWS = (1 << 20) + 3     # rows of 64: past 2^26 elements
LONG = (1 << 23) + 9       # one row longer than one workgroup can walk at once
MANY = 70_000                # past 65535 in one grid dimension (batches, rows)


def pattern(*shape, dtype=torch.float32):
    """Small integers -3..3 with a distinct peak at the very end (a missed tail shows)."""
    n = 1
    for s in shape:
        n *= s
    x = (torch.arange(n) % 7 - 3).to(dtype)
    x[-1] = 50
    return x.reshape(shape)


def indices(n, high):
    return (torch.arange(n) * 7919) % high


CASES = {
    # ---------------------------------------------------------------- reductions
    "sum all": (lambda x: x.sum(), lambda: [pattern(BIG)]),
    "mean all": (lambda x: x.mean(), lambda: [pattern(BIG)]),
    "amax all": (lambda x: x.amax(), lambda: [pattern(BIG)]),
    "argmax all": (lambda x: x.argmax(), lambda: [pattern(BIG)]),
    "min all": (lambda x: (-x).min(), lambda: [pattern(BIG)]),
    "sum int32 all": (lambda x: x.sum(), lambda: [pattern(BIG, dtype=torch.int32)]),
    "sum rows": (lambda x: x.sum(1), lambda: [pattern(BIG_ROWS, 64)]),
    "sum columns": (lambda x: x.sum(0), lambda: [pattern(ROWS, 64)]),
    "amax rows": (lambda x: x.amax(1), lambda: [pattern(ROWS, 64)]),
    "argmax rows": (lambda x: x.argmax(1), lambda: [pattern(ROWS, 64)]),
    "var rows": (lambda x: x.var(1), lambda: [pattern(ROWS, 64)]),
    "softmax rows": (lambda x: x.softmax(-1), lambda: [pattern(ROWS, 64)]),
    "log_softmax columns": (lambda x: x.log_softmax(0), lambda: [pattern(64, MANY)]),
    "layer_norm rows": (lambda x: F.layer_norm(x, (64,)), lambda: [pattern(ROWS, 64)]),
    "cross_entropy rows": (lambda x, t: F.cross_entropy(x, t), lambda: [pattern(ROWS, 64), indices(ROWS, 64)]),
    "softmax one long row": (lambda x: x.softmax(-1), lambda: [pattern(1, LONG)]),
    "layer_norm one long row": (lambda x: F.layer_norm(x, (LONG,)), lambda: [pattern(1, LONG)]),
    "sum long rows": (lambda x: x.sum(1), lambda: [pattern(3, LONG)]),
    "argmax long rows": (lambda x: x.argmax(1), lambda: [pattern(2, LONG)]),
    "logsumexp long row": (lambda x: x.logsumexp(1), lambda: [pattern(1, LONG)]),
    "var long row": (lambda x: x.var(1), lambda: [pattern(1, LONG)]),
    # ---------------------------------------------------------------- scans and sorts
    "cummax long row": (lambda x: x.cummax(1).values, lambda: [pattern(1, LONG)]),
    "logcumsumexp long row": (lambda x: (x * 0.01).logcumsumexp(1), lambda: [pattern(1, LONG)]),
    "cumsum all": (lambda x: x.cumsum(0), lambda: [pattern(BIG)]),
    "cumsum rows": (lambda x: x.cumsum(1), lambda: [pattern(ROWS, 64)]),
    "cummax columns": (lambda x: x.cummax(0).values, lambda: [pattern(64, MANY)]),
    "sort rows": (lambda x: x.sort(-1).values, lambda: [pattern((1 << 23) + 1, 8)]),
    "argsort rows": (lambda x: x.argsort(dim=-1, stable=True), lambda: [pattern((1 << 23) + 1, 8)]),
    "topk rows": (lambda x: x.topk(2, -1).values, lambda: [pattern((1 << 22) + 1, 16)]),
    "sort long": (lambda x: x.sort().values, lambda: [pattern((1 << 21) + 1)]),
    # ---------------------------------------------------------------- elementwise
    "add row broadcast": (lambda x, r: x + r, lambda: [pattern(ROWS, 64), pattern(64)]),
    "mul scalar add": (lambda x: x * 2 + 1, lambda: [pattern(BIG)]),
    "where": (lambda x: torch.where(x > 0, x, -x), lambda: [pattern(BIG)]),
    "exp": (lambda x: (x * 0.125).exp(), lambda: [pattern(BIG)]),
    "cast half": (lambda x: x.half(), lambda: [pattern(BIG)]),
    "compare count": (lambda x: (x > 1).sum(), lambda: [pattern(BIG)]),
    "relu_ in place": (lambda x: F.relu_(x), lambda: [pattern(BIG)]),
    # ---------------------------------------------------------------- indexing and copies
    "index_select rows": (lambda w, i: w.index_select(0, i), lambda: [pattern(1000, 64), indices(BIG_ROWS, 1000)]),
    "embedding": (lambda w, i: F.embedding(i, w), lambda: [pattern(1000, 64), indices(ROWS, 1000)]),
    "gather rows": (lambda x, i: x.gather(1, i), lambda: [pattern(ROWS, 64), indices(ROWS * 64, 64).reshape(ROWS, 64)]),
    "index_add rows": (lambda w, i, s: w.index_add(0, i, s),
                       lambda: [pattern(1000, 64), indices(ROWS, 1000), pattern(ROWS, 64)]),
    "boolean mask": (lambda x: x[x > 2], lambda: [pattern(BIG)]),
    "transpose contiguous": (lambda x: x.t().contiguous(), lambda: [pattern(64, ROWS)]),
    "cat": (lambda a, b: torch.cat([a, b]), lambda: [pattern(1 << 25), pattern((1 << 25) + 7)]),
    "flip": (lambda x: x.flip(0), lambda: [pattern(BIG)]),
    # ---------------------------------------------------------------- batched kernels
    "bmm many batches": (lambda a, b: torch.bmm(a, b), lambda: [pattern(MANY, 4, 4), pattern(MANY, 4, 4)]),
    "mm tall": (lambda a, b: a @ b, lambda: [pattern(1 << 18, 64), pattern(64, 32)]),
    "conv2d many images": (lambda x, w: F.conv2d(x, w, padding=1), lambda: [pattern(MANY, 2, 4, 4), pattern(3, 2, 3, 3)]),
    "max_pool2d many images": (lambda x: F.max_pool2d(x, 2), lambda: [pattern(MANY, 2, 4, 4)]),
    "sum backward": (None, None),  # below: autograd through a big reduction
}


def sum_backward():
    x = pattern(ROWS, 64).requires_grad_()
    xt = x.detach().to("tvk").requires_grad_()
    (x.softmax(-1) * pattern(64)).sum().backward()
    (xt.softmax(-1) * pattern(64).to("tvk")).sum().backward()
    return xt.grad.cpu(), x.grad


def run(name):
    if name == "sum backward":
        got, want = sum_backward()
    else:
        op, make = CASES[name]
        args = make()
        want = op(*[a.clone() for a in args])
        got = op(*[a.to("tvk") for a in args]).cpu()
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"dtype/shape {got.dtype} {tuple(got.shape)}, CPU {want.dtype} {tuple(want.shape)}"
    exact = not want.dtype.is_floating_point
    tol = {} if exact else {"atol": 1e-3 if want.dtype == torch.float16 else 1e-5, "rtol": 1e-3}
    try:
        torch.testing.assert_close(got, want, **({"atol": 0, "rtol": 0} if exact else tol))
    except AssertionError as e:
        return str(e).splitlines()[0] + " " + " ".join(str(e).splitlines()[1:4])
    return "ok"


def main(names):
    import torchvk  # noqa: F401  (the tvk device)
    from tvk_kernels.runtime.device import get_device

    facts = get_device().facts
    out = {"_limits": {"count": facts.max_workgroup_count, "invocations": facts.max_workgroup_invocations,
                       "shared": facts.max_shared_memory}}
    for name in names or CASES:
        try:
            out[name] = run(name)
        except Exception as e:  # a refused launch (DeviceLimitError) or any other failure: the case fails
            out[name] = f"{type(e).__name__}: {e}"[:500] + " | " + traceback.format_exc().splitlines()[-3][:200]
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
