"""The op registry: every tensor op the compiler fuses and every fact about it the compiler and the backends use.

Recognition (`transpiler/compiler/regions.py`), the lowering of reductions, the dtype and
kind analyses (`transpiler/compiler/dtypes.py`), the eager reference of every kernel and the
differential tests all read this table. Each backend's text for an op is in that backend's own
table, keyed by the op's name: `emit/cpp/ops.py` and `emit/triton/ops.py`
(`tests/test_op_registry.py` checks that each has exactly one entry per op). Adding an op is one
`Op` entry here and one entry in each backend table (docs/compiler.md: "Adding an op").

`eager` is a template over the op's operands `{0}`, `{1}`, ... (SSA names or literals, so a
template may repeat an operand freely): PyTorch code with torch's exact semantics (dtype
promotion included). Each generated kernel ships its region written this way: the launcher
runs it on meta tensors to learn result shapes and dtypes, and tests compare against it.

Spellings use a small call notation: `torch.clamp(input, min=None, max)` binds
positional arguments in that order and keywords by name; a bare name is an operand,
`name=value` pins the argument to that value (omitted means the value; `...` allows
any constant), and `name:=value` is an operand with a default. `Tensor.m`
is a method (the receiver is the first operand), `module:torch.nn.GELU(...)` a
module built with those arguments in `__init__` and called on the operands, and
`a + b` an operator (indexed as `a+b`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum


class OpKind(Enum):
    POINTWISE = "pointwise"
    # Reduces along one dim (`dim` operand) or normalises along it (softmax, layer_norm):
    # recognised in source, then lowered (transpiler/compiler/lowering.py) to ROW ops and pointwise ops.
    REDUCTION = "reduction"
    # The primitives reductions lower to: a sum, max or min over each row of the
    # iteration space, and the row's length. Backends render them structurally.
    ROW = "row"
    # An element op that reads its tensor operand, a region input, at another element of the same
    # row of the last dim: its templates name the input's pointer and offsets, not a loaded value.
    SHIFTED = "shifted"


class Domain(Enum):
    """Input dtypes an op is defined on (what tests draw; torch decides the rest)."""

    FLOAT = "float"  # floating point; torch also accepts ints and promotes them
    NUMERIC = "numeric"  # float and int
    BOOL = "bool"  # bool tensors (logical ops)
    ANY = "any"  # float, int and bool


@dataclass(frozen=True)
class Module:
    """What a call of one of an op's module spellings (`module:torch.nn.BatchNorm2d(...)`) needs beyond the spelling."""

    cls: str  # the module's class, as the spelling names it
    # Checked by the caller at run time before the kernel (`{m}`: the module; `{x}`: its input, then a tensor
    # the region reads, not one it computes); otherwise the original code runs.
    conditions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Op:
    name: str
    arity: int
    eager: str
    spellings: tuple[str, ...] = ()
    domain: Domain = Domain.FLOAT
    kind: OpKind = OpKind.POINTWISE
    # Operands (by position) that must be Python constants, not tensors.
    constant_operands: tuple[int, ...] = ()
    # Result is bool regardless of inputs (comparisons, isnan).
    returns_bool: bool = False
    # Tensor operands read only for their dtype (`x.to(y.dtype)`): they take no part in the result's shape.
    dtype_operands: tuple[int, ...] = ()
    # Integer and bool operands give a float32 result (torch's float functions: exp, sigmoid, true division).
    int_to_float: bool = False
    # Eager may return operand 0 itself, not a new tensor (`x.float()` of a float32 x, `nn.Identity`): an
    # in-place update of the result then updates the operand too.
    may_alias: bool = False
    # Bool operands give a bool result (`m + m` is True, `m.masked_fill(k, -1.0)` fills True); without it
    # torch rejects all-bool operands, or promotes them (float functions, comparisons).
    keeps_bool: bool = False
    # Of those, the ops whose bool result is what they compute on the numbers 0 and 1 (`m * k` is `m and k`,
    # `maximum` is `or`): the kernels may compute them as numbers. Not `m + m` (2, not True) or masked_fill.
    bool_exact: bool = False
    # A Python number as operand 1 is converted to the tensor's dtype before the op (torch's remainder
    # divides a half by half(1e-6)); add, mul and the rest keep it in the compute type.
    scalar_in_dtype: bool = False
    # A constant operand torch converts to the result's dtype where that is an integer (`addcmul(t, t, t,
    # value=0.5)` of int32 tensors adds 0): `dtypes.stored_constants` truncates it so, the kernels computing in floats.
    integer_operand: int | None = None
    # Operands read as booleans (conditions) whatever their dtype, besides a Domain.BOOL op's (all of them): they
    # take no part in promotion.
    bool_operands: tuple[int, ...] = ()
    # Operands whose kind the result has (`dtypes.value_kinds`): bool where all of them are (a `where` of bools).
    kind_operands: tuple[int, ...] = ()
    # Reductions: the operand giving the reduced dim (None: the last dim) and the one giving keepdim (None: the
    # result has the input's shape, as softmax's).
    dim_operand: int | None = None
    keepdim_operand: int | None = None
    # What it counts towards a region's size (regions.MIN_OPS): 0 for an op that computes nothing (a cast, the
    # identity), more for one that is several eager kernels.
    cost: int = 1
    # Named in a kernel's name only where the region computes nothing else: `fused_exp` for exp and add.
    arithmetic: bool = False
    # A linear layer's matmul may apply it in its epilogue (cuBLASLt: ReLU, tanh-GELU; emit/runtime/linear.py).
    epilogue: bool = False
    # Facts about its module spellings' classes (conditions at run time, randomness in training).
    modules: tuple[Module, ...] = ()
    # SHIFTED ops: checked by the caller before the region on operand 0 (`{x}`, a tensor the region reads).
    operand_conditions: tuple[str, ...] = ()


