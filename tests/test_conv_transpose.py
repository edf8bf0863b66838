"""ConvTranspose1d/2d/3d, Conv1d and Conv3d on tvk, forward and the grads of input, weight and bias, against
torch CPU autograd; and a short training loop with 0 CPU ops.

Transposed conv reuses the plain conv's kernels (aten/conv.py): the cases below cover stride
phases without kernel taps (stride > kernel), output_padding both below the stride and at or
above it (allowed when below the dilation), groups, dilation, 1-D and odd sizes.
"""
import pytest
import torch
import torch.nn.functional as F

import torchvk

TOL = dict(atol=1e-4, rtol=1e-4)


def _check(fn, x_shape, w_shape, bias):
    torch.manual_seed(0)
    cpu = [torch.randn(x_shape), torch.randn(w_shape)] + ([torch.randn(bias)] if bias else [])
    cpu = [t.requires_grad_() for t in cpu]
    dev = [t.detach().to("tvk").requires_grad_() for t in cpu]
    ref, got = fn(*cpu), fn(*dev)
    assert got.device.type == "tvk"
    torch.testing.assert_close(got.cpu(), ref.detach(), **TOL)
    grad = torch.randn(ref.shape)
    ref.backward(grad)
    got.backward(grad.to("tvk"))
    for c, d, name in zip(cpu, dev, ("input", "weight", "bias")):
        torch.testing.assert_close(d.grad.cpu(), c.grad, **TOL, msg=lambda m: f"grad of {name}: {m}")


# (x, w, stride, padding, output_padding, groups, dilation)
CASES_2D = {
    "plain": ((2, 3, 5, 4), (3, 4, 3, 3), 1, 0, 0, 1, 1),
    "stride2_pad_outpad": ((2, 4, 5, 6), (4, 3, 3, 3), 2, 1, 1, 1, 1),
    "stride_above_kernel": ((1, 2, 4, 3), (2, 3, 2, 1), (3, 2), (0, 0), (2, 1), 1, 1),
    "groups_dilation": ((2, 4, 4, 5), (4, 3, 3, 2), 2, (1, 2), 0, 2, (2, 1)),
    "outpad_from_dilation": ((1, 2, 5, 4), (2, 2, 3, 3), 1, 1, 1, 1, 2),
}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("case", list(CASES_2D))
def test_conv_transpose2d(case, bias):
    x, w, s, p, op, g, d = CASES_2D[case]
    oc = w[1] * g
    _check(lambda x_, w_, b_=None: F.conv_transpose2d(x_, w_, b_, s, p, op, g, d), x, w, (oc,) if bias else None)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("s, p, op, g, d", [(2, 1, 1, 1, 1), (3, 0, 2, 2, 1), (1, 2, 1, 1, 2)])
def test_conv_transpose1d(s, p, op, g, d, bias):
    w = (4, 3, 3)
    _check(lambda x_, w_, b_=None: F.conv_transpose1d(x_, w_, b_, s, p, op, g, d), (2, 4, 7), w,
           (w[1] * g,) if bias else None)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_conv1d(bias):
    _check(lambda x_, w_, b_=None: F.conv1d(x_, w_, b_, stride=2, padding=1, dilation=2, groups=2), (2, 4, 11),
           (6, 2, 3), (6,) if bias else None)


