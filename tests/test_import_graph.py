"""The torch layer's import graph stays layered (issue #13: the import knot must not come back).

Parses torchvk/ with `ast` (nothing is imported) and builds the graph of its modules'
imports of each other, module-level and function-level alike. Two rules:
  - the largest strongly connected component (modules that import each other, directly or in a
    ring) has at most MAX_CYCLE modules;
  - an import inside a function is a lazy import of a heavy or optional dependency and says so
    with a `# lazy: <reason>` comment on its line or the line above.

Run as a script (`python tests/test_import_graph.py`) to print the components and the
function-level imports.
"""
from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "torchvk"
MAX_CYCLE = 3
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
    """[(line, source line, has the lazy comment)] for every import statement inside a function."""
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines), str(path))
    out = []

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                here = lines[child.lineno - 1]
                above = lines[child.lineno - 2] if child.lineno >= 2 else ""
                lazy = LAZY in here or above.strip().startswith(LAZY)
                out.append((child.lineno, here.strip(), lazy))
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


def test_no_import_cycle_longer_than_three_modules():
    largest = components(graph())[0]
    assert len(largest) <= MAX_CYCLE, (
        f"torchvk modules {largest} import each other (module- or function-level): a ring of {len(largest)} "
        f"modules, more than {MAX_CYCLE}. Move what they share into a lower module (torchvk/_glue.py) instead.")


def test_the_glue_module_imports_nothing_from_torchvk():
    assert graph()["torchvk._glue"] == set(), "torchvk/_glue.py is the bottom layer: it must import no torchvk module"


def test_the_op_registry_imports_nothing_from_torchvk():
    assert graph()["torchvk.op_registry"] == set(), \
        "torchvk/op_registry.py is under every op module: it must import no torchvk module"


def test_every_function_level_import_says_why_it_is_lazy():
    bare = [f"{p.relative_to(PACKAGE.parent)}:{line}: {src}" for p in sorted(PACKAGE.rglob("*.py"))
            for line, src, lazy in function_imports(p) if not lazy]
    assert not bare, ("imports inside functions without a `# lazy: <reason>` comment (import at module level, "
                      "or say why the import must wait):\n  " + "\n  ".join(bare))


if __name__ == "__main__":
    comps = [c for c in components(graph()) if len(c) > 1]
    for c in comps:
        print(f"cycle of {len(c)}: {' '.join(c)}")
    total = lazy = 0
    for p in sorted(PACKAGE.rglob("*.py")):
        for line, src, ok in function_imports(p):
            total += 1
            lazy += ok
            if "-v" in sys.argv:
                print(f"{'lazy ' if ok else 'BARE '}{p.relative_to(PACKAGE.parent)}:{line}: {src}")
    print(f"largest cycle: {len(comps[0]) if comps else 1} modules; function-level imports: {total} ({lazy} lazy)")
