"""An aten FX graph lowered to straight-line Python that calls TorchVK's kernels directly.

Eager mode pays torch's dispatcher, autograd and `__torch_dispatch__` for every op. A
compiled graph is already differentiated and functional, so each node can call the op's
TorchVK implementation (`torchvk/aten/*`) as a plain function: the program is generated
source, one line per node, and every value is deleted after its last use so the caching
allocator hands its buffer to later nodes (memory planned by liveness).

An op without a Vulkan kernel is an error here, at compile time, naming the op and its
input shapes: a compiled graph never runs anything on the CPU.

The first call runs the program twice: once dry (kernels discarded), which only requests
the pipelines it needs and has a thread pool build them all at once, then for real. Cold,
building pipelines one after the other at their first launch was most of the first step.
TVK_PARALLEL_COMPILE=0 skips the dry run.
"""
from __future__ import annotations

import math
import operator
from collections import Counter

import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from tvk_kernels.env_flags import env_flag
from tvk_kernels.runtime.lock import locked
from tvk_kernels.runtime.memory import freed_ordinals

from .. import _dispatch, _rng
from .._storage import get_device
from .._tensor import TVKTensor, from_cpu
from ..aten.copies import contig
from ..op_registry import TABLE

_aten = torch._ops.OpOverload
_LITERALS = (int, bool, str, type(None))
# random ops whose kernels can read their seed from a buffer (replayable), and the others
REPLAYABLE_RANDOM_OPS = {"aten::native_dropout", "aten::_scaled_dot_product_fused_attention_overrideable"}
RANDOM_OPS = {"aten::rand", "aten::randn", "aten::rand_like", "aten::randn_like",
              "aten::bernoulli", "aten::bernoulli_", "aten::uniform_", "aten::normal_", "aten::randint",
              "aten::randperm", "aten::random_", "aten::multinomial"}


class GraphBreakError(NotImplementedError):
    """The graph has an op TorchVK cannot run on the GPU; compiling it would run it on the CPU."""


def _describe(node) -> str:
    parts = []
    for a in node.args:
        v = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        parts.append(f"{v.dtype}{list(v.shape)}".replace("torch.", "") if isinstance(v, torch.Tensor) else repr(a))
    return ", ".join(parts)


