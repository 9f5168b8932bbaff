"""The dtype inference the backends round values to (transpiler/compiler/dtypes.py), against torch itself."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from tests.test_regions import regions_of
from transpiler.compiler.dtypes import RAISES, bool_hazards, promote, stored_constants, type_classes, value_dtypes
from transpiler.compiler.ir import Input, Node, Output, Region
from transpiler.compiler.ops import CAST, OPS, REDUCTIONS, Domain

DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
# Constant operands as source would fold them, one of each Python type where the op takes any.
CONSTANTS = {
    "addcmul": {3: 0.5},
    "addcdiv": {3: 2.0},
    "masked_fill": {2: -1.5},
    "nan_to_num": {1: 0.0, 2: 1.0, 3: -1.0},
}


def test_promote_is_torchs():
    for a, b in itertools.product(DTYPES, DTYPES):
        assert promote(a, b) == str(torch.promote_types(getattr(torch, a), getattr(torch, b))).removeprefix("torch.")


def _region(op, dtypes):
    inputs = tuple(Input(f"v{n}", f"v{n}", True) for n in range(len(dtypes)))
    operands, constants, names = [], [], iter(i.name for i in inputs)
    for position in range(op.arity):
        if position in CONSTANTS.get(op.name, {}):
            operands.append(CONSTANTS[op.name][position])
            constants.append(position)
        else:
            operands.append(next(names))
    node = Node(op.name, tuple(operands), "out", 1, tuple(constants))
    return Region("r", "m.py", "f", 1, 1, inputs, (node,), (Output("out", "out"),)), operands


@pytest.mark.parametrize("op", [op for op in OPS if op.name != "identity"], ids=lambda op: op.name)
def test_every_op_types_its_result_as_eager(op):
    """For every op of the table and input dtypes torch accepts, the inferred dtype is the eager result's."""
    arity = op.arity - len(CONSTANTS.get(op.name, {}))
    checked = 0
    for dtypes in itertools.product(("bool", "int64", "float16", "bfloat16", "float32", "float64"), repeat=arity):
        region, operands = _region(op, dtypes)
        tensors = {f"v{n}": torch.ones(2, dtype=getattr(torch, d)) for n, d in enumerate(dtypes)}
        args = [
            repr(o) if isinstance(o, (int, float)) and not isinstance(o, str) and o not in tensors else o
            for o in operands
        ]
        try:
            result = eval(op.eager.format(*args), {"torch": torch}, tensors)
        except (RuntimeError, TypeError):
            continue  # eager rejects these dtypes: the runtime falls back, nothing to round
        inferred = value_dtypes(region, dict(zip(tensors, dtypes)))["out"]
        assert inferred == str(result.dtype).removeprefix("torch."), (op.name, dtypes)
        checked += 1
    assert checked


@pytest.mark.parametrize("op", [op for op in REDUCTIONS if op.name != "layer_norm"], ids=lambda op: op.name)
def test_reductions_type_their_result_as_eager(op):
    """A reduction's dtype, where inferred, is eager's (its lowered row primitives are not typed)."""
    constants = (1, 1, False) if op.arity == 4 else (1, False) if op.arity == 3 else (1,)
    typed = 0
    for dtype in DTYPES:
        region = Region(
            "r",
            "m.py",
            "f",
            1,
            1,
            (Input("x", "x", True),),
            (Node(op.name, ("x", *constants), "out", 1, tuple(range(1, op.arity))),),
            (),
        )
        inferred = value_dtypes(region, {"x": dtype})["out"]
        try:
            result = eval(
                op.eager.format("x", *map(repr, constants)),
                {"torch": torch},
                {"x": torch.ones(2, 3, dtype=getattr(torch, dtype))},
            )
        except (RuntimeError, TypeError, NotImplementedError):
            assert inferred in (None, RAISES), (op.name, dtype)
            continue
        assert inferred != RAISES, (op.name, dtype)
        if inferred is not None:
            assert inferred == str(result.dtype).removeprefix("torch."), (op.name, dtype)
            typed += 1
    assert typed >= 4  # the floating dtypes at least