def _unary(
    name: str,
    torch_fn: str,
    *extra: str,
    domain: Domain = Domain.FLOAT,
    method: bool = True,
    keeps_bool: bool = False,
    bool_exact: bool = False,
) -> Op:
    """An op with one operand, spelled `torch.fn(x)`, `x.fn()` and `x.fn_()`."""
    spellings = [f"torch.{torch_fn}(input)"]
    if method:
        spellings += [f"Tensor.{torch_fn}()", f"Tensor.{torch_fn}_()"]
    return Op(
        name,
        1,
        f"torch.{torch_fn}({{0}})",
        (*spellings, *extra),
        domain,
        int_to_float=domain is Domain.FLOAT,
        keeps_bool=keeps_bool,
        bool_exact=bool_exact,
    )


def _binary(
    name: str,
    symbol: str | None,
    torch_fn: str,
    *extra: str,
    domain: Domain = Domain.NUMERIC,
    int_to_float: bool = False,
    keeps_bool: bool = False,
    bool_exact: bool = False,
    arithmetic: bool = False,
) -> Op:
    spellings = [f"torch.{torch_fn}(input, other)", f"Tensor.{torch_fn}(other)", f"Tensor.{torch_fn}_(other)"]
    if symbol:
        spellings.insert(0, f"a {symbol} b")
    eager = f"{{0}} {symbol} {{1}}" if symbol else f"torch.{torch_fn}({{0}}, {{1}})"
    return Op(
        name,
        2,
        eager,
        (*spellings, *extra),
        domain,
        int_to_float=int_to_float,
        keeps_bool=keeps_bool,
        bool_exact=bool_exact,
        arithmetic=arithmetic,
    )


def _compare(name: str, symbol: str, torch_fn: str, alias: str) -> Op:
    spellings = (
        f"a {symbol} b",
        f"torch.{torch_fn}(input, other)",
        f"torch.{alias}(input, other)",
        f"Tensor.{torch_fn}(other)",
        f"Tensor.{alias}(other)",
    )
    return Op(
        name,
        2,
        f"{{0}} {symbol} {{1}}",
        spellings,
        Domain.ANY,
        returns_bool=True,
    )


def _logical(name: str, torch_fn: str, arity: int = 2) -> Op:
    """torch's logical function `torch.fn`: a bool of whether its operands are nonzero, whatever their dtype.

    Domain.BOOL: the C++ kernels read the operands as bools (`x != 0`), as torch does; the Triton
    helper of the same name does so where they are not bools already."""
    params = ("input", "other")[:arity]
    operands = ", ".join(f"{{{n}}}" for n in range(arity))
    spellings = (f"torch.{torch_fn}({', '.join(params)})", f"Tensor.{torch_fn}({', '.join(params[1:])})")
    return Op(
        name,
        arity,
        f"torch.{torch_fn}({operands})",
        spellings,
        Domain.BOOL,
        returns_bool=True,
    )


def _bitwise(name: str, symbol: str, dunder: str) -> Op:
    """`a & b`, `a | b`, `a ^ b`, `~a` and their functions: bitwise on integers (an integer result), logical on
    bools; eager raises on floats.

    Domain.BOOL: the C++ kernels compute them on bools only (an integer input takes the original code
    there); Triton computes them as written in the operands' dtype, which is eager's: bitwise on integers,
    logical on int1 (a bool joining an integer is 0 or 1)."""
    unary = name == "bitwise_not"
    eager = f"{symbol}{{0}}" if unary else f"{{0}} {symbol} {{1}}"
    params = ("input",) if unary else ("input", "other")
    methods = (f"Tensor.{method}({', '.join(params[1:])})" for method in (name, f"{name}_", f"__{dunder}__"))
    spellings = (f"{symbol}a" if unary else f"a {symbol} b", f"torch.{name}({', '.join(params)})", *methods)
    return Op(name, len(params), eager, spellings, Domain.BOOL)


F = "torch.nn.functional"

