"""Tracing a module into forward and backward aten graphs with AOTAutograd, on fake tensors.

`torchvk.compile` skips Dynamo (no guards or bytecode analysis per call); the
`torch.compile(backend="tvk")` path (backend.py) hands Dynamo's graphs to this same class.
The module is called functionally (`torch.func.functional_call`) on fake CPU tensors of
the same shapes, strides and dtypes, and AOTAutograd differentiates and functionalizes
that call. At run time AOTAutograd's autograd.Function runs our compiled programs on the
real tvk tensors (they are ordinary tensors to autograd).
"""
from __future__ import annotations

import contextlib
import time

import torch
from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
from torch._functorch import config as functorch_config
from torch._functorch.aot_autograd import aot_module_simplified
from torch._subclasses.fake_tensor import FakeTensorMode

from .._tensor import TVKTensor
from .fusion import fuse, fusion_compiler_present
from .program import GraphBreakError, Program
from .replay import Replayed
from .whole_ops import traced_whole


@contextlib.contextmanager
def _without_mkldnn():
    """The fakes are CPU tensors, so torch's LSTM decomposition would trace the CPU-only
    aten.mkldnn_rnn_layer instead of matmuls and gate math. (torch.backends.mkldnn.flags would
    also reset TF32 settings, with a warning each time.)"""
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(enabled)


def fake_like(t: torch.Tensor, mode) -> torch.Tensor:
    """A CPU FakeTensor of t's geometry (no memory). CPU rather than meta: some ops' meta kernels
    skip autograd (nll_loss on torch 2.13 traces with no gradient on meta), CPU ones do not."""
    with mode:
        m = torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="cpu")
    return m.requires_grad_(t.requires_grad)


def signature(values) -> tuple:
    """What a traced graph is specialised on: grad mode and each input's geometry, dtype and
    requires_grad (non-tensor inputs by value). A new signature traces again."""
    return (torch.is_grad_enabled(),) + tuple(
        (tuple(v.shape), v.stride(), v.dtype, v.requires_grad) if isinstance(v, torch.Tensor) else v for v in values)


class _Functional(torch.nn.Module):
    """forward(*params_and_buffers, *inputs) -> tuple of outputs; the model is not a submodule,
    so AOTAutograd sees every parameter only as an explicit input."""

    def __init__(self, model, names):
        super().__init__()
        object.__setattr__(self, "model", model)
        self.names = names
        self.single = True

    def forward(self, *flat):
        n = len(self.names)
        out = torch.func.functional_call(self.model, dict(zip(self.names, flat[:n])), tuple(flat[n:]))
        if isinstance(out, torch.Tensor):
            return (out,)
        if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
            self.single = False
            return tuple(out)
        raise TypeError(f"torchvk.compile: the model returned {type(out).__name__}; compiled models must "
                        "return a tensor or a tuple of tensors")


class CompiledGraphs:
    """One traced signature (shapes, dtypes, requires_grad, train/eval, grad mode) of a module."""

    def __init__(self, model, names, flat, *, fuse: bool = True, replay: bool = True):
        self.fuse, self.replay = fuse, replay
        self.programs: dict = {}
        self.device = next(t for t in flat if isinstance(t, TVKTensor))._tvk.device
        self.functional = _Functional(model, names)
        t0 = time.perf_counter()
        try:
            mode = FakeTensorMode()
            fakes = [fake_like(t, mode) if isinstance(t, torch.Tensor) else t for t in flat]
            # no CSE pass: it changes nothing in our graphs and imports torch._inductor (~2 s cold)
            with functorch_config.patch(cse=False), traced_whole(), _without_mkldnn():
                self.fn = aot_module_simplified(self.functional, fakes,
                                                fw_compiler=self._compiler("forward"),
                                                bw_compiler=self._compiler("backward"),
                                                inference_compiler=self._compiler("inference"),
                                                # the default partitioner recomputes dropout in the backward
                                                # (a new mask); this one never recomputes random ops
                                                partition_fn=min_cut_rematerialization_partition)
        except GraphBreakError:
            raise
        except Exception as e:
            raise GraphBreakError(
                f"torchvk.compile could not trace {type(model).__name__}: {type(e).__name__}: {e}. Code that reads "
                "tensor values on the host (.item(), data-dependent shapes, Python control flow on tensors) cannot "
                "be compiled; keep that part eager.") from e
        self.trace_seconds = time.perf_counter() - t0
        self.single = self.functional.single

    def _compiler(self, kind):
        def compile_graph(gm, example_inputs):
            fusion = {}
            if self.fuse and fusion_compiler_present():
                gm, fusion = fuse(gm)
            program = Program(gm, name=kind, device=self.device)
            run = Replayed(program, enabled=self.replay)
            self.programs[kind] = {"program": program, "run": run, "fusion": fusion}
            return make_boxed_func(run)

        return compile_graph

    def __call__(self, flat):
        return self.fn(*flat)

    def stats(self) -> dict:
        out = {"trace_seconds": round(self.trace_seconds, 4)}
        for kind, p in self.programs.items():
            prog = p["program"]
            out[kind] = {"ops": sum(prog.op_histogram.values()), "kernels": prog.kernels,
                         "peak_bytes": prog.peak_bytes, "fusion": p["fusion"], **p["run"].stats()}
        return out
