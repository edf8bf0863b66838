"""cdist, weight norm, embedding_bag, 3-d average pooling, trilinear and bicubic upsampling,
grid_sample, F.bilinear and group norm on a non-contiguous input on tvk
(torchvk/aten/composites.py): compositions of our ops above autograd, forward and grads against
torch CPU, eager and compiled, 0 CPU ops."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torchvk
from cpu_reference import grads_match


def _trains_like_cpu(ref, x, target, loss_fn, grads=()):
    """One training step of `ref` on tvk in eager mode, torchvk.compile and torch.compile: the loss
    (and the grads of the parameters named in `grads`) as on the CPU, and 0 CPU ops."""
    for mode in ("eager", "torchvk.compile", "torch.compile"):
        m = copy.deepcopy(ref).to("tvk")
        if mode == "torchvk.compile":
            run = torchvk.compile(m, loss_fn=loss_fn)
        else:
            net = torch.compile(m, backend="tvk") if mode == "torch.compile" else m
            run = lambda a, b: loss_fn(net(a), b)  # noqa: E731
        torchvk.reset_op_counts()
        loss = run(x.to("tvk"), target.to("tvk"))
        loss.backward()
        want = loss_fn(ref(x), target)
        torch.testing.assert_close(loss.cpu(), want.detach(), rtol=1e-5, atol=1e-6)
        if grads:
            ref.zero_grad()
            want.backward()
            mine, theirs = dict(m.named_parameters()), dict(ref.named_parameters())
            for name in grads:
                torch.testing.assert_close(mine[name].grad.cpu(), theirs[name].grad, rtol=1e-4, atol=1e-5)
        assert torchvk.op_counts()["cpu"] == {}, mode


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, float("inf")])
@pytest.mark.parametrize("rows", [5, 31])  # more than 25 rows: torch's matmul form for p=2
def test_cdist(p, rows):
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(2, rows, 3, generator=g), torch.randn(1, 4, 3, generator=g)  # batch broadcast
    grads_match(lambda a, b: torch.cdist(a, b, p=p), x1, x2)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_weight_norm(dim):
    g = torch.Generator().manual_seed(0)
    v = torch.randn(4, 3, generator=g)
    gain = torch.rand((4, 1) if dim == 0 else (1, 3) if dim == 1 else (), generator=g) + 0.5
    grads_match(lambda a, b: torch._weight_norm(a, b, dim), v, gain)


@pytest.mark.parametrize("mode,case", [(m, c) for m in ("sum", "mean", "max")
                                       for c in ("offsets", "2d", "weights", "padding", "last_offset")
                                       if c != "weights" or m == "sum"])  # torch takes weights with sum only
def test_embedding_bag(mode, case):
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(10, 3, generator=g)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0])
    offsets = torch.tensor([0, 3, 3, 7])  # the second bag is empty
    kw = {"mode": mode}
    if case == "2d":
        idx, offsets = idx[:8].view(4, 2), None
    if case == "weights":
        kw["per_sample_weights"] = torch.rand(9, generator=g)
    if case == "padding":
        kw["padding_idx"] = 4
    if case == "last_offset":
        offsets = torch.tensor([0, 3, 3, 7, 9])
        kw["include_last_offset"] = True

    def run(w, *rest):
        extra = dict(kw)
        if "per_sample_weights" in extra:
            extra["per_sample_weights"] = rest[-1]
        return F.embedding_bag(idx.to(w.device), w, None if offsets is None else offsets.to(w.device), **extra)

    inputs = (weight,) + ((kw["per_sample_weights"],) if "per_sample_weights" in kw else ())
    grads_match(run, *inputs)


def test_models_with_them_train_compiled():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = torch.nn.EmbeddingBag(20, 6, mode="mean")
            self.lin = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(6, 6))
            self.centers = torch.nn.Parameter(torch.randn(3, 6))

        def forward(self, x):
            return -torch.cdist(self.lin(self.bag(x)), self.centers)

    torch.manual_seed(0)
    ref = Net()
    _trains_like_cpu(ref, torch.randint(0, 20, (4, 5)), torch.tensor([0, 2, 1, 0]), F.cross_entropy)


_VOL = torch.randn(2, 3, 7, 6, 9, generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1)),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
                                dict(kernel_size=(2, 3, 2), ceil_mode=True, count_include_pad=False),
                                dict(kernel_size=2, divisor_override=3)], ids=str)
@pytest.mark.parametrize("batched", [True, False])
def test_avg_pool3d(kw, batched):
    grads_match(lambda v: F.avg_pool3d(v, **kw), _VOL if batched else _VOL[0])


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1)),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=2, dilation=(2, 1, 2))], ids=str)
@pytest.mark.parametrize("batched", [True, False])
def test_max_pool3d(kw, batched):
    v = _VOL if batched else _VOL[0]
    grads_match(lambda x: F.max_pool3d(x, **kw), v)
    got, want = F.max_pool3d(v.to("tvk"), return_indices=True, **kw), F.max_pool3d(v, return_indices=True, **kw)
    torch.testing.assert_close(got[1].cpu(), want[1])
    ties = torch.zeros(1, 1, 4, 4, 4)  # every window all equal: torch's first index in (d, h, w) order
    torch.testing.assert_close(F.max_pool3d(ties.to("tvk"), 2, return_indices=True)[1].cpu(),
                               F.max_pool3d(ties, 2, return_indices=True)[1])


@pytest.mark.parametrize("size", [(1, 1, 1), (3, 4, 5), (7, 6, 9), (4, 3, 2)])
def test_adaptive_avg_pool3d(size):
    grads_match(lambda v: F.adaptive_avg_pool3d(v, size), _VOL)


@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(9, 4, 13)), dict(scale_factor=(1.5, 0.7, 2.3)),
                                dict(size=(5, 8, 3), align_corners=True), dict(scale_factor=1.7, align_corners=True)],
                         ids=str)
def test_trilinear_upsampling(kw):
    kw.setdefault("align_corners", False)
    grads_match(lambda v: F.interpolate(v, mode="trilinear", **kw), _VOL)


@pytest.mark.parametrize("bias", [True, False])
def test_bilinear(bias):
    g = torch.Generator().manual_seed(6)
    a, b = torch.randn(2, 3, 4, generator=g), torch.randn(2, 3, 5, generator=g)
    w = torch.randn(6, 4, 5, generator=g)
    if bias:
        grads_match(lambda x, y, w, c: F.bilinear(x, y, w, c), a, b, w, torch.randn(6, generator=g))
    else:
        grads_match(lambda x, y, w: F.bilinear(x, y, w), a, b, w)


def test_a_3d_model_trains_compiled():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv3d(2, 4, 3, padding=1)
            self.mix = torch.nn.Bilinear(4, 4, 3)

        def forward(self, x):
            y = F.avg_pool3d(torch.relu(self.conv(x)), 2, ceil_mode=True) + F.max_pool3d(self.conv(x), 2, ceil_mode=True)
            y = F.interpolate(y, scale_factor=2, mode="trilinear", align_corners=False)
            y = F.adaptive_avg_pool3d(y, 1).flatten(1)
            return self.mix(y, y)

    torch.manual_seed(0)
    ref = Net()
    _trains_like_cpu(ref, torch.randn(2, 2, 5, 6, 4), torch.randn(2, 3), F.mse_loss)


_IMG = torch.randn(2, 3, 7, 9, generator=torch.Generator().manual_seed(8))


@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(5, 13)), dict(scale_factor=(0.6, 1.7)),
                                dict(size=(11, 4), align_corners=True), dict(scale_factor=2.5, align_corners=True)],
                         ids=str)
def test_bicubic_upsampling(kw):
    kw.setdefault("align_corners", False)
    grads_match(lambda v: F.interpolate(v, mode="bicubic", **kw), _IMG, atol=1e-5)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample(mode, padding, align_corners):
    grid = torch.randn(2, 4, 5, 2, generator=torch.Generator().manual_seed(9)) * 0.8  # some outside [-1, 1]
    grads_match(lambda v, g: F.grid_sample(v, g, mode=mode, padding_mode=padding, align_corners=align_corners),
                 _IMG, grid)


def test_grid_sample_modes_without_a_kernel_are_a_clear_error():
    x, g = _IMG.to("tvk"), torch.zeros(2, 3, 3, 2).to("tvk")
    for kw in (dict(mode="bicubic"), dict(padding_mode="reflection")):
        with pytest.raises(NotImplementedError, match="grid_sample"):
            F.grid_sample(x, g, align_corners=False, **kw)
    assert F.grid_sample(x, g, align_corners=False).shape == (2, 3, 3, 3)  # still usable


def test_a_resampling_model_trains_compiled():
    """Bicubic upsampling and grid_sample inside a model: eager, torchvk.compile and torch.compile."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 2, 3, padding=1)
            self.theta = torch.nn.Parameter(torch.tensor([[0.9, 0.1, 0.05], [-0.1, 0.8, 0.0]]))

        def forward(self, x):
            y = F.interpolate(self.conv(x), scale_factor=1.5, mode="bicubic", align_corners=False)
            grid = F.affine_grid(self.theta.expand(x.shape[0], 2, 3), (x.shape[0], 2, 6, 5), align_corners=False)
            return F.grid_sample(y, grid, align_corners=False).flatten(1)

    torch.manual_seed(0)
    ref = Net()
    _trains_like_cpu(ref, torch.randn(2, 3, 7, 9), torch.randn(2, 60), F.mse_loss, grads=("theta",))


