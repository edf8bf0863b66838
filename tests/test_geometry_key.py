"""Every tvk tensor carries its geometry read once (`_geometry_key`, `_byte_offset`: what the
dispatcher's key and every kernel's addresses are built from). Each way torch or a user changes
a tensor's geometry in place must leave those attributes true, or a later op would run with the
wrong shape, strides or address: a silent wrong result."""
import copy
import pickle

import pytest
import torch

import torchvk  # noqa: F401


def _true(t):
    """The attributes equal what torch says of the tensor now."""
    assert t._geometry_key == (tuple(t.shape), t.stride(), t.dtype, t._tvk.device)
    assert t._byte_offset == t.storage_offset() * t.element_size()


def _computes(t, want):
    """An elementwise op and a reduction on t (repeated: the second call runs from the dispatcher's
    remembered key) give CPU's answers."""
    for _ in range(2):
        torch.testing.assert_close((t * 2 + 1).cpu(), want * 2 + 1)
        torch.testing.assert_close(t.sum(-1).cpu(), want.sum(-1), rtol=1e-5, atol=1e-5)


def _pair(*shape):
    cpu = torch.randn(*shape)
    return cpu.to("tvk"), cpu.clone()


@pytest.mark.parametrize("change", [
    lambda t: t.t_(),
    lambda t: t.transpose_(0, 1),
    lambda t: t.unsqueeze_(1),
    lambda t: t.squeeze_(),
    lambda t: t.as_strided_((2, 3), (1, 4), 1),
    lambda t: t.swapdims_(0, 1),
    lambda t: t.resize_(2, 2),
    lambda t: t.resize_(5, 7),  # grows the storage
])
def test_in_place_geometry_ops_keep_the_key_true(change):
    t, cpu = _pair(4, 3)
    _computes(t, cpu)  # the old geometry is remembered by the dispatcher first
    change(t)
    _true(t)
    if t.numel() <= cpu.numel():  # resize_ past the old size leaves new elements undefined
        change(cpu)
        _computes(t, cpu)


def test_data_assignment_and_swap_tensors_keep_the_key_true():
    t, cpu = _pair(4, 3)
    other, other_cpu = _pair(6)
    _computes(t, cpu)
    t.data = other[1:].view(5, 1)
    _true(t)
    _computes(t, other_cpu[1:].view(5, 1))

    a, a_cpu = _pair(3, 2)
    b, b_cpu = _pair(2, 5)
    b = b[:, 1:]  # a view at an offset
    _computes(a, a_cpu)
    torch.utils.swap_tensors(a, b)
    _true(a)
    _true(b)
    _computes(a, b_cpu[:, 1:])
    _computes(b, a_cpu)


def test_module_conversions_and_copies_keep_the_key_true():
    model = torch.nn.Linear(3, 4).to("tvk")
    model.half().float()  # `.data =` on every parameter
    with torch.no_grad():
        model.load_state_dict({"weight": torch.ones(4, 3, device="tvk")[:, :3], "bias": torch.zeros(4, device="tvk")},
                              assign=True)
    for p in model.parameters():
        _true(p)
    _computes(model.weight.detach(), torch.ones(4, 3))
    t, cpu = _pair(3, 4)
    view = t[1:, 1:]
    for c in (copy.deepcopy(view), pickle.loads(pickle.dumps(view)), view.detach(), torch.nn.Parameter(view)):
        _true(c)
        _computes(c.detach(), cpu[1:, 1:])


def test_views_at_offsets_address_their_own_elements():
    t, cpu = _pair(6, 5)
    for rows, cols in ((slice(1, 4), slice(2, None)), (slice(5, 6), slice(0, 3)), (slice(None), slice(4, 5))):
        view = t[rows, cols]
        _true(view)
        _computes(view, cpu[rows, cols])


@pytest.mark.parametrize("make", [
    lambda t: t,
    lambda t: t[0, 0],                                        # 0-d, at an offset
    lambda t: t[:, 1:4:2],                                    # a step
    lambda t: t.permute(2, 0, 1),
    lambda t: t[:1].expand(5, 3, 7),                          # stride 0
    lambda t: t[:, :0],                                       # no elements
    lambda t: t.as_strided((3, 2), (2, 5), 7),
    lambda t: t.unsqueeze(0).contiguous(memory_format=torch.channels_last),
    lambda t: t.transpose(0, 2).contiguous(),
    lambda t: t.unfold(2, 3, 2),
    lambda t: t.view(torch.int32),
    lambda t: t.flatten()[3:],
    lambda t: torch.empty_strided((2, 3), (1, 4), device="tvk"),
    lambda t: t.sum(1),
    lambda t: t.half()[1:].float(),
])
def test_every_way_a_tensor_is_made_carries_its_true_geometry(make):
    _true(make(torch.randn(5, 3, 7).to("tvk")))
