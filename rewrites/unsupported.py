"""TP5xx: Python and autograd features Dynamo does not trace, and breaks it cannot resume from."""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

from rewrites import differentiation, generators, isolation, recurrent
from rewrites.base import CallRule, TensorMethodRule
from rewrites.conversions import atom, with_parens_of
from rewrites.sequences import SequenceRule, Sequences, scratch
from transpiler.analysis.symbols import DISABLE_DECORATORS
from transpiler.analysis.kinds import Kind
from transpiler.analysis.typer import GENERATOR_CLASSES, Typer
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
            if lines and self.reported(lines[0], ctx):
                # Fixing the inner finding fixes the copy; where it stays, the copy's own fix (if any) moves it.
                message = self.message.format(line=lines[-1])
                plan = self.isolate(lines[0], findings, ctx)
                ctx.findings.append(replace(finding, code=self.code, message=message, **plan))

    def isolate(self, line: int, findings: list[Finding], ctx: Context) -> dict:
        """`fix`/`no_fix` for the copy of a finding inside the block starting at `line` (the outermost one)."""
        return {"fix": None, "no_fix": None}

    def reported(self, line: int, ctx: Context) -> bool:
        """Whether the block starting at `line` gets a copy of the findings inside it."""
        return True


class GraphBreakInLoop(BreakInBlock):
    """## What it does
    Reports a graph break (any other finding of this tool) inside a `for` or
    `while` loop body, or in a `while` test, at the same place. (A `for`
    iterable runs once, before the loop: Dynamo resumes after a break there.)

    ## Why is this bad?
    Dynamo cannot resume a graph in the middle of a loop: instead of splitting
    the graph it skips the whole function, which then runs eagerly (GB7000).
    One `print` in a loop costs every fused kernel of the function.

    ## Fix safety
    Fixing the inner break fixes this one. Where no fix removes it, the fix
    (safe) isolates it: the loop becomes a helper function and its body a
    second one, the statements holding the break (and those formatting a
    tensor into an f-string, a key Dynamo cannot look up) a function under
    `torch.compiler.disable(recursive=False)` (`rewrites/isolation.py`; not
    recursive, so what they call, a submodule, still compiles). The break
    stays, once per iteration, but Dynamo compiles the function's other
    statements and each iteration's around it instead of skipping the
    function (a break in a `while` test stays in the loop helper, whose frame
    Dynamo skips, by design: that loop is not reported again, the break
    itself is, and so is a loop in any function named `_isolated_...`).
    Eager runs execute
    the same statements on the same objects: names the loop reads are passed
    in, names it rebinds that are read elsewhere are returned. Not isolated
    (the reason is given): a loop with its own `break`/`continue`, a `return`,
    `yield`, `del`, import, nested function or lambda, frame-dependent calls
    (`locals()`, `super()`), a loop inside a `try`, a name read after the loop
    that may be unbound before it, a name read in the loop that an earlier
    iteration set, a rebound name a closure reads. Tracebacks show the helpers.
    """

    code = "TP501"
    name = "graph-break-in-loop"
    summary = "graph break inside a loop"
    message = "graph break inside the loop at line {line}: Dynamo skips the whole function and runs it eagerly"
    dynamo_codes = ("GB7000",)
    block = "loop"
    fix_safety = "safe"

    def __init__(self) -> None:
        self.tensors_at: dict[int, frozenset[str]] = {}  # per loop line: names holding tensors where it starts
        self.plans: dict[int, dict] = {}  # per loop line, in the function being checked
        self.formatted: set[int] = set()  # lines in a loop with an f-string of a tensor

    def visit_For(self, node: ast.For, ctx: Context) -> None:
        self.tensors_at[node.lineno] = frozenset(n for n, kind in ctx.typer.env.items() if kind.is_tensor)

    visit_While = visit_For

    def visit_JoinedStr(self, node: ast.JoinedStr, ctx: Context) -> None:
        # Dynamo formats an f-string of a tensor after the graph; where the string is used inside it (a
        # ModuleDict key) Dynamo raises and skips the frame. Isolation runs such statements with the breaks.
        values = (v.value for v in node.values if isinstance(v, ast.FormattedValue))
        if ctx.blocks and any(ctx.kind(v).is_tensor for v in values):
            self.formatted.add(node.lineno)

    def check_function(self, findings: list[Finding], ctx: Context) -> None:
        super().check_function(findings, ctx)
        self.tensors_at.clear()
        self.plans.clear()
        self.formatted.clear()

    def reported(self, line: int, ctx: Context) -> bool:
        # A loop the isolation fix moved into its loop helper (a break in its `while` test stays there): that
        # helper is the frame meant to run eagerly. The break itself is still reported where it is.
        found = isolation.innermost_function(ctx.node, line)
        return found is None or not getattr(found[0], "name", "").startswith(isolation.PREFIX)

    def isolate(self, line: int, findings: list[Finding], ctx: Context) -> dict:
        if line not in self.plans:
            tensors = self.tensors_at.get(line, frozenset())
            self.plans[line] = isolation.plan(self, line, findings, ctx, tensors, frozenset(self.formatted))
        return self.plans[line]

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode | cst.FlattenSentinel":
        plan, breaks = fix.data
        return isolation.apply_loop(node, plan, breaks, edit)  # type: ignore[arg-type]

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                for step in range(3):
                    y = y * 2
                    print("step", step)
                return y
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                for step in range(3):
                    noise = torch.randn(y.shape, generator=torch.Generator().manual_seed(step))
                    y = y * 2 + noise
                return y
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                while max(x.tolist()) > 1:  # the test runs again after each iteration
                    x = x / 2
                return x + 1
        """,
    ]
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
    Unsafe, for a gradient taken inside the forward (FGM's adversarial step,
    WGAN-GP's gradient penalty) of a leaf made in the same block with
    `x = e.requires_grad_()` (or `x = e` then `x.requires_grad_()`), when the
    statements between only assign names and `torch.autograd.grad(out, x, ...)`
    is bound as `(g,) =`, `g = ...[0]` or `gs =`: those statements become a
    nested function of `x` returning `out`, differentiated with
    `out, out_vjp = torch.func.vjp(out_of, e)` (Dynamo traces `torch.func`), and
    the gradient is `out_vjp(torch.ones_like(out))[0]` (or of `grad_outputs`),
    detached unless `create_graph=True`. Unsafe: an output with more than one
    element without `grad_outputs` no longer raises, nor does a call under
    `torch.no_grad()` without `torch.enable_grad()`, and `x.requires_grad` is no
    longer switched on. Left alone: several inputs or outputs, `allow_unused=`,
    a leaf read after the gradient, `backward()`.
    """

    code = "TP507"
    name = "autograd-call-in-compiled-code"
    summary = "autograd call in compiled code"
    message = "`{callee}` in compiled code breaks the graph; call it outside the compiled function"
    dynamo_codes = ("GB0123", "GB9186")
    fix_safety = "unsafe"

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func)
        if name == "torch.autograd.grad":
            self.report(ctx, node, callee=name)
        elif name == "torch.autograd.backward":
            self.report(ctx, node, callee=name, no_fix="`backward` accumulates into `.grad`, which a graph cannot")
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "backward" and name is None:
            if ctx.kind(node.func.value).is_tensor:
                no_fix = "`backward` accumulates into `.grad`, which a graph cannot"
                self.report(ctx, node, callee=".backward()", no_fix=no_fix)

    def plan(self, node: ast.Call, ctx: Context) -> dict:
        planned = differentiation.plan(node, ctx)
        if isinstance(planned, str):
            return {"no_fix": planned}
        data, owner = planned
        title = "take the gradient with `torch.func.vjp` of a function of the leaf"
        return self.make_fix(title, type(owner).__name__, owner, safety="unsafe", data=data)

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        return differentiation.rewrite(node, fix.data, edit)

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
    Safe: `copy.deepcopy(t)` of a tensor `t` computed in the function becomes
    `(t.detach().clone() if not t.requires_grad else copy.deepcopy(t))`. A
    tensor that does not require grad is a leaf without autograd history, whose
    deep copy is a copy of its values that does not require grad: that is what
    `t.detach().clone()` returns, and Dynamo traces it (`requires_grad` is known
    while tracing, so only that arm is compiled). A tensor that requires grad
    still takes `copy.deepcopy`, which raises for one with autograd history
    exactly as before. Only the memory layout may differ: a deep copy keeps the
    strides and storage offset of a view, `clone()` of a view that is not
    dense is contiguous. Unsafe for an input of the function (the same form: an
    input may be an `nn.Parameter`, whose deep copy is one, a subclass, or carry
    a `.grad`, which a deep copy keeps). Attributes of the module are not fixed
    (a parameter's or buffer's deep copy keeps its class), nor `deepcopy(t,
    memo)`, nor `copy.copy(t)`, which shares the storage of `t`.
    """

    code = "TP511"
    name = "copy-module-on-tensor"
    summary = "`copy.copy()`/`copy.deepcopy()` of a tensor"
    message = "`{callee}()` of a tensor breaks the graph; use `.clone()`"
    dynamo_codes = ("GB4198", "GB0208")

    fix_safety = "safe or unsafe"

    def visit_IfExp(self, node: ast.IfExp, ctx: Context) -> None:
        # The fixed form: its `deepcopy` arm only runs for tensors that require grad, whose deep
        # copy raises in eager when they have autograd history; it is not a new finding.
        if _is_fixed_deepcopy(node):
            ctx.claimed.add(id(node.orelse))

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func)
        if name in ("copy.deepcopy", "copy.copy") and node.args and ctx.kind(node.args[0]).is_tensor:
            if id(node) not in ctx.claimed:
                self.report(ctx, node, callee=name)

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        assert isinstance(node, ast.Call)
        if ctx.qualname(node.func) != "copy.deepcopy" or len(node.args) != 1 or node.keywords:
            return {"no_fix": "only `copy.deepcopy(t)` with one argument has a `clone()` form"}
        arg = node.args[0]
        parameters = {a.arg for a in ctx.node.args.args + ctx.node.args.kwonlyargs}
        title = "copy with `detach().clone()` where no grad is required"
        if isinstance(arg, ast.Name) and arg.id in parameters:
            why = "an input may be an `nn.Parameter` or a subclass, whose deep copy keeps its class and `.grad`"
            return self.make_fix(f"{title} (not proven: {why})", "Call", node, safety="unsafe")
        if not isinstance(arg, ast.Name):
            return {
                "no_fix": "only a tensor computed in the function or an input has a known type: an attribute "
                "may be a parameter or buffer whose deep copy keeps its class"
            }
        return self.make_fix(title, "Call", node)

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        tensor = node.args[0].value
        clone = cst.parse_expression(f"{tensor.value}.detach().clone()")
        requires_grad = cst.Attribute(tensor, cst.Name("requires_grad"))
        return cst.IfExp(
            test=cst.UnaryOperation(cst.Not(), requires_grad),
            body=clone,
            orelse=node,
            lpar=[cst.LeftParen()],
            rpar=[cst.RightParen()],
        )

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


def _is_fixed_deepcopy(node: ast.IfExp) -> bool:
    """`t.detach().clone() if not t.requires_grad else copy.deepcopy(t)`, as TP511's fix writes it."""
    test, orelse = node.test, node.orelse
    return (
        isinstance(test, ast.UnaryOp)
        and isinstance(test.op, ast.Not)
        and isinstance(test.operand, ast.Attribute)
        and test.operand.attr == "requires_grad"
        and isinstance(test.operand.value, ast.Name)
        and isinstance(orelse, ast.Call)
        and len(orelse.args) == 1
        and isinstance(orelse.args[0], ast.Name)
        and orelse.args[0].id == test.operand.value.id
        and isinstance(orelse.func, ast.Attribute)
        and orelse.func.attr == "deepcopy"
    )


