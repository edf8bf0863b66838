"""Fused attention on cooperative matrices (templates/attention_coopmat.comp, kernels/attention_coopmat.py),
float16's route on GPUs that have them. lavapipe has none: TVK_COOPMAT_ATTENTION=emulate runs the template with
its matrix products on scalar code (every other line of it as the GPU runs it), at emulated subgroup sizes 32
(NVIDIA's) and 64 (AMD's wave64), against float64 within fp16's tolerance: masks, causal, grouped heads, dropout,
odd sizes, head dims up to 128, views read in place. The real products are checked on the device where the route
is taken (attention.check_coopmat, and test_real_route_matches_float64 there)."""
import pytest
import torch
import torch.nn.functional as F

import torchvk  # noqa: F401  (the tvk device)
from tvk_kernels import config
from tvk_kernels.kernels import attention, attention_coopmat
from tvk_kernels.kernels.launch import family

from test_attention import _compare, _dropout_route_agrees, _inputs


def _emulate(monkeypatch, request, subgroup: int) -> list:
    monkeypatch.setenv("TVK_COOPMAT_ATTENTION", f"emulate:{subgroup}")
    seen = []
    original = attention_coopmat.CoopAttention.pipeline

    def spy(self, kernel, *args):
        seen.append(kernel)
        return original(self, kernel, *args)

    monkeypatch.setattr(attention_coopmat.CoopAttention, "pipeline", spy)
    config.reload()  # kept launches made on the other route go
    request.addfinalizer(config.reload)
    return seen


@pytest.fixture
def emulated(request, monkeypatch):
    """float16 attention routed to the template's emulation at subgroup size 32 (NVIDIA's); the kernels built."""
    return _emulate(monkeypatch, request, 32)


@pytest.fixture
def emulated64(request, monkeypatch):
    """The same at subgroup size 64 (AMD's wave64: four scalar threads a row)."""
    return _emulate(monkeypatch, request, 64)


@pytest.mark.parametrize("case", [
    dict(shape=(2, 2, 2, 7, 7, 32)),
    dict(shape=(1, 4, 2, 5, 9, 24), enable_gqa=True),  # grouped heads, odd lengths, a head dim padded to 32
    dict(shape=(1, 2, 2, 37, 45, 64), is_causal=True),  # several steps of BC, rows past the diagonal
    dict(shape=(1, 1, 1, 6, 70, 128)),
    dict(shape=(1, 2, 2, 8, 8, 32), scale=0.3),
])
def test_forward_and_backward_match_float64(emulated, case):
    case = dict(case)
    q, k, v, grad = _inputs(*case.pop("shape"), seed=3)
    _compare(q, k, v, grad, torch.float16, **case)
    assert {0, 2, 3} <= set(emulated), emulated


@pytest.mark.parametrize("split, shape", [(3, (1, 4, 2, 21, 37, 48)), (4, (1, 2, 1, 19, 40, 64))])
def test_dk_dv_split_along_the_head_dim(emulated, device, monkeypatch, split, shape):
    """dK/dV split over HSPLIT workgroups along the head dim (each recomputes the scores, keeps its columns of dK
    and dV): the same gradients, grouped heads and causal included; the split kernel is the one that ran."""
    resolve = attention_coopmat.CoopAttention.resolve
    monkeypatch.setattr(attention_coopmat.CoopAttention, "resolve",
                        lambda self, bucket, explicit=None: {**resolve(self, bucket, explicit), "HSPLIT": split})
    q, k, v, grad = _inputs(*shape, seed=5)
    _compare(q, k, v, grad, torch.float16, enable_gqa=True, is_causal=True)
    kernels = family(device, attention_coopmat.CoopAttention)._pipelines  # keyed by (template, defines, ...)
    assert 3 in emulated and any(("HSPLIT", split) in key[1] for key in kernels), list(kernels)


