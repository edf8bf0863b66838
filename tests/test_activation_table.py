"""tvk_kernels/kernels/activations.py: one table of activations, from which the elementwise ops, the
eager aten registrations, the fusion rules and the GEMM/conv epilogues are derived; and the one
dtype code table (tvk_kernels/kernels/dtypes.py, templates/common/dtypes.glsl)."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import torchvk  # noqa: F401  (registers the tvk device)
from rdna1_check import assert_fits_rdna1, navi10_stats
from torchvk.compile.fusion import ConvEpilogue, FusedElementwise, MatmulEpilogue, fuse
from tvk_kernels.kernels import activations, dtypes
from tvk_kernels.paths import data_dir

aten = torch.ops.aten
REPO = Path(__file__).resolve().parents[1]
FUSABLE = [a for a in activations.ACTIVATIONS.values() if a.aten and a.fusable]


def run_graph(gm, *inputs):
    """What compiled mode does: aten targets through the dispatcher, fused targets called directly."""
    env, it = {}, iter(inputs)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            env[n] = next(it)
        elif n.op == "call_function":
            env[n] = n.target(*fx.node.map_arg(n.args, env.__getitem__), **fx.node.map_arg(n.kwargs, env.__getitem__))
        elif n.op == "output":
            outs = fx.node.map_arg(n.args[0], env.__getitem__)
            return [o.cpu() for o in (outs if isinstance(outs, (list, tuple)) else [outs])]


@pytest.mark.parametrize("act", FUSABLE, ids=lambda a: a.name)
def test_every_fusable_activation_fuses_into_chains_and_epilogues(act):
    """act(conv2d), act(linear), act(x * 2 + y) and its backward: one conv kernel, one GEMM, fused
    elementwise groups, each against torch's CPU op that the entry implements."""
    def fn(x, w, b, xm, wm, bm, u, v):
        f = getattr(aten, act.aten).default
        outs = [f(F.conv2d(x, w, b, padding=1), **dict(act.when)), f(F.linear(xm, wm, bm), **dict(act.when)),
                f(u * 2 + v, **dict(act.when))]
        backward = getattr(aten, act.aten + "_backward", None)
        if act.grad and backward is not None:
            outs.append(backward.default(v * 2, u, **dict(act.when)))
        return outs

    g = torch.Generator().manual_seed(7)
    inputs = [torch.randn(s, generator=g) * 2 for s in ((2, 3, 5, 5), (4, 3, 3, 3), (4,), (5, 6), (3, 6), (3,),
                                                       (4, 7), (4, 7))]
    want = fn(*inputs)
    gm, stats = fuse(make_fx(fn)(*inputs))
    assert stats["epilogues"] == 2, gm.graph
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert [t.activation for t in targets if isinstance(t, (ConvEpilogue, MatmulEpilogue))] == [act.name] * 2
    assert sum(isinstance(t, FusedElementwise) for t in targets) == len(want) - 2
    aten_ops = [getattr(aten, act.aten).default, getattr(getattr(aten, act.aten + "_backward", None), "default", None)]
    assert not any(t in aten_ops for t in targets), gm.graph  # every use is in a fused group or an epilogue
    got = run_graph(gm, *(t.to("tvk") for t in inputs))
    for w_, g_ in zip(want, got):
        torch.testing.assert_close(g_, w_, atol=2e-5, rtol=1e-4)


def test_a_3d_convolution_keeps_its_activation_unfused():
    """conv3d has no epilogue: the fused target runs the convolution, then the activation with its arguments."""
    def fn(x, w):
        return F.gelu(F.conv3d(x, w, padding=1), approximate="tanh")

    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(1, 2, 4, 4, 4, generator=g), torch.randn(3, 2, 3, 3, 3, generator=g)
    gm, stats = fuse(make_fx(fn)(x, w))
    assert stats["epilogues"] == 1
    (got,) = run_graph(gm, x.to("tvk"), w.to("tvk"))
    torch.testing.assert_close(got, fn(x, w), atol=2e-5, rtol=1e-4)


