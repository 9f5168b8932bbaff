"""Reverse mode: the backward region of a region, from the derivatives in the op registry.

A region's backward is itself a region (one more kernel in the kernel files, rendered by both
backends like any other): its inputs are the forward region's tensor inputs, then the gradient
of each output, then the forward's scalar inputs (and the row's length where a derivative
divides by it); its outputs are the gradients of the forward's tensor inputs. It recomputes the
forward values its derivatives read (save-or-recompute: only the forward's inputs are saved;
every value computed from them is recomputed in the backward kernel, which reads those inputs
anyway, so a fused region's backward costs no memory beyond its inputs and its gradients).

Each op's derivative is a formula per operand (`ops.DERIVATIVES`), written as Python over the
operands `{0}`, `{1}`, ..., the result `out` and the result's gradient `g`, with calls of the
ops by name and five row helpers for reductions: `rowsum(e)`, `rowmean(e)`, `rowmax(e)`, `rowvar(e)`
(along the reduction's dim, keepdim; `rowvar` without correction) and `rowsize()`. A formula may bind
names first: `a = ...; b = ...; expr`. Arithmetic, comparisons, `&`, `|`, `~` and `log` of constant
operands fold to constants, and so do a `where` whose condition folds and an `&` or `|` with a
constant side: a formula branches on a constant operand as torch's derivatives do on a Scalar (`pow`
with the exponent 0 gives no gradient, not 0 * x ** -1).
A gradient flowing into a value that is one per row (a reduction's result) from a use that is one
per element is summed along the row first. A gradient one per row of a value one per element (a
value only summed) stands for that gradient at every element of the row: it is spread over the row
before a normalisation's row helpers read it and where it is an input's gradient. A reduction of a
value one per row (eager reduces its own dim of length 1) has no backward. Gradients of inputs that
broadcast are left at the iteration space's shape: the caller sums them to the input's shape
(`Tensor.sum_to_size`), as autograd does. Regions know no dtypes: the caller drops the gradients of
integer and bool inputs.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Iterable
from dataclasses import dataclass, replace

from transpiler.compiler.ir import RETURN, Input, Node, Output, Region
from transpiler.compiler.lowering import NotLowerable, kernel_view
from transpiler.compiler.ops import ACTIVATION, ACTIVATION_OPS, BY_NAME, CAST, CAST_LIKE, DERIVATIVES, OpKind

BACKWARD = "_backward"  # a backward region's name is its forward's with this appended
GRAD = "grad_"  # the backward's input holding the gradient of forward value `v` is `grad_v`
ROW_LENGTH = "row_length"  # the scalar input `rowsize()` reads: the caller passes the reduced dim's length
_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
_LIBRARIES = frozenset({"torch", "nn", "F", "init", "functional"})  # `torch.relu_(x)` updates its argument

_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow", ast.BitAnd: "and"}
_BINARY.update({ast.BitOr: "or"})
_UNARY = {ast.USub: "neg", ast.Invert: "not"}
_COMPARE = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}


def _log(value: float) -> float:
    """torch's log of a number: -inf at 0 and NaN below, where `math.log` raises."""
    return math.log(value) if value > 0 else (-math.inf if value == 0 else math.nan)


