"""Triton helpers for generated kernels (pointwise and row reductions), and their launchers.

The Triton templates of the ops (emit/triton/ops.py) name these functions; generated kernel files import
them. Every helper works on the GPU and under `TRITON_INTERPRET=1`, which has no
libdevice: there the helpers use formulas in `tl.*` builtins, which the interpreter
evaluates with numpy at full precision. On the GPU they use libdevice where Triton's
own builtins are approximate (tanh, expm1, log1p, pow). Semantics follow torch's CPU
kernels, NaN propagation and Python's floor division and modulo included.

This module is copied into every output tree: it imports only torch and triton.
"""

from __future__ import annotations

import functools

import triton
import triton.language as tl
from triton.language.extra import libdevice

import torch

from . import abi, triton_artifacts

# Read once at import: the interpreter decides at `@triton.jit` time too.
INTERPRETED: tl.constexpr = tl.constexpr(triton.knobs.runtime.interpret)
_FLOAT32_MAX: tl.constexpr = tl.constexpr(torch.finfo(torch.float32).max)
_FLOAT64_MAX: tl.constexpr = tl.constexpr(torch.finfo(torch.float64).max)

# Dtypes a kernel loads and stores. float64 values are computed in float64: Triton makes a
# Python constant of a binary op in the op's dtype, as torch does; a scalar argument, though,
# it passes as a float32, so the runtime refuses float64 calls of kernels that take scalars.
SUPPORTED_DTYPES = frozenset(
    (
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
    )
)
MAX_BLOCK_SIZE = 1024
# Compiles can run in the background (see `Launcher.compile`) with Triton's AsyncCompileMode;
# under the interpreter there is nothing to compile.
_ASYNC = hasattr(triton, "AsyncCompileMode")  # not in older Tritons: compiles stay synchronous
BACKGROUND = _ASYNC and not triton.knobs.runtime.interpret


# -- loads and casts ------------------------------------------------------------------------------
# Triton visits every statement after an `if` on a compile-time condition (an early
# return does not end the function), so such an `if` that returns has an `else`.
@triton.jit
def widen(x):
    """Half and bfloat16 values are computed in float32 (torch's opmath type)."""
    if x.dtype.is_bf16():
        if INTERPRETED:
            # Exactly, as compiled kernels convert: the interpreter flushes subnormal bfloat16 values to zero.
            return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        else:
            return x.to(tl.float32)
    elif x.dtype.is_fp16():
        return x.to(tl.float32)
    else:
        return x


@triton.jit
def floating(x):
    """x as a floating value: integers and bools become float32, as torch's float functions take them."""
    if x.dtype.is_floating():
        return x
    else:
        return x.to(tl.float32)


@triton.jit
def cast(x, dtype: tl.constexpr):
    """x.to(dtype); a half or bfloat16 result is rounded to that dtype, then computed on in float32. A float64
    is rounded to float32 first, as torch converts it (c10::Half and BFloat16 are made from floats)."""
    if dtype.is_fp16() or dtype.is_bf16():
        # Through float32: the interpreter turns ints into bfloat16 NaNs.
        return _narrowed(x.to(tl.float32), dtype)
    else:
        return x.to(dtype)


@triton.jit
def rounded(x, dtype: tl.constexpr):
    """x as eager holds it, in dtype: a half or bfloat16 value is rounded to that dtype, then computed on
    in float32 (eager rounds every op's result; overflow to inf and narrowing before a cast show); an
    integer or bool computed in a wider integer (a row maximum, in int64) is converted to its dtype."""
    if (dtype.is_fp16() or dtype.is_bf16()) and x.dtype.is_floating():
        return _narrowed(x, dtype)
    elif dtype.is_int() and x.dtype.is_int():
        return x.to(dtype)
    else:
        return x


@triton.jit
def _narrowed(x, dtype: tl.constexpr):
    """The float32 x rounded to nearest even in the half or bfloat16 `dtype`, held as a float32 value."""
    if INTERPRETED:
        if dtype.is_bf16():
            # By the bits: the interpreter's float32 -> bfloat16 conversion truncates, and its
            # round-to-nearest mode does not carry into the exponent (0.9999 gave 0.996).
            bits = x.to(tl.uint32, bitcast=True)
            bits = bits + 0x7FFF + ((bits >> 16) & 1)
            return tl.where(x != x, x, ((bits >> 16) << 16).to(tl.float32, bitcast=True))
        else:
            return x.to(dtype).to(tl.float32)  # numpy's conversion, to nearest even
    else:
        return x.to(dtype).to(tl.float32)


