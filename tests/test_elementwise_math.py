"""The elementwise math ops (OPS in tvk_kernels/kernels/elementwise.py, helpers in
templates/elementwise_nd.comp) against torch CPU: forward and backward on one small tensor
shape with edge values (0, -0, +-inf, nan), integer inputs where torch takes them, float16 for a
few. Ops are batched per test so that a cold shader cache builds one pipeline per op."""
import math

import pytest
import torch
import torch.nn.functional as F

import torchvk  # noqa: F401
from rdna1_check import assert_fits_rdna1, navi10_stats

INF, NAN = math.inf, math.nan
EDGES = [0.0, -0.0, INF, -INF, NAN]
TOL = dict(rtol=1e-4, atol=1e-4, equal_nan=True)


def values(lo, hi, n=27, edges=True):
    """n points over [lo, hi] (odd n: the midpoint is among them), then the edge values."""
    return torch.tensor(torch.linspace(lo, hi, n).tolist() + (EDGES if edges else []))


def forward_backward(fn, inputs, grad, device):
    """fn(*inputs) on device and the grads of its float inputs for a fixed cotangent (or None)."""
    xs = [x.to(device).requires_grad_(grad and x.dtype.is_floating_point) for x in inputs]
    out = fn(*xs)
    leaves = [x for x in xs if x.requires_grad]
    if not leaves or not out.requires_grad:
        return out, None
    cot = torch.linspace(-1.0, 2.0, out.numel()).reshape(out.shape).to(out.dtype)
    return out, torch.autograd.grad(out, leaves, cot.to(device), allow_unused=True)


def warm_up(cases):
    """Build the pipelines of (fn, inputs, grad) cases on every core: run them once with the
    kernels discarded. A cold shader cache (CI) builds about one pipeline per op, one by one
    otherwise."""
    from tvk_kernels import get_device

    dev = get_device(0)
    with dev.pipelines.prefetching(), dev.stream.dry_run():
        for fn, inputs, grad in cases:
            forward_backward(fn, inputs, grad, "tvk")


def check(fn, *inputs, grad=True):
    """fn on CPU and on tvk agree, and so do the grads of every float input (a fixed cotangent)."""
    want, g_want = forward_backward(fn, inputs, grad, "cpu")
    got, g_got = forward_backward(fn, inputs, grad, "tvk")
    assert got.device.type == "tvk" and got.dtype == want.dtype, (got.dtype, want.dtype)
    torch.testing.assert_close(got.detach().cpu(), want.detach(), **TOL)
    assert (g_got is None) == (g_want is None)
    for i, gw, gg in zip(range(len(inputs)), g_want or (), g_got or ()):  # i: among the float inputs
        if gw is None:
            assert gg is None, f"grad {i}"
            continue
        torch.testing.assert_close(gg.cpu(), gw, **TOL, msg=lambda m: f"grad {i}: {m}")


