"""The backward regions transpiler/compiler/autodiff.py derives, against torch.autograd: every op of
`ops.DERIVATIVES` alone and in chains (a norm then an activation, softmax of a sum, reductions feeding
pointwise ops, values used twice, broadcast weights, Python-number inputs, constant operands), in
float64, with ties, zeros, infinities and NaN where torch defines a gradient.

Both regions run as their eager references (what every kernel ships, `emit.host.module._reference`);
the backward's gradients, summed to each input's shape as autograd sums broadcast gradients, must equal
`torch.autograd.grad` of the forward's, NaN where it is NaN."""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field, replace

import pytest
import torch

import emit.runtime
from emit.host.module import _reference
from transpiler.compiler import autodiff
from transpiler.compiler.ir import Input, Node, Output, Region
from transpiler.compiler.ops import BY_NAME, DERIVATIVES, NO_DERIVATIVE, OpKind

F64 = torch.float64
INF, NAN = math.inf, math.nan
# Where derivatives have kinks, limits or special cases: zeros of both signs, infinities, NaN, integers.
SPECIAL = (0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 0.5, -2.0, 3.0, 25.0, -25.0, 1000.0)


@dataclass
class Case:
    """A region written compactly: each node `(out, op, *operands)`, where an operand naming an input or an
    earlier node is a value and anything else a constant; inputs are tensors or Python numbers (scalar inputs)."""

    nodes: list[tuple]  # (out, op, *operands)
    inputs: dict[str, torch.Tensor | float]
    outputs: tuple[str, ...] = ()  # default: the last node's result
    name: str = field(default="case")

    def region(self) -> Region:
        inputs = tuple(Input(name, name, isinstance(value, torch.Tensor)) for name, value in self.inputs.items())
        known = set(self.inputs)
        nodes = []
        for line, (out, op, *operands) in enumerate(self.nodes, 1):
            constants = tuple(i for i, o in enumerate(operands) if not (isinstance(o, str) and o in known))
            nodes.append(Node(op, tuple(operands), out, line, constants))
            known.add(out)
        outputs = tuple(Output(o, o) for o in (self.outputs or (self.nodes[-1][0],)))
        return Region(self.name, "t.py", "f", 1, len(nodes), inputs, tuple(nodes), outputs)


def eager(region: Region):
    """The region's eager reference as a function."""
    namespace = {"torch": torch, "inplace": emit.runtime.inplace}
    exec(_reference(region, "t.py", []), namespace)
    return namespace[f"{region.name}_reference"]


def row_length(region: Region, tensors: list[torch.Tensor]) -> int:
    """The reduced dim's length in the iteration space: what the caller passes as `rowsize()`."""
    reduction = next(n for n in region.nodes if n.definition.kind is OpKind.REDUCTION)
    op = reduction.definition
    dim = -1 if op.dim_operand is None else reduction.operands[op.dim_operand]
    return torch.broadcast_shapes(*(t.shape for t in tensors))[dim]


def check(case: Case, seed: int = 0) -> None:
    region = case.region()
    back = autodiff.backward(region)
    generator = torch.Generator().manual_seed(seed)
    tensors = [case.inputs[i.name] for i in region.tensor_inputs]
    scalars = [case.inputs[i.name] for i in region.scalar_inputs]
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in tensors]
    outputs = eager(region)(*leaves, *scalars)
    taken = [outputs[p] for p in back.outputs_with_grads]
    seeds = [torch.randn(o.shape, dtype=o.dtype, generator=generator) for o in taken]
    differentiable = [t for t in leaves if t.requires_grad]
    expected = dict(
        zip(
            (id(t) for t in differentiable),
            torch.autograd.grad(taken, differentiable, seeds, allow_unused=True, materialize_grads=True),
        )
    )
    rows = [row_length(region, tensors)] if back.row_length else []
    results = eager(back.region)(*tensors, *seeds, *scalars, *rows)
    got = dict(zip(back.grads_of, results))
    for position, leaf in enumerate(leaves):
        if not leaf.requires_grad:  # an integer or bool input: regions know no dtypes, the caller drops its gradient
            continue
        name = region.tensor_inputs[position].name
        want = expected[id(leaf)]
        if position not in got:  # no gradient flows to it: autograd's is zero
            assert not want.any(), f"{name}: the backward gives no gradient, autograd gives {want}"
            continue
        assert got[position].dtype == leaf.dtype, name
        torch.testing.assert_close(got[position].sum_to_size(leaf.shape), want, equal_nan=True, msg=name)


