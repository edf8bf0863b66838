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
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


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


# the Hugging Face models: kind -> (model class, config class, the forward's keyword arguments beside the input)
HUGGING_FACE = {
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", {"use_cache": False}),  # a decoder's KV cache: not for training
    "llama": ("LlamaForCausalLM", "LlamaConfig", {"use_cache": False}),
    "bert": ("BertForSequenceClassification", "BertConfig", {}),
    "vit": ("ViTForImageClassification", "ViTConfig", {}),
    "t5": ("T5ForConditionalGeneration", "T5Config", {"use_cache": False}),
}


class HuggingFace(nn.Module):
    """A Hugging Face transformers model built from a config (random init, nothing downloaded), called
    as users call it (keyword arguments, a ModelOutput back) and returning its logits. Images go in
    as pixel_values; token ids as input_ids (an encoder-decoder also decodes them: teacher forcing
    on the input itself)."""

    def __init__(self, kind: str, **config):
        super().__init__()
        declare_torchvision_ops()  # transformers imports an installed torchvision
        import transformers  # lazy: only the Hugging Face entries need it (a test dependency)

        model_class, config_class, self.options = HUGGING_FACE[kind]
        self.model = getattr(transformers, model_class)(getattr(transformers, config_class)(**config))
        self.kind = kind

    def forward(self, x):
        if self.kind == "vit":
            return self.model(pixel_values=x, **self.options).logits
        if self.kind == "t5":
            return self.model(input_ids=x, decoder_input_ids=x, **self.options).logits
        return self.model(input_ids=x, **self.options).logits


def hf_gpt2(vocab, seq, d, heads, layers, **_):
    return HuggingFace("gpt2", vocab_size=vocab, n_positions=seq, n_embd=d, n_head=heads, n_layer=layers,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def hf_llama(vocab, seq, d, heads, layers, **_):
    return HuggingFace("llama", vocab_size=vocab, max_position_embeddings=seq, hidden_size=d, intermediate_size=2 * d,
                       num_attention_heads=heads, num_key_value_heads=max(heads // 2, 1), num_hidden_layers=layers)


def hf_bert(vocab, seq, d, heads, layers, classes, **_):
    return HuggingFace("bert", vocab_size=vocab, max_position_embeddings=seq, hidden_size=d, intermediate_size=4 * d,
                       num_attention_heads=heads, num_hidden_layers=layers, num_labels=classes,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def hf_vit(channels, size, patch, classes, d, heads, layers, **_):
    return HuggingFace("vit", image_size=size, patch_size=patch, num_channels=channels, hidden_size=d,
                       num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=4 * d, num_labels=classes,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def hf_t5(vocab, d, heads, layers, **_):
    return HuggingFace("t5", vocab_size=vocab, d_model=d, d_kv=d // heads, d_ff=4 * d, num_layers=layers,
                       num_decoder_layers=layers, num_heads=heads, dropout_rate=0.0)


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
    """A timm model by name (random init); options: its constructor's arguments (smaller variants)."""
    import_torchvision()  # timm imports torchvision
    import timm  # lazy: a test dependency

    return timm.create_model(arch, pretrained=False, num_classes=classes, **(options or {}))


def torchvision_model(arch, classes, options=None, **_):
    """A torchvision classification model by name (random init)."""
    return getattr(import_torchvision().models, arch)(weights=None, num_classes=classes, **(options or {}))


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
    ZooModel("hf_vit", hf_vit, images, F.cross_entropy, adamw,
             tiny=dict(batch=2, channels=3, size=8, patch=4, classes=4, d=16, heads=2, layers=1),
             bench=dict(batch=32, channels=3, size=224, patch=16, classes=10, d=384, heads=6, layers=4),
             library="transformers"),
    ZooModel("hf_t5", hf_t5, next_tokens, token_loss, adamw,
             tiny=dict(batch=2, seq=8, vocab=29, d=16, heads=2, layers=1),
             bench=dict(batch=16, seq=128, vocab=8192, d=256, heads=4, layers=2), library="transformers"),
    # timm and torchvision CNNs (test dependencies); tiny: the same classes, fewer blocks and channels. Batch 4
    # at 64 px: BatchNorm over fewer values (batch 2, a 1x1 last stage) turns rounding into different losses
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
    ZooModel("tv_resnet18", torchvision_model, images, F.cross_entropy, sgd,
             tiny=dict(arch="resnet18", batch=4, channels=3, size=64, classes=4),
             bench=dict(arch="resnet18", batch=32, channels=3, size=128, classes=10), library="torchvision", compare_by_norm=True),
    ZooModel("tv_mobilenet_v3", torchvision_model, images, F.cross_entropy, adamw,
             tiny=dict(arch="mobilenet_v3_small", batch=4, channels=3, size=64, classes=4, options={"width_mult": 0.25}),
             bench=dict(arch="mobilenet_v3_small", batch=32, channels=3, size=128, classes=10), library="torchvision", compare_by_norm=True),
]}


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
