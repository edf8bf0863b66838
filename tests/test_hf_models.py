"""Hugging Face decoder LMs and an encoder-decoder under torch.compile(backend="tvk"), built from
tiny configs (random init, nothing downloaded): the step-0 loss and every gradient match the same
model on the CPU, and no op runs on the CPU. Their KV-cache code makes a real tvk tensor while
Dynamo traces (an empty cache, torch.tensor([], device=...)), which meets the fakes (compile/fake.py)."""
import copy

import pytest
import torch

import torchvk

transformers = pytest.importorskip("transformers")

VOCAB = 61


def _gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0))


def _llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32))


def _t5():
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.0,
        decoder_start_token_id=0, pad_token_id=0))


MODELS = {"gpt2": (_gpt2, False), "llama": (_llama, False), "t5": (_t5, True)}


@pytest.mark.parametrize("name", MODELS)
def test_trains_under_torch_compile_as_on_the_cpu(name):
    make, seq2seq = MODELS[name]
    torch.manual_seed(0)
    reference = make()
    model = copy.deepcopy(reference).to("tvk")
    compiled = torch.compile(model, backend="tvk")
    ids = torch.randint(1, VOCAB, (2, 10))
    labels = torch.randint(1, VOCAB, (2, 7)) if seq2seq else ids
    expected = reference(input_ids=ids, labels=labels)
    expected.loss.backward()
    torchvk.reset_op_counts()
    got = compiled(input_ids=ids.to("tvk"), labels=labels.to("tvk"))
    got.loss.backward()
    assert torchvk.op_counts()["cpu"] == {}
    torch.testing.assert_close(got.loss.cpu(), expected.loss.detach(), rtol=1e-5, atol=1e-5)
    for (param_name, param), ref_param in zip(model.named_parameters(), reference.parameters()):
        if ref_param.grad is not None:
            torch.testing.assert_close(param.grad.cpu(), ref_param.grad, rtol=1e-3, atol=1e-5, msg=param_name)


def test_a_new_sequence_length_runs_under_dynamic_shapes():
    # the second length makes Dynamo mark the sequence dimension dynamic (symbolic sizes while it traces)
    torch.manual_seed(0)
    reference = _gpt2()
    model = copy.deepcopy(reference).to("tvk")
    compiled = torch.compile(model, backend="tvk")
    for length in (10, 7, 5):
        ids = torch.randint(1, VOCAB, (2, length))
        got = compiled(input_ids=ids.to("tvk"), labels=ids.to("tvk")).loss
        torch.testing.assert_close(got.cpu(), reference(input_ids=ids, labels=ids).loss.detach(), rtol=1e-5, atol=1e-5)
