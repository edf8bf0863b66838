"""Out of memory in the middle of backward(): a clear torch.OutOfMemoryError from backward(),
not a crash of the autograd thread, and the runtime keeps working."""
import subprocess
import sys

SCRIPT = r"""
import torch, torchvk, torch.nn.functional as F
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                        torch.nn.Linear(16 * 28 * 28, 10)).to("tvk")
x = torch.randn(32, 1, 28, 28).to("tvk"); y = torch.randint(0, 10, (32,)).to("tvk")
loss = F.cross_entropy(m(x), y)
torch.tvk.synchronize()
torchvk.set_memory_limit(torchvk.memory_allocated() + 4096)  # forward done: backward cannot fit
try:
    loss.backward()
    print("no error")
except torch.OutOfMemoryError as e:
    print("OOM in backward:", "out of memory" in str(e))
torchvk.set_memory_limit(None)
a = torch.arange(5, dtype=torch.float32).to("tvk")
print("usable:", (a * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0])
"""


def test_oom_during_backward_is_an_error_not_a_crash():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "OOM in backward: True" in out.stdout, out.stdout
    assert "usable: True" in out.stdout, out.stdout
