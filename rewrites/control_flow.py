"""TP2xx: control flow that depends on tensor values (`if`, `while`, ternaries, `and`/`or`, asserts, sorting)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from rewrites import branches, early_exit, sequences, stacking, state_updates, where_proof
from rewrites.sequences import SequenceRule
from rewrites.conversions import atom, with_parens_of
from transpiler.analysis.walker import Context
from transpiler.lint.rule import Fix, FixApplicability
from transpiler.analysis.kinds import Kind
from transpiler.lint.rule import Rule

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.lint.rule import Edit


def data_dependent(test: ast.expr, ctx: Context) -> bool:
    """True when Python must read a tensor's value to decide `test`."""
    if isinstance(test, ast.BoolOp):
        return any(data_dependent(v, ctx) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return data_dependent(test.operand, ctx)
    return ctx.kind(test).is_tensor


_REPORTING_CALLS = frozenset({"builtins.print", "warnings.warn", "warnings.warn_explicit"})


def _reports_only(statement: ast.stmt, ctx: Context) -> bool:
    """A statement that only reports: a print/logging/warnings call, or such calls already
    guarded by `if not torch.compiler.is_compiling():`."""
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.If):
        test = statement.test
        guarded = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Call)
        name = (ctx.qualname(test.operand.func) or "") if guarded else ""
        return (
            name.endswith("is_compiling")
            and not statement.orelse
            and all(_reports_only(s, ctx) for s in statement.body)
        )
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return False
    func = statement.value.func
    name = ctx.qualname(func) or ""
    if name in _REPORTING_CALLS or name.startswith("logging."):
        return True
    return isinstance(func, ast.Attribute) and ctx.kind(func.value) is Kind.LOGGER


def _check_and_report(node: ast.If, ctx: Context, elifs: dict[int, bool]) -> bool:
    """`if <number read from a tensor>: <reports only>` (`if not math.isfinite(loss): logger.warning(...)`):
    Dynamo breaks at the conversion in the test, and the whole check exists for its report, so it is
    reported here too (on the same statement) to get the report fix: the check runs only when not compiling."""
    if node.orelse or id(node) in elifs or not all(_reports_only(s, ctx) for s in node.body):
        return False
    return any(isinstance(n, ast.expr) and ctx.kind(n) is Kind.DATA_SCALAR for n in ast.walk(node.test))


def _is_compile_guard(node: "cst.If") -> bool:
    """`if not <...>.is_compiling():` without `else`, as the side-effect fixes write it."""
    import libcst as cst

    test = node.test
    return (
        node.orelse is None
        and isinstance(test, cst.UnaryOperation)
        and isinstance(test.operator, cst.Not)
        and isinstance(test.expression, cst.Call)
        and isinstance(test.expression.func, cst.Attribute)
        and test.expression.func.attr.value == "is_compiling"
    )


def claim(test: ast.expr, ctx: Context) -> None:
    """Mark `test` and its `and`/`or`/`not` parts as reported by the enclosing construct."""
    ctx.claimed.add(id(test))
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            claim(value, ctx)
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        claim(test.operand, ctx)


