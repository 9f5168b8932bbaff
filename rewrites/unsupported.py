"""TP5xx: Python and autograd features Dynamo does not trace, and breaks it cannot resume from."""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

from rewrites.base import CallRule, TensorMethodRule
from rewrites.conversions import atom, with_parens_of
from transpiler.analysis.walker import Context
from transpiler.lint.rule import Fix
from transpiler.lint.rule import REGISTRY, Finding, Rule

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.lint.rule import Edit


class BreakInBlock(Rule):
    """A graph break inside a construct Dynamo cannot resume in; reported where the break is."""

    block: ClassVar[str]

    def check_function(self, findings: list[Finding], ctx: Context) -> None:
        for finding in findings:
            rule = REGISTRY[finding.code]
            if rule.family != "break" or issubclass(rule, BreakInBlock):
                continue
            lines = [line for kind, line in finding.blocks if kind == self.block]
            if lines:
                # The copy has no fix of its own: fixing the inner finding fixes it.
                message = self.message.format(line=lines[-1])
                ctx.findings.append(replace(finding, code=self.code, message=message, fix=None, no_fix=None))


class GraphBreakInLoop(BreakInBlock):
    """## What it does
    Reports a graph break (any other finding of this tool) inside a `for` or
    `while` loop body, at the same place.

    ## Why is this bad?
    Dynamo cannot resume a graph in the middle of a loop: instead of splitting
    the graph it skips the whole function, which then runs eagerly (GB7000).
    One `print` in a loop costs every fused kernel of the function.

    ## Fix safety
    Fixing the inner break fixes this one.
    """

    code = "TP501"
    name = "graph-break-in-loop"
    summary = "graph break inside a loop"
    message = "graph break inside the loop at line {line}: Dynamo skips the whole function and runs it eagerly"
    dynamo_codes = ("GB7000",)
    block = "loop"
    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                for step in range(3):
                    y = y * 2
                    print("step", step)
                return y
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                for step in range(3):
                    y = y * 2
                return y
        """]


class GraphBreakInTry(BreakInBlock):
    """## What it does
    Reports a graph break (any other finding of this tool) inside a `try`
    block, at the same place.

    ## Why is this bad?
    A graph break inside `try` cannot be resumed: Dynamo skips the whole
    function, which runs eagerly. A `try` with no break inside compiles fine.

    ## Fix safety
    Fixing the inner break fixes this one.
    """

    code = "TP502"
    name = "graph-break-in-try"
    summary = "graph break inside a `try` block"
    message = "graph break inside the `try` at line {line}: Dynamo cannot resume and runs the whole function eagerly"
    block = "try"
    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                try:
                    print("scaling")
                    y = y * 2
                except RuntimeError:
                    y = y * 3
                return y
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                try:
                    y = y * 2
                except RuntimeError:
                    y = y * 3
                return y
        """]


class GraphBreakInContextManager(BreakInBlock):
    """## What it does
    Reports a graph break (any other finding of this tool) inside a `with`
    block of a context manager that is not torch's (a class of your own, a
    `@contextmanager` function), at the same place.

    ## Why is this bad?
    Dynamo resumes after a break only under the context managers it models
    (`torch.no_grad()`, autocast, `nullcontext`, ...). Under any other one it
    skips the whole function (GB0066).

    ## Fix safety
    Fixing the inner break fixes this one.
    """

    code = "TP515"
    name = "graph-break-in-context-manager"
    summary = "graph break inside a user context manager"
    message = "graph break inside the `with` at line {line}: Dynamo cannot resume under this context manager and skips the function"
    dynamo_codes = ("GB0066",)
    block = "with"
    INVALID = ["""
        import contextlib

        import torch
        from torch import nn


        @contextlib.contextmanager
        def section(name):
            yield name


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                with section("scale"):
                    print("scaling")
                    y = y * 2
                return y
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                with torch.no_grad():
                    y = y * 2
                return y
        """]


