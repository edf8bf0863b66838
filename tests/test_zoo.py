"""The model zoo (torchvk/experiments/zoo_models.py): every model trains 2 steps on tvk in each
mode (eager, torchvk.compile with the loss, torch.compile(backend="tvk")) like torch CPU from the
same init and batches, with no op on the CPU; and `tvk-bench zoo` writes its results."""
import json
from functools import lru_cache

import pytest
import torch

import torchvk
from torchvk.experiments import zoo
from torchvk.experiments.zoo_models import ZOO


@lru_cache(maxsize=None)
def _cpu_reference(name):
    losses, _, model = zoo.train_steps(name, "cpu", "eager", steps=2)
    return losses, _grads_and_buffers(model)


def _grads_and_buffers(model):
    """The last step's gradients (left in .grad) and the buffers (BatchNorm's statistics). Not the
    weights: AdamW turns a gradient that is rounding noise (an attention key bias's) into a full step."""
    out = {f"{n}.grad": p.grad for n, p in model.named_parameters()}
    out.update(model.named_buffers())
    return {k: v.detach().cpu() for k, v in out.items()}


@pytest.mark.parametrize("name,mode", [(n, m) for n in ZOO for m in zoo.MODES])
def test_zoo_model_trains_like_torch_cpu(name, mode):
    assert not torchvk.cpu_fallback_enabled(), "the zoo runs with TVK_CPU_FALLBACK off: a missing op must raise"
    ref_losses, ref_tensors = _cpu_reference(name)
    torchvk.reset_op_counts()
    try:
        losses, _, model = zoo.train_steps(name, "tvk", mode, steps=2)
    finally:
        if mode == "torch.compile":
            torch._dynamo.reset()
    assert torchvk.op_counts()["cpu"] == {} and torchvk.op_counts()["vulkan"]
    assert {p.device.type for p in model.parameters()} == {"tvk"}
    tensors = _grads_and_buffers(model)
    assert tensors.keys() == ref_tensors.keys()
    if ZOO[name].compare_by_norm:  # see ZooModel.compare_by_norm
        assert losses == pytest.approx(ref_losses, rel=2e-3)
        difference = torch.cat([(tensors[k] - v).flatten() for k, v in ref_tensors.items()]).norm()
        assert difference <= 1e-2 * torch.cat([v.flatten() for v in ref_tensors.values()]).norm()
        return
    assert losses == pytest.approx(ref_losses, rel=1e-4, abs=1e-5)
    for key, value in tensors.items():
        torch.testing.assert_close(value, ref_tensors[key], rtol=1e-3, atol=1e-5, msg=key)


def test_zoo_bench_writes_results_beside_torch_cpu(tmp_path, device):
    payload = zoo.run(device, tmp_path, quick=True, progress=False, names=("autoencoder",))
    written = json.loads((tmp_path / "zoo.json").read_text())
    assert written["runs"] == json.loads(json.dumps(payload["runs"]))
    assert (tmp_path / "zoo.md").read_text().startswith("# zoo")
    tvk = {r["mode"]: r for r in payload["runs"] if r["device"] == "tvk"}
    cpu = next(r for r in payload["runs"] if r["device"] == "torch cpu")
    assert "error" not in cpu, cpu.get("error")
    assert set(tvk) == set(zoo.MODES) and len(cpu["losses"]) == payload["steps"]
    for r in tvk.values():
        assert r["cpu_ops"] == 0 and r["step_ms_median"] > 0
        assert r["losses"] == pytest.approx(cpu["losses"], rel=1e-4, abs=1e-5)
        assert r["loss_gap_vs_cpu"] < 1e-4


def test_zoo_bench_records_a_failing_model_and_goes_on(tmp_path, device, monkeypatch):
    def no_kernel(*args, **kwargs):
        raise NotImplementedError("TorchVK has no Vulkan implementation of aten.example.default")

    monkeypatch.setattr(zoo, "train_steps", no_kernel)
    monkeypatch.setattr(zoo, "run_peer", lambda device, names, *a: {n: {"error": "skipped"} for n in names})
    runs = zoo.run(device, tmp_path, quick=True, progress=False, names=("mlp", "lenet"))["runs"]
    tvk = [r for r in runs if r["device"] == "tvk"]
    assert len(tvk) == 2 * len(zoo.MODES)
    assert all(r["error"] == "NotImplementedError: TorchVK has no Vulkan implementation of aten.example.default"
               for r in tvk)
    assert "aten.example.default" in (tmp_path / "zoo.md").read_text()


def test_a_torch_peer_builds_the_hugging_face_models():
    # the peer runs zoo.py as a script: its folder's kernels.py once shadowed the `kernels` package
    # transformers looks for ("attempted relative import with no known parent package")
    pytest.importorskip("transformers")
    peer = zoo.run_peer("cpu", ["hf_gpt2"], steps=2, size="tiny", warmup=1)
    in_process, _, _ = zoo.train_steps("hf_gpt2", "cpu", "eager", steps=2)
    assert "error" not in peer["hf_gpt2"], peer
    assert peer["hf_gpt2"]["losses"] == pytest.approx(in_process, rel=1e-6)