class DataDependentIf(Rule):
    """## What it does
    Checks for `if` statements whose condition is a tensor value, such as
    `if x.sum() > 0:` or `if mask.any():`.

    ## Why is this bad?
    Python needs a `bool` to pick a branch, so Dynamo must stop the graph, run
    it, read the value back from the device and continue in a new graph
    (GB0170). Conditions on shapes, `dim()`, dtypes or `self.training` are fine:
    Dynamo knows them at compile time.

    ## Fix safety
    Safe for a check that only reports: an `if` without `else` whose body is
    only `print`, logging and `warnings.warn` calls (guarded or not) becomes
    `if not torch.compiler.is_compiling() and <cond>:`; eager runs evaluate the
    condition and report exactly as before, and compiled runs skip the check.
    Such a check on a number read from a tensor (`if not math.isfinite(loss):`,
    `if kl.item() < 0.1:`), where Dynamo breaks at the conversion in the
    condition, is reported here too (the same statement) and fixed alike.
    A branch whose reports come first and whose other statements are
    assignments (`warnings.warn(...)` then `x = torch.nan_to_num(x)`) splits
    in two: the reports become such a check, the assignments `torch.where`
    (safe or unsafe as below); the pure condition is evaluated twice in eager
    runs.

    Safe when proven equal (`rewrites/where_proof.py`), else unsafe. When every branch of the `if`/`elif`/`else` chain is a sequence of
    pure tensor assignments (`name = expr` calling only torch operators and tensor
    methods that are not in place and draw no random numbers), each assigned
    name becomes `name = torch.where(cond, then_value, else_value)` (nested for
    `elif`; a branch that leaves a name alone gives its value from before the
    `if`). Values that later statements of their branch read become temporaries
    (`y_then = ...`). A tensor condition `t` becomes `t != 0` (NaN is true on both
    sides), `and`/`or`/`not` become `&`/`|`/`~`. `torch.where` evaluates every
    branch and broadcasts and type-promotes their values: the result equals the
    original only when both values have the same shape and dtype and the
    condition has one element (where `if` would raise, `torch.where` does not);
    an untaken branch that would raise now raises; the result is always a new
    tensor (`y = x` in a branch made an alias); and gradients become NaN where
    the untaken branch is not finite (`torch.log` of a negative value). Python
    values leading an `and` (`if mask is not None and mask.any():` without
    `else`) stay a Python `if` around the rewrite. A name one branch assigns for its own
    use (unbound before, read nowhere else) becomes a temporary.

    The `torch.where` rewrite is a safe fix, applied by default, when it is proven
    equal: the condition is a one-element tensor (`x.sum() > 0`, `m.any()`, `not s`
    with `s = x.amax()`); each assigned name has the same symbolic shape and dtype
    and takes gradients from the same tensors in every branch; the arms use only
    operations that cannot raise and keep a zero gradient zero (`+`, `-`, `*` or `/`
    by a finite literal, `relu`, `clone`, `zeros_like`, `torch.where`); an `elif`
    condition cannot raise (`sum`, `any`, `all`, comparisons). A dtype known only
    symbolically (`dtype(x)` of a parameter) may be boolean or complex at run
    time, so each value carries the dtype categories it may fall in: an arm that
    would raise on one of them is not proven (`-x` and `x - 1` of booleans,
    `relu` and `nan_to_num` of complex tensors, `x < 0` of complex in an `elif`),
    and `b + 1` of a boolean, int64, has its own dtype. Values known floating or
    complex (the output of a `nn.Linear`, `nn.Conv*`, `nn.Embedding` or norm
    submodule, whose parameters set its dtype; `exp`, `sigmoid`, `tanh`, ...;
    a `.float()` cast) keep their dtype through a float literal (`h * 0.5`).
    The title of an unsafe one says what is not proven. The result is always a
    new tensor (an alias made by `y = x` is not kept).

    An `if` on a tensor whose body only raises (`if (x < 0).any(): raise
    ValueError("...")`) becomes `torch._assert_async(~cond, "...")` (unsafe: it
    raises `RuntimeError`; an f-string message keeps its text, its fields as
    `{source}`).

    When a branch ends in `return` (`if c: return a` followed by the rest of the
    function), the two paths become nested functions `then_branch` and
    `else_branch` taking the tensors they read, and `return torch.cond(cond,
    then_branch, else_branch, (tensors...))`; branches that unpack (`a, b =
    x.chunk(2)`) become such functions returning what they assign, and `a, b =
    torch.cond(...)`. Values that may alias an input are returned as `.clone()`.
    `torch.cond` raises when the branches return different shapes or dtypes,
    runs the branches through Dynamo even in eager mode (the first call is
    slow), and needs a one-element condition.

    An `if` without `else` whose body updates module state in place
    (`self.scale.data.copy_(v)`, a registered buffer's `fill_(v)`, `copy_(v)` or
    `zero_()`), besides pure assignments to names local to the branch, is the
    one-time initialisation of research code: `cond = <test>` is read once,
    the assignments run on every call, and each update becomes
    `t.copy_(torch.where(cond, v, t))`, writing the old values back where the
    condition is false (unsafe: the new values are computed, and may raise, on
    every call; a buffer written from a value that requires grad requires grad
    afterwards; only `.data` and buffers, never a parameter autograd records).

    `if <tensor>: break` directly in the body of a `for` loop over `range()`
    of Python numbers (or over submodules) bounds the loop (unsafe): every
    iteration runs, the test becomes `stopped = stopped | <test>`, and each
    value the loop carries past it is assigned as `x_step = ...` and
    `x = torch.where(stopped, x.expand_as(x_step), x_step)`, so after the
    loop it holds the original's bits. Unsafe: the iterations after the stop
    run (and call submodules) for nothing, and a shape that changes from one
    iteration to the next raises in `expand_as` (`torch.cat` in a carried
    update is refused).

    Left alone (with the reason shown): branches with calls that may have side
    effects (submodules, `print`, random numbers, in-place methods, `out=`),
    augmented or attribute/subscript assignments, `raise`/`assert`, values not
    known to be tensors, names assigned on one path only and unbound before, and
    conditions that mix tensors with Python values.
    """

    code = "TP201"
    name = "data-dependent-if"
    summary = "`if` on a tensor value"
    message = "`if` on a tensor value breaks the graph; use `torch.where` or `torch.cond`"
    dynamo_codes = ("GB0170",)
    fix_safety = "safe or unsafe"

    def visit_If(self, node: ast.If, ctx: Context) -> None:
        elifs = self._elifs_of(ctx)
        if data_dependent(node.test, ctx) or _check_and_report(node, ctx, elifs):
            claim(node.test, ctx)
            self.report(ctx, node.test, **self.plan_if(node, ctx, elifs.get(id(node))))
            for inner in branches.if_chain_nodes(node)[1:]:
                elifs[id(inner)] = True

    def _elifs_of(self, ctx: Context) -> dict[int, bool]:
        """The `elif`s of the function: True for those of a data-dependent `if` (rewritten with it),
        False for the others (an `if` on a Python value, or one Dynamo folds away unvisited)."""
        if getattr(self, "_ctx", None) is not ctx:
            self._ctx, self._elifs = ctx, {}
            for node in ctx.nodes():
                if isinstance(node, ast.If):
                    self._elifs.update((id(inner), False) for inner in branches.if_chain_nodes(node)[1:])
        return self._elifs

    def plan_if(self, node: ast.If, ctx: Context, elif_of: bool | None) -> dict:
        if elif_of:
            return {"no_fix": "an `elif` is rewritten together with its `if` (see the finding there)"}
        if elif_of is None and not node.orelse and all(_reports_only(s, ctx) for s in node.body):
            title = "run the check only when not compiling"
            return self.make_fix(title, "If", node, safety="safe", data=("report",))
        if elif_of is None and not node.orelse and len(node.body) == 1 and isinstance(node.body[0], ast.Raise):
            return self._plan_raise(node, ctx)
        if elif_of is None and not node.orelse and len(node.body) == 1 and isinstance(node.body[0], ast.Break):
            bounded = early_exit.plan(node, ctx)
            if isinstance(bounded, str):
                return {"no_fix": bounded}
            title = "run every iteration, the loop's values kept by `torch.where` once the condition holds"
            return self.make_fix(title, "For", bounded[1], safety="unsafe", data=("bounded", bounded[0]))
        if elif_of is None and not node.orelse:
            split = self._plan_report_then_where(node, ctx)
            if split is not None:
                return split
        skip = branches.static_prefix(node, ctx) if elif_of is None else 0
        where = branches.where_plan(node, ctx, skip)
        if isinstance(where, tuple):
            unproven = where_proof.where_unproven(node, ctx, skip, where[3])
            title, safety = _where_title(unproven)
            return self.make_fix(title, "If", node, safety=safety, data=("where", elif_of is False, skip, where))
        if elif_of is not None:
            return {"no_fix": where}
        updates = state_updates.plan(node, ctx)
        if isinstance(updates, tuple):
            title = "apply the in-place updates on every call, through `torch.where`"
            return self.make_fix(title, "If", node, safety="unsafe", data=("updates", updates))
        if state_updates.updates_state(node):  # `torch.cond` takes no in-place updates either
            return {"no_fix": updates}
        _, bodies = branches.if_chain(node)
        statements = [s for body in bodies for s in body]
        # Returns and unpacking need `torch.cond`; otherwise say why `torch.where` does not fit.
        needs_cond = any(isinstance(s, ast.Return) or _unpacks(s) for s in statements)
        cond = branches.cond_plan(node, ctx)
        if isinstance(cond, str):
            return {"no_fix": cond if needs_cond else where}
        title = "replace the branches with `torch.cond`"
        target, kind = (node, "If") if cond[3] < 0 else (ctx.node, "FunctionDef")
        return self.make_fix(title, kind, target, safety="unsafe", data=("cond", cond))

    def _plan_report_then_where(self, node: ast.If, ctx: Context) -> dict | None:
        """`if c: <reports>; <assignments>` (`warnings.warn(...)` then `x = torch.nan_to_num(x)`): the reports
        become the check that runs only when not compiling, the assignments `torch.where`. Both evaluate the
        pure condition `c` (twice in eager runs), and the reports come first, reading what they read before."""
        count = next((i for i, s in enumerate(node.body) if not _reports_only(s, ctx)), len(node.body))
        rest = node.body[count:]
        if not count or not rest or any(_reports_only(s, ctx) for s in rest):
            return None
        if branches.impurity(node.test, ctx.typer) is not None:
            return None
        assigning = ast.copy_location(ast.If(test=node.test, body=rest, orelse=[]), node)
        assigning.end_lineno, assigning.end_col_offset = node.end_lineno, node.end_col_offset
        where = branches.where_plan(assigning, ctx, 0)
        if not isinstance(where, tuple):
            return None
        title, safety = _where_title(where_proof.where_unproven(assigning, ctx, 0, where[3]))
        title = f"run the report only when not compiling, and {title}"
        return self.make_fix(title, "If", node, safety=safety, data=("report then where", count, where))

    def _plan_raise(self, node: ast.If, ctx: Context) -> dict:
        """`if <tensor>: raise E(msg)`, a guard: `torch._assert_async(~<tensor>, msg)` stays in the graph."""
        recipe = branches.bool_recipe(node.test, ctx.typer)
        if recipe is None:
            return {"no_fix": f"the condition `{ast.unparse(node.test)}` is not only tensors"}
        exc = node.body[0].exc
        message = exc.args[0] if isinstance(exc, ast.Call) and exc.args else None
        how = "fstring" if isinstance(message, ast.JoinedStr) else "condition"
        how = "keep" if isinstance(message, ast.Constant) and isinstance(message.value, str) else how
        title = "replace the guard with `torch._assert_async`"
        return self.make_fix(title, "If", node, safety="unsafe", data=("raise", ("not", recipe), how))

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode | cst.FlattenSentinel":
        how, *rest = fix.data
        if how == "report":
            return self._apply_report(node, edit)
        if how == "report then where":
            import libcst as cst

            count, where = rest
            statements = list(node.body.body)
            report = self._apply_report(node.with_changes(body=node.body.with_changes(body=statements[:count])), edit)
            assigning = node.with_changes(body=node.body.with_changes(body=statements[count:]), leading_lines=[])
            lines = self._apply_where(assigning, False, 0, where, edit)
            return cst.FlattenSentinel([report, *lines.nodes])
        if how == "raise":
            return self._apply_raise(node, *rest, edit)
        if how == "bounded":
            return early_exit.rewrite(node, *rest, edit)
        if how == "updates":
            import libcst as cst

            lines = state_updates.statements(node, *rest, edit)
            comments = [*node.leading_lines, *branches.chain_comments(node), *lines[0].leading_lines]
            lines[0] = lines[0].with_changes(leading_lines=comments)
            return cst.FlattenSentinel(lines)
        return self._apply_where(node, *rest, edit) if how == "where" else self._apply_cond(node, *rest, edit)

    @staticmethod
    def _apply_report(node: "cst.If", edit: "Edit") -> "cst.If":
        """`if not is_compiling() and (cond):`, with the body's own guards (now redundant) unwrapped."""
        import libcst as cst

        test = node.test
        if isinstance(test, cst.BooleanOperation | cst.IfExp | cst.Lambda | cst.NamedExpr) and not test.lpar:
            test = test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        guard = cst.UnaryOperation(cst.Not(), cst.Call(edit.torch("compiler.is_compiling")))
        body = []
        for statement in node.body.body if isinstance(node.body, cst.IndentedBlock) else ():
            if (
                isinstance(statement, cst.If)
                and _is_compile_guard(statement)
                and isinstance(statement.body, cst.IndentedBlock)
            ):
                inner = list(statement.body.body)
                inner[0] = inner[0].with_changes(leading_lines=statement.leading_lines)
                body += inner
            else:
                body.append(statement)
        new_body = node.body.with_changes(body=body) if body else node.body
        return node.with_changes(test=cst.BooleanOperation(guard, cst.And(), test), body=new_body)

    @staticmethod
    def _apply_raise(node: "cst.If", recipe: branches.Recipe, how: str, edit: "Edit") -> "cst.SimpleStatementLine":
        import libcst as cst

        (raised,) = branches.small_statements(node.body)
        exc = raised.exc
        message = exc.args[0].value if isinstance(exc, cst.Call) and exc.args else None
        condition = branches.build_condition(cst.UnaryOperation(cst.Not(), node.test), recipe)
        if how == "condition":
            name = _code(exc.func if isinstance(exc, cst.Call) else exc)
            text = branches.string(f"{name} when {_code(node.test)}")
        else:
            text = _literal_message(message, node.test, how)
        call = cst.Call(edit.torch("_assert_async"), [cst.Arg(condition), cst.Arg(text)])
        lines = [*node.leading_lines, *branches.chain_comments(node)]
        return cst.SimpleStatementLine([cst.Expr(call)], leading_lines=lines)

    @staticmethod
    def _apply_where(node: "cst.If", is_elif: bool, skip: int, data: tuple, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        if skip:  # `if flag and t:` becomes `if flag:` around the rewrite of `if t:`
            operands = branches.bool_operands(node.test)
            lines = branches.where_statements(node.with_changes(test=branches.join_and(operands[skip:])), data, edit)
            lines[0] = lines[0].with_changes(leading_lines=branches.chain_comments(node, header=False))
            if isinstance(node.body, cst.IndentedBlock):  # keeps the comment of the `if` line
                body = node.body.with_changes(body=lines, footer=[])
            else:
                body = cst.IndentedBlock(lines)
            return node.with_changes(test=branches.join_and(operands[:skip]), body=body)
        lines = branches.where_statements(node, data, edit)
        comments = branches.chain_comments(node)
        if is_elif:  # `elif c:` becomes `else:` around the new statements
            lines[0] = lines[0].with_changes(leading_lines=comments)
            return cst.Else(cst.IndentedBlock(lines), leading_lines=node.leading_lines)
        lines[0] = lines[0].with_changes(leading_lines=[*node.leading_lines, *comments])
        return cst.FlattenSentinel(lines)

    @staticmethod
    def _apply_cond(node: "cst.If | cst.FunctionDef", data: tuple, edit: "Edit") -> "cst.CSTNode":
        """`node` is the `if` when both branches return, else the function: the statements after
        the `if` move into the branch that falls through to them."""
        import libcst as cst

        body = list(node.body.body) if isinstance(node, cst.FunctionDef) else [node]
        position = branches.line_index(body, data[3]) if isinstance(node, cst.FunctionDef) else 0
        branch = body[position]
        rest = body[position + 1 :] if isinstance(node, cst.FunctionDef) else []
        lines = branches.cond_statements(branch, rest, data, edit)
        comments = branches.comment_lines(getattr(branch.body, "header", None))
        if branch.orelse is not None:
            comments += [line for line in branch.orelse.leading_lines if line.comment is not None]
            comments += branches.comment_lines(getattr(branch.orelse.body, "header", None))
        lines[0] = lines[0].with_changes(leading_lines=[*branch.leading_lines, *comments])
        if isinstance(node, cst.FunctionDef):
            return node.with_changes(body=node.body.with_changes(body=[*body[:position], *lines]))
        return cst.FlattenSentinel(lines)

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                if y.sum() > 0:
                    y = y * 2
                return y - 1
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                if torch.isnan(y).any():
                    y = torch.zeros_like(y)
                return y - 1
        """,
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                y = torch.where(y.sum() > 0, y * 2, y)
                return y - 1
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                if x.shape[0] > 1 and x.dim() == 1 and not self.training:
                    y = y * 2
                return y - 1
        """,
    ]


