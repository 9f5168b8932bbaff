"""The host code of unaligned linear layers: `self.lm_head(x)` becomes `_transpile_linear(self.lm_head, x)` at
the call sites transpiler/compiler/linears.py finds, and the module imports the runtime's `linear`."""

from __future__ import annotations

import ast

from emit.host.module import after_imports, blank_unless_blank, runtime_import
from transpiler.compiler.ir import LINEAR, LinearSite


def route_linears(text: str, sites: list[LinearSite], depth: int) -> str:
    """`text`, an emitted module, with the unaligned `nn.Linear` calls at `sites` (transpiler/compiler/linears.py)
    going through the runtime's `linear`.

    `depth`: directories between the output root and the module (for the relative import of
    the runtime). Returns `text` itself when there is nothing to rewrite.
    """
    if not sites:
        return text
    lines = [line.encode() for line in text.splitlines(keepends=True)]
    for site in sorted(sites, key=lambda s: (s.line, s.col), reverse=True):  # bottom up: offsets stay valid
        _rewrite(lines, site)
    rewritten = b"".join(lines).decode()
    insert_at = after_imports(ast.parse(rewritten))
    imports = [
        "# nn.Linear layers whose output rows may not be 16-byte aligned: padded on CUDA (docs/compiler.md)\n",
        *runtime_import(depth, "linear", f"linear as {LINEAR}"),
    ]
    out = rewritten.splitlines(keepends=True)
    out[insert_at:insert_at] = ["\n", *imports, *blank_unless_blank(out, insert_at)]
    return "".join(out)


def _rewrite(lines: list[bytes], site: LinearSite) -> None:
    """`self.<attr>(x)` -> `LINEAR(self.<attr>, x)`: the callee and the `(` right after it (black's
    layout; anything else is left alone) become `LINEAR(self.<attr>, `."""
    line = lines[site.line - 1]
    if line[site.end_col : site.end_col + 1] == b"(":
        lines[site.line - 1] = (
            line[: site.col] + f"{LINEAR}(".encode() + line[site.col : site.end_col] + b", " + line[site.end_col + 1 :]
        )
