"""Run the subgroup-sensitive ops and three short trainings on tvk and on the CPU, in a process of
their own (the subgroup size of lavapipe is fixed when Vulkan starts: LP_NATIVE_VECTOR_WIDTH), and
print one JSON line of what differs: {"device": ..., "subgroup": ..., "ops": {name: max abs error
over the output and the input grads, relative to the CPU's largest value}, "losses": {model: [tvk
losses, cpu losses]}, "cpu_ops": ..., "config_sources": {family: {bucket: where its config came
from}}, "lanes": {reported, spanned, width}: gl_SubgroupSize beside the lanes a subgroup operation
really covers, "environment": date, driver, torch, commit}. tests/test_subgroup_sizes.py judges it.

Row lengths run from 1 to thousands, so a row's threads (T) are fewer than, equal to and more than a
subgroup's lanes at every size; rows per workgroup vary with them.
"""
import json
import sys

import torch
import torch.nn.functional as F

import torchvk
from tvk_kernels import get_device
from tvk_kernels.bench.common import environment
from tvk_kernels.config import lookup, search_space

ROW_LENGTHS = (1, 3, 7, 17, 33, 100, 333, 1000, 4099)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().cpu().double(), want.detach().double()
    if want.numel() == 0:
        return 0.0
    if not torch.equal(got.isnan(), want.isnan()):
        return float("inf")
    got, want = got.nan_to_num(0.0), want.nan_to_num(0.0)
    scale = max(want.abs().max().item(), 1.0)
    return (got - want).abs().max().item() / scale


def compare(fn, *cpu_inputs) -> float:
    """fn's output and the grads of its floating-point inputs on tvk against the CPU's."""
    cpu = [x.clone().requires_grad_(x.is_floating_point()) for x in cpu_inputs]
    dev = [x.to("tvk").requires_grad_(x.is_floating_point()) for x in cpu_inputs]
    want, got = fn(*cpu), fn(*dev)
    worst = relative_error(got if got.is_floating_point() else got.float(), want if want.is_floating_point() else want.float())
    if want.is_floating_point():
        cot = torch.randn(want.shape, generator=torch.Generator().manual_seed(3), dtype=want.dtype)
        want.backward(cot)
        got.backward(cot.to("tvk"))
        for c, d in zip(cpu, dev):
            if c.grad is not None:
                worst = max(worst, relative_error(d.grad, c.grad))
    return worst


def op_cases():
    """(name, fn, inputs): reductions, softmax and norms over rows of every length."""
    gen = torch.Generator().manual_seed(0)
    cases = []
    for n in ROW_LENGTHS:
        rows = max(1, 4096 // n)
        x = torch.randn(rows, n, generator=gen)
        cases += [
            (f"sum(1)[{rows}x{n}]", lambda x: x.sum(1), (x,)),
            (f"sum()[{rows}x{n}]", lambda x: x.sum(), (x,)),
            (f"sum(0)[{rows}x{n}]", lambda x: x.sum(0), (x,)),
            (f"amax(1)[{rows}x{n}]", lambda x: x.amax(1), (x,)),
            (f"argmax(1)[{rows}x{n}]", lambda x: x.argmax(1), (x,)),
            (f"argmin()[{rows}x{n}]", lambda x: x.argmin(), (x,)),
            (f"softmax(-1)[{rows}x{n}]", lambda x: x.softmax(-1), (x,)),
            (f"log_softmax(-1)[{rows}x{n}]", lambda x: x.log_softmax(-1), (x,)),
            (f"layer_norm[{rows}x{n}]", lambda x: F.layer_norm(x, x.shape[-1:]), (x,)),
            (f"var(1)[{rows}x{n}]", lambda x: x.var(1, correction=min(1, n - 1)), (x,)),
            (f"norm(dim=1)[{rows}x{n}]", lambda x: x.norm(dim=1), (x,)),
        ]
    w, b = torch.randn(333, generator=gen), torch.randn(333, generator=gen)
    x = torch.randn(257, 333, generator=gen)
    cases.append(("layer_norm affine[257x333]", lambda x, w, b: F.layer_norm(x, (333,), w, b), (x, w, b)))
    img = torch.randn(4, 8, 9, 11, generator=gen)
    cases.append(("group_norm[4x8x9x11]", lambda x: F.group_norm(x, 2), (img,)))
    for shape in ((4, 8, 9, 11), (64, 3, 2, 2), (2, 5, 40, 40)):
        xb = torch.randn(*shape, generator=gen)
        cases.append((f"batch_norm train{list(shape)}",
                      lambda x: F.batch_norm(x, None, None, training=True), (xb,)))
    return cases


def small_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))


class SmallTransformer(torch.nn.Module):
    """An encoder over the image's 28 rows as tokens (layer norm, softmax attention, GELU MLP)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(28, 32)
        self.encoder = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                                        activation="gelu")
        self.norm = torch.nn.LayerNorm(32)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        h = self.encoder(self.embed(x.flatten(1, 2).view(-1, 28, 28)))
        return self.head(self.norm(h).mean(1))


MODELS = {
    "mnist_mlp": lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.ReLU(),
                                             torch.nn.Linear(64, 10)),
    "mnist_cnn": small_cnn,
    "transformer": SmallTransformer,
}


def train_losses(name, device, images, labels, steps=4, batch=64):
    torch.manual_seed(0)
    model = MODELS[name]().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(steps):
        x = images[step * batch:(step + 1) * batch].to(device)
        y = labels[step * batch:(step + 1) * batch].to(device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def subgroup_lanes(device, workgroup: int = 256) -> dict:
    """{"reported": gl_SubgroupSize, "spanned": the most lanes one subgroup operation covered, "width":
    the width the kernels use} in a dispatch of one workgroup (tests/shaders/subgroup_width.comp)."""
    import struct
    from pathlib import Path

    import numpy as np

    from tvk_kernels.runtime.compiler import compile_file

    spirv = compile_file(Path(__file__).parent / "shaders" / "subgroup_width.comp")
    pipe = device.pipelines.from_spirv(spirv, (workgroup, 1, 1), 8)
    out = device.upload(np.zeros(3 * workgroup, np.uint32))
    device.stream.dispatch(pipe, (1, 1, 1), struct.pack("<Q", out.address))
    device.synchronize()
    got = device.download(out, np.uint32, (workgroup, 3))
    return {"reported": int(got[:, 0].max()), "spanned": int(got[:, 1].max()), "width": int(got[:, 2].max())}


def main():
    from torchvk.experiments.data import load_mnist

    device = get_device(0)
    facts = device.facts
    sources = {fam: {bucket: lookup(device, fam, bucket)[1] for bucket in search_space(fam)["buckets"]}
               for fam in ("reduce", "softmax", "norm")}
    torchvk.reset_op_counts()
    ops = {name: compare(fn, *inputs) for name, fn, inputs in op_cases()}
    x_train, y_train, _, _ = load_mnist()
    images, labels = torch.from_numpy(x_train[:256]), torch.from_numpy(y_train[:256])
    losses = {name: [train_losses(name, "tvk", images, labels), train_losses(name, "cpu", images, labels)]
              for name in MODELS}
    print(json.dumps({"device": facts.name, "subgroup": facts.subgroup_size, "ops": ops, "losses": losses,
                      "cpu_ops": torchvk.op_counts()["cpu"], "config_sources": sources, "lanes": subgroup_lanes(device),
                      "environment": environment(device)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