class RecurrentModuleCall(Rule):
    """## What it does
    Checks for calls of `nn.RNN`, `nn.LSTM` and `nn.GRU` submodules in compiled
    code.

    ## Why is this bad?
    Dynamo does not trace the recurrent modules by default (`allow_rnn=False`,
    GB0014): the call breaks the graph.

    ## Fix safety
    Unsafe: the constructor `nn.LSTM(...)` (`GRU`, `RNN`) in `__init__` becomes
    `TraceableLSTM(...)`, a module the fix writes once after the imports. It takes
    the same arguments and keeps the parameters (names, order, initial values, so
    checkpoints load) and the hyperparameter attributes; eager calls make the same
    `torch._VF` call as torch's module, bit for bit, and under `torch.compile` it
    unrolls the recurrence into matmuls and pointwise ops that Dynamo traces and
    Inductor compiles (within float rounding; dropout draws other random numbers).
    Unsafe because the module's class changes: `isinstance(m, nn.LSTM)`,
    `flatten_parameters()` and the cuDNN weight buffer are gone, and wrong shapes
    raise other errors. A batch packed just before the call and padded just after
    (`pack_padded_sequence`, the module, `pad_packed_sequence(..., total_length=)`)
    keeps torch's calls in eager and, under `torch.compile`, runs padded and masked:
    each sequence keeps its state past its end, as packing computes. Not fixed:
    `proj_size` not known to be 0, other inputs not known to be tensors, and files
    that use the module otherwise than calling it and reading hyperparameters or
    parameters, or name torch's class other than to construct it. Without the fix,
    set `torch._dynamo.config.allow_rnn = True`.
    """

    code = "TP512"
    name = "recurrent-module-call"
    summary = "`nn.RNN`/`nn.LSTM`/`nn.GRU` call"
    message = "calling `{ctor}` in compiled code breaks the graph (Dynamo does not trace RNN modules by default)"
    dynamo_codes = ("GB0014",)
    fix_safety = "unsafe"
    _RNN = frozenset({"torch.nn.RNN", "torch.nn.LSTM", "torch.nn.GRU"})

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        attr = ctx.self_attr(node.func)
        if attr is not None and ctx.cls is not None and ctx.cls.attr_ctors.get(attr) in self._RNN:
            self.report(ctx, node, ctor=ctx.cls.attr_ctors[attr].replace("torch.", ""))

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        attr = ctx.self_attr(node.func)
        kind = ctx.cls.attr_ctors[attr].rpartition(".")[2]
        no_fix, data = recurrent.plan(node, ctx, attr, kind)
        if no_fix is not None:
            return {"no_fix": no_fix}
        title = f"construct `self.{attr}` as `{recurrent.KINDS[kind].name}`, an `nn.{kind}` Dynamo traces"
        return self.make_fix(title, "Call", node, "unsafe", data)

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        return recurrent.apply(node, fix.data, edit)

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
    traced (GB0206 for the attribute, GB8985 when the new leaf is used
    afterwards, GB0125 for an input). `requires_grad_(False)`, and a new leaf
    that nothing reads, are traced and not reported.

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
            if ctx.self_attr(func.value) is None and ctx.kind(func.value).is_tensor and not _switches_off(node):
                if _is_parameter(func.value, ctx) or _leaf_is_read(node, ctx):
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
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = y.detach()
                return z * 2
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = y.detach().requires_grad_(False)
                return z * 2
        """,
    ]


def _switches_off(call: ast.Call) -> bool:
    """`requires_grad_(False)`: turning tracking off is traced."""
    values = [*call.args, *(k.value for k in call.keywords if k.arg == "requires_grad")]
    return bool(values) and isinstance(values[0], ast.Constant) and values[0].value is False


def _is_parameter(node: ast.expr, ctx: Context) -> bool:
    return isinstance(node, ast.Name) and node.id in {a.arg for a in ctx.node.args.args + ctx.node.args.kwonlyargs}


def _leaf_is_read(call: ast.Call, ctx: Context) -> bool:
    """Whether the new leaf is used after the call: Dynamo breaks (GB8985) only when it is.

    `z = t.requires_grad_()` and `t.requires_grad_()` leave it in a name, read anywhere else in
    the function (a loop may read it above); any other position uses the value at once.
    """
    statement = ctx.statement
    if isinstance(statement, ast.Assign) and statement.value is call and len(statement.targets) == 1:
        target = statement.targets[0]
    elif isinstance(statement, ast.Expr) and statement.value is call:
        target = call.func.value
    else:
        return True
    if not isinstance(target, ast.Name):
        return True
    inside = {id(n) for n in ast.walk(statement)}
    return any(
        isinstance(n, ast.Name) and n.id == target.id and isinstance(n.ctx, ast.Load) and id(n) not in inside
        for n in ctx.nodes()
    )


class CallToDisabledFunction(Rule):
    """## What it does
    Checks for calls from compiled code to functions of the same file decorated
    with `torch.compiler.disable` (or `torch._dynamo.disable`), wrapped by it at
    module level (`fn = torch.compiler.disable(impl)`), or wrapped at the call
    (`torch.compiler.disable(fn)(x)`).

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
        elif isinstance(func, ast.Call) and ctx.qualname(func.func) in DISABLE_DECORATORS:
            self.report(ctx, node, callee=ast.unparse(func))

    INVALID = [
        """
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
        """,
        """
        import torch
        from torch import nn


        def _stats(y):
            return y.mean().item()


        stats = torch.compiler.disable(_stats)


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                mean = stats(y)
                return y * mean
        """,
        """
        import torch
        from torch import nn


        def _shift(y):
            return y - y.mean().item()


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                y = torch.compiler.disable(_shift)(y)
                return y * 2
        """,
    ]
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