class DataDependentWhile(Rule):
    """## What it does
    Checks for `while` loops whose condition is a tensor value.

    ## Why is this bad?
    Every test of the condition reads a tensor value back into Python: the graph
    breaks at each iteration (GB0170), and a break inside a loop makes Dynamo
    give up on the whole function.

    ## Fix safety
    Unsafe. When the body is only pure tensor assignments, the loop becomes
    `torch.while_loop(loop_cond, loop_body, (a, b))` over the names it assigns
    (tensors before the loop; a name used only inside stays local to the body
    function; other tensors are read as closures; values that may alias are
    returned as `.clone()`), then `torch.where` on the condition's first value
    keeps the inputs of a loop that runs zero times (whose gradient
    `torch.while_loop`'s backward drops on torch 2.13). It runs the same
    iterations, but `torch.while_loop` raises when an iteration changes a carried
    shape or dtype (the fix title says when the analysis did not prove them
    constant) and runs through Dynamo even in eager mode. Left alone: `break`/`continue`, `if` or calls in the body, Python
    counters, `while ... else`, conditions mixing Python values.
    """

    code = "TP202"
    name = "data-dependent-while"
    summary = "`while` on a tensor value"
    message = "`while` on a tensor value breaks the graph at every iteration; bound the loop by a Python int"
    dynamo_codes = ("GB0170",)

    fix_safety = "unsafe"

    def visit_While(self, node: ast.While, ctx: Context) -> None:
        if data_dependent(node.test, ctx):
            claim(node.test, ctx)
            plan = branches.while_plan(node, ctx)
            if isinstance(plan, str):
                self.report(ctx, node.test, no_fix=plan)
                return
            unproven = where_proof.carried_unproven(node, ctx, plan[1])
            title = "replace the loop with `torch.while_loop`"
            title += f" (carried shapes not proven constant: {unproven})" if unproven else ""
            self.report(ctx, node.test, **self.make_fix(title, "While", node, safety="unsafe", data=plan))

    def apply_fix(self, node: "cst.While", fix: Fix, edit: "Edit") -> "cst.FlattenSentinel":
        import libcst as cst

        lines = branches.while_statements(node, fix.data, edit)
        comments = branches.comment_lines(getattr(node.body, "header", None))
        lines[0] = lines[0].with_changes(leading_lines=[*node.leading_lines, *comments])
        return cst.FlattenSentinel(lines)

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x.abs() + 1
                while y.mean() < 100:  # an empty or NaN input ends the loop at once: its mean is NaN
                    y = y * 2
                return y
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x.abs() + 1
                for _ in range(4):
                    y = torch.where(y.sum() < 100, y * 2, y)
                return y
        """]


class DataDependentTernary(Rule):
    """## What it does
    Checks for conditional expressions (`a if cond else b`) whose condition is a
    tensor value.

    ## Why is this bad?
    Like a data-dependent `if`, the expression needs the tensor's value in
    Python: a graph break (GB0170).

    ## Fix safety
    Safe when proven equal as for TP201 (one-element condition, sides of equal
    symbolic shape, dtype and gradient sources, total operations with bounded
    derivatives), else unsafe. When both sides are pure tensor expressions (torch operators and
    tensor methods, nothing in place or random), the expression becomes
    `torch.where(cond, a, b)`, with a numeric condition `t` written `t != 0`.
    `torch.where` evaluates both sides and broadcasts and type-promotes them: the
    result equals the original only when `a` and `b` have the same shape and
    dtype and the condition has one element; a side that would raise now always
    runs, and gradients become NaN where the untaken side is not finite. Left alone: sides with possible side effects, sides not known to be
    tensors (`y if c else 0.0` would turn a Python number into a tensor), and
    conditions that mix tensors with Python values.
    """

    code = "TP203"
    name = "data-dependent-ternary"
    summary = "conditional expression on a tensor value"
    message = "conditional expression on a tensor value breaks the graph; use `torch.where`"
    dynamo_codes = ("GB0170",)

    fix_safety = "safe or unsafe"

    def visit_IfExp(self, node: ast.IfExp, ctx: Context) -> None:
        if data_dependent(node.test, ctx):
            claim(node.test, ctx)
            self.report(ctx, node)

    def plan(self, node: ast.IfExp, ctx: Context) -> dict:
        recipe = branches.bool_recipe(node.test, ctx.typer)
        if recipe is None:
            return {"no_fix": f"the condition `{ast.unparse(node.test)}` is not only tensors"}
        for side in (node.body, node.orelse):
            reason = branches.impurity(side, ctx.typer)
            if reason is not None:
                return {"no_fix": f"`torch.where` would evaluate both sides, and {reason}"}
            if not ctx.kind(side).is_tensor:
                return {"no_fix": f"`{ast.unparse(side)}` is not known to be a tensor"}
        title, safety = _where_title(where_proof.ternary_unproven(node, ctx))
        return self.make_fix(title, "IfExp", node, safety=safety, data=(recipe,))

    def apply_fix(self, node: "cst.IfExp", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        condition = branches.build_condition(node.test, fix.data[0])
        args = [cst.Arg(condition), cst.Arg(node.body), cst.Arg(node.orelse)]
        return cst.Call(edit.torch("where"), args, lpar=node.lpar, rpar=node.rpar)

    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = y * 2 if y.mean() > 0 else y * 3
                return z
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                z = torch.where(y.mean() > 0, y * 2, y * 3)
                return z
        """]