def test_modules_train_on_tvk_like_cpu():
    """Conv1d -> ConvTranspose1d and Conv2d -> ConvTranspose2d autoencoders, two SGD steps: the
    same losses as on the CPU and no op on the CPU."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.e1, self.d1 = torch.nn.Conv1d(2, 4, 3, stride=2, padding=1), torch.nn.ConvTranspose1d(
                4, 2, 3, stride=2, padding=1, output_padding=1)
            self.e2, self.d2 = torch.nn.Conv2d(2, 4, 3, stride=2, padding=1), torch.nn.ConvTranspose2d(
                4, 2, 3, stride=2, padding=1, output_padding=1, groups=2, bias=False)

        def forward(self, a, b):
            return self.d1(torch.relu(self.e1(a))), self.d2(torch.relu(self.e2(b)))

    cpu_net = Net()
    dev_net = Net()
    dev_net.load_state_dict(cpu_net.state_dict())
    dev_net.to("tvk")
    a, b = torch.randn(3, 2, 8), torch.randn(3, 2, 6, 6)
    losses = {}
    torchvk.reset_op_counts()
    for net, dv in ((cpu_net, "cpu"), (dev_net, "tvk")):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        losses[dv] = []
        for _ in range(2):
            ya, yb = net(a.to(dv), b.to(dv))
            loss = F.mse_loss(ya, a.to(dv)) + F.mse_loss(yb, b.to(dv))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[dv].append(loss.item())
    assert torchvk.op_counts()["cpu"] == {}
    torch.testing.assert_close(torch.tensor(losses["tvk"]), torch.tensor(losses["cpu"]), **TOL)
    assert losses["cpu"][1] != losses["cpu"][0]  # the step changed the weights


# (x, transposed conv's w, conv's w, stride, padding, output_padding (transposed only), groups, dilation)
CASES_3D = {
    "stride_pad": ((2, 2, 4, 3, 4), (2, 3, 3, 2, 2), (3, 2, 3, 2, 2), (2, 1, 2), (1, 0, 1), (1, 0, 1), 1, 1),
    "groups_dilation": ((1, 4, 5, 3, 3), (4, 1, 2, 2, 3), (2, 2, 2, 2, 3), 1, (0, 1, 1), (1, 0, 0), 2, (2, 1, 1)),
}


@pytest.mark.parametrize("transposed", [False, True], ids=["conv3d", "conv_transpose3d"])
@pytest.mark.parametrize("case", list(CASES_3D))
def test_conv3d(case, transposed):
    """3-D runs as 2-D convs per kernel depth tap (aten/conv.py); with a bias in one case."""
    x, wt, wc, s, p, op, g, d = CASES_3D[case]
    bias = case == "stride_pad"
    if transposed:
        _check(lambda x_, w_, b_=None: F.conv_transpose3d(x_, w_, b_, s, p, op, g, d), x, wt,
               (wt[1] * g,) if bias else None)
    else:
        _check(lambda x_, w_, b_=None: F.conv3d(x_, w_, b_, s, p, d, g), x, wc, (wc[0],) if bias else None)


def test_compiled_relu_of_conv3d_and_conv_transpose():
    """Compiled mode fuses relu(convolution) into the 2-D kernel's epilogue; 3-D and transposed
    convs have none and apply the ReLU after."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.up = torch.nn.Conv3d(2, 3, 2), torch.nn.ConvTranspose1d(3, 2, 2)

        def forward(self, x):
            return torch.relu(self.up(torch.relu(self.conv(x)).flatten(2)))

    net = Net()
    x = torch.randn(1, 2, 3, 3, 3)
    with torch.no_grad():
        ref = net(x)
    assert (ref == 0).any()  # the ReLUs clip something
    got = torchvk.compile(net.to("tvk"))(x.to("tvk"))
    torch.testing.assert_close(got.detach().cpu(), ref, **TOL)


T = torch.randn
BAD = {
    "bias size": lambda: (F.conv_transpose2d, T(1, 4, 5, 5), T(4, 3, 3, 3), T(4)),
    "output_padding 2-D": lambda: (lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=2), T(1, 4, 5, 5),
                                   T(4, 3, 3, 3)),
    "output_padding 1-D": lambda: (lambda x, w: F.conv_transpose1d(x, w, stride=2, output_padding=2), T(1, 4, 5),
                                   T(4, 3, 3)),
    "output_padding 3-D": lambda: (lambda x, w: F.conv_transpose3d(x, w, stride=2, output_padding=(0, 2, 0)),
                                   T(1, 4, 3, 3, 3), T(4, 3, 2, 2, 2)),
    "negative output_padding": lambda: (lambda x, w: F.conv_transpose2d(x, w, output_padding=-1), T(1, 4, 5, 5),
                                        T(4, 3, 3, 3)),
    "input channels": lambda: (F.conv_transpose2d, T(1, 5, 5, 5), T(4, 3, 3, 3)),
    "groups": lambda: (lambda x, w: F.conv_transpose2d(x, w, groups=3), T(1, 4, 5, 5), T(4, 3, 3, 3)),
    "conv3d bias size": lambda: (F.conv3d, T(1, 2, 4, 4, 4), T(3, 2, 2, 2, 2), T(2)),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_arguments_raise_what_the_cpu_raises(case):
    """Checks torch's meta kernels leave out: without them a wrong channel count read past the input."""
    fn, *args = BAD[case]()
    with pytest.raises(RuntimeError) as cpu:
        fn(*args)
    with pytest.raises(RuntimeError) as tvk:
        fn(*(a.to("tvk") for a in args))
    assert str(tvk.value) == str(cpu.value)
