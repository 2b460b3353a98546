"""The import graph of python/kir, read with `ast` (no module is imported): no cycle
between kir modules, and no private name (`_x`) of one kir module used by another.

What counts as an import: every `import` / `from ... import` statement at any depth
(module level and inside functions alike: a function-level import is still a
dependency, only a later one), except those under `if TYPE_CHECKING:`, which never
run. Importing `kir.a.b` also runs `kir/a/__init__.py`: an edge to each enclosing
package too, except the importer's own packages (they are being imported already:
the package that re-exports its submodules is not a cycle). An explicit import of
an enclosing package's name (`from kir.replay import Tolerance` inside
kir/replay/) counts.

Private: a name with one leading underscore, imported from another kir module
(`from kir.ir import _helper`), read as an attribute of an imported kir module
(`codegen._helper`), or named in a kir._irworker request ("kir.jit:_compile"),
or a private module — all but kir._core, the binding, which is private to the
package and shared by every module in it, and kir._irworker, the LLVM worker,
shared by the library's modules (the CLI, kir.cli and kir.commands, uses the
library's public API). A module's own privates (and a package's own private
submodules used by its `__init__`) are its own."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "kir"
#: private modules every kir module may import: the binding.
SHARED_PRIVATE = {"kir._core"}
#: private modules of the library, which its modules share and the CLI (kir.cli,
#: kir.commands) does not use: the LLVM worker.
LIBRARY_PRIVATE = {"kir._irworker"}


def is_cli(name: str) -> bool:
    return name in ("kir.cli", "kir.__main__") or name.startswith("kir.commands")


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """Every kir module by name; the binding (an extension module) by its stub."""
    out = {}
    for path in sorted(package.rglob("*.py")) + sorted(package.rglob("*.pyi")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out.setdefault(".".join(parts[:-1] if parts[-1] == "__init__" else parts), path)
    return out


def is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def _absolute(node: ast.ImportFrom, importer: str, package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if package else importer.split(".")[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


class Imports:
    """One module's imports of kir modules: `edges` (module -> where, line) and the
    private names it takes from other kir modules."""

    def __init__(self, name: str, modules: dict[str, Path]):
        self.name, self.modules = name, modules
        self.edges: dict[str, int] = {}
        self.private: list[tuple[str, int]] = []
        path = modules[name]
        if path.suffix == ".pyi":
            return  # a stub never runs: it imports nothing
        tree = ast.parse(path.read_text(), str(path))
        skipped = _type_checking_nodes(tree)
        bound: dict[str, str] = {}  # local name -> the kir module it is bound to
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "kir":
                        self._add(alias.name, node.lineno)
                        if alias.asname:
                            bound[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(node, name, is_package(name, modules))
                if source.split(".")[0] != "kir":
                    continue
                for alias in node.names:
                    target = f"{source}.{alias.name}"
                    if target in modules:  # a submodule
                        self._add(target, node.lineno)
                        bound[alias.asname or alias.name] = target
                    else:
                        self._add(source, node.lineno, explicit=True)
                        if alias.name.startswith("_") and not alias.name.startswith("__") and source != name:
                            self.private.append((f"{source}.{alias.name}", node.lineno))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("call", "map_each") and node.args and \
                    isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) and \
                    ":" in node.args[0].value:  # a kir._irworker request names a function as text
                module, function = node.args[0].value.split(":", 1)
                if function.startswith("_") and module != name:
                    self.private.append((f"{module}.{function}", node.lineno))
        for node in ast.walk(tree):
            if id(node) not in skipped and isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in bound and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and bound[node.value.id] != name:
                self.private.append((f"{bound[node.value.id]}.{node.attr}", node.lineno))

    def _add(self, target: str, line: int, explicit: bool = False) -> None:
        if target not in self.modules:
            return
        own = set(ancestors(self.name))
        for module in ancestors(target) + [target]:
            if module == self.name or (module in own and not (explicit and module == target)):
                continue  # itself; or its own package, imported before it
            self.edges.setdefault(module, line)
        if target.split(".")[-1].startswith("_") and target not in SHARED_PRIVATE and \
                not (target in LIBRARY_PRIVATE and not is_cli(self.name)) and not self._owns(target):
            self.private.append((target, line))

    def _owns(self, private_module: str) -> bool:
        """A package's `__init__` may use its own private submodules."""
        return is_package(self.name, self.modules) and private_module.rsplit(".", 1)[0] == self.name