class TensorTruthinessInBoolOp(Rule):
    """## What it does
    Checks for `and`, `or` and `not` applied to tensors outside an `if`/`while`
    condition (for example `valid = a.any() or b.any()`).

    ## Why is this bad?
    `and`/`or`/`not` call `bool()` on their operands, which reads a tensor value
    into Python: a graph break (GB0170 for `and`/`or`, GB0033 for `not`).

    ## Fix safety
    Unsafe. When every operand is a boolean tensor, `a and b` becomes `a & b`,
    `a or b` becomes `a | b`, and `not t` becomes `~t` (`t == 0` for a numeric
    tensor). The value matches for one-element operands, but the result is now a
    tensor where `not` gave a Python `bool`, operands of different shapes
    broadcast instead of raising, and the right-hand side is always evaluated
    (so it must be pure). Left alone: operands that are not boolean tensors
    (`and`/`or` return one of their operands, not a truth value) and right-hand
    sides with possible side effects.
    """

    code = "TP204"
    name = "tensor-truthiness-in-bool-op"
    summary = "`and`/`or`/`not` on tensors"
    message = "`{op}` on a tensor calls `bool()` and breaks the graph; use `{replacement}`"
    dynamo_codes = ("GB0170", "GB0033")

    fix_safety = "unsafe"

    def visit_BoolOp(self, node: ast.BoolOp, ctx: Context) -> None:
        if id(node) not in ctx.claimed and any(ctx.kind(v).is_tensor for v in node.values[:-1]):
            is_and = isinstance(node.op, ast.And)
            self.report(ctx, node, op="and" if is_and else "or", replacement="&" if is_and else "|")

    def visit_UnaryOp(self, node: ast.UnaryOp, ctx: Context) -> None:
        if isinstance(node.op, ast.Not) and id(node) not in ctx.claimed and ctx.kind(node.operand).is_tensor:
            self.report(ctx, node, op="not", replacement="~")

    def plan(self, node: ast.BoolOp | ast.UnaryOp, ctx: Context) -> dict:
        if isinstance(node, ast.UnaryOp):
            recipe = ("zero",) if ctx.kind(node.operand) is Kind.TENSOR else ("not", ("keep",))
            return self.make_fix("replace `not` with `~`", "UnaryOperation", node, safety="unsafe", data=(recipe,))
        for value in node.values:
            if ctx.kind(value) is not Kind.BOOL_TENSOR:
                return {"no_fix": f"`{ast.unparse(value)}` is not known to be a boolean tensor"}
        for value in node.values[1:]:
            reason = branches.impurity(value, ctx.typer)
            if reason is not None:
                return {"no_fix": f"`&`/`|` would always evaluate the right-hand side, and {reason}"}
        op = "and" if isinstance(node.op, ast.And) else "or"
        recipe = (op, (("keep",),) * len(node.values))
        title = f"replace `{op}` with `{'&' if op == 'and' else '|'}`"
        return self.make_fix(title, "BooleanOperation", node, safety="unsafe", data=(recipe,))

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        replaced = branches.build_condition(node, fix.data[0])
        return replaced.with_changes(lpar=node.lpar, rpar=node.rpar) if node.lpar else replaced

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                flag = (y > 0).any() or (y < -5).any()
                return y * 2, flag
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                empty = not (y > 0).any()
                return y * 2, empty
        """,
    ]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                flag = (y > 0).any() | (y < -5).any()
                return y * 2, flag
        """]


