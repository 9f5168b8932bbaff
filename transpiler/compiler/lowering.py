"""Lowering reductions to row primitives: what both kernel backends render.

A region with reductions computes over a 2-d view of its iteration space: rows (every
dim but the reduced one) by columns (the reduced dim). Every tensor input is an
ELEMENT value, indexed by row and column (stride 0 where it broadcasts); a reduction
turns an ELEMENT value into a ROW value (one per row); a pointwise op is ROW when all
its operands are ROW values or constants, else ELEMENT.

`lower` rewrites each reduction (sum, mean, var, softmax, layer_norm, ...) into
pointwise ops of the op table and the ROW ops `row_sum`, `row_max`, `row_min` and
`row_size` (the row's length), the way torch computes them: softmax subtracts the row
maximum, var is two-pass (mean first, then the mean of squared deviations), logsumexp
guards infinite maxima. Backends then only need three reductions; they accumulate in
fp32 (fp64 for double) like torch.

The region's own nodes keep the high-level ops: its eager reference (torch's exact
semantics) and `transpile explain` read those.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from transpiler.compiler.dtypes import FLOATING, type_classes
from transpiler.compiler.ir import Node, Operand, Region
from transpiler.compiler.ops import CAST, CAST_LIKE, OpKind

# The ROW ops that reduce a value (row_size only measures the row).
ROW_REDUCTIONS = frozenset({"row_sum", "row_max", "row_min"})


class Level(Enum):
    ELEMENT = "element"  # one value per element of the iteration space
    ROW = "row"  # one value per row: the result of a reduction, broadcast along the row


class NotLowerable(ValueError):
    """The region's reductions cannot share one kernel (different dims or keepdims)."""


@dataclass(frozen=True)
class RowRegion:
    """A region lowered to row primitives, with what the backends and the runtime need to know."""

    region: Region  # nodes: pointwise ops and ROW ops only; inputs and outputs as the original
    dim: int  # the reduced dim as written (negative: from the end); the runtime normalises it
    keepdim: bool  # ROW outputs keep the reduced dim (size 1), or drop it
    levels: dict[str, Level]  # of every input and node value
    original: (
        Region  # before lowering: its reductions are typed (transpiler/compiler/dtypes.py), their row primitives not
    )

    @property
    def element_outputs(self):
        return tuple(o for o in self.region.outputs if self.levels[o.value] is Level.ELEMENT)

    @property
    def row_outputs(self):
        return tuple(o for o in self.region.outputs if self.levels[o.value] is Level.ROW)


def has_reductions(region: Region) -> bool:
    return any(node.definition.kind is OpKind.REDUCTION for node in region.nodes)


def reduction_dim(node: Node) -> int:
    """The dim the reduction reduces along (ops.Op.dim_operand): as written, or -1 for the last."""
    position = node.definition.dim_operand
    return -1 if position is None else node.operands[position]


def reduction_keepdim(node: Node) -> bool | None:
    """The reduction's keepdim, or None for the ops whose result has the input's shape (softmax)."""
    position = node.definition.keepdim_operand
    return None if position is None else node.operands[position]


def lower(region: Region) -> RowRegion:
    """The region with its reductions rewritten into row primitives (raises NotLowerable)."""
    if any(n.definition.kind is OpKind.SHIFTED for n in region.nodes):
        # Row kernels index rows by columns: nothing there locates an element's neighbour along the last dim.
        raise NotLowerable("a kernel with reductions reads no input at shifted elements")
    reductions = [n for n in region.nodes if n.definition.kind is OpKind.REDUCTION]
    dims = {reduction_dim(n) for n in reductions}
    keepdims = {k for k in map(reduction_keepdim, reductions) if k is not None}
    if len(dims) != 1 or len(keepdims) > 1:
        raise NotLowerable("a kernel reduces along one dim, all with the same keepdim")
    builder = _Lowering(region)
    for node in region.nodes:
        builder.lower(node)
    lowered = replace(region, nodes=tuple(builder.nodes))
    levels = {item.name: Level.ELEMENT for item in region.tensor_inputs}
    levels.update({item.name: Level.ROW for item in region.scalar_inputs})
    for node in lowered.nodes:
        if node.definition.kind is OpKind.ROW:
            levels[node.out] = Level.ROW
        else:
            values = node.values()
            levels[node.out] = Level.ELEMENT if any(levels[v] is Level.ELEMENT for v in values) else Level.ROW
    row_results = {n.out for n in region.nodes if reduction_keepdim(n) is False}
    if row_results and _mixes_dropped_dim(lowered, levels, row_results):
        raise NotLowerable("a keepdim=False result is broadcast against the elements")
    for node in lowered.nodes:
        if node.op in ROW_REDUCTIONS and levels[node.values()[0]] is not Level.ELEMENT:
            raise NotLowerable("a reduction of a value that is constant along the row")
    return RowRegion(lowered, dims.pop(), keepdims.pop() if keepdims else True, levels, region)


