"""The model zoo (torchvk/experiments/zoo_models.py): every model trains 2 steps on tvk in each
mode (eager, torchvk.compile with the loss, torch.compile(backend="tvk"), AMP) like torch CPU from the
same init and batches, with no op on the CPU; and `tvk-bench zoo` writes its results.

Where each runs: `make test` (CI) trains every architecture eagerly and under AMP, and the compiled modes
of COMPILED_IN_CI; `make zoo` runs every architecture in every mode (the rest are marked zoo_full).
A model that crashes its worker fails its test and the others run on (pytest-xdist restarts the worker)."""
import json
import math
from functools import lru_cache

import pytest
import torch

import torchvk
from torchvk.experiments import zoo
from torchvk.experiments.zoo_models import ZOO

MODES = zoo.MODES + ("amp",)
# the compiled modes in CI: our own models, and one or more of each family of third-party ones (not torchvision's
# ResNet-18: timm's is the same network, and its 90 s of compiled steps on lavapipe are CI's largest zoo cost)
COMPILED_IN_CI = ("mlp", "lenet", "resnet", "mobilenet", "unet", "transformer", "lstm", "gru", "vit", "autoencoder",
                  "groupnorm_cnn", "cross_attention", "hf_gpt2", "hf_llama", "hf_bert", "hf_vit", "hf_t5",
                  "timm_resnet18", "timm_efficientnet", "timm_convnext", "tv_mobilenet_v3", "diffusers_unet")
# how far float16 rounding (AMP) may move losses and the gradients and buffers (norm-wise) from float32's,
# whatever torch's own AMP does: beyond it, tvk's AMP must be as close to float32 as torch CPU's is. A loss
# after the first step is the loss of AMP's updated weights, which AdamW moves a full step along gradients
# that are float16 rounding noise (see _grads_and_buffers): it may move as far as the tensors (AMP_FLOOR);
# two AMP runs with other rounding land on different sides (timm_efficientnet on lavapipe: tvk's second
# loss 2.9% off float32's, torch CPU's 0.7%, with gradients equally far: 0.068 and 0.060 norm-wise)
AMP_LOSS_FLOOR, AMP_FLOOR = 1e-2, 3e-2


@lru_cache(maxsize=None)
def _cpu_reference(name, dtype=torch.float32, mode="eager"):
    losses, _, model = zoo.train_steps(name, "cpu", mode, steps=2, dtype=dtype)
    return losses, _grads_and_buffers(model)


@lru_cache(maxsize=None)
def _torch_amp(name):
    """torch CPU's AMP run of `name`, or None where torch CPU has no float16 kernel for it (oneDNN's LSTM)."""
    try:
        return _cpu_reference(name, mode="amp")
    except RuntimeError as error:
        if "primitive descriptor" not in str(error):
            raise
        return None


def _grads_and_buffers(model):
    """The last step's gradients (left in .grad) and the buffers (BatchNorm's statistics). Not the
    weights: AdamW turns a gradient that is rounding noise (an attention key bias's) into a full step."""
    out = {f"{n}.grad": p.grad for n, p in model.named_parameters() if p.requires_grad}  # Whisper freezes its positions
    out.update(model.named_buffers())
    return {k: v.detach().to("cpu", torch.float64) for k, v in out.items()}


def _distance(tensors, reference):
    """The norm of the difference, and the reference's norm, over every gradient and buffer."""
    difference = torch.cat([(tensors[k] - v).flatten() for k, v in reference.items()]).norm()
    return float(difference), float(torch.cat([v.flatten() for v in reference.values()]).norm())


def _assert_as_near(losses, tensors, referee, torch_run, loss_floor, floor, later_loss_floor=None):
    """tvk's losses and tensors are as near the referee's as torch CPU's run comes (twice its distance), or
    within the floors (relative to the referee's loss, and norm; later_loss_floor: the losses after the
    first step, loss_floor where None); "twice": rounding differs run to run. torch_run None: torch CPU
    cannot run it, the floors alone."""
    referee_losses, referee_tensors = referee
    torch_losses, torch_tensors = torch_run or referee
    for step, (loss, torch_loss, referee_loss) in enumerate(zip(losses, torch_losses, referee_losses, strict=True)):
        step_floor = loss_floor if step == 0 or later_loss_floor is None else later_loss_floor
        assert abs(loss - referee_loss) <= 2 * abs(torch_loss - referee_loss) + step_floor * abs(referee_loss), \
            (losses, torch_losses, referee_losses)
    difference, norm = _distance(tensors, referee_tensors)
    torch_difference, _ = _distance(torch_tensors, referee_tensors)
    if not math.isfinite(torch_difference):  # torch's run skipped a step (a float16 overflow): no bound from it
        torch_difference = 0.0
    assert difference <= 2 * torch_difference + floor * norm, (difference, torch_difference, norm)


def test_no_zoo_model_draws_random_numbers():
    # tvk and torch CPU draw different random numbers: a dropout left on would make the losses differ (or agree
    # by luck: torchvision's MobileNetV3 classifier kept p=0.2 unseen while its logits were near zero)
    for name in ZOO:
        model = zoo.zoo_models.build(name)
        assert [m for m in model.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0] == [], name


def _cases():
    for name in ZOO:
        for mode in MODES:
            full = mode in zoo.MODES[1:] and name not in COMPILED_IN_CI
            yield pytest.param(name, mode, marks=[pytest.mark.zoo_full] if full else [], id=f"{name}-{mode}")


@pytest.mark.parametrize("name,mode", list(_cases()))
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
    assert all(torch.isfinite(v).all() for v in tensors.values()), "a non-finite gradient or buffer"
    if mode == "amp":  # against float32, as near as torch CPU's AMP (autocast float16, GradScaler) comes
        _assert_as_near(losses, tensors, (ref_losses, ref_tensors), _torch_amp(name), AMP_LOSS_FLOOR, AMP_FLOOR,
                        later_loss_floor=AMP_FLOOR)
        return
    if ZOO[name].compare_by_norm:  # see ZooModel.compare_by_norm: against a float64 CPU referee
        _assert_as_near(losses, tensors, _cpu_reference(name, torch.float64), (ref_losses, ref_tensors), 1e-4, 1e-3)
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
