"""Fork safety (tvk_kernels/runtime/fork.py), as CUDA's: a process forked after its parent started
Vulkan raises a clear error when it touches tvk, instead of hanging; DataLoader workers that make CPU
tensors keep working; the parent keeps working."""
import multiprocessing
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import torchvk  # noqa: F401
from torchvk import ForkedDeviceError

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")


def _touch_tvk(queue):
    """In the child: every way in must raise ForkedDeviceError (reported back as text)."""
    outcomes = []
    for name, use in (("an op on an inherited tensor", lambda: _inherited + 1),
                      ("a new tvk tensor", lambda: torch.ones(3, device="tvk")),
                      ("a readback", lambda: _inherited.cpu()),
                      ("synchronize", lambda: torch.tvk.synchronize())):
        try:
            use()
            outcomes.append(f"{name}: no error")
        except ForkedDeviceError as error:
            outcomes.append(f"{name}: {'spawn' in str(error)}")
        except Exception as error:  # any other type is a failure too
            outcomes.append(f"{name}: {type(error).__name__}")
    queue.put(outcomes)


_inherited = None


def test_a_forked_child_that_touches_tvk_raises_and_the_parent_goes_on(device):
    global _inherited
    _inherited = torch.arange(4.0, device="tvk")
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_touch_tvk, args=(queue,))
    child.start()
    outcomes = queue.get(timeout=120)
    child.join(timeout=120)
    assert child.exitcode == 0
    assert outcomes == [f"{name}: True" for name in ("an op on an inherited tensor", "a new tvk tensor", "a readback",
                                                     "synchronize")]
    assert (_inherited + 1).cpu().tolist() == [1.0, 2.0, 3.0, 4.0]  # the parent's device is untouched


def test_dataloader_workers_of_cpu_tensors_feed_a_tvk_model(device):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 5), torch.randint(0, 3, (48,)))
    model = torch.nn.Linear(5, 3)
    reference = torch.nn.Linear(5, 3)
    reference.load_state_dict(model.state_dict())
    model.to("tvk")
    tvk_losses, cpu_losses = [], []
    loader = DataLoader(data, batch_size=16, num_workers=2, pin_memory=True, multiprocessing_context="fork")
    for (x, y), (x_ref, y_ref) in zip(loader, DataLoader(data, batch_size=16)):
        tvk_losses.append(torch.nn.functional.cross_entropy(model(x.to("tvk")), y.to("tvk")).item())
        cpu_losses.append(torch.nn.functional.cross_entropy(reference(x_ref), y_ref).item())
    assert tvk_losses == pytest.approx(cpu_losses, rel=1e-5)


class _TvkItems(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, index):
        return torch.full((2,), float(index), device="tvk")


def test_a_worker_that_makes_tvk_tensors_says_to_use_spawn(device):
    torch.ones(1, device="tvk").cpu()  # the parent has started Vulkan
    with pytest.raises(ForkedDeviceError, match="spawn"):
        next(iter(DataLoader(_TvkItems(), num_workers=1, multiprocessing_context="fork")))


def test_a_child_of_a_parent_that_never_started_vulkan_uses_tvk():
    script = textwrap.dedent("""
        import os, torch, torchvk
        pid = os.fork()
        if pid == 0:
            os._exit(0 if (torch.ones(3, device="tvk") * 2).cpu().tolist() == [2.0] * 3 else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "0", out.stderr[-2000:]