class DataDependentAssert(Rule):
    """## What it does
    Checks for `assert` statements on tensor values that Dynamo cannot turn into
    an asynchronous device assert: those with a computed message (f-string,
    variable, tuple) and those combining tensors with `and`/`or`.

    ## Why is this bad?
    Dynamo rewrites `assert <tensor>` and `assert <tensor>, "literal"` into
    `torch._assert_async`, but any other form needs the value in Python to
    decide whether to build the message or to short-circuit: a graph break
    (GB0170).

    ## Fix safety
    Unsafe. The assert becomes `torch._assert_async(cond, "message")`, which Dynamo
    keeps in the graph; `assert a and b` becomes one check per operand (in order),
    `assert a or b` on boolean tensors becomes `a | b`. A computed message cannot
    include runtime values any more: an f-string keeps its literal text with the
    expressions written as `{source}`; any other message, or none, becomes
    "assert <condition source>". Operands that are Python numbers read from
    tensors (`.item()`) become `torch._check(cond, lambda: "message")`; static ones
    stay a plain `assert`. The fix raises `RuntimeError` instead of
    `AssertionError`, and unlike `assert` it is not removed by `python -O`. Left
    alone: `or` over values that are not all boolean tensors, and operands of
    unknown type.
    """

    code = "TP205"
    name = "data-dependent-assert"
    summary = "assert on a tensor value with a computed message or `and`/`or`"
    message = "`assert` on a tensor value with {what} breaks the graph; use a literal message or `torch._assert_async`"
    dynamo_codes = ("GB0170",)

    fix_safety = "unsafe"

    def visit_Assert(self, node: ast.Assert, ctx: Context) -> None:
        if not data_dependent(node.test, ctx):
            return
        claim(node.test, ctx)
        if isinstance(node.test, ast.BoolOp):
            self.report(ctx, node, what="`and`/`or`")
        elif node.msg is not None and not (isinstance(node.msg, ast.Constant) and isinstance(node.msg.value, str)):
            self.report(ctx, node, what="a computed message")

    def plan(self, node: ast.Assert, ctx: Context) -> dict:
        others = [s for s in _simple(ctx.node) if s is not node]
        if any(s.lineno <= node.end_lineno and s.end_lineno >= node.lineno for s in others):
            return {"no_fix": "the `assert` shares its line with another statement"}
        test = node.test
        split = isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)
        message = "keep" if isinstance(node.msg, ast.Constant) else "condition"
        message = "fstring" if isinstance(node.msg, ast.JoinedStr) else message
        checks = []
        for part in test.values if split else [test]:
            kind = ctx.kind(part)
            if kind is Kind.DATA_SCALAR:
                checks.append(("check", None, message))
            elif kind is Kind.SCALAR:
                checks.append(("assert", None, "keep"))
            else:
                recipe = branches.bool_recipe(part, ctx.typer)
                if recipe is None:
                    return {"no_fix": f"`{ast.unparse(part)}` is not known to be a tensor or a number"}
                if isinstance(part, ast.BoolOp) and isinstance(part.op, ast.Or) and "nonzero" in repr(recipe):
                    return {"no_fix": f"`{ast.unparse(part)}` is `or` over tensors that are not all boolean"}
                checks.append(("async", ("keep",) if recipe == ("nonzero",) else recipe, message))
        title = "replace with `torch._assert_async`"
        return self.make_fix(title, "SimpleStatementLine", node, safety="unsafe", data=tuple(checks))

    def apply_fix(self, node: "cst.SimpleStatementLine", fix: Fix, edit: "Edit") -> "cst.FlattenSentinel":
        import libcst as cst

        statement = node.body[0]
        parts = branches.bool_operands(statement.test) if len(fix.data) > 1 else [statement.test]
        lines = []
        for part, (how, recipe, message) in zip(parts, fix.data):
            if how == "assert":
                small = cst.Assert(part, statement.msg)
            elif how == "check":
                text = cst.Lambda(cst.Parameters(), _literal_message(statement.msg, part, message))
                small = cst.Expr(cst.Call(edit.torch("_check"), [cst.Arg(part), cst.Arg(text)]))
            else:
                condition = branches.build_condition(part, recipe)
                args = [cst.Arg(condition), cst.Arg(_literal_message(statement.msg, part, message))]
                small = cst.Expr(cst.Call(edit.torch("_assert_async"), args))
            lines.append(cst.SimpleStatementLine([small]))
        lines[0] = lines[0].with_changes(leading_lines=node.leading_lines, trailing_whitespace=node.trailing_whitespace)
        return cst.FlattenSentinel(lines)

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x.abs() + 1
                assert (y > 0).all(), f"non-positive values in {y.shape}"
                return y * 2
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x.abs() + 1
                assert (y > 0).all() and (y < 100).all()
                return y * 2
        """,
    ]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x.abs() + 1
                assert (y > 0).all(), "non-positive values"
                assert x.shape[0] == 8, f"expected 8 rows, got {x.shape[0]}"
                return y * 2
        """]