@triton.jit
def _common(a, b):
    """a and b as tensors of their promoted dtype and broadcast shape: either may be a Python constant."""
    return tl.where(True, a, b), tl.where(False, a, b)


@triton.jit
def stored(value, like):
    """The Python number `value` as torch uses it in an op of like's dtype (masked_fill's fill, addcmul's
    value): converted to that dtype first, which truncates toward zero for integers (through float64, exact
    where a float32 constant would round 123456789.0) and is `value != 0` for bools; floats take it as it is."""
    if like.dtype.is_floating():
        return value
    else:
        return tl.full([], value, tl.float64).to(like.dtype)


@triton.jit
def scalar_in(value, dtype: tl.constexpr):
    """A Python number as torch converts it for an op of `dtype` that does not keep it in the compute type
    (remainder's divisor): rounded to a half or bfloat16; wider dtypes take it as it is."""
    if dtype.is_fp16() or dtype.is_bf16():
        return rounded(tl.zeros([], tl.float32) + value, dtype)
    else:
        return value


# -- arithmetic ------------------------------------------------------------------------
@triton.jit
def add(a, b):
    """a + b, where eager may add two bools: their `or` then, as torch adds bools (Triton's int1 add wraps:
    True + True would be False)."""
    a, b = _common(a, b)
    if a.dtype.is_int1():
        return a | b
    else:
        return a + b


@triton.jit
def addcmul(t, t1, t2, value):
    """torch.addcmul: t + value * t1 * t2, the tensors converted to their promoted dtype first (an int32 product
    beside a float must not wrap) and value to it too (`stored`: an integer op truncates 0.5 to 0)."""
    t, t1 = _common(t, t1)
    t, t2 = _common(t, t2)
    t1, t = _common(t1, t)
    return t + stored(value, t) * t1 * t2


@triton.jit
def _fmod(a, b):
    """C's fmod (the dividend's sign), or the integer remainder. Compiled for a GPU, Triton's float `%` is
    a - b * trunc(a / b), wrong once the quotient is large (1e30 % 0.3) and inf % y = inf: libdevice's
    fmod is exact, as eager's is."""
    if INTERPRETED:
        return a % b  # numpy's fmod
    elif a.dtype.is_floating():
        return libdevice.fmod(a, b)
    else:
        return a % b


@triton.jit
def remainder(a, b):
    """Python's `%`: the result takes the divisor's sign (torch.remainder)."""
    a, b = _common(a, b)
    truncated = _fmod(a, b)
    return tl.where((truncated != 0) & ((truncated < 0) != (b < 0)), truncated + b, truncated)


@triton.jit
def _div_rn(a, b):
    """a / b of floats rounded to nearest: tl.div_rn takes float32 only; float64's `/` is IEEE."""
    if a.dtype.is_fp32():
        return tl.div_rn(a, b)
    else:
        return a / b


@triton.jit
def sqrt_rn(x):
    """The square root rounded to nearest: tl.sqrt_rn takes float32 only; float64's tl.sqrt is IEEE."""
    if x.dtype.is_fp32():
        return tl.sqrt_rn(x)
    else:
        return tl.sqrt(x)


@triton.jit
def divide(a, b):
    """a / b as torch computes it: IEEE division, rounded to nearest (Triton's `/` on float32 is an
    approximation that flushes subnormals: 1e-40 / 1e-40 gave NaN); integers become float32 first."""
    a, b = _common(a, b)
    if not a.dtype.is_floating():
        a, b = a.to(tl.float32), b.to(tl.float32)
    if a.dtype.is_fp32():
        return tl.div_rn(a, b)
    else:
        return a / b


@triton.jit
def floor_divide(a, b):
    """Python's `//`, computed as torch does so that float results match bit for bit."""
    a, b = _common(a, b)
    truncated = _fmod(a, b)
    if truncated.dtype.is_floating():
        quotient = _div_rn(a - truncated, b)
        quotient = tl.where((truncated != 0) & ((b < 0) != (truncated < 0)), quotient - 1.0, quotient)
        floored = tl.floor(quotient)
        floored = tl.where(quotient - floored > 0.5, floored + 1.0, floored)
        # b == 0 gives inf or nan, as a / b does.
        return tl.where(b == 0, _div_rn(a, b), floored)
    else:
        quotient = (a - truncated) // b  # exact: a - truncated is a multiple of b
        return tl.where((truncated != 0) & ((truncated < 0) != (b < 0)), quotient - 1, quotient)