def test_integer_inputs_follow_the_entry():
    x = torch.tensor([3, -2, 0, 7])
    t = x.to("tvk")
    assert torch.equal(torch.relu(t).cpu(), torch.relu(x))                      # "keep": computed as integers
    torch.testing.assert_close(torch.sigmoid(t).cpu(), torch.sigmoid(x))         # "float": a float result
    with pytest.raises(NotImplementedError, match="Long"):                       # "refuse", as torch
        F.silu(t)
    with pytest.raises(RuntimeError, match="can't be cast"):                     # in place: as torch
        torch.sigmoid_(t)


def test_gelu_picks_its_entry_by_approximate():
    x = torch.linspace(-4, 4, 41)
    for approximate in ("none", "tanh"):
        got = F.gelu(x.to("tvk"), approximate=approximate).cpu()
        torch.testing.assert_close(got, F.gelu(x, approximate=approximate), atol=1e-6, rtol=1e-5)
    assert activations.select("gelu", {"approximate": "tanh"}).name == "gelu_tanh"
    assert activations.select("gelu", {"approximate": "none"}).name == "gelu"


def test_a_bad_entry_is_refused():
    with pytest.raises(ValueError, match="taken"):
        activations.add(activations.Activation("relu", "x"))
    with pytest.raises(ValueError, match="does not use x"):
        activations.add(activations.Activation("constant_one", "1.0"))
    with pytest.raises(ValueError, match="grad_of"):
        activations.add(activations.Activation("half_y", "(0.5 * x)", grad="(0.5 * g * y)"))
    assert not {"constant_one", "half_y"} & set(activations.ACTIVATIONS)


_RDNA1_STATS = """
import json
from tvk_kernels import get_device
from tvk_kernels.kernels import activations, conv, conv_family, matmul
from tvk_kernels.paths import data_dir
from tvk_kernels.search_space import search_space, with_derived

dev = get_device(0)
tuned = json.loads((data_dir("tuned_configs") / "rdna1--amd-proprietary.json").read_text())["families"]
stats = {}
for family in ("matmul", "conv2d"):
    p = max((b["params"] for b in tuned[family]["buckets"].values()), key=lambda p: p["TM"] * p["TN"])
    p = with_derived(search_space(family), p)  # the most accumulators per thread: the fewest registers to spare
    for name, expr in activations.EPILOGUES.items():
        defines = matmul.defines(p, act=expr) if family == "matmul" else conv_family.gemm_defines(0, p, p["WG"], name)
        pipe = dev.pipelines.get(family + ".comp", defines, local_size=(p["WG"], 1, 1), push_size=128,
                                 capture_stats=True)
        stats[f"{family} {name}"] = pipe.stats
print(json.dumps(stats))
"""


def test_every_epilogue_compiles_for_rdna1_without_spills(tmp_path):
    """Each activation as the GEMM and conv2d epilogue of the RDNA1 (Windows driver) config with the
    largest per-thread tile, on RDNA1's own compiler (Mesa's null Navi 10): no spills."""
    stats = navi10_stats(_RDNA1_STATS, tmp_path)
    assert len(stats) == 2 * len(activations.EPILOGUES)
    assert_fits_rdna1(stats)


def test_dtype_codes_are_one_table():
    """templates/common/dtypes.glsl names exactly the codes of tvk_kernels/kernels/dtypes.py."""
    text = (data_dir("templates") / "common" / "dtypes.glsl").read_text()
    glsl = {name: int(code) for name, code in re.findall(r"#define (TVK_DT_\w+) (\d+)", text)}
    assert glsl == {dtypes.glsl_name(d.name): d.code for d in dtypes.DTYPES.values()}
    assert len(set(glsl.values())) == len(glsl)


