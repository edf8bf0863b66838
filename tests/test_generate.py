"""Hugging Face `model.generate()` on tvk, for tiny models built from configs (random init, nothing
downloaded): greedy decoding of a left-padded batch of two prompts gives the CPU's tokens, token for
token, and no op runs on the CPU.

- Eagerly: GPT-2, Llama (grouped-query attention: one kv head for two heads) and T5 (encoder-decoder).
- With the model's forward under torch.compile(backend="tvk"), the form a user writes (transformers
  compiles on its own only on CUDA-like devices): with the default DynamicCache, whose 2-D attention
  mask is cast to bool on the model's device while Dynamo traces (compile/fake.py), and with
  cache_implementation="static", whose StaticCache keeps its `cumulative_length` as a 0-dim CPU
  tensor that the first compiled forward reads (backend.py's `_upload_cpu_scalars`).
- Under torch.inference_mode, a second generate call of the same shapes compiles no new graph:
  Dynamo's guards on a tvk tensor's geometry (_tensor.py's `_geometry_memo`) hold from call to call.
"""
import copy

import pytest
import torch

import torchvk
from torchvk.compile import backend

transformers = pytest.importorskip("transformers")

VOCAB = 64
PAD = 0
NEW_TOKENS = 6

# Initial weight scales picked so that, on the CPU, the top two logits differ by 0.05 or more at every
# generated step of these prompts: float32 rounding cannot flip a greedy token.


def _gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2, initializer_range=0.2,
        bos_token_id=1, eos_token_id=2, pad_token_id=PAD))


def _llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=32, initializer_range=0.5,
        bos_token_id=1, eos_token_id=2, pad_token_id=PAD))


def _t5():
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, initializer_factor=5.0,
        decoder_start_token_id=PAD, eos_token_id=2, pad_token_id=PAD))


MODELS = {"gpt2": _gpt2, "llama": _llama, "t5": _t5}


def _reference(name):
    torch.manual_seed(0)
    return MODELS[name]().eval()


def _prompts():
    """Two prompts of five tokens, the second left-padded by two (decoder-only models generate after
    the last position, so padding goes on the left)."""
    input_ids = torch.randint(3, VOCAB, (2, 5), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones(2, 5, dtype=torch.long)
    input_ids[1, :2] = PAD
    attention_mask[1, :2] = 0
    return input_ids, attention_mask


def _greedy(model, device, **options):
    input_ids, attention_mask = _prompts()
    tokens = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                            do_sample=False, max_new_tokens=NEW_TOKENS, pad_token_id=PAD, **options)
    return tokens.cpu()


def _compiled_tvk_copy(reference):
    # a fresh Dynamo cache: the forwards earlier tests compiled (the same code, another model) would count
    # toward its recompile limit, past which Dynamo runs the forward uncompiled without a word
    torch._dynamo.reset()
    model = copy.deepcopy(reference).to("tvk")
    model.forward = torch.compile(model.forward, backend="tvk")
    return model


@pytest.mark.parametrize("name", MODELS)
def test_greedy_generate_gives_the_cpu_tokens(name):
    reference = _reference(name)
    model = copy.deepcopy(reference).to("tvk")
    expected = _greedy(reference, "cpu")
    torchvk.reset_op_counts()
    got = _greedy(model, "tvk")
    assert torchvk.op_counts()["cpu"] == {}
    assert got.tolist() == expected.tolist()


@pytest.mark.parametrize("name, cache", [("gpt2", "dynamic"), ("llama", "static"), ("t5", "static")])
def test_compiled_greedy_generate_gives_the_cpu_tokens(name, cache):
    options = {"cache_implementation": "static"} if cache == "static" else {}
    reference = _reference(name)
    expected = _greedy(reference, "cpu", **options)
    model = _compiled_tvk_copy(reference)
    graphs_before = len(backend.compiled_graphs)
    torchvk.reset_op_counts()
    got = _greedy(model, "tvk", **options)
    assert len(backend.compiled_graphs) > graphs_before  # the forward ran compiled
    assert torchvk.op_counts()["cpu"] == {}
    assert got.tolist() == expected.tolist()


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_a_second_compiled_generate_under_inference_mode_compiles_no_new_graph(cache):
    options = {"cache_implementation": "static"} if cache == "static" else {}
    reference = _reference("gpt2")
    expected = _greedy(reference, "cpu", **options)
    model = _compiled_tvk_copy(reference)
    with torch.inference_mode():
        first = _greedy(model, "tvk", **options)
        graphs_after_first = len(backend.compiled_graphs)
        torchvk.reset_op_counts()
        second = _greedy(model, "tvk", **options)
    assert len(backend.compiled_graphs) == graphs_after_first, "the second call recompiled"
    assert torchvk.op_counts()["cpu"] == {}
    assert first.tolist() == expected.tolist() and second.tolist() == expected.tolist()
