"""Fusion pass over aten-level fx graphs: elementwise chains -> one kernel, act(addmm) -> one GEMM,
act(convolution) -> one conv2d kernel (the activations: tvk_kernels/kernels/activations.py),
relu(batch_norm) -> one batch norm kernel writing relu(y), and cross-entropy's backward
(nll_loss_backward then log_softmax's backward) -> one kernel.

`fuse(gm)` rewrites `gm.graph` in place and returns (gm, stats). A replaced group becomes one
`call_function` node whose target is a plain callable (FusedElementwise, MatmulEpilogue, ConvEpilogue)
taking tvk tensors; its `meta["val"]` is the root's.

Elementwise: a group is a tree of float32 ops with a fusion rule (declared with the op in the op
registry, `FUSION`: torchvk/op_registry.py) under one root, each inner node used
only by its consumer in the group and of the root's shape, with at most 3 distinct external
tensors (the N-d kernel's operand limit). The kernel ops' GLSL expressions (OPS in
tvk_kernels/kernels/elementwise.py) are composed into one expression, registered as a new
OpSpec; every scalar (alpha, thresholds, Python-number operands) becomes a push constant.
"""
from __future__ import annotations

import bisect
import hashlib
import math
import operator
import re
import warnings

import torch
import torch.fx as fx

from tvk_kernels.errors import CompilerNotFoundError
from tvk_kernels.runtime.compiler import find_glslc
from tvk_kernels.kernels import elementwise as elementwise_kernels

from ..op_registry import FUSION
from .._tensor import TVKTensor, new_tensor
from ..aten._layout import result_strides
from ..aten._util import operand
from ..aten.conv import convolution
from ..aten.losses import cross_entropy_backward_from_log_probs
from ..aten.matmul import bias_row, gemm
from ..aten.norm import batch_norm_relu, batch_norm_relu_functional, batch_norm_relu_no_training

aten = torch.ops.aten
_notice_given = False


def fusion_compiler_present() -> bool:
    """Fused kernels are new GLSL, compiled at run time: without glslc (an installed wheel ships
    only the precompiled kernels eager mode launches) graphs run unfused, after one notice."""
    global _notice_given
    try:
        find_glslc()
        return True
    except CompilerNotFoundError as e:
        if not _notice_given:
            _notice_given = True
            warnings.warn(f"torchvk compiled mode runs its graphs unfused (still recorded and replayed): fusing "
                          f"kernels needs a GLSL compiler. {e}", stacklevel=3)
        return False


MAX_INPUTS = 3       # tensor slots of elementwise_nd.comp
MAX_EXPR = 2000      # ops that repeat an operand (relu, square) duplicate sub-expressions
MAX_SCALARS = 16     # push constants: 4 addresses + meta address + n + 16 floats fit Vulkan's minimum 128 bytes

_NUM = (bool, int, float)
_TOKEN = re.compile(r"\b([abc])\b|\bS\((\d+)\)")


# ------------------------------------------------------------------ graph facts
def _val(n):
    return n.meta.get("val") if isinstance(n, fx.Node) else None


def _is_f32(n) -> bool:
    v = _val(n)
    return isinstance(v, torch.Tensor) and v.dtype == torch.float32