# ------------------------------------------------------------------ a new activation: one entry, seen everywhere
NEW_ACTIVATION = '''
from tvk_kernels.kernels import activations

# softsign; torch has no aten op of its own for it, so this borrows one the table lacks
activations.add(activations.Activation(
    "softsign_test", "(x / (1.0 + abs(x)))", grad="(g / ((1.0 + abs(x)) * (1.0 + abs(x))))",
    aten="special_bessel_j0"))
'''

CHECKS = '''
import importlib, sys
import torch, torch.nn.functional as F
import torchvk
from torch.fx.experimental.proxy_tensor import make_fx
from torchvk.compile.fusion import ConvEpilogue, FusedElementwise, MatmulEpilogue, fuse
from torchvk.aten.elementwise import run
from tvk_kernels.kernels import conv, conv_family, matmul
from tvk_kernels.runtime.instance import Instance

sys.path.insert(0, sys.argv[1])
importlib.import_module("new_activation")  # after torchvk: the derived tables follow the table as it grows

def softsign(t):
    return t / (1 + t.abs())

def close(got, want, what):
    torch.testing.assert_close(got.cpu(), want, atol=2e-6, rtol=1e-5, msg=what)
    print("ok", what)

g = torch.Generator().manual_seed(3)
x = torch.randn(6, 7, generator=g) * 3
close(torch.special.bessel_j0(x.to("tvk")), softsign(x), "eager")
assert "softsign_test" in matmul.ACTIVATIONS and "softsign_test" in conv.ACTIVATIONS

# its backward op, against autograd of the formula
xr = x.clone().requires_grad_()
softsign(xr).backward(torch.full_like(x, 0.5))
close(run("softsign_test_backward", (torch.full_like(x, 0.5).to("tvk"), x.to("tvk"))), xr.grad, "backward op")

def fn(xc, w, b, xm, wm, bm, u, v):
    act = torch.special.bessel_j0
    return act(F.conv2d(xc, w, b, padding=1)), act(F.linear(xm, wm, bm)), act(u * 2 + v)

inputs = [torch.randn(s, generator=g) * 2 for s in ((2, 3, 5, 5), (4, 3, 3, 3), (4,), (5, 6), (3, 6), (3,), (4, 7), (4, 7))]
gm, stats = fuse(make_fx(fn)(*inputs))
targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
assert stats["epilogues"] == 2 and stats["fused_groups"] == 1, (stats, gm.graph)
assert [t.activation for t in targets if isinstance(t, (ConvEpilogue, MatmulEpilogue))] == ["softsign_test"] * 2
assert [repr(t) for t in targets if isinstance(t, FusedElementwise)] == ["fused[mul,add,special_bessel_j0]"]
want = (softsign(F.conv2d(*inputs[:3], padding=1)), softsign(F.linear(*inputs[3:6])), softsign(inputs[6] * 2 + inputs[7]))
got = gm(*(t.to("tvk") for t in inputs))
for what, gt_, w_ in zip(("conv epilogue", "matmul epilogue", "fused elementwise"), got, want):
    close(gt_, w_, what)
messages = Instance._singleton.log.take()
assert not messages, messages
print("all ok")
'''


def test_a_new_activation_is_one_table_entry(tmp_path):
    """Adding an activation is one entry: a temporary module adds one after torchvk is imported, and a
    fresh process sees it in eager mode, as an elementwise op and backward op, inside a fused elementwise
    chain, and as the GEMM and conv2d epilogue (its own process: the entry must not leak into other tests)."""
    (tmp_path / "new_activation.py").write_text(NEW_ACTIVATION)
    (tmp_path / "checks.py").write_text(CHECKS)
    env = dict(os.environ, TVK_VALIDATION=os.environ.get("TVK_VALIDATION", "1"), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(tmp_path / "checks.py"), str(tmp_path)], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=600)
    assert proc.returncode == 0 and "all ok" in proc.stdout, textwrap.shorten(proc.stdout + proc.stderr, 4000)
    for what in ("eager", "backward op", "conv epilogue", "matmul epilogue", "fused elementwise"):
        assert f"ok {what}" in proc.stdout