def _mixes_dropped_dim(region: Region, levels: dict[str, Level], dropped: set[str]) -> bool:
    """Whether a value derived from a keepdim=False result meets an ELEMENT value (their shapes differ)."""
    derived = set(dropped)
    for node in region.nodes:
        values = node.values()
        if derived.intersection(values):
            if any(levels[v] is Level.ELEMENT for v in values):
                return True
            derived.add(node.out)
    return False


class _Lowering:
    """Emits the lowered nodes; each reduction's last node takes the reduction's own name."""

    def __init__(self, region: Region) -> None:
        self.nodes: list[Node] = []
        self.taken = {i.name for i in region.inputs} | {n.out for n in region.nodes}
        self.line = 0
        self.row_size: str | None = None  # one `row_size` node serves every reduction

    def lower(self, node: Node) -> None:
        self.line = node.line
        if node.definition.kind is not OpKind.REDUCTION:
            self.nodes.append(node)
            return
        x = node.operands[0]
        rule = getattr(self, f"_{node.op}")
        result = rule(node, x)
        # Rename the last node so the reduction's result keeps its name.
        last = self.nodes[-1]
        assert last.out == result
        self.nodes[-1] = replace(last, out=node.out)

    # -- emitting ------------------------------------------------------------------------
    def op(self, name: str, *operands: Operand | tuple[object]) -> str:
        """A node `name(operands)`; a 1-tuple operand is a constant (a bare str is a value name)."""
        values, constants = [], []
        for position, operand in enumerate(operands):
            if isinstance(operand, tuple):
                values.append(operand[0])
                constants.append(position)
            else:
                values.append(operand)
        out = self._fresh(name)
        self.nodes.append(Node(name, tuple(values), out, self.line, tuple(constants)))
        return out

    def _fresh(self, base: str) -> str:
        n = 0
        while f"{base}{n}" in self.taken:
            n += 1
        self.taken.add(f"{base}{n}")
        return f"{base}{n}"

    def size(self) -> str:
        if self.row_size is None:
            self.row_size = self.op("row_size")
        return self.row_size

    def mean(self, x: str) -> str:
        return self.op("div", self.op("row_sum", x), self.size())

    def centered_square_mean(self, x: str, correction: int) -> tuple[str, str, str]:
        """(x - mean(x), sum(x - mean(x)), sum((x - mean(x))**2) / (n - correction)): two-pass variance.

        The variance is the corrected two-pass form, sum(d**2) - sum(d)**2 / n over d = x - mean(x)
        (Chan, Golub and LeVeque): the second term removes the rounding error of the mean, which
        plain two-pass keeps (33 copies of 123456789.0 in float32 gave 64, not 0).
        """
        centered = self.op("sub", x, self.mean(x))
        squares = self.op("row_sum", self.op("mul", centered, centered))
        drift = self.op("row_sum", centered)
        corrected = self.op("sub", squares, self.op("mul", drift, self.op("div", drift, self.size())))
        # A sum of squares that overflowed stays infinite, as eager's variance does, not inf - inf = NaN
        # (a layer norm of a row near -1e30: eager gives 0 there, its rsqrt of an infinite variance).
        squares = self.op("where", self.op("isinf", squares), squares, corrected)
        squares = self.op("clamp_min", squares, (0.0,))  # rounding may leave it a hair below 0: sqrt would give NaN
        if correction == 0:
            return centered, drift, self.op("div", squares, self.size())
        # As ATen: over max(0, n - correction), so a row with no degree of freedom left gives 0/0 = NaN.
        denominator = self.op("clamp_min", self.op("sub", self.size(), (correction,)), (0,))
        return centered, drift, self.op("div", squares, denominator)

    def scaled(self, x: str) -> tuple[str, str]:
        """(x / s, s) for s the row's largest magnitude (1 where that is 0, infinite or NaN).

        Squares of the scaled values neither overflow nor underflow the compute type: eager's
        CPU var and std accumulate float32 in double, so [1e20, -1e20] has a std, [1e-30, 0] too.
        """
        largest = self.op("row_max", self.op("abs", x))
        usable = self.op("and", self.op("gt", largest, (0.0,)), self.op("lt", largest, (float("inf"),)))
        scale = self.op("where", usable, largest, (1.0,))
        return self.op("div", x, scale), scale

    # -- the reductions -------------------------------------------------------------------
    def _sum(self, node: Node, x: str) -> str:
        return self.op("row_sum", x)

    def _mean(self, node: Node, x: str) -> str:
        return self.mean(x)

    def _amax(self, node: Node, x: str) -> str:
        return self.op("row_max", x)

    def _amin(self, node: Node, x: str) -> str:
        return self.op("row_min", x)

    def _var(self, node: Node, x: str) -> str:
        scaled, scale = self.scaled(x)
        variance = self.centered_square_mean(scaled, node.operands[2])[2]
        return self.op("mul", self.op("mul", variance, scale), scale)

    def _std(self, node: Node, x: str) -> str:
        scaled, scale = self.scaled(x)
        return self.op("mul", self.op("sqrt", self.centered_square_mean(scaled, node.operands[2])[2]), scale)

    def _logsumexp(self, node: Node, x: str) -> str:
        # torch's: an infinite row maximum is replaced by 0, so all -inf rows give -inf, not NaN.
        maximum = self.op("row_max", x)
        infinite = self.op("eq", self.op("abs", maximum), (float("inf"),))
        shift = self.op("where", infinite, (0.0,), maximum)
        # torch's logsumexp is a composite of tensor ops, each result held in the reduction's dtype (a half's
        # x - shift, exp, sum and log are each rounded to half), where softmax and the norms round once.
        held = lambda value: self.op("round_like", value, (node.out,))  # noqa: E731
        total = self.op("row_sum", held(self.op("exp", held(self.op("sub", x, shift)))))
        return self.op("add", held(self.op("log", held(total))), shift)

    def _softmax(self, node: Node, x: str) -> str:
        exponentials = self.op("exp", self.op("sub", x, self.op("row_max", x)))
        return self.op("div", exponentials, self.op("row_sum", exponentials))

    def _log_softmax(self, node: Node, x: str) -> str:
        shifted = self.op("sub", x, self.op("row_max", x))
        total = self.op("row_sum", self.op("exp", shifted))
        return self.op("sub", shifted, self.op("log", total))

    def _layer_norm(self, node: Node, x: str) -> str:
        _, weight, bias, eps = node.operands
        eps = (eps,) if 3 in node.constants else eps
        centered, drift, variance = self.centered_square_mean(x, 0)
        # x - mean(x) less the rounding error of the mean (the drift's share): a constant row gives 0,
        # as eager's exact mean does, where the error would be amplified by 1/sqrt(eps).
        centered = self.op("sub", centered, self.op("div", drift, self.size()))
        scale = self.op("rsqrt", self.op("add", variance, eps))
        return self.op("add", self.op("mul", self.op("mul", centered, scale), weight), bias)


