"""Gradients taken inside a forward (FGM's adversarial step, WGAN-GP's gradient penalty, input
saliency) through `torch.func.vjp`, which Dynamo traces, instead of a leaf made with
`requires_grad_()` and `torch.autograd.grad`, which it does not:

    x = e.detach().requires_grad_()           def loss_of(x):
    loss = f(x)                        ->         loss = f(x)
    (g,) = torch.autograd.grad(loss, x)           return loss

                                              loss, loss_vjp = torch.func.vjp(loss_of, e.detach())
                                              g = loss_vjp(torch.ones_like(loss))[0].detach()

The statements between the leaf and the gradient become the function; the leaf's expression is its
argument. `create_graph=False` (the default) gave a gradient without history, hence `.detach()`; with
`create_graph=True` the gradient keeps its graph, as `torch.func` composes with the autograd outside.
"""

from __future__ import annotations

import ast
from dataclasses import astuple, dataclass
from typing import TYPE_CHECKING

from rewrites import branches

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.analysis.walker import Context
    from transpiler.lint.rule import Edit

_NOTE = "# transpile (TP507): `torch.func.vjp` takes the gradient for `{leaf}`; Dynamo traces it."

# Blocks whose statements the rewrite can take apart, by the libcst class of the same name.
_OWNERS = (ast.FunctionDef, ast.With, ast.For, ast.While, ast.If)


@dataclass(frozen=True)
class GradPlan:
    leaf: str  # the name of the leaf (the function's parameter)
    create: int  # index in the block of the statement that makes the leaf
    switch: int  # index of a separate `leaf.requires_grad_()` statement, or -1
    grad: int  # index of the statement that takes the gradient
    output: str  # the differentiated value's name (bound by the function's statements, or new)
    output_expression: bool  # `outputs=` was an expression: the function returns it
    function: str  # names of the new function and of its vjp
    vjp: str
    result: str  # how the gradient is bound: "unpack" `(g,) =`, "first" `g = ...[0]`, "tuple" `gs =`
    create_graph: bool
    grad_outputs: bool  # an explicit `grad_outputs=`


def plan(call: ast.Call, ctx: "Context") -> tuple[tuple, ast.AST] | str:
    """The rewrite of the `torch.autograd.grad` call `call` (a `GradPlan` as a tuple, since plans are
    cached as plain data, and the block's compound statement to rewrite), or why there is none."""
    statement = ctx.statement
    block = branches.enclosing_block(ctx.node, statement)
    if block is None or block[1] != "body" or not isinstance(block[0], _OWNERS):
        return "the gradient is taken inside an expression or a block the rewrite does not take apart"
    owner, _, body = block
    arguments = _arguments(call)
    if isinstance(arguments, str):
        return arguments
    outputs, inputs, grad_outputs, create_graph = arguments
    leaf = _single_name(inputs)
    if leaf is None:
        return "`inputs` is not one name"
    result = _result_form(statement, call)
    if result is None:
        return "the gradients are not bound to names as `(g,) = ...`, `g = ...[0]` or `gs = ...`"
    grad = next(i for i, s in enumerate(body) if s is statement)
    made = _leaf_statements(body[:grad], leaf)
    if isinstance(made, str):
        return made
    create, switch, _ = made
    between = [s for i, s in enumerate(body[create + 1 : grad], create + 1) if i != switch]
    for s in between:
        if not (isinstance(s, ast.Assign) and all(_names_only(t) for t in s.targets)):
            return f"`{ast.unparse(s).splitlines()[0]}` between the leaf and the gradient is not an assignment to names"
        if any(leaf in _bound(t) for t in s.targets):
            return f"`{leaf}` is assigned again before the gradient"
    assigned = {n for s in between for t in s.targets for n in _bound(t)}
    output_name = outputs.id if isinstance(outputs, ast.Name) and outputs.id in assigned else None
    if output_name is None and not _reads(outputs, leaf):
        return "`outputs` is not computed from the leaf between it and the gradient"
    read_elsewhere = branches.names_read_outside(ctx, body[create : grad + 1])
    if leaf in read_elsewhere:
        return f"the leaf `{leaf}` is read outside the statements that take its gradient"
    if leaf in _free_names_of_grad_outputs(grad_outputs):
        return "`grad_outputs` reads the leaf"
    local = (assigned - {output_name}) & read_elsewhere
    if local:
        return f"`{sorted(local)[0]}`, computed for the gradient, is also read after it"
    names = branches.FreshNames(ctx.node)
    output = output_name or names.fresh("output")
    function = names.fresh(f"{output}_of")
    planned = GradPlan(
        leaf,
        create,
        switch,
        grad,
        output,
        output_name is None,
        function,
        names.fresh(f"{output}_vjp"),
        result,
        create_graph,
        grad_outputs is not None,
    )
    return astuple(planned), owner


