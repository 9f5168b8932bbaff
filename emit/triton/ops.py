"""The Triton backend's text for each op of the registry (`transpiler/compiler/ops.py`), by the op's name.

A template is an expression over the op's operands `{0}`, `{1}`, ... on loaded values (half and bfloat16
already widened to float32); names without `tl.` come from the runtime's Triton helpers
(`emit/runtime/triton_support.py`). Every op of the registry is in `TRITON_OPS` or in `RENDERED_ELSEWHERE`
(tests/test_op_registry.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TritonOp:
    template: str
    # Where the result may be a bool (every operand a bool, which eager keeps as bools): this template instead.
    bool_template: str | None = None
    # Operand 1 a constant of one of these values and operand 0 not: that template, over operand 0.
    constant_operand: tuple[tuple[int | float, str], ...] = ()


# Batch norm as torch's CPU kernel computes it: x * alpha + (bias - mean * alpha), alpha = 1 / sqrt(var + eps) * weight.
_ALPHA = "(divide(1.0, sqrt_rn({2} + {5})) * {3})"

TRITON_OPS: dict[str, TritonOp] = {
    # -- arithmetic
    "add": TritonOp("{0} + {1}", bool_template="add({0}, {1})"),  # two bools add as their `or`
    "sub": TritonOp("{0} - {1}"),
    "mul": TritonOp("{0} * {1}"),
    "div": TritonOp("divide({0}, {1})"),
    "floordiv": TritonOp("floor_divide({0}, {1})"),
    "remainder": TritonOp("remainder({0}, {1})"),
    # `x ** c` for the constant exponents torch's pow kernels special-case, computed as they do (libdevice's
    # general pow is far slower and rounds differently).
    "pow": TritonOp(
        "power({0}, {1})",
        constant_operand=(
            (2, "{0} * {0}"),
            (3, "{0} * {0} * {0}"),
            (0.5, "sqrt_rn({0})"),
            (-0.5, "divide(1.0, sqrt_rn({0}))"),
            (-1, "divide(1.0, {0})"),
            (-2, "divide(1.0, {0} * {0})"),
        ),
    ),
    "neg": TritonOp("-{0}"),
    "pos": TritonOp("{0}"),
    "reciprocal": TritonOp("divide(1.0, {0})"),
    "abs": TritonOp("tl.abs({0})"),
    "sign": TritonOp("sign({0})"),
    "minimum": TritonOp("minimum({0}, {1})"),
    "maximum": TritonOp("maximum({0}, {1})"),
    "lerp": TritonOp("lerp({0}, {1}, {2})"),
    "addcmul": TritonOp("addcmul({0}, {1}, {2}, {3})"),
    "addcdiv": TritonOp("{0} + {3} * {1} / {2}"),
    # -- comparisons and logic: the logical helpers read non-bools as `x != 0`; the bitwise operators compute in
    # the operands' dtype, as eager (bitwise on integers, logical on int1)
    "lt": TritonOp("{0} < {1}"),
    "le": TritonOp("{0} <= {1}"),
    "gt": TritonOp("{0} > {1}"),
    "ge": TritonOp("{0} >= {1}"),
    "eq": TritonOp("{0} == {1}"),
    "ne": TritonOp("{0} != {1}"),
    "and": TritonOp("logical_and({0}, {1})"),
    "or": TritonOp("logical_or({0}, {1})"),
    "xor": TritonOp("logical_xor({0}, {1})"),
    "not": TritonOp("logical_not({0})"),
    "bitwise_and": TritonOp("{0} & {1}"),
    "bitwise_or": TritonOp("{0} | {1}"),
    "bitwise_xor": TritonOp("{0} ^ {1}"),
    "bitwise_not": TritonOp("~{0}"),
    "isnan": TritonOp("{0} != {0}"),
    "isinf": TritonOp("is_inf({0})"),
    "where": TritonOp("tl.where({0}, {1}, {2})"),
    "masked_fill": TritonOp("tl.where({1}, stored({2}, {0}), {0})"),
    # -- exponentials, logarithms, roots
    "exp": TritonOp("tl.exp({0})"),
    "exp2": TritonOp("tl.exp2({0})"),
    "expm1": TritonOp("expm1({0})"),
    "log": TritonOp("tl.log({0})"),
    "log1p": TritonOp("log1p({0})"),
    "log2": TritonOp("tl.log2({0})"),
    "sqrt": TritonOp("sqrt_rn({0})"),
    "rsqrt": TritonOp("divide(1.0, sqrt_rn({0}))"),
    # -- trigonometry
    "sin": TritonOp("tl.sin({0})"),
    "cos": TritonOp("tl.cos({0})"),
    "tanh": TritonOp("tanh({0})"),
    "erf": TritonOp("tl.erf({0})"),
    # -- activations
    "sigmoid": TritonOp("tl.sigmoid({0})"),
    "relu": TritonOp("relu({0})"),
    "gelu": TritonOp("gelu({0})"),
    "gelu_tanh": TritonOp("gelu_tanh({0})"),
    "silu": TritonOp("{0} * tl.sigmoid({0})"),
    "mish": TritonOp("{0} * tanh(softplus({0}))"),
    "softplus": TritonOp("softplus({0})"),
    "identity": TritonOp("{0}"),
    "quick_gelu": TritonOp("{0} * tl.sigmoid(1.702 * {0})"),
    "relu_squared": TritonOp("relu({0}) * relu({0})"),
    # -- clamping
    "clamp": TritonOp("clamp({0}, {1}, {2})"),
    "clamp_min": TritonOp("clamp_min({0}, {1})"),
    "clamp_max": TritonOp("clamp_max({0}, {1})"),
    "nan_to_num": TritonOp("nan_to_num({0}, {1}, {2}, {3})"),
    # -- rounding
    "floor": TritonOp("floor({0})"),
    "ceil": TritonOp("ceil({0})"),
    "round": TritonOp("round_half_even({0})"),
    "trunc": TritonOp("trunc({0})"),
    # -- casts: to a dtype named by operand 1, to the dtype of tensor input {1} (its pointer's), or a mark
    "to": TritonOp("cast({0}, tl.{1})"),
    "to_like": TritonOp("cast({0}, {1}_ptr.dtype.element_ty)"),
    "round_like": TritonOp("{0}"),
    # -- per-channel and shifted ops: rotate_half loads its input at the shifted offsets itself
    "batch_norm": TritonOp(f"{{0}} * {_ALPHA} + ({{4}} - {{1}} * {_ALPHA})"),
    "rotate_half": TritonOp("rotate_half({0}_ptr, {0}_offsets, offsets, {1}, mask)"),
    "swap_halves": TritonOp("swap_halves({0}_ptr, {0}_offsets, offsets, {1}, mask)"),
}

_LOWERED = "lowered to row ops and pointwise ops (transpiler/compiler/lowering.py)"
# The ops of the registry no template renders, each with what renders it.
RENDERED_ELSEWHERE: dict[str, str] = {
    "activation": "a constexpr if/elif over the templates of ACTIVATION_OPS (kernels._statements)",
    "sum": _LOWERED,
    "mean": _LOWERED,
    "amax": _LOWERED,
    "amin": _LOWERED,
    "var": _LOWERED,
    "std": _LOWERED,
    "logsumexp": _LOWERED,
    "softmax": _LOWERED,
    "log_softmax": _LOWERED,
    "layer_norm": _LOWERED,
    "row_sum": "the row kernel's partials and their reduction (kernels._REDUCTIONS)",
    "row_max": "the row kernel's partials and their reduction (kernels._REDUCTIONS)",
    "row_min": "the row kernel's partials and their reduction (kernels._REDUCTIONS)",
    "row_size": "the row length R (kernels._RowKernel.expression)",
}