# What an op computes on constants: formulas branch on constant operands (`{1} == 0` of a Scalar exponent).
_FOLD = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv, "pow": operator.pow}
_FOLD.update({"neg": operator.neg, "not": operator.not_, "log": _log, "and": operator.and_, "or": operator.or_})
_FOLD.update({"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq})
_FOLD.update({"ne": operator.ne})
_ROW = {"rowsum": "sum", "rowmean": "mean", "rowmax": "amax"}


@dataclass(frozen=True)
class Backward:
    """A region's backward region, and how its inputs and outputs map to the forward's."""

    region: Region
    # Per output of the backward: the position of the forward tensor input it is the gradient of.
    grads_of: tuple[int, ...]
    outputs_with_grads: tuple[int, ...]  # forward outputs (positions) whose gradients the backward takes, in order
    row_length: bool  # the backward takes the reduced dim's length as its last scalar input
    sources: tuple[tuple[int, ...], ...] = ()  # per forward output, `gradient_sources`
    # A region calling an activation module chosen at run time (the `activation` op): the position of that
    # module among the forward's scalar inputs, and per activation op (ops.ACTIVATION_OPS, by code) the
    # backward of the region with that op in its place, which takes the forward's scalars less the module.
    # `region` is then the first of them.
    activation: int | None = None
    variants: tuple[Backward, ...] = ()


class NoBackward(Exception):
    """Why a region has no backward: its autograd calls take the original code."""


class _Builder:
    """Appends backward nodes; a value is a name, a constant is a 1-tuple `(value,)`."""

    def __init__(self, region: Region, levels: dict[str, bool]) -> None:
        self.nodes: list[Node] = []
        self.taken = {i.name for i in region.inputs} | {n.out for n in region.nodes}
        self.levels = levels  # value -> one per row (True) or per element (False)
        self.dim: int | None = None
        self.row_length = False
        self.line = 0
        self.base = "g"
        self.gradients: set[str] = set()  # the values computed from a gradient

    def fresh(self, base: str) -> str:
        if base not in self.taken:
            self.taken.add(base)
            return base
        n = 0
        while f"{base}{n}" in self.taken:
            n += 1
        self.taken.add(f"{base}{n}")
        return f"{base}{n}"

    def op(self, name: str, *operands: str | tuple) -> str | tuple:
        if all(isinstance(o, tuple) for o in operands) and name in _FOLD:
            return (_FOLD[name](*(o[0] for o in operands)),)
        if name == "where" and isinstance(operands[0], tuple):
            return operands[1] if operands[0][0] else operands[2]
        if name in ("and", "or"):  # a constant side decides, or leaves the other side
            for side, other in (operands, operands[::-1]):
                if isinstance(side, tuple):
                    return side if bool(side[0]) == (name == "or") else other
        values = tuple(o[0] if isinstance(o, tuple) else o for o in operands)
        constants = tuple(i for i, o in enumerate(operands) if isinstance(o, tuple))
        # A value computed from a gradient is named for the operand it flows to (`g_x`); a forward value the
        # derivative recomputes (a norm's statistics) is a temporary, `t<n>`, as in forward kernels.
        flows = any(v in self.gradients for i, v in enumerate(values) if i not in constants)
        out = self.fresh(self.base if flows else "t")
        if flows:
            self.gradients.add(out)
        self.nodes.append(Node(name, values, out, self.line, constants))
        kind = BY_NAME[name].kind
        if kind is OpKind.REDUCTION:
            self.levels[out] = name not in ("softmax", "log_softmax", "layer_norm")
        else:
            self.levels[out] = all(self.levels.get(v, True) for i, v in enumerate(values) if i not in constants)
        return out

    def broadcast(self, value: str, like: str) -> str | tuple:
        """`value`, one per row, at every element of `like`'s rows: a `where` whose branches agree."""
        return self.op("where", self.op("isnan", like), value, value)

    def row(self, name: str, value: str | tuple) -> str | tuple:
        if self.dim is None:
            raise NoBackward("a row helper in the derivative of an op that reduces nothing")
        if isinstance(value, tuple):
            raise NoBackward("a row reduction of a constant")
        return (
            self.op(name, value, (self.dim,), (True,))
            if name != "var"
            else self.op(name, value, (self.dim,), (0,), (True,))
        )

    def formula(self, text: str, node: Node, grad: str, out: str) -> str | tuple:
        """The value of `text` for `node`, whose result `out` has gradient `grad`."""
        env: dict[str, str | tuple] = {"g": grad, "out": out}
        for position, operand in enumerate(node.operands):
            env[f"_{position}"] = (operand,) if position in node.constants else operand
        *bindings, result = [
            part.strip() for part in text.format(*(f"_{k}" for k in range(len(node.operands)))).split(";")
        ]
        for binding in bindings:
            name, _, expression = binding.partition("=")
            appended = len(self.nodes)
            value = self._eval(ast.parse(expression.strip(), mode="eval").body, env)
            # The node the binding computes takes its name; not a node computed before (`a = g` names no node).
            if len(self.nodes) > appended and self.nodes[-1].out == value:
                value = self.fresh(name.strip())
                self.levels[value] = self.levels[self.nodes[-1].out]
                if self.nodes[-1].out in self.gradients:
                    self.gradients.add(value)
                self.nodes[-1] = replace(self.nodes[-1], out=value)
            env[name.strip()] = value
        return self._eval(ast.parse(result, mode="eval").body, env)

    def _eval(self, tree: ast.expr, env: dict[str, str | tuple]) -> str | tuple:
        if isinstance(tree, ast.Constant):
            return (tree.value,)
        if isinstance(tree, ast.Name):
            return env[tree.id]
        if isinstance(tree, ast.BinOp):
            return self.op(_BINARY[type(tree.op)], self._eval(tree.left, env), self._eval(tree.right, env))
        if isinstance(tree, ast.UnaryOp):
            return self.op(_UNARY[type(tree.op)], self._eval(tree.operand, env))
        if isinstance(tree, ast.Compare):
            (op,), (right,) = tree.ops, tree.comparators
            return self.op(_COMPARE[type(op)], self._eval(tree.left, env), self._eval(right, env))
        if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name):
            args = [self._eval(a, env) for a in tree.args]
            name = tree.func.id
            if name == "rowsize":
                self.row_length = True
                return ROW_LENGTH
            if name in _ROW:
                return self.row(_ROW[name], *args)
            if name == "rowvar":
                return self.row("var", *args)
            return self.op(name, *args)
        raise ValueError(f"unsupported derivative syntax: {ast.unparse(tree)}")


def _levels(region: Region) -> dict[str, bool]:
    """Per value: True where it is one per row (a reduction's result, or computed from such results only)."""
    levels = {i.name: not i.is_tensor for i in region.inputs}
    for node in region.nodes:
        op = node.definition
        if op.kind is OpKind.REDUCTION:
            levels[node.out] = op.keepdim_operand is not None
        else:
            values = [v for i, v in enumerate(node.operands) if i not in node.constants]
            levels[node.out] = all(levels[v] for v in values)
    return levels


def _reduced_dim(region: Region) -> int | None:
    dims = set()
    for node in region.nodes:
        op = node.definition
        if op.kind is not OpKind.REDUCTION:
            continue
        if op.keepdim_operand is not None and not node.operands[op.keepdim_operand]:
            raise NoBackward("a reduction without keepdim")
        dims.add(-1 if op.dim_operand is None else node.operands[op.dim_operand])
    if len(dims) > 1:
        raise NoBackward("reductions along several dims")
    return dims.pop() if dims else None


def backward(region: Region) -> Backward:
    """The backward of `region` (raises NoBackward). Every output not computed by a comparison or a logical op
    takes a gradient."""
    if any(node.inplace for node in region.nodes):
        raise NoBackward("an in-place update")
    for node in region.nodes:
        if node.op not in DERIVATIVES and not node.definition.returns_bool:
            raise NoBackward(f"no derivative for `{node.op}`")
    producers = {node.out: node for node in region.nodes}
    levels = _levels(region)
    for node in region.nodes:
        if node.definition.kind is OpKind.REDUCTION and levels[node.operands[0]]:
            # Eager reduces its own dim of length 1, where `rowsize()` is the iteration space's row.
            raise NoBackward("a reduction of a value that is one per row")
    builder = _Builder(region, levels)
    builder.dim = _reduced_dim(region)
    grads: dict[str, str | tuple] = {}
    grad_inputs = []
    taking = []
    for position, output in enumerate(region.outputs):
        if output.value not in producers or producers[output.value].definition.returns_bool:
            continue
        name = builder.fresh(f"{GRAD}{output.value}")
        what = "the value returned" if output.target == RETURN else output.target
        grad_inputs.append(Input(name, f"the gradient of {what}", True))
        builder.gradients.add(name)
        levels[name] = levels[output.value]  # a reduction's result's gradient is one per row too
        grads[output.value] = name
        taking.append(position)
    if not grad_inputs:
        raise NoBackward("no output that carries a gradient")
    tensors = {i.name for i in region.tensor_inputs}
    results = {name: builder.fresh(f"{GRAD}{name}") for name in tensors}  # the outputs' names, kept
    for node in reversed(region.nodes):
        grad = grads.get(node.out)
        if grad is None or node.definition.returns_bool:
            continue
        if isinstance(grad, tuple):
            continue  # a constant gradient: only a zero can arise, which adds nothing
        derivatives = DERIVATIVES[node.op]
        builder.line = node.line
        if node.definition.kind is OpKind.REDUCTION and levels[grad] and not levels[node.out]:
            # A per-row gradient of a per-element result (a softmax only summed): its row helpers sum whole rows.
            builder.base = f"g_{node.out}"
            grad = builder.broadcast(grad, node.out)
        for position, formula in enumerate(derivatives):
            operand = node.operands[position]
            if formula is None or position in node.constants or not (operand in producers or operand in tensors):
                continue
            if node.op == CAST.name and node.operands[1] not in _FLOATS:
                continue  # a cast to an integer or bool dtype: no gradient flows back through it
            builder.base = f"g_{operand}"
            contribution = builder.formula(formula, node, grad, node.out)
            if isinstance(contribution, tuple):
                continue  # a constant derivative (0)
            if levels.get(operand) and not levels[contribution]:
                contribution = builder.row("sum", contribution)  # a per-row value met every element of its row
            previous = grads.get(operand)
            grads[operand] = contribution if previous is None else builder.op("add", previous, contribution)
    outputs, grads_of = [], []
    for position, item in enumerate(region.tensor_inputs):
        grad = grads.get(item.name)
        if grad is None or isinstance(grad, tuple):
            continue
        builder.line = region.first_line
        if levels[grad]:  # one per row (an input only summed): every element of the row has it, as in autograd
            builder.base = f"g_{item.name}"
            grad = builder.broadcast(grad, item.name)
        cast = results[item.name]
        builder.nodes.append(Node(CAST_LIKE.name, (grad, item.name), cast, builder.line))
        outputs.append(Output(cast, cast))
        grads_of.append(position)
    if not outputs:
        raise NoBackward("no tensor input receives a gradient")
    nodes = [*region.nodes, *builder.nodes]
    nodes = _shifts_on_inputs(nodes, {i.name for i in (*region.tensor_inputs, *grad_inputs)}, builder)
    nodes = _live(_common_subexpressions(nodes), {o.value for o in outputs})
    scalars = list(region.scalar_inputs) + [Input(ROW_LENGTH, "the reduced dim's length", False)] * builder.row_length
    back = Region(
        name=f"{region.name}{BACKWARD}",
        path=region.path,
        function=region.function,
        first_line=region.first_line,
        last_line=region.last_line,
        inputs=(*region.tensor_inputs, *grad_inputs, *scalars),
        nodes=tuple(nodes),
        outputs=tuple(outputs),
        conditions=region.conditions,
    )
    return Backward(back, tuple(grads_of), tuple(taking), builder.row_length, gradient_sources(region))


_SIGN_FREE = frozenset({"neg", "pos", CAST.name, CAST_LIKE.name, "round_like"})  # R(f(a)) = f(R(a))


def _shifts_on_inputs(nodes: list[Node], tensors: set[str], builder: _Builder) -> list[Node]:
    """`nodes` with every shifted op reading a tensor input, as the kernels need (they load the input at the other
    half): `rotate_half` of a computed value (the backward's `-rotate_half(g * sin)`) is moved onto the inputs it
    is computed from. With R = rotate_half and S = swap_halves (the halves exchanged, no sign), S commutes with
    every pointwise op, and R with sums and casts; of a product one factor takes R and the others S:
    R(g * sin) = R(g) * S(sin). Raises NoBackward for what does not move so (R of a constant, of a nonlinear
    op). Eager's results exactly: each element is the same product of the same elements."""
    producers = {n.out: n for n in nodes}
    moved: dict[tuple[str, str], str] = {}
    out: list[Node] = []

    def emit(op: str, operands: tuple, constants: tuple[int, ...], line: int) -> str:
        name = builder.fresh("t")
        out.append(Node(op, operands, name, line, constants))
        return name

    def shift(value: str, op: str, half: Node) -> str:
        key = (value, op)
        if key not in moved:
            moved[key] = _shift(value, op, half)
        return moved[key]

    def operand(node: Node, position: int, op: str, half: Node):
        value = node.operands[position]
        if position in node.constants or position in node.definition.dtype_operands:
            if op == "rotate_half" and position not in node.definition.dtype_operands and value != 0:
                raise NoBackward("a rotation of a constant")
            return value
        return shift(value, op, half)

    def _shift(value: str, op: str, half: Node) -> str:
        if value in tensors:
            return emit(op, (value, half.operands[1]), tuple(c for c in half.constants if c == 1), half.line)
        node = producers.get(value)
        if node is None:  # a scalar input: the same at every element
            if op == "rotate_half":
                raise NoBackward("a rotation of a scalar")
            return value
        kind = node.definition.kind
        if kind is OpKind.SHIFTED:
            if node.op == op == "swap_halves" and node.operands[0] in tensors:
                return node.operands[0]
            if node.op == op == "rotate_half" and node.operands[0] in tensors:
                return emit("neg", (node.operands[0],), (), node.line)
            raise NoBackward("a rotation of a rotated value")
        if kind is not OpKind.POINTWISE or node.op == ACTIVATION.name:
            raise NoBackward(f"a rotation through `{node.op}`")
        positions = range(len(node.operands))
        if op == "swap_halves":
            operands = tuple(operand(node, k, op, half) for k in positions)
        elif node.op in ("add", "sub") or node.op in _SIGN_FREE:
            operands = tuple(
                operand(node, k, op, half) if k == 0 or node.op in ("add", "sub") else node.operands[k]
                for k in positions
            )
        elif node.op in ("mul", "div"):
            free = [k for k in positions if k not in node.constants]
            rotated = free[0] if node.op == "mul" or free[0] == 0 else None
            if rotated is None:
                raise NoBackward("a rotation of a divisor")
            operands = tuple(
                operand(node, k, "rotate_half" if k == rotated else "swap_halves", half) for k in positions
            )
        elif node.op == "where":
            operands = (operand(node, 0, "swap_halves", half), *(operand(node, k, op, half) for k in (1, 2)))
        else:
            raise NoBackward(f"a rotation through `{node.op}`")
        return emit(node.op, operands, node.constants, node.line)

    renamed: dict[str, str] = {}
    for node in nodes:
        node = replace(node, operands=tuple(renamed.get(o, o) if isinstance(o, str) else o for o in node.operands))
        if node.definition.kind is OpKind.SHIFTED and node.operands[0] not in tensors:
            producers[node.out] = node
            renamed[node.out] = shift(node.operands[0], node.op, node)
            continue
        out.append(node)
        producers[node.out] = node
    return out


def gradient_sources(region: Region) -> tuple[tuple[int, ...], ...]:
    """Per output of `region`, the tensor inputs (positions) it is computed from through ops that carry a
    gradient: eager's output requires grad exactly when one of them does. Comparisons and logical ops,
    casts to integer or bool dtypes, conditions and operands read for their dtype carry none (an output
    computed from an input that requires grad only through `x > 0` does not require grad)."""
    reach: dict[str, frozenset[int]] = {item.name: frozenset({n}) for n, item in enumerate(region.tensor_inputs)}
    for node in region.nodes:
        op = node.definition
        if op.returns_bool or (node.op == CAST.name and node.operands[1] not in _FLOATS):
            reach[node.out] = frozenset()
            continue
        skipped = set(node.constants) | set(op.dtype_operands) | set(op.bool_operands)
        carried = [o for i, o in enumerate(node.operands) if i not in skipped]
        reach[node.out] = frozenset().union(*(reach.get(o, frozenset()) for o in carried))
    return tuple(tuple(sorted(reach.get(o.value, frozenset()))) for o in region.outputs)


def _activation_variants(region: Region) -> Backward:
    """The backward of a region whose activation module is chosen at run time: one per op the module may map to
    (raises NoBackward where the region calls several modules, or the variants differ in what they take)."""
    modules = {node.operands[1] for node in region.nodes if node.op == ACTIVATION.name}
    if len(modules) != 1:
        raise NoBackward("activation modules of several attributes")
    (module,) = modules
    variants = []
    for op in ACTIVATION_OPS:  # in code order: the runtime picks a variant by the code
        nodes = tuple(
            Node(op, node.operands[:1], node.out, node.line) if node.op == ACTIVATION.name else node
            for node in region.nodes
        )
        concrete = replace(region, inputs=tuple(i for i in region.inputs if i.name != module), nodes=nodes)
        derived = backward(concrete)
        variants.append(replace(derived, region=replace(derived.region, name=f"{derived.region.name}_{op}")))
    first = variants[0]
    if any(
        (v.grads_of, v.outputs_with_grads, v.row_length) != (first.grads_of, first.outputs_with_grads, first.row_length)
        for v in variants
    ):
        raise NoBackward("activations whose backwards take different gradients")
    position = [i.name for i in region.scalar_inputs].index(module)
    return replace(first, sources=gradient_sources(region), activation=position, variants=tuple(variants))


def backwards_of(
    regions: Iterable[Region], tree: ast.Module | None = None
) -> tuple[dict[str, Backward], tuple[tuple[str, str], ...]]:
    """Per region of `regions` with a backward that one kernel computes, that backward; and (name, why) for the
    others, whose calls under autograd take the source's statements. `tree`: the module the regions are on,
    read for the inputs its functions update in place after a region (`updated_later`)."""
    derived, refused = {}, []
    for region in regions:
        try:
            if tree is not None and (why := updated_later(tree, region)):
                raise NoBackward(why)
            chosen = any(node.op == ACTIVATION.name for node in region.nodes)
            candidate = _activation_variants(region) if chosen else backward(region)
            for each in candidate.variants or (candidate,):
                kernel_view(each.region)  # raises where one kernel cannot compute it
        except (NoBackward, NotLowerable) as why:
            refused.append((region.name, str(why)))
            continue
        derived[region.name] = candidate
    return derived, tuple(refused)


def updated_later(tree: ast.Module, region: Region) -> str | None:
    """Why the region's node could find an input it saved changed by the time its backward runs: a tensor input
    that the enclosing function updates in place after the region (`x.clamp_(...)`, `x += y`, `x[i] = y`,
    `f(x, inplace=True)`), or anywhere in a loop around it. The node saves its inputs where eager's ops may
    save only their results (`tanh`), so autograd would raise where eager does not; such a region keeps the
    source's statements under autograd. Updates through another name or in a caller are not seen."""
    inputs = {i.source for i in region.tensor_inputs}
    function = None
    for node in ast.walk(tree):  # the innermost function around the region
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= region.first_line:
            if region.last_line <= node.end_lineno and (function is None or node.lineno > function.lineno):
                function = node
    if function is None:
        return None
    loops = [
        n
        for n in ast.walk(function)
        if isinstance(n, (ast.For, ast.AsyncFor, ast.While)) and n.lineno <= region.first_line <= n.end_lineno
    ]
    after = region.first_line if loops else region.last_line + 1
    start = min((n.lineno for n in loops), default=after)
    for node in ast.walk(function):
        if getattr(node, "lineno", 0) < start or region.first_line <= getattr(node, "lineno", 0) <= region.last_line:
            continue
        for updated in _updated_in_place(node):
            if ast.unparse(updated) in inputs:
                return f"input `{ast.unparse(updated)}` is updated in place at line {node.lineno}, before the backward runs"
    return None


def _updated_in_place(node: ast.AST) -> list[ast.expr]:
    """The expressions a statement or call updates in place."""
    if isinstance(node, ast.AugAssign):
        return [node.target.value if isinstance(node.target, ast.Subscript) else node.target]
    if isinstance(node, ast.Assign):
        return [t.value for t in node.targets if isinstance(t, ast.Subscript)]
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        inplace = any(k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value for k in node.keywords)
        trailing = name.endswith("_") and not name.startswith("_")
        if trailing and isinstance(func, ast.Attribute) and ast.unparse(func.value).split(".")[0] not in _LIBRARIES:
            return [func.value]  # `x.add_(y)`
        if trailing or inplace:
            return node.args[:1]  # `torch.relu_(x)`, `nn.init.zeros_(x)`, `F.relu(x, inplace=True)`
    return []


def _live(nodes: list[Node], needed: set[str]) -> list[Node]:
    """`nodes` less those nothing in `needed` depends on."""
    live = set(needed)
    kept = []
    for node in reversed(nodes):
        if node.out in live:
            kept.append(node)
            live.update(v for i, v in enumerate(node.operands) if i not in node.constants)
    return kept[::-1]


def _common_subexpressions(nodes: list[Node]) -> list[Node]:
    """`nodes` with each computation done once: derivatives recompute the statistics they share (a norm's)."""
    seen: dict[tuple, str] = {}
    renamed: dict[str, str] = {}
    kept = []
    for node in nodes:
        operands = tuple(o if i in node.constants else renamed.get(o, o) for i, o in enumerate(node.operands))
        node = replace(node, operands=operands)
        # Constants by their text: 1, 1.0 and True are equal in Python but give tensors of different dtypes.
        written = tuple(repr(o) if i in node.constants else o for i, o in enumerate(operands))
        key = (node.op, written, node.constants, node.inplace)
        if key in seen:
            renamed[node.out] = seen[key]
            continue
        seen[key] = node.out
        kept.append(node)
    return kept