class ExplicitGraphBreak(CallRule):
    """## What it does
    Checks for `torch._dynamo.graph_break()` and `torch._dynamo.skip_frame()`
    in compiled code.

    ## Why is this bad?
    They break the graph on purpose (GB0025), or skip the whole function
    (GB4297): often a workaround for a compiler bug that has since been fixed,
    or a debugging aid that stayed.

    ## Fix safety
    Unsafe: the statement is deleted. Both calls do nothing in eager, so eager
    runs are unchanged; compiled runs trace through where the code asked them
    not to, which is the point but undoes the author's explicit choice.
    """

    code = "TP517"
    name = "explicit-graph-break"
    summary = "explicit `torch._dynamo.graph_break()`"
    message = "`{callee}()` breaks the graph on purpose; remove it once the code it guards traces"
    dynamo_codes = ("GB0025", "GB4297")
    callees = frozenset({"torch._dynamo.graph_break", "torch._dynamo.skip_frame"})
    fix_safety = "unsafe"

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        statement = ctx.statement
        if not (isinstance(statement, ast.Expr) and statement.value is node):
            return {"no_fix": "only a call that is a statement of its own can be deleted"}
        return self.make_fix("delete the explicit break", "SimpleStatementLine", statement, "unsafe")

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.RemovalSentinel":
        import libcst as cst

        return cst.RemovalSentinel.REMOVE

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                torch._dynamo.graph_break()
                return y * 2
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return y * 2
        """]


# The methods Dynamo refuses to trace (torch/_dynamo/trace_rules.py, `_GENERATOR_METHODS_THAT_GRAPH_BREAK`, 2.13).
_GENERATOR_METHODS = frozenset(
    {
        "clone_state",
        "get_offset",
        "get_state",
        "graphsafe_get_state",
        "graphsafe_set_state",
        "initial_seed",
        "manual_seed",
        "seed",
        "set_offset",
        "set_state",
    }
)
# What takes `generator=` and draws from it; each breaks with a generator there (measured, torch 2.13).
_SAMPLING_FUNCTIONS = frozenset(
    [f"torch.{name}" for name in ("randn", "rand", "randint", "randperm", "multinomial", "normal", "bernoulli")]
    + [f"torch.{name}" for name in ("poisson", "binomial", "rand_like", "randn_like", "randint_like")]
    + [f"torch.nn.init.{name}" for name in ("uniform_", "normal_", "trunc_normal_", "sparse_", "orthogonal_")]
    + [f"torch.nn.init.{kind}_{law}_" for kind in ("kaiming", "xavier") for law in ("uniform", "normal")]
)
# (`random_` breaks with or without a generator: TP513.)
_SAMPLING_METHODS = frozenset(
    ("uniform_", "normal_", "bernoulli", "bernoulli_", "exponential_", "cauchy_", "geometric_", "log_normal_")
    + ("multinomial",)
)


class GeneratorInCompiledCode(CallRule):
    """## What it does
    Checks for `torch.Generator(...)` objects created in compiled code
    (`torch.Generator(device=x.device)`, `torch.Generator().manual_seed(seed)`).
    Uses of a generator are TP522.

    ## Why is this bad?
    A generator is opaque state: Dynamo cannot create one while tracing
    (GB0363). Making it in `__init__` or in the caller instead removes this
    break but not the ones where the generator is used (TP522).

    ## Fix safety
    Unsafe: `torch.Generator(...)` becomes `TraceableGenerator(...)`, a class the
    fix writes once after the imports, whose state is the uint8 tensor
    `get_state()` returns; each draw of the file given `generator=` calls a
    dispatcher (`traceable_randn(...)`, same arguments) that draws through a
    custom operator restoring a real generator from the state. The numbers are
    `torch.Generator`'s bit for bit, eager or compiled. Unsafe because the
    object's class changes and each draw copies the state. Fixed only where
    every use of the generator is known: `manual_seed()`, `initial_seed()`,
    `get_state()`, `set_state()`, `device`, `generator=` of `torch.randn`,
    `rand`, `randint`, `randperm`, `multinomial` or `bernoulli`, or an argument
    of a function, method or submodule of the file that uses it so. Otherwise
    (returned, stored, handed to a library or to another random function)
    draw the numbers outside and pass them in.
    """

    code = "TP518"
    name = "generator-in-compiled-code"
    summary = "`torch.Generator` created in compiled code"
    message = (
        "creating a `torch.Generator` in compiled code breaks the graph; draw the numbers outside and pass them in"
    )
    dynamo_codes = ("GB0363",)
    callees = GENERATOR_CLASSES
    fix_safety = "unsafe"

    def applies(self, node: ast.Call, ctx: Context) -> bool:
        return not generators.generated(ctx.function.qualname)

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        # Where the generator goes is followed through the file when the fix is applied (FixDeclined).
        title = f"make a `{generators.CLASS_NAME}`, whose state Dynamo traces, and draw from it"
        return self.make_fix(title, "Call", node, "unsafe", (node.lineno, node.col_offset))

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        return generators.apply_creation(node, fix.data, edit)

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                generator = torch.Generator()
                return y * 2, generator
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            seed = 0

            def forward(self, x):
                y = x + 1
                noise = torch.randn(8, generator=torch.Generator(device=x.device).manual_seed(self.seed))
                return y * noise
        """,
    ]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x, generator=None):
                y = x + 1
                noise = torch.rand(8, generator=generator)
                return y * noise


        def noisy(model, x, seed):
            generator = torch.Generator().manual_seed(seed)
            return model(x + torch.randn(x.shape, generator=generator))
        """]


class GeneratorUseInCompiledCode(Rule):
    """## What it does
    Checks for uses of a `torch.Generator` in compiled code: its state
    methods (`g.manual_seed(s)`, `g.seed()`, `g.get_state()`, ...) and
    passing it to what draws random numbers (`torch.randn(..., generator=g)`,
    `torch.multinomial`, `torch.normal`, `x.uniform_(..., generator=g)`,
    `x.bernoulli`, `nn.init.normal_`, ...). Only a value known to be a
    generator is reported: a local name bound to `torch.Generator(...)` (or
    to `None` on another path), a parameter annotated `torch.Generator` (not
    `Optional`, no `None` default), a parameter that every call in its file
    passes a generator (also one defaulting to `None`), and
    `torch.default_generator`; passed as `generator=`, also a `self.`
    attribute that `__init__` does not set to `None` alone (one set from a
    constructor argument that is `None` when called is reported too, though it
    traces). A `generator=None` parameter left `None` by a call, the methods of
    a `self.` attribute (`self.env.seed()`) and the call that hands a
    generator to a function of the project (Dynamo breaks inside it, where it
    is used) are not.

    ## Why is this bad?
    Dynamo cannot put a generator into a graph: its methods read or reseed
    RNG state it does not trace (GB7650), and it cannot be an operator's
    argument (GB0055). Wherever the generator was made (in `forward`, TP518;
    in `__init__`; by the caller), each use is one more break.
    `generator=None` and the global generator trace.

    ## Fix safety
    No fix of its own: a generator that comes from outside the compiled code
    is a `torch.Generator`, and Dynamo breaks wherever it is used. Where the
    generator is made in compiled code, TP518's fix makes it a
    `TraceableGenerator` and rewrites these uses with it. Otherwise draw the
    numbers outside the compiled function and pass the tensor in, or seed the
    global generator outside and drop `generator=`.
    """

    code = "TP522"
    name = "generator-use-in-compiled-code"
    summary = "`torch.Generator` reseeded or passed to a random operator in compiled code"
    message = "{what} in compiled code breaks the graph; draw the numbers outside and pass them in"
    dynamo_codes = ("GB7650", "GB0055")
    _NO_FIX = "fixed with the generator's creation in compiled code (TP518), if any; one from outside still breaks"

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        func = node.func
        if generators.generated(ctx.function.qualname):
            return  # the generated code draws from torch.Generators: a user's draw was rewritten to call it
        if isinstance(func, ast.Attribute) and func.attr in _GENERATOR_METHODS and _known_generator(func.value, ctx):
            self.report(ctx, node, what=f"`{func.attr}()` of a `torch.Generator`")
            return
        generator = next((k.value for k in node.keywords if k.arg == "generator"), None)
        if generator is None or not (_known_generator(generator, ctx) or _generator_attribute(generator, ctx)):
            return
        callee = ctx.qualname(func)
        if callee in _SAMPLING_FUNCTIONS:
            self.report(ctx, node, what=f"passing a `torch.Generator` to `{callee}()`")
        elif (
            callee is None
            and isinstance(func, ast.Attribute)
            and func.attr in _SAMPLING_METHODS
            and ctx.kind(func.value).may_be_tensor
        ):
            self.report(ctx, node, what=f"passing a `torch.Generator` to `.{func.attr}()`")

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        return {"no_fix": self._NO_FIX}

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x, generator: torch.Generator):
                y = x + 1
                noise = torch.randn(x.shape, generator=generator)
                return y + noise


        def make_inputs(call):
            return torch.randn(8), torch.Generator().manual_seed(call)
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                generator = torch.Generator(device=x.device)
                y = y * 2
                generator.manual_seed(0)
                y = y - 1
                keep = torch.bernoulli(torch.full_like(y, 0.9), generator=generator)
                return y * keep
        """,
        """
        import torch
        from torch import nn


        def jitter(t: torch.Tensor, generator: torch.Generator):
            scale = t.abs() + 1
            return scale * torch.empty_like(t).uniform_(-1, 1, generator=generator)


        class Model(nn.Module):
            def forward(self, x, generator: torch.Generator):
                y = x + 1
                return jitter(y, generator)


        def make_inputs(call):
            return torch.randn(8), torch.Generator().manual_seed(call)
        """,
        """
        import torch
        from torch import nn


        def jitter(t, generator=None):
            scale = t.abs() + 1
            return scale * torch.rand(t.shape, generator=generator)


        class Model(nn.Module):
            def forward(self, x, generator: torch.Generator):
                y = x + 1
                return jitter(y, generator=generator)


        def make_inputs(call):
            return torch.randn(8), torch.Generator().manual_seed(call)
        """,
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x, noise):
                y = x + 1
                return y + noise


        def make_inputs(call):
            generator = torch.Generator().manual_seed(call)
            return torch.randn(8), torch.randn(8, generator=generator)
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x, generator=None):
                y = x + torch.rand(8, generator=None)
                if generator is not None:
                    y = y + 1
                return y * torch.randn(8, generator=generator)
        """,
    ]


def _known_generator(value: ast.expr, ctx: Context) -> bool:
    """`value` holds a `torch.Generator` wherever it is used this way (see TP522), and is not made
    right there (a creation in the same expression is TP518's finding)."""
    if any(isinstance(n, ast.Call) and ctx.names.resolve(n.func) in GENERATOR_CLASSES for n in ast.walk(value)):
        return False
    return _generator_value(value, ctx, _own_scope_names(ctx.node), frozenset()) == "generator"


def _generator_attribute(value: ast.expr, ctx: Context) -> bool:
    """`self.attr` that `__init__` sets to something other than `None` alone: as a `generator=`
    argument of a random operator, a generator unless it is a constructor argument left `None`."""
    attr = ctx.self_attr(value)
    return attr is not None and ctx.cls is not None and ctx.cls.attrs.get(attr) not in (None, Kind.NONE)


def _generator_value(value: ast.expr, ctx: Context, own: set[int], following: frozenset[str]) -> str | None:
    """What `value` holds: "generator", "none", or None where that is not known. Names are followed
    in the function's own scope (`own`); one being followed (a rebinding such as `g = g.manual_seed(1)`)
    is neutral there: its other bindings decide."""
    if isinstance(value, ast.Constant) and value.value is None:
        return "none"
    if isinstance(value, ast.Call):
        func = value.func
        if ctx.names.resolve(func) in GENERATOR_CLASSES:
            return "generator"
        if isinstance(func, ast.Attribute) and func.attr == "manual_seed":  # returns the generator
            return "generator" if _generator_value(func.value, ctx, own, following) is not None else None
        return None
    if isinstance(value, ast.Attribute):
        return "generator" if ctx.names.resolve(value) == "torch.default_generator" else None
    if not isinstance(value, ast.Name) or id(value) not in own:
        return None  # also a name in a lambda or nested function, or a comprehension's own variable
    if value.id in following:
        return "none"
    bindings = _bindings(ctx.node, value.id, ctx, own)
    if bindings is None:
        return None
    held = {
        "generator" if isinstance(b, ast.arg) else _generator_value(b, ctx, own, following | {value.id})
        for b in bindings
    }
    return "generator" if held in ({"generator"}, {"generator", "none"}) else None


def _bindings(
    func: ast.FunctionDef | ast.AsyncFunctionDef, name: str, ctx: Context, own: set[int]
) -> list[ast.expr | ast.arg] | None:
    """The values `func` binds `name` to in its own scope, and the parameter if it is annotated
    `torch.Generator` (not optional, no `None` default) or every call in the file passes one; None where a binding is anything else:
    another parameter, unpacking, a loop or `with` variable, `global`, a nested definition..."""
    arguments = func.args
    positional = arguments.posonlyargs + arguments.args
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    values: list[ast.expr | ast.arg] = []
    for arg, default in [*zip(positional, defaults), *zip(arguments.kwonlyargs, arguments.kw_defaults)]:
        if arg.arg == name:
            if ctx.parameters.get(name) is Kind.GENERATOR:  # every call of the function passes one (calls.py)
                values.append(arg)
                continue
            if _annotation(arg.annotation, ctx) not in GENERATOR_CLASSES or (
                isinstance(default, ast.Constant) and default.value is None
            ):
                return None
            values.append(arg)
    if name in {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}:
        return None
    assigned: set[int] = set()
    for node in ast.walk(func):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id == name and id(target) in own:
                    values.append(node.value)
                    assigned.add(id(target))
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return None
        elif node is not func and name in (getattr(node, "name", None), getattr(node, "rest", None)):
            return None  # an `except ... as`, a nested `def` or `class`, a `match` capture, an import
        elif isinstance(node, ast.alias) and node.asname == name:
            return None
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            if id(node) in own and id(node) not in assigned:
                return None  # unpacked, a loop or `with` variable, augmented, deleted, a walrus target
    return values


def _annotation(node: ast.expr | None, ctx: Context) -> str | None:
    """The qualified name a parameter annotation spells (`torch.Generator`, `"torch.Generator"`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    return ctx.names.resolve(node) if isinstance(node, (ast.Name, ast.Attribute)) else None


def _own_scope_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[int]:
    """The `Name` nodes of `func` that are its own locals (or globals): not those in a nested
    function, lambda or class, nor a comprehension's own variables."""
    found: set[int] = set()

    def visit(node: ast.AST, hidden: frozenset[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(child, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                targets = (n for g in child.generators for n in ast.walk(g.target) if isinstance(n, ast.Name))
                visit(child, hidden | {n.id for n in targets})
                continue
            if isinstance(child, ast.Name) and child.id not in hidden:
                found.add(id(child))
            visit(child, hidden)

    visit(func, frozenset())
    return found


class BuiltinIterationOverTensor(SequenceRule):
    """## What it does
    Checks for the builtins `any()` and `all()` applied to a tensor or to a
    comprehension of tensors (`any(t > 0 for t in h)`), `range()` given a tensor, and
    `list.index()`/`list.remove()` of a tensor in a list of tensors.

    ## Why is this bad?
    `any(t)` and `all(t)` iterate over the tensor and take the truth value of
    each element, a data-dependent branch (GB0170), and so does the `==` with which
    a list looks for a tensor; `range(t)` needs a Python
    integer out of tensor data, and Dynamo fails to trace the builtin (GB0059).
    (`any()` over Python values, such as sizes, is traced and not reported.)

    ## Fix safety
    No automatic fix: `t.any()` and `t.all()` return tensors, which differ from
    the builtins' Python `bool` (and for several dimensions the builtin raises);
    write the test on tensors and keep it in the graph.
    """

    code = "TP519"
    name = "builtin-iteration-over-tensor"
    summary = "`any()`/`all()`/`range()` of a tensor, `list.index()` of one"
    message = "`{callee}()` of a tensor reads tensor data into Python and breaks the graph; use tensor operations"
    dynamo_codes = ("GB0170", "GB0059")

    def check_call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func)
        func = node.func
        if name is None and isinstance(func, ast.Attribute) and func.attr in ("index", "remove") and node.args:
            # `norms.index(max(norms))`: the list compares its tensors with `==`
            elements = self.sequences.elements(func.value, ctx, python_only=True)
            if Kind.TENSOR in elements and self.sequences.is_tensor(node.args[0], ctx):
                self.report(ctx, node, callee=f"list.{func.attr}")
        if name in ("builtins.any", "builtins.all", "builtins.range"):
            if any(ctx.kind(arg).is_tensor for arg in node.args):  # not `steps=None` parameters
                self.report(ctx, node, callee=name[9:])
            elif name != "builtins.range" and node.args and isinstance(node.args[0], _COMPREHENSIONS):
                if Kind.TENSOR in Sequences().elements(node.args[0], ctx):  # any(t > 0 for t in h)
                    self.report(ctx, node, callee=name[9:])

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                positive = all(y > -10)
                return y * 2, positive
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                steps = list(range(y.argmax()))
                return y * 2, steps
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                rows = x.view(2, 4)
                finite = all(torch.isfinite(row).all() for row in rows)
                return rows * 2, finite
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                norms = [x.norm(), (x * 2).norm(), (x - 1).norm()]
                best = norms.index(max(norms))
                return x * best
        """,
    ]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                positive = (y > -10).all()
                big = any(size > 4 for size in y.shape)
                return y * 2, positive, big
        """]


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp)
# Functions and tensor methods given sizes: the first positional argument that is one (those after
# it are too: dims, lengths) and the keywords that are.
_SIZE_FUNCTIONS = {
    **dict.fromkeys(["torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn"], (0, ("size",))),
    **dict.fromkeys(["torch.arange", "torch.eye"], (0, ("end", "n", "m"))),
    **dict.fromkeys(["torch.topk", "torch.kthvalue"], (1, ("k",))),
    "torch.multinomial": (1, ("num_samples",)),
    "operator.index": (0, ()),
}
_SIZE_METHODS = {
    **dict.fromkeys(["view", "reshape", "expand", "repeat", "new_zeros", "new_ones", "new_empty"], (0, ("size",))),
    **dict.fromkeys(["topk", "kthvalue"], (0, ("k",))),
    "narrow": (1, ("start", "length")),  # narrow(dim, start, length)
}


class TensorAsPythonInt(SequenceRule):
    """## What it does
    Checks for tensors given where Python or an operator needs an integer: slice bounds
    (`h[:, :n]`), the index of a list or tuple, the count of a sequence repetition
    (`[0] * n`), sizes (`torch.zeros(n)`, `torch.arange(n)`, `h.narrow(0, 0, n)`,
    `h.view(n, -1)`) and `operator.index(n)`.

    ## Why is this bad?
    Python calls `n.__index__()`, which reads the tensor's value (`.item()`, GB0124), or the
    result's shape depends on it (GB0033): Dynamo breaks the graph. (A bare `forward`
    parameter is not reported: unannotated, it is often an int.)

    ## Fix safety
    No automatic fix: keep the bound static (a shape, a config value) and mask instead of
    slicing, or compute the size outside the compiled function and pass it in as an int.
    """

    code = "TP520"
    name = "tensor-as-python-int"
    summary = "a tensor used as a slice bound, list index, repeat count or size"
    message = "a tensor used as {what} is read into a Python int and breaks the graph; keep sizes static or mask"
    dynamo_codes = ("GB0124", "GB0033")

    def visit_Subscript(self, node: ast.Subscript, ctx: Context) -> None:
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for part in parts:
            if isinstance(part, ast.Slice):
                if any(self._is_int_tensor(b, ctx) for b in (part.lower, part.upper, part.step)):
                    self.report(ctx, node, what="a slice bound")
                    return
        if self._is_int_tensor(node.slice, ctx) and self.sequences.elements(node.value, ctx, python_only=True):
            self.report(ctx, node, what="a list index")

    def visit_BinOp(self, node: ast.BinOp, ctx: Context) -> None:
        if not isinstance(node.op, ast.Mult):
            return
        for sequence, count in ((node.left, node.right), (node.right, node.left)):
            is_sequence = isinstance(sequence, (ast.List, ast.Tuple)) or (
                isinstance(sequence, ast.Constant) and isinstance(sequence.value, str)
            )
            if is_sequence and self._is_int_tensor(count, ctx):
                self.report(ctx, node, what="a repeat count")
                return

    def check_call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func)
        func = node.func
        if name in _SIZE_FUNCTIONS:
            first, keywords = _SIZE_FUNCTIONS[name]
        elif name is None and isinstance(func, ast.Attribute) and func.attr in _SIZE_METHODS:
            if not ctx.kind(func.value).may_be_tensor:
                return
            first, keywords = _SIZE_METHODS[func.attr]
        else:
            return
        sizes = [a for a in node.args[first:] if not isinstance(a, ast.Starred)]
        sizes += [k.value for k in node.keywords if k.arg in keywords]
        flat = [e for a in sizes for e in (a.elts if isinstance(a, (ast.Tuple, ast.List)) else [a])]
        if any(self._is_int_tensor(size, ctx) for size in flat):
            self.report(ctx, node, what="a size")

    @staticmethod
    def _is_int_tensor(node: ast.expr | None, ctx: Context) -> bool:
        """A tensor computed in this function: unannotated parameters are only guessed to be
        tensors, and sizes often come from tuples passed in (`height, width = dims`)."""
        return node is not None and ctx.kind(node).is_tensor and _computed(node, ctx, scratch(ctx), 2)

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                kept = (y > 0).sum()
                return y[:kept] * 2
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                steps = (x > 0).sum()
                return torch.arange(steps) * 2
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                scores = x.softmax(-1)
                confident = (scores > 0.1).sum()
                return scores.topk(confident).values.sum()
        """,
    ]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                kept = y.shape[0] // 2
                positions = torch.arange(y.shape[0])
                return y[:kept] * 2, positions.view(2, -1), y.narrow(0, 0, kept), [0] * kept
        """]