@triton.jit
def power(base, exponent):
    """torch.pow on floats: pow(x, 0) == 1 and pow(1, y) == 1 even for NaN."""
    base, exponent = _common(base, exponent)
    if INTERPRETED:
        # In float64, so that rounding in log2 is not magnified by the exponent.
        wide = tl.exp2(exponent.to(tl.float64) * tl.log2(tl.abs(base).to(tl.float64)))
        magnitude = wide.to(base.dtype)
        odd_integer = (tl.floor(exponent) == exponent) & (remainder(exponent, 2.0) == 1.0)
        result = tl.where((base < 0) & odd_integer, -magnitude, magnitude)
        # A finite negative base with a non-integer exponent has no real power.
        result = tl.where((base < 0) & (base != float("-inf")) & (tl.floor(exponent) != exponent), float("nan"), result)
        one = (exponent == 0) | (base == 1.0) | ((base == -1.0) & (tl.abs(exponent) == float("inf")))
        return tl.where(one, 1.0, result)
    else:
        return libdevice.pow(base, exponent)


@triton.jit
def sign(x):
    """-1, 0 or 1 in x's dtype; 0 for NaN, as torch gives; a bool's sign is itself (the interpreter's numpy has
    no bool subtract)."""
    if x.dtype.is_int1():
        return x
    else:
        return (x > 0).to(x.dtype) - (x < 0).to(x.dtype)


@triton.jit
def minimum(a, b):
    """Elementwise minimum; NaN if either is NaN (torch.minimum)."""
    a, b = _common(a, b)
    return tl.where(a != a, a, tl.where(b != b, b, tl.minimum(a, b)))


@triton.jit
def maximum(a, b):
    """Elementwise maximum; NaN if either is NaN (torch.maximum)."""
    a, b = _common(a, b)
    return tl.where(a != a, a, tl.where(b != b, b, tl.maximum(a, b)))


@triton.jit
def lerp(start, end, weight):
    """torch.lerp: exact at both ends, from whichever end `weight` is closer to."""
    start, end = _common(start, end)
    weight, start = _common(weight, start)
    difference = end - start
    return tl.where(tl.abs(weight) < 0.5, start + weight * difference, end - difference * (1.0 - weight))


# -- exponentials and logarithms -----------------------------------------------------------
@triton.jit
def expm1(x):
    """exp(x) - 1, accurate near 0."""
    if INTERPRETED:
        # Kahan: (u - 1) * x / log(u) cancels the rounding error of u = exp(x).
        u = tl.exp(x)
        kahan = _div_rn((u - 1.0) * x, tl.log(u))
        result = tl.where((u == 1.0) | (x != x), x, tl.where(u - 1.0 == -1.0, -1.0, kahan))
        return tl.where(u == float("inf"), float("inf"), result)  # exp overflowed: inf * x / inf is no answer
    else:
        return libdevice.expm1(x)


@triton.jit
def log1p(x):
    """log(1 + x), accurate near 0."""
    if INTERPRETED:
        # Kahan: log(u) * x / (u - 1) cancels the rounding error of u = 1 + x.
        u = 1.0 + x
        kahan = _div_rn(tl.log(u) * x, u - 1.0)
        result = tl.where((u == 1.0) | (x != x), x, tl.where(u <= 0.0, tl.log(u), kahan))
        return tl.where(x == float("inf"), float("inf"), result)
    else:
        return libdevice.log1p(x)


@triton.jit
def tanh(x):
    if INTERPRETED:
        # expm1(2|x|) / (expm1(2|x|) + 2) keeps the relative precision near 0;
        # beyond 20 the fraction rounds to 1 in float32 and float64 alike.
        magnitude = tl.abs(x)
        t = expm1(2.0 * magnitude)
        result = tl.where(magnitude > 20.0, 1.0, t / (t + 2.0))
        return tl.where(x < 0, -result, result)
    else:
        return libdevice.tanh(x)


@triton.jit
def softplus(x):
    """torch's softplus with beta=1, threshold=20: linear above the threshold."""
    return tl.where(x > 20.0, x, log1p(tl.exp(x)))


# -- activations -----------------------------------------------------------------------------
@triton.jit
def relu(x):
    # `x < 0` rather than `x > 0` so that NaN passes through, as in torch.
    return tl.where(x < 0, 0, x)


@triton.jit
def gelu(x):
    """Exact GELU: x * Phi(x)."""
    return 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))


@triton.jit
def gelu_tanh(x):
    """GELU's tanh approximation, with torch's constants: sqrt(2 / pi) and 0.044715."""
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + tanh(inner))


# -- logical functions: operands of any dtype, nonzero is true -----------------------------------
@triton.jit
def _truth(x):
    if x.dtype.is_int1():
        return x
    else:
        return x != 0  # NaN is true, -0.0 false, as in torch


