"""Auto classes in a transpiled module build the output tree's classes (the runtime's `twins.auto_class`).

`from transformers.models.auto import AutoModel` at a module's top level (the spelling the
output has after its imports were made absolute, or any module path ending in `auto`, or the
package's top level) is followed by

    AutoModel = _transpile_auto_class(AutoModel, __name__, "transformers.models.gemma3.modeling_gemma3", 0)

so that `AutoModel.from_config(config.text_config)` inside this module builds the transpiled
`Gemma3TextModel`, not the original (which runs none of the kernels). Only modules with kernels
are rewritten: they import the runtime already. Top-level imports only (`if TYPE_CHECKING:` ones never run).
"""

from __future__ import annotations

import ast

from emit.module import runtime_import

NAME = "_transpile_auto_class"


def auto_twins(text: str, module: str, depth: int) -> str:
    """`text` (an emitted module transpiled from the module named `module`, `depth` directories below the
    output root) with its Auto classes rebound to ones that build the tree's twins; `text` when it has none."""
    tree = ast.parse(text)
    if any(isinstance(n, ast.Name) and n.id == NAME for n in ast.walk(tree)):
        return text  # the user's name, or rewritten already
    top = module.split(".")[0]
    sites = []  # (line after the import, names)
    for node in tree.body:  # top-level imports only: those under `if TYPE_CHECKING:` never run
        if not isinstance(node, ast.ImportFrom) or node.level:
            continue
        parts = (node.module or "").split(".")
        if parts[-1] != "auto" and node.module != top:
            continue
        names = [a.asname or a.name for a in node.names if a.name.startswith("Auto") and a.name != "AutoConfig"]
        if names:
            sites.append((node.lineno, node.end_lineno, names))
    if not sites:
        return text
    lines = text.splitlines(keepends=True)
    for _, end, names in reversed(sites):  # bottom up: line numbers stay valid
        lines[end:end] = [f"{n} = {NAME}({n}, __name__, {module!r}, {depth})\n" for n in names]
    first = sites[0][0] - 1
    header = ["# transpile: Auto classes build this output's classes where they would the original's\n"]
    lines[first:first] = header + runtime_import(depth, "twins", f"auto_class as {NAME}")
    return "".join(lines)