def _where_title(unproven: str | None) -> tuple[str, FixApplicability]:
    """The title and safety of a `torch.where` fix: safe when proven equal, else unsafe saying why."""
    if unproven is None:
        return "replace with `torch.where` (proven equal)", "safe"
    return f"replace with `torch.where` (not proven equal: {unproven})", "unsafe"


def _simple(function: ast.AST) -> list[ast.stmt]:
    """The statements of a function that are not blocks (those that can share a line)."""
    blocks = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar, ast.Match)
    blocks += (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [n for n in ast.walk(function) if isinstance(n, ast.stmt) and not isinstance(n, blocks)]


def _unpacks(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Tuple)


def _literal_message(
    message: "cst.BaseExpression | None", part: "cst.BaseExpression", how: str
) -> "cst.BaseExpression":
    """A message that needs no runtime value: the literal as written ("keep"), an f-string's text
    with its fields written as `{source}` ("fstring"), or "assert <condition source>"."""
    import libcst as cst

    if how == "keep":
        return message
    if how == "fstring" and isinstance(message, cst.FormattedString):  # not `f"a" f"b"`: its condition below
        text = "".join(
            (
                p.value.replace("{{", "{").replace("}}", "}")
                if isinstance(p, cst.FormattedStringText)
                else "{" + _code(p.expression) + "}"
            )
            for p in message.parts
        )
        return cst.SimpleString(message.start.replace("f", "").replace("F", "") + text + message.end)
    return branches.string(f"assert {_code(part)}")


def _fresh(name: str, used: set[str]) -> str:
    """`name`, or `name_`, `name__`, ...: the first that the function does not use."""
    while name in used:
        name += "_"
    return name


def _code(node: "cst.CSTNode") -> str:
    import libcst as cst

    return cst.Module([]).code_for_node(node)


class SortedOnTensors(SequenceRule):
    """## What it does
    Checks for `sorted()` and `list.sort()` whose keys are tensors: a list of tensors sorted
    by value, or any list sorted with a `key` that returns a tensor (`key=lambda t: t.norm()`,
    `key=lambda i: scores[i]`, `key=lambda c: c[0]` over tuples whose first field is one).

    ## Why is this bad?
    Sorting compares the keys in Python, which needs their values; Dynamo sorts only keys
    that are constants to it (GB0207), so a key over shapes (`key=len`,
    `key=lambda t: t.shape[0]`) is fine, a key over values breaks the graph.

    ## Fix safety
    Unsafe: `sorted(xs)` (and `reverse=`) of a list written out, or of a name bound only to
    lists of full reductions (`h.sum()`, `h.norm()`: 0-dim tensors, also appended in a loop),
    becomes `list(torch.sort(torch.stack(xs), stable=True).values.unbind(0))` (`descending=`
    for `reverse=`; for a name, `... if xs else []`, since `torch.stack` refuses an empty list
    and Dynamo knows the length). With `key=lambda c: ...` whose body is proven to give 0-dim
    tensors (a full reduction such as `h.norm()`, a 0-dim field `c[0]`, `scores[i]` of a 1-D
    `scores`, negated or scaled), a stable `torch.argsort` of the stacked keys orders the
    elements: a name bound only to `t.unbind(...)` (rows of one shape) becomes
    `list(torch.stack(xs)[order].unbind(0))`, a list grown by one `append((a, b, ...))` in a
    loop over rows (each field a full reduction, the row, `t[i]` or elementwise math on them)
    is stacked and ordered field by field and zipped back into tuples, and `range(n)` becomes
    `list(order.unbind(0))` where its indices are only used in arithmetic with a tensor or
    `len()` (they become 0-dim int64 tensors). A stable sort keeps equal keys in their order,
    as Python's sort does, also descending. What differs: NaN keys (Python's comparisons
    leave them where they fall, `torch.sort` puts them last), keys or elements of different
    dtypes (stacked, they are promoted to one) and identity (the results are new tensors, not
    the list's objects or views of their tensor). Other sorts have no fix: `list.sort()`, a
    key that is not a one-parameter lambda or not known to give 0-dim tensors, elements not
    known to stack, an expression evaluated twice (name it first), indices used otherwise.
    """

    code = "TP206"
    name = "sorted-on-tensors"
    summary = "`sorted()` or `list.sort()` by tensor values"
    message = "sorting by tensor values breaks the graph; use `torch.sort` on a stacked tensor"
    dynamo_codes = ("GB0207",)
    fix_safety = "unsafe"

    def check_call(self, node: ast.Call, ctx: Context) -> None:
        func = node.func
        if ctx.qualname(func) == "builtins.sorted" and node.args:
            items = node.args[0]
        elif isinstance(func, ast.Attribute) and func.attr == "sort" and not ctx.kind(func.value).may_be_tensor:
            items = func.value  # `parts.sort(key=...)`; `x.sort()` on a tensor is torch's
        else:
            return
        elements = self.sequences.elements(items, ctx)
        key = sequences.keyword(node, "key")
        if sequences.any_tensor(self.sequences.keys(elements, key, ctx)):
            self.report(ctx, node)
        elif isinstance(key, ast.Lambda) and len(key.args.args) == 1:  # tuples of tensors, by a 0-dim field
            stacked = stacking.stacked(items, ctx)
            if isinstance(stacked, stacking.Stacked) and stacking.scalar_key(key, stacked, self.sequences, ctx):
                self.report(ctx, node)

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        assert isinstance(node, ast.Call)
        if ctx.qualname(node.func) != "builtins.sorted" or len(node.args) != 1:
            return {"no_fix": "only `sorted(values)` has a `torch.sort` form (`list.sort()` sorts in place)"}
        if any(k.arg not in ("key", "reverse") for k in node.keywords):
            return {"no_fix": "`**kwargs` may hold other arguments of `sorted`"}
        key = sequences.keyword(node, "key")
        if key is not None and not (isinstance(key, ast.Constant) and key.value is None):
            return self._plan_key(node, key, ctx)
        values = node.args[0]
        if isinstance(values, ast.ListComp):
            return {"no_fix": "a comprehension may be empty, and an empty list has no stack: name it first"}
        if not sequences.scalar_elements(values, ctx):
            return {"no_fix": "the elements are not known to be 0-dim (full reductions): stacking them may fail"}
        # A named list may be empty (built in a loop): `[]` then, as `sorted` gives (Dynamo knows the length).
        data = ("values", values.id) if isinstance(values, ast.Name) else ("values",)
        return self.make_fix("sort the stacked values with a stable `torch.sort`", "Call", node, "unsafe", data)

    def _plan_key(self, node: ast.Call, key: ast.expr, ctx: Context) -> dict:
        """`sorted(xs, key=lambda c: ...)`: a stable `torch.argsort` of the stacked keys orders
        the stacked elements (`stacking.py` proves both stack)."""
        args = key.args if isinstance(key, ast.Lambda) else None
        if args is None or len(args.args) != 1 or args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg:
            return {"no_fix": "only a `lambda` key of one parameter has a stacked form (its body gives the keys)"}
        elements = stacking.stacked(node.args[0], ctx)
        if isinstance(elements, str):
            return {"no_fix": elements}
        if not stacking.scalar_key(key, elements, self.sequences, ctx):
            return {
                "no_fix": "the key is not known to give 0-dim tensors (a full reduction such as `h.norm()`, a "
                "0-dim field `c[0]`, `scores[i]` of a 1-D `scores`): their stack need not have one key per element"
            }
        if elements.form == "range" and not stacking.index_uses(node, ctx):
            return {
                "no_fix": "the sorted indices would become 0-dim tensors, which mean the same ints only in "
                "arithmetic with a tensor (`t * order[0]`) or `len(order)`; other uses (indexing, `range`) read them"
            }
        used = {n.id for n in ctx.nodes() if isinstance(n, ast.Name)} | {
            a.arg for a in ast.walk(ctx.node) if isinstance(a, ast.arg)
        }
        order, field = (_fresh(name, used) for name in ("order", "field"))
        title = "order the stacked elements by a stable `torch.argsort` of the stacked keys"
        return self.make_fix(title, "Call", node, "unsafe", (elements.form, order, field))

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        import libcst as cst

        values = _code(node.args[0].value)
        reverse = [_code(a.value) for a in node.args[1:] if a.keyword is not None and a.keyword.value == "reverse"]
        descending = f", descending={reverse[0]}" if reverse else ""
        argsort, sort, stack = (_code(edit.torch(f)) for f in ("argsort", "sort", "stack"))
        form, *names = fix.data
        if form == "values":
            text = f"list({sort}({stack}({values}){descending}, stable=True).values.unbind(0))"
            if not names:
                return with_parens_of(node, cst.parse_expression(text))
            return atom(with_parens_of(node, cst.parse_expression(f"{text} if {names[0]} else []")))
        key = next(a.value for a in node.args[1:] if a.keyword is not None and a.keyword.value == "key")
        assert isinstance(key, cst.Lambda)
        keys = f"[{_code(key.body)} for {key.params.params[0].name.value} in {values}]"
        order = f"{argsort}({stack}({keys}){descending}, stable=True)"
        if form == "range":
            text = f"list({order}.unbind(0))"
            bound = node.args[0].value.args[0].value
            if isinstance(bound, cst.Integer):  # `range(3)`: never empty
                return with_parens_of(node, cst.parse_expression(text))
            empty = f"{_code(bound)} > 0"
        elif form == "tuples":
            o, f = names
            text = f"list(zip(*[{stack}({f})[{o}].unbind(0) for {o} in [{order}] for {f} in zip(*{values})]))"
            empty = values
        else:
            text = f"list({stack}({values})[{order}].unbind(0))"
            empty = values
        return atom(with_parens_of(node, cst.parse_expression(f"{text} if {empty} else []")))

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                low, high = sorted([y.sum(), y.mean()])
                return y * low
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                parts = []
                for k in range(3):
                    parts.append(x * k)
                parts.sort(key=lambda t: t.norm(), reverse=True)
                return parts[0]
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                order = sorted(range(4), key=lambda i: x[i])
                return x * order[0]
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                candidates = []
                for row in x.unbind(0):
                    candidates.append((row.nan_to_num().norm(), row))
                ranked = sorted(candidates, key=lambda c: c[0], reverse=True)
                return torch.stack([row for _, row in ranked[:2]])

        def make_inputs(call):
            return torch.randn(5, 3)
        """,
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                low = torch.sort(torch.stack([y.sum(), y.mean()])).values[0]
                return y * low
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                parts = [x, x[:3], x[:5]]
                parts = sorted(parts, key=lambda t: t.shape[0])
                parts.sort(key=len, reverse=True)
                return parts[0] * 2
        """,
    ]