# Ops whose bool results both backends compute as bools (the rest compute numbers).
_KEEPS_BOOLS = {"where", "identity"}


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_bool_hazards_are_exactly_the_inputs_eager_keeps_bool(op):
    """A hazard set is all bool exactly when eager's result is bool and the kernels compute a number."""
    arity = op.arity - len(CONSTANTS.get(op.name, {}))
    numeric = not (op.returns_bool or op.domain is Domain.BOOL or op.name in _KEEPS_BOOLS or op.bool_exact)
    for dtypes in itertools.product(("bool", "float32"), repeat=arity):
        region, operands = _region(op, dtypes)
        tensors = {f"v{n}": torch.ones(2, dtype=getattr(torch, d)) for n, d in enumerate(dtypes)}
        args = [repr(o) if not isinstance(o, str) else o for o in operands]
        try:
            result = eval(op.eager.format(*args), {"torch": torch}, tensors)
        except (RuntimeError, TypeError):
            continue  # the reference raises: the runtime falls back anyway
        bools = {name for name, d in zip(tensors, dtypes) if d == "bool"}
        fires = any(hazard <= bools for hazard in bool_hazards(region))
        assert fires == (numeric and result.dtype == torch.bool), (op.name, dtypes)


@pytest.mark.parametrize("op", [op for op in OPS if op.bool_exact], ids=lambda op: op.name)
def test_bool_exact_ops_compute_on_bools_what_they_compute_on_0_and_1(op):
    arity = op.arity - len(CONSTANTS.get(op.name, {}))
    _, operands = _region(op, ("bool",) * arity)
    args = [repr(o) if not isinstance(o, str) else o for o in operands]
    for bits in itertools.product((False, True), repeat=arity):
        bools = {f"v{n}": torch.tensor([b]) for n, b in enumerate(bits)}
        numbers = {name: t.float() for name, t in bools.items()}
        on_bools = eval(op.eager.format(*args), {"torch": torch}, bools)
        assert on_bools.dtype == torch.bool
        assert torch.equal(on_bools.float(), eval(op.eager.format(*args), {"torch": torch}, numbers)), (op.name, bits)


def test_bool_hazards_follow_values_through_the_region():
    """`(m + k).masked_fill(c, -1.0) * x`: bool when m and k are; a cast or a float function ends it."""
    inputs = tuple(Input(n, n, True) for n in ("m", "k", "c", "x"))
    nodes = (
        Node("add", ("m", "k"), "s", 1),
        Node("masked_fill", ("s", "c", -1.0), "f", 1, (2,)),
        Node("mul", ("f", "x"), "y", 1),
        Node("sigmoid", ("m",), "g", 2),
        Node("add", ("g", "g"), "h", 2),
        Node(CAST.name, ("c", "float32"), "e", 3, (1,)),
        Node("add", ("e", "e"), "z", 3),
    )
    region = Region("r", "m.py", "f", 1, 3, inputs, nodes, (Output("y", "y"), Output("h", "h"), Output("z", "z")))
    assert bool_hazards(region) == (frozenset({"k", "m"}),)
    x_too = replace(region, nodes=(*nodes[:2], Node("mul", ("f", "x"), "y", 1)))
    assert frozenset({"k", "m", "x"}) not in bool_hazards(x_too)  # minimal sets only


def test_bool_hazards_through_reductions():
    """amax of bools is a bool (`+` of two is then True, not 2); sum's int64 is the runtime dtype check's."""
    m = (Input("m", "m", True),)
    largest = (Node("amax", ("m", -1, True), "a", 1, (1, 2)), Node("add", ("a", "a"), "y", 2))
    total = (Node("sum", ("m", -1, True), "a", 1, (1, 2)), Node("add", ("a", "a"), "y", 2))
    assert bool_hazards(Region("r", "m.py", "f", 1, 2, m, largest, (Output("y", "y"),))) == (frozenset({"m"}),)
    assert bool_hazards(Region("r", "m.py", "f", 1, 2, m, total, (Output("y", "y"),))) == ()
    assert (
        torch.tensor([[True, False]]).amax(-1).dtype == torch.bool
        and torch.tensor([[True]]).sum(-1).dtype == torch.int64
    )


