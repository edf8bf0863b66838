"""No module alias of one or two letters (issue #26): `_R` was resample in one file and reduce in
another. The ecosystem's own conventions, which mean one module everywhere, stay allowed."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("torchvk", "tvk_kernels", "tests", "benchmarks")
CONVENTIONS = {("numpy", "np"), ("torch.nn.functional", "F"), ("torch.nn", "nn"), ("torch.fx", "fx"),
               ("hypothesis.strategies", "st")}


def short_aliases(path: Path) -> list:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            base = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            for name in node.names:
                full = f"{base}.{name.name}" if base else name.name
                if name.asname and len(name.asname.lstrip("_")) <= 2 and (full, name.asname) not in CONVENTIONS:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {full} as {name.asname}")
    return out


def test_no_module_alias_of_one_or_two_letters():
    found = [a for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py")) for a in short_aliases(p)]
    assert not found, "name the module (or `<module>_kernels`) instead:\n  " + "\n  ".join(found)


def test_the_check_sees_an_alias(tmp_path):
    module = ROOT / "tests" / "_alias_probe.py"
    try:
        module.write_text("from tvk_kernels.kernels import reduce as _R\nimport numpy as np\n")
        assert short_aliases(module) == ["tests/_alias_probe.py:1: tvk_kernels.kernels.reduce as _R"]
    finally:
        module.unlink()
