"""Benchmark mode (tvk_kernels/benchmark_mode.py, `torchvk.backends.benchmark`): the first
launch of an exact matmul shape times a few configs on its buffers, keeps the fastest in memory
and on disk; later calls and later processes reuse it; a template change makes the entry stale."""
import subprocess
import sys

import pytest
import torch

import torchvk  # noqa: F401
import torchvk.backends
from tvk_kernels import benchmark_mode, get_device
from tvk_kernels.kernels import matmul as matmul_kernels
from tvk_kernels.kernels.launch import family

pytestmark = pytest.mark.xdist_group("benchmark_mode")  # one process: the memo and the file are shared

M, N, K = 37, 29, 23  # a shape nothing else in the suite launches


def _entry_path(fam):
    key = (M, N, K, 1, "nn", "float32", "", 0)
    return benchmark_mode._path(fam, benchmark_mode._entry_key(fam, key))


@pytest.fixture
def bench_on(monkeypatch):
    monkeypatch.setenv("TVK_BENCHMARK_CANDIDATES", "2")  # each candidate is a compile: keep CI short
    fam = family(get_device(0), matmul_kernels.Matmul)
    _entry_path(fam).unlink(missing_ok=True)
    fam._benchmarked.clear()
    fam.forget_plans()
    torchvk.backends.benchmark = True
    yield fam
    torchvk.backends.benchmark = False
    fam._benchmarked.clear()
    fam.forget_plans()


def _mm():
    torch.manual_seed(1)
    a, b = torch.randn(M, K), torch.randn(K, N)
    got = (a.to("tvk") @ b.to("tvk")).cpu()
    torch.testing.assert_close(got, a @ b, rtol=1e-4, atol=1e-4)


def test_first_sight_times_candidates_then_memory_and_disk_serve(bench_on):
    before = benchmark_mode.stats()
    _mm()
    after = benchmark_mode.stats()
    assert after["decided"] == before["decided"] + 1
    assert after["seconds"] > before["seconds"]
    assert _entry_path(bench_on).is_file()
    _mm()  # the same shape again: no new timing
    assert benchmark_mode.stats()["decided"] == after["decided"]
    # a second process finds the entry on disk and times nothing
    code = ("import torch, torchvk, torchvk.backends\n"
            "torchvk.backends.benchmark = True\n"
            f"a, b = torch.randn({M}, {K}), torch.randn({K}, {N})\n"
            "c = (a.to('tvk') @ b.to('tvk')).cpu()\n"
            "torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)\n"
            "print(torchvk.backends.benchmark_stats())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    stats = eval(out.stdout.strip().splitlines()[-1])
    assert stats["decided"] == 0 and stats["reused_from_disk"] == 1


def test_an_entry_of_another_template_version_is_not_used(bench_on, monkeypatch):
    _mm()
    decided = benchmark_mode.stats()["decided"]
    bench_on._benchmarked.clear()
    bench_on.forget_plans()  # the plan holds the earlier choice
    monkeypatch.setattr(bench_on, "checksum", "0" * 16)  # as if matmul.comp had changed since
    _entry_path(bench_on).unlink(missing_ok=True)  # left by an earlier run of this test
    _mm()
    assert benchmark_mode.stats()["decided"] == decided + 1


def test_a_corrupt_entry_is_replaced(bench_on):
    _mm()
    path = _entry_path(bench_on)
    path.write_bytes(b"garbage")
    bench_on._benchmarked.clear()
    bench_on.forget_plans()  # the plan holds the earlier choice
    decided = benchmark_mode.stats()["decided"]
    with pytest.warns(UserWarning, match="deleted it"):
        _mm()
    assert benchmark_mode.stats()["decided"] == decided + 1 and path.is_file()


def test_off_by_default_times_nothing():
    assert not torchvk.backends.benchmark
    decided = benchmark_mode.stats()["decided"]
    _mm()
    assert benchmark_mode.stats()["decided"] == decided


def test_conv_directions_are_benchmarked_and_stay_correct(bench_on):
    torch.manual_seed(2)
    x = torch.randn(2, 3, 9, 7, requires_grad=True)
    w = torch.randn(5, 3, 3, 3, requires_grad=True)
    tx, tw = (t.detach().to("tvk").requires_grad_() for t in (x, w))
    def chosen():  # timed now, or found on disk (a cache folder kept from an earlier run)
        stats = benchmark_mode.stats()
        return stats["decided"] + stats["reused_from_disk"]

    before = chosen()
    out = torch.nn.functional.conv2d(tx, tw, stride=2, padding=1)
    out.sum().backward()
    want = torch.nn.functional.conv2d(x, w, stride=2, padding=1)
    want.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(tx.grad.cpu(), x.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(tw.grad.cpu(), w.grad, rtol=1e-4, atol=1e-4)
    assert chosen() >= before + 2  # forward and weight gradient at least
