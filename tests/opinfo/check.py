"""Check one OpInfo op on tvk against torch CPU: forward and backward, up to 3 samples.

For each sample (float32, requires_grad where the op supports autograd) the inputs are
copied to tvk with their full storage, strides and offset (a view reads the same memory
on both sides), the op runs on both devices, and the outputs must match. When CPU raises,
tvk must raise the same exception type. Then the float outputs times a fixed random
cotangent are summed and backpropagated; the inputs' grads must match.

An op's status is the worst over its samples:
  match     every sample agrees with CPU
  missing   TorchVK said clearly that it lacks something: a kernel (its NotImplementedError,
            "no Vulkan implementation of aten.X", or an op's own for a case it does not
            cover) or a dtype (its TypeError "does not support dtype")
  mismatch  a result, a grad, or its shape/dtype differs, or a tvk output is not on tvk
  error     tvk raised where CPU did not, or another exception type than CPU's
  skipped   no sample puts anything on tvk (broadcast_shapes takes shapes): listed in the doc
A crash (the process died) or a timeout is recorded by the runner, not here.
"""
from __future__ import annotations

import itertools
import re
import time
import traceback

import torch

SAMPLES_PER_OP = 3
# torch's own device-vs-CPU comparison (test_ops.py, test_compare_cpu) uses 1e-3; kernels
# that sum in another order than CPU differ by a few float32 ulps times the length summed
RTOL = 1e-4
ATOL = 1e-4

_RANK = {"match": 0, "missing": 1, "mismatch": 2, "error": 2}
_MISSING_KERNEL = re.compile(r"TorchVK has no Vulkan implementation of (\S+)")
_NO_BACKEND_KERNEL = re.compile(r"Could not run '(\S+)' with arguments from the 'tvk' backend")
_DTYPE = re.compile(r"support dtype (?:torch\.)?(\w+)")


class Mismatch(AssertionError):
    pass


def full_name(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def float32_ops() -> dict:
    """{full name: OpInfo} for every op_db entry that supports float32 on CPU."""
    from torch.testing._internal.common_methods_invocations import op_db

    return {full_name(op): op for op in op_db if torch.float32 in op.supported_dtypes("cpu")}


def missing_what(exc) -> str | None:
    """What TorchVK lacks, if exc is its clear 'not implemented' error: the dispatcher's
    (no kernel for an aten op), an op's own (a case it has no kernel for), torch's (no
    tvk kernel for a factory op), or an unsupported dtype. None for any other exception."""
    text = " ".join(str(exc).split())
    if isinstance(exc, NotImplementedError):
        m = _MISSING_KERNEL.search(text) or _NO_BACKEND_KERNEL.search(text)
        if m:
            return m.group(1).replace("::", ".")
        return _gist(text) if text.startswith("TorchVK") else None
    if isinstance(exc, TypeError) and text.startswith("TorchVK") and "support" in text:
        m = _DTYPE.search(text)
        return "dtype " + m.group(1) if m else _gist(text)
    return None


def _gist(text: str) -> str:
    """A message's first clause without its parentheses: the same lack reads the same for every input."""
    return re.sub(r"\s*\([^)]*\)", "", text).split(";")[0].strip()[:100]


# ------------------------------------------------------------------ moving samples
def _storage_copy(t: torch.Tensor, device: str) -> torch.Tensor:
    """t's whole storage copied to device, viewed with t's sizes, strides and offset.
    Partial views (as_strided reads outside the view) then see the same memory."""
    t = t.detach()
    if t.layout != torch.strided:  # sparse: no storage to copy (tvk refuses it, as it should)
        return t.to(device) if device != "cpu" else t.clone()
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = torch.as_strided(t, (n,), (1,), 0).clone()
    return flat.to(device).as_strided(t.shape, t.stride(), t.storage_offset())


def _is_meta_device(m) -> bool:
    return isinstance(m, (str, torch.device)) and torch.device(m).type == "meta"


def copy_sample(sample, device: str, meta_sample=None, moved=None):
    """(input, args, kwargs) with every tensor replaced by a fresh leaf on device; a tensor
    passed twice maps to the same copy.
    meta_sample, the same sample made for device "meta", tells what the sample puts on the
    device under test: a tensor or a device argument that is "meta" there goes to device,
    the rest stays on the CPU (tensor_split's indices, `to`'s explicit "cpu"). Without it,
    every tensor and every device argument goes to device. `moved` collects what went."""
    moved = [] if moved is None else moved
    guided = meta_sample is not None
    memo = {}

    def move(x, m):
        if isinstance(x, torch.Tensor):
            if id(x) not in memo:
                stays = guided and not (isinstance(m, torch.Tensor) and m.device.type == "meta")
                c = _storage_copy(x, "cpu" if stays else device)
                if not stays:
                    moved.append(x)
                memo[id(x)] = c.requires_grad_(x.requires_grad)
            return memo[id(x)]
        if isinstance(x, torch.device) or (isinstance(x, str) and x == "cpu"):
            if (_is_meta_device(m) if guided else torch.device(x).type == "cpu"):
                moved.append(x)
                return torch.device(device) if isinstance(x, torch.device) else device
            return x
        if isinstance(x, list):
            return [move(y, _part(m, i)) for i, y in enumerate(x)]
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return tuple(move(y, _part(m, i)) for i, y in enumerate(x))
        if isinstance(x, dict):
            return {k: move(v, _part(m, k)) for k, v in x.items()}
        return x

    ms = (meta_sample.input, meta_sample.args, meta_sample.kwargs) if guided else (None,) * 3
    return move(sample.input, ms[0]), move(sample.args, ms[1]), move(sample.kwargs, ms[2])


def _part(m, key):
    try:
        return m[key]
    except (TypeError, KeyError, IndexError):
        return None


# ------------------------------------------------------------------ comparing
def _tensors(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _tensors(y)]
    if isinstance(x, dict):
        return [t for y in x.values() for t in _tensors(y)]
    return []


def _to_cpu(x, where: str, device: str = "tvk"):
    """Tensors to CPU, checking that each one was on `device`; the structure is kept."""
    if isinstance(x, torch.Tensor):
        if x.device.type != device:
            raise Mismatch(f"{where}: a result is on {x.device}, not on {device}")
        return x.detach().to("cpu")
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return tuple(_to_cpu(y, where, device) for y in x)
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu(y, where, device) for y in x)
    if isinstance(x, dict):
        return {k: _to_cpu(v, where, device) for k, v in x.items()}
    return x


