"""The model zoo: models as users bring them (plain torch.nn, torch.optim), each with a factory,
an input spec, a loss and an optimizer, at two sizes: "tiny" (tests, --quick) and "bench".

Plain torch, no torchvk import and no relative import: the torch CPU/CUDA peers load this file
by path in a process without torchvk (see peer.py for why). Dropout is 0 everywhere so that
tvk, torch CPU and the compiled modes draw no random numbers and must give the same losses.
"""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[..., nn.Module]          # build(**dims) -> the model (random init: seed first)
    inputs: Callable[..., tuple]             # inputs(generator, **dims) -> (x, target), CPU tensors
    loss: Callable                           # loss(model(x), target) -> scalar
    optimizer: Callable                      # optimizer(params) -> torch.optim optimizer
    tiny: dict                               # dims for tests and --quick
    bench: dict                              # dims for the benchmark
    library: str = ""                        # the third-party library it comes from ("": plain torch.nn, ours)
    # BatchNorm over few values and ReLU kinks: rounding flips a few elements' paths (one position of one
    # channel), so its gradients are compared as a whole (norm of the difference), not element by element
    compare_by_norm: bool = False


def sgd(params):
    # 0.01: at 0.05 the tiny BatchNorm CNNs' first step overshoots (ResNet-18's loss 1.4 -> 5.1), and the second
    # step's gradients turn on a ReLU input's rounding (float32 CPU itself 1% off a float64 referee)
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)


def token_loss(logits, target):
    """Cross-entropy over every position of a (batch, seq, classes) output."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


# ---- inputs ---------------------------------------------------------------------------------------

def images(g, batch, channels, size, classes, **_):
    return torch.randn(batch, channels, size, size, generator=g), torch.randint(0, classes, (batch,), generator=g)


def features(g, batch, width, classes, **_):
    return torch.randn(batch, width, generator=g), torch.randint(0, classes, (batch,), generator=g)


def pixels_to_classes(g, batch, channels, size, classes, **_):
    return torch.randn(batch, channels, size, size, generator=g), torch.randint(0, classes, (batch, size, size), generator=g)


def next_tokens(g, batch, seq, vocab, **_):
    data = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return data[:, :-1], data[:, 1:]


def token_sequences(g, batch, seq, vocab, classes, **_):
    return torch.randint(0, vocab, (batch, seq), generator=g), torch.randint(0, classes, (batch,), generator=g)


def unit_features(g, batch, width, **_):
    x = torch.rand(batch, width, generator=g)
    return x, x


# ---- models ---------------------------------------------------------------------------------------

def mlp(width, hidden, classes, **_):
    return nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, classes))


def lenet(channels, size, classes, c1, c2, hidden, **_):
    flat = c2 * (((size - 2) // 2 - 2) // 2) ** 2
    return nn.Sequential(nn.Conv2d(channels, c1, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(c1, c2, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(flat, hidden), nn.ReLU(), nn.Linear(hidden, classes))


class BasicBlock(nn.Module):
    """ResNet's: two 3x3 conv + BatchNorm, a 1x1 conv + BatchNorm shortcut where the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def resnet(channels, classes, width, **_):
    return nn.Sequential(nn.Conv2d(channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                         BasicBlock(width, width, 1), BasicBlock(width, 2 * width, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, classes))


class InvertedResidual(nn.Module):
    """MobileNetV2/V3's block: 1x1 expand, 3x3 depthwise (groups=channels), 1x1 project, residual."""

    def __init__(self, c, expand):
        super().__init__()
        h = c * expand
        self.block = nn.Sequential(nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
                                   nn.Conv2d(h, h, 3, 1, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.Hardswish(),
                                   nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.block(x)


def mobilenet(channels, classes, width, **_):
    return nn.Sequential(nn.Conv2d(channels, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.Hardswish(),
                         InvertedResidual(width, 4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, classes))


class TinyUNet(nn.Module):
    """One level down and up: the up path is a ConvTranspose2d, concatenated with the skip."""

    def __init__(self, channels, classes, width, **_):
        super().__init__()

        def double(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())

        self.down = double(channels, width)
        self.middle = double(width, 2 * width)
        self.up = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.decode = double(2 * width, width)
        self.head = nn.Conv2d(width, classes, 1)

    def forward(self, x):
        skip = self.down(x)
        mid = self.middle(F.max_pool2d(skip, 2))
        return self.head(self.decode(torch.cat([self.up(mid), skip], dim=1)))


class DecoderOnlyTransformer(nn.Module):
    """GPT-style: token + learned position embeddings, causal TransformerEncoderLayers, LayerNorm, head."""

    def __init__(self, vocab, seq, d, heads, layers, **_):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                                               batch_first=True, norm_first=True) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        x = self.tok(idx) + self.pos[:, :t]
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.head(self.ln(x))


class LSTMClassifier(nn.Module):
    def __init__(self, vocab, classes, d, hidden, **_):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, idx):
        out, _ = self.lstm(self.embed(idx))
        return self.head(out[:, -1])


class GRUTagger(nn.Module):
    """A sequence model: one prediction per position (next-token here)."""

    def __init__(self, vocab, d, hidden, **_):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.gru = nn.GRU(d, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx):
        out, _ = self.gru(self.embed(idx))
        return self.head(out)


class TinyViT(nn.Module):
    """Patch embedding (a conv with stride = patch), class token, positions, one transformer layer."""

    def __init__(self, channels, size, patch, classes, d, heads, **_):
        super().__init__()
        self.patches = nn.Conv2d(channels, d, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, d) * 0.02)
        self.layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, activation="gelu", batch_first=True,
                                                norm_first=True)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        tokens = self.patches(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1) + self.pos
        return self.head(self.ln(self.layer(tokens))[:, 0])