@triton.jit
def logical_and(a, b):
    return _truth(a) & _truth(b)


@triton.jit
def logical_or(a, b):
    return _truth(a) | _truth(b)


@triton.jit
def logical_xor(a, b):
    return _truth(a) ^ _truth(b)


@triton.jit
def logical_not(x):
    return _truth(x) == 0


# -- classification and clamping ------------------------------------------------------------
@triton.jit
def is_inf(x):
    return tl.abs(x) == float("inf")


@triton.jit
def clamp(x, low, high):
    """torch.clamp: NaN in x or in a bound gives NaN; low > high gives high."""
    return minimum(maximum(x, low), high)


@triton.jit
def clamp_min(x, low):
    return maximum(x, low)


@triton.jit
def clamp_max(x, high):
    return minimum(x, high)


@triton.jit
def nan_to_num(x, nan, posinf, neginf):
    """torch.nan_to_num; a None bound is the largest finite value of x's dtype (float32's for half and bfloat16:
    torch uses theirs, which the store then reaches). Integers and bools are returned as they are (the bounds,
    floats, would make them float32)."""
    if x.dtype.is_floating():
        largest = _FLOAT64_MAX if x.dtype.is_fp64() else _FLOAT32_MAX
        if posinf is None:
            posinf = largest
        if neginf is None:
            neginf = -largest
        x = tl.where(x != x, nan, x)
        return tl.where(x == float("inf"), posinf, tl.where(x == float("-inf"), neginf, x))
    else:
        return x


# -- rounding: integers are already integral and keep their dtype -----------------------------
@triton.jit
def floor(x):
    if x.dtype.is_floating():
        return tl.floor(x)
    else:
        return x


@triton.jit
def ceil(x):
    if x.dtype.is_floating():
        return tl.ceil(x)
    else:
        return x


@triton.jit
def trunc(x):
    if x.dtype.is_floating():
        return tl.where(x < 0, tl.ceil(x), tl.floor(x))
    else:
        return x


@triton.jit
def round_half_even(x):
    """torch.round: halves go to the even neighbour (2.5 -> 2, 3.5 -> 4)."""
    if x.dtype.is_floating():
        below = tl.floor(x)
        fraction = x - below  # exact for every float
        below_is_odd = below - 2.0 * tl.floor(below * 0.5) == 1.0
        return tl.where((fraction > 0.5) | ((fraction == 0.5) & below_is_odd), below + 1.0, below)
    else:
        return x


# -- inputs read at other elements (ops.SHIFTED_OPS) -------------------------------------------
@triton.jit
def rotate_half(x_ptr, x_offsets, offsets, half, mask):
    """torch.cat((-x[..., half:], x[..., :half]), dim=-1) at the output's elements `offsets`.

    `x_offsets` locate x's elements at the same coordinates; x's last dim has size 2 * half and
    stride 1 (the caller checks), so coordinate j of that dim is `offsets % (2 * half)` (the output is
    contiguous, or shares x's dense layout) and x[..., j +- half] is `half` elements away.
    """
    first = offsets % (2 * half) < half
    x = widen(tl.load(x_ptr + x_offsets + tl.where(first, half, -half), mask=mask))
    return tl.where(first, -x, x)


@triton.jit
def swap_halves(x_ptr, x_offsets, offsets, half, mask):
    """torch.cat((x[..., half:], x[..., :half]), dim=-1): rotate_half without its sign (see there)."""
    first = offsets % (2 * half) < half
    return widen(tl.load(x_ptr + x_offsets + tl.where(first, half, -half), mask=mask))


# -- row reductions: a [ROWS, RBLOCK] tile reduced along its columns to [ROWS, 1] ----------
# Lanes outside `mask` hold garbage (masked loads, and values computed from them):
# they contribute the reduction's identity. Floats are summed in float32 (loads are
# already widened); integers and bools in int64, as torch sums them.
@triton.jit
def _accumulated(x):
    if x.dtype.is_floating():
        return x
    else:
        return x.to(tl.int64)


@triton.jit
def _max_nan(a, b):
    """max(a, b), NaN if either is NaN (torch.amax propagates NaN; tl.max does not)."""
    if a.dtype.is_floating():
        return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    else:
        return tl.maximum(a, b)


@triton.jit
def _min_nan(a, b):
    """min(a, b), NaN if either is NaN."""
    if a.dtype.is_floating():
        return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
    else:
        return tl.minimum(a, b)


@triton.jit
def _lowest(x):
    """The identity of a maximum over x's dtype."""
    if x.dtype.is_floating():
        return float("-inf")
    else:
        return -9223372036854775807 - 1  # int64's lowest: integers are compared in int64


