"""Checkpoints and data loading with tvk tensors, as with CUDA: torch.save/torch.load (every
map_location form), optimizer resume, deepcopy, DataLoader(pin_memory=True), non_blocking
copies, and torch.compile(backend="tvk") registered by `import torchvk` alone."""
import copy
import io
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchvk  # noqa: F401


def small_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def saved(obj) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def train_steps(model, opt, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(5, 4, generator=gen).to("tvk")
        y = torch.randn(5, 2, generator=gen).to("tvk")
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def cpu_state(state_dict):
    return {k: v.cpu() for k, v in state_dict.items()}


@pytest.mark.parametrize("map_location, expect", [
    (None, "tvk"), ("tvk", "tvk"), ("cpu", "cpu"), (torch.device("tvk", 0), "tvk"), ({"tvk:0": "cpu"}, "cpu"),
    ("tvk:0", "tvk"),
])
def test_state_dict_round_trip(map_location, expect):
    model = small_model().to("tvk")
    model.train()
    model(torch.randn(6, 4).to("tvk"))  # running stats away from their initial values
    state = model.state_dict()
    loaded = torch.load(saved(state), map_location=map_location)  # weights_only=True: torch's default
    assert list(loaded) == list(state)
    for name, value in loaded.items():
        assert value.device.type == expect, name
        assert value.dtype == state[name].dtype, name
        assert torch.equal(value.cpu(), state[name].cpu()), name


def test_views_dtypes_and_parameters_round_trip():
    base = torch.arange(12.0).reshape(3, 4)
    items = {
        "transposed": base.to("tvk").t(),
        "sliced": base.to("tvk")[1:, ::2],
        "half": base.half().to("tvk"),
        "long": torch.arange(5).to("tvk"),
        "param": torch.nn.Parameter(base.to("tvk")),
        "leaf": base.to("tvk").requires_grad_(),
    }
    loaded = torch.load(saved(items))
    for name, value in items.items():
        assert loaded[name].device.type == "tvk", name
        assert torch.equal(loaded[name].cpu(), value.detach().cpu()), name
        assert loaded[name].requires_grad == value.requires_grad, name
    assert isinstance(loaded["param"], torch.nn.Parameter)


def test_missing_device_is_a_clear_error_and_runtime_stays_usable():
    buf = saved({"w": torch.ones(3).to("tvk")})
    with pytest.raises(RuntimeError, match="map_location='cpu'"):
        torch.load(buf, map_location=f"tvk:{torchvk.device_count()}")
    assert torch.equal(torch.load(saved(torch.ones(2).to("tvk"))).cpu(), torch.ones(2))


def test_load_cpu_state_dict_into_tvk_model():
    cpu_model = small_model()
    tvk_model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.ReLU(),
                                    torch.nn.Linear(3, 2)).to("tvk")
    tvk_model.load_state_dict(torch.load(saved(cpu_model.state_dict())))
    for name, value in tvk_model.state_dict().items():
        assert value.device.type == "tvk", name
        assert torch.equal(value.cpu(), cpu_model.state_dict()[name]), name


def test_deepcopy_of_a_tvk_model_is_independent():
    model = small_model().to("tvk")
    twin = copy.deepcopy(model)
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        assert b.device.type == "tvk" and torch.equal(a.cpu(), b.cpu()), name
    with torch.no_grad():
        twin[0].weight.add_(1.0)
    assert not torch.equal(model[0].weight.cpu(), twin[0].weight.cpu())
    assert isinstance(twin[0].weight, torch.nn.Parameter)


@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda p: torch.optim.Adam(p, lr=0.01),
], ids=["sgd_momentum", "adam"])
@pytest.mark.parametrize("map_location", [None, "cpu"])
def test_optimizer_resume_matches_uninterrupted_training(make_opt, map_location):
    model = small_model().to("tvk")
    opt = make_opt(model.parameters())
    train_steps(model, opt, 2, seed=1)
    checkpoint = saved({"model": model.state_dict(), "opt": opt.state_dict()})
    train_steps(model, opt, 1, seed=2)  # the uninterrupted run

    resumed = small_model().to("tvk")
    resumed_opt = make_opt(resumed.parameters())
    state = torch.load(checkpoint, map_location=map_location)
    resumed.load_state_dict(state["model"])
    resumed_opt.load_state_dict(state["opt"])
    for value in resumed_opt.state[resumed[0].weight].values():
        if value.dim() > 0:  # momentum / moments follow the parameters onto tvk (Adam's step stays a scalar)
            assert value.device.type == "tvk"
    train_steps(resumed, resumed_opt, 1, seed=2)
    for (name, a), b in zip(model.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(b.cpu(), a.cpu(), rtol=0, atol=0, msg=name)


def test_pin_memory_data_loader_then_non_blocking_copy():
    data = TensorDataset(torch.arange(24.0).reshape(6, 4), torch.arange(6))
    expected = list(DataLoader(data, batch_size=4))
    batches = list(DataLoader(data, batch_size=4, pin_memory=True))
    assert len(batches) == len(expected)
    for (x, y), (ex, ey) in zip(batches, expected):
        assert x.device.type == "cpu" and torch.equal(x, ex) and torch.equal(y, ey)
        x_tvk, y_tvk = x.to("tvk", non_blocking=True), y.to("tvk", non_blocking=True)
        x.add_(100.0)  # the source may change right after a non-blocking copy is issued
        assert torch.equal(x_tvk.cpu(), ex) and torch.equal(y_tvk.cpu(), ey)


def test_pin_memory_gives_a_contiguous_copy():
    src = torch.arange(6.0).reshape(2, 3).t()
    pinned = src.pin_memory()
    assert pinned.is_contiguous() and torch.equal(pinned, src)
    assert pinned.data_ptr() != src.data_ptr()


def test_non_blocking_copies_both_ways():
    src = torch.randn(3, 5)
    on_tvk = src.to("tvk", non_blocking=True)
    assert torch.equal(on_tvk.to("cpu", non_blocking=True), src)
    assert torch.equal((on_tvk * 2).cpu(), src * 2)


def test_import_registers_dynamo_backend_without_entry_point():
    # a source checkout: no torch_dynamo_backends entry point; `import torchvk` must not load Dynamo
    script = textwrap.dedent("""
        import importlib.metadata as md
        everything = md.entry_points
        md.entry_points = lambda **kw: md.EntryPoints(()) if kw.get("group") == "torch_dynamo_backends" \\
            else everything(**kw)
        import sys
        import torchvk
        print("dynamo loaded by import:", "torch._dynamo" in sys.modules)
        import torch._dynamo
        from torch._dynamo.backends.registry import lookup_backend
        print("listed:", "tvk" in torch._dynamo.list_backends())  # before anything imports backend.py
        compiler = lookup_backend("tvk")
        from torchvk.compile.backend import tvk_backend
        print("resolves:", compiler is tvk_backend)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "dynamo loaded by import: False" in out.stdout
    assert "listed: True" in out.stdout
    assert "resolves: True" in out.stdout


def test_backend_name_added_when_dynamo_was_loaded_first():
    from torch._dynamo.backends import registry

    from torchvk.compile import backend_name

    torch._dynamo.list_backends()  # Dynamo's entry-point discovery has run (it runs once)
    registry._BACKENDS.pop("tvk", None)
    compiler = registry._COMPILER_FNS.pop("tvk", None)
    try:
        backend_name.register_lazily()
        assert "tvk" in torch._dynamo.list_backends()
    finally:
        if compiler is not None:
            registry._COMPILER_FNS["tvk"] = compiler
