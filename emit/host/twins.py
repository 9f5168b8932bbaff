"""A transpiled module's classes stand in for the original's (the runtime's `twins`).

1. Auto classes build the output tree's classes. `from transformers.models.auto import AutoModel`
   at a module's top level (the spelling the output has after its imports were made absolute, or
   any module path through an `auto` package, as `...auto.modeling_auto`, or the package's top level)
   is followed by

       AutoModel = _transpile_auto_class(AutoModel, __name__, "transformers.models.gemma3.modeling_gemma3", 0)

   so that `AutoModel.from_config(config.text_config)` inside this module builds the transpiled
   `Gemma3TextModel`, not the original (which runs none of the kernels). Top-level imports only
   (`if TYPE_CHECKING:` ones never run).
2. Classes answer questions about their module's name as the original's do. A module that defines
   classes ends with

       _transpile_as_original(globals(), "transformers.models.clipseg.modeling_clipseg")

   transformers takes a model class whose module is not its own for custom code and initialises it
   differently (`PreTrainedModel.is_custom_code`: a module with no parameter of its own, an attention
   block, is taken as initialised and its `_init_weights` skipped), so the transpiled model would start
   from other weights than the original with the same seed.

Only modules with kernels are rewritten: they import the runtime already.
"""

from __future__ import annotations

import ast

from emit.host.module import runtime_import

AUTO = "_transpile_auto_class"
ORIGIN = "_transpile_as_original"


def twins(text: str, module: str, depth: int) -> str:
    """`text` (an emitted module transpiled from the module named `module`, `depth` directories below the
    output root) with its Auto classes rebound to ones that build the tree's twins and its classes answering
    as the original's; `text` when it has neither Auto classes nor classes."""
    tree = ast.parse(text)
    if any(isinstance(n, ast.Name) and n.id in (AUTO, ORIGIN) for n in ast.walk(tree)):
        return text  # the user's names, or rewritten already
    sites = _auto_sites(tree, module.split(".")[0])
    classes = any(isinstance(node, ast.ClassDef) for node in tree.body)
    if not sites and not classes:
        return text
    lines = text.splitlines(keepends=True)
    header = ["# transpile: the twins of the original's classes (Auto classes, module names)\n"]
    if classes:  # last: every class of the module is defined by then
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        imported = [] if sites else header + runtime_import(depth, "twins", f"as_original as {ORIGIN}")
        lines += ["\n", "\n", *imported, f'{ORIGIN}(globals(), "{module}")\n']
    for _, end, names in reversed(sites):  # bottom up: line numbers stay valid
        lines[end:end] = [f'{n} = {AUTO}({n}, __name__, "{module}", {depth})\n' for n in names]
    if sites:
        first = sites[0][0] - 1
        imported = f"auto_class as {AUTO}" + f", as_original as {ORIGIN}" * classes
        lines[first:first] = header + runtime_import(depth, "twins", imported)
    return "".join(lines)


def _auto_sites(tree: ast.Module, top: str) -> list[tuple[int, int, list[str]]]:
    """(first line, last line, Auto class names) of each top-level import of Auto classes."""
    sites = []
    for node in tree.body:  # top-level imports only: those under `if TYPE_CHECKING:` never run
        if not isinstance(node, ast.ImportFrom) or node.level:
            continue
        parts = (node.module or "").split(".")
        if "auto" not in parts and node.module != top:  # `...models.auto`, `...models.auto.modeling_auto`
            continue
        names = [a.asname or a.name for a in node.names if a.name.startswith("Auto") and a.name != "AutoConfig"]
        if names:
            sites.append((node.lineno, node.end_lineno, names))
    return sites