@triton.jit
def _highest(x):
    """The identity of a minimum over x's dtype."""
    if x.dtype.is_floating():
        return float("inf")
    else:
        return 9223372036854775807


@triton.jit
def row_sum(x, mask):
    """Each row's sum over the lanes in `mask`, as a [ROWS, 1] column."""
    x = _accumulated(x)
    return tl.sum(tl.where(mask, x, 0), axis=1, keep_dims=True)


@triton.jit
def _with_nan(x, result):
    """`result` (a reduction of x along its rows), NaN where x's row holds a NaN."""
    if x.dtype.is_floating():
        return tl.where(tl.sum((x != x).to(tl.int32), axis=1, keep_dims=True) > 0, float("nan"), result)
    else:
        return result


@triton.jit
def row_max(x, mask):
    """Each row's maximum over the lanes in `mask` (NaN if any is NaN), as a [ROWS, 1] column."""
    x = _accumulated(x)
    x = tl.where(mask, x, _lowest(x))
    if INTERPRETED:
        # The interpreter calls a tl.reduce combine function once per element: far too slow.
        return _with_nan(x, tl.max(x, axis=1, keep_dims=True))
    else:
        return tl.reduce(x, 1, _max_nan, keep_dims=True)


@triton.jit
def row_min(x, mask):
    """Each row's minimum over the lanes in `mask` (NaN if any is NaN), as a [ROWS, 1] column."""
    x = _accumulated(x)
    x = tl.where(mask, x, _highest(x))
    if INTERPRETED:
        return _with_nan(x, tl.min(x, axis=1, keep_dims=True))
    else:
        return tl.reduce(x, 1, _min_nan, keep_dims=True)


# Rows longer than one block: an accumulator per lane ([ROWS, RBLOCK]) takes one block after
# another; `row_sum` & co. reduce it once after the loop. Its dtype follows the reduction's
# (`dtype`, a constexpr of the kernel): float64 for float64, float32 for the other floats,
# int64 for integers and bools (exact).
@triton.jit
def sum_partial(ROWS: tl.constexpr, RBLOCK: tl.constexpr, dtype: tl.constexpr):
    if dtype.is_fp64():
        return tl.zeros([ROWS, RBLOCK], tl.float64)
    elif dtype.is_floating():
        return tl.zeros([ROWS, RBLOCK], tl.float32)
    else:
        return tl.zeros([ROWS, RBLOCK], tl.int64)


@triton.jit
def max_partial(ROWS: tl.constexpr, RBLOCK: tl.constexpr, dtype: tl.constexpr):
    if dtype.is_fp64():
        return tl.full([ROWS, RBLOCK], float("-inf"), tl.float64)
    elif dtype.is_floating():
        return tl.full([ROWS, RBLOCK], float("-inf"), tl.float32)
    else:
        return tl.full([ROWS, RBLOCK], -9223372036854775807 - 1, tl.int64)


@triton.jit
def min_partial(ROWS: tl.constexpr, RBLOCK: tl.constexpr, dtype: tl.constexpr):
    if dtype.is_fp64():
        return tl.full([ROWS, RBLOCK], float("inf"), tl.float64)
    elif dtype.is_floating():
        return tl.full([ROWS, RBLOCK], float("inf"), tl.float32)
    else:
        return tl.full([ROWS, RBLOCK], 9223372036854775807, tl.int64)


@triton.jit
def accumulate_sum(partial, x, mask):
    return partial + tl.where(mask, x, 0).to(partial.dtype)


@triton.jit
def accumulate_max(partial, x, mask):
    return _max_nan(partial, tl.where(mask, x.to(partial.dtype), _lowest(partial)))


@triton.jit
def accumulate_min(partial, x, mask):
    return _min_nan(partial, tl.where(mask, x.to(partial.dtype), _highest(partial)))


# -- launching -------------------------------------------------------------------------------
_UNSET = object()


def unsupported(tensor_dtypes, output_dtypes) -> str | None:
    """Why Triton kernels cannot run with these dtypes, or None when they can."""
    for dtype in (*tensor_dtypes, *output_dtypes):
        if dtype not in SUPPORTED_DTYPES:
            return f"Triton kernels do not handle {dtype}"
    return None


