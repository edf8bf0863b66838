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
import torch.utils._pytree as pytree
from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
from torch._functorch import config as functorch_config
from torch._functorch.aot_autograd import aot_module_simplified
from torch._subclasses.fake_tensor import FakeTensorMode

from .._storage import get_device
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


@contextlib.contextmanager
def _compiling():
    """torch.compiler.is_compiling() is True while we trace, as in torch.export's non-strict trace
    (the same kind of trace: the module run on fake tensors): a model's code that reads tensor values
    outside compilation (Hugging Face's mask preparation) takes its traceable branch."""
    before = torch.compiler._is_compiling_flag
    torch.compiler._is_compiling_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag = before


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


# what a compiled model may take and return besides tensors, anywhere in its arguments and output: kept as traced
PLAIN = (type(None), bool, int, float, str)


def _constants(leaves, problem: str) -> dict:
    """{position: value} of the leaves that are not tensors; a value not in PLAIN raises TypeError
    (`problem` formatted with its type's name)."""
    constants = {i: leaf for i, leaf in enumerate(leaves) if not isinstance(leaf, torch.Tensor)}
    bad = [leaf for leaf in constants.values() if not isinstance(leaf, PLAIN)]
    if bad:
        raise TypeError("torchvk.compile: " + problem.format(type(bad[0]).__name__))
    return constants


class CallSpec:
    """How a call's arguments nest (positional and keyword, tuples, lists, dicts, ...), with the
    non-tensor values among them: the tensors are the graph's inputs, the rest is traced as given
    (part of the signature: another value traces again)."""

    def __init__(self, args: tuple, kwargs: dict):
        leaves, self.tree = pytree.tree_flatten((args, kwargs))
        self.tensor_at = tuple(i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor))
        self.leaves = leaves
        self.tensors = [leaves[i] for i in self.tensor_at]
        constants = _constants(leaves, "an argument holds a {}; compiled models take tensors, and numbers, strings "
                                       "and None (traced as given), in tuples, lists and dicts")
        self.key = (str(self.tree), tuple(constants.items()))

    def rebuild(self, tensors) -> tuple:
        """(args, kwargs) with these tensors where the call had its tensors."""
        leaves = list(self.leaves)
        for i, tensor in zip(self.tensor_at, tensors):
            leaves[i] = tensor
        return pytree.tree_unflatten(leaves, self.tree)


class _Functional(torch.nn.Module):
    """forward(*params_and_buffers, *input tensors) -> tuple of output tensors; the model is not a
    submodule, so AOTAutograd sees every parameter only as an explicit input. `call`: how the
    inputs go into the model (None: positionally); the output's structure (a tuple, a dict, a
    ModelOutput, with numbers or None among the tensors) is kept in `output_tree`."""

    def __init__(self, model, names, call: CallSpec | None = None):
        super().__init__()
        object.__setattr__(self, "model", model)
        self.names = names
        self.call = call
        self.single = True
        self.output_tree = None
        self.output_constants: dict = {}

    def forward(self, *flat):
        n = len(self.names)
        args, kwargs = self.call.rebuild(flat[n:]) if self.call is not None else (tuple(flat[n:]), {})
        out = torch.func.functional_call(self.model, dict(zip(self.names, flat[:n])), args, kwargs)
        if isinstance(out, torch.Tensor):
            return (out,)
        leaves, self.output_tree = pytree.tree_flatten(out)
        self.single = False
        self.output_constants = _constants(leaves, "the model returned a {} in its output; compiled models return "
                                                   "tensors (and numbers, strings or None) in tuples, lists, dicts "
                                                   "or ModelOutputs (a Hugging Face model: pass use_cache=False)")
        return tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))

    def rebuild_output(self, tensors):
        """The model's output, of the traced structure, around these output tensors."""
        if self.single:
            return tensors[0]
        tensors = iter(tensors)
        leaves = [self.output_constants[i] if i in self.output_constants else next(tensors)
                  for i in range(self.output_tree.num_leaves)]
        return pytree.tree_unflatten(leaves, self.output_tree)


class CompiledGraphs:
    """One traced signature (shapes, dtypes, requires_grad, train/eval, grad mode) of a module."""

    def __init__(self, model, names, flat, *, fuse: bool = True, replay: bool = True, call: CallSpec | None = None):
        self.fuse, self.replay = fuse, replay
        self.programs: dict = {}
        # a graph of factories alone (Dynamo split a mask's construction off) has no tvk input: the default device
        self.device = next((t._tvk.device for t in flat if isinstance(t, TVKTensor)), None) or get_device()
        self.functional = _Functional(model, names, call)
        t0 = time.perf_counter()
        try:
            mode = FakeTensorMode()
            fakes = [fake_like(t, mode) if isinstance(t, torch.Tensor) else t for t in flat]
            # no CSE pass: it changes nothing in our graphs and imports torch._inductor (~2 s cold)
            with functorch_config.patch(cse=False), traced_whole(), _without_mkldnn(), _compiling():
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
