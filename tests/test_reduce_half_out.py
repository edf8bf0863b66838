"""Reductions with a float16/bfloat16 result (sum, mean, prod, amax, amin of 16-bit tensors, as AMP
makes them): the reduce kernel writes the 16-bit values itself, rounded once from its float32 result
(templates/reduce.comp OUT_F16; two-pass reductions keep float32 partials), with no cast kernel after
it, and the repeated call replays the reduction alone. Against float64 on the same 16-bit inputs:
within one rounding of the result's dtype (plus the float32 accumulation's own error)."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import torchvk
import torchvk.profiler
from tvk_kernels.kernels import reduce as reduce_kernels

from rdna1_check import assert_fits_rdna1, navi10_stats

ROOT = Path(__file__).resolve().parents[1]
HALF = [torch.float16, torch.bfloat16]
_EPS = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}  # half an ulp: one rounding to nearest


def _close(got, x, op, dims, keepdim):
    ref = getattr(x.double(), op)(dim=dims, keepdim=keepdim) if dims is not None else getattr(x.double(), op)()
    assert got.dtype == x.dtype and got.shape == ref.shape
    bound = _EPS[x.dtype] * ref.abs() + 1e-6 * x.double().abs().sum() + 1e-30
    assert ((got.cpu().double() - ref).abs() <= bound).all(), (op, dims, got.cpu(), ref)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("op,dims,keepdim", [("sum", None, False), ("sum", (1,), False), ("sum", (0,), True),
                                             ("mean", (0, 2), False), ("amax", (2,), False),
                                             ("amin", (1, 2), True), ("prod", None, False)])
def test_a_16bit_reduction_is_written_16bit_by_the_kernel(dtype, op, dims, keepdim):
    x = torch.randn(5, 37, 9).to(dtype) if op != "prod" else (1 + 0.01 * torch.randn(5, 37, 9)).to(dtype)
    if op == "prod":
        x = x[:2, :3]
    t = x.to("tvk")
    call = (lambda v: getattr(torch, op)(v, dim=dims, keepdim=keepdim)) if dims is not None and op != "prod" else \
        (lambda v: getattr(torch, op)(v))
    for _ in range(2):  # the second call is the dispatcher's repeat
        with torchvk.profiler.profile() as prof:
            got = call(t)
        _close(got, x, op, dims, keepdim)
        names = [k.name for k in prof.kernels]
        assert "copy" not in names and any(n.startswith("reduce") for n in names), names


@pytest.mark.parametrize("dtype", HALF)
def test_strided_16bit_inputs_reduce_into_16bit_results(dtype):
    x = torch.randn(11, 13, 3).to(dtype)
    for view, dims in ((lambda v: v.transpose(0, 2), (0,)), (lambda v: v[:, ::2], (1, 2)), (lambda v: v[3:4], (0,))):
        for _ in range(2):
            _close(view(x.to("tvk")).sum(dims), view(x), "sum", dims, False)


@pytest.mark.parametrize("dtype", HALF)
def test_two_pass_reductions_keep_float32_partials_and_round_once(dtype, device):
    if not device.facts.features.get("storage_16bit"):
        pytest.skip("no 16-bit storage")
    # few outputs over long ranges: partials and a final pass (forced by a small SPLIT_MIN); values whose
    # partial sums would lose digits in 16 bits (1 + small), so a 16-bit partial would show
    x = (1 + 2.0 ** -9 * torch.randn(20000)).to(dtype)
    cols = torch.randn(4000, 3).to(dtype)
    for src, dims, shape in ((x, None, (20000,)), (cols, (0,), (4000, 3))):
        inp = device.upload(src.view(torch.int16).numpy())
        n_out = 1 if dims is None else 3
        out = device.allocator.alloc(2 * n_out)
        name = str(dtype).removeprefix("torch.")
        reduce_kernels.reduce(device, "sum", inp.address, out.address, shape, None, dims, dtype=name, out_dtype=name,
                              params={"TARGET_GROUPS": 16, "SPLIT_MIN": 256})
        got = torch.from_numpy(device.download(out, np.int16, (n_out,)).copy()).view(dtype)
        ref = src.double().sum(dims) if dims is not None else src.double().sum().reshape(1)
        assert ((got.double() - ref).abs() <= _EPS[dtype] * ref.abs() + 1e-6 * src.double().abs().sum()).all()


def test_arg_reductions_refuse_a_16bit_value_output(device):
    buf = device.allocator.alloc(64)
    with pytest.raises(ValueError, match="value reductions only"):
        reduce_kernels.reduce(device, "argmax", buf.address, buf.address, (4,), out_dtype="float16")


_RDNA1 = """
import json
from tvk_kernels import get_device
from tvk_kernels.kernels import reduce as reduce_kernels
from tvk_kernels.search_space import search_space, with_derived
dev = get_device(0)
stats = {}
for name, params in %r:
    prm = with_derived(search_space("reduce"), params)
    for out_code in (reduce_kernels.INPUT_DTYPE_CODES["float16"], reduce_kernels.INPUT_DTYPE_CODES["bfloat16"]):
        for op in (0, 1, 2, 3):
            for cols in (False, True):
                defines = reduce_kernels.defines(prm, op, 1, cols, bool(prm.get("SUBGROUP")) and not cols,
                                                 out_code, out_code=out_code)
                pipe = dev.pipelines.get("reduce.comp", defines, local_size=(prm["WG"], 1, 1), push_size=128,
                                         shared_bytes=prm["WG"] * 4, capture_stats=True)
                stats[f"{name} {params} out={out_code} op={op} cols={cols}"] = pipe.stats
print(json.dumps(stats))
"""


def test_16bit_outputs_of_the_rdna1_reduce_configs_compile_without_spills(tmp_path):
    """Every shipped RDNA1 reduce config writing float16 and bfloat16 values, by RDNA1's own compiler."""
    items = []
    for path in sorted((ROOT / "tuned_configs").glob("rdna1--*.json")):
        for name, entry in json.loads(path.read_text())["families"].get("reduce", {}).get("buckets", {}).items():
            items.append((name, entry["params"]))
    assert items
    stats = navi10_stats(_RDNA1 % (items,), tmp_path)
    assert len(stats) == 16 * len({(n, json.dumps(p, sort_keys=True)) for n, p in items})
    assert_fits_rdna1(stats)
