"""The op registry (torchvk/op_registry.py): each aten overload declared once, and the op table,
fusion rules, supported_ops() and the coverage list generated from the declarations."""
import importlib.util
import pkgutil
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torchvk
import torchvk.aten
from torchvk import op_registry
from torchvk.compile.fusion import fuse
from tvk_kernels.kernels import elementwise as elementwise_kernels

from test_compile_fusion import check

aten = torch.ops.aten
ROOT = Path(__file__).resolve().parent.parent


def import_file(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- one declaration per overload
def test_a_second_declaration_raises_naming_both_places(tmp_path):
    module = tmp_path / "second_add.py"
    module.write_text("import torch\nfrom torchvk.op_registry import register\n\n\n"
                      "@register(torch.ops.aten.add.Tensor)\ndef add(self, other, alpha=1):\n    return self\n")
    before = op_registry.TABLE[aten.add.Tensor]
    with pytest.raises(op_registry.DuplicateRegistrationError) as raised:
        import_file(module)
    message = str(raised.value)
    assert "aten.add.Tensor" in message and "torchvk/aten/elementwise.py:" in message, message
    assert "second_add.py:5" in message, message
    assert op_registry.TABLE[aten.add.Tensor] is before  # the first declaration stands


def test_an_overload_and_its_packet_are_the_same_op():
    with pytest.raises(op_registry.DuplicateRegistrationError, match="already is"):
        op_registry.register(aten.sub)(lambda *args: None)
    assert aten.sub not in op_registry.TABLE


def test_every_aspect_is_declared_once():
    with pytest.raises(op_registry.DuplicateRegistrationError, match="fusion is declared twice"):
        op_registry.register_fusion(aten.mul.Tensor, op_registry.ElementwiseRule("mul", ("self", "other")))
    with pytest.raises(op_registry.DuplicateRegistrationError, match="autocast is declared twice"):
        op_registry.register_autocast(aten.mm.default, "float32", lambda *args: None)


def test_a_second_kernel_table_row_raises():
    with pytest.raises(ValueError, match="already in the table"):
        elementwise_kernels.add_op("sin", elementwise_kernels.OpSpec(1, "a"))


def test_the_generated_views_agree_with_the_declarations():
    declarations = op_registry.DECLARATIONS
    assert {op for op, d in declarations.items() if d.kind in ("kernel", "backend")} == set(op_registry.TABLE)
    assert {op for op, d in declarations.items() if d.kind == "decomposition"} == set(op_registry.DECOMPOSE)
    assert {op for op, d in declarations.items() if d.fusion is not None} == set(op_registry.FUSION)
    assert torchvk.supported_ops() == sorted(str(op) for op, d in declarations.items()
                                             if d.kind in ("kernel", "decomposition", "composite", "backend"))
    for d in declarations.values():  # every declaration says where it was made
        assert all(":" in where and not where.startswith("torchvk/op_registry.py") for where in d.where.values()), d


def test_op_modules_are_found_by_name():
    files = sorted(info.name for info in pkgutil.iter_modules(torchvk.aten.__path__) if not info.name.startswith("_"))
    assert list(torchvk.aten.GROUPS) == files
    assert not hasattr(torchvk.aten, "unavailable")  # an import error raises, never swallowed


def test_coverage_rows_name_every_declared_op():
    rows = {row["op"]: row for row in op_registry.coverage_rows()}
    assert rows["aten.add.Tensor"]["kind"] == "kernel" and rows["aten.add.Tensor"]["fusion"] == "elementwise"
    assert rows["aten.relu.default"]["fusion"] == "elementwise+epilogue"
    assert rows["aten.mm.default"]["autocast"] == "lower_precision"
    assert rows["aten.upsample_nearest2d.vec"]["fusion"] == "whole"
    assert rows["aten.scaled_dot_product_attention.default"]["kind"] == "composite"
    assert rows["aten.empty.memory_format"]["kind"] == "backend"


# ---------------------------------------------------------------- adding an elementwise op is one row
NEW_ROW = '''
"""A new elementwise op, declared in one row of the kernel table (nothing else)."""
from tvk_kernels.kernels import elementwise

elementwise.add_op("registry_test_cube_plus", elementwise.OpSpec(1, "a * a * a + 1.0", float_only=True,
                                                                 aten=("tvk_registry_test::cube_plus",),
                                                                 ints="float"))
'''


@pytest.fixture(scope="module")
def cube_plus():
    """An op torch does not have: tvk_registry_test::cube_plus(x) = x**3 + 1 (CPU kernel and shapes for
    torch, as a library defining an op would)."""
    library = torch.library.Library("tvk_registry_test", "DEF")
    library.define("cube_plus(Tensor self) -> Tensor")
    library.impl("cube_plus", lambda x: x ** 3 + 1, "CPU")
    library.impl("cube_plus", lambda x: torch.empty_like(x), "Meta")
    yield torch.ops.tvk_registry_test.cube_plus.default
    del library


def test_a_table_row_is_an_eager_op_a_fused_op_and_a_listed_op(tmp_path, cube_plus):
    module = tmp_path / "new_elementwise_op.py"
    module.write_text(NEW_ROW)
    import_file(module)

    x = torch.randn(5, 7)
    torch.testing.assert_close(cube_plus(x.to("tvk")).cpu(), x ** 3 + 1)  # eager
    counts = torchvk.op_counts()["vulkan"]
    assert counts.get("tvk_registry_test.cube_plus.default", 0) >= 1

    gm, stats, n_plain, n_fused = check(lambda x: cube_plus(x) * 2 - x, x, groups=1)  # compiled mode's fusion
    assert stats["fused_ops"] == 3 and n_fused == 1

    assert "tvk_registry_test.cube_plus.default" in torchvk.supported_ops()
    rows = {row["op"]: row for row in op_registry.coverage_rows()}
    assert rows["tvk_registry_test.cube_plus.default"]["fusion"] == "elementwise"
    assert rows["tvk_registry_test.cube_plus.default"]["where"].endswith("torchvk/aten/elementwise.py")


# ---------------------------------------------------------------- every table row fuses, and right
DOMAIN = {"acosh": lambda x: x + 1.5, "special_zeta": lambda x: x + 1.5}  # where (0.1, 0.9) is outside it


def _row_overloads():
    """(kernel op, the functional Tensor overload) of every row of the kernel table naming aten ops."""
    out = []
    for kop, spec in elementwise_kernels.OPS.items():
        for name in spec.aten:
            packet = getattr(aten, name)
            overload = packet.Tensor if "Tensor" in packet.overloads() else packet.default
            out.append(pytest.param(kop, overload, id=name))
    return out


@pytest.mark.parametrize("kop, overload", _row_overloads())
def test_every_table_row_fuses_into_a_chain_and_matches_the_cpu(kop, overload):
    spec = elementwise_kernels.OPS[kop]
    assert op_registry.FUSION[overload].kernel_op == kop
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.rand(6, 5, generator=generator) * 0.8 + 0.1 for _ in range(spec.arity)]
    name = overload.overloadpacket.__name__
    if name in DOMAIN:
        inputs[0] = DOMAIN[name](inputs[0])
    gm, stats, n_plain, n_fused = check(lambda *xs: overload(*xs) * 2 + 1, *inputs, groups=1, atol=1e-4, rtol=1e-3)
    assert stats["fused_ops"] == 3 and n_fused == 1