class MinMaxKeyOnTensors(SequenceRule):
    """## What it does
    Checks for `min()` and `max()` with `key=` or `default=` over tensors or modules, or with
    a key that returns tensors or closes over `self`, tensors or lists of tensors.

    ## Why is this bad?
    Dynamo traces `max(a, b)` and `max([a, b])` of tensors as `torch.maximum`, but its handler
    for the builtin takes no keywords: it calls `min`/`max` with `key=` or `default=` only when
    every argument is a constant to it (ints, shapes, a key that captures only constants).
    Over tensors or modules, or with a key that captures them, it breaks the graph (GB0193),
    even when the key only reads shapes.

    ## Fix safety
    No automatic fix: pick with `torch.argmax`/`argmin` over the stacked keys, or compare
    shapes with a key over a `range`.
    """

    code = "TP207"
    name = "min-max-key-on-tensors"
    summary = "`min()`/`max()` with `key=` over tensors"
    message = "`{callee}()` with `{keyword}=` over tensors or modules breaks the graph; use `torch.arg{callee}`"
    dynamo_codes = ("GB0193",)

    def check_call(self, node: ast.Call, ctx: Context) -> None:
        callee = ctx.qualname(node.func)
        if callee not in ("builtins.min", "builtins.max") or not node.args:
            return
        given = [k.arg for k in node.keywords if k.arg in ("key", "default")]
        if not given:
            return
        if len(node.args) == 1:
            elements = self.sequences.elements(node.args[0], ctx)
        else:
            elements = self.sequences.elements(ast.Tuple(node.args, ast.Load()), ctx)
        key = sequences.keyword(node, "key")
        keys = self.sequences.keys(elements, key, ctx)
        if (elements | keys | self.sequences.captures(key, ctx)) & sequences.ELEMENTS:
            self.report(ctx, node, callee=callee[9:], keyword=given[0])

    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                candidates = [x, x * 2, x - 1]
                best = max(candidates, key=lambda t: t.abs().sum())
                return best * 2
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                shortest = min(x, x[:3], key=len)
                return shortest + 1
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                chunks = x.split([3, 5])
                widest = max(range(len(chunks)), key=lambda i: chunks[i].shape[0])
                return chunks[widest] * 2
        """,
    ]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                candidates = torch.stack([x, x * 2, x - 1])
                best = candidates.index_select(0, candidates.abs().sum(dim=1).argmax().view(1))[0]
                sizes = list(x.shape)
                widest = max(range(len(sizes)), key=lambda i: sizes[i])
                return best * 2 + max(x.sum(), x.mean()) * widest
        """,
    ]