def test_wave64(emulated64):
    q, k, v, grad = _inputs(1, 4, 2, 37, 45, 32, seed=13)
    _compare(q, k, v, grad, torch.float16, enable_gqa=True, is_causal=True)
    assert {0, 2, 3} <= set(emulated64)


def test_scores_rising_along_the_keys_move_the_lazy_maximum(emulated):
    """The forward keeps a row's maximum until a step's scores pass it by more than TAU, then rescales O: rows whose
    scores rise along the keys (q along +k) rescale at every step, rows whose scores fall (q along -k) never do,
    in the same subgroup; a causal row sees only its first keys."""
    q, k, v, grad = _inputs(1, 2, 2, 16, 100, 32, seed=21)
    ramp = torch.linspace(0.0, 6.0, 100).view(1, 1, 100, 1)  # later keys longer: scores up to ~35 apart
    k = k * 0.2 + ramp
    sign = torch.tensor([1.0, -1.0]).repeat(8).view(1, 1, 16, 1)
    q = q * 0.2 + sign
    _compare(q, k, v, grad, torch.float16)
    _compare(q, k[:, :, :16], v[:, :, :16], grad, torch.float16, is_causal=True)
    assert {0, 2, 3} <= set(emulated)


def test_masks(emulated):
    q, k, v, grad = _inputs(2, 2, 2, 19, 35, 32, seed=4)
    keep = torch.rand(2, 1, 19, 35, generator=torch.Generator().manual_seed(5)) > 0.3
    keep[:, :, 3] = False  # a fully masked row: output 0, no gradient
    _compare(q, k, v, grad, torch.float16, mask=keep)
    additive = torch.randn(1, 2, 19, 35, generator=torch.Generator().manual_seed(6))
    _compare(q, k, v, grad, torch.float16, mask=additive)  # its gradient too
    assert {0, 2, 3} <= set(emulated)


@pytest.mark.parametrize("head", [40, 64])  # 40: rows not whole octets (VEC 1); 64: 16-byte loads (VEC 8)
def test_views_of_one_projection(emulated, head, monkeypatch):
    """q, k, v as heads split off one [batch, length, 3 * heads * head] projection (HF's layout), read in place."""
    widths = []
    original = attention_coopmat.vec_width
    monkeypatch.setattr(attention_coopmat, "vec_width", lambda *a: widths.append(original(*a)) or widths[-1])
    g = torch.Generator().manual_seed(7)
    b, n, h = 2, 21, 2
    qkv = torch.randn(b, n, 3 * h * head, generator=g)
    grad = torch.randn(b, h, n, head, generator=g)

    def run(device):
        x = qkv.half().to(device).requires_grad_()
        q, k, v = (t.view(b, n, h, head).transpose(1, 2) for t in x.split(h * head, dim=2))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad.half().to(device))
        return out.float().cpu(), x.grad.float().cpu()

    want = run("cpu")
    got = run("tvk")
    for a, w in zip(got, want):
        assert (a - w).abs().max() <= 1e-2 * (1 + w.abs().max())
    assert widths and set(widths) == {8 if head % 8 == 0 and (3 * h * head) % 8 == 0 else 1}


def test_dropout_masks_agree_with_the_fp32_route(emulated, monkeypatch):
    """The same seed drops the same scores here as on attention.comp, forward and backward."""
    _dropout_route_agrees(*_inputs(1, 2, 2, 24, 40, 32, seed=9), monkeypatch, "TVK_COOPMAT_ATTENTION", "0")
    assert {0, 2, 3} <= set(emulated)