def _plain(x):
    """CPU output with named tuples as plain tuples (assert_close compares sequences)."""
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(y) for y in x) if not hasattr(x, "_fields") else tuple(_plain(y) for y in x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _compare(actual_tvk, expected_cpu, where: str, metadata_only: bool, device: str = "tvk"):
    actual = _to_cpu(actual_tvk, where, device)
    expected = _plain(expected_cpu)
    if metadata_only:  # random op: shapes and dtypes only
        a, e = _tensors(actual), _tensors(expected)
        if len(a) != len(e) or any(x.shape != y.shape or x.dtype != y.dtype for x, y in zip(a, e)):
            raise Mismatch(f"{where}: got {[(tuple(x.shape), x.dtype) for x in a]}, "
                           f"expected {[(tuple(y.shape), y.dtype) for y in e]}")
        return
    try:
        torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, equal_nan=True, check_device=False,
                                   check_stride=False)
    except AssertionError as e:
        raise Mismatch(f"{where}: {e}") from None


# ------------------------------------------------------------------ one sample
def _run(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001  (any exception is a result to compare)
        return None, e


def _same_errors(err_cpu, err_tvk, phase: str) -> dict | None:
    """The sample's result when either side raised (None when neither did)."""
    if err_tvk is not None and missing_what(err_tvk):
        return {"status": "missing", "phase": phase, "missing": missing_what(err_tvk), "detail": _short(err_tvk)}
    if err_cpu is not None:
        if err_tvk is not None and isinstance(err_tvk, type(err_cpu)):
            return {"status": "match", "phase": phase}
        got = "no error" if err_tvk is None else _describe(err_tvk)
        return {"status": "error", "phase": phase,
                "detail": f"CPU raised {type(err_cpu).__name__} ({_short(err_cpu)}); tvk: {got}"}
    if err_tvk is not None:
        return {"status": "error", "phase": phase, "detail": _describe(err_tvk)}
    return None


def _grad_outputs(out) -> list:
    return [t for t in _tensors(out) if t.requires_grad and t.dtype.is_floating_point]


def _weighted_sum(outs: list, cotangents: list):
    """sum of (output * cotangent).sum(): backward then gives each output that cotangent"""
    terms = [(o * c.to(o.device)).sum() for o, c in zip(outs, cotangents)]
    return sum(terms[1:], terms[0])


def values_are_random(sample, random: dict | None) -> bool:
    """Whether this sample's values cannot be compared: the op is random (random_ops.json)
    and the sample's keyword arguments match none of its deterministic_when (dropout p=0)."""
    if random is None:
        return False
    return not any(all(k in sample.kwargs and sample.kwargs[k] == v for k, v in when.items())
                   for when in random.get("deterministic_when", []))


def check_sample(op, sample, random: dict | None = None, meta_sample=None) -> dict:
    """{"status", "phase", "detail", "missing"} for one sample; a random op's values are
    compared only where the sample is deterministic (values_are_random)."""
    random_op = values_are_random(sample, random)
    cpu_in = copy_sample(sample, "cpu")
    moved = []
    tvk_in, err = _run(lambda: copy_sample(sample, "tvk", meta_sample, moved))
    if err is not None:  # a sparse input, say: TorchVK refusing it clearly means it is missing
        return _same_errors(None, err, "inputs")
    if not moved:  # a factory called without a device (arange(2)): it tests the CPU, not tvk
        return {"status": "skipped"}

    out_cpu, err_cpu = _run(lambda: op(cpu_in[0], *cpu_in[1], **cpu_in[2]))
    out_tvk, err_tvk = _run(lambda: op(tvk_in[0], *tvk_in[1], **tvk_in[2]))
    failed = _same_errors(err_cpu, err_tvk, "forward")
    if failed:
        return failed
    out_cpu, out_tvk = sample.output_process_fn_grad(out_cpu), sample.output_process_fn_grad(out_tvk)
    try:
        _compare(out_tvk, out_cpu, "forward", random_op)
    except Mismatch as e:
        return {"status": "mismatch", "phase": "forward", "detail": _short(e, 600)}
    if not op.supports_autograd or not _grad_outputs(out_cpu):
        return {"status": "match", "phase": "forward"}
    return _check_backward(cpu_in, tvk_in, out_cpu, out_tvk, random_op)


def _check_backward(cpu_in, tvk_in, out_cpu, out_tvk, random_op: bool) -> dict:
    outs_cpu, outs_tvk = _grad_outputs(out_cpu), _grad_outputs(out_tvk)
    if len(outs_tvk) != len(outs_cpu):
        return {"status": "mismatch", "phase": "backward",
                "detail": f"{len(outs_cpu)} outputs require grad on CPU, {len(outs_tvk)} on tvk"}
    gen = torch.Generator().manual_seed(0)
    cotangents = [torch.randn(o.shape, generator=gen) for o in outs_cpu]
    _, err_cpu = _run(lambda: _weighted_sum(outs_cpu, cotangents).backward())
    _, err_tvk = _run(lambda: _weighted_sum(outs_tvk, cotangents).backward())
    failed = _same_errors(err_cpu, err_tvk, "backward")
    if failed:
        return failed
    leaves_cpu = [t for t in _tensors(cpu_in) if t.requires_grad]
    leaves_tvk = [t for t in _tensors(tvk_in) if t.requires_grad]
    for i, (lt, lc) in enumerate(zip(leaves_tvk, leaves_cpu)):
        gt, gc = lt.grad, lc.grad  # a grad is on its input's device (a CPU scalar's is on the CPU)
        if gt is None and gc is None:
            continue
        if gt is None or gc is None:  # an unused input: None on one side, zeros on the other is fine
            g = gc if gt is None else _to_cpu(gt, "backward", lt.device.type)
            if g.count_nonzero() == 0:
                continue
            return {"status": "mismatch", "phase": "backward", "detail": f"grad of input {i}: None on "
                    f"{'tvk' if gt is None else 'CPU'}, nonzero on the other"}
        try:
            _compare(gt, gc, f"grad of input {i}", random_op, lt.device.type)
        except Mismatch as e:
            return {"status": "mismatch", "phase": "backward", "detail": _short(e, 600)}
    return {"status": "match", "phase": "backward"}


def _short(exc, n: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= n else text[:n - 3] + "..."


def _describe(exc) -> str:
    """Exception type, message, and the innermost frame (where to look)."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {tb[-1].filename.split('/site-packages/')[-1]}:{tb[-1].lineno}" if tb else ""
    return f"{type(exc).__name__}: {_short(exc)}{where}"


# ------------------------------------------------------------------ one op
def _meta_samples(op, n: int) -> list:
    """The same samples made for device "meta" (none if that fails): see copy_sample."""
    try:
        torch.manual_seed(0)
        return list(itertools.islice(op.sample_inputs("meta", torch.float32, requires_grad=op.supports_autograd), n))
    except Exception:  # noqa: BLE001  (data-dependent sample code cannot run on meta)
        return []


def check_op(op, random: dict | None = None, samples: int = SAMPLES_PER_OP) -> dict:
    """The op's row: name, status (worst over its samples), the first worst sample's
    index, phase and detail, what is missing (if so), and the seconds taken. `random`:
    the op's entry in random_ops.json, if it has one."""
    start = time.perf_counter()
    torch.manual_seed(0)
    row = {"op": full_name(op), "status": "match", "samples": 0}
    if random:
        row["random"] = random["why"]
    try:
        inputs = list(itertools.islice(op.sample_inputs("cpu", torch.float32, requires_grad=op.supports_autograd),
                                       samples))
    except Exception as e:  # noqa: BLE001
        row.update(status="error", phase="samples", detail=f"making CPU samples failed: {_describe(e)}")
        inputs = []
    metas = _meta_samples(op, samples)
    for i, sample in enumerate(inputs):
        try:
            torch.manual_seed(i)
            res = check_sample(op, sample, random, metas[i] if i < len(metas) else None)
        except Exception as e:  # noqa: BLE001  (a bug of the check itself, or copying to tvk failed)
            res = {"status": "error", "phase": "setup", "detail": _describe(e)}
        if res["status"] == "skipped":
            continue
        row["samples"] += 1
        if _RANK[res["status"]] > _RANK[row["status"]]:
            for key in ("phase", "detail", "missing"):
                row.pop(key, None)
            row.update(res, sample=i)
    if row["samples"] == 0 and row["status"] == "match":  # broadcast_shapes: shapes in, shapes out
        row.update(status="skipped", detail="no sample puts a tensor or a device on tvk: nothing to check there")
    row["seconds"] = round(time.perf_counter() - start, 3)
    return row
