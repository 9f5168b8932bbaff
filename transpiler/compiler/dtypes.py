"""The dtype eager PyTorch gives each value of a region, from its tensor inputs' dtypes.

Kernels compute in a wide type (float32 for half and bfloat16, float64 for double) but
eager rounds every op's result to its dtype: `h = x.half() * 3.0` holds a half, and
`h.float() + x` adds that rounded value. The backends round each value to the dtype this
module infers (emit/cpp/kernels.py: `rounded<D>`), so fused code gives eager's values.

Torch's promotion (torch.result_type) over the categories bool < integer < floating: tensors
of one category promote by size; a Python scalar only lifts the category (a float scalar
makes integer tensors float32, the default dtype). 0-dim tensors are taken as tensors with
dims (the runtime falls back where that would matter). Values the table cannot type (the
row primitives of lowered reductions) are None: computed in the wide type, not rounded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum

from transpiler.compiler.ir import Node, Region
from transpiler.compiler.ops import CAST, CAST_LIKE, ROUND_LIKE, Domain, OpKind

FLOATING = ("bfloat16", "float16", "float32", "float64")
INTEGER = ("bool", "uint8", "int8", "int16", "int32", "int64")
DEFAULT_FLOAT = "float32"
_SIZE = {
    "bool": 0,
    "uint8": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
}
# The "dtype" of a value eager raises for before computing it (the mean of integers), on that call.
RAISES = "raises"


def _category(dtype: str) -> int:
    return 0 if dtype == "bool" else 2 if dtype in FLOATING else 1


def promote(a: str, b: str) -> str:
    """torch.promote_types for the dtypes of the table."""
    if a == b:
        return a
    if _category(a) != _category(b):
        return a if _category(a) > _category(b) else b
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    if {a, b} == {"uint8", "int8"}:
        return "int16"
    return a if _SIZE[a] >= _SIZE[b] else b


def _with_scalar(tensor: str, scalar: object) -> str:
    """A tensor's dtype met with a Python scalar: the scalar lifts only the category."""
    kind = 0 if isinstance(scalar, bool) else 2 if isinstance(scalar, float) else 1
    if kind <= _category(tensor):
        return tensor
    return DEFAULT_FLOAT if kind == 2 else "int64"


def value_dtypes(region: Region, inputs: Mapping[str, str], typed: Region | None = None) -> dict[str, str | None]:
    """Every value's eager dtype, given each tensor input's (scalar inputs are Python floats). `typed`: for a
    lowered `region`, the region before lowering, whose reductions have dtypes; the values the lowering adds
    are typed where it marks them (`round_like`)."""
    if typed is not None:
        known = value_dtypes(typed, inputs)
        typed_known = {k: v for k, v in known.items() if v is not None}
        return {**known, **value_dtypes(region, {**inputs, **typed_known}), **typed_known}
    dtypes: dict[str, str | None] = dict(inputs)
    scalars = frozenset(item.name for item in region.scalar_inputs)
    for node in region.nodes:
        dtypes[node.out] = _node_dtype(node, dtypes, scalars)
    return dtypes


