"""tune/carry_over.py: tuned configs survive a template edit only if their kernels are unchanged."""
import json
import subprocess
from pathlib import Path

import pytest

from tvk_kernels.runtime import compiler
from tvk_kernels.tune import carry_over

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
    configs = tmp_path / "configs"
    configs.mkdir()
    data = json.loads(LLVMPIPE.read_text())
    data["families"] = {"conv2d": {**data["families"]["conv2d"], "template_checksum": compiler._template_hash(old)[:16]}}
    (configs / LLVMPIPE.name).write_text(json.dumps(data))
    return text, configs


def _edit(monkeypatch, tmp_path, text):
    """Make carry_over see `text` as the current conv2d.comp."""
    new = tmp_path / "new" / "conv2d.comp"
    new.parent.mkdir()
    new.write_text(text)
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
    assert "C.v[base + col * ohw] = v;" in text
    _edit(monkeypatch, tmp_path, text.replace("C.v[base + col * ohw] = v;", "C.v[base + col * ohw] = v * 2.0;"))
    before = (configs / LLVMPIPE.name).read_text()
    assert carry_over.main(["conv2d.comp", "--since", "HEAD", "--configs", str(configs)]) == 1
    assert "the SPIR-V differs" in capsys.readouterr().out
    assert (configs / LLVMPIPE.name).read_text() == before
