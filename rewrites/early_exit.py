"""A `for` loop over a static range that leaves early on a tensor condition (`if c: break`): ray marching
that stops once the rays are opaque, iterative refinement that stops on convergence. Dynamo unrolls the
loop and breaks at the `if`; the rewrite bounds it instead: every iteration runs, and from the one after
the condition first held each value the loop carries keeps what it had:

    for i in range(n):                          stopped = x.new_zeros((), dtype=torch.bool)
        x = step(x)                    ->       for i in range(n):
        if done(x):                                 x = torch.where(stopped, x, step(x))
            break                                   stopped = stopped | done(x)

`torch.where` selects the bits the original loop left in place, so the values after the loop are the
original's. Carried names (bound before the loop, read after it, or read in the body before the body
assigns them) must be tensors bound before the loop; the other statements compute per iteration.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from rewrites import branches
from transpiler.analysis.kinds import Kind

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.analysis.walker import Context
    from transpiler.lint.rule import Edit


def plan(node: ast.If, ctx: "Context") -> tuple[tuple, ast.For] | str:
    """For `if <tensor>: break` directly in a `for` loop's body: (data, the loop), or why not. Data:
    (flag name, the name whose `new_zeros` makes the flag, per body statement: "break" with the
    condition recipe, "carry" or "keep" with the names it assigns; the carried names, each with the
    temporary that holds its new value where a tuple assigns it)."""
    loop = _loop_of(ctx.node, node)
    if loop is None:
        return "the `break` does not leave a `for` loop from the loop's own body"
    if loop.orelse:
        return "the loop has an `else`"
    reason = _static_iteration(loop, ctx)
    if reason is not None:
        return reason
    for inner in ast.walk(loop):
        if isinstance(inner, (ast.Continue, ast.Return, ast.Yield, ast.YieldFrom)):
            return f"the loop holds `{ast.unparse(inner).split()[0]}`"
        if isinstance(inner, ast.Break) and not any(
            inner is s.body[0] for s in loop.body if isinstance(s, ast.If) and len(s.body) == 1
        ):
            return "the loop holds a `break` other than `if <condition>: break` in its body"
    typer = branches.branch_typer(ctx)
    assigned: dict[str, None] = {}
    read_first: set[str] = set()
    steps = []
    for statement in loop.body:
        if _is_break_if(statement):
            if statement.orelse:
                return "the `if ...: break` has an `else`"
            recipe = branches.bool_recipe(statement.test, typer)
            if recipe is None:
                return f"the condition `{ast.unparse(statement.test)}` is not only tensors"
            if (reason := branches.impurity(statement.test, typer)) is not None:
                return reason
            read_first |= set(branches.loaded_names([statement.test])) - set(assigned)
            steps.append(("break", recipe))
            continue
        reason = _statement_problem(statement, typer)
        if reason is not None:
            return reason
        value = statement.value
        read_first |= set(branches.loaded_names([value])) - set(assigned)
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        assigned.update(dict.fromkeys(names))
        steps.append(("assign", tuple(names)))
    after = _read_after(ctx.node, loop)
    bound_before = _bound_before(ctx.node, loop, ctx)
    target_names = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    carried = [n for n in assigned if n not in target_names and (n in after or n in read_first)]
    for name in carried:
        if name not in bound_before:
            return f"`{name}` is carried by the loop but not bound before it"
        if not bound_before[name] or not typer.kind(ast.Name(name, ast.Load())).is_tensor:
            return f"`{name}` is carried by the loop and not known to be a tensor before it and in it"
    if not carried:
        return "the loop carries no tensor past the `break`"
    for statement in loop.body:
        if isinstance(statement, (ast.Assign, ast.AugAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)} & set(carried):
                grows = _growing_call(statement.value, ctx)
                if grows:
                    return f"`{grows}()` may change the shape of a carried value from one iteration to the next"
    carried_set = set(carried)
    data_steps = tuple(
        (how, arg) if how == "break" else ("carry" if carried_set & set(arg) else "keep", arg) for how, arg in steps
    )
    names = branches.FreshNames(ctx.node)
    temporaries = tuple((name, names.fresh(f"{name}_step")) for name in carried)
    return (names.fresh("stopped"), carried[0], data_steps, temporaries), loop


# Calls that make a value of another shape than their inputs', iteration after iteration (a growing sequence).
_GROWING = frozenset(
    "torch.cat torch.concat torch.concatenate torch.stack torch.hstack torch.vstack torch.nn.functional.pad".split()
)


def _growing_call(value: ast.expr, ctx: "Context") -> str | None:
    for node in ast.walk(value):
        if isinstance(node, ast.Call) and ctx.qualname(node.func) in _GROWING:
            return ast.unparse(node.func)
    return None


def _loop_of(function: ast.AST, node: ast.If) -> ast.For | None:
    for loop in ast.walk(function):
        if isinstance(loop, ast.For) and any(s is node for s in loop.body):
            return loop
    return None


def _is_break_if(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.If) and len(statement.body) == 1 and isinstance(statement.body[0], ast.Break)


def _static_iteration(loop: ast.For, ctx: "Context") -> str | None:
    """None when Dynamo unrolls the loop a number of times known at compile time: `range()` of Python
    numbers, or a container of submodules."""
    iterable = loop.iter
    if isinstance(iterable, ast.Call) and ctx.qualname(iterable.func) == "builtins.range":
        # A configuration's attribute is of unknown kind, and a Python number to Dynamo; a tensor is not.
        if not any(ctx.kind(a).may_be_tensor or ctx.kind(a) is Kind.DATA_SCALAR for a in iterable.args):
            return None
        return "the `range()` bounds are read from tensors"
    if ctx.kind(iterable) is Kind.MODULE:
        return None
    return f"the loop iterates `{ast.unparse(iterable)}`, not a `range()` of Python numbers or submodules"


def _statement_problem(statement: ast.stmt, typer) -> str | None:
    """Why a loop statement keeps the loop from being bounded (None: an assignment to names whose value
    is pure or calls submodules, which now also run after the stop)."""
    if isinstance(statement, ast.AugAssign):
        if not isinstance(statement.target, ast.Name):
            return f"`{ast.unparse(statement)}` updates a tensor in place"
        value = statement.value
    elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        names = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
        if not all(isinstance(n, ast.Name) for n in names):
            return f"`{ast.unparse(statement)}` writes into an attribute or a tensor"
        value = statement.value
    else:
        line = ast.unparse(statement).splitlines()[0]
        return f"the loop holds `{line}`, not only assignments to names and `if ...: break`"
    reason = branches.impurity(value, typer)
    if reason is not None and "calls a submodule" not in reason:
        return reason
    if isinstance(statement, ast.Assign):
        typer.bind(statement.targets[0], typer.kind(value), value)
    return None


def _read_after(function: ast.AST, loop: ast.For) -> set[str]:
    """Names read outside the loop after its line, or anywhere outside it when the loop is inside another loop."""
    inside = {id(n) for n in ast.walk(loop)}
    return {
        n.id
        for n in ast.walk(function)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in inside and n.lineno > loop.lineno
    } | {
        n.id
        for outer in ast.walk(function)
        if isinstance(outer, (ast.For, ast.While)) and outer is not loop and loop in ast.walk(outer)
        for n in ast.walk(outer)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in inside
    }


def _bound_before(function: ast.FunctionDef, loop: ast.For, ctx: "Context") -> dict[str, bool]:
    """Parameters and names assigned on lines before the loop, each with whether every such binding is known to
    be a tensor (`total = 0` before `total = total + x.sum()` in the loop is not: `0.expand_as` would fail)."""
    names = {
        a.arg: ctx.parameters.get(a.arg, Kind.UNKNOWN).is_tensor
        for a in ast.walk(function.args)
        if isinstance(a, ast.arg)
    }
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and node.lineno < loop.lineno:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = names.get(target.id, True) and ctx.kind(node.value).is_tensor
                else:
                    names.update((n.id, False) for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.lineno < loop.lineno:
            names.setdefault(node.id, False)  # bound otherwise (a `for` target, `with ... as`): not followed
    return names


def rewrite(loop: "cst.For", data: tuple, edit: "Edit") -> "cst.FlattenSentinel":
    """The flag before the loop, each carried assignment through `torch.where`, each `if c: break` an update
    of the flag."""
    import libcst as cst

    flag, model, steps, temporaries = data
    zeros = cst.parse_expression(f"{model}.new_zeros((), dtype={edit.torch_name}.bool)")
    edit.torch()  # the flag's dtype names torch
    note = "# transpile (TP201): all iterations run; once the `break` condition holds, the carried values stay."
    start = branches.assign(flag, zeros).with_changes(
        leading_lines=[*loop.leading_lines, cst.EmptyLine(comment=cst.Comment(note))]
    )
    body = []
    for line, (how, arg) in zip(_lines(loop.body), steps):
        if how == "break":
            condition = branches.parenthesize(branches.build_condition(line.test, arg))
            update = cst.BinaryOperation(cst.Name(flag), cst.BitOr(), condition)
            comments = [*line.leading_lines, *branches.chain_comments(line)]
            body.append(branches.assign(flag, update).with_changes(leading_lines=comments))
        elif how == "carry":
            body.extend(_carried(line, flag, dict(temporaries), edit))
        else:
            body.append(line)
    new_loop = loop.with_changes(body=loop.body.with_changes(body=body), leading_lines=[])
    return cst.FlattenSentinel([start, new_loop])


def _lines(block: "cst.BaseSuite") -> list:
    """The loop body's statements, one per `ast` statement (`a = 1; b = 2` split)."""
    import libcst as cst

    lines = []
    for line in block.body:
        if isinstance(line, cst.SimpleStatementLine):
            for index, small in enumerate(line.body):
                leading = line.leading_lines if index == 0 else []
                lines.append(
                    cst.SimpleStatementLine(
                        [small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)],
                        leading_lines=leading,
                        trailing_whitespace=line.trailing_whitespace,
                    )
                )
        else:
            lines.append(line)
    return lines