def _node_dtype(node: Node, dtypes: Mapping[str, str | None], scalar_inputs: frozenset[str]) -> str | None:
    definition = node.definition
    if definition.returns_bool:
        return "bool"
    if definition is CAST:
        return node.operands[1]
    if definition in (CAST_LIKE, ROUND_LIKE):
        return dtypes.get(node.operands[1])
    if definition.kind is OpKind.REDUCTION:
        # Floating reductions keep their operand's dtype (amax and amin any dtype's); sums of integers and
        # bools are int64 and logsumexp's float32; eager raises for the rest of them.
        operand = dtypes.get(node.operands[0])
        if operand in (None, RAISES) or operand in FLOATING or node.op in ("amax", "amin"):
            return operand
        return "int64" if node.op == "sum" else DEFAULT_FLOAT if node.op == "logsumexp" else RAISES
    if definition.kind is OpKind.ROW or node.op == "activation":
        return None  # typed by the backends' accumulation (lowered) or by a module chosen at run time
    skipped = set(definition.constant_operands) | set(definition.bool_operands)
    tensors, scalars, unknown = [], [], False
    for position, operand in enumerate(node.operands):
        if position in skipped:
            continue
        if position in node.constants:
            scalars.append(operand)
        elif operand in scalar_inputs:
            unknown = True  # a Python number, int or float: not known here
        elif dtypes.get(operand) in (None, RAISES):
            return dtypes.get(operand)  # computed from a value of unknown dtype (a lowered reduction's inside)
        else:
            tensors.append(dtypes[operand])
    if not tensors:
        return None
    result = tensors[0]
    for dtype in tensors[1:]:
        result = promote(result, dtype)
    for scalar in scalars:
        result = _with_scalar(result, scalar)
    if unknown and _category(result) < 2:
        return None  # a Python number could make it float
    if node.inplace:
        return tensors[0]
    if definition.int_to_float and _category(result) < 2:
        return DEFAULT_FLOAT
    return result


def storage_dtypes(
    region: Region, bool_inputs: frozenset[str], storages: tuple[str, ...], typed: Region | None = None
) -> dict[str, tuple[str, ...]]:
    """Per computed value, its eager dtype for each of `storages`, the dtype a kernel call holds its floating
    tensor inputs in (those of `bool_inputs` are bools). Values of unknown or bool dtype are left out.
    `typed`: the region before lowering, whose reductions have dtypes, for a lowered `region`."""
    tensors = [item.name for item in region.tensor_inputs]
    per_storage = [
        value_dtypes(region, {t: "bool" if t in bool_inputs else storage for t in tensors}, typed)
        for storage in storages
    ]
    dtypes = {}
    for node in region.nodes:
        each = tuple(d.get(node.out) for d in per_storage)
        if not {None, "bool", RAISES} & set(each):
            dtypes[node.out] = each
    return dtypes


def stored_constants(region: Region) -> Region:
    """The region with each op's `integer_operand` constant as torch uses it where the op computes on integers:
    truncated (`addcmul(t, t, t, value=0.5)` of int32 tensors adds 0, not 0.5). The kernels compute in a float type."""
    tensors = [item.name for item in region.tensor_inputs]
    per_storage = [value_dtypes(region, {t: storage for t in tensors}) for storage in ("float32", "bfloat16")]
    nodes = []
    for node in region.nodes:
        position = node.definition.integer_operand
        integral = all(d.get(node.out) in INTEGER[1:] for d in per_storage)
        if position is not None and position in node.constants and integral:
            operands = list(node.operands)
            operands[position] = float(math.trunc(operands[position]))
            node = replace(node, operands=tuple(operands))
        nodes.append(node)
    return replace(region, nodes=tuple(nodes))