OPS: tuple[Op, ...] = (
    # -- arithmetic ----------------------------------------------------------------
    _binary("add", "+", "add", domain=Domain.NUMERIC, keeps_bool=True, arithmetic=True),
    _binary("sub", "-", "sub", "torch.subtract(input, other)", arithmetic=True),
    _binary("mul", "*", "mul", "torch.multiply(input, other)", keeps_bool=True, bool_exact=True, arithmetic=True),
    _binary(
        "div",
        "/",
        "div",
        "torch.true_divide(input, other)",
        "torch.divide(input, other)",
        int_to_float=True,
        arithmetic=True,
    ),
    _binary("floordiv", "//", "floor_divide", arithmetic=True),
    replace(_binary("remainder", "%", "remainder", arithmetic=True), scalar_in_dtype=True),
    _binary("pow", "**", "pow", domain=Domain.FLOAT, arithmetic=True),
    Op(
        "neg",
        1,
        "-{0}",
        ("-a", "torch.neg(input)", "torch.negative(input)", "Tensor.neg()", "Tensor.neg_()"),
        Domain.NUMERIC,
        arithmetic=True,
    ),
    Op("pos", 1, "+{0}", ("+a",), Domain.NUMERIC, may_alias=True, kind_operands=(0,), cost=0),
    _unary("reciprocal", "reciprocal"),
    _unary("abs", "abs", domain=Domain.NUMERIC),
    _unary("sign", "sign", domain=Domain.NUMERIC, keeps_bool=True, bool_exact=True),
    _binary("minimum", None, "minimum", keeps_bool=True, bool_exact=True),
    _binary("maximum", None, "maximum", keeps_bool=True, bool_exact=True),
    Op(
        "lerp",
        3,
        "torch.lerp({0}, {1}, {2})",
        ("torch.lerp(input, end, weight)", "Tensor.lerp(end, weight)", "Tensor.lerp_(end, weight)"),
    ),
    Op(
        "addcmul",
        4,
        "torch.addcmul({0}, {1}, {2}, value={3})",
        (
            "torch.addcmul(input, tensor1, tensor2, value:=1)",
            "Tensor.addcmul(tensor1, tensor2, value:=1)",
            "Tensor.addcmul_(tensor1, tensor2, value:=1)",
        ),
        constant_operands=(3,),
        integer_operand=3,
    ),
    # (value * tensor1) / tensor2, in torch's order: value * (tensor1 / tensor2) overflows elsewhere.
    Op(
        "addcdiv",
        4,
        "torch.addcdiv({0}, {1}, {2}, value={3})",
        (
            "torch.addcdiv(input, tensor1, tensor2, value:=1)",
            "Tensor.addcdiv(tensor1, tensor2, value:=1)",
            "Tensor.addcdiv_(tensor1, tensor2, value:=1)",
        ),
        constant_operands=(3,),
    ),
    # -- comparisons and logic -----------------------------------------------------------
    _compare("lt", "<", "lt", "less"),
    _compare("le", "<=", "le", "less_equal"),
    _compare("gt", ">", "gt", "greater"),
    _compare("ge", ">=", "ge", "greater_equal"),
    _compare("eq", "==", "eq", "eq"),
    _compare("ne", "!=", "ne", "not_equal"),
    _logical("and", "logical_and"),
    _logical("or", "logical_or"),
    _logical("xor", "logical_xor"),
    _logical("not", "logical_not", arity=1),
    _bitwise("bitwise_and", "&", "and"),
    _bitwise("bitwise_or", "|", "or"),
    _bitwise("bitwise_xor", "^", "xor"),
    _bitwise("bitwise_not", "~", "invert"),
    Op(
        "isnan",
        1,
        "torch.isnan({0})",
        ("torch.isnan(input)", "Tensor.isnan()"),
        returns_bool=True,
    ),
    Op(
        "isinf",
        1,
        "torch.isinf({0})",
        ("torch.isinf(input)", "Tensor.isinf()"),
        returns_bool=True,
    ),
    Op(
        "where",
        3,
        "torch.where({0}, {1}, {2})",
        ("torch.where(condition, input, other)",),
        Domain.ANY,
        bool_operands=(0,),
        kind_operands=(1, 2),
    ),
    Op(
        "masked_fill",
        3,
        "{0}.masked_fill({1}, {2})",
        (
            "Tensor.masked_fill(mask, value)",
            "Tensor.masked_fill_(mask, value)",
            "torch.masked_fill(input, mask, value)",
        ),
        constant_operands=(2,),
        keeps_bool=True,
        bool_operands=(1,),
        integer_operand=2,
    ),
    # -- exponentials, logarithms, roots -----------------------------------------------
    _unary("exp", "exp"),
    _unary("exp2", "exp2", "torch.special.exp2(input)"),
    _unary("expm1", "expm1", "torch.special.expm1(input)"),
    _unary("log", "log"),
    _unary("log1p", "log1p", "torch.special.log1p(input)"),
    _unary("log2", "log2"),
    _unary("sqrt", "sqrt"),
    _unary("rsqrt", "rsqrt"),
    # -- trigonometry ----------------------------------------------------------------------
    _unary("sin", "sin"),
    _unary("cos", "cos"),
    _unary("tanh", "tanh", f"{F}.tanh(input)", "module:torch.nn.Tanh()"),
    _unary("erf", "erf", "torch.special.erf(input)"),
    # -- activations ------------------------------------------------------------------------
    _unary(
        "sigmoid",
        "sigmoid",
        f"{F}.sigmoid(input)",
        "torch.special.expit(input)",
        "module:torch.nn.Sigmoid()",
    ),
    Op(
        "relu",
        1,
        "torch.relu({0})",
        (
            "torch.relu(input)",
            "Tensor.relu()",
            "Tensor.relu_()",
            "torch.relu_(input)",
            f"{F}.relu(input, inplace=False)",
            "module:torch.nn.ReLU(inplace=False)",
        ),
        Domain.NUMERIC,
        epilogue=True,
    ),
    Op(
        "gelu",
        1,
        f"{F}.gelu({{0}})",
        (f"{F}.gelu(input, approximate='none')", "module:torch.nn.GELU(approximate='none')"),
    ),
    Op(
        "gelu_tanh",
        1,
        f"{F}.gelu({{0}}, approximate='tanh')",
        (f"{F}.gelu(input, approximate='tanh')", "module:torch.nn.GELU(approximate='tanh')"),
        epilogue=True,
    ),
    Op(
        "silu",
        1,
        f"{F}.silu({{0}})",
        (f"{F}.silu(input, inplace=False)", "module:torch.nn.SiLU(inplace=False)"),
    ),
    Op(
        "mish",
        1,
        f"{F}.mish({{0}})",
        (f"{F}.mish(input, inplace=False)", "module:torch.nn.Mish(inplace=False)"),
    ),
    Op(
        "softplus",
        1,
        f"{F}.softplus({{0}})",
        (f"{F}.softplus(input, beta=1, threshold=20)", "module:torch.nn.Softplus(beta=1, threshold=20)"),
    ),
    Op(
        "identity",
        1,
        "{0}",
        ("module:torch.nn.Identity()",),
        Domain.ANY,
        may_alias=True,
        kind_operands=(0,),
        cost=0,
    ),
    # No spellings of their own: activation modules chosen at run time map to them (ACTIVATIONS below).
    Op(
        "quick_gelu",
        1,
        "{0} * torch.sigmoid(1.702 * {0})",
        int_to_float=True,
    ),
    Op("relu_squared", 1, "torch.square(torch.relu({0}))"),
    # -- clamping -----------------------------------------------------------------------------
    Op(
        "clamp",
        3,
        "torch.clamp({0}, {1}, {2})",
        (
            "torch.clamp(input, min, max)",
            "torch.clip(input, min, max)",
            "Tensor.clamp(min, max)",
            "Tensor.clamp_(min, max)",
            "Tensor.clip(min, max)",
        ),
        Domain.NUMERIC,
    ),
    Op(
        "clamp_min",
        2,
        "torch.clamp_min({0}, {1})",
        (
            "torch.clamp(input, min, max=None)",
            "torch.clamp_min(input, min)",
            "Tensor.clamp(min, max=None)",
            "Tensor.clamp_(min, max=None)",
            "Tensor.clamp_min(min)",
            "Tensor.clamp_min_(min)",
        ),
        Domain.NUMERIC,
        keeps_bool=True,
        bool_exact=True,
    ),
    Op(
        "clamp_max",
        2,
        "torch.clamp_max({0}, {1})",
        (
            "torch.clamp(input, min=None, max)",
            "torch.clamp_max(input, max)",
            "Tensor.clamp(min=None, max)",
            "Tensor.clamp_(min=None, max)",
            "Tensor.clamp_max(max)",
            "Tensor.clamp_max_(max)",
        ),
        Domain.NUMERIC,
        keeps_bool=True,
        bool_exact=True,
    ),
    Op(
        "nan_to_num",
        4,
        "torch.nan_to_num({0}, nan={1}, posinf={2}, neginf={3})",
        (
            "torch.nan_to_num(input, nan:=0.0, posinf, neginf)",
            "Tensor.nan_to_num(nan:=0.0, posinf, neginf)",
            "Tensor.nan_to_num_(nan:=0.0, posinf, neginf)",
        ),
        constant_operands=(1, 2, 3),
        keeps_bool=True,
        bool_exact=True,
    ),
    # -- rounding -------------------------------------------------------------------------------
    _unary("floor", "floor", domain=Domain.NUMERIC),
    _unary("ceil", "ceil", domain=Domain.NUMERIC),
    _unary("round", "round", domain=Domain.NUMERIC),
    _unary("trunc", "trunc", domain=Domain.NUMERIC),
)


