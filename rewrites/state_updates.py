"""`if <tensor>:` around in-place updates of module state, the one-time initialisation of research code
(`if self.initialized == 0: self.scale.data.copy_(...); self.initialized.fill_(1)`): each update is
applied on every call, through `torch.where`, so that it writes back the old values where the condition
is false and there is no branch left for Dynamo to break at.

The condition is evaluated once, before the first update (an update may change what it reads). The
body's assignments must be pure and local to the branch (read nowhere after it); they now run on every
call. The updated tensors must be ones autograd does not record writes into: `x.data`, or a buffer the
class registers (`self.register_buffer(...)`); a parameter written directly would raise on a leaf that
requires grad, where the untaken branch did not.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from rewrites import branches

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.analysis.walker import Context
    from transpiler.lint.rule import Edit

# Update methods and how many arguments they take; `zero_()` writes 0.
UPDATES = {"copy_": 1, "fill_": 1, "zero_": 0}


def plan(node: ast.If, ctx: "Context") -> tuple | str:
    """The data of the rewrite of `node` (condition recipe, condition name, which body statements are
    updates), or why there is none."""
    if node.orelse:
        return "the `if` has an `else`"
    recipe = branches.bool_recipe(node.test, ctx.typer)
    if recipe is None:
        return f"the condition `{ast.unparse(node.test)}` is not only tensors"
    reason = branches.impurity(node.test, ctx.typer)
    if reason is not None:
        return reason
    typer = branches.branch_typer(ctx)
    updates, assigned = [], set()
    for statement in node.body:
        update = _update(statement, ctx)
        if isinstance(update, str):
            return update
        if update is not None:
            call = statement.value
            for argument in call.args:
                if (reason := branches.impurity(argument, typer)) is not None:
                    return reason
            updates.append(True)
            continue
        reason = branches.statement_problem(statement, typer)
        if reason is not None:
            return reason
        assigned.add(statement.targets[0].id)
        updates.append(False)
    if not any(updates):
        return "the branch updates no tensor in place"
    read_elsewhere = branches.names_read_outside(ctx, [node])
    if assigned & read_elsewhere:
        return f"`{sorted(assigned & read_elsewhere)[0]}` is assigned in the branch and read outside it"
    return recipe, branches.FreshNames(ctx.node).fresh("cond"), tuple(updates)


def updates_state(node: ast.If) -> bool:
    """Whether the `if` (without `else`) holds an update of the shape this rewrite handles."""
    return not node.orelse and any(_update_call(s) is not None for s in node.body)


def _update_call(statement: ast.stmt) -> ast.Call | None:
    """The call of `<tensor>.copy_(...)`, `.fill_(...)` or `.zero_()` that is the statement, if it is one."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        if isinstance(func, ast.Attribute) and func.attr in UPDATES:
            return statement.value
    return None


def _update(statement: ast.stmt, ctx: "Context") -> bool | str | None:
    """True for `<state>.copy_(v)` / `.fill_(v)` / `.zero_()` of a tensor autograd does not record
    writes into; why not, for another in-place update; None for a statement of another shape."""
    call = _update_call(statement)
    if call is None:
        return None
    func = call.func
    target = func.value
    shown = ast.unparse(func)
    if call.keywords or len(call.args) != UPDATES[func.attr]:
        return f"`{shown}()` is called with other arguments than the value it writes"
    if isinstance(target, ast.Attribute) and target.attr == "data" and ctx.kind(target.value).is_tensor:
        return True
    is_buffer = (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
        and ctx.cls is not None
        and target.attr in ctx.cls.buffers
    )
    if is_buffer:
        return True
    return f"`{shown}()` may write into a tensor autograd records (only `.data` and buffers are updated)"


def statements(node: "cst.If", data: tuple, edit: "Edit") -> list["cst.BaseStatement"]:
    """`cond = <test>`, then the body with each update written as `t.copy_(torch.where(cond, v, t))`."""
    import libcst as cst

    recipe, name, updates = data
    note = "# transpile (TP201): these updates run on every call, writing back the old values where `{}` is false."
    lines = [
        branches.assign(name, branches.build_condition(node.test, recipe)).with_changes(
            leading_lines=[cst.EmptyLine(comment=cst.Comment(note.format(name)))]
        )
    ]
    body = list(branches.small_statements(node.body))
    for statement, is_update in zip(body, updates):
        if is_update:
            call = statement.value
            target = call.func.value
            value = call.args[0].value if call.args else cst.Integer("0")
            where = cst.Call(edit.torch("where"), [cst.Arg(cst.Name(name)), cst.Arg(value), cst.Arg(target)])
            statement = cst.Expr(cst.Call(cst.Attribute(target, cst.Name("copy_")), [cst.Arg(where)]))
        lines.append(cst.SimpleStatementLine([statement.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)]))
    return lines