def bool_hazards(region: Region) -> tuple[frozenset[str], ...]:
    """The sets of tensor inputs which, when all are bool tensors, make eager hold a value as bool
    that the kernels compute as another number (or reduce as one).

    The kernels read an input that the region uses as a number (`x * m`) as 0 and 1, which is
    right wherever torch promotes it. Where nothing promotes it, eager keeps bools: `m + m` is
    True, not 2, and `m.masked_fill(k, -1.0)` fills True. The runtime falls back when all the
    inputs of one of these sets are bool. An empty set: the value is bool whatever the inputs.
    """
    # Per value: the tensor inputs that must all be bool for it to be bool, or None if it never is.
    bools: dict[str, frozenset[str] | None] = {item.name: frozenset((item.name,)) for item in region.tensor_inputs}
    scalars = frozenset(item.name for item in region.scalar_inputs)
    hazards: set[frozenset[str]] = set()

    def operand(node: Node, position: int) -> frozenset[str] | None:
        value = node.operands[position]
        if position in node.constants:
            return frozenset() if isinstance(value, bool) else None
        return None if value in scalars else bools.get(value)

    def joined(node: Node, positions) -> frozenset[str] | None:
        sets = [operand(node, position) for position in positions]
        return None if None in sets else frozenset().union(*sets)

    for node in region.nodes:
        definition = node.definition
        numeric = True  # whether the kernels compute the value as a number
        if definition.returns_bool or definition.domain is Domain.BOOL:
            result, numeric = frozenset(), False
        elif definition is CAST:
            result, numeric = (frozenset(), False) if node.operands[1] == "bool" else (None, True)
        elif definition is CAST_LIKE:
            result = joined(node, (1,))  # the dtype of operand 1
        elif definition.kind_operands and definition.domain is Domain.ANY:
            # An op that takes bools and keeps its operands' kind passes a bool through as a bool in both backends
            # (C++ keeps the kind, Triton the int1): `where` and the identity, not `+m` (eager rejects bools).
            result, numeric = joined(node, definition.kind_operands), False
        elif definition.kind is OpKind.REDUCTION:
            # amax and amin of bools are bools, as of 0 and 1; the rest give integers or floats, or raise:
            # the runtime's dtype check (`Kernel._computes_in`) sees those.
            result, numeric = (joined(node, (0,)) if node.op in ("amax", "amin") else None), False
        elif definition.keeps_bool and (node.inplace or node.op == "masked_fill"):
            result = joined(node, (0,))  # the updated tensor keeps its dtype
        elif definition.keeps_bool:
            skipped = set(definition.constant_operands) | set(definition.bool_operands)
            result = joined(node, [p for p in range(len(node.operands)) if p not in skipped])
        else:
            result = None  # torch promotes bools (float functions) or rejects them (the reference raises)
        if result is not None and numeric and not definition.bool_exact:
            hazards.add(result)
        bools[node.out] = result
    minimal = [h for h in hazards if not any(other < h for other in hazards)]
    return tuple(sorted(minimal, key=lambda h: (len(h), sorted(h))))


@dataclass(frozen=True)
class TypeClass:
    """Values whose eager dtypes are equal on every call: a kernel gives them one type parameter."""

    members: tuple[str, ...]  # inputs first, then computed values, in region order
    uniform: tuple[str, ...]  # their dtype when every floating input is of one storage dtype, per storage
    integral: bool = False  # an integer input can make them integers (`i + 1`)


def type_classes(
    region: Region, bool_inputs: frozenset[str], storages: tuple[str, ...], typed: Region | None = None
) -> tuple[tuple[TypeClass, ...], dict[str, str]]:
    """The values whose dtype follows the call's input dtypes, grouped into classes of equal dtype, and the
    values whose dtype is the same on every call (`x.half()`, a comparison's bool), with that dtype.

    A value's dtype is torch's promotion over some inputs' dtypes and some fixed dtypes (casts), so
    probes tell the classes apart: every floating input of each storage dtype, then each input float64
    (and bfloat16) beside float16 others, which shows the inputs a value's dtype depends on. Values the
    table cannot type on these floating probes are in neither. Then each input bool and int32 beside
    float16 others, which parts the values a Python float or a true division lifts out of an input's
    class (`i * 0.5` beside `i + 1`); a value these cannot type (beside a Python number that may be a
    float) counts as of one unknown dtype there. The runtime checks each class against eager's dtypes on the call
    (`cpp_support.bind`): a class that eager splits takes the original code, so a probe that missed a
    difference costs a kernel call, never a result. `typed`: as for `storage_dtypes`.
    """
    tensors = [item.name for item in region.tensor_inputs]
    numbers = [t for t in tensors if t not in bool_inputs]
    floating = [dict.fromkeys(numbers, storage) for storage in storages]
    floating += [
        {t: wide if t == name else "float16" for t in numbers} for name in numbers for wide in ("float64", "bfloat16")
    ]
    other = [{t: kind if t == name else "float16" for t in numbers} for name in numbers for kind in ("bool", "int32")]
    runs = [value_dtypes(region, {t: probe.get(t, "bool") for t in tensors}, typed) for probe in (*floating, *other)]
    computed = [node.out for node in region.nodes]
    keys = {value: tuple(run.get(value) or "?" for run in runs) for value in [*numbers, *computed]}
    split = len(floating)
    for value in computed:
        # A value eager raises for on a probe (the mean of integers) joins the first earlier value that
        # agrees with it on every other probe, rather than making a class of its own.
        if RAISES in keys[value][split:] and "?" not in keys[value][:split]:
            mine = keys[value]
            keys[value] = next((key for key in keys.values() if all(a in (RAISES, b) for a, b in zip(mine, key))), mine)
    for name in numbers:
        # An integer or bool input joins the class of a value it keeps its dtype in (`i + 1`), or else of
        # the first value of its floating dtypes (`0.1 * x`): the runtime converts it to that class's
        # floating dtype where its readers agree, as torch promotes it, so it needs no class of its own.
        same = [keys[v] for v in computed if keys[v][:split] == keys[name][:split]]
        if same and keys[name] not in same:
            keys[name] = same[0]
    classes: dict[tuple[str, ...], list[str]] = {}
    fixed: dict[str, str] = {}
    for value, key in keys.items():
        if "?" in key[:split] or RAISES in key[:split]:
            continue
        if len(set(key)) == 1:
            fixed[value] = key[0]
        else:
            classes.setdefault(key, []).append(value)
    return (
        tuple(
            TypeClass(tuple(members), key[: len(storages)], any(d in INTEGER[1:] for d in key[split:]))
            for key, members in classes.items()
        ),
        fixed,
    )


