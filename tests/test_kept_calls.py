"""Kept calls (tvk_kernels/kernels/kept_calls.py): a kernel entry point's launches are learned at a
key's second call and replayed with new addresses; what cannot be replayed exactly runs in full."""
import struct

import numpy as np
import torch
import torch.nn.functional as F

import torchvk  # noqa: F401
from tvk_kernels import config
from tvk_kernels.kernels import conv, elementwise, kept_calls, norm, reduce, softmax
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


def test_a_call_with_scratch_memory_is_kept_and_stays_right():
    device = get_device()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    want = conv.reference_conv2d_backward(g, x, w, padding=1)[1]
    conv.conv2d_backward_weight.kept.clear()
    for _ in range(4):  # split in 3 slices: partial sums in scratch memory, summed by a second pass
        xb, gb = device.upload(x), device.upload(g)
        out = device.allocator.alloc(w.nbytes)
        conv.conv2d_backward_weight(device, gb.address, xb.address, out.address, x.shape, w.shape, padding=1,
                                    split_k=3)
        got = device.download(out, np.float32, w.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert _kinds(conv.conv2d_backward_weight) == {"_Kept"}
    (kept,) = conv.conv2d_backward_weight.kept.values()
    assert kept.scratch  # the partials are allocated anew by every replay


@kept_calls.kept_call("x_addr", "out_addr")
def _five_times(device, x_addr, out_addr, n):
    """out = 5 x through two scratch buffers of one size, the first freed before the second is taken
    (so in the call both have one address; a replay must still tell their push words apart)."""
    first = device.allocator.alloc(4 * n)
    elementwise.add(device, x_addr, x_addr, first.address, n)
    elementwise.add(device, first.address, x_addr, out_addr, n)  # 3 x
    device.stream.keep_alive(first)
    del first
    second = device.allocator.alloc(4 * n)
    elementwise.add(device, out_addr, x_addr, second.address, n)
    elementwise.add(device, second.address, x_addr, out_addr, n)  # 5 x
    device.stream.keep_alive(second)


_held = []


@kept_calls.kept_call("x_addr", "out_addr")
def _with_a_held_buffer(device, x_addr, out_addr, n):
    """out = 4 x through a buffer the call keeps for later (a table's, not scratch)."""
    _held[:] = [device.allocator.alloc(4 * n)]
    elementwise.add(device, x_addr, x_addr, _held[0].address, n)
    elementwise.add(device, _held[0].address, x_addr, out_addr, n)
    elementwise.add(device, _held[0].address, _held[0].address, out_addr, n)


_tables: dict = {}
_by_address: dict = {}


@kept_calls.kept_call("x_addr", "out_addr")
def _copy_through_a_buffer_kept_per_input(device, x_addr, out_addr, n):
    """out = x + x through a buffer kept per input address (the probe's moved input makes one too)."""
    buf = _by_address.setdefault(x_addr, device.allocator.alloc(4 * n))
    elementwise.add(device, x_addr, x_addr, buf.address, n)
    elementwise.add(device, buf.address, x_addr, out_addr, n)
    elementwise.add(device, buf.address, buf.address, out_addr, n)


@kept_calls.kept_call("x_addr", "out_addr")
def _plus_table(device, x_addr, out_addr, n):
    """out = x + [0, 1, 2 ...] from a table uploaded once per size and kept (as attention's geometry)."""
    table = _tables.get(n)
    if table is None:
        table = _tables[n] = device.upload(np.arange(n, dtype=np.float32))
    elementwise.add(device, x_addr, table.address, out_addr, n)


def test_an_upload_while_a_call_is_learned_runs_and_a_kept_buffer_keeps_its_own_address():
    device = get_device()
    n = 300
    for step in range(4):
        if step == 1:
            _tables.clear()  # the table is made again while the call is learned (captured)
        x = np.full(n, float(step), dtype=np.float32)
        xb, out = device.upload(x), device.allocator.alloc(4 * n)
        _plus_table(device, xb.address, out.address, n)
        np.testing.assert_allclose(device.download(out, np.float32, (n,)), x + np.arange(n))
    assert _kinds(_plus_table) == {"not kept"}  # it uploaded: not replayable
    inputs = [device.upload(np.full(n, float(step), dtype=np.float32)) for step in range(3)]  # 3 addresses
    for step, xb in enumerate(inputs):
        out = device.allocator.alloc(4 * n)
        _copy_through_a_buffer_kept_per_input(device, xb.address, out.address, n)
        np.testing.assert_allclose(device.download(out, np.float32, (n,)), np.full(n, 4.0 * step))
    assert len(_by_address) == 4  # three inputs, and the probe's moved one
    for buf in list(_tables.values()) + list(_by_address.values()):  # a buffer kept never keeps a moved address
        assert buf.address == buf.block.address + buf.offset


def test_replays_allocate_their_own_scratch_and_a_buffer_that_outlives_the_call_is_not_scratch():
    device = get_device()
    n = 1000
    for fn, times in ((_five_times, 5), (_with_a_held_buffer, 4)):
        for step in range(4):
            x = np.arange(n, dtype=np.float32) + step
            xb, out = device.upload(x), device.allocator.alloc(4 * n)
            fn(device, xb.address, out.address, n)
            np.testing.assert_allclose(device.download(out, np.float32, (n,)), times * x)
    assert _kinds(_five_times) == {"_Kept"}
    (kept,) = _five_times.kept.values()
    assert kept.scratch == [4 * n, 4 * n] and kept.kept == [0, 1]
    # each launch's words: x, out, and the scratch buffers (2, 3) told apart though they shared an address
    assert [sorted({i for _, i, _ in launch[3].fill}) for launch in kept.launches] == [[0, 2], [0, 1, 2], [0, 1, 3],
                                                                                [0, 1, 3]]
    assert _kinds(_with_a_held_buffer) == {"not kept"}


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