def _reduction(name: str, torch_fn: str, *extra: str, correction: bool = False) -> Op:
    """`torch.fn(input, dim, keepdim=False)` and `x.fn(dim, keepdim=False)`; var and std take a correction."""
    params = "dim, correction:=1, keepdim:=False" if correction else "dim, keepdim:=False"
    eager = (
        "torch.{fn}({{0}}, dim={{1}}, correction={{2}}, keepdim={{3}})"
        if correction
        else "torch.{fn}({{0}}, dim={{1}}, keepdim={{2}})"
    )
    spellings = (f"torch.{torch_fn}(input, {params})", f"Tensor.{torch_fn}({params})", *extra)
    constants = (1, 2, 3) if correction else (1, 2)
    return Op(
        name,
        len(constants) + 1,
        eager.format(fn=torch_fn),
        spellings,
        kind=OpKind.REDUCTION,
        constant_operands=constants,
        dim_operand=1,
        keepdim_operand=constants[-1],
    )


def _normalisation(name: str, torch_fn: str, module: str) -> Op:
    """softmax and log_softmax: `F.fn(input, dim)`, `torch.fn(input, dim)`, `x.fn(dim)`, `nn.Module(dim)`."""
    spellings = (
        f"{F}.{torch_fn}(input, dim, _stacklevel=..., dtype=None)",
        f"torch.{torch_fn}(input, dim, dtype=None)",
        f"Tensor.{torch_fn}(dim, dtype=None)",
        f"torch.special.{torch_fn}(input, dim, dtype=None)",
        f"module:torch.nn.{module}(dim) -> input, dim",
    )
    return Op(
        name,
        2,
        f"torch.{torch_fn}({{0}}, dim={{1}})",
        spellings,
        kind=OpKind.REDUCTION,
        constant_operands=(1,),
        dim_operand=1,
    )


REDUCTIONS: tuple[Op, ...] = (
    _reduction("sum", "sum"),
    _reduction("mean", "mean"),
    _reduction("amax", "amax"),
    _reduction("amin", "amin"),
    _reduction("var", "var", correction=True),
    _reduction("std", "std", correction=True),
    _reduction("logsumexp", "logsumexp", "torch.special.logsumexp(input, dim, keepdim:=False)"),
    _normalisation("softmax", "softmax", "Softmax"),
    _normalisation("log_softmax", "log_softmax", "LogSoftmax"),
    # Over the last dim only (no dim_operand): a one-dim `normalized_shape` (the runtime checks the weight covers it).
    Op(
        "layer_norm",
        4,
        f"{F}.layer_norm({{0}}, {{1}}.shape, {{1}}, {{2}}, {{3}})",
        (
            f"{F}.layer_norm(input, normalized_shape=..., weight, bias, eps:=1e-05)",
            "module:torch.nn.LayerNorm(normalized_shape=..., eps=..., elementwise_affine=True, bias=True) -> input, .weight, .bias, .eps",
        ),
        kind=OpKind.REDUCTION,
        constant_operands=(3,),
    ),
)


# -- per-channel ops ---------------------------------------------------------------------------
# Batch norm in eval mode: pointwise, with operands 1-4 one value per channel, which the caller passes
# as views broadcasting along dim 1 of the input (kernels read them like any broadcast input); the
# module's conditions (`Module.conditions`: eval mode, statistics present, the input's rank and
# channels) guard the call. Computed as torch's CPU kernel does, in float32 for half and bfloat16:
# y = x * alpha + beta, alpha = 1 / sqrt(var + eps) * weight, beta = bias - mean * alpha.
# Not among OPS: the op tests draw arbitrary broadcasts, and these operands broadcast one way.
def _batch_norm(module: str, dims: int) -> str:
    """The spelling of `nn.BatchNorm{dims - 2}d`: its statistics and affine parameters viewed so that
    they broadcast along dim 1 of a `dims`-d input (`[:, None, None]` for 4 dims), and its eps."""
    view = "[:, " + ", ".join(["None"] * (dims - 2)) + "]"
    tensors = ", ".join(f".{name}{view}" for name in ("running_mean", "running_var", "weight", "bias"))
    return (
        f"module:torch.nn.{module}(num_features=..., eps=..., momentum=..., affine=True, track_running_stats=True, "
        f"device=..., dtype=...) -> input, {tensors}, .eps"
    )


