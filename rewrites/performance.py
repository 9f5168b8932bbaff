"""TP7xx: code that compiles as one graph but has a faster torch equivalent.

These rules make no claim about graph breaks: their examples compile as one graph
before and after. Their fixes replace a hand-written computation with the fused op
torch provides for it, and are unsafe (the fused op rounds differently).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from rewrites.attention import match
from transpiler.analysis.walker import Context
from transpiler.lint.rule import Fix
from transpiler.lint.rule import Rule

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.lint.rule import Edit


class HandWrittenAttention(Rule):
    """## What it does
    Checks for attention written out by hand, `softmax(q @ k.transpose(-2, -1) * scale + mask,
    dim=-1) @ v`, in one expression or over consecutive statements: the product with the keys
    transposed over their last two dimensions (`@`, `torch.matmul`, `.transpose(-1, -2)`, `.mT`),
    a scale that is a Python number (`* self.scale`, `/ math.sqrt(d)`, or `q * scale`), an
    optional mask (an additive float mask `+ mask`, or `masked_fill(cond, float("-inf"))`,
    either possibly under `if mask is not None:`), a softmax over `dim=-1` (`F.softmax`,
    `torch.softmax`, `.softmax`, also computed in float32 when cast back with
    `.to(q.dtype)`), an optional cast to the dtype of q, k or v and an optional dropout
    (an `nn.Dropout` submodule, `F.dropout(w, p, training=...)`), then the product with v.
    It is reported only where the rewrite applies: the attention weights and every
    intermediate value are used nowhere else, and every other operand is a plain read
    (names, attributes, indexing, shape arithmetic) that can be evaluated later.

    ## Why is this bad?
    Written out, attention materialises the `L x S` score matrix several times (the product,
    the scaled and masked copies, the softmax) and runs one kernel per step.
    `torch.nn.functional.scaled_dot_product_attention` computes the same thing in one fused
    kernel (flash or memory-efficient attention on GPUs, a blocked kernel on CPUs) without
    storing the scores. `torch.compile` finds some of these patterns itself; eager code and
    `transpile`'s output do not.

    ## Fix safety
    The fix replaces the final product with one `scaled_dot_product_attention(q, k, v,
    attn_mask=..., dropout_p=..., scale=...)` call and deletes the statements that computed
    the weights (comments above them are kept; trailing comments on them go). `scale` is
    always passed (`1.0` when the code did not scale); `masked_fill(cond, -inf)` becomes the
    boolean mask of the positions kept (`m == 0` -> `m != 0`, `~m` -> `m`, else `~cond`);
    an `nn.Dropout` becomes `dropout_p=self.drop.p if self.drop.training else 0.0`, and
    `F.dropout(w, p, training=t)` becomes `dropout_p=p if t else 0.0`.
    The fix is unsafe: the fused kernels round differently (the result agrees within
    float rounding); rows whose keys are all masked give zeros instead of NaN; in training
    the dropout draws different random numbers; and SDPA is stricter than the steps it
    replaces: q, k, v and a float mask must share one dtype, and a mask must broadcast to
    the scores' shape (the original may have promoted or broadcast the other way). An
    additive mask is assumed to be a floating tensor: a boolean tensor added as 0/1 would
    be read by SDPA as a keep-mask (masks the analysis knows to be boolean are refused).
    Left alone: attention weights returned or used elsewhere, a softmax over another
    dimension, a scale applied to v or after the mask, a scale that is a tensor,
    `masked_fill` with a finite value (fully masked rows would differ), keys transposed
    over other dimensions (`transpose(2, 3)` is the same only for 4-d keys), operands with
    calls that may have side effects, and statements that share a line.
    """

    code = "TP701"
    name = "hand-written-attention"
    summary = "attention written out by hand instead of `scaled_dot_product_attention`"
    message = "hand-written attention; use `torch.nn.functional.scaled_dot_product_attention` (one fused kernel)"
    family = "perf"
    fix_safety = "unsafe"

    def visit_BinOp(self, node: ast.BinOp, ctx: Context) -> None:
        if isinstance(node.op, ast.MatMult):
            self._check(node, ctx)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        func = node.func
        if ctx.qualname(func) == "torch.matmul" or isinstance(func, ast.Attribute) and func.attr == "matmul":
            self._check(node, ctx)

    def _check(self, node: ast.expr, ctx: Context) -> None:
        found = match(node, ctx)
        if found is None:
            return
        data = (found.path, found.first, found.final, ast.dump(found.matmul), _callee(ctx), found.arguments)
        plan = self.make_fix("use `scaled_dot_product_attention`", "FunctionDef", ctx.node, "unsafe", data)
        self.report(ctx, node, fix=plan["fix"])

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        path, first, final, matmul, callee, arguments = fix.data
        function = callee or cst.Module([]).code_for_node(edit.torch("nn.functional.scaled_dot_product_attention"))
        call = cst.parse_expression(f"{function}({arguments})")

        def collapse(statements: list) -> list:
            last = _replace(statements[final], matmul, call)
            # Blank lines above the first removed statement stay; comments above any of them too.
            removed = statements[first + 1 : final + 1]
            kept = [
                *statements[first].leading_lines,
                *(line for s in removed for line in s.leading_lines if line.comment),
            ]
            return [*statements[:first], last.with_changes(leading_lines=kept), *statements[final + 1 :]]

        return _edit_block(node, path, collapse)

    INVALID = [
        """
        import math

        import torch
        import torch.nn.functional as F
        from torch import nn


        class Model(nn.Module):
            def forward(self, q, k, v):
                scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
                weights = F.softmax(scores, dim=-1)
                return weights @ v

        def make_inputs(call):
            return tuple(torch.randn(2, 3, n, d, dtype=torch.float64) for n, d in ((5, 8), (7, 8), (7, 4)))
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 0.25
                self.attn_dropout = nn.Dropout(0.1)
                self.register_buffer("bias", torch.tril(torch.ones(6, 6)).view(1, 1, 6, 6))

            def forward(self, q, k, v):
                T = q.size(-2)
                att = torch.matmul(q, k.transpose(-1, -2)) * self.scale
                att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
                att = att.softmax(-1)
                att = self.attn_dropout(att)
                return att @ v

        def make_inputs(call):
            return tuple(torch.randn(2, 3, 6, 8, dtype=torch.float64) for _ in range(3))
        """,
    ]
    VALID = [
        """
        import math

        import torch
        import torch.nn.functional as F
        from torch import nn


        class Model(nn.Module):
            def forward(self, q, k, v):
                return F.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(q.size(-1)))

        def make_inputs(call):
            return tuple(torch.randn(2, 3, n, d, dtype=torch.float64) for n, d in ((5, 8), (7, 8), (7, 4)))
        """,
        """
        import torch
        import torch.nn.functional as F
        from torch import nn


        class Model(nn.Module):
            def forward(self, q, k, v):
                weights = F.softmax(q @ k.transpose(-2, -1), dim=-1)
                return weights @ v, weights

        def make_inputs(call):
            return torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 4)
        """,
    ]


def _callee(ctx: Context) -> str:
    """How the module spells SDPA with its own imports (`F.`, `nn.functional.`, `torch.nn.functional.`),
    or "" when it imports none of them (the fixer then adds `import torch`)."""
    spellings = {"torch.nn.functional": "", "torch.nn": "functional.", "torch": "nn.functional."}
    for qualname, rest in spellings.items():
        for local, imported in sorted(ctx.names.aliases.items()):
            if imported == qualname and local not in ctx.typer.env:
                return f"{local}.{rest}scaled_dot_product_attention"
    return ""


def _edit_block(node: "cst.CSTNode", path: tuple[int, ...], edit) -> "cst.CSTNode":
    """`node` with the statement list of its body at `path` (indices of compound statements in
    each nested body) replaced by `edit(statements)`."""
    import libcst as cst

    block = node.body
    if not isinstance(block, cst.IndentedBlock):  # `if x: y = a @ b` on one line: nothing to collapse
        return node
    statements = list(block.body)
    if path:
        statements[path[0]] = _edit_block(statements[path[0]], path[1:], edit)
    else:
        statements = edit(statements)
    return node.with_changes(body=block.with_changes(body=statements))


def _replace(statement: "cst.CSTNode", matmul: str, call: "cst.BaseExpression") -> "cst.CSTNode":
    """`statement` with `call` in place of every product whose `ast.dump` is `matmul`."""
    import libcst as cst

    class Replace(cst.CSTTransformer):
        def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
            if isinstance(original, (cst.BinaryOperation, cst.Call)) and _dump(original) == matmul:
                return call
            return updated

    return statement.visit(Replace())


def _dump(node: "cst.CSTNode") -> str | None:
    import libcst as cst

    code = cst.Module([]).code_for_node(node)
    try:
        return ast.dump(ast.parse(f"({code})", mode="eval").body)
    except SyntaxError:
        return None