UNARY = {  # name: (fn, lo, hi); integer points land on the poles of lgamma/digamma
    "sin": (torch.sin, -10, 10), "cos": (torch.cos, -10, 10), "tan": (torch.tan, -1.5, 1.5),
    "asin": (torch.asin, -1.2, 1.2), "acos": (torch.acos, -1.2, 1.2), "atan": (torch.atan, -30, 30),
    "sinh": (torch.sinh, -90, 90), "cosh": (torch.cosh, -90, 90), "asinh": (torch.asinh, -1e9, 1e9),
    "asinh_small": (torch.asinh, -2, 2), "acosh": (torch.acosh, 0.5, 20), "atanh": (torch.atanh, -1.3, 1.3),
    "erf": (torch.erf, -4, 4), "erfc": (torch.erfc, -4, 12), "erfinv": (torch.erfinv, -1.1, 1.1),
    "erfcx": (torch.special.erfcx, -9, 30), "log_ndtr": (torch.special.log_ndtr, -30, 8),
    "ndtri": (torch.special.ndtri, -0.1, 1.1), "ndtr": (torch.special.ndtr, -6, 6),
    "expm1": (torch.expm1, -3, 3), "log1p": (torch.log1p, -1.5, 3), "log2": (torch.log2, -1, 9),
    "log10": (torch.log10, -1, 1000), "exp2": (torch.exp2, -20, 20),
    "ceil": (torch.ceil, -3, 3), "floor": (torch.floor, -3, 3), "trunc": (torch.trunc, -3, 3),
    "round": (torch.round, -3.25, 3.25), "round_2": (lambda x: torch.round(x, decimals=2), -1.237, 1.237),
    "round_neg1": (lambda x: torch.round(x, decimals=-1), -260, 260), "frac": (torch.frac, -3.3, 3.3),
    "sign": (torch.sign, -2, 2), "sgn": (torch.sgn, -2, 2), "signbit": (torch.signbit, -2, 2),
    "nan_to_num": (torch.nan_to_num, -2, 2), "nan_to_num_args": (lambda x: torch.nan_to_num(x, 1.5, 9.0, -7.0), -2, 2),
    "lgamma": (torch.lgamma, -5.5, 10), "digamma": (torch.digamma, -3.5, 10),
    "polygamma1": (lambda x: torch.polygamma(1, x), -2.5, 6), "polygamma3": (lambda x: torch.polygamma(3, x), -2.5, 6),
    "i0": (torch.i0, -20, 20), "i0e": (torch.special.i0e, -20, 20), "i1": (torch.special.i1, -20, 20),
    "i1e": (torch.special.i1e, -20, 20), "entr": (torch.special.entr, -1, 5), "sinc": (torch.sinc, -4, 4),
    "logit": (torch.logit, -0.2, 1.2), "logit_eps": (lambda x: torch.logit(x, eps=0.1), -0.2, 1.2),
    "angle": (torch.angle, -2, 2), "bessel_i0": (torch.special.modified_bessel_i0, -20, 20),
    "bessel_i1": (torch.special.modified_bessel_i1, -20, 20), "bessel_j0": (torch.special.spherical_bessel_j0, -9, 9),
    "clamp_min_t": (lambda x: torch.clamp_min(x, torch.full_like(x, 0.5)), -2, 2),
}
ACTIVATIONS = {
    "elu": lambda x: F.elu(x, alpha=1.5), "selu": F.selu, "celu": lambda x: F.celu(x, alpha=0.7),
    "softplus": lambda x: F.softplus(x, beta=2, threshold=5), "hardshrink": F.hardshrink,
    "softshrink": lambda x: F.softshrink(x, 0.7), "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish,
    "mish": F.mish, "threshold": lambda x: F.threshold(x, 0.5, -2.0), "logsigmoid": F.logsigmoid,
    "glu": lambda x: F.glu(x.reshape(4, 8), dim=1), "rrelu_eval": lambda x: F.rrelu(x, training=False),
    "prelu": lambda x: F.prelu(x.reshape(4, 8), torch.tensor([0.25, -0.5, 1.0, 2.0, 0.1, 0.0, 3.0, -1.0],
                                                              device=x.device)),
}


@pytest.mark.parametrize("group", [list(UNARY)[i::3] for i in range(3)], ids=["a", "b", "c"])
def test_unary_math(group):
    # logit(eps)'s grad at nan: CPU's vectorized loop gives 0, its scalar tail (and CUDA, and tvk) nan
    cases = {name: (UNARY[name][0], (values(*UNARY[name][1:], edges=name != "logit_eps"),), True) for name in group}
    warm_up(cases.values())
    for name, (fn, inputs, grad) in cases.items():
        try:
            check(fn, *inputs, grad=grad)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def test_activations():
    """Edge values go through the forward; the backward ops (elu_backward, ...) see finite inputs."""
    warm_up((fn, (values(-6, 6, 32, edges=False),), True) for fn in ACTIVATIONS.values())
    for name, fn in ACTIVATIONS.items():
        for x, grad in ((values(-6, 6, 32, edges=False), True), (values(-6, 6), False)):
            try:
                check(fn, x, grad=grad)
            except AssertionError as e:
                raise AssertionError(f"{name}: {e}") from None


def _pairs():
    """Every (a, b) of a few values, zeros of both signs, inf and nan among them: 48 pairs."""
    a, b = torch.meshgrid(torch.tensor([-2.5, -1.0, 0.75, 3.0, 0.0, -0.0, INF, NAN]),
                          torch.tensor([-2.0, -0.5, 0.0, 1.5, 7.0, -0.0]), indexing="ij")
    return a.flatten(), b.flatten()


BINARY = {
    "atan2": torch.atan2, "remainder": torch.remainder, "fmod": torch.fmod, "floor_divide": torch.floor_divide,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"), "copysign": torch.copysign,
    "hypot": torch.hypot, "logaddexp": torch.logaddexp, "logaddexp2": torch.logaddexp2, "xlogy": torch.xlogy,
    "xlog1py": torch.special.xlog1py, "fmax": torch.fmax, "fmin": torch.fmin, "heaviside": torch.heaviside,
    "nextafter": torch.nextafter, "clamp_max_t": torch.clamp_max, "clamp_t": lambda a, b: torch.clamp(a, b, b + 1),
    "remainder_scalar": lambda a, b: torch.remainder(a, -1.5), "xlogy_scalar": lambda a, b: torch.xlogy(2.0, b),
    "zeta": lambda a, b: torch.special.zeta(a.abs() + 1, b),
}