@pytest.mark.parametrize("p", [1.0, 2.0, float("inf")])
def test_pdist_renorm_multi_margin(p):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(6, 4, generator=g)
    grads_match(lambda v: F.pdist(v, p), x)
    grads_match(lambda v: torch.renorm(v, p, 0, 1.5), x)
    target = torch.tensor([0, 3, 1, 2, 3, 0])
    w = torch.rand(4, generator=g)
    for power in (1, 2):
        grads_match(lambda v: F.multi_margin_loss(v, target.to(v.device), p=power, margin=0.7, weight=w.to(v.device),
                                                   reduction="none"), x)


def test_logspace():
    torch.testing.assert_close(torch.logspace(-1, 2, 7, base=3.0, device="tvk").cpu(), torch.logspace(-1, 2, 7, base=3.0))


class _GroupNormOfPermuted(torch.nn.Module):
    """GroupNorm on a permuted (non-contiguous) input, as diffusers' attention blocks hand it on."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.GroupNorm(2, 4)

    def forward(self, x):  # x: (N, H, W, C)
        return self.norm(x.permute(0, 3, 1, 2))


def test_group_norm_takes_a_non_contiguous_input():
    # torch's composite views the input as (N, groups, -1), which a permuted one cannot be
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 4, requires_grad=True)
    _trains_like_cpu(_GroupNormOfPermuted(), x, torch.randn(2, 4, 3, 5),
                     lambda out, target: F.mse_loss(out, target), grads=("norm.weight", "norm.bias"))


def test_group_norm_keeps_the_input_memory_format_as_torch_does():
    # a compiled graph traced torch's layout: a channels-last output where the input is channels-last
    x = torch.randn(2, 4, 3, 8).permute(0, 3, 1, 2)
    want = F.group_norm(x, 2)
    got = F.group_norm(x.to("tvk"), 2)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
