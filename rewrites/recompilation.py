"""TP6xx: code that does not break the graph but makes Dynamo recompile it on later calls."""

from __future__ import annotations

import ast

from transpiler.analysis.walker import Context
from transpiler.lint.rule import Rule


class ModuleScalarAttributeMutation(Rule):
    """## What it does
    Checks for compiled code that assigns a Python number or bool attribute of
    the module (`self.step += 1`, `self.scale = self.scale * 0.9`).

    ## Why is this bad?
    Dynamo specialises on integer and float attributes of `nn.Module`s and
    guards on their values: an int counter changed every call recompiles every
    call, until the recompile limit (8) sends the function back to eager; a
    float recompiles at least once.

    ## Fix safety
    Keeping the counter in a tensor buffer (`self.register_buffer("step",
    torch.zeros((), dtype=torch.long))` and `self.step += 1`) avoids the
    recompiles, but Python branches on it become data-dependent; not automatic.
    """

    code = "TP601"
    name = "module-scalar-attribute-mutation"
    summary = "Python scalar attribute of a module mutated in compiled code"
    message = (
        "`self.{attr}` is a Python scalar that Dynamo guards on; changing it in compiled code recompiles the graph"
    )
    family = "recompile"

    def visit_AugAssign(self, node: ast.AugAssign, ctx: Context) -> None:
        self._check(node.target, ctx)

    def visit_Assign(self, node: ast.Assign, ctx: Context) -> None:
        for target in node.targets:
            self._check(target, ctx)

    def _check(self, target: ast.expr, ctx: Context) -> None:
        if ctx.function.name == "__init__":
            return  # objects built inside forward initialise their attributes once
        attr = ctx.self_attr(target)
        if attr is not None and ctx.cls is not None and attr in ctx.cls.scalar_attrs:
            self.report(ctx, target, attr=attr)

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.calls = 0

            def forward(self, x):
                self.calls += 1
                return x * 2 + 1
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("calls", torch.zeros((), dtype=torch.long))

            def forward(self, x):
                self.calls += 1
                return x * 2 + 1
        """]


class GlobalScalarMutation(Rule):
    """## What it does
    Checks for compiled code that assigns a module-level global (`global
    counter; counter += 1`).

    ## Why is this bad?
    Dynamo guards on the values of globals it reads; a global that changes on
    every call invalidates the compiled graph on every call.

    ## Fix safety
    No automatic fix; keep state in a tensor or outside the compiled function.
    """

    code = "TP602"
    name = "global-scalar-mutation"
    summary = "global mutated in compiled code"
    message = "global `{name}` is assigned in compiled code; Dynamo guards on its value and recompiles when it changes"
    family = "recompile"

    def visit_Global(self, node: ast.Global, ctx: Context) -> None:
        assigned = _assigned_names(ctx.node)
        for name in node.names:
            if name in assigned:
                self.report(ctx, node, name=name)

    INVALID = ["""
        import torch
        from torch import nn

        calls = 0


        class Model(nn.Module):
            def forward(self, x):
                global calls
                calls += 1
                return x * calls
        """]
    VALID = ["""
        import torch
        from torch import nn

        SCALE = 2


        class Model(nn.Module):
            def forward(self, x):
                return x * SCALE
        """]


def _assigned_names(func: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


_GLOBAL_STATE_SETTERS = frozenset(
    {
        "torch.set_grad_enabled",
        "torch.set_default_dtype",
        "torch.use_deterministic_algorithms",
        "torch.set_float32_matmul_precision",
        "torch.set_default_device",
    }
)


class GlobalTorchStateChange(Rule):
    """## What it does
    Checks for statements in compiled code that switch torch's global state:
    `torch.set_grad_enabled(False)` as a call (not as a `with`),
    `torch.set_default_dtype`, `torch.use_deterministic_algorithms`, ...

    ## Why is this bad?
    Dynamo guards every graph on this global state (grad mode, default dtype,
    deterministic algorithms, ...). A function that changes it leaves the
    state different for the next call, whose guards then fail: a recompile.

    ## Fix safety
    No automatic fix; set global state once outside, or use the context
    manager form (`with torch.no_grad():`), which restores it.
    """

    code = "TP603"
    name = "global-torch-state-change"
    summary = "torch global state changed in compiled code"
    message = "`{callee}()` changes global state that Dynamo guards on; the next call recompiles"
    family = "recompile"

    def visit_Expr(self, node: ast.Expr, ctx: Context) -> None:
        call = node.value
        if isinstance(call, ast.Call):
            name = ctx.qualname(call.func)
            if name in _GLOBAL_STATE_SETTERS:
                self.report(ctx, call, callee=name)

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                torch.use_deterministic_algorithms(True, warn_only=True)
                return x * 2 + 1
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                with torch.no_grad():
                    y = x * 2
                return y + 1
        """]