# -- passes over the row, for rows longer than one block ---------------------------------------
@dataclass(frozen=True)
class Pass:
    """One loop over a row's columns: the element nodes it computes, in order, and what follows it.

    `reductions` are the ROW ops it accumulates; `then` the ROW-level nodes computable once they
    are done (before the next pass). The last pass has no reductions: it computes the ELEMENT
    outputs. `before` of `passes()` holds the ROW nodes needing no pass (`row_size`, scalars).
    """

    elements: tuple[Node, ...]
    reductions: tuple[Node, ...]
    then: tuple[Node, ...]


def passes(lowered: RowRegion) -> tuple[tuple[Node, ...], list[Pass]]:
    """(ROW nodes to compute before any pass, the passes): a looped kernel's schedule.

    A reduction runs in the first pass after every ROW value it depends on is known, so
    softmax takes two passes plus the store pass, and layer norm's two-pass variance three.
    Element nodes are recomputed in each pass that needs them (from reloaded inputs).
    """
    nodes = lowered.region.nodes
    by_out = {n.out: n for n in nodes}
    levels = lowered.levels
    ready: dict[str, int] = {i.name: 0 for i in lowered.region.inputs}  # pass after which a value exists
    for node in nodes:
        deps = max((ready[v] for v in node.values()), default=0)
        ready[node.out] = deps + 1 if node.op in ROW_REDUCTIONS else deps
    count = max((ready[n.out] for n in nodes), default=0)
    element_outputs = [o.value for o in lowered.element_outputs]

    def needed(roots: list[str]) -> tuple[Node, ...]:
        """The ELEMENT nodes `roots` depend on within one pass, in region order."""
        seen: set[str] = set()
        stack = list(roots)
        while stack:
            value = stack.pop()
            node = by_out.get(value)
            if value in seen or node is None or levels[value] is not Level.ELEMENT:
                continue
            seen.add(value)
            stack += node.values()
        return tuple(n for n in nodes if n.out in seen)

    before = tuple(n for n in nodes if levels[n.out] is Level.ROW and ready[n.out] == 0)
    schedule = []
    for k in range(count):
        reductions = tuple(n for n in nodes if n.op in ROW_REDUCTIONS and ready[n.out] == k + 1)
        then = tuple(n for n in nodes if levels[n.out] is Level.ROW and ready[n.out] == k + 1 and n not in reductions)
        schedule.append(Pass(needed([r.values()[0] for r in reductions]), reductions, then))
    schedule.append(Pass(needed(element_outputs), (), ()))
    return before, schedule