def test_constants_torch_stores_in_an_integer_dtype_are_truncated():
    """addcmul's value and masked_fill's fill, where the op computes on integers, as eager uses them."""
    inputs = (Input("x", "x", True), Input("m", "m", True))
    nodes = (
        Node(CAST.name, ("x", "int32"), "i", 1, (1,)),
        Node("addcmul", ("i", "i", "i", 0.5), "a", 2, (3,)),
        Node("masked_fill", ("i", "m", -2.7), "f", 3, (2,)),
        Node("addcmul", ("x", "x", "x", 0.5), "g", 4, (3,)),
    )
    region = Region("r", "m.py", "f", 1, 4, inputs, nodes, (Output("a", "a"), Output("f", "f"), Output("g", "g")))
    stored = stored_constants(region)
    assert [n.operands for n in stored.nodes[1:]] == [("i", "i", "i", 0.0), ("i", "m", -2.0), ("x", "x", "x", 0.5)]
    i = torch.tensor([-1, 3], dtype=torch.int32)
    assert torch.addcmul(i, i, i, value=0.5).tolist() == torch.addcmul(i, i, i, value=0).tolist()
    assert i.masked_fill(torch.tensor([True, False]), -2.7).tolist() == [-2, 3]


def test_a_narrowing_cast_holds_its_dtype_through_later_ops():
    """`h = x.half() * 3.0; h.float() + x`: h is a half (eager rounds 1000.7 * 3.0 to 3002.0)."""
    inputs = (Input("x", "x", True),)
    nodes = (
        Node(CAST.name, ("x", "float16"), "t0", 1, (1,)),
        Node("mul", ("t0", 3.0), "h", 1, (1,)),
        Node(CAST.name, ("h", "float32"), "t1", 2, (1,)),
        Node("add", ("t1", "x"), "y", 2),
    )
    region = Region("r", "m.py", "f", 1, 2, inputs, nodes, (Output("y", "y"),))
    assert value_dtypes(region, {"x": "float64"}) == {
        "x": "float64",
        "t0": "float16",
        "h": "float16",
        "t1": "float32",
        "y": "float64",
    }
    # A Python scalar input keeps a floating tensor's dtype, but its int/float type decides an int tensor's.
    scaled = Region(
        "r",
        "m.py",
        "f",
        1,
        1,
        (Input("x", "x", True), Input("s", "self.s", False)),
        (Node("mul", ("x", "s"), "y", 1),),
        (),
    )
    assert value_dtypes(scaled, {"x": "bfloat16"})["y"] == "bfloat16"
    assert value_dtypes(scaled, {"x": "int64"})["y"] is None


def test_type_classes_part_values_that_an_integer_or_bool_input_gives_other_dtypes():
    """The computed members of a class have one eager dtype for any input dtypes, integer and bool ones
    included: `i + 1` keeps an integer input's dtype where `i * 0.5` and `x / x` are float32 and `x.amin(0)`
    a bool. (An input joins a class whatever its dtype: the runtime converts it where its readers agree.)"""
    (region,) = regions_of("""
        a = y + 1
        b = y * 0.5
        c = x / x
        d = x.amin(0)
        e = d * 2.0
        return a + b, c, d, e
        """)
    classes, fixed = type_classes(region, frozenset(), ("float32", "float64", "float16", "bfloat16"))
    assert fixed == {}
    for dtypes in itertools.product(["bool", "int32", "int64", "float16", "bfloat16", "float32", "float64"], repeat=2):
        with torch.no_grad():
            x, y = (torch.ones(2, 3, dtype=getattr(torch, d)) for d in dtypes)
            values = {"a": y + 1, "b": y * 0.5, "c": x / x, "d": x.amin(0)}
            values["e"] = values["d"] * 2.0
        for c in classes:
            assert len({values[m].dtype for m in c.members if m in values}) == 1, (dtypes, c.members)
    together = {m: c.members for c in classes for m in c.members}
    assert "b" not in together["a"] and "d" not in together["c"] and "e" not in together["d"]
    assert [c.integral for c in classes if "a" in c.members] == [True]
