"""The host code of linear layers at the call sites transpiler/compiler/linears.py finds: an unaligned layer's
`self.lm_head(x)` becomes `_transpile_linear(self.lm_head, x)` (the runtime's `linear`), and each of a sibling
group's `self.q_proj(x)` becomes `_transpile_siblings(group, i, x)` (the runtime's `siblings`)."""

from __future__ import annotations

import ast
import itertools

from emit.host.module import after_imports, blank_unless_blank, runtime_import
from emit.layout import LINE_LENGTH
from transpiler.compiler.ir import LINEAR, SIBLINGS, LinearSite, SiblingGroup


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
        line = lines[site.line - 1]
        callee = line[site.col : site.end_col].decode()
        lines[site.line - 1] = _rewrite(line, site, f"{LINEAR}({callee}, ") or line
    comment = "# nn.Linear layers whose output rows may not be 16-byte aligned: padded on CUDA (docs/compiler.md)\n"
    return _imported(b"".join(lines).decode(), [comment, *runtime_import(depth, "linear", f"linear as {LINEAR}")])


def route_siblings(text: str, groups: list[SiblingGroup], depth: int) -> str:
    """`text`, an emitted module, with each sibling group named before its first call's statement (a tuple of its
    layers) and its calls going through the runtime's `siblings`. A group whose rewritten lines would pass the
    line length, or one of whose calls is not laid out as black lays it out, is left as it is."""
    lines = [line.encode() for line in text.splitlines(keepends=True)]
    taken = {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}
    inserts = []
    for group in groups:
        name = next(f"_siblings_{n}" for n in itertools.count(1) if f"_siblings_{n}" not in taken)
        rewritten = {site.line: lines[site.line - 1] for site in group.calls}
        # Right to left within a line: the offsets of the calls before stay valid.
        for index, site in sorted(enumerate(group.calls), key=lambda p: (p[1].line, p[1].col), reverse=True):
            rewritten[site.line] = _rewrite(rewritten[site.line] or b"", site, f"{SIBLINGS}({name}, {index}, ")
        if any(line is None or len(line.decode().rstrip("\r\n")) > LINE_LENGTH for line in rewritten.values()):
            continue
        taken.add(name)
        for number, line in rewritten.items():
            lines[number - 1] = line
        indent = " " * group.indent
        layers = ", ".join(f"self.{attr}" for attr in group.attrs)
        inserts.append(
            (
                group.line,
                [
                    f"{indent}# transpile: under autocast with autograd on, these layers cast their input once and sum its\n",
                    f'{indent}# gradient in one matmul (docs/compiler.md, "Sibling projections"); otherwise each call runs its layer\n',
                    f"{indent}{name} = ({layers})\n",
                ],
            )
        )
    if not inserts:
        return text
    out = [line.decode() for line in lines]
    for number, block in sorted(inserts, key=lambda insert: insert[0], reverse=True):
        out[number - 1 : number - 1] = block
    comment = "# nn.Linear layers applied to one input: one cast, one gradient matmul in autocast training (docs/compiler.md)\n"
    return _imported("".join(out), [comment, *runtime_import(depth, "linear", f"siblings as {SIBLINGS}")])


def _imported(text: str, imports: list[str]) -> str:
    insert_at = after_imports(ast.parse(text))
    out = text.splitlines(keepends=True)
    out[insert_at:insert_at] = ["\n", *imports, *blank_unless_blank(out, insert_at)]
    return "".join(out)


def _rewrite(line: bytes, site: LinearSite, prefix: str) -> bytes | None:
    """`line` with the callee `self.<attr>` at `site` and the `(` right after it (black's layout) replaced by
    `prefix`; None where no `(` follows the callee."""
    if line[site.end_col : site.end_col + 1] != b"(":
        return None
    return line[: site.col] + prefix.encode() + line[site.end_col + 1 :]