class Launcher:
    """One generated kernel at one geometry, launched on fresh data pointers.

    The grid and every argument after the data (sizes, strides, compile-time flags) are
    fixed when the runtime plans an input signature. The first call goes through
    Triton's JIT, which compiles or finds the kernel specialised for these arguments;
    later calls hand the same arguments to that compiled kernel's launcher directly.
    This skips the JIT's per-call binding and cache lookup (about 40 us a launch on an
    H100 host), which is safe because the runtime makes a new Launcher whenever
    anything the JIT specialises on could change: shapes, strides, dtypes, 16-byte
    alignment of the data and integer scalar values. With launch hooks installed (a
    profiler), or under the interpreter, every call goes through the JIT. Where the tree
    has a binary built ahead of time for the launch (triton_artifacts.py), it is launched
    through the CUDA driver instead, and nothing is compiled.
    """

    def __init__(self, kernel, grid: tuple[int, ...], tail: tuple, constexprs: dict, num_warps: int) -> None:
        self.kernel = kernel
        self.grid = grid
        self.tail = tail  # the arguments after the tensors, scalars and outputs
        self.constexprs = constexprs
        self.num_warps = num_warps
        self.compiled = None
        # The direct launcher takes every parameter in order, the compile-time ones included.
        names = getattr(kernel, "arg_names", [])
        self._direct = names[len(names) - len(constexprs) :] == list(constexprs)
        self._constexpr_values = tuple(constexprs.values())
        self._grid3 = (*grid, 1, 1)[:3]
        self._compiling = None  # Triton's FutureKernel while `compile` runs in the background
        self._binary = _UNSET  # (cuda_driver.Function, the positions of its arguments), once looked up

    def _precompiled(self, tensors, scalars, outputs) -> bool:
        """Whether a binary built ahead of time serves this launcher (triton_artifacts.py), looked up once."""
        if self._binary is _UNSET:
            arguments = (*tensors, *scalars, *outputs, *self.tail)
            self._binary = triton_artifacts.binary(
                self.kernel, arguments, self.constexprs, self.num_warps, tensors[0].device
            )
        return self._binary is not None

    def compile(self, tensors, scalars, output_dtypes, executor) -> bool:
        """Start compiling the kernel this launcher launches, in `executor`; False if there is nothing to wait for.

        `JITFunction.warmup` with the launch's own arguments (the outputs as their dtypes:
        Triton's stand-ins are 16-byte aligned, as fresh allocations are) binds and
        specialises them on this thread exactly as a launch would, so the launch later finds
        the compiled kernel in the JIT's in-memory cache under the same key. Under an
        AsyncCompileMode the JIT hands `triton.compile` (front end, LLVM, ptxas) to the
        executor instead of running it. False: a kernel already in memory, or no
        background compiles (interpreter, an older Triton, another AsyncCompileMode active).
        """
        if self._precompiled(tensors, scalars, output_dtypes) or not BACKGROUND:
            return False
        try:
            with _background_mode(tensors[0].device, executor):
                compiled = self.kernel.warmup(
                    *tensors,
                    *scalars,
                    *output_dtypes,
                    *self.tail,
                    grid=self.grid,
                    num_warps=self.num_warps,
                    **self.constexprs,
                    **_options(),
                )
        except Exception:  # the caller's own AsyncCompileMode, say: the first launch compiles, as in sync mode
            return False
        if not hasattr(compiled, "future"):  # compiled before (another plan with the same specialisation)
            return False
        self._compiling = compiled
        return True

    def ready(self) -> bool:
        """Whether a launch runs without compiling; raises the error of a failed background compile.

        Finishing the compile (`FutureKernel.result`) stores the kernel in the JIT's cache: on
        the thread that launches, so Triton's cache dict is only written from there.
        """
        compiling = self._compiling
        if compiling is None:
            return True
        if not compiling.future.done():
            return False
        compiling.result()
        self._compiling = None
        return True

    def __call__(self, tensors, scalars, outputs) -> None:
        if self._binary is not None and self._precompiled(tensors, scalars, outputs):
            function, positions = self._binary
            arguments = (*tensors, *scalars, *outputs, *self.tail)
            stream = torch.cuda.current_stream(tensors[0].device).cuda_stream
            function(self._grid3, [arguments[i] for i in positions], stream)
            return
        compiled = self.compiled
        if compiled is None or _hooks_installed():
            compiled = self.kernel[self.grid](
                *tensors, *scalars, *outputs, *self.tail, **self.constexprs, num_warps=self.num_warps, **_options()
            )
            if self._direct and hasattr(compiled, "packed_metadata"):  # the interpreter returns no compiled kernel
                self.compiled = compiled
            return
        driver = triton.runtime.driver.active
        stream = driver.get_current_stream(driver.get_current_device())
        compiled.run(
            *self._grid3,
            stream,
            compiled.function,
            compiled.packed_metadata,
            None,  # launch metadata: only launch hooks read it
            None,
            None,
            *tensors,
            *scalars,
            *outputs,
            *self.tail,
            *self._constexpr_values,
        )


