"""softmax / log_softmax forward and backward (tvk_kernels/kernels/softmax.py) against torch autograd.

Error bounds: softmax and its gradient |got - ref| <= 1e-5 * max|ref| + 1e-7;
log_softmax and its gradient |got - ref| <= 2e-6 * (1 + max|x|) (exp/log of float32).
"""
import numpy as np
import pytest
import torch

import torchvk  # noqa: F401  (the tvk device)
from tvk_kernels.kernels.softmax import log_softmax, softmax, softmax_backward


def run(device, x, g, dim, log, params=None):
    xb, gb = device.upload(x), device.upload(g)
    yb, db = device.allocator.alloc(max(x.nbytes, 4)), device.allocator.alloc(max(x.nbytes, 4))
    softmax(device, xb.address, yb.address, x.shape, dim, log=log, params=params)
    softmax_backward(device, gb.address, yb.address, db.address, x.shape, dim, log=log, params=params)
    return device.download(yb, np.float32, x.shape), device.download(db, np.float32, x.shape)


def reference(x, g, dim, log):
    t = torch.from_numpy(x).double().requires_grad_()
    y = torch.log_softmax(t, dim) if log else torch.softmax(t, dim)
    y.backward(torch.from_numpy(g).double())
    return y.detach().numpy(), t.grad.numpy()


def check(device, x, g, dim, log, params=None):
    y, dx = run(device, x, g, dim, log, params)
    ry, rdx = reference(x, g, dim, log)
    fin = np.isfinite(x).all()
    if log:
        tol = 2e-6 * (1 + (np.abs(x[np.isfinite(x)]).max() if x.size else 0))
        tol_y, tol_g = tol, tol * (1 + np.abs(g).max())
    else:
        tol_y = 1e-5 * np.abs(ry).max() + 1e-7
        tol_g = 1e-5 * np.abs(rdx).max() + 1e-7
    np.testing.assert_array_less(np.abs(y - ry), tol_y) if fin else np.testing.assert_allclose(y, ry, atol=tol_y)
    np.testing.assert_allclose(dx, rdx, rtol=0, atol=tol_g)


SHAPES = [((1,), 0), ((7,), 0), ((3, 127), -1), ((2, 1000), 1), ((1000, 3), 1), ((5, 7, 3), 0), ((5, 7, 3), 1),
          ((5, 7, 3), 2), ((4, 127, 9), 1), ((2, 3, 4, 5), 2), ((300, 33), 0), ((3, 1), 1)]


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,dim", SHAPES)
def test_softmax(device, rng, shape, dim, log):
    x = (3 * rng.standard_normal(shape)).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    check(device, x, g, dim, log)


@pytest.mark.parametrize("wg", [32, 256, 1024])
@pytest.mark.parametrize("subgroup", [0, 1])
def test_variants(device, rng, wg, subgroup):
    if subgroup and not device.facts.features["subgroup_arithmetic"]:
        pytest.skip("no subgroup arithmetic")
    x = (3 * rng.standard_normal((5, 2049))).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    items = 4 if wg == 256 else 1
    for log in (False, True):
        check(device, x, g, -1, log, {"WG": wg, "SUBGROUP": subgroup, "ITEMS": items})
    check(device, x[:, :40].copy(), g[:, :40].copy(), 0, False, {"WG": wg, "SUBGROUP": subgroup})


def test_stability_and_masking(device, rng):
    x = (rng.standard_normal((6, 50)) * 1000).astype(np.float32)  # exp would overflow without the max
    x[1, :25] = -np.inf  # masked positions (attention)
    x[2, 1:] = -np.inf
    g = rng.standard_normal(x.shape).astype(np.float32)
    for log in (False, True):
        y, dx = run(device, x, g, -1, log)
        ry, rdx = reference(x, g, -1, log)
        assert np.isfinite(dx).all()
        np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-4 if log else 1e-6)
    assert np.isfinite(run(device, x, g, -1, False)[0]).all()


def test_nan_propagates(device):
    x = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0]], np.float32)
    y, _ = run(device, x, np.ones_like(x), -1, False)
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()


def test_log_softmax_alias_and_errors(device, rng):
    x = rng.standard_normal((4, 9)).astype(np.float32)
    xb, yb = device.upload(x), device.allocator.alloc(x.nbytes)
    log_softmax(device, xb.address, yb.address, x.shape, 1)
    ref = torch.log_softmax(torch.from_numpy(x), 1).numpy()
    np.testing.assert_allclose(device.download(yb, np.float32, x.shape), ref, atol=1e-5)
    with pytest.raises(IndexError):
        softmax(device, xb.address, yb.address, x.shape, 2)
    softmax(device, xb.address, yb.address, (0, 9), 1)  # empty: nothing to do