def _batch_norm_module(dims: int) -> Module:
    """`nn.BatchNorm{dims - 2}d`'s conditions: eval mode normalises with the running statistics (training uses
    the batch's and updates them); statistics or parameters set to None since, and inputs the module rejects
    (rank, channels), take the original code, as does `track_running_stats=False` (no statistics), ruled out by
    the spelling."""
    present = tuple(f"{{m}}.{name} is not None" for name in ("running_mean", "running_var", "weight", "bias"))
    conditions = ("not {m}.training", *present, f"{{x}}.dim() == {dims}", "{x}.shape[1] == {m}.num_features")
    return Module(f"torch.nn.BatchNorm{dims - 2}d", conditions)


CHANNEL_OPS: tuple[Op, ...] = (
    Op(
        "batch_norm",
        6,
        f"{F}.batch_norm({{0}}, {{1}}.flatten(), {{2}}.flatten(), {{3}}.flatten(), {{4}}.flatten(), eps={{5}})",
        (_batch_norm("BatchNorm2d", 4), _batch_norm("BatchNorm3d", 5)),
        constant_operands=(5,),
        modules=(_batch_norm_module(4), _batch_norm_module(5)),
    ),
)


# -- ops that read their input at other elements --------------------------------------------
# Rotary embeddings' `rotate_half(x)`: out[..., j] = -x[..., j + h] for j < h, x[..., j - h] for j >= h,
# with h = D // 2 of x's last dim D. Operand 0 is a tensor the region reads (the kernels load it at the
# shifted coordinate), operand 1 is h, which the caller passes (`x.shape[-1] // 2`). The caller checks
# its operand_conditions first: an even D (the original code handles odd ones), read at stride 1,
# so that the shifted element is h elements away and j is the output's linear index modulo D. No
# spellings: regions.py recognises a function of the file whose body is transformers' `rotate_half`,
# and the same `torch.cat` written inline. Not among OPS: their tests draw arbitrary operands.
def _shifted(name: str, first_half_sign: str) -> Op:
    """An op reading its operand at the other half of the last dim, the first half's element signed so."""
    return Op(
        name,
        2,
        f"torch.cat(({first_half_sign}{{0}}[..., {{0}}.shape[-1] // 2 :], {{0}}[..., : {{0}}.shape[-1] // 2]), dim=-1)",
        domain=Domain.NUMERIC,
        kind=OpKind.SHIFTED,
        operand_conditions=("{x}.dim() > 0", "{x}.shape[-1] % 2 == 0", "{x}.stride(-1) == 1"),
    )


# `swap_halves`: the halves exchanged, no sign. `rotate_half`'s backward reads the gradient's product with sin at the
# other half (autodiff.py). No spelling: only backward regions hold it, and the runtime checks its operands.
SHIFTED_OPS: tuple[Op, ...] = (_shifted("rotate_half", "-"), _shifted("swap_halves", ""))

ROW_OPS: tuple[Op, ...] = (
    Op("row_sum", 1, "", kind=OpKind.ROW),
    Op("row_max", 1, "", kind=OpKind.ROW),
    Op("row_min", 1, "", kind=OpKind.ROW),
    Op("row_size", 0, "", kind=OpKind.ROW),
)

# Casts are ops parameterised by their target dtype: one entry per dtype would repeat
# the same rendering, so the dtype is the constant operand {1}, a torch dtype name.
CAST = Op(
    "to",
    2,
    "{0}.to(torch.{1})",
    (
        "Tensor.to(dtype)",
        "Tensor.type(dtype)",
        "Tensor.float()",
        "Tensor.double()",
        "Tensor.half()",
        "Tensor.bfloat16()",
        "Tensor.int()",
        "Tensor.long()",
        "Tensor.bool()",
    ),
    Domain.ANY,
    constant_operands=(1,),
    may_alias=True,
    cost=0,
)

# `x.to(other.dtype)`, also through a variable (`dtype = x.dtype` ... `y.to(dtype)`): a cast to
# the storage dtype of tensor input {1}, which the kernels know from its pointer (Triton) or from the
# type of its class (C++, which rounds the value to it: emit/cpp/kernels.py `render_node`).
CAST_LIKE = Op(
    "to_like",
    2,
    "{0}.to({1}.dtype)",
    (),
    Domain.FLOAT,
    dtype_operands=(1,),
    may_alias=True,
    cost=0,
)

# The lowering's mark of a value eager holds in the dtype of value {1} (named by a constant, so that it
# joins no shape or pass): a composite reduction's intermediate, which eager rounds to that dtype
# (`torch.logsumexp` of a half is half ops). The backends round it as any typed value; nothing else.
ROUND_LIKE = Op("round_like", 2, "{0}", (), Domain.FLOAT, constant_operands=(1,))

# -- activations chosen at run time ---------------------------------------------------------
# `self.act(h)` where `self.act = ACT2FN[config.hidden_act]` (or any value whose class is not
# known statically) in an attribute named like an activation: the kernel computes operand 0 with
# the unary op the module {1} maps to (ACTIVATIONS), chosen per call; the eager reference calls the module.
# It counts as a whole region (regions.MIN_OPS): its forward is often several eager kernels (NewGELUActivation's
# is 8), so a kernel pays even for `h = self.act(h)` alone.
ACTIVATION = Op("activation", 2, "{1}({0})", cost=2)