class IdComparison(Rule):
    """## What it does
    Checks for comparisons of `id()` values (`id(a) == id(b)`).

    ## Why is this bad?
    Objects created inside the compiled region only get their identity at run
    time; Dynamo cannot compare it while tracing (GB9316).

    ## Fix safety
    `id(a) == id(b)` becomes `a is b` (and `!=` becomes `is not`): safe, since
    one side is an input, alive throughout, whose identity no other object can
    share. Chained comparisons and other operators (`<`) are left alone.
    """

    code = "TP503"
    name = "id-comparison"
    summary = "comparison of `id()` values"
    message = "comparing the `id()` of an input with that of a computed value breaks the graph; use `is`"
    dynamo_codes = ("GB9316",)

    def visit_Compare(self, node: ast.Compare, ctx: Context) -> None:
        parameters = {a.arg for a in ctx.node.args.args + ctx.node.args.kwonlyargs}
        origins = set()
        for operand in (node.left, *node.comparators):
            if isinstance(operand, ast.Call) and ctx.qualname(operand.func) == "builtins.id" and operand.args:
                arg = operand.args[0]
                is_input = isinstance(arg, ast.Name) and arg.id in parameters or ctx.self_attr(arg) is not None
                origins.add(is_input)
        if origins == {True, False}:
            self.report(ctx, node)

    fix_safety = "safe"

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        assert isinstance(node, ast.Compare)
        if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            return {"no_fix": "only a single `==` or `!=` of two `id()` calls has an `is` form"}
        operands = (node.left, node.comparators[0])
        if not all(_is_id_call(o, ctx) for o in operands):
            return {"no_fix": "only a single `==` or `!=` of two `id()` calls has an `is` form"}
        return self.make_fix("compare with `is`", "Comparison", node)

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        target = node.comparisons[0]
        operator = cst.Is() if isinstance(target.operator, cst.Equal) else cst.IsNot()
        left, right = (atom(call.args[0].value) for call in (node.left, target.comparator))
        return with_parens_of(node, cst.Comparison(left, [cst.ComparisonTarget(operator, right)]))

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = y * 2
                same = id(z) == id(x)
                return z, same
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = y * 2
                same = z is x
                return z, same
        """]


def _is_id_call(node: ast.expr, ctx: Context) -> bool:
    return (
        isinstance(node, ast.Call)
        and ctx.qualname(node.func) == "builtins.id"
        and len(node.args) == 1
        and not node.keywords
        and not isinstance(node.args[0], ast.Starred)
    )


class DataPtrComparison(Rule):
    """## What it does
    Checks for comparisons involving `Tensor.data_ptr()`.

    ## Why is this bad?
    Storage addresses exist only at run time; Dynamo cannot decide the
    comparison while tracing (GB5976).

    ## Fix safety
    No automatic fix; decide aliasing outside the compiled function.
    """

    code = "TP504"
    name = "data-ptr-comparison"
    summary = "comparison of `data_ptr()` values"
    message = "comparing `data_ptr()` values breaks the graph; decide aliasing outside the compiled function"
    dynamo_codes = ("GB5976",)

    def visit_Compare(self, node: ast.Compare, ctx: Context) -> None:
        operands = [node.left, *node.comparators]
        if any(
            isinstance(o, ast.Call) and isinstance(o.func, ast.Attribute) and o.func.attr == "data_ptr"
            for o in operands
        ):
            self.report(ctx, node)

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                shared = y.data_ptr() == x.data_ptr()
                return y * 2, shared
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return y * 2
        """]