if _ASYNC:

    class _BackgroundMode(triton.AsyncCompileMode):
        """Triton's AsyncCompileMode, left without waiting: the runtime polls each compile instead.

        One per device for the whole process, so that plans sharing a specialisation share
        one compile (the mode keeps a FutureKernel per Triton cache key).
        """

        def __exit__(self, *exc_info):
            self.raw_futures.clear()  # what the base class would wait for
            return super().__exit__(*exc_info)


@functools.lru_cache(maxsize=None)
def _background_mode(device, executor) -> "_BackgroundMode":
    return _BackgroundMode(_LoadingExecutor(executor, device))


class _LoadingExecutor:
    """Submits a compile to `executor`, followed in the same worker by loading it onto `device`.

    Loading builds the kernel's C launcher (a gcc run where Triton's disk cache has none)
    and loads the binary into the CUDA context: left to the first launch, both would run on
    the calling thread. A failure to load (too much shared memory) fails the compile.
    """

    def __init__(self, executor, device) -> None:
        self.executor = executor
        self.device = device

    def submit(self, compile_kernel):
        return self.executor.submit(functools.partial(_compile_and_load, compile_kernel, self.device))


def _compile_and_load(compile_kernel, device):
    compiled = compile_kernel()
    if device.type == "cuda":
        # A new thread's current device is 0: Triton loads onto the current one.
        with torch.cuda.device(device):
            compiled._init_handles()
    return compiled


@functools.lru_cache(maxsize=None)
def _options() -> dict:
    """Compile options for eager's float semantics: Triton's NVIDIA backend flushes subnormals to zero in
    libdevice's functions by default (`tanh` of 1e-40 gave 0), eager's CUDA kernels do not; and it fuses a
    multiply and an add into one FMA, rounding once where eager, an op a kernel, rounds twice (`t * t - t * t`
    gave the product's rounding error, not 0)."""
    if triton.knobs.runtime.interpret:
        return {}
    try:
        backend = triton.runtime.driver.active.get_current_target().backend
    except Exception:  # no GPU driver: nothing is launched either
        return {}
    return triton_artifacts.CUDA_OPTIONS if backend == "cuda" else {"enable_fp_fusion": False}


def _hooks_installed() -> bool:
    hook = triton.knobs.runtime.launch_enter_hook
    return bool(getattr(hook, "calls", hook))  # a HookChain in Triton 3.6, a callable or None before


def _refuse_integers(kernel, value_dtypes) -> None:
    """ValueError (the fallback's reason) where a value of the kernel's `integer_refusals` is an integer or bool on
    this call (`value_dtypes`: torch dtypes by value name)."""
    for value, reason in getattr(kernel, abi.INTEGER_REFUSALS, {}).items():
        dtype = value_dtypes.get(value)
        if dtype is None or not dtype.is_floating_point:
            raise ValueError(reason)


def _constants(kernel, layout: abi.Layout, values: tuple, value_dtypes) -> dict:
    """The kernel's constexprs: the `layout`'s launch constants (`values`, in its order), then the dtype of each
    value the kernel rounds to a dtype of the call (the parameters after the constants, abi.DTYPE_SUFFIX), from
    `value_dtypes` (torch dtypes by value name) as Triton's. ValueError when a value has none."""
    constexprs = dict(zip(layout.constants, values, strict=True))
    names = list(getattr(kernel, "arg_names", ()))
    if layout.constants[-1] not in names:
        return constexprs
    for name in names[names.index(layout.constants[-1]) + 1 :]:
        value = name.removesuffix(abi.DTYPE_SUFFIX)
        dtype = value_dtypes.get(value)
        if dtype is None:
            raise ValueError(f"no dtype for the kernel's value {value}")
        constexprs[name] = tl.int1 if dtype == torch.bool else getattr(tl, str(dtype).removeprefix("torch."))
    return constexprs


