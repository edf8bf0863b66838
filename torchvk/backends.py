"""`torchvk.backends.benchmark`: TorchVK's `torch.backends.cudnn.benchmark`.

    torchvk.backends.benchmark = True   # or TVK_BENCHMARK=1 in the environment

The first launch of each exact matmul or conv shape times a few configs on its buffers and keeps
the fastest, also on disk for later processes (tvk_kernels/benchmark_mode.py). Off by default.
"""
import sys
import types

from tvk_kernels import benchmark_mode


class _Backends(types.ModuleType):
    @property
    def benchmark(self) -> bool:
        return benchmark_mode.enabled()

    @benchmark.setter
    def benchmark(self, on: bool):
        benchmark_mode.set_enabled(on)

    @staticmethod
    def benchmark_stats() -> dict:
        """Shapes timed in this process, seconds spent, and shapes reused from the on-disk cache."""
        return benchmark_mode.stats()


sys.modules[__name__].__class__ = _Backends
