"""The trainers people use pick tvk with no line beyond `import torchvk` (torchvk/integrations/):
HF transformers.Trainer, accelerate.Accelerator and Lightning's Trainer(accelerator="tvk") each train
a tiny model (random init, nothing downloaded) with its parameters on tvk, no op on the CPU, and the
losses of the same training on the CPU; asking for the CPU still gives the CPU."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchvk

STEPS = 3
# where CUDA is present the libraries keep picking it, as without TorchVK: the hooks replace their CPU fallback only
DEFAULT_DEVICE = "cuda" if torch.cuda.is_available() else "tvk"
picks_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA: where CUDA is "
                                "present, the trainers pick it by default")


def _data(features=4, rows=12):
    generator = torch.Generator().manual_seed(1)
    return torch.randn(rows, features, generator=generator), torch.randn(rows, 1, generator=generator)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _assert_on(module, device_type):
    devices = {p.device.type for p in module.parameters()}
    assert devices == {device_type}, f"parameters on {devices} during training, expected {device_type}"


@pytest.fixture
def fresh_accelerate_state():
    """accelerate keeps its device in process-wide singletons: each test starts and ends without one."""
    state = pytest.importorskip("accelerate.state")
    state.AcceleratorState._reset_state(reset_partial_state=True)
    yield
    state.AcceleratorState._reset_state(reset_partial_state=True)


# ------------------------------------------------------------------ HF transformers.Trainer
def _hf_train(tmp_path, use_cpu):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=31, n_positions=8, n_embd=16, n_layer=1, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0))
    ids = torch.randint(0, 31, (8, 6), generator=torch.Generator().manual_seed(2))
    dataset = [{"input_ids": row, "labels": row} for row in ids]
    expected_device = "cpu" if use_cpu else "tvk"
    losses = []

    class RecordingTrainer(transformers.Trainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            _assert_on(model, expected_device)
            assert inputs["input_ids"].device.type == expected_device
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            losses.append(loss.item())
            return loss

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / ("cpu" if use_cpu else "tvk")), use_cpu=use_cpu, max_steps=STEPS,
        per_device_train_batch_size=4, learning_rate=1e-2, seed=0, report_to="none", save_strategy="no",
        logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0)
    assert args.device.type == expected_device
    trainer = RecordingTrainer(model=model, args=args, train_dataset=dataset)
    torchvk.reset_op_counts()
    trainer.train()
    return losses, torchvk.op_counts()["cpu"]


@picks_cuda
def test_hf_trainer_trains_on_tvk_as_on_the_cpu(tmp_path, fresh_accelerate_state):
    losses, cpu_ops = _hf_train(tmp_path, use_cpu=False)
    assert cpu_ops == {}
    expected, _ = _hf_train(tmp_path, use_cpu=True)
    assert len(losses) == STEPS
    assert losses == pytest.approx(expected, rel=1e-4)


# ------------------------------------------------------------------ accelerate.Accelerator
def _accelerate_train(cpu):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator(cpu=cpu)
    expected_device = "cpu" if cpu else "tvk"
    assert accelerator.device.type == expected_device
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*_data()), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    torchvk.reset_op_counts()
    losses = []
    for inputs, targets in loader:
        _assert_on(model, expected_device)
        assert inputs.device.type == expected_device
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, torchvk.op_counts()["cpu"]


@picks_cuda
def test_accelerator_trains_on_tvk_as_on_the_cpu(fresh_accelerate_state):
    losses, cpu_ops = _accelerate_train(cpu=False)
    assert cpu_ops == {}
    expected, _ = _accelerate_train(cpu=True)
    assert len(losses) == STEPS
    assert losses == pytest.approx(expected, rel=1e-4)


def test_asking_for_the_cpu_still_gives_the_cpu(tmp_path, fresh_accelerate_state):
    transformers = pytest.importorskip("transformers")
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, PartialState

    assert Accelerator(cpu=True).device == torch.device("cpu")
    AcceleratorState._reset_state(reset_partial_state=True)
    assert Accelerator().device.type == DEFAULT_DEVICE
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    assert args.device == torch.device("cpu")
    assert PartialState().device == torch.device("cpu")  # what the Trainer's Accelerator will use
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    assert args.device.type == DEFAULT_DEVICE and args.n_gpu == 1


def test_the_accelerate_hooks_install_once(fresh_accelerate_state):
    pytest.importorskip("transformers")
    from accelerate.state import PartialState
    from transformers import TrainingArguments

    from torchvk.integrations import accelerate as accelerate_integration

    hooked = PartialState.__dict__["default_device"], TrainingArguments.__dict__["_setup_devices"]
    torchvk.integrations.install()
    accelerate_integration.install_partial_state(PartialState)
    accelerate_integration.install_training_arguments(TrainingArguments)
    assert (PartialState.__dict__["default_device"], TrainingArguments.__dict__["_setup_devices"]) == hooked
    assert not getattr(hooked[0].fget.__wrapped__, "torchvk_hook", False)  # one wrapper, not two


# ------------------------------------------------------------------ Lightning
def _lightning_train(tmp_path, accelerator, precision="32-true"):
    lightning = pytest.importorskip("lightning.pytorch")
    expected_device = "cpu" if accelerator == "cpu" else "tvk"

    class Regression(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _mlp()
            self.losses = []
            self.autocast = []

        def training_step(self, batch, batch_index):
            inputs, targets = batch
            _assert_on(self, expected_device)
            assert inputs.device.type == expected_device
            self.autocast.append(torch.is_autocast_enabled(expected_device))
            loss = torch.nn.functional.mse_loss(self.net(inputs), targets)
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    module = Regression()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*_data()), batch_size=4)
    trainer = lightning.Trainer(accelerator=accelerator, devices=1, max_steps=STEPS, precision=precision,
                                logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, default_root_dir=str(tmp_path))
    torchvk.reset_op_counts()
    trainer.fit(module, loader)
    return module, trainer, torchvk.op_counts()["cpu"]


def test_lightning_trains_on_tvk_as_on_the_cpu(tmp_path):
    module, trainer, cpu_ops = _lightning_train(tmp_path, "tvk")
    assert cpu_ops == {}
    assert trainer.strategy.root_device == torch.device("tvk", 0)
    expected, cpu_trainer, _ = _lightning_train(tmp_path, "cpu")
    assert type(cpu_trainer.accelerator).__name__ == "CPUAccelerator"
    assert len(module.losses) == STEPS
    assert module.losses == pytest.approx(expected.losses, rel=1e-4)


def test_lightning_16_mixed_autocasts_on_tvk(tmp_path):
    module, trainer, cpu_ops = _lightning_train(tmp_path, "tvk", precision="16-mixed")
    assert cpu_ops == {}
    assert trainer.precision_plugin.device == "tvk"
    scaler = trainer.precision_plugin.scaler
    assert scaler.is_enabled() and scaler._device == "tvk"
    assert module.autocast == [True] * STEPS
    assert all(loss == loss for loss in module.losses)  # finite, not NaN


def test_lightning_registry_and_devices(tmp_path):
    lightning = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.accelerators import AcceleratorRegistry, CPUAccelerator
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    from torchvk.integrations.lightning import TVKAccelerator

    assert AcceleratorRegistry["tvk"]["accelerator"] is TVKAccelerator
    TVKAccelerator.register_accelerators(AcceleratorRegistry)  # again: nothing changes
    assert AcceleratorRegistry["tvk"]["accelerator"] is TVKAccelerator
    taken = {"tvk": {"accelerator": CPUAccelerator}}
    with pytest.raises(MisconfigurationException, match="taken by"):
        TVKAccelerator.register_accelerators(taken)
    count = torch.tvk.device_count()
    assert TVKAccelerator.parse_devices(1) == [0]
    assert TVKAccelerator.parse_devices("-1") == list(range(count))
    assert TVKAccelerator.get_parallel_devices([0]) == [torch.device("tvk", 0)]
    with pytest.raises(MisconfigurationException, match="device_count"):
        TVKAccelerator.parse_devices(count + 1)
    assert "allocated_bytes.all.current" in TVKAccelerator().get_device_stats(torch.device("tvk", 0))
    # accelerator="auto", Lightning's default, picks tvk where it would pick the CPU, as it picks cuda
    trainer = lightning.Trainer(logger=False, enable_checkpointing=False, default_root_dir=str(tmp_path))
    assert trainer.strategy.root_device == torch.device(DEFAULT_DEVICE, 0)
    assert isinstance(trainer.accelerator, TVKAccelerator) == (DEFAULT_DEVICE == "tvk")


def _declare_torchvision_ops_script():
    """Python lines that declare the tests' PyPI torchvision ops (conftest.py) without loading torchvk."""
    zoo_models = Path(__file__).resolve().parents[1] / "torchvk" / "experiments" / "zoo_models.py"
    return ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('tvk_zoo_models', {str(zoo_models)!r})\n"
            "zoo_models = sys.modules[spec.name] = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(zoo_models)\n"
            "zoo_models.declare_torchvision_ops()\n"
            "assert 'torchvk' not in sys.modules\n")


TORCHVK_FIRST = """
import torchvk
assert not {'accelerate', 'transformers', 'lightning'} & set(sys.modules), 'import torchvk loaded a trainer'
from accelerate import Accelerator
import lightning.pytorch
"""
TRAINERS_FIRST = """
from accelerate import Accelerator
import lightning.pytorch
import torchvk
"""
CHECKS = f"""
assert Accelerator().device.type == {DEFAULT_DEVICE!r}
assert isinstance(lightning.pytorch.accelerators.AcceleratorRegistry.get('tvk'), lightning.pytorch.accelerators.Accelerator)
"""


@pytest.mark.parametrize("imports", [TORCHVK_FIRST, TRAINERS_FIRST], ids=["torchvk first", "trainers first"])
def test_importing_torchvk_is_the_only_line(imports):
    # a fresh interpreter: with torchvk imported first, the hooks wait for the libraries' modules;
    # imported after them, torchvk hooks them at once
    pytest.importorskip("accelerate")
    pytest.importorskip("lightning")
    script = _declare_torchvision_ops_script() + imports + CHECKS
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ),
                            timeout=120)
    assert result.returncode == 0, result.stderr
