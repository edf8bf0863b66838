"""An op that fails inside a backward node (here embedding's backward with scale_grad_by_freq,
which has no Vulkan kernel) raises a Python exception from every autograd entry, and the process and the runtime
stay usable (torchvk/_autograd.py). Run in a subprocess: the failure this guards against
aborted the process ("terminate called without an active exception")."""
import subprocess
import sys

SCRIPT = r"""
import threading
import torch, torchvk

torch.manual_seed(0)
x_cpu, w_cpu, b_cpu = torch.randn(2, 4, 3), torch.randn(4), torch.randn(4)


def leaves(device):
    return [t.clone().to(device).requires_grad_() for t in (x_cpu, w_cpu, b_cpu)]


def group_norm(x, w=None, b=None):
    return torch.native_group_norm(x, w, b, 2, 4, 3, 2, 1e-5)


def no_kernel_backward(x):  # rows of x looked up with scale_grad_by_freq: its backward has no Vulkan kernel
    idx = torch.tensor([0, 1, 1], device=x.device)
    return torch.nn.functional.embedding(idx, x.reshape(8, 3), scale_grad_by_freq=True)


def outcome(name, fn):
    try:
        fn()
        print(f"{name}: no error")
    except NotImplementedError as e:
        print(f"{name}: NotImplementedError naming the op: {'embedding_dense_backward' in str(e)}")
    except Exception as e:
        print(f"{name}: {type(e).__name__} {str(e)[:200]}".replace(chr(10), " "))


class Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise ValueError("boom")


x, w, b = leaves("tvk")
outcome("grad", lambda: torch.autograd.grad(no_kernel_backward(x).sum() + group_norm(x, w, b)[0].sum(), [x, w, b]))
outcome("backward_list", lambda: torch.autograd.backward([no_kernel_backward(x).sum()]))
outcome("cpu_output", lambda: no_kernel_backward(x).sum().cpu().backward())

# the reported abort: the gradient of all three outputs (mean and rstd too)
def three_outputs(x, w, b):
    return torch.autograd.grad([o.sum() for o in group_norm(x, w, b)], [x, w, b])
expected = three_outputs(*leaves("cpu"))
got = []
outcome("three_outputs", lambda: got.extend(three_outputs(*leaves("tvk"))))
print("three_outputs_match:", bool(got) and all(torch.allclose(g.cpu(), e, atol=1e-5) for g, e in zip(got, expected)))

# a backward that fails twice (an op, then a Python node) must not leave its error behind for
# the next one: that one failed silently, handing back uninitialised gradients
outcome("op_then_python_node", lambda: torch.autograd.grad(Boom.apply(x).sum() + no_kernel_backward(x).sum(), x))
outcome("next_backward", lambda: torch.autograd.grad(no_kernel_backward(x).sum(), x))

# threads: each failing backward raises its own error, a good one beside them is right
results = {}
def failing(i):
    try:
        torch.autograd.grad(no_kernel_backward(x).sum(), x)
        results[i] = "no error"
    except NotImplementedError:
        results[i] = "NotImplementedError"
def good():
    xt = x_cpu.clone().to("tvk").requires_grad_()
    results["good"] = torch.allclose(torch.autograd.grad((xt.tanh() * 3).sum(), xt)[0].cpu(),
                                     3 * (1 - x_cpu.tanh() ** 2), atol=1e-5)
threads = [threading.Thread(target=failing, args=(i,)) for i in range(2)] + [threading.Thread(target=good)]
[t.start() for t in threads]
[t.join(120) for t in threads]
print("threads:", results.get(0), results.get(1), results.get("good"))

# the runtime is still usable: a backward that works gives torch's CPU gradients
x2 = x_cpu.clone().to("tvk").requires_grad_()
(x2.sigmoid() * x2).sum().backward()
x2_cpu = x_cpu.clone().requires_grad_()
(x2_cpu.sigmoid() * x2_cpu).sum().backward()
print("usable:", torch.allclose(x2.grad.cpu(), x2_cpu.grad, atol=1e-5))
"""


def test_errors_inside_backward_nodes_raise_from_every_autograd_entry():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    raised = "NotImplementedError naming the op: True"
    for entry in ("grad", "backward_list", "cpu_output", "next_backward"):
        assert lines.get(entry) == raised, (entry, out.stdout)
    assert lines.get("three_outputs") == "no error", out.stdout
    assert lines.get("three_outputs_match") == "True", out.stdout
    # the first failure in execution order is the one raised
    assert lines.get("op_then_python_node") in (raised, "ValueError boom"), out.stdout
    assert lines.get("threads") == "NotImplementedError NotImplementedError True", out.stdout
    assert lines.get("usable") == "True", out.stdout