def _arguments(call: ast.Call) -> tuple | str:
    """(outputs, inputs, grad_outputs or None, create_graph) of `torch.autograd.grad(...)`."""
    names = ["outputs", "inputs", "grad_outputs", "retain_graph", "create_graph"]
    if any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) > len(names):
        return "the call passes arguments the rewrite does not read"
    given = dict(zip(names, call.args))
    for keyword in call.keywords:
        if keyword.arg not in names or keyword.arg in given:
            return f"`{keyword.arg}=` has no counterpart in `torch.func.vjp`"
        given[keyword.arg] = keyword.value
    if "outputs" not in given or "inputs" not in given:
        return "`outputs` or `inputs` is missing"
    flags = {}
    for flag in ("retain_graph", "create_graph"):
        value = given.get(flag)
        if value is not None and not (isinstance(value, ast.Constant) and value.value in (True, False, None)):
            return f"`{flag}=` is not a literal"
        flags[flag] = bool(value.value) if value is not None else False
    outputs = given["outputs"]
    if isinstance(outputs, (ast.List, ast.Tuple)):
        if len(outputs.elts) != 1:
            return "`outputs` is not one tensor"
        outputs = outputs.elts[0]
    grad_outputs = given.get("grad_outputs")
    if isinstance(grad_outputs, ast.Constant) and grad_outputs.value is None:
        grad_outputs = None
    if isinstance(grad_outputs, (ast.List, ast.Tuple)):
        if len(grad_outputs.elts) != 1:
            return "`grad_outputs` is not one tensor"
        grad_outputs = grad_outputs.elts[0]
    return outputs, given["inputs"], grad_outputs, flags["create_graph"]


def _single_name(inputs: ast.expr) -> str | None:
    if isinstance(inputs, (ast.List, ast.Tuple)) and len(inputs.elts) == 1:
        inputs = inputs.elts[0]
    return inputs.id if isinstance(inputs, ast.Name) else None


def _result_form(statement: ast.stmt, call: ast.Call) -> str | None:
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        return None
    target, value = statement.targets[0], statement.value
    if value is call:
        if isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 1 and isinstance(target.elts[0], ast.Name):
            return "unpack"
        return "tuple" if isinstance(target, ast.Name) else None
    is_first = (
        isinstance(value, ast.Subscript)
        and value.value is call
        and isinstance(value.slice, ast.Constant)
        and value.slice.value == 0
    )
    return "first" if is_first and isinstance(target, ast.Name) else None


def _leaf_statements(before: list[ast.stmt], leaf: str) -> tuple[int, int, ast.expr] | str:
    """Where the leaf is made: `leaf = e.requires_grad_()`, or `leaf = e` then `leaf.requires_grad_()`
    (or `leaf.requires_grad = True`); (index of the binding, index of the separate switch or -1, `e`)."""
    switch = -1
    for index in range(len(before) - 1, -1, -1):
        s = before[index]
        if switch < 0 and _switches_on(s, leaf):
            switch = index
            continue
        if isinstance(s, ast.Assign) and any(leaf in _bound(t) for t in s.targets):
            if len(s.targets) != 1 or not isinstance(s.targets[0], ast.Name):
                return f"`{leaf}` is not bound alone before the gradient"
            value = s.value
            if switch < 0:
                if not (_is_switch_call(value) and _switch_value(value)):
                    return f"`{leaf}` is not made a leaf by `requires_grad_()` where it is bound"
                value = value.func.value
            if not _fresh(value):
                return f"`{ast.unparse(value)}` may be a tensor used elsewhere, whose `requires_grad` the original switched on"
            return index, switch, value
    return f"`{leaf}` is not bound in the same block before the gradient"


def _is_switch_call(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_"


def _switch_value(call: ast.Call) -> bool:
    """`requires_grad_()` / `requires_grad_(True)`."""
    values = [*call.args, *(k.value for k in call.keywords)]
    return not values or (len(values) == 1 and isinstance(values[0], ast.Constant) and values[0].value is True)


def _switches_on(statement: ast.stmt, leaf: str) -> bool:
    """`leaf.requires_grad_()` or `leaf.requires_grad = True`."""
    if isinstance(statement, ast.Expr) and _is_switch_call(statement.value):
        receiver = statement.value.func.value
        return isinstance(receiver, ast.Name) and receiver.id == leaf and _switch_value(statement.value)
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        return (
            isinstance(target, ast.Attribute)
            and target.attr == "requires_grad"
            and isinstance(target.value, ast.Name)
            and target.value.id == leaf
            and isinstance(statement.value, ast.Constant)
            and statement.value.value is True
        )
    return False


def _fresh(value: ast.expr) -> bool:
    """A value that is a new tensor (a call or an operator), not a name or attribute that aliases one."""
    return isinstance(value, (ast.Call, ast.BinOp, ast.UnaryOp))


def _names_only(target: ast.expr) -> bool:
    return isinstance(target, ast.Name) or (
        isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts)
    )


