"""Kept calls (tvk_kernels/kernels/kept_calls.py): a kernel entry point's launches are learned at a
key's second call and replayed with new addresses; what cannot be replayed exactly runs in full."""
import struct

import numpy as np
import torch
import torch.nn.functional as F

import torchvk  # noqa: F401
from tvk_kernels import config
from tvk_kernels.kernels import conv, kept_calls, norm, reduce, softmax
from tvk_kernels.runtime.device import get_device


def _kinds(fn):
    return {type(v).__name__ if type(v).__name__ == "_Kept" else ("seen" if v is kept_calls._SEEN else "not kept")
            for v in fn.kept.values()}


def test_replayed_calls_compute_on_the_new_tensors_like_cpu():
    gen = torch.Generator().manual_seed(0)
    for step in range(4):  # new tensors (new addresses) every time, one geometry: learned, then replayed
        x, w, b = (torch.randn(*s, generator=gen) for s in ((2, 3, 9, 9), (4, 3, 3, 3), (4,)))
        leaves_cpu = [t.clone().requires_grad_() for t in (x, w, b)]
        leaves_tvk = [t.to("tvk").requires_grad_() for t in (x, w, b)]
        results = []
        for xs, ws, bs in (leaves_cpu, leaves_tvk):
            y = F.batch_norm(F.conv2d(xs, ws, bs, stride=2, padding=1), None, None, training=True)
            y = F.layer_norm(y, y.shape[-1:])
            loss = (y.softmax(-1) * y.log_softmax(1)).sum(dim=(1, 3)).mean()
            loss.backward()
            results.append([loss] + [t.grad for t in (xs, ws, bs)])
        for want, got in zip(*results):
            torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    for fn in (conv.conv2d_forward, conv.conv2d_backward_input, conv.conv2d_backward_weight, norm.batch_norm,
               norm.batch_norm_backward, norm.layer_norm, softmax.softmax, reduce.reduce):
        assert "_Kept" in _kinds(fn), fn.__name__


def test_a_call_that_allocates_scratch_is_not_kept_and_stays_right():
    device = get_device()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    want = conv.reference_conv2d_backward(g, x, w, padding=1)[1]
    conv.conv2d_backward_weight.kept.clear()
    for _ in range(3):  # split in 3 slices: partial sums in scratch memory, summed by a second pass
        xb, gb = device.upload(x), device.upload(g)
        out = device.allocator.alloc(w.nbytes)
        conv.conv2d_backward_weight(device, gb.address, xb.address, out.address, x.shape, w.shape, padding=1,
                                    split_k=3)
        got = device.download(out, np.float32, w.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert _kinds(conv.conv2d_backward_weight) == {"not kept"}


def test_push_words_are_matched_to_addresses_or_refused():
    fmt = struct.Struct("<3QI")
    a, b = 0x7F00_0000_1000, 0x7F00_0002_0040
    shift = kept_calls._SHIFT
    first = fmt.pack(a + 64, b, 5, 7)
    moved = fmt.pack(a + 64 + shift, b + 2 * shift, 5, 7)
    assert kept_calls._slots(first, moved, [a, b]) == [(0, 0, 64), (8, 1, 0)]
    # a word that moves, but not as an address does (a / 4): refused
    assert kept_calls._slots(fmt.pack(a // 4, b, 5, 7), fmt.pack((a + shift) // 4, b + 2 * shift, 5, 7), [a, b]) is None
    # a constant that differs between the runs: refused
    assert kept_calls._slots(fmt.pack(a, b, 5, 7), fmt.pack(a + shift, b + 2 * shift, 6, 7), [a, b]) is None


def test_kept_launches_are_learned_again_after_the_configs_reload():
    x = torch.randn(5, 7)
    for _ in range(2):
        torch.testing.assert_close(torch.softmax(x.to("tvk"), -1).cpu(), torch.softmax(x, -1))
    config.reload()
    for _ in range(3):
        x = torch.randn(5, 7)
        torch.testing.assert_close(torch.softmax(x.to("tvk"), -1).cpu(), torch.softmax(x, -1))
    assert "_Kept" in _kinds(softmax.softmax)
