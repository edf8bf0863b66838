"""Both packages' import graphs stay layered (issue #13: the import knot must not come back; issue
#26: the tuner's targets apart from the kernels).

Parses torchvk/ and tvk_kernels/ with `ast` (nothing is imported) and builds the graph of each
package's imports of its own modules, module-level and function-level alike. Rules:
  - no import cycle: the largest strongly connected component (modules that import each other,
    directly or in a ring) is one module;
  - an import inside a function is a lazy import of a heavy or optional dependency and says so
    with a `# lazy: <reason>` comment on its line, or on the line above it or above the block of
    imports (one statement a line, no blank line between) it opens;
  - tvk_kernels' kernels never import its tuner (tvk_kernels/tune/targets/ holds the targets).
(Module aliases: tests/test_module_aliases.py.)

Run as a script (`python tests/test_import_graph.py`) to print the components and the
function-level imports.
"""
from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "torchvk"
PACKAGES = (PACKAGE, ROOT / "tvk_kernels")
MAX_CYCLE = 1
LAZY = "# lazy:"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict:
    """{module name: path} for every .py file of the package."""
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def _resolve(node, current: str, is_package: bool, known) -> list:
    """The package modules one import statement names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    base = current if is_package else current.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    target = node.module or ""
    if node.level:
        target = f"{base}.{target}" if target else base
    found = []
    for a in node.names:  # `from pkg import sub` imports the submodule pkg.sub
        sub = f"{target}.{a.name}"
        found.append(sub if sub in known else target)
    return [m for m in found if m in known]


def imports(name: str, path: Path, known) -> list:
    """[(target module, line, inside a function)] for each import of a package module."""
    tree = ast.parse(path.read_text(), str(path))
    out = []

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _resolve(child, name, path.name == "__init__.py", known):
                    out.append((target, child.lineno, in_function))
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(tree, False)
    return out


def function_imports(path: Path) -> list:
    """[(line, source line, has the lazy comment)] for every import statement inside a function.
    An import right below another (no blank line) shares the lazy comment of the block's first."""
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines), str(path))
    out = []

    def commented(node) -> bool:
        here = lines[node.lineno - 1]
        above = lines[node.lineno - 2] if node.lineno >= 2 else ""
        return LAZY in here or above.strip().startswith(LAZY)

    def walk(node, in_function):
        block_lazy, block_end = False, -1  # the block of imports the previous statement ended
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                lazy = commented(child) or (block_lazy and child.lineno == block_end + 1)
                out.append((child.lineno, lines[child.lineno - 1].strip(), lazy))
                block_lazy, block_end = lazy, child.end_lineno
            else:
                block_lazy = False
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(tree, False)
    return out


@functools.lru_cache(maxsize=None)
def graph(package: Path = PACKAGE) -> dict:
    """{module: set of package modules it imports}."""
    mods = modules(package)
    return {name: {t for t, _, _ in imports(name, path, mods) if t != name} for name, path in mods.items()}


def components(g: dict) -> list:
    """Strongly connected components (Tarjan, iterative), largest first."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return sorted(comps, key=len, reverse=True)


def test_components_finds_a_ring_and_ignores_a_chain():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert components(g)[0] == ["a", "b", "c"]
    assert max(len(c) for c in components({"a": {"b"}, "b": set()})) == 1


def test_function_level_imports_are_counted(tmp_path):
    pkg = tmp_path / "torchvk"
    (pkg / "aten").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "aten" / "__init__.py").write_text("")
    (pkg / "_dispatch.py").write_text("from .aten import copies\n")
    (pkg / "aten" / "copies.py").write_text("def f():\n    from .. import _dispatch\n")
    assert components(graph(pkg))[0] == ["torchvk._dispatch", "torchvk.aten.copies"]
    assert function_imports(pkg / "aten" / "copies.py") == [(2, "from .. import _dispatch", False)]


def test_a_lazy_comment_covers_the_block_of_imports_below_it(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    # lazy: optional\n    import a\n    import b\n\n    import c\n    x = 1\n    import d\n")
    assert [lazy for _, _, lazy in function_imports(src)] == [True, True, False, False]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_no_import_cycle(package):
    largest = components(graph(package))[0]
    assert len(largest) <= MAX_CYCLE, (
        f"{package.name} modules {largest} import each other (module- or function-level): a ring of {len(largest)} "
        "modules. Move what they share into a lower module (torchvk/_glue.py; tvk_kernels/kernels/matmul_plan.py "
        "and conv_geometry.py are two), or let only one of them import the other.")


def test_the_glue_module_imports_nothing_from_torchvk():
    assert graph()["torchvk._glue"] == set(), "torchvk/_glue.py is the bottom layer: it must import no torchvk module"


def test_the_op_registry_imports_nothing_from_torchvk():
    assert graph()["torchvk.op_registry"] == set(), \
        "torchvk/op_registry.py is under every op module: it must import no torchvk module"


def test_kernels_import_nothing_from_the_tuner():
    tuner = {(name, t) for name, targets in graph(ROOT / "tvk_kernels").items() if name.startswith("tvk_kernels.kernels")
             for t in targets if t.startswith("tvk_kernels.tune")}
    assert not tuner, (f"kernel modules import the tuner: {sorted(tuner)}; a tuner target lives in "
                       "tvk_kernels/tune/targets/<family>.py and imports its kernel module, never the reverse")


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_every_function_level_import_says_why_it_is_lazy(package):
    bare = [f"{p.relative_to(ROOT)}:{line}: {src}" for p in sorted(package.rglob("*.py"))
            for line, src, lazy in function_imports(p) if not lazy]
    assert not bare, ("imports inside functions without a `# lazy: <reason>` comment (import at module level, "
                      "or say why the import must wait):\n  " + "\n  ".join(bare))


if __name__ == "__main__":
    for package in PACKAGES:
        comps = [c for c in components(graph(package)) if len(c) > 1]
        for c in comps:
            print(f"cycle of {len(c)}: {' '.join(c)}")
        total = lazy = 0
        for p in sorted(package.rglob("*.py")):
            for line, src, ok in function_imports(p):
                total += 1
                lazy += ok
                if "-v" in sys.argv:
                    print(f"{'lazy ' if ok else 'BARE '}{p.relative_to(ROOT)}:{line}: {src}")
        print(f"{package.name}: largest cycle: {len(comps[0]) if comps else 1} modules; "
              f"function-level imports: {total} ({lazy} lazy)")