def test_routing(device, monkeypatch):
    """float16 only; without cooperative matrices (lavapipe) only the emulation routes here; the switches."""
    if "VK_KHR_cooperative_matrix" not in device.facts.extensions:  # lavapipe
        assert attention_coopmat.route(device, "float16", attention.check_coopmat) is None
    monkeypatch.setenv("TVK_COOPMAT_ATTENTION", "0")
    assert attention_coopmat.route(device, "float16", attention.check_coopmat) is None
    monkeypatch.delenv("TVK_COOPMAT_ATTENTION")
    monkeypatch.setattr(attention_coopmat, "BACKWARD_ROUTE", False)  # the forward alone (design note 54)
    monkeypatch.setenv("TVK_COOPMAT_ATTENTION", "emulate")
    assert attention_coopmat.route(device, "float16", attention.check_coopmat, backward=True) is not None
    monkeypatch.delenv("TVK_COOPMAT_ATTENTION")
    assert attention_coopmat.route(device, "float16", attention.check_coopmat, backward=True) is None
    monkeypatch.setattr(attention_coopmat, "BACKWARD_ROUTE", True)
    monkeypatch.setenv("TVK_COOPMAT_ATTENTION", "emulate")
    fam, sub = attention_coopmat.route(device, "float16", attention.check_coopmat)
    assert sub == 32 and isinstance(fam, attention_coopmat.CoopAttention)
    assert attention_coopmat.route(device, "float32", attention.check_coopmat) is None
    monkeypatch.setenv("TVK_COOPMAT_ATTENTION", "emulate:24")
    with pytest.raises(ValueError, match="16, 32, 48 or 64"):
        attention_coopmat.route(device, "float16", attention.check_coopmat)


def test_tiles_shrink_to_the_shared_memory(device):
    """Where a head dim's tiles do not fit, BC then BR halve; each kernel's shared bytes as the template declares."""
    fam = family(device, attention_coopmat.CoopAttention)
    params = {"BR": 128, "BC": 64, "BBR": 128, "BBC": 64}
    limit = device.facts.max_shared_memory
    for kernel in (0, 2, 3):
        br, bc = fam.tiles(kernel, params, 128, 64)
        assert attention_coopmat.shared_bytes(kernel, br, bc, 128, 64, True) <= limit
        assert (br, bc) != (128, 64) or attention_coopmat.shared_bytes(kernel, 128, 64, 128, 64, True) <= limit


def test_real_route_matches_float64(device, monkeypatch):
    """The cooperative-matrix kernels themselves, where the device has them (the H200/H100 device tests)."""
    from tvk_kernels.kernels.matmul_coopmat import coop_shapes

    shapes = [(s["M"], s["N"], s["K"], s["A"], s["C"]) for s in coop_shapes(device)]
    if (16, 16, 16, "float16", "float32") not in shapes:
        pytest.skip(f"{device.facts.name} has no 16x16x16 fp16 cooperative matrices (the emulation tests above run)")
    monkeypatch.setenv("TVK_COOPMAT_ATTENTION", "1")  # on by default (ROUTE_BY_DEFAULT); asked for all the same
    config.reload()
    routed = attention_coopmat.route(device, "float16", attention.check_coopmat)
    assert routed is not None, "the check against numpy failed (see its warning)"
    for case in (dict(shape=(2, 4, 2, 77, 130, 64), enable_gqa=True, is_causal=True),
                 dict(shape=(1, 2, 2, 200, 33, 128)), dict(shape=(2, 2, 2, 65, 65, 40), scale=0.2)):
        case = dict(case)
        q, k, v, grad = _inputs(*case.pop("shape"), seed=12)
        _compare(q, k, v, grad, torch.float16, **case)


def test_a_dry_run_leaves_the_decision_to_a_real_run(device, monkeypatch):
    """As conv's: a compiled program's dry first run neither runs the check nor keeps a verdict."""
    fam = family(device, attention_coopmat.CoopAttention)
    monkeypatch.setattr(fam, "_checked", {})
    monkeypatch.setattr(attention_coopmat, "has_16x16x16", lambda dev: True)
    calls = []
    with device.stream.dry_run():
        assert not fam.routed(lambda dev: calls.append(dev) or True)
    assert calls == [] and fam._checked == {}
    if device.facts.subgroup_size % 16 == 0:  # lavapipe at LP_NATIVE_VECTOR_WIDTH 512 and up
        assert fam.routed(lambda dev: calls.append(dev) or True) and len(calls) == 1