def test_one_spirv_module_serves_every_items_value_and_layout():
    """ITEMS, COLS and LOG are specialization constants: one SPIR-V module per direction and
    SUBGROUP serves them all (compiled once, shipped once); the pipeline sets them."""
    from tvk_kernels.kernels import softmax as softmax_kernels
    from tvk_kernels.runtime.compiler import split_defines

    modules, specs = set(), set()
    for items in (1, 2, 4, 8):
        for cols in (False, True):
            for log in (False, True):
                compiled, spec = split_defines("softmax.comp", softmax_kernels.defines({"ITEMS": items}, cols, log, True, False))
                modules.add(tuple(sorted(compiled.items())))
                specs.add(tuple(sorted(spec.items())))
    assert modules == {(("BWD", 1), ("SUBGROUP", 0))}, modules
    assert len(specs) == 4 * 2 * 2


@pytest.mark.parametrize("log", [False, True])
def test_rows_with_nan_and_infinities_match_torch(log):
    """NaN and +inf poison a row, an all -inf row is NaN: said by the kernel itself, since drivers
    that assume no NaN (NVIDIA's) let max() drop it and gave the row's other values."""
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[1.0, nan, 2.0], [1.0, inf, 0.0], [-inf, -inf, -inf], [-inf, 1.0, 2.0], [1.0, 2.0, 3.0]])
    for dim in (1, 0):
        op = torch.log_softmax if log else torch.softmax
        torch.testing.assert_close(op(x.to("tvk"), dim).cpu(), op(x, dim), equal_nan=True)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("n", [16 * 64, 16 * 64 + 1, 3 * 64 + 5])
def test_rows_in_registers_and_rows_too_long_for_them(device, rng, n, log):
    """A row of up to WG x REGS_MAX_ITEMS elements is read once into registers, a longer one is walked
    in loops (softmax.register_items): both, at the edge, with masked (-inf), NaN and +inf rows."""
    from tvk_kernels.kernels import softmax as softmax_kernels

    params = {"WG": 64, "ITEMS": 1}
    assert (softmax_kernels.register_items(64, 1, n) is not None) == (n <= 64 * softmax_kernels.REGS_MAX_ITEMS)
    x = (3 * rng.standard_normal((6, n))).astype(np.float32)
    x[1, : n // 2] = -np.inf
    g = rng.standard_normal(x.shape).astype(np.float32)
    check(device, x, g, -1, log, params)
    x[2, 7], x[3, n - 1], x[4, :] = np.nan, np.inf, -np.inf
    y, _ = run(device, x, g, -1, log, params)
    ry = (torch.log_softmax if log else torch.softmax)(torch.from_numpy(x), -1).numpy()
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=2e-5 * (1 + 3 * 5) if log else 1e-6, equal_nan=True)


_RDNA1_REGS_STATS = """
import json
from tvk_kernels.config import default_params
from tvk_kernels.kernels import softmax
from tvk_kernels.runtime.device import Device

dev = Device.get(0)
stats = {}
for wg in sorted({default_params("softmax", dev.facts, "small")["WG"], 1024}):
    for items in (1, 4, softmax.REGS_MAX_ITEMS):
        for backward in (False, True):
            for wave in (32, 64):
                d = softmax.defines({"ITEMS": items}, False, False, backward, True, regs=True)
                pipe = dev.pipelines.get("softmax.comp", d, local_size=(wg, 1, 1), push_size=softmax._PUSH.size,
                                         shared_bytes=4 * wg, subgroup_size=wave, capture_stats=True)
                stats[f"WG {wg} ITEMS {items} backward {backward} wave{wave}"] = pipe.stats
print(json.dumps(stats))
"""


def test_rows_in_registers_compile_for_rdna1_without_spills(tmp_path):
    """RDNA1's own compiler (Mesa's null Navi 10): the register-resident kernels at every size, wave32 and
    wave64, without spills, in 32 KiB."""
    from rdna1_check import assert_fits_rdna1, navi10_stats

    stats = navi10_stats(_RDNA1_REGS_STATS, tmp_path)
    assert len(stats) >= 24
    assert_fits_rdna1(stats)
