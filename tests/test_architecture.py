"""The import contract (docs/architecture.md): imports point one way.

Every import of every module of transpiler/, rewrites/ and emit/ is read with `ast`, without importing
anything: those at module level, those inside functions (the lazy ones the CLI uses to start fast) and
those under `if TYPE_CHECKING:`, which run only in a type checker but are dependencies all the same.

- transpiler/ is in layers, source < analysis < {lint, compiler} < pipeline < cli: a layer imports only
  itself and lower ones; lint and compiler never import each other; the CLI reaches the compiler only
  through the pipeline (one pass list for `build` and `explain`).
- rewrites/ imports only the rule API (transpiler/lint/rule.py) and transpiler/analysis.
- emit/ imports only transpiler/compiler's ir, ops, lowering and dtypes; inside it, layout.py < {cpp/,
  triton/} < host/, and the two backends never import each other.
- emit/runtime/ is copied into every output as `_transpile_runtime`: it imports only the standard
  library, torch, triton and itself.
- Only transpiler/pipeline and transpiler/cli import rewrites/ and emit/; no product code imports the
  tests, the fixtures or the benchmarks.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("transpiler", "rewrites", "emit")

# Known violations, each being removed by the work named beside it. An entry is (importer, imported
# prefix). Empty this list as they go: test_the_allow_list_holds_only_edges_that_exist says when.
ALLOWED: tuple[tuple[str, str], ...] = ()

# Inside transpiler/: the rank of each layer (a layer imports its own rank or lower).
LAYERS = {"source": 0, "analysis": 1, "lint": 2, "compiler": 2, "pipeline": 3, "cli": 4}
# Inside emit/ (the runtime stands apart): the host-code writer calls both backends, which share the layout.
EMIT_LAYERS = {"emit": 0, "emit.layout": 0, "emit.cpp": 1, "emit.triton": 1, "emit.host": 2}
EMIT_USES = {"transpiler.compiler.ir", "transpiler.compiler.ops", "transpiler.compiler.lowering"}
EMIT_USES |= {"transpiler.compiler.dtypes"}
RULE_API = "transpiler.lint.rule"
RUNTIME_NAMES = ("emit.runtime", "_transpile_runtime")  # its name in the tree and in an output
RUNTIME_LIBRARIES = {"torch", "triton"}
NOT_PRODUCT = ("tests", "fixtures", "benchmarks")


@dataclass(frozen=True)
class Import:
    """One import statement's edge: `importer` (a module) imports `target` (a module, resolved)."""

    path: str  # relative to the repository root
    line: int
    importer: str
    target: str
    type_checking: bool = False  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.target}" + (
            " (under TYPE_CHECKING)" if self.type_checking else ""
        )


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the product packages, by dotted name."""
    return {module_name(p, root): p for package in PACKAGES for p in sorted((root / package).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, known: set[str], root: Path = ROOT) -> list[Import]:
    """The imports anywhere in `path` (module level, in functions, under TYPE_CHECKING), resolved to modules.

    `from a import b` is an import of `a.b` when that is a module of the tree, else of `a`; relative
    imports are resolved against the importing module's package.
    """
    importer = module_name(path, root)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    rel = path.relative_to(root).as_posix()
    found: list[Import] = []

    def visit(node: ast.AST, checking: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, checking)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(rel, node.lineno, importer, alias.name, checking) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            for alias in node.names:
                candidate = f"{base_name}.{alias.name}"
                target = candidate if candidate in known else base_name
                found.append(Import(rel, node.lineno, importer, target, checking))
        for child in ast.iter_child_nodes(node):
            visit(child, checking)

    visit(ast.parse(path.read_bytes(), filename=rel), False)
    return list(dict.fromkeys(found))  # `from a import b, c` is one edge when neither is a module


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def component(name: str) -> str | None:
    """The part of the architecture a module belongs to, or None for code outside the project."""
    top = name.split(".")[0]
    if any(_under(name, r) for r in RUNTIME_NAMES):
        return "emit.runtime"
    if top == "transpiler":
        second = name.split(".")[1] if "." in name else ""
        if second in LAYERS:
            return f"transpiler.{second}"
        return "transpiler.cli" if second == "__main__" else "transpiler"  # the entry point; the bare package
    if top == "emit":
        return next((c for c in sorted(EMIT_LAYERS, key=len, reverse=True) if _under(name, c)), "emit")
    if top in ("rewrites", *NOT_PRODUCT):
        return top
    return None


def violation(edge: Import) -> str | None:
    """Why `edge` breaks the contract, or None when it keeps it."""
    source, target = component(edge.importer), component(edge.target)
    if source is None or source == target:
        return None
    if target in NOT_PRODUCT:
        return "product code never imports the tests, the fixtures or the benchmarks"
    if source == "emit.runtime":
        top = edge.target.split(".")[0]
        if target is None and (top in sys.stdlib_module_names or top in RUNTIME_LIBRARIES):
            return None
        return "the runtime imports only the standard library, torch, triton and itself"
    if target is None or target == "transpiler":
        return None  # libraries, and the bare package (a docstring)
    if source == "rewrites":
        if target == "transpiler.analysis" or _under(edge.target, RULE_API):
            return None
        return "rewrites/ imports only the rule API (transpiler.lint.rule) and transpiler.analysis"
    if source.startswith("emit"):
        if target.startswith("emit"):
            if target == "emit.runtime" or EMIT_LAYERS[target] < EMIT_LAYERS[source]:
                return None
            return "inside emit/, layout < {cpp, triton} < host, and the two backends never import each other"
        if any(_under(edge.target, allowed) for allowed in EMIT_USES):
            return None
        return "emit/ imports only transpiler.compiler's ir, ops, lowering and dtypes"
    if source.startswith("transpiler."):
        layer = source.split(".")[1]
        if target in ("rewrites", "emit", "emit.runtime") or target.startswith("emit."):
            return (
                None
                if layer in ("pipeline", "cli")
                else "only transpiler.pipeline and transpiler.cli import rewrites/ and emit/"
            )
        other = target.split(".")[1]
        if {layer, other} == {"lint", "compiler"}:
            return "lint and compiler never import each other"
        if layer == "cli" and other == "compiler":
            return "the CLI reaches the compiler through transpiler.pipeline"
        if LAYERS[other] > LAYERS[layer]:
            return f"transpiler.{layer} imports the higher layer transpiler.{other}" + (
                " (a TYPE_CHECKING back edge)" if edge.type_checking else ""
            )
        return None
    return None  # the bare package `transpiler` imports nothing of note


def allowed(edge: Import, allow: tuple[tuple[str, str], ...] = ALLOWED) -> bool:
    return any(edge.importer == importer and _under(edge.target, target) for importer, target in allow)


def violations(edges: list[Import], allow: tuple[tuple[str, str], ...] = ALLOWED) -> list[str]:
    """One line per edge that breaks the contract and is not allowed: `file:line: edge: why`."""
    return [f"{edge}: {why}" for edge in edges if (why := violation(edge)) and not allowed(edge, allow)]


@pytest.fixture(scope="module")
def edges() -> list[Import]:
    known = modules()
    return [edge for path in known.values() for edge in imports_of(path, set(known))]


def test_imports_point_one_way(edges):
    found = violations(edges)
    assert not found, "import contract broken (tests/test_architecture.py says the rules):\n" + "\n".join(found)


def test_the_allow_list_holds_only_edges_that_exist(edges):
    """An allowed violation that is gone must leave the list, so that it cannot come back unseen."""
    stale = [entry for entry in ALLOWED if not any(violation(e) and allowed(e, (entry,)) for e in edges)]
    assert not stale, f"no longer needed, remove from ALLOWED: {stale}"


def test_the_reader_finds_every_kind_of_import(tmp_path):
    (tmp_path / "transpiler" / "analysis").mkdir(parents=True)
    (tmp_path / "transpiler" / "lint").mkdir()
    for package in ("transpiler", "transpiler/analysis", "transpiler/lint"):
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "transpiler" / "lint" / "engine.py").write_text("")
    source = tmp_path / "transpiler" / "analysis" / "walker.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import os.path\n"
        "from ..lint import engine\n"
        "if TYPE_CHECKING:\n"
        "    from transpiler.lint.engine import Engine\n"
        "else:\n"
        "    import json\n"
        "def late():\n"
        "    from . import kinds\n"
    )
    known = set(modules(tmp_path))
    found = {(e.line, e.target, e.type_checking) for e in imports_of(source, known, tmp_path)}
    assert found == {
        (1, "typing", False),
        (2, "os.path", False),
        (3, "transpiler.lint.engine", False),
        (5, "transpiler.lint.engine", True),
        (7, "json", False),
        (9, "transpiler.analysis", False),
    }


def _edge(importer: str, target: str, type_checking: bool = False) -> Import:
    return Import(importer.replace(".", "/") + ".py", 7, importer, target, type_checking)


@pytest.mark.parametrize(
    "importer, target",
    [
        ("transpiler.analysis.typer", "transpiler.lint.engine"),  # upward
        ("transpiler.source.reading", "transpiler.pipeline.build"),
        ("transpiler.lint.engine", "transpiler.compiler.regions"),  # siblings
        ("transpiler.compiler.regions", "transpiler.lint.rule"),
        ("transpiler.cli.main", "transpiler.compiler.regions"),  # the CLI goes through the pipeline
        ("transpiler.compiler.regions", "emit.host.module"),  # only the pipeline and CLI import emit/
        ("transpiler.lint.engine", "rewrites.base"),
        ("rewrites.base", "transpiler.lint.engine"),  # rewrites: the rule API and analysis only
        ("rewrites.base", "emit.layout"),
        ("emit.host.module", "transpiler.compiler.regions"),  # emit: ir, ops, lowering, dtypes only
        ("emit.cpp.kernels", "transpiler.analysis.kinds"),
        ("emit.triton.kernels", "emit.cpp.kernels"),  # the backends are independent
        ("emit.cpp.kernels", "emit.host.module"),
        ("emit.runtime.linear", "numpy"),  # the runtime: stdlib, torch, triton
        ("emit.runtime", "transpiler.compiler.ops"),
        ("transpiler.pipeline.build", "tests.transpiled"),
    ],
)
def test_a_planted_violation_is_reported(importer, target):
    edge = _edge(importer, target)
    (line,) = violations([edge], allow=())
    assert line.startswith(f"{edge.path}:7: {importer} imports {target}: ")


def test_a_type_checking_back_edge_is_reported():
    (line,) = violations([_edge("transpiler.pipeline.report", "transpiler.cli.main", True)], allow=())
    assert "TYPE_CHECKING" in line


@pytest.mark.parametrize(
    "importer, target",
    [
        ("transpiler.lint.engine", "transpiler.analysis.project"),
        ("transpiler.pipeline.build", "transpiler.compiler.regions"),
        ("transpiler.pipeline.build", "emit.host.module"),
        ("transpiler.cli.main", "rewrites"),
        ("rewrites.base", "transpiler.lint.rule"),
        ("rewrites.control_flow", "rewrites.branches"),
        ("emit.host.module", "emit.triton.kernels"),
        ("emit.host.module", "transpiler.compiler.lowering"),
        ("emit.runtime.linear", "emit.runtime.activations"),
        ("emit.runtime", "_transpile_runtime.cpp_support"),
        ("emit.runtime.triton_support", "triton.language"),
        ("emit.runtime.cpp_support", "ctypes"),
        ("transpiler.analysis.walker", "libcst"),
    ],
)
def test_edges_the_contract_allows_pass(importer, target):
    assert violations([_edge(importer, target)], allow=()) == []


def test_the_allow_list_silences_only_its_own_edges():
    allow = (("emit.triton.kernels", "emit.cpp.kernels"),)
    assert violations([_edge("emit.triton.kernels", "emit.cpp.kernels.Kind")], allow) == []
    assert violations([_edge("emit.triton.kernels", "emit.host.module")], allow)