def test_binary_math():
    a, b = _pairs()
    no_grad = ("heaviside", "nextafter", "floor_divide", "zeta")
    warm_up((fn, (a, b), name not in no_grad) for name, fn in BINARY.items())
    for name, fn in BINARY.items():
        try:
            check(fn, a, b, grad=name not in no_grad)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def test_integer_inputs():
    """Integer division rounds as torch's, the remainder's sign follows the divisor and fmod's the
    dividend; a zero divisor raises; float ops give float32; rounding ops copy."""
    a = torch.tensor([7, -7, 7, -7, 0, 5, -1, 9], dtype=torch.int64)
    b = torch.tensor([2, 2, -2, -2, 3, 5, 4, -4], dtype=torch.int64)
    for fn in (torch.remainder, torch.fmod, torch.floor_divide, lambda x, y: torch.div(x, y, rounding_mode="trunc"),
               lambda x, y: torch.div(x, y, rounding_mode="floor"), lambda x, y: torch.remainder(x, 3),
               torch.fmax, torch.heaviside, torch.logical_xor, torch.atan2):
        check(fn, a, b)
    for fn in (torch.sin, torch.lgamma, torch.ceil, torch.round, torch.signbit, torch.nan_to_num,
               lambda x: F.threshold(x, 1, 100)):
        check(fn, a)
    for fn in (torch.remainder, torch.floor_divide, lambda x, y: torch.div(x, y, rounding_mode="trunc")):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn(a.to("tvk"), (b * 0).to("tvk"))
    with pytest.raises(NotImplementedError):  # as CPU: no integer hypot
        torch.hypot(a.to("tvk"), b.to("tvk"))


def test_float16():
    x = values(-3, 3).half()
    for fn in (torch.sin, torch.erf, F.elu, torch.lgamma):
        check(fn, x, grad=False)
    check(torch.remainder, x, torch.full_like(x, -1.25), grad=False)


def test_in_place_and_rrelu_training():
    x = values(-3, 3, edges=False)
    t = x.to("tvk")
    torch.testing.assert_close(t.clone().sin_().cpu(), x.sin(), **TOL)
    torch.testing.assert_close(t.clone().floor_divide_(0.7).cpu(), x.floor_divide(0.7), **TOL)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.arange(4).to("tvk").sin_()
    # training: each negative x gets a slope drawn from [lower, upper], kept in noise for the backward
    t.requires_grad_()
    y = F.rrelu(t, 0.1, 0.3, training=True)
    slope = (y / t).detach().cpu()
    neg = x < 0
    assert torch.all((slope[neg] >= 0.1) & (slope[neg] <= 0.3)) and torch.all(slope[x > 0] == 1)
    (g,) = torch.autograd.grad(y.sum(), t)
    torch.testing.assert_close(g.cpu()[x != 0], slope[x != 0], **TOL)


_RDNA1_STATS = """
import json
from tvk_kernels import get_device
from tvk_kernels.kernels import elementwise as elementwise_kernels
dev = get_device(0)
stats = {}
for op, ct in (("polygamma", 0), ("remainder", 2)):
    spec = elementwise_kernels.OPS[op]
    defines = {"NT": spec.arity, "DTO": 0, "CT_KIND": ct, "NS": spec.nscalars, "OP_EXPR": spec.expr, "DT0": 0,
               "DT1": 0, "DT2": 0, "IN_A": "x0", "IN_B": "x1", "IN_C": "x2", "CONTIG": 0, "NDIM": 6, "META_BUF": 1,
               "ITEMS": 4, "USE_I64": int(ct == 2)}
    pipe = dev.pipelines.get("elementwise_nd.comp", defines, local_size=(256, 1, 1), push_size=128, capture_stats=True)
    stats[f"{op} ct={ct}"] = pipe.stats
print(json.dumps(stats))
"""


def test_math_helpers_compile_for_rdna1_without_spills(tmp_path):
    """The heaviest helpers (polygamma: loops and coefficient tables; 64-bit integer division) on
    RDNA1's own compiler (Mesa's null Navi 10), strided 6-d: no spills."""
    stats = navi10_stats(_RDNA1_STATS, tmp_path)
    assert len(stats) == 2
    assert_fits_rdna1(stats)