def _carried(line: "cst.SimpleStatementLine", flag: str, temporaries: dict[str, str], edit: "Edit") -> list:
    """`x = v` of a carried `x` as `x_step = v` and `x = torch.where(flag, x.expand_as(x_step), x_step)`
    (`x += v`: `x_step = x + v`; a tuple target binds the temporaries of its carried names). `expand_as`
    accepts the value from before the loop broadcast into the first step's shape, and raises where a
    later step changes the shape: the original's value would have that shape, the `torch.where` another."""
    import libcst as cst

    (small,) = line.body
    if isinstance(small, cst.AugAssign):
        name = small.target.value
        value = cst.BinaryOperation(cst.Name(name), _binary(small.operator), branches.parenthesize(small.value))
        computed, names = cst.Assign([cst.AssignTarget(cst.Name(temporaries[name]))], value), [name]
    else:
        target = small.targets[0].target
        elements = [target] if isinstance(target, cst.Name) else [e.value for e in target.elements]
        names = [e.value for e in elements if e.value in temporaries]
        if isinstance(target, cst.Name):
            renamed = cst.Name(temporaries[target.value])
        else:
            renamed = target.with_changes(
                elements=[
                    e.with_changes(value=cst.Name(temporaries[e.value.value])) if e.value.value in temporaries else e
                    for e in target.elements
                ]
            )
        computed = small.with_changes(targets=[cst.AssignTarget(renamed)])
    lines = [line.with_changes(body=[computed.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])]
    for name in names:
        step = cst.Name(temporaries[name])
        kept = cst.Call(cst.Attribute(cst.Name(name), cst.Name("expand_as")), [cst.Arg(step)])
        where = cst.Call(edit.torch("where"), [cst.Arg(cst.Name(flag)), cst.Arg(kept), cst.Arg(step)])
        lines.append(branches.assign(name, where))
    return lines


def _binary(operator: "cst.BaseAugOp") -> "cst.BaseBinaryOp":
    """The binary operator of an augmented assignment (`+=` gives `+`)."""
    import libcst as cst

    return getattr(cst, type(operator).__name__.removesuffix("Assign"))()
