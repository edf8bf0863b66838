"""Lightning Fabric picks tvk with no line beyond `import torchvk` (torchvk/integrations/lightning_fabric.py):
Fabric(accelerator="tvk") and Fabric() train a tiny model with its parameters on tvk, no op on the CPU,
and the losses of the same training on the CPU; "16-mixed" / "bf16-mixed" autocast on tvk."""
import os
import subprocess
import sys

import pytest
import torch
from test_trainers import DEFAULT_DEVICE, STEPS, _assert_on, _data, _declare_torchvision_ops_script, _mlp, picks_cuda

import torchvk

pytest.importorskip("lightning.fabric")


def _fabric_train(accelerator, precision="32-true"):
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator=accelerator, devices=1, precision=precision)
    expected_device = "cpu" if accelerator == "cpu" else "tvk"
    assert fabric.device == (torch.device("cpu") if expected_device == "cpu" else torch.device("tvk", 0))
    model = _mlp()
    linear_dtypes = []  # what the first Linear gives inside Fabric's forward (autocast), before convert_output
    model[0].register_forward_hook(lambda module, inputs, output: linear_dtypes.append(output.dtype))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*_data()), batch_size=4)
    torchvk.reset_op_counts()
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(loader)
    losses = []
    for inputs, targets in loader:
        _assert_on(model, expected_device)
        assert inputs.device.type == expected_device
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return fabric, losses, linear_dtypes, torchvk.op_counts()["cpu"]


@pytest.mark.parametrize("accelerator", ["tvk", pytest.param("auto", marks=picks_cuda)])
def test_fabric_trains_on_tvk_as_on_the_cpu(accelerator):
    fabric, losses, _, cpu_ops = _fabric_train(accelerator)
    assert cpu_ops == {}
    assert type(fabric.accelerator).__name__ == "TVKAccelerator"
    expected_fabric, expected, _, _ = _fabric_train("cpu")
    assert type(expected_fabric.accelerator).__name__ == "CPUAccelerator"
    assert len(losses) == STEPS
    assert losses == pytest.approx(expected, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("precision, dtype", [("16-mixed", torch.float16), ("bf16-mixed", torch.bfloat16)],
                         ids=["16-mixed", "bf16-mixed"])
def test_fabric_mixed_precision_autocasts_on_tvk(precision, dtype):
    from lightning.fabric.plugins.precision import MixedPrecision

    fabric, losses, linear_dtypes, cpu_ops = _fabric_train("tvk", precision=precision)
    assert cpu_ops == {}
    assert isinstance(fabric._precision, MixedPrecision) and fabric._precision.device == "tvk"  # not "cuda"
    assert linear_dtypes == [dtype] * STEPS
    scaler = fabric._precision.scaler
    if precision == "16-mixed":
        assert scaler.is_enabled() and scaler._device == "tvk"
    else:
        assert scaler is None  # bf16 needs none
    assert len(losses) == STEPS and all(loss == loss for loss in losses)  # finite, not NaN


def test_fabric_registry_and_devices():
    from lightning.fabric import Fabric
    from lightning.fabric.accelerators import ACCELERATOR_REGISTRY, CPUAccelerator
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from torchvk.integrations import lightning_fabric
    from torchvk.integrations.lightning_fabric import TVKAccelerator

    assert ACCELERATOR_REGISTRY["tvk"]["accelerator"] is TVKAccelerator
    connector = sys.modules["lightning.fabric.connector"]._Connector
    hooked = connector.__dict__["_choose_strategy"], connector.__dict__["_check_and_init_precision"]
    torchvk.integrations.install()
    lightning_fabric.install(connector)  # again: nothing changes
    assert (connector.__dict__["_choose_strategy"], connector.__dict__["_check_and_init_precision"]) == hooked
    assert ACCELERATOR_REGISTRY["tvk"]["accelerator"] is TVKAccelerator
    with pytest.raises(MisconfigurationException, match="taken by"):
        TVKAccelerator.register_accelerators({"tvk": {"accelerator": CPUAccelerator}})
    # accelerator="auto", Fabric's default, picks tvk where it would pick the CPU, as it picks cuda
    assert Fabric().device == torch.device(DEFAULT_DEVICE, 0)
    assert Fabric(accelerator="cpu").device == torch.device("cpu")
    if torch.tvk.device_count() < 5:
        with pytest.raises(MisconfigurationException, match=r"Fabric\(accelerator='tvk'\) asked for .*device_count"):
            Fabric(accelerator="tvk", devices=5)


IMPORTS = {
    "torchvk first": "import torchvk\nassert 'lightning' not in sys.modules\nimport lightning.fabric\n",
    "fabric first": "import lightning.fabric\nimport torchvk\n",
}
CHECKS = f"""
from lightning.fabric.accelerators import ACCELERATOR_REGISTRY
from torchvk.integrations.lightning_fabric import TVKAccelerator
assert ACCELERATOR_REGISTRY['tvk']['accelerator'] is TVKAccelerator
assert lightning.fabric.Fabric().device.type == {DEFAULT_DEVICE!r}
"""


@pytest.mark.parametrize("imports", IMPORTS.values(), ids=IMPORTS.keys())
def test_importing_torchvk_is_the_only_line(imports):
    # a fresh interpreter: with torchvk imported first, the hook waits for Fabric's connector; imported after it,
    # torchvk hooks it at once
    script = _declare_torchvision_ops_script() + imports + CHECKS
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ),
                            timeout=120)
    assert result.returncode == 0, result.stderr