def _tensor_operation(call: ast.Call, typer: Typer) -> bool:
    """A tensor method, or a torch function given a tensor: not a submodule (whose outputs may
    hold ints), nor `torch.div(n, 2)` of ints, which Dynamo folds to a constant."""
    name = typer.qualname(call.func)
    if name is not None:
        arguments = [*call.args, *(k.value for k in call.keywords)]
        return name.startswith("torch.") and any(typer.kind(a).may_be_tensor for a in arguments)
    return isinstance(call.func, ast.Attribute) and typer.kind(call.func.value).may_be_tensor


def _computed(node: ast.expr, ctx: Context, typer: Typer, depth: int) -> bool:
    """`node` calls a tensor operation, or reads a name the function assigned from one (`depth`
    assignments back). `typer` is a scratch one: the other statements are typed out of order."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and typer.kind(sub).is_tensor and _tensor_operation(sub, typer):
            return True
    if depth == 0:
        return False
    names = _operands(node)
    for statement in ctx.nodes():
        if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and statement.value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            bound = {t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)}
            if bound & names and _computed(statement.value, ctx, typer, depth - 1):
                return True
    return False


def _operands(node: ast.expr) -> set[str]:
    """Names whose values flow into `node` through arithmetic and indexing (not through calls,
    whose results `_computed` judges by the callee)."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.BinOp):
        return _operands(node.left) | _operands(node.right)
    if isinstance(node, ast.UnaryOp):
        return _operands(node.operand)
    if isinstance(node, ast.Subscript):
        return _operands(node.value)
    if isinstance(node, ast.IfExp):
        return _operands(node.body) | _operands(node.orelse)
    return set()