# -- casts to the dtype of a computed value ------------------------------------------------
def kernel_view(region: Region) -> tuple[Region, tuple[tuple[str, int], ...]]:
    """The region as its kernels compute it, and the dtype checks the runtime makes.

    Each `to_like` whose dtype operand is a value the region computes becomes a cast to that
    value's dtype where torch's promotion fixes it whatever the inputs (`t.to(m.dtype)` with `m`
    a comparison's bool), and otherwise gets a tensor input as a stand-in: one whose dtype is
    the value's on every probe of `dtypes.type_classes`, or else the first input the value is
    computed from; per stand-in, (value, position of that input). Raises NotLowerable when one
    kernel cannot compute the region (see `lowering.lower`) or such a value is one per row: an
    input stands in only for element values.
    """
    position = {i.name: n for n, i in enumerate(region.tensor_inputs)}
    sources: dict[str, tuple[int, ...]] = {name: (n,) for name, n in position.items()}
    classes, fixed = type_classes(region, frozenset(), FLOATING)
    same_dtype = {member: c.members[0] for c in classes for member in c.members if c.members[0] in position}
    nodes, checks = [], {}
    for node in region.nodes:
        sources[node.out] = tuple(sorted(set().union(*(sources.get(v, ()) for v in node.values()))))
        like = node.operands[1] if node.op == CAST_LIKE.name else None
        if like is not None and like in fixed:
            node = replace(node, op=CAST.name, operands=(node.operands[0], fixed[like]), constants=(1,))
        elif like is not None and like not in position:
            stand_in = position[same_dtype[like]] if like in same_dtype else sources[like][0]
            checks[like] = stand_in
            node = replace(node, operands=(node.operands[0], region.tensor_inputs[stand_in].name))
        nodes.append(node)
    levels = lower(region).levels if has_reductions(region) else {}
    if any(levels.get(v) is Level.ROW for v in checks):
        raise NotLowerable("a cast to the dtype of a row value")
    return replace(region, nodes=tuple(nodes)), tuple(checks.items())