def _bound(target: ast.expr) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


def _reads(expr: ast.expr, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(expr))


def _free_names_of_grad_outputs(grad_outputs: ast.expr | None) -> set[str]:
    return set() if grad_outputs is None else {n.id for n in ast.walk(grad_outputs) if isinstance(n, ast.Name)}


def rewrite(owner: "cst.CSTNode", planned: tuple, edit: "Edit") -> "cst.CSTNode":
    """`owner` (the block's compound statement) with the leaf, the statements between and the gradient
    replaced by the function, the `torch.func.vjp` call and the gradient from its vjp."""
    import libcst as cst

    data = GradPlan(*planned)
    lines = list(owner.body.body)
    create = branches.line_index(lines, data.create)
    grad = branches.line_index(lines, data.grad)
    switch = branches.line_index(lines, data.switch) if data.switch >= 0 else -1
    made, taken = lines[create], lines[grad]
    leaf_value = made.body[0].value
    if data.switch < 0:  # `e.requires_grad_()`: the argument is `e`
        leaf_value = leaf_value.func.value
    if isinstance(leaf_value, (cst.BinaryOperation, cst.UnaryOperation)):  # an argument needs no parentheses
        leaf_value = leaf_value.with_changes(lpar=[], rpar=[])
    call = _grad_call(taken.body[0].value)
    kept = [line for i, line in enumerate(lines[create + 1 : grad], create + 1) if i != switch]
    returned = _argument(call, 0, "outputs") if data.output_expression else cst.Name(data.output)
    if isinstance(returned, (cst.List, cst.Tuple)):
        returned = returned.elements[0].value
    function_body = [line.with_changes(leading_lines=[]) if i == 0 else line for i, line in enumerate(kept)]
    function_body.append(cst.SimpleStatementLine([cst.Return(returned)]))
    function = cst.FunctionDef(
        cst.Name(data.function),
        cst.Parameters([cst.Param(cst.Name(data.leaf))]),
        cst.IndentedBlock(function_body),
        leading_lines=[*made.leading_lines, cst.EmptyLine(comment=cst.Comment(_NOTE.format(leaf=data.leaf)))],
    )
    vjp = cst.Call(edit.torch("func.vjp"), [cst.Arg(cst.Name(data.function)), cst.Arg(leaf_value)])
    unpacked = cst.Tuple([cst.Element(cst.Name(data.output)), cst.Element(cst.Name(data.vjp))], lpar=[], rpar=[])
    primal = cst.SimpleStatementLine(
        [cst.Assign([cst.AssignTarget(unpacked)], vjp)], leading_lines=[cst.EmptyLine(indent=False)]
    )
    cotangent = _argument(call, 2, "grad_outputs") if data.grad_outputs else None
    if isinstance(cotangent, (cst.List, cst.Tuple)):
        cotangent = cotangent.elements[0].value
    if cotangent is None:  # `autograd.grad` of a scalar seeds it with 1
        cotangent = cst.Call(edit.torch("ones_like"), [cst.Arg(cst.Name(data.output))])
    gradients = cst.Call(cst.Name(data.vjp), [cst.Arg(cotangent)])
    first = cst.Subscript(gradients, [cst.SubscriptElement(cst.Index(cst.Integer("0")))])
    if not data.create_graph:  # the gradient had no history; `torch.func` would keep the outer one
        first = cst.Call(cst.Attribute(first, cst.Name("detach")))
    assign = taken.body[0]
    if data.result == "tuple":
        value = gradients if data.create_graph else cst.Tuple([cst.Element(first, comma=cst.Comma())])
        target = assign.targets[0].target
    elif data.result == "unpack":
        value, target = first, assign.targets[0].target.elements[0].value
    else:
        value, target = first, assign.targets[0].target
    result = taken.with_changes(body=[cst.Assign([cst.AssignTarget(target)], value)])
    new_lines = [*lines[:create], function, primal, result, *lines[grad + 1 :]]
    return owner.with_changes(body=owner.body.with_changes(body=new_lines))


def _grad_call(value: "cst.BaseExpression") -> "cst.Call":
    import libcst as cst

    return value.value if isinstance(value, cst.Subscript) else value


def _argument(call: "cst.Call", position: int, keyword: str) -> "cst.BaseExpression | None":
    for index, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
        if arg.keyword is None and index == position:
            return arg.value
    return None
