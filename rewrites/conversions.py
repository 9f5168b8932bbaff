"""TP3xx: tensor values converted to Python objects (`.item()`, `.tolist()`, `float(t)`, `math.*`, `str(t)`)."""

from __future__ import annotations

import ast

from rewrites.base import TensorMethodRule
from transpiler.checker import Context
from transpiler.rule import Rule


class TensorItemCall(TensorMethodRule):
    """## What it does
    Checks for `.item()` on tensors in compiled code.

    ## Why is this bad?
    `.item()` copies a value out of the tensor into Python. With default
    settings Dynamo cannot trace that (GB0124): it breaks the graph and, on a
    GPU, waits for the device.

    ## Fix safety
    When the value only flows back into tensor arithmetic, keeping it a 0-d
    tensor (`t.detach()`) gives the same results and types: safe. Uses that need
    a Python number (shapes, `range`, indexing lists) have no local fix.
    """

    code = "TP301"
    name = "tensor-item-call"
    summary = "`.item()` on a tensor"
    message = "`.item()` reads a tensor value into Python and breaks the graph; keep the value a tensor"
    dynamo_codes = ("GB0124",)
    methods = frozenset({"item"})
    unknown_receivers = True
    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                scale = y.abs().max().item()
                return y / scale
        """
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                scale = y.abs().max().detach()
                return y / scale
        """
    ]


class TensorTolistCall(TensorMethodRule):
    """## What it does
    Checks for `.tolist()` on tensors in compiled code.

    ## Why is this bad?
    `.tolist()` copies every element into Python objects: a data-dependent
    operator (GB0033), and for floating-point tensors an error even with
    `fullgraph=True` (GB0109).

    ## Fix safety
    No automatic fix: keep the values in a tensor.
    """

    code = "TP302"
    name = "tensor-tolist-call"
    summary = "`.tolist()` on a tensor"
    message = "`.tolist()` copies tensor values into Python and breaks the graph; keep them in a tensor"
    dynamo_codes = ("GB0033", "GB0109")
    methods = frozenset({"tolist"})
    unknown_receivers = True
    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                values = y.tolist()
                return y * len(values)
        """
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return y * y.numel()
        """
    ]


class TensorToPythonScalar(Rule):
    """## What it does
    Checks for `float(t)`, `int(t)`, `bool(t)` and `complex(t)` on tensors.

    ## Why is this bad?
    The conversion calls `.item()` under the hood: the graph breaks (GB0124)
    and, on a GPU, the host waits for the device.

    ## Fix safety
    Where the number only flows back into tensor arithmetic, keep it a tensor
    (`t.float()`, `t.long()`); safe when the dtype rules give the same result.
    """

    code = "TP303"
    name = "tensor-to-python-scalar"
    summary = "`float()`/`int()`/`bool()` of a tensor"
    message = "`{callee}()` of a tensor reads its value into Python and breaks the graph; keep it a tensor"
    dynamo_codes = ("GB0124",)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func)
        if name in ("builtins.float", "builtins.int", "builtins.bool", "builtins.complex") and len(node.args) == 1:
            if ctx.kind(node.args[0]).is_tensor:
                self.report(ctx, node, callee=name[9:])

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                total = float(y.sum())
                return y / total
        """
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                total = y.sum()
                return y / total
        """
    ]


class MathFunctionOnTensor(Rule):
    """## What it does
    Checks for functions of Python's `math` module applied to tensors.

    ## Why is this bad?
    `math.sqrt(t)` converts the tensor to a Python float first: a
    data-dependent operator (GB0033) and a graph break.

    ## Fix safety
    The `torch` function of the same name (`torch.sqrt`, `torch.exp`, ...) keeps
    the value a tensor; results agree up to dtype (math computes in float64).
    """

    code = "TP304"
    name = "math-function-on-tensor"
    summary = "`math` function applied to a tensor"
    message = "`{callee}()` of a tensor converts it to a Python float and breaks the graph; use the `torch` function"
    dynamo_codes = ("GB0033",)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func) or ""
        if name.startswith("math.") and any(ctx.kind(a).is_tensor for a in node.args):
            self.report(ctx, node, callee=name)

    INVALID = [
        """
        import math

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                norm = math.sqrt(y.pow(2).sum())
                return y / norm
        """
    ]
    VALID = [
        """
        import math

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                norm = torch.sqrt(y.pow(2).sum()) * math.sqrt(2.0)
                return y / norm
        """
    ]


class TensorToString(Rule):
    """## What it does
    Checks for `str(t)` and `repr(t)` of tensors in compiled code.

    ## Why is this bad?
    Formatting a tensor reads all its values; Dynamo cannot trace the C
    implementation (GB0059, GB0569). (f-strings of tensors are reconstructed
    after the graph and do not break it.)

    ## Fix safety
    No automatic fix: format tensors outside the compiled function.
    """

    code = "TP305"
    name = "tensor-to-string"
    summary = "`str()`/`repr()` of a tensor"
    message = "`{callee}()` of a tensor breaks the graph; format tensors outside the compiled function"
    dynamo_codes = ("GB0059", "GB0569")

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func)
        if name in ("builtins.str", "builtins.repr") and len(node.args) == 1 and ctx.kind(node.args[0]).is_tensor:
            self.report(ctx, node, callee=name[9:])

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                self.last = repr(y)
                return y * 2
        """
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                self.last = str(y.shape)
                return y * 2
        """
    ]
