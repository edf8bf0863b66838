"""`torch.compile(model, backend="tvk")`: Dynamo's graphs, compiled onto TorchVK's kernels.

Registered through the entry point `torch_dynamo_backends` (an installed TorchVK), or by
`import torchvk` (backend_name.py: the same entry, added to Dynamo's registry when it loads). Dynamo traces the model on FakeTVKTensors
(fake.py) and hands each graph it captured here, with fake example inputs. Dynamo may
already have turned a changed batch size into symbolic shapes, and TorchVK's programs are
static, so a graph is compiled on its first call with real inputs, once per concrete
input signature, by the same AOTAutograd -> fusion -> program -> replay path as
`torchvk.compile` (trace.py). Code Dynamo cannot trace (`.item()`, printing a tensor) splits
the model into several graphs, each compiled here, with eager tvk ops between them.
"""
from __future__ import annotations

import pkgutil

import torch
import torch._dynamo.trace_rules as rules
from torch._dynamo import config as dynamo_config
from torch._dynamo.backends.registry import _BACKENDS, register_backend

import torchvk

from .._tensor import TVKTensor, from_cpu
from .trace import CompiledGraphs, signature


class DynamoGraph:
    """One graph from Dynamo: compiled per concrete signature, called with real tvk tensors."""

    def __init__(self, gm: torch.fx.GraphModule, fuse: bool = True, replay: bool = True):
        self.gm, self.fuse, self.replay = _own_copy(gm), fuse, replay
        _devices_to_cpu(self.gm)
        self.constants = _lift_tensor_attributes(self.gm)
        self.gm.recompile()
        self.signatures: dict = {}

    def __call__(self, *args):
        args = list(args + self.constants)
        scalars = _upload_cpu_scalars(args)
        key = signature(args)
        graphs = self.signatures.get(key)
        if graphs is None:
            strays = [a for a in args if isinstance(a, torch.Tensor) and not isinstance(a, TVKTensor)]
            if strays:
                raise TypeError(
                    f"torch.compile(backend='tvk'): a graph input is a {strays[0].device} tensor of shape "
                    f"{tuple(strays[0].shape)}; compiled graphs take tvk tensors only: move it with .to('tvk') "
                    "before the compiled call")
            graphs = self.signatures[key] = CompiledGraphs(self.gm, [], args, fuse=self.fuse, replay=self.replay)
        out = graphs(args)
        for i, cpu, version in scalars:  # a graph that wrote to one (x.add_(n)): the write reaches the CPU tensor
            if args[i]._version != version:
                with torch.no_grad():
                    cpu.copy_(args[i].cpu())
        return out

    def compile_stats(self) -> list:
        return [g.stats() for g in self.signatures.values()]


def _upload_cpu_scalars(args: list) -> list:
    """0-dim CPU tensors among a graph's inputs, replaced in `args` by tvk copies; returns
    (position, CPU tensor, copy's version) for each. Eager tvk ops take a 0-dim CPU tensor as a
    number (as CUDA's do), and a model may keep one as state that a graph reads: Hugging Face's
    StaticCache starts its `cumulative_length` as torch.tensor(0) on the CPU and moves it to the
    cache's device inside the first (compiled) forward. The program computes on tvk only."""
    moved = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and not isinstance(a, TVKTensor) and a.device.type == "cpu" and a.dim() == 0:
            moved.append(i)
    if not moved:  # the usual call: nothing to look up
        return moved
    device = next((a._tvk.device for a in args if type(a) is TVKTensor), None)
    if device is None:
        return []
    for position, i in enumerate(moved):
        cpu = args[i]
        # Dynamo passes a Python float that varies between calls as a 0-dim float64 tensor; tvk has no
        # float64, and an eager tvk op would take that number as float32 (float tensors stay float32)
        value = cpu.float() if cpu.dtype == torch.float64 else cpu
        with torch.inference_mode(False):  # a normal tensor, whose version counter shows a write, in any mode
            args[i] = from_cpu(value, device).requires_grad_(cpu.requires_grad)
        moved[position] = (i, cpu, args[i]._version)
    return moved


def _own_copy(gm):
    """A graph module of our own to rewrite: Dynamo keeps using the one it handed us."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph)


def _devices_to_cpu(gm):
    """trace.py traces on fake CPU tensors (program.py maps CPU back to tvk), so a device the
    model names (torch.arange(n, device=x.device): Dynamo bakes in tvk) becomes CPU as well."""
    def cpu(a):
        if isinstance(a, torch.device) and a.type == "tvk":
            return torch.device("cpu")
        if isinstance(a, str) and a.split(":")[0] == "tvk":
            return "cpu"
        return a

    for node in gm.graph.nodes:
        node.args = torch.fx.node.map_aggregate(node.args, cpu)
        node.kwargs = torch.fx.node.map_aggregate(node.kwargs, cpu)


def _lift_tensor_attributes(gm) -> tuple:
    """Tensors Dynamo stored on the graph (an optimizer's parameters and state, which it treats as
    fixed) become trailing inputs: AOTAutograd traces them as fakes like any input, and writes
    to them (p.add_(...)) become input mutations it applies after the graph."""
    lifted = []
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    last_input = inputs[-1] if inputs else None
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        value = gm
        for part in node.target.split("."):
            value = getattr(value, part)
        if not isinstance(value, torch.Tensor):
            continue
        where = gm.graph.inserting_after(last_input) if last_input else gm.graph.inserting_before(next(iter(gm.graph.nodes)))
        with where:
            ph = last_input = gm.graph.placeholder(f"lifted_{len(lifted)}")
        ph.meta = dict(node.meta)
        node.replace_all_uses_with(ph)
        gm.graph.erase_node(node)
        lifted.append(value)
    return tuple(lifted)


compiled_graphs: list = []  # every graph this backend compiled, newest last (for stats and tests)


def tvk_backend(gm, example_inputs, options: dict | None = None, mode: str | None = None):
    """torch.compile backend. options={"fuse": False} or {"replay": False} turn off fusion or
    recorded-step replay, as in torchvk.compile; torch.compile's modes change nothing here."""
    options = dict(options or {})
    unknown = set(options) - {"fuse", "replay"}
    if unknown:
        raise ValueError(f"torch.compile(backend='tvk') options are fuse and replay, not {sorted(unknown)}")
    graph = DynamoGraph(gm, fuse=options.get("fuse", True), replay=options.get("replay", True))
    compiled_graphs.append(graph)
    return graph


USER_CODE = {"experiments", "demo"}  # written as a user would write it: Dynamo traces it


def register():
    """Register "tvk" with Dynamo and keep Dynamo out of TorchVK's runtime (its optimizers, its
    own compiled mode, the op implementations): it runs as a called function, not traced."""
    rules.add("tvk_kernels")
    for module in pkgutil.iter_modules(torchvk.__path__):
        if module.name not in USER_CODE:
            rules.add(f"torchvk.{module.name}")
    if "tvk" not in _BACKENDS:
        register_backend(tvk_backend, name="tvk")
    # A Python float that changes between calls stays a constant (a recompile per value, as before torch
    # 2.6): unspecialized, it reaches a graph as a 0-dim float64 CPU tensor read with .item(), which a
    # tvk graph cannot trace. This module loads when the name "tvk" is looked up, before any tracing; the
    # setting is process-wide (Dynamo has no per-backend one), so inductor in this process specializes too.
    dynamo_config.specialize_float = True


register()
