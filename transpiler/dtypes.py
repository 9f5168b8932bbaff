"""The dtype eager PyTorch gives each value of a region, from its tensor inputs' dtypes.

Kernels compute in a wide type (float32 for half and bfloat16, float64 for double) but
eager rounds every op's result to its dtype: `h = x.half() * 3.0` holds a half, and
`h.float() + x` adds that rounded value. The backends round each value to the dtype this
module infers (emit/cpp.py: `rounded<D>`), so fused code gives eager's values.

Torch's promotion (torch.result_type) over the categories bool < integer < floating: tensors
of one category promote by size; a Python scalar only lifts the category (a float scalar
makes integer tensors float32, the default dtype). 0-dim tensors are taken as tensors with
dims (the runtime falls back where that would matter). Values the table cannot type (the
row primitives of lowered reductions) are None: computed in the wide type, not rounded.
"""

from __future__ import annotations

from collections.abc import Mapping

from transpiler.ir import Node, Region
from transpiler.ops import CAST, CAST_LIKE, OpKind

FLOATING = ("bfloat16", "float16", "float32", "float64")
INTEGER = ("bool", "uint8", "int8", "int16", "int32", "int64")
DEFAULT_FLOAT = "float32"
_SIZE = {"bool": 0, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
# Operands read as conditions, which take no part in promotion.
_CONDITIONS = {"where": (0,), "masked_fill": (1,)}


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


def value_dtypes(region: Region, inputs: Mapping[str, str]) -> dict[str, str | None]:
    """Every value's eager dtype, given each tensor input's (scalar inputs are Python floats)."""
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
    if definition is CAST_LIKE:
        return dtypes.get(node.operands[1])
    if definition.kind in (OpKind.ROW, OpKind.REDUCTION) or node.op == "activation":
        return None  # typed by the backends' accumulation (lowered) or by a module chosen at run time
    skipped = set(definition.constant_operands) | set(_CONDITIONS.get(node.op, ()))
    tensors, scalars, unknown = [], [], False
    for position, operand in enumerate(node.operands):
        if position in skipped:
            continue
        if position in node.constants:
            scalars.append(operand)
        elif operand in scalar_inputs:
            unknown = True  # a Python number, int or float: not known here
        elif dtypes.get(operand) is None:
            return None  # computed from a value of unknown dtype (a lowered reduction's inside)
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