def import_graph(package: Path = PACKAGE) -> dict[str, Imports]:
    modules = module_files(package)
    return {name: Imports(name, modules) for name in modules}


def cycles(graph: dict[str, Imports]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v].edges:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def private_imports(graph: dict[str, Imports]) -> list[str]:
    return sorted(f"{name}:{line} uses {what}" for name, imports in graph.items()
                  for what, line in imports.private)


# --- the gates ---------------------------------------------------------------------------

def test_the_graph_is_read_whole():
    """The reader sees what is there: the package's modules (the binding by its stub)
    and the imports between them, function-level ones included (kir.replay.variant
    imports kir.jit at module level, kir.jit imports kir._core inside compile)."""
    g = import_graph()
    assert {"kir", "kir._core", "kir.jit", "kir.jit.transform", "kir.replay.planner", "kir.commands.replay"} <= set(g)
    assert "kir.errors" in g["kir.jit"].edges and "kir.jit" in g["kir.replay.variant"].edges
    assert "kir._core" in g["kir.jit"].edges  # `from kir import _core` inside compile()
    assert "kir.replay" not in g["kir.replay.planner"].edges  # its own package: imported before it
    assert "kir" not in g["kir.binary"].edges and "kir._core" in g["kir.binary"].edges


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_no_private_names_across_modules():
    assert private_imports(import_graph()) == []


def test_a_cycle_and_a_private_import_are_found(tmp_path):
    """The gates can fail: a package with a function-level cycle through an enclosing
    package, a private name imported, and a private attribute read."""
    root = tmp_path / "kir"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("def f():\n    from kir.sub.b import g, _hidden\n")
    (root / "sub" / "__init__.py").write_text("from kir.sub.b import g\n")
    (root / "sub" / "b.py").write_text("import kir.a as a\n\ndef g():\n    return a._f\n")
    (root / "sub" / "c.py").write_text("from kir.sub import g\n")
    g = import_graph(root)
    assert cycles(g) == [["kir.a", "kir.sub", "kir.sub.b"]]
    assert private_imports(g) == ["kir.a:2 uses kir.sub.b._hidden", "kir.sub.b:4 uses kir.a._f"]
    assert "kir.sub" in g["kir.sub.c"].edges  # an enclosing package's name, asked for by name


def namespace_crossings(package: Path = PACKAGE) -> list[str]:
    """Calls in kir.commands that hand a verb's argparse namespace (`args`) to a
    function of another command module. Only an options class (`...Options`) may
    take it there (`ClusterOptions.from_args(args)`): it reads the namespace into
    typed values, and those cross instead."""
    modules = module_files(package)
    found = []
    for name, path in modules.items():
        if not name.startswith("kir.commands.") or path.suffix == ".pyi":
            continue
        tree = ast.parse(path.read_text(), str(path))
        foreign = {}  # local name -> the command module it comes from
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kir.commands.") \
                    and node.module != name:
                foreign.update((alias.asname or alias.name, node.module) for alias in node.names)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not any(isinstance(a, ast.Name) and a.id == "args"
                                                         for a in node.args + [k.value for k in node.keywords]):
                continue
            callee = node.func.value if isinstance(node.func, ast.Attribute) else node.func
            if isinstance(callee, ast.Name) and callee.id in foreign and not callee.id.endswith("Options"):
                found.append(f"{name}:{node.lineno} hands args to {foreign[callee.id]}.{ast.unparse(node.func)}")
    return sorted(found)


def test_the_namespace_stays_at_the_cli_edge():
    assert namespace_crossings() == []


if __name__ == "__main__":  # python tests/core/test_import_graph.py: the graph's report
    g = import_graph()
    print(f"{len(g)} modules, {sum(len(i.edges) for i in g.values())} edges")
    for c in cycles(g):
        print("cycle:", " <-> ".join(c))
    for p in private_imports(g):
        print("private:", p)
    for n in namespace_crossings():
        print("namespace:", n)