class Program:
    """Callable(*inputs) -> list of outputs. `source` is the generated code (readable on purpose)."""

    def __init__(self, gm: torch.fx.GraphModule, name: str = "graph", device=None):
        self.name = name
        self.device = device or get_device()
        self.graph = gm.graph
        self.module = gm  # get_attr nodes (a tensor constant the trace lifted) read it
        self.globals: dict = {}
        self.op_histogram: Counter = Counter()
        self.random = False  # random ops a replay would repeat: never recorded
        self.replayable_random = False  # dropout: recorded with its seed in a buffer
        self.custom_ops = False  # ops of other libraries, run through their Python: never recorded
        self.kernels = 0  # nodes that launch work (not views, getitem, ...): an upper bound
        self.source = self._generate()
        scope: dict = {}
        exec(compile(self.source, f"<torchvk compiled {name}>", "exec"), self.globals, scope)
        self._run = scope["run"]
        self.peak_bytes: int | None = None
        self.temps: frozenset = frozenset()  # ordinals of the first run's allocations freed before its end

    # ---------------------------------------------------------------- codegen
    def _const(self, value) -> str:
        name = f"c{len(self.globals)}"
        self.globals[name] = value
        return name

    def _expr(self, a, names) -> str:
        if isinstance(a, torch.fx.Node):
            return names[a]
        if isinstance(a, (list, tuple)):
            inner = ", ".join(self._expr(x, names) for x in a)
            return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
        if isinstance(a, torch.device):
            # traced on fake CPU tensors: factory ops create on our device
            return self._const(torch.device("tvk", self.device.index) if a.type in ("cpu", "meta") else a)
        if isinstance(a, float) and math.isfinite(a):
            return repr(a)
        if isinstance(a, _LITERALS):
            return repr(a)
        return self._const(a)

    def _generate(self) -> str:
        nodes = list(self.graph.nodes)
        last_use: dict = {}
        for i, n in enumerate(nodes):
            for inp in n.all_input_nodes:
                last_use[inp] = i
        names, params, body = {}, [], []
        for i, n in enumerate(nodes):
            if n.op == "placeholder":
                names[n] = f"a{len(params)}"
                params.append(names[n])
            elif n.op == "call_function":
                names[n] = f"v{i}"
                fn = self._resolve(n)
                args = ", ".join([self._expr(a, names) for a in n.args] +
                                 [f"{k}={self._expr(v, names)}" for k, v in n.kwargs.items()])
                if n.target is operator.getitem:
                    body.append(f"    {names[n]} = {self._expr(n.args[0], names)}[{self._expr(n.args[1], names)}]")
                else:
                    body.append(f"    {names[n]} = {fn}({args})")
            elif n.op == "get_attr":  # a constant tensor of the traced code: on the device once, at compile time
                value = self.module
                for part in n.target.split("."):
                    value = getattr(value, part)
                if isinstance(value, torch.Tensor) and not isinstance(value, TVKTensor):
                    with unset_fake_temporarily():  # programs are built while the tracer's fake mode is on
                        value = from_cpu(value.detach().cpu(), self.device)
                names[n] = self._const(value)
                continue
            elif n.op == "output":
                body.append(f"    return {self._expr(list(n.args[0]) if isinstance(n.args[0], (list, tuple)) else [n.args[0]], names)}")
                continue
            else:
                raise GraphBreakError(f"compiled graph {self.name}: unsupported node kind {n.op} ({n.format_node()})")
            # liveness: drop what no later node reads, so its buffer is reused
            dead = [inp for inp in n.all_input_nodes if last_use.get(inp) == i and inp.op != "get_attr"]
            if n.op == "call_function" and not n.users:
                dead.append(n)
            if dead:
                body.append("    del " + ", ".join(sorted({names[d] for d in dead})))
        return f"def run({', '.join(params)}):\n" + "\n".join(body) + "\n"

    def _resolve(self, n) -> str:
        target = n.target
        if target is operator.getitem:
            return ""
        if isinstance(target, _aten):
            if target.name() in RANDOM_OPS:
                self.random = True
            if target.name() in REPLAYABLE_RANDOM_OPS:
                self.replayable_random = True
            fn = _dispatch.implementation(target)
            if fn is not None and target.namespace not in _TORCH_NAMESPACES and target not in TABLE:
                self.custom_ops = True
                return self._const(_custom_op(fn, self.device))  # uncounted, as in eager mode: its ops count
            if fn is None:
                raise GraphBreakError(
                    f"compiled graph {self.name} needs {target} ({_describe(n)}), which has no Vulkan kernel in "
                    "TorchVK: it would run on the CPU. Run the model eagerly (TVK_CPU_FALLBACK=1 to allow a "
                    "counted CPU fallback there) or file an issue for the op.")
            self.op_histogram[str(target)] += 1
            if target.overloadpacket not in _VIEW_OPS:
                self.kernels += 1
            if target in _RESHAPING_VIEWS:
                fn = _view_or_copy(fn)
            return self._const(fn)
        if callable(target):  # fused kernels and other Python callables inserted by passes
            self.op_histogram[getattr(target, "__name__", repr(target))] += 1
            self.kernels += 1
            return self._const(target)
        raise GraphBreakError(f"compiled graph {self.name}: cannot run node {n.format_node()}")

    # ---------------------------------------------------------------- run
    @locked  # its calls skip __torch_dispatch__; its dry run must not swallow another thread's kernels
    def __call__(self, *args):
        _dispatch.count_vulkan_ops(self.op_histogram)
        if self.peak_bytes is None:  # first run: build its pipelines in parallel, measure its own peak
            self._prefetch_pipelines(args)
            alloc = self.device.allocator
            saved_peak, start = alloc.peak_allocated, alloc.allocated
            alloc.peak_allocated = start
            tracked = alloc.tracker = [] if alloc.capture is None else None
            try:
                out = self._run(*args)
                if tracked is not None:  # what a recording of this program may share (replay.py)
                    self.temps = freed_ordinals(tracked)
                return out
            finally:
                alloc.tracker = None
                self.peak_bytes = alloc.peak_allocated - start
                alloc.peak_allocated = max(saved_peak, alloc.peak_allocated)
        return self._run(*args)

    def _prefetch_pipelines(self, args):
        """A dry run whose pipeline requests are built in a pool. It must leave no trace: the RNG
        counter is put back (dropout then draws what eager mode would), and so are the op counts
        and the memory peak. Its errors are dropped: the real run right after raises them."""
        dev = self.device
        if not env_flag("TVK_PARALLEL_COMPILE", default=True) or dev.stream is None:
            return
        rng, peak, counts = _rng.snapshot(), dev.allocator.peak_allocated, _dispatch.op_counts()
        try:
            with dev.pipelines.prefetching(), dev.stream.dry_run():
                self._run(*args)
        except Exception:
            pass
        finally:
            _rng.restore(rng)
            dev.allocator.peak_allocated = peak
            _dispatch.restore_op_counts(counts)


_RESHAPING_VIEWS = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default}
_TORCH_NAMESPACES = ("aten", "prims")  # and ours (tvk::rnn_sequence_forward...) are in the op table


class _DryRunStop(Exception):
    """A dry run reached a custom op: it ends there (its errors are dropped, the pipelines requested so far build)."""


def _custom_op(run, device):
    """A custom op's node (torch.library.custom_op: Transformers' grouped_mm_fallback in a mixture of experts),
    run through its own Python, which launches our kernels op by op and may read tensor values on the host
    (`offs.tolist()`). So a program with one is never recorded for replay (replay.py), and a dry run stops
    before it: the values it would read are not computed there, and a loop over them could run unbounded."""
    stream = device.stream

    def custom_op(*args, **kwargs):
        if stream.dry:
            raise _DryRunStop()
        return run(*args, **kwargs)

    return custom_op


def _view_or_copy(view):
    """aten.view in a compiled graph, as reshape: where a kernel laid its output out otherwise than torch's
    meta kernel did at trace time (a contiguous grad where the trace had channels-last: diffusers' UNet after
    its attention), a view the trace allowed may not fit the real strides; then a contiguous copy is viewed.
    Safe in the traced graphs: they are functional, so no later op writes through the view."""
    def view_or_copy(tensor, size):
        try:
            return view(tensor, size)
        except RuntimeError:
            return view(contig(tensor), size)

    return view_or_copy


_VIEW_OPS = {torch.ops.aten.view, torch.ops.aten._unsafe_view, torch.ops.aten.t, torch.ops.aten.transpose,
             torch.ops.aten.permute, torch.ops.aten.expand, torch.ops.aten.slice, torch.ops.aten.select,
             torch.ops.aten.unsqueeze, torch.ops.aten.squeeze, torch.ops.aten.detach, torch.ops.aten.alias,
             torch.ops.aten.as_strided, torch.ops.aten.reshape}