class ClassDefinitionInCompiledCode(Rule):
    """## What it does
    Checks for `class` statements inside compiled functions.

    ## Why is this bad?
    Building a class at run time (`__build_class__`) is not traced (GB8977).

    ## Fix safety
    Moving the class to module level is safe when it does not close over local
    variables; not automatic.
    """

    code = "TP505"
    name = "class-definition-in-compiled-code"
    summary = "`class` statement in compiled code"
    message = "defining class `{cls}` in compiled code breaks the graph; define it at module level"
    dynamo_codes = ("GB8977",)

    def visit_ClassDef(self, node: ast.ClassDef, ctx: Context) -> None:
        self.report(ctx, node, cls=node.name)

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1

                class Scale:
                    factor = 2

                return y * Scale.factor
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Scale:
            factor = 2


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return y * Scale.factor
        """]


class ParameterInCompiledCode(CallRule):
    """## What it does
    Checks for `nn.Parameter(...)` created inside compiled code.

    ## Why is this bad?
    Dynamo refuses to construct parameters while tracing (GB0264): a parameter
    created per call is also never trained.

    ## Fix safety
    Creating it in `__init__` changes the module's `state_dict`; not automatic.
    """

    code = "TP506"
    name = "parameter-in-compiled-code"
    summary = "`nn.Parameter` constructed in compiled code"
    message = "`nn.Parameter` constructed in compiled code breaks the graph; create it in `__init__`"
    dynamo_codes = ("GB0264",)
    callees = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                weight = nn.Parameter(torch.ones(8))
                return y * weight
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(8))

            def forward(self, x):
                y = x + 1
                return y * self.weight
        """]


class AutogradCallInCompiledCode(Rule):
    """## What it does
    Checks for `Tensor.backward()`, `torch.autograd.backward()` and
    `torch.autograd.grad()` inside compiled code.

    ## Why is this bad?
    With default settings Dynamo does not trace autograd calls (GB0123,
    GB9186); compile the forward and loss, and call backward outside.

    ## Fix safety
    No automatic fix.
    """

    code = "TP507"
    name = "autograd-call-in-compiled-code"
    summary = "autograd call in compiled code"
    message = "`{callee}` in compiled code breaks the graph; call it outside the compiled function"
    dynamo_codes = ("GB0123", "GB9186")

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func)
        if name in ("torch.autograd.grad", "torch.autograd.backward"):
            self.report(ctx, node, callee=name)
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "backward" and name is None:
            if ctx.kind(node.func.value).is_tensor:
                self.report(ctx, node, callee=".backward()")

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = (x + 1).requires_grad_()
                z = (y * y).sum()
                (grad,) = torch.autograd.grad(z, y)
                return grad * 2
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return (y * y).sum()


        def train_step(model, x):
            loss = model(x)
            loss.backward()
            return loss
        """]


class TensorDataAssignment(Rule):
    """## What it does
    Checks for assignments to `.data` of tensors created in compiled code.

    ## Why is this bad?
    Swapping a tensor's storage behind autograd's back cannot be traced
    (GB0056).

    ## Fix safety
    No automatic fix; use `torch.no_grad()` and `copy_()`, or a new tensor.
    """

    code = "TP508"
    name = "tensor-data-assignment"
    summary = "assignment to `Tensor.data`"
    message = "assigning `.data` of a tensor breaks the graph; use `copy_()` under `torch.no_grad()`"
    dynamo_codes = ("GB0056",)

    def visit_Assign(self, node: ast.Assign, ctx: Context) -> None:
        for target in node.targets:
            if isinstance(target, ast.Attribute) and target.attr == "data" and ctx.self_attr(target.value) is None:
                if ctx.kind(target.value).is_tensor:
                    self.report(ctx, target)

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = y.clone()
                z.data = torch.zeros(8)
                return z * 2
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = y.clone()
                with torch.no_grad():
                    z.copy_(torch.zeros(8))
                return z * 2
        """]


