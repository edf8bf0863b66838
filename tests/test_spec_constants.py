"""Tunables as specialization constants (design note 28): a family passes every parameter as a
define; the names a template declares with `layout(constant_id = N)` reach the pipeline instead of
glslc, so one SPIR-V module serves every config."""
import pytest

from tvk_kernels.errors import ShaderCompileError
from tvk_kernels.kernels import matmul
from tvk_kernels.runtime import compiler

TEMPLATE = """#version 450
layout(local_size_x_id = 0) in;
layout(constant_id = 3) const uint TILE = 4u;
layout(constant_id = 4) const bool FLAG = false;
%s
void main() {}
"""


def test_split_defines_sends_declared_names_to_the_pipeline(tmp_path):
    path = tmp_path / "k.comp"
    path.write_text(TEMPLATE % "#if MODE == 1  // TILE in a comment is fine\n#endif")
    assert compiler.spec_constants_of(path) == {"TILE": 3, "FLAG": 4}
    assert compiler.split_defines(path, {"TILE": 16, "FLAG": True, "MODE": 1}) == ({"MODE": 1}, {3: 16, 4: 1})


@pytest.mark.parametrize("condition", ["#if TILE > 2", "#ifdef FLAG", "#elif TILE"])
def test_a_preprocessor_test_of_a_constant_is_refused(tmp_path, condition):
    path = tmp_path / "k.comp"
    lines = condition if not condition.startswith("#elif") else "#if 0\n" + condition
    path.write_text(TEMPLATE % f"{lines}\n#endif")
    with pytest.raises(ShaderCompileError, match="preprocessor cannot see"):
        compiler.spec_constants_of(path)


def test_constant_ids_below_3_are_refused(tmp_path):
    path = tmp_path / "k.comp"
    path.write_text(TEMPLATE.replace("constant_id = 3", "constant_id = 1") % "")
    with pytest.raises(ShaderCompileError, match=">= 3"):
        compiler.spec_constants_of(path)


def test_tile_configs_of_one_variant_share_one_module():
    """Every tile config of a GEMM variant compiles to one SPIR-V module (their results are checked
    in tests/test_matmul.py::test_explicit_candidates, one pipeline each)."""
    configs = [dict(BM=16, BN=16, BK=8, TM=2, TN=2, VEC=1, UNROLL=2, PAD=0),
               dict(BM=64, BN=32, BK=16, TM=4, TN=4, VEC=4, UNROLL=4, PAD=1)]
    split = [compiler.split_defines("matmul.comp", matmul.defines(c, a_kmajor=k)) for c in configs for k in (0, 1)]
    assert {tuple(sorted(d.items())) for d, _ in split} == {(("DTYPE", 0), ("MODE", 0))}
    assert len({tuple(sorted(s.items())) for _, s in split}) == 4  # each config its own constants