class GroupNormCNN(nn.Module):
    """Diffusion/UNet-style blocks: dilated "same" convs, GroupNorm and InstanceNorm, SiLU, an
    align_corners bilinear upsample, a ceil-mode average pool and adaptive pooling."""

    def __init__(self, channels, classes, width, groups, **_):
        super().__init__()
        self.c1 = nn.Conv2d(channels, width, 3, padding="same", dilation=2)
        self.g1 = nn.GroupNorm(groups, width)
        self.c2 = nn.Conv2d(width, width, 3, stride=2, padding=1, bias=False)
        self.n2 = nn.InstanceNorm2d(width, affine=True)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.pool = nn.AdaptiveAvgPool2d((2, 3))
        self.head = nn.Linear(width * 6, classes)

    def forward(self, x):
        x = F.silu(self.g1(self.c1(x)))
        x = F.softplus(self.n2(self.c2(x)))
        x = F.avg_pool2d(self.up(x), 2, ceil_mode=True)
        return self.head(self.pool(x).flatten(1))


class CrossAttention(nn.Module):
    """Queries attend to a projected memory of another width (kdim/vdim), with a key padding
    mask built in forward (the last position is padding), a residual and LayerNorm."""

    def __init__(self, width, memory, heads, outputs, **_):
        super().__init__()
        self.memory = nn.Linear(width, memory)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True, kdim=memory, vdim=memory)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, outputs)

    def forward(self, x):
        kv = self.memory(x)
        pad = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device)
        pad[:, -1] = True
        y, _ = self.attn(x, kv, kv, key_padding_mask=pad, need_weights=False)
        return self.head(self.norm(y + x).mean(1))


def sequences_to_values(g, batch, seq, width, outputs, **_):
    return torch.randn(batch, seq, width, generator=g), torch.randn(batch, outputs, generator=g)


def autoencoder(width, code, **_):
    return nn.Sequential(nn.Linear(width, 2 * code), nn.ReLU(), nn.Linear(2 * code, code), nn.ReLU(),
                         nn.Linear(code, 2 * code), nn.ReLU(), nn.Linear(2 * code, width), nn.Sigmoid())


# the Hugging Face models: kind -> (model class, config class, what the input is, the forward's keyword
# arguments beside it). Inputs: "tokens" (input_ids), "pixels" (pixel_values), "seq2seq" (input_ids, and
# decoder_input_ids: teacher forcing on the input itself), "audio" (input_features; the decoder reads the
# fixed tokens of a buffer)
HUGGING_FACE = {
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", "tokens", {"use_cache": False}),  # a KV cache: not for training
    "llama": ("LlamaForCausalLM", "LlamaConfig", "tokens", {"use_cache": False}),
    "mistral": ("MistralForCausalLM", "MistralConfig", "tokens", {"use_cache": False}),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", "tokens", {"use_cache": False}),
    "gemma": ("GemmaForCausalLM", "GemmaConfig", "tokens", {"use_cache": False}),
    "phi": ("PhiForCausalLM", "PhiConfig", "tokens", {"use_cache": False}),
    "mixtral": ("MixtralForCausalLM", "MixtralConfig", "tokens", {"use_cache": False}),
    "gpt_neox": ("GPTNeoXForCausalLM", "GPTNeoXConfig", "tokens", {"use_cache": False}),
    "opt": ("OPTForCausalLM", "OPTConfig", "tokens", {"use_cache": False}),
    "bert": ("BertForSequenceClassification", "BertConfig", "tokens", {}),
    "roberta": ("RobertaForSequenceClassification", "RobertaConfig", "tokens", {}),
    "distilbert": ("DistilBertForSequenceClassification", "DistilBertConfig", "tokens", {}),
    "vit": ("ViTForImageClassification", "ViTConfig", "pixels", {}),
    "t5": ("T5ForConditionalGeneration", "T5Config", "seq2seq", {"use_cache": False}),
    "bart": ("BartForConditionalGeneration", "BartConfig", "seq2seq", {"use_cache": False}),
    "whisper": ("WhisperForConditionalGeneration", "WhisperConfig", "audio", {"use_cache": False}),
}


