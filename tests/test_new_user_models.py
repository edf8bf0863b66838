"""What a new user's first models hit (a smoke run after the kernel-family refactor): the fused
inference path of nn.TransformerEncoderLayer, bool and int inputs that torch refuses or that
TorchVK lacks, and hardshrink's lambda in half precision. Torch on the CPU is the reference."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchvk  # noqa: F401


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer_inference_fast_path_matches_cpu(norm_first, activation):
    torch.manual_seed(0)
    cpu = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=norm_first,
                                     activation=activation).eval()
    tvk = copy.deepcopy(cpu).to("tvk")
    x = torch.randn(2, 5, 16)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    for masks in ({}, {"src_key_padding_mask": pad}, {"src_mask": causal}):
        with torch.no_grad():  # torch takes aten._transformer_encoder_layer_fwd here
            want = cpu(x, **masks)
            got = tvk(x.to("tvk"), **{k: v.to("tvk") for k, v in masks.items()})
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", [torch.relu, torch.relu_, torch.argmax, torch.argmin])
def test_bool_inputs_torch_refuses_are_refused_alike(op):
    b = torch.tensor([True, False, True])
    with pytest.raises(RuntimeError) as want:
        op(b.clone())
    with pytest.raises(RuntimeError) as got:
        op(b.to("tvk"))
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_hardshrink_compares_with_lambda_in_the_input_dtype(dtype):
    x = torch.tensor([0.3, -0.3, 0.31, -0.29, 1.0], dtype=dtype)
    torch.testing.assert_close(F.hardshrink(x.to("tvk"), 0.3).cpu(), F.hardshrink(x, 0.3), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_int_bitwise_ops_match_cpu(dtype):
    a = torch.tensor([3, -1, 4, 1 << 20, 0], dtype=dtype)
    b = torch.tensor([5, 7, -8, 3, -1], dtype=dtype)
    mask = torch.tensor([True, False, True, True, False])
    ta, tb, tm = a.to("tvk"), b.to("tvk"), mask.to("tvk")
    for f in (lambda x, y, m: x & y, lambda x, y, m: x | y, lambda x, y, m: x ^ y, lambda x, y, m: ~x,
              lambda x, y, m: x & 6, lambda x, y, m: x ^ 3, lambda x, y, m: x & m, lambda x, y, m: m ^ m):
        want, got = f(a, b, mask), f(ta, tb, tm).cpu()
        assert got.dtype == want.dtype and torch.equal(got, want)
    t = ta.clone()
    t |= tb
    assert torch.equal(t.cpu(), a | b)


def test_bitwise_ops_on_floats_are_refused_as_torch_refuses_them():
    x = torch.tensor([1.0, 2.0])
    with pytest.raises(NotImplementedError):
        x & x
    with pytest.raises(NotImplementedError, match="bitwise_and"):
        x.to("tvk") & x.to("tvk")


def test_transformer_encoder_with_padding_in_eval_says_how_to_run():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    x, pad = torch.randn(2, 5, 16), torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    nested = nn.TransformerEncoder(copy.deepcopy(layer), 2).eval().to("tvk")
    with torch.no_grad(), pytest.raises(NotImplementedError, match="enable_nested_tensor=False"):
        nested(x.to("tvk"), src_key_padding_mask=pad.to("tvk"))
    cpu = nn.TransformerEncoder(copy.deepcopy(layer), 2, enable_nested_tensor=False).eval()
    tvk = copy.deepcopy(cpu).to("tvk")
    with torch.no_grad():
        torch.testing.assert_close(tvk(x.to("tvk"), src_key_padding_mask=pad.to("tvk")).cpu(),
                                   cpu(x, src_key_padding_mask=pad), rtol=1e-4, atol=1e-5)
