"""Layer norm and batch norm forward/backward (tvk_kernels/kernels/norm.py) against torch autograd.

Error bound: every output and gradient |got - ref| <= 2e-5 * max|ref| + 1e-6 (float64 reference);
running statistics the same.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rdna1_check import assert_fits_rdna1, navi10_stats
from tvk_kernels.kernels import norm
from tvk_kernels.kernels.launch import family
from tvk_kernels.search_space import search_space


def up(device, a):
    return device.upload(np.ascontiguousarray(a, dtype=np.float32))


def close(got, ref):
    ref = np.asarray(ref, np.float64)
    tol = 2e-5 * (np.abs(ref).max() if ref.size else 0) + 1e-6
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol)


def layer_norm_case(device, rng, shape, k, affine, params=None, eps=1e-5, outputs=("dx", "dw", "db")):
    x = (2 * rng.standard_normal(shape) + 1).astype(np.float32)
    ns = shape[len(shape) - k:]
    w = rng.standard_normal(ns).astype(np.float32)
    b = rng.standard_normal(ns).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    tx = torch.from_numpy(x).double().requires_grad_()
    tw = torch.from_numpy(w).double().requires_grad_()
    tb = torch.from_numpy(b).double().requires_grad_()
    ref = F.layer_norm(tx, ns, tw if affine else None, tb if affine else None, eps)
    ref.backward(torch.from_numpy(g).double())
    rows, n = int(np.prod(shape[:len(shape) - k])), int(np.prod(ns))
    xb, wb, bb, gb = up(device, x), up(device, w), up(device, b), up(device, g)
    alloc = device.allocator.alloc
    yb, mb, rb = alloc(x.nbytes), alloc(4 * rows), alloc(4 * rows)
    dxb, dwb, dbb = alloc(x.nbytes), alloc(4 * n), alloc(4 * n)
    wa, ba = (wb.address, bb.address) if affine else (0, 0)
    norm.layer_norm(device, xb.address, yb.address, shape, k, wa, ba, eps, mb.address, rb.address, params=params)
    dxa, dwa, dba = (buf.address if name in outputs else 0 for buf, name in ((dxb, "dx"), (dwb, "dw"), (dbb, "db")))
    norm.layer_norm_backward(device, gb.address, xb.address, mb.address, rb.address, shape, k, wa, dxa, dwa, dba,
                             params=params)
    dl = device.download
    close(dl(yb, np.float32, shape), ref.detach().numpy())
    x64 = x.astype(np.float64).reshape(rows, n)
    close(dl(mb, np.float32, (rows,)), x64.mean(1))
    close(dl(rb, np.float32, (rows,)), 1 / np.sqrt(x64.var(1) + eps))
    if "dx" in outputs:
        close(dl(dxb, np.float32, shape), tx.grad.numpy())
    g64 = g.astype(np.float64).reshape(rows, n)  # without affine, the grads of an implicit weight 1 / bias 0
    xhat = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + eps)
    if "dw" in outputs:
        close(dl(dwb, np.float32, ns), tw.grad.numpy() if affine else (g64 * xhat).sum(0).reshape(ns))
    if "db" in outputs:
        close(dl(dbb, np.float32, ns), tb.grad.numpy() if affine else g64.sum(0).reshape(ns))


@pytest.mark.parametrize("shape,k,affine", [
    ((7,), 1, True), ((1, 1), 1, True), ((5, 127), 1, True), ((3, 4, 10), 2, False), ((4, 1000), 1, True),
    ((127, 7), 1, True), ((2, 3, 33), 1, False), ((2, 3, 5, 7), 3, True),
])
def test_layer_norm(device, rng, shape, k, affine):
    layer_norm_case(device, rng, shape, k, affine)


@pytest.mark.parametrize("subgroup", [0, 1])
@pytest.mark.parametrize("wg", [32, 1024])
def test_layer_norm_variants(device, rng, subgroup, wg):
    if subgroup and not device.facts.features["subgroup_arithmetic"]:
        pytest.skip("no subgroup arithmetic")
    layer_norm_case(device, rng, (6, 1500), 1, True, {"WG": wg, "SUBGROUP": subgroup, "ITEMS": 2})


def test_layer_norm_param_grads_split(device, rng):
    """Few columns, many rows: column sums in chunks of rows, finished by the reduce kernel."""
    layer_norm_case(device, rng, (3000, 6), 1, True, {"TARGET_GROUPS": 16, "SPLIT_ROWS": 64})
    layer_norm_case(device, rng, (700, 3, 5), 2, True, {"TARGET_GROUPS": 16, "SPLIT_ROWS": 64})
    # the finest chunks a tuned config may ask for: 8 rows, a last chunk shorter, more chunks than columns
    layer_norm_case(device, rng, (1001, 37), 1, True, {"TARGET_GROUPS": 2048, "SPLIT_ROWS": 8})
    layer_norm_case(device, rng, (45, 7), 1, True, {"TARGET_GROUPS": 2048, "SPLIT_ROWS": 8, "ITEMS": 4})


@pytest.mark.parametrize("outputs", [("dx",), ("dw", "db"), ("dx", "db"), ("dx", "dw")])
def test_layer_norm_backward_computes_what_is_asked(device, rng, outputs):
    """Each subset of (grad_in, grad_weight, grad_bias): the fused pass where grad_in and a column sum
    are both asked for, the row pass or the column pass alone otherwise."""
    layer_norm_case(device, rng, (300, 37), 1, True, {"TARGET_GROUPS": 2048}, outputs=outputs)


@pytest.mark.parametrize("rows,n,params", [
    (1001, 37, {"WG": 256, "TARGET_GROUPS": 2048}),  # 4 rows at a time, chunks of 16 rows, the last one short
    (999, 1024, {"WG": 64}),                         # 16 columns a thread: the most a fused row holds
    (40, 1025, {"WG": 64}),                          # one column more: the row and column passes
    (17, 300, {"WG": 128, "TARGET_GROUPS": 2}),      # two workgroups, 2 x 16 rows for 17
    (5, 3, {"WG": 32}),                              # one workgroup: the sums are written in place
])
def test_layer_norm_backward_fused(device, rng, rows, n, params):
    layer_norm_case(device, rng, (rows, n), 1, True, params)


def test_layer_norm_backward_fused_stays_within_the_loop_budget(device, rng):
    """llvmpipe ends an invocation's loops after 65535 iterations: with 2 workgroups asked for, 70000 rows
    are cut into more, so no row is left unwritten."""
    budget = device.facts.max_loop_iterations or 65535
    items, t, chunk, groups = norm.fused_ln_backward_plan({"WG": 64, "TARGET_GROUPS": 2}, 70000, 33, budget)
    assert t == 64 and groups > 2 and chunk * (1 + 2 * items + 2 * 7) < budget  # one row at a time
    layer_norm_case(device, rng, (70000, 33), 1, True, {"WG": 64, "TARGET_GROUPS": 2})


def batch_norm_case(device, rng, shape, training, params=None, affine=True, momentum=0.1, eps=1e-5):
    c = shape[1]
    x = (2 * rng.standard_normal(shape) + 1).astype(np.float32)
    w = rng.standard_normal(c).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    rm = rng.standard_normal(c).astype(np.float32)
    rv = (rng.random(c) + 0.5).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    tx = torch.from_numpy(x).double().requires_grad_()
    tw = torch.from_numpy(w).double().requires_grad_()
    tb = torch.from_numpy(b).double().requires_grad_()
    trm, trv = torch.from_numpy(rm).double(), torch.from_numpy(rv).double()
    ref = F.batch_norm(tx, trm, trv, tw if affine else None, tb if affine else None, training, momentum, eps)
    ref.backward(torch.from_numpy(g).double())
    xb, wb, bb, gb, rmb, rvb = (up(device, a) for a in (x, w, b, g, rm, rv))
    alloc = device.allocator.alloc
    yb, mb, ib, dxb, dwb, dbb = alloc(x.nbytes), alloc(4 * c), alloc(4 * c), alloc(x.nbytes), alloc(4 * c), alloc(4 * c)
    wa, ba = (wb.address, bb.address) if affine else (0, 0)
    norm.batch_norm(device, xb.address, yb.address, shape, wa, ba, rmb.address, rvb.address, training, momentum, eps,
                    mb.address, ib.address, params=params)
    norm.batch_norm_backward(device, gb.address, xb.address, shape, mb.address, ib.address, wa, dxb.address,
                             dwb.address, dbb.address, training, rmb.address, rvb.address, eps, params=params)
    dl = device.download
    close(dl(yb, np.float32, shape), ref.detach().numpy())
    close(dl(dxb, np.float32, shape), tx.grad.numpy())
    if affine:
        close(dl(dwb, np.float32, (c,)), tw.grad.numpy())
        close(dl(dbb, np.float32, (c,)), tb.grad.numpy())
    close(dl(rmb, np.float32, (c,)), trm.numpy())  # updated in place when training, untouched in eval
    close(dl(rvb, np.float32, (c,)), trv.numpy())
    if training:
        axes = tuple(i for i in range(len(shape)) if i != 1)
        close(dl(mb, np.float32, (c,)), x.astype(np.float64).mean(axes))
        close(dl(ib, np.float32, (c,)), 1 / np.sqrt(x.astype(np.float64).var(axes) + eps))


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (7, 5), (2, 3, 127), (1, 2, 1000), (2, 1, 7, 9), (127, 1)])
def test_batch_norm(device, rng, shape, training):
    batch_norm_case(device, rng, shape, training)


def test_batch_norm_options(device, rng):
    batch_norm_case(device, rng, (3, 4, 6, 6), True, affine=False, momentum=0.3, eps=1e-3)
    batch_norm_case(device, rng, (3, 4, 6, 6), False, affine=False)


@pytest.mark.parametrize("subgroup", [0, 1])
@pytest.mark.parametrize("wg", [32, 1024])
def test_batch_norm_variants(device, rng, subgroup, wg):
    if subgroup and not device.facts.features["subgroup_arithmetic"]:
        pytest.skip("no subgroup arithmetic")
    batch_norm_case(device, rng, (8, 3, 13, 17), True, {"WG": wg, "SUBGROUP": subgroup, "ITEMS": 2})


def test_batch_norm_errors(device):
    buf = device.upload(np.zeros(8, np.float32))
    with pytest.raises(ValueError):
        norm.batch_norm(device, buf.address, buf.address, (1, 4), training=True)
    with pytest.raises(ValueError):
        norm.batch_norm(device, buf.address, buf.address, (2, 4), training=False)
    with pytest.raises(ValueError):
        norm.batch_norm(device, buf.address, buf.address, (8,))
    with pytest.raises(ValueError):
        norm.layer_norm(device, buf.address, buf.address, (2, 4), 3)


# Split batch norm (few channels, many elements each): chunk partials, per-channel combine,
# elementwise apply. TARGET_GROUPS / SPLIT_ROWS (and a small WG) force it on small shapes.
SPLIT = {"TARGET_GROUPS": 16, "SPLIT_ROWS": 64}


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape,params", [
    ((8, 3, 40, 40), {}),                                   # tuned WG / ITEMS
    ((4, 3, 13, 17), {"WG": 32, "ITEMS": 2}),               # chunks and WG not aligned to the planes
    ((64, 2), {"WG": 8, "ITEMS": 2, "SPLIT_ROWS": 8, "SUBGROUP": 0}),  # (N, C): inner = 1 (8 threads: no
                                                                        # subgroups, tuning/norm.json's rule)
    ((3, 5, 70), {"WG": 64, "ITEMS": 1}),                   # WG < inner, WG / inner = 0
])
def test_batch_norm_split(device, rng, shape, params, training):
    prm = dict(SPLIT, **params)
    assert norm._bn_chunks(family(device, norm.Norm).resolve({"n": int(np.prod(shape))}, prm), shape[1],
                           int(np.prod(shape)) // shape[1]) is not None
    batch_norm_case(device, rng, shape, training, prm)
    batch_norm_case(device, rng, shape, training, prm, affine=False, momentum=0.3, eps=1e-3)


@pytest.mark.parametrize("subgroup", [0, 1])
def test_batch_norm_split_subgroup(device, rng, subgroup):
    if subgroup and not device.facts.features["subgroup_arithmetic"]:
        pytest.skip("no subgroup arithmetic")
    batch_norm_case(device, rng, (8, 3, 13, 17), True, dict(SPLIT, WG=128, ITEMS=2, SUBGROUP=subgroup))


def test_batch_norm_split_stats(device, rng):
    """Large mean vs spread: the chunk M2 + Chan combine keeps the variance accurate."""
    shape, c = (16, 2, 300), 2
    x = (rng.standard_normal(shape) * 0.01 + 100.0).astype(np.float32)
    xb = up(device, x)
    alloc = device.allocator.alloc
    yb, mb, ib = alloc(x.nbytes), alloc(4 * c), alloc(4 * c)
    norm.batch_norm(device, xb.address, yb.address, shape, save_mean_addr=mb.address, save_invstd_addr=ib.address,
                    params=SPLIT)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(device.download(ib, np.float32, (c,)), 1 / np.sqrt(x64.var((0, 2)) + 1e-5), rtol=1e-4)
    np.testing.assert_allclose(device.download(mb, np.float32, (c,)), x64.mean((0, 2)), rtol=1e-6)


def test_batch_norm_split_partial_outputs(device, rng):
    """Backward with only some outputs; forward without saved stats or running buffers."""
    shape, c = (8, 3, 40, 40), 3
    x = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(c).astype(np.float32)
    tx, tw = torch.from_numpy(x).double().requires_grad_(), torch.from_numpy(w).double().requires_grad_()
    ref = F.batch_norm(tx, None, None, tw, None, True)
    ref.backward(torch.from_numpy(g).double())
    xb, gb, wb = up(device, x), up(device, g), up(device, w)
    alloc = device.allocator.alloc
    yb, mb, ib, dwb, dxb = alloc(x.nbytes), alloc(4 * c), alloc(4 * c), alloc(4 * c), alloc(x.nbytes)
    norm.batch_norm(device, xb.address, yb.address, shape, wb.address, params=SPLIT)
    close(device.download(yb, np.float32, shape), ref.detach().numpy())
    norm.batch_norm(device, xb.address, 0, shape, save_mean_addr=mb.address, save_invstd_addr=ib.address,
                    params=SPLIT)
    norm.batch_norm_backward(device, gb.address, xb.address, shape, mb.address, ib.address, wb.address,
                             grad_weight_addr=dwb.address, params=SPLIT)
    close(device.download(dwb, np.float32, (c,)), tw.grad.numpy())
    norm.batch_norm_backward(device, gb.address, xb.address, shape, mb.address, ib.address, wb.address,
                             grad_in_addr=dxb.address, params=SPLIT)
    close(device.download(dxb, np.float32, shape), tx.grad.numpy())


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape,params", [((4, 3, 5, 5), None), ((8, 3, 40, 40), SPLIT), ((4, 3, 13, 17), dict(SPLIT, WG=32, ITEMS=2))])
def test_batch_norm_relu(device, rng, shape, params, training):
    """relu=True (compiled mode's bn + relu fusion) writes relu(batch_norm(x)), same stats, one path or split."""
    c = shape[1]
    prm = family(device, norm.Norm).resolve({"n": int(np.prod(shape))}, params)
    assert (norm._bn_chunks(prm, c, int(np.prod(shape)) // c) is not None) == (params is not None)
    x = (2 * rng.standard_normal(shape) + 0.5).astype(np.float32)
    w, b = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    rm, rv = rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)
    trm, trv = torch.from_numpy(rm).double(), torch.from_numpy(rv).double()
    ref = torch.relu(F.batch_norm(torch.from_numpy(x).double(), trm, trv, torch.from_numpy(w).double(),
                                  torch.from_numpy(b).double(), training, 0.1, 1e-5))
    assert (ref == 0).any() and (ref > 0).any()
    xb, wb, bb, rmb, rvb = (up(device, a) for a in (x, w, b, rm, rv))
    alloc = device.allocator.alloc
    yb, mb, ib = alloc(x.nbytes), alloc(4 * c), alloc(4 * c)
    norm.batch_norm(device, xb.address, yb.address, shape, wb.address, bb.address, rmb.address, rvb.address,
                    training, 0.1, 1e-5, mb.address if training else 0, ib.address if training else 0,
                    params=params, relu=True)
    dl = device.download
    close(dl(yb, np.float32, shape), ref.numpy())
    close(dl(rmb, np.float32, (c,)), trm.numpy())
    close(dl(rvb, np.float32, (c,)), trv.numpy())
    if training:
        axes = tuple(i for i in range(len(shape)) if i != 1)
        close(dl(ib, np.float32, (c,)), 1 / np.sqrt(x.astype(np.float64).var(axes) + 1e-5))


_RDNA1_FUSED_STATS = """
import json
from tvk_kernels.config import default_params
from tvk_kernels.kernels import norm
from tvk_kernels.runtime.device import Device

dev = Device.get(0)
stats = {}
for wg in sorted({default_params("norm", dev.facts, "small")["WG"], 1024}):
    for items in (1, 2, 4, 8, norm.FUSED_MAX_ITEMS):
        for wave in (32, 64):
            for dtype in ("float32", "float16"):
                pipe = dev.pipelines.get(norm.Norm.template, norm.defines(norm.LN_BWD_FUSED, items, True, dtype=dtype),
                                         local_size=(wg, 1, 1), push_size=norm._PUSH.size, shared_bytes=4 * wg,
                                         subgroup_size=wave, capture_stats=True)
                stats[f"WG {wg} ITEMS {items} wave{wave} {dtype}"] = pipe.stats
print(json.dumps(stats))
"""


def test_fused_layer_norm_backward_compiles_for_rdna1_without_spills(tmp_path):
    """The fused backward holds FUSED_MAX_ITEMS columns of a row per thread in registers: RDNA1's own
    compiler (Mesa's null Navi 10) fits every size at wave32 and wave64 without spills, in 32 KiB."""
    stats = navi10_stats(_RDNA1_FUSED_STATS, tmp_path)
    assert len(stats) >= 40
    assert_fits_rdna1(stats)


def test_one_spirv_module_serves_every_items_value_and_the_fused_relu():
    """ITEMS and RELU are specialization constants: one SPIR-V module per phase and SUBGROUP
    serves them all (compiled once, shipped once); the pipeline sets them."""
    from tvk_kernels.runtime.compiler import split_defines

    modules, specs = set(), set()
    for items in (1, 2, 4, 8):
        for relu in (False, True):
            compiled, spec = split_defines(norm.Norm.template, norm.defines(norm.BN_FWD, items, False, relu))
            modules.add(tuple(sorted(compiled.items())))
            specs.add(tuple(sorted(spec.items())))
    assert modules == {(("PHASE", norm.BN_FWD), ("SUBGROUP", 0))}, modules
    assert len(specs) == 4 * 2


def test_the_split_benchmark_checks_and_times_every_candidate(tmp_path):
    """benchmarks/layer_norm_split.py --quick: each candidate split's gradients checked, then timed."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "benchmarks/layer_norm_split.py", "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "layer_norm_split.json").read_text())["rows"]
    allowed = search_space("norm")["params"]["SPLIT_ROWS"]["values"]
    assert len(rows) == 2 * 6 and sum(r["own_config"] for r in rows) == 2
    for r in rows:
        assert r["max_rel_error"] < 1e-4 and r["tvk_s"] > 0 and r["params"]["SPLIT_ROWS"] in allowed