# -- inputs -------------------------------------------------------------------------------------------------


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(shape, dtype=F64, generator=_generator(seed))


def mixed(seed: int = 1) -> torch.Tensor:
    """Random values and the SPECIAL ones, as two rows of one tensor."""
    special = torch.tensor(SPECIAL, dtype=F64)
    return torch.stack((randn(len(SPECIAL), seed=seed) * 2, special))


def positive(seed: int = 1) -> torch.Tensor:
    """Values in a domain such as log's: random positives, 0, inf, and a NaN."""
    values = randn(2, len(SPECIAL), seed=seed).abs() + 0.1
    values[1, :4] = torch.tensor((0.0, INF, NAN, 1.0))
    return values


def tied(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """x of shape [4, 5] and w of shape [5] (broadcast), equal along x's first row and at x[1, 2], with an
    infinity and NaN in x and NaN in w."""
    w = randn(5, seed=seed + 1)
    x = randn(4, 5, seed=seed)
    x[0] = w
    x[1, 2] = w[2]
    x[2, 0], x[2, 1], x[3, 3] = INF, NAN, -INF
    w[4] = NAN
    return x, w


def rows_with_ties(seed: int = 1) -> torch.Tensor:
    """[5, 6]: random rows, one with two tied maxima and two tied minima, one constant, one with infinities."""
    x = randn(5, 6, seed=seed)
    x[1] = torch.tensor((3.0, -1.0, 3.0, 0.5, -1.0, 2.0))
    x[2] = 0.25
    x[3, 1], x[3, 4] = INF, -INF
    return x


def mask(*shape: int, seed: int = 3) -> torch.Tensor:
    return torch.rand(shape, generator=_generator(seed)) > 0.5


def unary(op: str, x: torch.Tensor) -> list[Case]:
    """The op alone, or `op(x) * x` for an op that passes no gradient (its region alone has no backward)."""
    if all(f is None for f in DERIVATIVES[op]):
        return [Case([("y", op, "x"), ("z", "mul", "y", "x")], {"x": x})]
    return [Case([("y", op, "x")], {"x": x})]


# -- one op per case, by op --------------------------------------------------------------------------------


def _cases() -> dict[str, list[Case]]:
    x, w = tied()
    cases: dict[str, list[Case]] = {}
    for op in ("neg", "pos", "identity", "exp", "exp2", "expm1", "sin", "cos", "tanh", "erf", "sigmoid", "relu"):
        cases[op] = unary(op, mixed())
    for op in ("gelu", "gelu_tanh", "silu", "mish", "softplus", "quick_gelu", "relu_squared", "abs", "reciprocal"):
        cases[op] = unary(op, mixed())
    for op in ("sign", "floor", "ceil", "round", "trunc"):
        cases[op] = unary(op, mixed())
    # An infinite gradient where relu is 0: autograd's relu passes 0, not inf * 0.
    cases["relu_squared"].append(Case([("y", "relu_squared", "x"), ("z", "mul", "y", "w")], {"x": x, "w": w / 0.0}))
    for op in ("log", "log1p", "log2", "sqrt", "rsqrt"):
        cases[op] = unary(op, positive()) + unary(op, mixed())
    for op in ("add", "sub", "mul", "div"):
        cases[op] = [
            Case([("y", op, "x", "w")], {"x": x, "w": w}),
            Case([("y", op, "x", 2.5)], {"x": x}),
            Case([("y", op, -3.0, "x")], {"x": x}),
            Case([("y", op, "x", "s")], {"x": x, "s": 0.75}),  # a Python-number input
        ]
    # y * y underflows to 0 where x / y / y is finite (1e300).
    tiny = {
        "x": torch.tensor([1e-30, -2e-30, 1.0, 0.0], dtype=F64),
        "w": torch.tensor([1e-165, 1e-165, 0.0, 0.0], dtype=F64),
    }
    cases["div"].append(Case([("y", "div", "x", "w")], tiny))
    cases["remainder"] = [
        Case([("y", "remainder", "x", "w")], {"x": randn(4, 5) * 4, "w": randn(5, seed=2) + 0.1}),
        Case([("y", "remainder", "x", 1.5)], {"x": mixed()}),
    ]
    base = torch.tensor((0.0, 0.0, 0.0, 0.0, 2.0, -1.5, 0.5, 3.0, INF, 0.0))
    exponent = torch.tensor((2.0, 0.0, -1.0, 0.5, 0.0, 3.0, -2.5, 1.0, 2.0, NAN))
    cases["pow"] = [
        Case([("y", "pow", "x", "e")], {"x": base.to(F64), "e": exponent.to(F64)}),
        Case([("y", "pow", "x", "e")], {"x": randn(4, 5).abs(), "e": randn(5, seed=2)}),
    ]
    cases["pow"] += [Case([("y", "pow", "x", e)], {"x": mixed()}) for e in (2.0, 3, 0.5, -1.0)]
    cases["pow"] += [Case([("y", "pow", b, "e")], {"e": mixed()}) for b in (2.0, 0.0, 0.5)]
    cases["pow"].append(Case([("y", "pow", "x", 0.0), ("z", "mul", "y", "x")], {"x": mixed()}))  # 0 gradient at 0
    for op in ("minimum", "maximum"):
        cases[op] = [Case([("y", op, "x", "w")], {"x": x, "w": w}), Case([("y", op, "w", "x")], {"x": x, "w": w})]
    low, high = randn(5, seed=4) - 0.5, randn(5, seed=5) + 0.5
    high[3] = low[3] - 1.0  # min > max: every result is max
    bounded = randn(4, 5, seed=6)
    bounded[0], bounded[1] = low, high  # on the bounds
    bounded[2, 0], bounded[2, 1], bounded[2, 2] = INF, -INF, NAN
    cases["clamp"] = [
        Case([("y", "clamp", "x", "lo", "hi")], {"x": bounded, "lo": low, "hi": high}),
        Case(
            [("y", "clamp", "x", -0.5, 0.5)],
            {"x": torch.cat((bounded.flatten(), torch.tensor([-0.5, 0.5], dtype=F64)))},
        ),
        Case([("y", "clamp", "x", "lo", "hi")], {"x": bounded, "lo": 0.0, "hi": 0.0}),  # Python-number bounds
    ]
    cases["clamp_min"] = [
        Case([("y", "clamp_min", "x", "lo")], {"x": bounded, "lo": low}),
        Case([("y", "clamp_min", "x", 0.0)], {"x": mixed()}),
    ]
    cases["clamp_max"] = [
        Case([("y", "clamp_max", "x", "hi")], {"x": bounded, "hi": high}),
        Case([("y", "clamp_max", "x", 0.0)], {"x": mixed()}),
    ]
    end, weight = randn(4, 5, seed=7), randn(5, seed=8)
    cases["lerp"] = [
        Case([("y", "lerp", "x", "end", "t")], {"x": x, "end": end, "t": weight}),
        Case([("y", "lerp", "x", "end", 0.3)], {"x": x, "end": end}),
    ]
    t1, t2 = randn(4, 5, seed=9), randn(5, seed=10)
    t2[0] = 1e-170  # its square underflows
    for op in ("addcmul", "addcdiv"):
        cases[op] = [
            Case([("y", op, "x", "a", "b", 0.5)], {"x": randn(5, seed=11), "a": t1, "b": t2}),
            Case([("y", op, "x", "a", "b", 1)], {"x": x, "a": t1, "b": t2}),
        ]
    condition = mask(5)
    cases["where"] = [
        Case([("y", "where", "c", "x", "w")], {"c": condition, "x": x, "w": w}),
        Case([("y", "where", "c", "x", 0.0)], {"c": mask(4, 5), "x": x}),
        Case([("y", "where", "c", -1.0, "w")], {"c": mask(4, 5), "w": w}),
    ]
    cases["masked_fill"] = [
        Case([("y", "masked_fill", "x", "m", -INF)], {"x": x, "m": condition}),
        # A tensor fill value (0-dim): the sum of the gradient where it filled.
        Case([("y", "masked_fill", "x", "m", "v")], {"x": x, "m": mask(4, 5), "v": torch.tensor(0.5, dtype=F64)}),
    ]
    special = torch.tensor((NAN, INF, -INF, 0.0, 1.5, -2.0), dtype=F64)
    cases["nan_to_num"] = [Case([("y", "nan_to_num", "x", 0.0, 1e4, -1e4)], {"x": special})]
    a, b = mask(4, 5, seed=12), mask(5, seed=13)
    i, j = torch.randint(0, 8, (4, 5), generator=_generator(14)), torch.randint(0, 8, (5,), generator=_generator(15))
    for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        cases[op] = [
            Case([("m", op, "a", "b"), ("y", "where", "m", "x", "w")], {"a": a, "b": b, "x": x, "w": w}),
            Case([("k", op, "i", "j"), ("y", "mul", "x", "k")], {"i": i, "j": j, "x": x}),
        ]
    cases["bitwise_not"] = [Case([("m", "bitwise_not", "a"), ("y", "where", "m", "x", 0.0)], {"a": a, "x": x})]
    cases["to"] = [
        Case([("y", "to", "x", "float32")], {"x": randn(4, 5)}),
        # A cast to an integer passes no gradient: x gets only the multiplication's.
        Case([("i", "to", "x", "int64"), ("f", "to", "i", "float64"), ("y", "mul", "x", "f")], {"x": randn(4, 5) * 3}),
    ]
    cases["to_like"] = [Case([("y", "to_like", "x", "h")], {"x": randn(4, 5), "h": randn(5).float()})]
    rows = rows_with_ties()
    for op in ("sum", "mean", "amax", "amin", "logsumexp"):
        cases[op] = [
            Case([("s", op, "x", -1, True), ("y", "mul", "s", "x")], {"x": rows}),
            Case([("s", op, "x", 0, True), ("y", "mul", "s", "x")], {"x": rows}),
            Case([("s", op, "x", 1, True)], {"x": rows}),  # x's gradient is one per row
        ]
    cases["amax"].append(Case([("s", "amax", "x", -1, True)], {"x": torch.tensor([[NAN, 1.0], [INF, INF]], dtype=F64)}))
    cases["logsumexp"].append(Case([("s", "logsumexp", "x", -1, True)], {"x": torch.full((2, 3), -INF, dtype=F64)}))
    for op in ("var", "std"):
        cases[op] = [Case([("s", op, "x", -1, c, True), ("y", "mul", "s", "x")], {"x": rows}) for c in (0, 1, 2)]
        cases[op].append(Case([("s", op, "x", 0, 1, True)], {"x": rows}))
    masked = randn(3, 7)
    masked[0, 2], masked[1, :3] = -INF, -INF
    for op in ("softmax", "log_softmax"):
        cases[op] = [Case([("y", op, "x", -1)], {"x": masked}), Case([("y", op, "x", 0)], {"x": masked})]
    norm_input = randn(2, 3, 8)
    norm_input[1, 2] = 0.5  # a constant row: variance 0
    cases["layer_norm"] = [
        Case(
            [("y", "layer_norm", "x", "w", "b", 1e-5)], {"x": norm_input, "w": randn(8, seed=2), "b": randn(8, seed=3)}
        )
    ]
    for op, group in cases.items():
        for case in group:
            case.name = op
    # Shifted ops, whose halves differ (a rotary's sin repeats its halves: that would hide a swap): the backward's
    # rotation of `g * s` moves onto the inputs, R(g * s) = R(g) * S(s), and through pointwise ops (tanh, a division).
    x8, s8, c8 = randn(3, 8, seed=11), randn(3, 8, seed=12), randn(3, 8, seed=13)
    cases["rotate_half"] = [
        Case([("r", "rotate_half", "x", "h"), ("y", "mul", "r", "s")], {"x": x8, "s": s8, "h": 4}),
        Case(
            [("a", "mul", "x", "c"), ("r", "rotate_half", "x", "h"), ("b", "mul", "r", "s"), ("y", "add", "a", "b")],
            {"x": x8, "c": c8, "s": s8, "h": 4},
        ),
        Case([("r", "rotate_half", "x", "h"), ("t", "tanh", "s"), ("y", "div", "r", "t")], {"x": x8, "s": s8, "h": 4}),
    ]
    cases["swap_halves"] = [Case([("r", "swap_halves", "x", "h"), ("y", "mul", "r", "s")], {"x": x8, "s": s8, "h": 4})]
    return cases


CASES = _cases()


def _chains() -> dict[str, Case]:
    x, w, b = randn(2, 3, 8), randn(8, seed=2), randn(8, seed=3)
    scores = randn(2, 4, 4)
    bias = torch.zeros(1, 4, dtype=F64)
    bias[0, 3] = -INF  # a masked key
    chains = {
        "layer_norm_then_gelu": Case(
            [("y", "layer_norm", "x", "w", "b", 1e-5), ("z", "gelu", "y")], {"x": x, "w": w, "b": b}
        ),
        "softmax_of_a_sum": Case([("s", "add", "a", "m"), ("p", "softmax", "s", -1)], {"a": scores, "m": bias}),
        "rms_norm": Case(
            [
                ("sq", "mul", "x", "x"),
                ("v", "mean", "sq", -1, True),
                ("r", "add", "v", "eps"),
                ("q", "rsqrt", "r"),
                ("n", "mul", "x", "q"),
                ("y", "mul", "n", "w"),
            ],
            {"x": x, "w": w, "eps": 1e-6},
        ),
        "softmax_by_hand": Case(
            [
                ("mx", "amax", "a", -1, True),
                ("d", "sub", "a", "mx"),
                ("e", "exp", "d"),
                ("s", "sum", "e", -1, True),
                ("p", "div", "e", "s"),
            ],
            {"a": scores},
        ),
        "centred_then_pointwise": Case(
            [("m", "mean", "x", -1, True), ("d", "sub", "x", "m"), ("y", "mul", "d", "w"), ("z", "tanh", "y")],
            {"x": x, "w": w},
        ),
        "used_twice_two_outputs": Case(
            [("s", "sin", "x"), ("q", "mul", "x", "x"), ("y", "add", "q", "s")], {"x": x}, outputs=("y", "s")
        ),
        "summed_only": Case([("s", "sum", "x", -1, True), ("y", "mul", "s", "w")], {"x": x, "w": w}),
        "constants": Case([("a", "mul", 2.0, "x"), ("s", "sub", "a", 1.0), ("y", "clamp", "s", -1.0, 1.0)], {"x": x}),
        "swiglu": Case([("a", "silu", "x"), ("y", "mul", "a", "u")], {"x": x, "u": randn(2, 3, 8, seed=4)}),
        "logical_mask": Case(
            [("p", "gt", "x", 0.0), ("q", "lt", "w", 1.0), ("m", "and", "p", "q"), ("y", "where", "m", "x", "w")],
            {"x": x, "w": w},
            outputs=("y", "m"),  # a bool output takes no gradient
        ),
        "log_softmax_then_mean": Case(
            [("l", "log_softmax", "a", -1), ("n", "neg", "l"), ("y", "mean", "n", -1, True)], {"a": scores}
        ),
        # 1 and 1.0 are equal in Python; an int8 127 + 1 wraps where + 1.0 does not: the backward keeps both.
        "int_and_float_constants": Case(
            [("a", "add", "i", 1), ("b", "add", "i", 1.0), ("y", "mul", "x", "b"), ("z", "mul", "x", "a")],
            {"i": torch.tensor([127, 3, -128], dtype=torch.int8), "x": randn(3)},
            outputs=("y", "z"),
        ),
        "norm_of_a_power": Case(
            [("p", "pow", "x", 2.0), ("v", "sum", "p", -1, True), ("r", "sqrt", "v"), ("y", "div", "x", "r")], {"x": x}
        ),
    }
    for name, chain in chains.items():
        chain.name = name
    return chains


CHAINS = _chains()


def test_every_derivative_has_cases():
    assert set(CASES) == set(DERIVATIVES)


@pytest.mark.parametrize("op", sorted(DERIVATIVES))
def test_derivative_matches_autograd(op):
    for seed, case in enumerate(CASES[op]):
        check(case, seed)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_chain_matches_autograd(name):
    check(CHAINS[name])


def test_every_op_has_a_derivative_or_a_reason():
    bools = {name for name, op in BY_NAME.items() if op.returns_bool}
    assert not set(DERIVATIVES) & set(NO_DERIVATIVE)
    assert set(BY_NAME) == set(DERIVATIVES) | set(NO_DERIVATIVE) | bools
    assert all(reason.strip() for reason in NO_DERIVATIVE.values())


@pytest.mark.parametrize("op", sorted(DERIVATIVES))
def test_formula_per_operand(op):
    assert op in BY_NAME
    assert len(DERIVATIVES[op]) == BY_NAME[op].arity


def test_a_rotation_that_does_not_move_onto_inputs_has_no_backward():
    """exp(rotate_half(x)): its gradient's rotation meets the rotation itself (S(R(x)) is -x with a sign per half,
    which no op expresses), so the region keeps the source's statements under autograd."""
    case = Case([("r", "rotate_half", "x", "h"), ("y", "exp", "r")], {"x": randn(3, 8), "h": 4})
    with pytest.raises(autodiff.NoBackward, match="rotation"):
        autodiff.backward(case.region())


def test_constant_exponent_zero_leaves_no_node():
    """x ** 0 gives the base no gradient at all: the formula's branch folds away, not 0 * x ** -1."""
    case = Case([("y", "pow", "x", 0.0), ("z", "mul", "y", "x")], {"x": randn(3)})
    back = autodiff.backward(case.region())
    assert "pow" not in [n.op for n in back.region.nodes if n.out not in ("y", "z")]


def test_names_of_gradients_stay_unique():
    """A forward value already named like an input's gradient does not clash with it."""
    case = Case([("grad_x", "mul", "x", 2.0), ("y", "exp", "grad_x")], {"x": randn(3)})
    back = autodiff.backward(case.region())
    names = [n.out for n in back.region.nodes]
    assert len(names) == len(set(names))
    check(case)


@pytest.mark.parametrize(
    "nodes, reason",
    [
        ([("y", "add", "x", 1.0)], "in-place"),
        ([("s", "sum", "x", -1, False), ("y", "mul", "s", 2.0)], "keepdim"),
        ([("s", "sum", "x", -1, True), ("m", "amax", "x", 0, True), ("y", "add", "s", "m")], "several dims"),
        ([("s", "sum", "x", -1, True), ("t", "mean", "s", -1, True)], "one per row"),
        ([("y", "floordiv", "x", 2.0)], "floordiv"),
        ([("y", "activation", "x", "act")], "activation"),
    ],
)
def test_no_backward(nodes, reason):
    region = Case(nodes, {"x": randn(3, 4)}).region()
    if reason == "in-place":
        region = replace(region, nodes=tuple(replace(n, inplace=True) for n in region.nodes))
    with pytest.raises(autodiff.NoBackward, match=reason):
        autodiff.backward(region)


def test_a_binding_of_an_earlier_value_renames_no_node():
    """`a = g` names the gradient a previous derivative computed: that node keeps its name, which others read."""
    region = Case([("y", "exp", "x")], {"x": randn(3)}).region()
    builder = autodiff._Builder(region, {"x": False, "y": False, "grad_y": False})
    builder.taken.add("grad_y")
    doubled = builder.op("mul", "grad_y", (2.0,))  # the last node, as the derivative of a later node leaves it
    result = builder.formula("a = g; a * {0}", region.nodes[0], doubled, "y")
    defined = {"x", "y", "grad_y"}
    for node in builder.nodes:
        assert set(node.values()) <= defined, node
        defined.add(node.out)
    assert doubled in defined and result in defined


_UPDATES = {
    "method": ("x.clamp_(min=0)", True),
    "augmented": ("x += 1", True),
    "index": ("x[0] = 1", True),
    "library": ("torch.relu_(x)", True),
    "inplace keyword": ("F.relu(x, inplace=True)", True),
    "argument of another's update": ("y.add_(x)", False),
    "another name": ("y.clamp_(min=0)", False),
    "out of place": ("x = x.clamp(min=0)", False),
}


@pytest.mark.parametrize("update, refused", _UPDATES.values(), ids=_UPDATES)
@pytest.mark.parametrize("where", ["after", "before", "before, in the loop"])
def test_an_input_updated_in_place_while_the_node_needs_it_refuses_the_backward(update, refused, where):
    """The node saves its inputs: one the function updates in place after the region (or anywhere in a loop
    around it) would make autograd raise where eager, whose ops may save only results, does not."""
    body = {
        "after": ["t = torch.tanh(x)", update],
        "before": [update, "t = torch.tanh(x)"],
        "before, in the loop": ["for _ in range(2):", "    " + update, "    t = torch.tanh(x)"],
    }[where]
    text = "def f(x, y):\n" + "".join(f"    {line}\n" for line in body) + "    return t\n"
    line = 1 + next(n for n, code in enumerate(body, 1) if "tanh" in code)
    region = Region(
        "fused_tanh",
        "m.py",
        "m.f",
        line,
        line,
        (Input("x", "x", True),),
        (Node("tanh", ("x",), "t", line),),
        (Output("t", "t"),),
    )
    why = autodiff.updated_later(ast.parse(text), region)
    assert (why is not None) == (refused and where != "before"), why