@dataclass(frozen=True)
class Activation:
    """An activation module class the runtime computes as a unary op of the table."""

    cls: str  # where the class is defined: `type(m).__module__` and `.__qualname__`; subclasses do not match
    op: str  # the op computing its forward
    # Instance attributes and the value each must have, as Python source (torch, functools and
    # math may appear): the forward depends on them.
    attributes: tuple[tuple[str, str], ...] = ()
    # Kernels its forward launches in eager PyTorch: a region that is this activation alone is
    # worth a kernel only where it replaces several (NewGELUActivation's formula is eight).
    eager_kernels: int = 1


_TORCH_ACT = "torch.nn.modules.activation"
_HF_ACT = "transformers.activations"
ACTIVATIONS: tuple[Activation, ...] = (
    Activation(f"{_TORCH_ACT}.GELU", "gelu", (("approximate", "'none'"),)),
    Activation(f"{_TORCH_ACT}.GELU", "gelu_tanh", (("approximate", "'tanh'"),)),
    Activation(f"{_TORCH_ACT}.ReLU", "relu", (("inplace", "False"),)),
    Activation(f"{_TORCH_ACT}.SiLU", "silu", (("inplace", "False"),)),
    Activation(f"{_TORCH_ACT}.Mish", "mish", (("inplace", "False"),)),
    Activation(f"{_TORCH_ACT}.Tanh", "tanh"),
    Activation(f"{_TORCH_ACT}.Sigmoid", "sigmoid"),
    Activation("torch.nn.modules.linear.Identity", "identity", eager_kernels=0),
    # transformers: GELUActivation and GELUTanh call `self.act`, set by their constructor arguments.
    Activation(f"{_HF_ACT}.GELUActivation", "gelu", (("act", "torch.nn.functional.gelu"),)),
    Activation(
        f"{_HF_ACT}.GELUTanh",
        "gelu_tanh",
        (("act", "functools.partial(torch.nn.functional.gelu, approximate='tanh')"),),
    ),
    Activation(f"{_HF_ACT}.NewGELUActivation", "gelu_tanh", eager_kernels=8),
    Activation(f"{_HF_ACT}.FastGELUActivation", "gelu_tanh", eager_kernels=7),
    Activation(
        f"{_HF_ACT}.AccurateGELUActivation", "gelu_tanh", (("precomputed_constant", "math.sqrt(2 / math.pi)"),), 7
    ),
    Activation(f"{_HF_ACT}.QuickGELUActivation", "quick_gelu", eager_kernels=3),
    Activation(f"{_HF_ACT}.SiLUActivation", "silu"),
    Activation(f"{_HF_ACT}.MishActivation", "mish", (("act", "torch.nn.functional.mish"),)),
    Activation(f"{_HF_ACT}.LinearActivation", "identity", eager_kernels=0),
    Activation(f"{_HF_ACT}.ReLUSquaredActivation", "relu_squared", eager_kernels=2),
)
# The code of an activation is its op's position here: kernels switch on it.
ACTIVATION_OPS: tuple[str, ...] = tuple(dict.fromkeys(a.op for a in ACTIVATIONS))

# The cast methods and the dtype each one names.
CAST_METHODS = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "bfloat16": "bfloat16",
    "int": "int32",
    "long": "int64",
    "bool": "bool",
}
DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool")
DTYPE_ALIASES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "int": "int32",
    "long": "int64",
    "short": "int16",
}

BY_NAME: dict[str, Op] = {
    op.name: op
    for op in (*OPS, CAST, CAST_LIKE, ROUND_LIKE, ACTIVATION, *REDUCTIONS, *CHANNEL_OPS, *SHIFTED_OPS, *ROW_OPS)
}

# -- views of the registry ---------------------------------------------------------------------
# Ops that compute nothing: they take no part in a region's size or its kernel's name.
TRIVIAL = frozenset(name for name, op in BY_NAME.items() if op.cost == 0)
# The activations a linear layer's matmul applies in its epilogue, in table order: an op's code is its position
# here (emit/runtime/linear.py takes code 1 for tanh-GELU).
EPILOGUE_OPS: tuple[str, ...] = tuple(name for name, op in BY_NAME.items() if op.epilogue)
# What holds for calls of module classes the spellings name, by class.
MODULES: dict[str, Module] = {module.cls: module for op in BY_NAME.values() for module in op.modules}
# Names of well-known computations, for kernel names: the ops that identify each (`fused_rms_norm`).
KERNEL_PATTERNS: dict[str, frozenset[str]] = {
    "rms_norm": frozenset({"mean", "rsqrt"}),
    "rotary": frozenset({"rotate_half"}),
}


@dataclass(frozen=True)
class Spelling:
    """One parsed spelling: `callee` (qualified name, `Tensor.m`, `module:...`, or an operator)."""

    op: Op
    callee: str
    params: tuple[str, ...]  # in positional order
    pinned: tuple[tuple[str, object], ...]  # parameter -> required value
    operands: tuple[str, ...]  # parameters that become the op's operands, in operand order
    defaults: tuple[tuple[str, object], ...] = ()  # operand -> value when omitted
    # Modules only: the op's operands after `->`: `input` (the call's argument), a constructor
    # parameter (its constant), `.attr` (the module's attribute) or `.attr[...]` (a view of it, the
    # caller evaluating the subscript). Empty: the call's arguments.
    module_operands: tuple[str, ...] = ()