class TensorFactoryRequiresGrad(Rule):
    """## What it does
    Checks for tensor factories called with `requires_grad=True` in compiled code.

    ## Why is this bad?
    Creating new autograd leaves inside a traced region is not supported
    (GB0225).

    ## Fix safety
    No automatic fix; create leaves outside, or register a parameter.
    """

    code = "TP509"
    name = "tensor-factory-requires-grad"
    summary = "tensor factory with `requires_grad=True`"
    message = "creating a tensor with `requires_grad=True` in compiled code breaks the graph; create it outside"
    dynamo_codes = ("GB0225",)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func) or ""
        if name.startswith("torch.") and name.count(".") == 1:
            for keyword in node.keywords:
                if (
                    keyword.arg == "requires_grad"
                    and isinstance(keyword.value, ast.Constant)
                    and keyword.value.value is True
                ):
                    self.report(ctx, node)

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                bias = torch.zeros(8, requires_grad=True)
                return y + bias
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                bias = torch.zeros(8)
                return y + bias
        """]


class StorageOffsetCall(TensorMethodRule):
    """## What it does
    Checks for `Tensor.storage_offset()` in compiled code.

    ## Why is this bad?
    The offset is a property of the storage, not of the traced value: Dynamo
    returns a non-tensor it cannot put in the graph (GB0208).

    ## Fix safety
    No automatic fix.
    """

    code = "TP510"
    name = "storage-offset-call"
    summary = "`storage_offset()`"
    message = "`storage_offset()` in compiled code breaks the graph"
    dynamo_codes = ("GB0208",)
    methods = frozenset({"storage_offset"})
    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                offset = y.storage_offset()
                return y * 2, offset
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return y * 2, y.stride()
        """]


class CopyModuleOnTensor(Rule):
    """## What it does
    Checks for `copy.deepcopy()` and `copy.copy()` of tensors in compiled code.

    ## Why is this bad?
    Dynamo does not trace the `copy` module's protocol on tensors (GB4198 for
    `deepcopy`, GB0208 for `copy`).

    ## Fix safety
    No automatic fix. `t.detach().clone()` copies the values, but a deep copy
    of a tensor that requires grad is a new leaf that requires grad itself (and
    of a tensor with autograd history, an error), which no traceable call
    reproduces; tensor subclasses would also lose their Python state.
    `copy.copy(t)` shares the storage of `t`.
    """

    code = "TP511"
    name = "copy-module-on-tensor"
    summary = "`copy.copy()`/`copy.deepcopy()` of a tensor"
    message = "`{callee}()` of a tensor breaks the graph; use `.clone()`"
    dynamo_codes = ("GB4198", "GB0208")

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func)
        if name in ("copy.deepcopy", "copy.copy") and node.args and ctx.kind(node.args[0]).is_tensor:
            self.report(ctx, node, callee=name)

    INVALID = [
        """
        import copy

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = copy.deepcopy(y)
                return z * 2
        """,
        """
        import copy

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = copy.copy(y)
                return z * 2
        """,
    ]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = y.clone()
                return z * 2
        """]


class RecurrentModuleCall(Rule):
    """## What it does
    Checks for calls of `nn.RNN`, `nn.LSTM` and `nn.GRU` submodules in compiled
    code.

    ## Why is this bad?
    Dynamo does not trace the recurrent modules by default (`allow_rnn=False`,
    GB0014): the call breaks the graph.

    ## Fix safety
    No automatic fix; set `torch._dynamo.config.allow_rnn = True` or write the
    recurrence with `nn.LSTMCell` in a loop.
    """

    code = "TP512"
    name = "recurrent-module-call"
    summary = "`nn.RNN`/`nn.LSTM`/`nn.GRU` call"
    message = "calling `{ctor}` in compiled code breaks the graph (Dynamo does not trace RNN modules by default)"
    dynamo_codes = ("GB0014",)
    _RNN = frozenset({"torch.nn.RNN", "torch.nn.LSTM", "torch.nn.GRU"})

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        attr = ctx.self_attr(node.func)
        if attr is not None and ctx.cls is not None and ctx.cls.attr_ctors.get(attr) in self._RNN:
            self.report(ctx, node, ctor=ctx.cls.attr_ctors[attr].replace("torch.", ""))

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.LSTM(8, 8, batch_first=True)

            def forward(self, x):
                y = x + 1
                out, _ = self.rnn(y.view(1, 1, 8))
                return out * 2
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.cell = nn.LSTMCell(8, 8)

            def forward(self, x):
                y = x + 1
                h, _ = self.cell(y.view(1, 8))
                return h * 2
        """]