class HuggingFace(nn.Module):
    """A Hugging Face transformers model built from a config (random init, nothing downloaded), called
    as users call it (keyword arguments, a ModelOutput back) and returning its logits."""

    def __init__(self, kind: str, decoder_tokens: torch.Tensor | None = None, **config):
        super().__init__()
        declare_torchvision_ops()  # transformers imports an installed torchvision
        import transformers  # lazy: only the Hugging Face entries need it (a test dependency)

        model_class, config_class, self.input, self.options = HUGGING_FACE[kind]
        self.model = getattr(transformers, model_class)(getattr(transformers, config_class)(**config))
        if decoder_tokens is not None:
            self.register_buffer("decoder_tokens", decoder_tokens, persistent=False)

    def forward(self, x):
        if self.input == "pixels":
            return self.model(pixel_values=x, **self.options).logits
        if self.input == "seq2seq":
            return self.model(input_ids=x, decoder_input_ids=x, **self.options).logits
        if self.input == "audio":
            return self.model(input_features=x, decoder_input_ids=self.decoder_tokens[:x.shape[0]], **self.options).logits
        return self.model(input_ids=x, **self.options).logits


def hf_gpt2(vocab, seq, d, heads, layers, **_):
    return HuggingFace("gpt2", vocab_size=vocab, n_positions=seq, n_embd=d, n_head=heads, n_layer=layers,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def hf_llama(vocab, seq, d, heads, layers, **_):
    return HuggingFace("llama", vocab_size=vocab, max_position_embeddings=seq, hidden_size=d, intermediate_size=2 * d,
                       num_attention_heads=heads, num_key_value_heads=max(heads // 2, 1), num_hidden_layers=layers)


def hf_decoder(kind, vocab, seq, d, heads, layers, config=None, **_):
    """Llama's relatives (Mistral, Qwen2, Gemma): grouped-query attention, rotary positions, gated MLPs;
    config: more of the model's config (Mistral's sliding window)."""
    return HuggingFace(kind, **(config or {}), vocab_size=vocab, max_position_embeddings=seq, hidden_size=d, intermediate_size=2 * d,
                       num_attention_heads=heads, num_key_value_heads=max(heads // 2, 1), num_hidden_layers=layers,
                       head_dim=d // heads)


def hf_phi(vocab, seq, d, heads, layers, **_):
    """Phi: a parallel attention + MLP block, partial rotary embedding, a biased LM head."""
    return HuggingFace("phi", vocab_size=vocab, max_position_embeddings=seq, hidden_size=d, intermediate_size=2 * d,
                       num_attention_heads=heads, num_hidden_layers=layers, partial_rotary_factor=0.5,
                       resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0)


def hf_gpt_neox(vocab, seq, d, heads, layers, **_):
    return HuggingFace("gpt_neox", vocab_size=vocab, max_position_embeddings=seq, hidden_size=d,
                       intermediate_size=2 * d, num_attention_heads=heads, num_hidden_layers=layers, rotary_pct=0.5,
                       hidden_dropout=0.0, attention_dropout=0.0)


def hf_opt(vocab, seq, d, heads, layers, **_):
    return HuggingFace("opt", vocab_size=vocab, max_position_embeddings=seq, hidden_size=d, word_embed_proj_dim=d,
                       ffn_dim=2 * d, num_attention_heads=heads, num_hidden_layers=layers, dropout=0.0,
                       attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0)


def hf_bert(vocab, seq, d, heads, layers, classes, **_):
    return HuggingFace("bert", vocab_size=vocab, max_position_embeddings=seq, hidden_size=d, intermediate_size=4 * d,
                       num_attention_heads=heads, num_hidden_layers=layers, num_labels=classes,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def hf_roberta(vocab, seq, d, heads, layers, classes, **_):
    # positions start after the padding id (1): seq + 2 of them
    return HuggingFace("roberta", vocab_size=vocab, max_position_embeddings=seq + 2, hidden_size=d,
                       intermediate_size=4 * d, num_attention_heads=heads, num_hidden_layers=layers, num_labels=classes,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0)


def hf_distilbert(vocab, seq, d, heads, layers, classes, **_):
    return HuggingFace("distilbert", vocab_size=vocab, max_position_embeddings=seq, dim=d, hidden_dim=4 * d,
                       n_heads=heads, n_layers=layers, num_labels=classes, dropout=0.0, attention_dropout=0.0,
                       seq_classif_dropout=0.0)


def hf_vit(channels, size, patch, classes, d, heads, layers, **_):
    return HuggingFace("vit", image_size=size, patch_size=patch, num_channels=channels, hidden_size=d,
                       num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=4 * d, num_labels=classes,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def hf_t5(vocab, d, heads, layers, **_):
    return HuggingFace("t5", vocab_size=vocab, d_model=d, d_kv=d // heads, d_ff=4 * d, num_layers=layers,
                       num_decoder_layers=layers, num_heads=heads, dropout_rate=0.0)


def hf_bart(vocab, seq, d, heads, layers, **_):
    return HuggingFace("bart", vocab_size=vocab, max_position_embeddings=seq, d_model=d, encoder_layers=layers,
                       decoder_layers=layers, encoder_attention_heads=heads, decoder_attention_heads=heads,
                       encoder_ffn_dim=2 * d, decoder_ffn_dim=2 * d, dropout=0.0, attention_dropout=0.0,
                       activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0)


def hf_whisper(batch, vocab, seq, mels, frames, d, heads, layers, **_):
    """Whisper: a conv front end over log-mel frames (stride 2: frames // 2 positions), an encoder-decoder."""
    decoder_tokens = torch.randint(0, vocab, (batch, seq))
    return HuggingFace("whisper", decoder_tokens, vocab_size=vocab, num_mel_bins=mels, max_source_positions=frames // 2,
                       max_target_positions=seq, d_model=d, encoder_layers=layers, decoder_layers=layers,
                       encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=2 * d,
                       decoder_ffn_dim=2 * d, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                       encoder_layerdrop=0.0, decoder_layerdrop=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                       decoder_start_token_id=1)


def log_mel_frames(g, batch, vocab, seq, mels, frames, **_):
    return torch.randn(batch, mels, frames, generator=g), torch.randint(0, vocab, (batch, seq), generator=g)


# diffusers models: kind -> (model class, what the forward takes beside the sample). "timestep": a UNet's
# noise level (one per sample, from a buffer); "text": also cross-attention over fixed embeddings
DIFFUSERS = {
    "unet2d": ("UNet2DModel", "timestep"),
    "unet2d_condition": ("UNet2DConditionModel", "text"),
    "vae": ("AutoencoderKL", ""),
}


class Diffusers(nn.Module):
    """A diffusers model built from its config (random init), called as a denoising step: it returns
    the predicted noise (UNets) or the reconstruction (the VAE; its posterior's mode, no sampling)."""

    def __init__(self, kind: str, batch: int, text: tuple[int, int] | None = None, **config):
        super().__init__()
        import_torchvision()  # diffusers imports an installed torchvision
        import diffusers  # lazy: a test dependency

        model_class, self.conditioning = DIFFUSERS[kind]
        self.model = getattr(diffusers, model_class)(**config)
        self.register_buffer("timesteps", torch.arange(batch) * 97 % 1000, persistent=False)
        if text is not None:
            self.register_buffer("text", torch.randn(batch, *text), persistent=False)

    def forward(self, x):
        if self.conditioning == "timestep":
            return self.model(x, self.timesteps[:x.shape[0]]).sample
        if self.conditioning == "text":
            return self.model(x, self.timesteps[:x.shape[0]], encoder_hidden_states=self.text[:x.shape[0]]).sample
        return self.model(x).sample


def diffusers_unet(batch, channels, size, width, groups, **_):
    """The DDPM UNet: ResNet blocks with a timestep embedding, GroupNorm, self-attention at the lower level."""
    return Diffusers("unet2d", batch, sample_size=size, in_channels=channels, out_channels=channels,
                     layers_per_block=1, block_out_channels=(width, 2 * width), norm_num_groups=groups,
                     down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
                     attention_head_dim=width)


def diffusers_unet_condition(batch, channels, size, width, groups, tokens, **_):
    """Stable Diffusion's UNet: cross-attention transformer blocks over text embeddings."""
    return Diffusers("unet2d_condition", batch, text=(tokens, width), sample_size=size, in_channels=channels,
                     out_channels=channels, layers_per_block=1, block_out_channels=(width, 2 * width),
                     norm_num_groups=groups, cross_attention_dim=width, attention_head_dim=groups,
                     down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                     up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))


def diffusers_vae(batch, channels, size, width, groups, **_):
    """Stable Diffusion's VAE (AutoencoderKL): an encoder to a latent Gaussian, a decoder back."""
    return Diffusers("vae", batch, in_channels=channels, out_channels=channels, latent_channels=4,
                     block_out_channels=(width, 2 * width), layers_per_block=1, norm_num_groups=groups,
                     down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                     sample_size=size)


def noisy_images(g, batch, channels, size, **_):
    """A denoising step's (sample, target): the model learns to map noise to other noise of its shape."""
    return torch.randn(batch, channels, size, size, generator=g), torch.randn(batch, channels, size, size, generator=g)


_TORCHVISION_OPS = None  # the op library declare_torchvision_ops makes where torchvision's compiled ops cannot load


def declare_torchvision_ops() -> None:
    """Let an installed torchvision import where its compiled ops cannot load: PyPI's Linux torchvision
    is built against CUDA torch, and under a CPU torch its import fails on declaring two detection ops
    its library would have defined ("operator torchvision::nms does not exist"), as does every import
    of it from transformers. Those two are declared here first (no kernel: calling them raises); the
    models need neither. Nothing happens where torchvision is absent, imported, or loads its ops."""
    global _TORCHVISION_OPS
    spec = importlib.util.find_spec("torchvision")
    if spec is None or "torchvision" in sys.modules:
        return
    try:
        torch.ops.torchvision.nms  # declared already (loaded, or by another copy of this module)
        return
    except (AttributeError, RuntimeError):
        pass
    compiled = next((p for p in Path(spec.origin).parent.iterdir() if p.name.startswith("_C.")), None)
    try:
        torch.ops.load_library(str(compiled))
    except (OSError, TypeError):
        _TORCHVISION_OPS = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            _TORCHVISION_OPS.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


def import_torchvision():
    """torchvision (see declare_torchvision_ops)."""
    if importlib.util.find_spec("torchvision") is None:
        raise ImportError("torchvision is not installed (pip install --no-deps torchvision==<torch's match>)")
    declare_torchvision_ops()
    import torchvision  # lazy: only the timm and torchvision entries need it (a test dependency)

    return torchvision


def timm_model(arch, classes, options=None, **_):
    """A timm model by name (random init), or a timm model class (MlpMixer) where the named variant fixes
    the sizes options shrink; options: its constructor's arguments (smaller variants)."""
    import_torchvision()  # timm imports torchvision
    import timm  # lazy: a test dependency

    if arch[0].isupper():
        return getattr(timm.models, arch)(num_classes=classes, **(options or {}))
    return timm.create_model(arch, pretrained=False, num_classes=classes, **(options or {}))


def torchvision_model(arch, classes, options=None, **_):
    """A torchvision classification model by name (random init): a builder (resnet18), or a model class
    (VisionTransformer) where a builder would fix the sizes options shrink."""
    build = getattr(import_torchvision().models, arch)
    weights = {} if isinstance(build, type) else {"weights": None}
    return build(**weights, num_classes=classes, **(options or {}))


# ---- the zoo --------------------------------------------------------------------------------------

ZOO = {m.name: m for m in [
    ZooModel("mlp", mlp, features, F.cross_entropy, sgd,
             tiny=dict(batch=4, width=12, hidden=16, classes=5),
             bench=dict(batch=128, width=784, hidden=512, classes=10)),
    ZooModel("lenet", lenet, images, F.cross_entropy, sgd,
             tiny=dict(batch=2, channels=1, size=12, classes=4, c1=3, c2=4, hidden=8),
             bench=dict(batch=64, channels=1, size=28, classes=10, c1=6, c2=16, hidden=120)),
    ZooModel("resnet", resnet, images, F.cross_entropy, sgd,
             tiny=dict(batch=2, channels=3, size=8, classes=4, width=4),
             bench=dict(batch=64, channels=3, size=32, classes=10, width=32)),
    ZooModel("mobilenet", mobilenet, images, F.cross_entropy, sgd,
             tiny=dict(batch=2, channels=3, size=8, classes=4, width=4),
             bench=dict(batch=64, channels=3, size=32, classes=10, width=32)),
    ZooModel("unet", TinyUNet, pixels_to_classes, F.cross_entropy, sgd,
             tiny=dict(batch=2, channels=1, size=8, classes=3, width=4),
             bench=dict(batch=16, channels=1, size=64, classes=3, width=16)),
    ZooModel("transformer", DecoderOnlyTransformer, next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=11, d=8, heads=2, layers=1),
             bench=dict(batch=16, seq=128, vocab=512, d=128, heads=4, layers=2)),
    ZooModel("lstm", LSTMClassifier, token_sequences, F.cross_entropy, adamw,
             tiny=dict(batch=2, seq=8, vocab=11, classes=3, d=6, hidden=8),
             bench=dict(batch=32, seq=64, vocab=1000, classes=4, d=64, hidden=128)),
    ZooModel("gru", GRUTagger, next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=11, d=6, hidden=8),
             bench=dict(batch=32, seq=64, vocab=512, d=64, hidden=128)),
    ZooModel("vit", TinyViT, images, F.cross_entropy, adamw,
             tiny=dict(batch=2, channels=3, size=8, patch=4, classes=4, d=8, heads=2),
             bench=dict(batch=64, channels=3, size=32, patch=4, classes=10, d=128, heads=4)),
    ZooModel("autoencoder", autoencoder, unit_features, F.mse_loss, adamw,
             tiny=dict(batch=4, width=12, code=4),
             bench=dict(batch=128, width=784, code=32)),
    ZooModel("groupnorm_cnn", GroupNormCNN, images, F.cross_entropy, adamw,
             tiny=dict(batch=2, channels=3, size=8, classes=5, width=8, groups=2),
             bench=dict(batch=64, channels=3, size=32, classes=10, width=64, groups=8)),
    ZooModel("cross_attention", CrossAttention, sequences_to_values, F.smooth_l1_loss, adamw,
             tiny=dict(batch=2, seq=5, width=12, memory=8, heads=3, outputs=4),
             bench=dict(batch=64, seq=64, width=128, memory=96, heads=4, outputs=8)),
    # Hugging Face transformers (a test dependency): decoder LMs, an encoder, a ViT, an encoder-decoder
    ZooModel("hf_gpt2", hf_gpt2, next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, d=16, heads=2, layers=1),
             bench=dict(batch=16, seq=256, vocab=8192, d=256, heads=4, layers=4), library="transformers"),
    ZooModel("hf_llama", hf_llama, next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, d=16, heads=4, layers=1),
             bench=dict(batch=16, seq=256, vocab=8192, d=256, heads=4, layers=4), library="transformers"),
    ZooModel("hf_bert", hf_bert, token_sequences, F.cross_entropy, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, classes=3, d=16, heads=2, layers=1),
             bench=dict(batch=32, seq=128, vocab=8192, classes=4, d=256, heads=4, layers=4), library="transformers"),
    ZooModel("hf_mistral", partial(hf_decoder, "mistral"), next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, d=16, heads=4, layers=1, config={"sliding_window": 4}),
             bench=dict(batch=16, seq=256, vocab=8192, d=256, heads=4, layers=4), library="transformers"),
    ZooModel("hf_qwen2", partial(hf_decoder, "qwen2"), next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, d=16, heads=4, layers=1),
             bench=dict(batch=16, seq=256, vocab=8192, d=256, heads=4, layers=4), library="transformers"),
    # a mixture of experts: top-2 routing, per-expert token counts (an integer histc), gathers and index_add
    ZooModel("hf_mixtral", partial(hf_decoder, "mixtral"), next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, d=16, heads=4, layers=1,
                       config={"num_local_experts": 4, "num_experts_per_tok": 2}),
             bench=dict(batch=16, seq=256, vocab=8192, d=256, heads=4, layers=4,
                        config={"num_local_experts": 8, "num_experts_per_tok": 2}), library="transformers"),
    ZooModel("hf_gemma", partial(hf_decoder, "gemma"), next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, d=16, heads=4, layers=1),
             bench=dict(batch=16, seq=256, vocab=8192, d=256, heads=4, layers=4), library="transformers"),
    ZooModel("hf_phi", hf_phi, next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, d=16, heads=2, layers=1),
             bench=dict(batch=16, seq=256, vocab=8192, d=256, heads=4, layers=4), library="transformers"),
    ZooModel("hf_gpt_neox", hf_gpt_neox, next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, d=16, heads=2, layers=1),
             bench=dict(batch=16, seq=256, vocab=8192, d=256, heads=4, layers=4), library="transformers"),
    ZooModel("hf_opt", hf_opt, next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, d=16, heads=2, layers=1),
             bench=dict(batch=16, seq=256, vocab=8192, d=256, heads=4, layers=4), library="transformers"),
    ZooModel("hf_roberta", hf_roberta, token_sequences, F.cross_entropy, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, classes=3, d=16, heads=2, layers=1),
             bench=dict(batch=32, seq=128, vocab=8192, classes=4, d=256, heads=4, layers=4), library="transformers"),
    ZooModel("hf_distilbert", hf_distilbert, token_sequences, F.cross_entropy, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, classes=3, d=16, heads=2, layers=1),
             bench=dict(batch=32, seq=128, vocab=8192, classes=4, d=256, heads=4, layers=4), library="transformers"),
    ZooModel("hf_vit", hf_vit, images, F.cross_entropy, adamw,
             tiny=dict(batch=2, channels=3, size=8, patch=4, classes=4, d=16, heads=2, layers=1),
             bench=dict(batch=32, channels=3, size=224, patch=16, classes=10, d=384, heads=6, layers=4),
             library="transformers"),
    ZooModel("hf_t5", hf_t5, next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, d=16, heads=2, layers=1),
             bench=dict(batch=16, seq=128, vocab=8192, d=256, heads=4, layers=2), library="transformers"),
    ZooModel("hf_bart", hf_bart, next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, d=16, heads=2, layers=1),
             bench=dict(batch=16, seq=128, vocab=8192, d=256, heads=4, layers=2), library="transformers"),
    ZooModel("hf_whisper", hf_whisper, log_mel_frames, token_loss, adamw,
             tiny=dict(batch=2, seq=6, vocab=29, mels=8, frames=16, d=16, heads=2, layers=1),
             bench=dict(batch=16, seq=64, vocab=8192, mels=80, frames=600, d=256, heads=4, layers=2),
             library="transformers"),
    # timm and torchvision CNNs (test dependencies); tiny: the same classes, fewer blocks and channels. Batch 4
    # at 64 px: BatchNorm over fewer values (batch 2, a 1x1 last stage) turns rounding into different losses
    # (one ReLU input of 4e-4 changing sign on a 1e-3 rounding error moved ShuffleNetV2's gradient 10%, against a
    # float64 referee; MobileNetV3's squeeze-excite needs batch 8)
    ZooModel("timm_resnet18", timm_model, images, F.cross_entropy, sgd,
             tiny=dict(arch="resnet18", batch=4, channels=3, size=64, classes=4, options={"layers": (1, 1, 1, 1)}),
             bench=dict(arch="resnet18", batch=32, channels=3, size=128, classes=10), library="timm", compare_by_norm=True),
    ZooModel("timm_efficientnet", timm_model, images, F.cross_entropy, adamw,
             tiny=dict(arch="tinynet_e", batch=4, channels=3, size=64, classes=4),
             bench=dict(arch="efficientnet_b0", batch=32, channels=3, size=128, classes=10), library="timm", compare_by_norm=True),
    ZooModel("timm_convnext", timm_model, images, F.cross_entropy, adamw,
             tiny=dict(arch="convnext_atto", batch=2, channels=3, size=32, classes=4,
                       options={"dims": (8, 16, 32, 64), "depths": (1, 1, 1, 1)}),
             bench=dict(arch="convnext_atto", batch=32, channels=3, size=128, classes=10), library="timm"),
    ZooModel("timm_vit", timm_model, images, F.cross_entropy, adamw,
             tiny=dict(arch="vit_tiny_patch16_224", batch=2, channels=3, size=16, classes=4,
                       options={"img_size": 16, "patch_size": 8, "embed_dim": 16, "depth": 1, "num_heads": 2}),
             bench=dict(arch="vit_tiny_patch16_224", batch=32, channels=3, size=224, classes=10), library="timm"),
    ZooModel("timm_mobilenetv3", timm_model, images, F.cross_entropy, adamw,
             tiny=dict(arch="mobilenetv3_small_050", batch=8, channels=3, size=64, classes=4),
             bench=dict(arch="mobilenetv3_small_100", batch=32, channels=3, size=128, classes=10), library="timm",
             compare_by_norm=True),
    ZooModel("timm_regnet", timm_model, images, F.cross_entropy, sgd,
             tiny=dict(arch="regnetx_002", batch=4, channels=3, size=32, classes=4),
             bench=dict(arch="regnetx_002", batch=32, channels=3, size=128, classes=10), library="timm",
             compare_by_norm=True),
    ZooModel("timm_mixer", timm_model, images, F.cross_entropy, adamw,
             tiny=dict(arch="MlpMixer", batch=2, channels=3, size=16, classes=4,
                       options={"img_size": 16, "patch_size": 8, "embed_dim": 16, "num_blocks": 1}),
             bench=dict(arch="mixer_s16_224", batch=32, channels=3, size=224, classes=10), library="timm"),
    ZooModel("tv_resnet18", torchvision_model, images, F.cross_entropy, sgd,
             tiny=dict(arch="resnet18", batch=4, channels=3, size=64, classes=4),
             bench=dict(arch="resnet18", batch=32, channels=3, size=128, classes=10), library="torchvision", compare_by_norm=True),
    ZooModel("tv_mobilenet_v3", torchvision_model, images, F.cross_entropy, adamw,
             tiny=dict(arch="mobilenet_v3_small", batch=4, channels=3, size=64, classes=4,
                       options={"width_mult": 0.25, "dropout": 0.0}),
             bench=dict(arch="mobilenet_v3_small", batch=32, channels=3, size=128, classes=10, options={"dropout": 0.0}),
             library="torchvision", compare_by_norm=True),
    ZooModel("tv_squeezenet", torchvision_model, images, F.cross_entropy, sgd,
             tiny=dict(arch="squeezenet1_1", batch=2, channels=3, size=32, classes=4, options={"dropout": 0.0}),
             bench=dict(arch="squeezenet1_1", batch=32, channels=3, size=128, classes=10, options={"dropout": 0.0}),
             library="torchvision"),
    ZooModel("tv_densenet", torchvision_model, images, F.cross_entropy, sgd,
             tiny=dict(arch="DenseNet", batch=4, channels=3, size=32, classes=4,
                       options={"growth_rate": 4, "block_config": (2, 2), "num_init_features": 8}),
             bench=dict(arch="densenet121", batch=32, channels=3, size=128, classes=10), library="torchvision",
             compare_by_norm=True),
    ZooModel("tv_vit", torchvision_model, images, F.cross_entropy, adamw,
             tiny=dict(arch="VisionTransformer", batch=2, channels=3, size=16, classes=4,
                       options={"image_size": 16, "patch_size": 8, "num_layers": 1, "num_heads": 2, "hidden_dim": 16,
                                "mlp_dim": 32}),
             bench=dict(arch="vit_b_16", batch=32, channels=3, size=224, classes=10), library="torchvision"),
    ZooModel("tv_swin", torchvision_model, images, F.cross_entropy, adamw,
             tiny=dict(arch="SwinTransformer", batch=2, channels=3, size=16, classes=4,
                       options={"patch_size": [2, 2], "embed_dim": 8, "depths": [1, 1], "num_heads": [2, 2],
                                "window_size": [2, 2], "stochastic_depth_prob": 0.0}),
             bench=dict(arch="swin_t", batch=32, channels=3, size=224, classes=10,
                        options={"stochastic_depth_prob": 0.0}), library="torchvision"),
    # diffusers (a test dependency): denoising steps of the DDPM UNet, Stable Diffusion's UNet and VAE
    ZooModel("diffusers_unet", diffusers_unet, noisy_images, F.mse_loss, adamw,
             tiny=dict(batch=2, channels=3, size=8, width=8, groups=4),
             bench=dict(batch=16, channels=3, size=64, width=64, groups=32), library="diffusers"),
    ZooModel("diffusers_unet_condition", diffusers_unet_condition, noisy_images, F.mse_loss, adamw,
             tiny=dict(batch=2, channels=4, size=8, width=8, groups=4, tokens=3),
             bench=dict(batch=16, channels=4, size=32, width=64, groups=32, tokens=77), library="diffusers"),
    ZooModel("diffusers_vae", diffusers_vae, noisy_images, F.mse_loss, adamw,
             tiny=dict(batch=2, channels=3, size=8, width=8, groups=4),
             bench=dict(batch=16, channels=3, size=64, width=64, groups=32), library="diffusers"),
]}


def third_party() -> list[str]:
    """The zoo's models from a third-party library (transformers, timm, torchvision, diffusers), in zoo order:
    what `tvk-bench models` and `tvk-bench shapes` run."""
    return [name for name, entry in ZOO.items() if entry.library]


def build(name: str, size: str = "tiny", seed: int = 0) -> nn.Module:
    """The model `name` at `size` ("tiny" or "bench"), initialised from `seed` (same weights on any device)."""
    entry = ZOO[name]
    torch.manual_seed(seed)
    return entry.build(**getattr(entry, size))


def batches(name: str, steps: int, size: str = "tiny", seed: int = 1) -> list[tuple]:
    """`steps` (x, target) CPU batches for `name`, the same on every run."""
    entry = ZOO[name]
    g = torch.Generator().manual_seed(seed)
    return [entry.inputs(g, **getattr(entry, size)) for _ in range(steps)]