def _parse(op: Op, text: str) -> Spelling:
    if " " in text.split("(")[0] or text[0] in "-+~":  # operators: "a + b", "-a"
        return Spelling(op, text.replace(" ", ""), (), (), ())  # keys like "a+b", "-a"
    text, _, module_operands = text.partition(" -> ")
    callee, _, rest = text.partition("(")
    params, pinned, operands, defaults = [], [], [], []
    for part in filter(None, (p.strip() for p in rest.rstrip(")").split(","))):
        name, eq, value = part.partition("=")
        name = name.rstrip(":")
        params.append(name)
        if eq and not part.startswith(f"{name}:="):
            pinned.append((name, eval(value)))  # literals only: None, numbers, strings, ...
        else:
            operands.append(name)
            if eq:
                defaults.append((name, eval(value)))
    if callee.startswith("Tensor."):
        operands.insert(0, "self")
        params.insert(0, "self")
    # Split at commas outside brackets: an operand may be a view (`.weight[:, None, None]`).
    arrow = tuple(o.strip() for o in re.split(r",(?![^\[]*\])", module_operands)) if module_operands else ()
    return Spelling(op, callee, tuple(params), tuple(pinned), tuple(operands), tuple(defaults), arrow)


SPELLINGS: tuple[Spelling, ...] = tuple(_parse(op, s) for op in BY_NAME.values() for s in op.spellings)


def spellings_of(callee: str) -> list[Spelling]:
    """Every spelling of `callee` (a qualified function, `Tensor.method`, `module:Class`, an operator)."""
    return _INDEX.get(callee, [])


_INDEX: dict[str, list[Spelling]] = {}
for _s in SPELLINGS:
    _INDEX.setdefault(_s.callee, []).append(_s)