# -- value kinds ------------------------------------------------------------------------------
class ValueKind(Enum):
    """How a kernel holds a value: as a number (of the region's floating or integer types), or as a bool."""

    FLOAT = "T"
    BOOL = "bool"


def value_kinds(region: Region) -> dict[str, ValueKind]:
    """The kind of every value of the region: inputs first (from how they are used), then node results."""
    kinds = {item.name: _input_kind(region, item.name) for item in region.inputs}
    for node in region.nodes:
        kinds[node.out] = result_kind(node, kinds)
    return kinds


def bool_positions(node: Node) -> tuple[int, ...]:
    """The operands the node's op reads as booleans: all of a Domain.BOOL op's, else its `bool_operands`."""
    if node.definition.domain is Domain.BOOL:
        return tuple(range(node.definition.arity))
    return node.definition.bool_operands


def _input_kind(region: Region, name: str) -> ValueKind:
    """BOOL when every use reads the input as a boolean; an input read as a number is FLOAT."""
    uses = [
        position in bool_positions(node)
        for node in region.nodes
        for position, operand in enumerate(node.operands)
        if position not in node.constants and operand == name
    ]
    return ValueKind.BOOL if uses and all(uses) else ValueKind.FLOAT


def result_kind(node: Node, kinds: Mapping[str, ValueKind]) -> ValueKind:
    """The kind of the node's result, given its operands' `kinds`."""
    definition = node.definition
    if definition.returns_bool or definition.domain is Domain.BOOL:
        return ValueKind.BOOL
    if definition is CAST:
        return ValueKind.BOOL if node.operands[1] == "bool" else ValueKind.FLOAT
    if definition.kind_operands:
        operand_kinds = [operand_kind(node, position, kinds) for position in definition.kind_operands]
        return ValueKind.BOOL if all(kind is ValueKind.BOOL for kind in operand_kinds) else ValueKind.FLOAT
    return ValueKind.FLOAT


def operand_kind(node: Node, position: int, kinds: Mapping[str, ValueKind]) -> ValueKind:
    """The kind of operand `position` as it is: a value's kind, or a constant's (bool or number)."""
    operand = node.operands[position]
    if position in node.constants:
        return ValueKind.BOOL if isinstance(operand, bool) else ValueKind.FLOAT
    return kinds[operand]


def read_kind(node: Node, position: int, kinds: Mapping[str, ValueKind]) -> ValueKind:
    """The kind the node's op reads operand `position` as: a bool, the result's kind (`kind_operands`), or a number."""
    if position in bool_positions(node):
        return ValueKind.BOOL
    if position in node.definition.kind_operands:
        return result_kind(node, kinds)
    return ValueKind.FLOAT
