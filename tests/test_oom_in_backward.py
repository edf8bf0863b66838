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


def test_scratch_oom_is_a_torch_oom_when_the_runtime_was_imported_first():
    """tvk-bench imports tvk_kernels before torch, so the runtime's error class is not a torch
    OutOfMemoryError; an OOM in a kernel's own scratch buffer (split-K) must still become one."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import tvk_kernels
        import torch, torchvk
        assert not issubclass(tvk_kernels.errors.OutOfMemoryError, torch.OutOfMemoryError)
        a = torch.randn(16, 8192).to("tvk"); b = torch.randn(8192, 16).to("tvk")
        torch.tvk.synchronize()
        torchvk.set_memory_limit(torchvk.memory_allocated() + 4096)  # the output fits, split-K scratch does not
        try:
            torch.mm(a, b)
        except torch.OutOfMemoryError as e:
            assert "out of memory" in str(e)
            torchvk.set_memory_limit(None)
            print("ok", torch.allclose(torch.mm(a, b).cpu(), a.cpu() @ b.cpu(), rtol=1e-4, atol=1e-3))
        """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().endswith("ok True"), p.stdout + p.stderr[-1000:]