class BuiltinOperatorOnTensor(CallRule):
    """## What it does
    Checks for the builtins `pow()`, `chr()`, `hex()`, `oct()` and `bin()` given a tensor.

    ## Why is this bad?
    Dynamo has no handler for these builtins with tensor arguments (GB0059): `pow(h, 2)`
    breaks the graph where `h ** 2` and `torch.pow(h, 2)` do not; the others need a
    Python int out of tensor data.

    ## Fix safety
    No automatic fix: write `h ** 2` or `torch.pow(h, 2)` (the same operator for tensors);
    the number formatting has no traced equivalent.
    """

    code = "TP521"
    name = "builtin-operator-on-tensor"
    summary = "`pow()`, `chr()`, `hex()` ... of a tensor"
    message = "the builtin `{callee}()` of a tensor breaks the graph; use the tensor operator"
    dynamo_codes = ("GB0059",)
    callees = frozenset({"builtins.pow", "builtins.chr", "builtins.hex", "builtins.oct", "builtins.bin"})

    def applies(self, node: ast.Call, ctx: Context) -> bool:
        return any(ctx.kind(a).is_tensor for a in node.args)

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                energy = pow(x, 2).mean()
                return x / energy
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                energy = (x**2).mean() + torch.pow(x, 2).sum()
                scale = pow(x.shape[0], 0.5)
                return x / energy * scale
        """]


class PackedSequenceCall(CallRule):
    """## What it does
    Checks for `pack_padded_sequence` and `pack_sequence` in compiled code.

    ## Why is this bad?
    Dynamo skips these functions of `torch.nn.utils.rnn` (GB0007): packing
    reads the lengths into Python and builds a `PackedSequence` whose data has
    as many rows as the lengths add up to. The graph breaks at the call, and the
    recurrent module it feeds breaks again (TP512).

    ## Fix safety
    No automatic fix. Run the recurrent module on the padded batch and mask the
    padded steps (`lengths` compared with `torch.arange`), or pack outside the
    compiled function.
    """

    code = "TP523"
    name = "packed-sequence-call"
    summary = "`pack_padded_sequence`/`pack_sequence`"
    message = "`{callee}()` in compiled code breaks the graph (Dynamo skips it); mask the padded steps instead"
    dynamo_codes = ("GB0007",)
    callees = frozenset({"torch.nn.utils.rnn.pack_padded_sequence", "torch.nn.utils.rnn.pack_sequence"})

    INVALID = ["""
        import torch
        from torch import nn
        from torch.nn.utils.rnn import pack_padded_sequence


        class Model(nn.Module):
            def forward(self, x):
                steps = x.reshape(2, 4, 1)
                packed = pack_padded_sequence(steps, [4, 2], batch_first=True)
                return x * packed.data.sum()
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                steps = x.reshape(2, 4, 1)
                valid = torch.arange(4) < torch.tensor([4, 2])[:, None]
                return x * (steps.squeeze(-1) * valid).sum()
        """]
