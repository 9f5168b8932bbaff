"""The C++ backend's text for each op of the registry (`transpiler/compiler/ops.py`), by the op's name.

A template is an expression over the op's operands `{0}`, `{1}`, ... on values of the compute type `C`
(float, or double for double tensors); names without `std::` come from the runtime header
`transpile_runtime.h`. `C({n})` converts a value to C; around a constant the kernel writer drops it (a literal
is written as a C already). Every op of the registry is in `CPP_OPS` or in `RENDERED_ELSEWHERE`
(tests/test_op_registry.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CppOp:
    template: str
    # Right on integers of one C++ type, computed in that type (wrapping as torch's: the kernels build with
    # -fwrapv): a region whose integer values meet only such ops keeps its kernel (kernels.integer_support).
    integer_exact: bool = False
    # Operand 1 a Python number (a constant or a scalar input): this template instead, `{type}` the result's C++ type.
    scalar_template: str | None = None


def _exact(template: str) -> CppOp:
    return CppOp(template, integer_exact=True)


# Batch norm as torch's CPU kernel computes it: x * alpha + (bias - mean * alpha), alpha = 1 / sqrt(var + eps) * weight.
_ALPHA = "((C(1) / std::sqrt({2} + C({5}))) * {3})"

CPP_OPS: dict[str, CppOp] = {
    # -- arithmetic
    "add": _exact("{0} + {1}"),
    "sub": _exact("{0} - {1}"),
    "mul": _exact("{0} * {1}"),
    "div": CppOp("{0} / {1}"),
    "floordiv": CppOp("floor_divide({0}, {1})"),
    "remainder": CppOp("remainder({0}, {1})"),
    # torch's CPU pow special-cases a scalar exponent (2, 3, 0.5, ...: multiplications and roots) and takes
    # std::pow for a tensor exponent; they differ at -inf and -0.0 (`pow(-inf, 0.5)` is inf, `sqrt(-inf)` NaN).
    # A constant exponent folds `power_scalar`'s tests away.
    "pow": CppOp("power({0}, {1})", scalar_template="power_scalar<{type}>({0}, {1})"),
    "neg": _exact("-{0}"),
    "pos": _exact("{0}"),
    "reciprocal": CppOp("C(1) / {0}"),
    "abs": _exact("std::abs({0})"),
    "sign": _exact("sign({0})"),
    "minimum": _exact("minimum({0}, {1})"),
    "maximum": _exact("maximum({0}, {1})"),
    "lerp": CppOp("lerp({0}, {1}, {2})"),
    "addcmul": CppOp("{0} + C({3}) * {1} * {2}"),
    "addcdiv": CppOp("{0} + C({3}) * {1} / {2}"),
    # -- comparisons and logic: the logical and bitwise ops read their operands as bools (Domain.BOOL)
    "lt": CppOp("{0} < {1}"),
    "le": CppOp("{0} <= {1}"),
    "gt": CppOp("{0} > {1}"),
    "ge": CppOp("{0} >= {1}"),
    "eq": CppOp("{0} == {1}"),
    "ne": CppOp("{0} != {1}"),
    "and": CppOp("{0} & {1}"),
    "or": CppOp("{0} | {1}"),
    "xor": CppOp("{0} ^ {1}"),
    "not": CppOp("!{0}"),
    "bitwise_and": CppOp("{0} & {1}"),
    "bitwise_or": CppOp("{0} | {1}"),
    "bitwise_xor": CppOp("{0} ^ {1}"),
    "bitwise_not": CppOp("!{0}"),
    "isnan": CppOp("std::isnan({0})"),
    "isinf": CppOp("std::isinf({0})"),
    "where": _exact("{0} ? {1} : {2}"),
    "masked_fill": CppOp("{1} ? C({2}) : {0}"),
    # -- exponentials, logarithms, roots
    "exp": CppOp("std::exp({0})"),
    "exp2": CppOp("std::exp2({0})"),
    "expm1": CppOp("std::expm1({0})"),
    "log": CppOp("std::log({0})"),
    "log1p": CppOp("std::log1p({0})"),
    "log2": CppOp("std::log2({0})"),
    "sqrt": CppOp("std::sqrt({0})"),
    "rsqrt": CppOp("C(1) / std::sqrt({0})"),
    # -- trigonometry
    "sin": CppOp("std::sin({0})"),
    "cos": CppOp("std::cos({0})"),
    "tanh": CppOp("std::tanh({0})"),
    "erf": CppOp("std::erf({0})"),
    # -- activations
    "sigmoid": CppOp("sigmoid({0})"),
    "relu": _exact("relu({0})"),
    "gelu": CppOp("gelu({0})"),
    "gelu_tanh": CppOp("gelu_tanh({0})"),
    "silu": CppOp("{0} * sigmoid({0})"),
    "mish": CppOp("{0} * std::tanh(softplus({0}))"),
    "softplus": CppOp("softplus({0})"),
    "identity": _exact("{0}"),
    "quick_gelu": CppOp("{0} * sigmoid(C(1.702) * {0})"),
    "relu_squared": CppOp("relu({0}) * relu({0})"),
    # -- clamping
    "clamp": _exact("clamp({0}, C({1}), C({2}))"),
    "clamp_min": _exact("clamp_min({0}, C({1}))"),
    "clamp_max": _exact("clamp_max({0}, C({1}))"),
    "nan_to_num": CppOp("nan_to_num({0}, C({1}), C({2}), C({3}))"),
    # -- rounding
    "floor": CppOp("std::floor({0})"),
    "ceil": CppOp("std::ceil({0})"),
    "round": CppOp("std::nearbyint({0})"),
    "trunc": CppOp("std::trunc({0})"),
    # -- casts: operand 1 is rendered as the C++ type it names; a cast to another's dtype rounds through the
    # value's type (kernels.render_node)
    "to": CppOp("static_cast<{1}>({0})"),
    "to_like": CppOp("{0}"),
    "round_like": CppOp("{0}"),
    # -- per-channel and shifted ops
    "batch_norm": CppOp(f"{{0}} * {_ALPHA} + ({{4}} - {{1}} * {_ALPHA})"),
    "rotate_half": CppOp("rotate_half<C>({0}_ptr, {0}_offset, first, half)"),
    "swap_halves": CppOp("swap_halves<C>({0}_ptr, {0}_offset, first, half)"),
}

_LOWERED = "lowered to row ops and pointwise ops (transpiler/compiler/lowering.py)"
# The ops of the registry no template renders, each with what renders it.
RENDERED_ELSEWHERE: dict[str, str] = {
    "activation": "a conditional over the templates of ACTIVATION_OPS (kernels._render_activation)",
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
    "row_sum": "an OpenMP reduction of the row kernel's column loop (kernels.ROW_REDUCTIONS)",
    "row_max": "an OpenMP reduction of the row kernel's column loop (kernels.ROW_REDUCTIONS)",
    "row_min": "an OpenMP reduction of the row kernel's column loop (kernels.ROW_REDUCTIONS)",
    "row_size": "the row kernel's row length R (kernels._render_row_node)",
}

# The ops exact on integers of one C++ type (`CppOp.integer_exact`).
INTEGER_OPS = frozenset(name for name, op in CPP_OPS.items() if op.integer_exact)