# -- derivatives ---------------------------------------------------------------------------------
# Per op, one formula per operand: the gradient that flows into that operand, written as Python over the
# operands `{0}`, `{1}`, ..., the op's result `out` and the result's gradient `g`, calling the ops of this
# table by name (`where`, `exp`, `to_like`, ...) and, for reductions, `rowsum(e)`, `rowmean(e)`,
# `rowmax(e)`, `rowvar(e)` (along the op's dim, keepdim; rowvar without correction) and `rowsize()` (the
# row's length). `a = ...; b` binds names first. An operand may be a constant (`x ** 2.0`, `clamp(x, 0.0,
# 6.0)`): arithmetic, comparisons, `&`, `|` and `log` of constants fold, and a `where` whose condition folds
# picks its branch, so a formula branches on a constant as torch's do on a Scalar (autodiff.py). None: no
# gradient flows into that operand (a constant, a condition, an integer result); an op whose operands are
# all None (floor, sign) passes no gradient back, as torch's zero gradient adds nothing.
# Comparisons and logical ops (`returns_bool`) carry no gradient and need no entry; the ops of
# NO_DERIVATIVE have none, each for the reason given there. A region with either runs its original code
# under autograd. transpiler/compiler/autodiff.py derives a region's backward from these formulas;
# tests/test_autodiff.py checks each against torch.autograd, ties, zeros, infinities and NaN included.
# The formulas follow torch's derivatives (tools/autograd/derivatives.yaml) where those make a difference:
# the subgradient torch picks at a kink (relu and relu_squared 0 at 0, abs sign(0) = 0, clamp passing the
# gradient on its bounds, maximum and minimum halving it on ties, amax and amin sharing it among tied
# maxima), which side of a `where` a value that may be inf or NaN sits on (softplus above its threshold,
# pow's masks, std's 0), and the order of a product where it decides overflow (div's `x / y / y`).
DERIVATIVES: dict[str, tuple[str | None, ...]] = {
    # -- arithmetic ---------------------------------------------------------------------------------------
    "add": ("g", "g"),
    "sub": ("g", "-g"),
    "mul": ("g * {1}", "g * {0}"),
    # Two divisions, not one by y * y: the square underflows to 0 (an infinite gradient) where x / y / y is finite.
    "div": ("g / {1}", "-g * ({0} / {1} / {1})"),
    # x - floor(x / y) * y: the floor's derivative is 0 where it is defined.
    "remainder": ("g", "-g * floordiv({0}, {1})"),
    # An exponent 0 gives no gradient to the base (not 0 * 0 ** -1, NaN). d(x^y)/dy = x^y log x, taken as 0
    # where x = 0 and y >= 0 (its limit as x -> +0), -inf where y < 0.
    "pow": (
        "where({1} == 0, 0.0, g * ({1} * pow({0}, {1} - 1)))",
        "g * where(({0} == 0) & ({1} >= 0), 0.0, out * log({0}))",
    ),
    "neg": ("-g",),
    # rotate_half's transpose is -rotate_half: the gradient read at the other half. autodiff.py moves the shift
    # onto the backward's inputs (a shifted op reads an input, not a computed value).
    "rotate_half": ("-rotate_half(g, {1})", None),
    "swap_halves": ("swap_halves(g, {1})", None),
    "pos": ("g",),
    "reciprocal": ("-g * (out * out)",),
    "abs": ("g * sign({0})",),  # sign(0) = 0: the subgradient 0 at the kink
    "sign": (None,),
    # A tie splits the gradient in half between the operands; NaN (either operand) passes it to both.
    "minimum": (
        "where({0} > {1}, 0.0, where({0} == {1}, g / 2, g))",
        "where({0} < {1}, 0.0, where({0} == {1}, g / 2, g))",
    ),
    "maximum": (
        "where({0} < {1}, 0.0, where({0} == {1}, g / 2, g))",
        "where({0} > {1}, 0.0, where({0} == {1}, g / 2, g))",
    ),
    "lerp": ("g * (1 - {2})", "g * {2}", "g * ({1} - {0})"),
    "addcmul": ("g", "g * ({2} * {3})", "g * ({1} * {3})", None),
    "addcdiv": ("g", "g * ({3} / {2})", "-g * ({3} * {1} / ({2} * {2}))", None),
    # -- bitwise: integer and bool results, which carry no gradient (their masks feed `where` and the like)
    "bitwise_and": (None, None),
    "bitwise_or": (None, None),
    "bitwise_xor": (None, None),
    "bitwise_not": (None,),
    # -- selection: the condition gets none; a tensor fill value gets the gradient of what it filled
    "where": (None, "where({0}, g, 0.0)", "where({0}, 0.0, g)"),
    "masked_fill": ("where({1}, 0.0, g)", None, "where({1}, g, 0.0)"),
    # -- exponentials, logarithms, roots
    "exp": ("g * out",),
    "exp2": ("g * out * log(2)",),
    "expm1": ("g * (out + 1)",),
    "log": ("g / {0}",),
    "log1p": ("g / ({0} + 1)",),
    "log2": ("g / ({0} * log(2))",),
    "sqrt": ("g / (2 * out)",),
    "rsqrt": ("-0.5 * g * out ** 3",),
    # -- trigonometry
    "sin": ("g * cos({0})",),
    "cos": ("g * -sin({0})",),
    "tanh": ("g * (1 - out * out)",),
    "erf": ("2 / 3.141592653589793 ** 0.5 * exp(-({0} * {0})) * g",),
    # -- activations
    "sigmoid": ("g * (1 - out) * out",),
    "relu": ("where(out <= 0, 0.0, g)",),  # 0 at 0
    # x Phi(x): Phi(x) + x phi(x), Phi the normal distribution's cdf and phi its density.
    "gelu": (
        "cdf = 0.5 * (1 + erf({0} * 2 ** -0.5)); pdf = (2 * 3.141592653589793) ** -0.5 * exp({0} * {0} * -0.5);"
        " g * (cdf + {0} * pdf)",
    ),
    # 0.5 x (1 + tanh(u)), u = k (x + c x^3): 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) k (1 + 3 c x^2).
    "gelu_tanh": (
        "k = (2 / 3.141592653589793) ** 0.5; t = tanh(k * ({0} + 0.044715 * ({0} * {0} * {0})));"
        " g * (0.5 * (1 + t) + 0.5 * {0} * (1 - t * t) * (k * (1 + 3 * 0.044715 * ({0} * {0}))))",
    ),
    "silu": ("s = sigmoid({0}); g * s * (1 + {0} * (1 - s))",),
    "mish": ("t = tanh(softplus({0})); g * (t + {0} * sigmoid({0}) * (1 - t * t))",),
    # beta 1, threshold 20 (the spellings pin them): the identity above the threshold, where exp overflows.
    "softplus": ("z = exp({0}); where({0} > 20, g, g * z / (z + 1))",),
    "identity": ("g",),
    "quick_gelu": ("s = sigmoid(1.702 * {0}); g * s + g * {0} * (s * (1 - s)) * 1.702",),
    "relu_squared": ("r = relu({0}); where(r <= 0, 0.0, g * (2 * r))",),
    # -- clamping: the gradient passes where min <= x <= max, bounds included; a bound gets it where it is the
    # result (min > max makes every result max).
    "clamp": (
        "where(({0} >= {1}) & ({0} <= {2}), g, 0.0)",
        "where(({0} < {1}) & ({1} < {2}), g, 0.0)",
        "where(({0} > {2}) | ({2} < {1}), g, 0.0)",
    ),
    "clamp_min": ("where({0} >= {1}, g, 0.0)", "where({0} < {1}, g, 0.0)"),
    "clamp_max": ("where({0} <= {1}, g, 0.0)", "where({0} > {1}, g, 0.0)"),
    "nan_to_num": ("g * ~(isnan({0}) | isinf({0}))", None, None, None),  # replaced values are constants
    # -- rounding: piecewise constant, zero gradient where defined
    "floor": (None,),
    "ceil": (None,),
    "round": (None,),
    "trunc": (None,),
    # -- casts
    "to": ("to_like(g, {0})", None),
    "to_like": ("to_like(g, {0})", None),
    # -- reductions (keepdim: `g` is one per row)
    "sum": ("g", None, None),
    "mean": ("g / rowsize()", None, None),
    # The gradient shared evenly among the row's elements equal to its maximum.
    "amax": ("m = out == {0}; g / rowsum(m) * m", None, None),
    "amin": ("m = out == {0}; g / rowsum(m) * m", None, None),
    # 2 (x - mean) / (n - correction); std's chain rule halves it by std, taken as 0 where std is 0.
    "var": ("g * ({0} - rowmean({0})) * 2 / (rowsize() - {2})", None, None, None),
    "std": (
        "gv = where(out == 0, 0.0, g / (2 * out)); gv * ({0} - rowmean({0})) * 2 / (rowsize() - {2})",
        None,
        None,
        None,
    ),
    "logsumexp": ("g * exp({0} - out)", None, None),
    "softmax": ("out * (g - rowsum(g * out))", None),
    "log_softmax": ("g - exp(out) * rowsum(g)", None),
    "layer_norm": (
        "rstd = rsqrt(rowvar({0}) + {3}); xhat = ({0} - rowmean({0})) * rstd; gw = g * {1};"
        " rstd * (gw - rowmean(gw) - xhat * rowmean(gw * xhat))",
        "g * (({0} - rowmean({0})) * rsqrt(rowvar({0}) + {3}))",
        "g",
        None,
    ),
}

# The ops with no derivative, and why: a region with one runs its original code under autograd.
NO_DERIVATIVE: dict[str, str] = {
    "floordiv": "torch has none (`x // y` of a tensor that requires grad raises in backward); eager raises the same",
    "activation": "the module is chosen at run time, and the backward kernel would have to switch on it too",
    "batch_norm": "fused only in eval mode with the running statistics; training normalises with the batch's",
    "round_like": "the lowering's mark, made after the backward is derived (autodiff reads regions before lowering)",
    "row_sum": "the lowering's primitive (autodiff reads regions before lowering: `rowsum` writes a sum)",
    "row_max": "the lowering's primitive (autodiff reads regions before lowering: `rowmax` writes an amax)",
    "row_min": "the lowering's primitive (autodiff reads regions before lowering)",
    "row_size": "the lowering's primitive (autodiff reads regions before lowering: `rowsize()` is a scalar input)",
}
