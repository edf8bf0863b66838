"""torchvk.compile takes a model's calls as the model does (torch.compile's calling convention):
keyword arguments, tensors nested in tuples, lists and dicts, numbers and None among them, and
returns what the model returns (a dict, a namedtuple, a Hugging Face ModelOutput), each gradient
matching the uncompiled model's."""
import collections
import copy

import pytest
import torch
import torch.nn as nn

import torchvk

Pair = collections.namedtuple("Pair", "logits hidden")


class Keyworded(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 6)
        self.head = nn.Linear(6, 3)

    def forward(self, features, *, mask=None, scale=1.0, extras=(), labels=None):
        hidden = torch.tanh(self.embed(features)) * scale
        if mask is not None:
            hidden = hidden * mask.unsqueeze(-1)
        for extra in extras:
            hidden = hidden + extra["bias"]
        logits = self.head(hidden)
        loss = None if labels is None else nn.functional.cross_entropy(logits.reshape(-1, 3), labels.reshape(-1))
        return {"loss": loss, "out": Pair(logits, hidden), "steps": 2}


def _inputs(device):
    torch.manual_seed(0)
    features = torch.randn(2, 5, 4)
    mask = (torch.rand(2, 5) > 0.3).float()
    bias = torch.randn(6)
    labels = torch.randint(0, 3, (2, 5))
    return (features.to(device),), {"mask": mask.to(device), "scale": 0.5, "extras": [{"bias": bias.to(device)}],
                                    "labels": labels.to(device)}


def _grads(model):
    return {name: p.grad.cpu() for name, p in model.named_parameters()}


def test_keyword_and_nested_arguments_and_structured_outputs_match_the_model():
    torch.manual_seed(1)
    reference = Keyworded()
    model = copy.deepcopy(reference).to("tvk")
    compiled = torchvk.compile(model)
    args, kwargs = _inputs("cpu")
    expected = reference(*args, **kwargs)
    expected["loss"].backward()
    for step in range(2):  # the second call replays
        model.zero_grad(set_to_none=True)
        got = compiled(*_inputs("tvk")[0], **_inputs("tvk")[1])
        assert set(got) == {"loss", "out", "steps"} and got["steps"] == 2 and isinstance(got["out"], Pair)
        torch.testing.assert_close(got["out"].logits.cpu(), expected["out"].logits.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got["loss"].cpu(), expected["loss"].detach(), rtol=1e-5, atol=1e-6)
        got["loss"].backward()
        for name, grad in _grads(model).items():
            torch.testing.assert_close(grad, reference.get_parameter(name).grad, rtol=1e-4, atol=1e-5)
    assert len(compiled.compile_stats()) == 1


def test_another_non_tensor_argument_traces_again_and_none_is_kept():
    model = Keyworded().to("tvk")
    compiled = torchvk.compile(model)
    x = torch.randn(2, 5, 4).to("tvk")
    first = compiled(x, scale=1.0)
    second = compiled(x, scale=2.0)
    assert first["loss"] is None and second["loss"] is None
    torch.testing.assert_close(second["out"].hidden.cpu(), (torch.tanh(model.embed(x)) * 2.0).cpu())
    assert len(compiled.compile_stats()) == 2


def test_an_argument_of_another_kind_is_a_clear_error():
    compiled = torchvk.compile(Keyworded().to("tvk"))
    with pytest.raises(TypeError, match="argument holds a object"):
        compiled(torch.randn(2, 5, 4).to("tvk"), scale=object())


def test_a_hugging_face_gpt2_trains_with_keyword_arguments_and_model_output():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=61, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    reference = transformers.GPT2LMHeadModel(config)
    model = copy.deepcopy(reference).to("tvk")
    compiled = torchvk.compile(model)
    ids = torch.randint(0, 61, (2, 12))
    expected = reference(input_ids=ids, labels=ids, use_cache=False)
    expected.loss.backward()
    got = compiled(input_ids=ids.to("tvk"), labels=ids.to("tvk"), use_cache=False)
    assert type(got) is type(expected)
    torch.testing.assert_close(got.loss.cpu(), expected.loss.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.logits.cpu(), expected.logits.detach(), rtol=1e-4, atol=1e-4)
    got.loss.backward()
    for name, grad in _grads(model).items():
        torch.testing.assert_close(grad, reference.get_parameter(name).grad, rtol=1e-3, atol=1e-4)