def _bind(op, args, kwargs) -> dict | None:
    """Every schema argument by name (defaults filled in)."""
    out = {}
    for i, a in enumerate(op._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            return None
    return out


def _mutates(n) -> bool:
    if n.op != "call_function":
        return False
    if isinstance(n.target, torch._ops.OpOverload):
        return n.target._schema.is_mutable
    return n.target is not operator.getitem  # an unknown callable may write anything


class _Elem:
    """One fusible node: kernel op, operands (Nodes or numbers) and scalars (numbers)."""
    __slots__ = ("kop", "operands", "scalars")

    def __init__(self, kop, operands, scalars):
        self.kop, self.operands, self.scalars = kop, operands, scalars

    def tensors(self):
        return [x for x in self.operands if isinstance(x, fx.Node)]


def _elem(n) -> _Elem | None:
    """The node as a float32 kernel op, or None where it is not fusible."""
    rule = FUSION.get(n.target) if n.op == "call_function" else None
    if rule is None or not _is_f32(n):
        return None
    kw = _bind(n.target, n.args, n.kwargs)
    if kw is None:
        return None
    kop, names, snames = rule.kernel_op, rule.operands, rule.scalars
    kop = kop(kw) if callable(kop) else kop
    operands = tuple(kw[k] for k in names)
    if not all(_is_f32(x) if isinstance(x, fx.Node) else isinstance(x, _NUM) for x in operands):
        return None
    scalars = []
    for k, s in enumerate(snames):
        v = kw[s] if isinstance(s, str) else s
        side = elementwise_kernels.OPS[kop].unbounded[k] if k < len(elementwise_kernels.OPS[kop].unbounded) else None
        if v is None and side:  # clamp without a bound
            v = -math.inf if side == "lo" else math.inf
        if not isinstance(v, _NUM):
            return None
        scalars.append(float(v))
    return _Elem(kop, operands, tuple(scalars))


# ------------------------------------------------------------------ composing expressions
def compose(root, elems: dict, members: set):
    """(GLSL expression, external tensor Nodes in slot order, scalar values) of a group."""
    ext, scalars = [], []

    def expr(n):
        e = elems[n]
        base = len(scalars)
        scalars.extend(e.scalars)
        subs = []
        for x in e.operands:
            if isinstance(x, fx.Node) and x in members:
                subs.append("(" + expr(x) + ")")
            elif isinstance(x, fx.Node):
                if x not in ext:
                    ext.append(x)
                subs.append(chr(ord("a") + ext.index(x)))  # past "c" only while _grow sizes a group
            else:  # a Python number operand: one more push constant
                scalars.append(float(x))
                subs.append(f"S({len(scalars) - 1})")
        return _TOKEN.sub(lambda m: subs["abc".index(m[1])] if m[1] else f"S({base + int(m[2])})",
                          elementwise_kernels.OPS[e.kop].expr)

    return expr(root), ext, scalars


def register_op(expr: str, arity: int, nscalars: int) -> str:
    """The composed expression as an elementwise OpSpec; the name is a hash, so equal groups share a pipeline."""
    name = "fused_" + hashlib.sha1(f"{arity}|{nscalars}|{expr}".encode()).hexdigest()[:12]
    if name not in elementwise_kernels.OPS:
        elementwise_kernels.add_op(name, elementwise_kernels.OpSpec(arity, expr, nscalars=nscalars, float_only=True))
    return name


class FusedElementwise:
    """Graph target: out = one elementwise launch over up to 3 tvk tensors."""

    def __init__(self, op: str, scalars, labels):
        self.op, self.scalars = op, tuple(scalars)
        self.__name__ = "fused_" + "_".join(labels)
        self.label = f"fused[{','.join(labels)}]"

    def __repr__(self):
        return self.label

    def __call__(self, *tensors):
        tvk = next(t for t in tensors if isinstance(t, TVKTensor))
        ts = [t if isinstance(t, TVKTensor) else t.to(tvk.device) for t in tensors]  # CPU 0-dim constants
        shapes = [tuple(t.shape) for t in ts]
        shape = shapes[0] if all(s == shapes[0] for s in shapes) else elementwise_kernels.broadcast_shapes(*shapes)
        dev = tvk._tvk.device
        out = new_tensor(shape, torch.float32, dev, stride=result_strides(shape, ts))  # the traced layout, as unfused
        if out.numel():
            elementwise_kernels.elementwise(dev, self.op, tuple(operand(t) for t in ts), operand(out), self.scalars)
        return out


class MatmulEpilogue:
    """Graph target: act(addmm(bias, x, w, alpha=alpha)) as one GEMM with bias and activation."""

    def __init__(self, activation: str, alpha: float, act_node_target, act_kwargs):
        self.activation, self.alpha = activation, alpha
        self._act = (act_node_target, act_kwargs)  # the unfused path, for a bias the kernel cannot take
        self.__name__ = f"addmm_{activation}"

    def __repr__(self):
        return f"addmm+{self.activation}"

    def __call__(self, bias, x, w):
        row = bias_row(bias, w.shape[1]) if bias.dtype == x.dtype else None
        if row is None:
            target, kw = self._act
            return target(aten.addmm.default(bias, x, w, alpha=self.alpha), **kw)
        out = new_tensor((x.shape[0], w.shape[1]), x.dtype, x._tvk.device)
        return gemm(x, w, out, bias=row, alpha=self.alpha, activation=self.activation)


class ConvEpilogue:
    """Graph target: act(convolution(...)) (not transposed) as one conv2d kernel with the activation as its epilogue."""

    def __init__(self, activation: str, act_node_target, act_kwargs):
        self.activation = activation
        self._act = (act_node_target, act_kwargs)  # the unfused path, for 3-D convolutions (no epilogue there)
        self.__name__ = f"convolution_{activation}"

    def __repr__(self):
        return f"convolution+{self.activation}"

    def __call__(self, input, *args):
        if input.dim() == 5:
            target, kw = self._act
            return target(convolution(input, *args), **kw)
        return convolution(input, *args, act=self.activation)


# ------------------------------------------------------------------ the pass
def fuse(gm: fx.GraphModule) -> tuple[fx.GraphModule, dict]:
    """Rewrite gm's graph in place (batch norm + relu and addmm epilogues first, then elementwise
    groups, roots taken from the output backwards); returns (gm, {"fused_groups", "fused_ops",
    "epilogues", "bn_relu", "cross_entropy_backward"})."""
    graph = gm.graph
    stats = {"fused_groups": 0, "fused_ops": 0, "epilogues": 0, "bn_relu": 0, "cross_entropy_backward": 0}
    _bn_relu(graph, stats)
    _cross_entropy_backward(graph, stats)
    nodes, _, clean_between = _order(graph)
    _epilogues(graph, nodes, clean_between, stats)
    nodes, index, clean_between = _order(graph)
    elems = {n: e for n in nodes if (e := _elem(n)) is not None}
    taken: set = set()
    for root in reversed(nodes):
        if root not in elems or root in taken:
            continue
        members = _grow(root, elems, taken, clean_between)
        taken |= members
        if len(members) < 2:
            continue
        expr, ext, scalars = compose(root, elems, members)
        ordered = sorted(members, key=index.__getitem__)
        fn = FusedElementwise(register_op(expr, len(ext), len(scalars)), scalars,
                              [str(n.target.__name__).split(".")[0] for n in ordered])
        with graph.inserting_before(root):
            new = graph.call_function(fn, tuple(ext))
        new.meta["val"] = root.meta["val"]
        root.replace_all_uses_with(new)
        for n in reversed(ordered):
            graph.erase_node(n)
        stats["fused_groups"] += 1
        stats["fused_ops"] += len(members)
    graph.lint()
    gm.recompile()
    return gm, stats


def _order(graph):
    """Nodes, their positions, and clean_between(a, b): no node from a up to b writes memory,
    so a read at a may move to b."""
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    writes = [i for i, n in enumerate(nodes) if _mutates(n)]

    def clean_between(a, b) -> bool:
        k = bisect.bisect_right(writes, index[a])
        return k == len(writes) or writes[k] >= index[b]

    return nodes, index, clean_between


def _fits(composed) -> bool:
    expr, _, scalars = composed
    return len(expr) <= MAX_EXPR and len(scalars) <= MAX_SCALARS


def _grow(root, elems, taken, clean_between) -> set:
    """The group under `root`: every single-use producer of the root's shape (expression and
    scalars kept small), then subtrees cut off until at most 3 external tensors remain. Cutting the
    largest tree rather than growing greedily finds groups whose inputs are shared deep down."""
    shape = tuple(_val(root).shape)
    members, stack = {root}, [root]
    while stack:
        m = stack.pop()
        for p in dict.fromkeys(elems[m].tensors()):
            if (p in elems and p not in taken and p not in members and set(p.users) == {m}
                    and tuple(_val(p).shape) == shape and clean_between(p, root)
                    and _fits(compose(root, elems, members | {p}))):
                members.add(p)
                stack.append(p)

    def below(q) -> set:
        out, todo = set(), [q]
        while todo:
            n = todo.pop()
            out.add(n)
            todo.extend(x for x in elems[n].tensors() if x in members and x not in out)
        return out

    def n_inputs(ms) -> int:
        return len({x for m in ms for x in elems[m].tensors() if x not in ms})

    while n_inputs(members) > MAX_INPUTS:  # the cut closest to legal, then keeping the most ops
        cuts = [members - below(q) for q in sorted(members - {root}, key=lambda n: n.name)]
        members = min(cuts, key=lambda ms: (max(n_inputs(ms) - MAX_INPUTS, 0), -len(ms)))
    return members


def _epilogues(graph, nodes, clean_between, stats):
    """act(addmm(bias, x, w)) -> one MatmulEpilogue node; act(convolution(...)) -> one ConvEpilogue."""
    for act in nodes:
        rule = FUSION.get(act.target) if act.op == "call_function" else None
        mk = rule.epilogue if rule is not None else None
        if mk is None or not act.args or not isinstance(act.args[0], fx.Node):
            continue
        mm = act.args[0]
        akw = _bind(act.target, act.args, act.kwargs)
        extra = {k: v for k, v in akw.items() if k != "self"}
        if (mm.op == "call_function" and mm.target is aten.convolution.default
                and len(mm.users) == 1 and not _bind(mm.target, mm.args, mm.kwargs)["transposed"]
                and all(_is_f32(a) for a in mm.args[:3] if isinstance(a, fx.Node)) and _is_f32(mm)
                and clean_between(mm, act)):
            _replace_pair(graph, mm, act, ConvEpilogue(mk(akw), act.target, extra), tuple(mm.args), dict(mm.kwargs))
            stats["epilogues"] += 1
            continue
        if mm.op != "call_function" or mm.target is not aten.addmm.default or len(mm.users) != 1:
            continue
        kw = _bind(mm.target, mm.args, mm.kwargs)
        bias, x, w = kw["self"], kw["mat1"], kw["mat2"]
        if (kw["beta"] != 1 or not isinstance(kw["alpha"], _NUM) or not all(map(_is_f32, (mm, bias, x, w)))
                or _val(bias).dim() != 1 or not clean_between(mm, act)):
            continue
        fn = MatmulEpilogue(mk(akw), float(kw["alpha"]), act.target, extra)
        _replace_pair(graph, mm, act, fn, (bias, x, w))
        stats["epilogues"] += 1


def _replace_pair(graph, first, last, target, args, kwargs=None):
    """first -> last (first used only by last) becomes one call of target(*args, **kwargs)."""
    with graph.inserting_before(last):
        new = graph.call_function(target, args, kwargs or {})
    new.meta["val"] = last.meta["val"]
    last.replace_all_uses_with(new)
    graph.erase_node(last)
    graph.erase_node(first)


_BN_RELU = {aten.native_batch_norm.default: batch_norm_relu,
            aten._native_batch_norm_legit.default: batch_norm_relu,
            aten._native_batch_norm_legit_functional.default: batch_norm_relu_functional,
            aten._native_batch_norm_legit_no_training.default: batch_norm_relu_no_training}


def _bn_relu(graph, stats):
    """relu(getitem(bn, 0)), the relu the only user of output 0 -> bn's target writes relu(y) itself.
    Exact: the backward reads the relu output (threshold_backward) and bn's input, weight and saved
    mean / invstd, never bn's pre-relu output, which nothing else uses."""
    for act in list(graph.nodes):
        if act.op != "call_function" or act.target is not aten.relu.default or not isinstance(act.args[0], fx.Node):
            continue
        item = act.args[0]
        bn = item.args[0] if item.op == "call_function" and item.target is operator.getitem else None
        if (not isinstance(bn, fx.Node) or item.args[1] != 0 or len(item.users) != 1 or not _is_f32(item)
                or bn.op != "call_function" or bn.target not in _BN_RELU):
            continue
        bn.target = _BN_RELU[bn.target]  # same args, same outputs
        act.replace_all_uses_with(item)
        graph.erase_node(act)
        stats["bn_relu"] += 1


def _cross_entropy_backward(graph, stats):
    """_log_softmax_backward_data(nll_loss_backward(g, ls, ...), ls, dim 1) on [N, C] float32, the
    nll gradient used only there -> one kernel. Exact: the pair computes g * w[t] * (softmax - onehot)
    scaled like the loss, which is the cross-entropy backward with softmax = exp(ls)."""
    for sm in list(graph.nodes):
        if sm.op != "call_function" or sm.target is not aten._log_softmax_backward_data.default:
            continue
        nll, ls, dim = sm.args[0], sm.args[1], sm.args[2]
        if (not isinstance(nll, fx.Node) or nll.op != "call_function" or nll.target is not aten.nll_loss_backward.default
                or _undetached(nll.args[1]) is not _undetached(ls) or len(nll.users) != 1 or not _is_f32(sm)):
            continue
        v = _val(ls)
        if v is None or v.dim() != 2 or dim not in (1, -1):
            continue
        _replace_pair(graph, nll, sm, cross_entropy_backward_from_log_probs, tuple(nll.args), dict(nll.kwargs))
        stats["cross_entropy_backward"] += 1


def _undetached(n):
    """The node under detach()/alias() views (AOTAutograd's backward detaches saved tensors)."""
    while isinstance(n, fx.Node) and n.op == "call_function" and n.target in (aten.detach.default, aten.alias.default):
        n = n.args[0]
    return n