def pointwise_launcher(kernel, n_elements, sizes, strides, contiguous, n_tensors: int, value_dtypes) -> Launcher:
    """The launcher of a generated pointwise kernel over `n_elements` output elements.

    `sizes` and `strides` (one RANK-tuple per tensor input) describe the strided layout;
    on the contiguous path they may be empty and the kernel ignores them. `value_dtypes`:
    the dtype of every value of the region as eager computes it on this call, by name.
    """
    if n_elements >= 2**31 or _largest_offset(sizes, strides) >= 2**31:
        raise ValueError("Triton kernels index with int32: 2**31 elements or more are not supported")
    _refuse_integers(kernel, value_dtypes)
    if contiguous:
        sizes, strides = (1,) * abi.RANK, [(0,) * abi.RANK] * n_tensors
    # Dims in use: the runtime pads sizes with leading 1s; the kernel skips those dims.
    ndim = len(sizes) - next((d for d, size in enumerate(sizes) if size != 1), len(sizes) - 1)
    # One block of 1024 elements per program keeps an H100's memory system busy with
    # 4 warps (8 elements a thread); smaller tensors get one block rounded up to a
    # power of two (at least 128), so few block sizes are ever compiled.
    block_size = min(MAX_BLOCK_SIZE, max(128, triton.next_power_of_2(n_elements)))
    flat_strides = tuple(stride for per_input in strides for stride in per_input)
    # In the order of abi.POINTWISE: n_elements, the sizes, each input's strides; then the launch constants.
    return Launcher(
        kernel,
        (triton.cdiv(n_elements, block_size),),
        (n_elements, *sizes, *flat_strides),
        _constants(kernel, abi.POINTWISE, (contiguous, ndim, block_size), value_dtypes),
        num_warps=max(1, block_size // 256),
    )


def launch(kernel, tensors, scalars, outputs, n_elements, sizes, strides, contiguous, value_dtypes) -> None:
    """Run a generated pointwise kernel once (see `pointwise_launcher`)."""
    if n_elements:
        launcher = pointwise_launcher(kernel, n_elements, sizes, strides, contiguous, len(tensors), value_dtypes)
        launcher(tensors, scalars, outputs)


def _largest_offset(sizes, strides) -> int:
    """The largest element offset a strided kernel computes, to rule out int32 overflow."""
    if not sizes:
        return 0
    return max(
        (sum((size - 1) * abs(stride) for size, stride in zip(sizes, per_input)) for per_input in strides), default=0
    )


# Rows up to this long are reduced in one pass, held in registers: each input is read
# once. Longer rows loop over blocks of LOOP_BLOCK columns, one loop per pass.
# Short rows are packed ROWS to a program so that each handles about ELEMENTS_PER_PROGRAM
# elements, with a warp per ELEMENTS_PER_WARP of them (16 a thread), at most MAX_WARPS.
# Measured on an H100 (softmax, layer norm and RMSNorm, bfloat16 and float32, 2**26
# elements): 88-100% of copy bandwidth for rows of 512 to 8192, 75-99% at 16384.
MAX_ONE_PASS = 16384
LOOP_BLOCK = 2048
ELEMENTS_PER_PROGRAM = 1024
ELEMENTS_PER_WARP = 512
MAX_WARPS = 8


def rows_launcher(kernel, n_rows, row_size, outer_sizes, strides, contiguous, value_dtypes) -> Launcher:
    """The launcher of a generated row-reduction kernel over `n_rows` rows of `row_size` columns.

    `strides` holds a (outer0, outer1, outer2, reduced) tuple per element tensor: the
    tensor inputs, then the element outputs. Row outputs are contiguous, one value a row.
    `value_dtypes`: as for `pointwise_launcher`.
    """
    if n_rows * row_size >= 2**31 or _largest_offset((*outer_sizes, row_size), strides) >= 2**31:
        raise ValueError("Triton kernels index with int32: 2**31 elements or more are not supported")
    _refuse_integers(kernel, value_dtypes)
    looped = row_size > MAX_ONE_PASS
    rblock = LOOP_BLOCK if looped else triton.next_power_of_2(row_size)
    # Never more rows per program than there are rows: few tile shapes get compiled.
    rows = min(max(1, ELEMENTS_PER_PROGRAM // rblock), triton.next_power_of_2(n_rows))
    flat_strides = tuple(stride for per_tensor in strides for stride in per_tensor)
    # In the order of abi.ROWS: n_rows, the row length, the row dims that locate a row (all but the first), each
    # element tensor's strides; then the launch constants.
    return Launcher(
        kernel,
        (triton.cdiv(n_rows, rows),),
        (n_rows, row_size, *outer_sizes[1:], *flat_strides),
        _constants(kernel, abi.ROWS, (contiguous, looped, rows, rblock), value_dtypes),
        num_warps=min(MAX_WARPS, max(1, rows * rblock // ELEMENTS_PER_WARP)),
    )


def launch_rows(
    kernel, tensors, scalars, outputs, n_rows, row_size, outer_sizes, strides, contiguous, value_dtypes
) -> None:
    """Run a generated row-reduction kernel once (see `rows_launcher`)."""
    if n_rows:
        launcher = rows_launcher(kernel, n_rows, row_size, outer_sizes, strides, contiguous, value_dtypes)
        launcher(tensors, scalars, outputs)
