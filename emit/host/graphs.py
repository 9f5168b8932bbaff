"""The host code of forwards replayed as CUDA graphs: `@_transpile_graphed(reads=(...))` above each forward
transpiler/compiler/graphing.py proved safe, and the import of the runtime's `graphed`."""

from __future__ import annotations

import ast

from emit.host.module import (
    GENERATED_HEADER,
    LINE_LENGTH,
    VERSION,
    after_imports,
    blank_unless_blank,
    is_generated,
    prepend_header,
    runtime_import,
)
from transpiler.compiler.ir import GRAPHED, GraphSite

_COMMENT = (
    "# transpile: each call signature is recorded once and replayed: on CUDA as a CUDA graph (in training,\n",
    "# its forward and its backward), on the CPU without autograd as a tape; this forward runs otherwise\n",
    '# (docs/compiler.md, "CUDA graphs by default", "CUDA graphs in training" and "Tapes").\n',
)


def graph_forwards(text: str, sites: list[GraphSite], depth: int, source_path: str) -> str:
    """`text` (an emitted module, or the source of one without regions) with the forward of each class of
    `sites` decorated, and the runtime's `graphed` imported. `depth`: directories between the output root
    and the module. Returns `text` itself when there is no site."""
    if not sites:
        return text
    tree = ast.parse(text)
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    lines = text.splitlines(keepends=True)
    inserts = []
    for site in sites:
        forwards = [n for n in classes[site.cls].body if isinstance(n, ast.FunctionDef) and n.name == "forward"]
        forward = forwards[-1]
        first = min([forward.lineno, *(d.lineno for d in forward.decorator_list)])
        inserts.append((first, " " * forward.col_offset, site.reads))
    for first, indent, reads in sorted(inserts, reverse=True):  # bottom up: the lines above keep their numbers
        lines[first - 1 : first - 1] = [*(indent + line for line in _COMMENT), *_decorator(indent, reads)]
    insert_at = after_imports(ast.parse("".join(lines)))
    imports = [
        "# models and blocks whose forward replays as a CUDA graph by default (docs/compiler.md)\n",
        *runtime_import(depth, "graphs", f"graphed as {GRAPHED}"),
    ]
    lines[insert_at:insert_at] = ["\n", *imports, *blank_unless_blank(lines, insert_at)]
    out = "".join(lines)
    if not is_generated(out):
        out = prepend_header(
            out,
            [
                f"{GENERATED_HEADER}{VERSION} from {source_path}: its models' and blocks' forwards replay as\n",
                "# CUDA graphs (the original forward is the fallback). Edit the source, not this file.\n",
            ],
        )
    return out


def _decorator(indent: str, reads: tuple[str, ...]) -> list[str]:
    """`@GRAPHED(reads=(...))` on one line, or one read a line where that is too long (as black)."""
    if not reads:
        return [f"{indent}@{GRAPHED}()\n"]
    items = ", ".join(f'"{read}"' for read in reads) + ("," if len(reads) == 1 else "")
    line = f"{indent}@{GRAPHED}(reads=({items}))\n"
    if len(line) <= LINE_LENGTH + 1:
        return [line]
    return [
        f"{indent}@{GRAPHED}(\n",
        f"{indent}    reads=(\n",
        *(f'{indent}        "{read}",\n' for read in reads),
        f"{indent}    )\n",
        f"{indent})\n",
    ]