class UnsupportedTensorMethod(TensorMethodRule):
    """## What it does
    Checks for tensor methods Dynamo refuses to trace: `resize_`,
    `resize_as_`, `share_memory_`, `random_`, `retain_grad`, `is_inference`
    (and `torch.is_inference_mode_enabled()`).

    ## Why is this bad?
    They change storage or autograd state in ways the graph cannot represent
    (GB0126, GB0127, GB0117, GB0107, GB0108, GB0045). `retain_grad()` makes
    Dynamo skip the whole function.

    ## Fix safety
    No automatic fix; use out-of-place operations.
    """

    code = "TP513"
    name = "unsupported-tensor-method"
    summary = "tensor method Dynamo does not trace"
    message = "`{method}()` in compiled code breaks the graph; use an out-of-place operation"
    dynamo_codes = ("GB0126", "GB0127", "GB0117", "GB0107", "GB0108", "GB0045", "GB0046")
    methods = frozenset({"resize_", "resize_as_", "share_memory_", "random_", "retain_grad", "is_inference"})
    functions = frozenset({"torch.is_inference_mode_enabled"})
    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                y.resize_(4, 2)
                return y * 2
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                y = y.reshape(4, 2)
                return y * 2
        """]


class RequiresGradMutation(Rule):
    """## What it does
    Checks for compiled code that turns gradient tracking on for a tensor:
    `t.requires_grad = ...` and `t.requires_grad_()`.

    ## Why is this bad?
    Making a tensor created inside the graph into an autograd leaf cannot be
    traced (GB0206 for the attribute, GB8985 when the tensor leaves the graph).

    ## Fix safety
    No automatic fix; create leaves outside the compiled function.
    """

    code = "TP514"
    name = "requires-grad-mutation"
    summary = "`requires_grad` switched on in compiled code"
    message = "switching on `requires_grad` in compiled code breaks the graph; create leaves outside"
    dynamo_codes = ("GB0206", "GB8985")

    def visit_Assign(self, node: ast.Assign, ctx: Context) -> None:
        for target in node.targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr == "requires_grad"
                and ctx.kind(target.value).is_tensor
            ):
                self.report(ctx, target)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "requires_grad_" and ctx.qualname(func) is None:
            if ctx.self_attr(func.value) is None and ctx.kind(func.value).is_tensor:
                self.report(ctx, node)

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = y.detach()
                z.requires_grad = True
                return z * 2
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = y.detach().requires_grad_()
                return z * 2
        """,
    ]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = y.detach()
                return z * 2
        """]


class CallToDisabledFunction(Rule):
    """## What it does
    Checks for calls from compiled code to functions of the same file decorated
    with `torch.compiler.disable` (or `torch._dynamo.disable`).

    ## Why is this bad?
    Disabling works by breaking the graph at the call (GB0098): the function
    runs eagerly between two graphs. That is the point when it hides
    something untraceable, but every call costs a break, which is easy to
    forget when the call sits in a hot `forward`.

    ## Fix safety
    No automatic fix; make the function traceable, or move the call out of the
    compiled code.
    """

    code = "TP516"
    name = "call-to-disabled-function"
    summary = "call to a `torch.compiler.disable`d function"
    message = "`{callee}` is decorated with `torch.compiler.disable`; calling it breaks the graph"
    dynamo_codes = ("GB0098",)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        func = node.func
        attr = ctx.self_attr(func)
        if attr is not None:
            if ctx.cls is not None and attr in ctx.cls.disabled_methods:
                self.report(ctx, node, callee=f"self.{attr}")
        elif isinstance(func, ast.Name) and func.id in ctx.names.disabled and ctx.qualname(func) is not None:
            self.report(ctx, node, callee=func.id)

    INVALID = ["""
        import torch
        from torch import nn


        @torch.compiler.disable
        def log_stats(y):
            print(y.mean().item())


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                log_stats(y)
                return y * 2
        """]
    VALID = ["""
        import torch
        from torch import nn


        def scale(y):
            return y * 2


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return scale(y)
        """]