@pytest.mark.parametrize("fn", [
    lambda x, y: torch.ceil(x * 4) + torch.floor(y * 4) - torch.trunc(x * 3) + torch.round(y * 5),
    lambda x, y: torch.frac(x * 3) * torch.remainder(x, y) + torch.fmod(y, x),
    lambda x, y: torch.pow(x, y) + torch.heaviside(x - 0.5, y) - torch.threshold(y, 0.4, -1.0),
], ids=["rounding", "remainders", "pow_heaviside_threshold"])
def test_the_declared_rules_of_hand_written_kernels_fuse(fn):
    x, y = torch.rand(4, 6) + 0.1, torch.rand(4, 6) + 0.1
    gm, stats, n_plain, n_fused = check(fn, x, y, groups=1, atol=1e-5, rtol=1e-4)
    assert n_fused == 1


def test_shrink_and_softplus_backward_fuse():
    def fn(grad, x):
        return (aten.hardshrink_backward(grad, x, 0.3) + aten.softplus_backward(grad, x, 2.0, 20.0)) * 2

    check(fn, torch.randn(3, 8), torch.randn(3, 8), groups=1)


def test_a_fused_graph_keeps_ops_without_a_rule():
    gm, stats = fuse(make_fx(lambda x: torch.cumsum(torch.sin(x) * 2, 0))(torch.randn(4, 3)))
    assert stats["fused_groups"] == 1
    assert any(n.target is aten.cumsum.default for n in gm.graph.nodes)
