// transpile_runtime.h: storage types and scalar helpers for the C++ kernels transpile generates.
//
// The op table's `cpp=` templates name these helpers. Each works on one value of the compute
// type C (float, or double for double tensors) and follows torch's CPU semantics, NaN and
// infinities included. Kernels are built without -ffast-math, so std:: functions keep IEEE
// behaviour. No torch headers: a kernel file builds in seconds, not minutes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

// Vector math: glibc's libmvec has SIMD versions of these functions (within a few ulp, IEEE
// special values kept), but <math.h> only declares them under -ffast-math, which kernels must
// not use. Declaring them here lets `#pragma omp simd` loops call them; -fno-math-errno (a
// build flag) removes the errno side effect that would otherwise keep the loops scalar.
#if defined(__x86_64__) && defined(__GLIBC__) && __GLIBC_PREREQ(2, 35) && defined(_OPENMP)
#define TRANSPILE_VECTOR_MATH(name)                                                  \
  extern "C" __attribute__((__simd__("notinbranch"))) float name##f(float) noexcept; \
  extern "C" __attribute__((__simd__("notinbranch"))) double name(double) noexcept;
TRANSPILE_VECTOR_MATH(exp)
TRANSPILE_VECTOR_MATH(exp2)
TRANSPILE_VECTOR_MATH(expm1)
TRANSPILE_VECTOR_MATH(log)
TRANSPILE_VECTOR_MATH(log1p)
TRANSPILE_VECTOR_MATH(log2)
TRANSPILE_VECTOR_MATH(sin)
TRANSPILE_VECTOR_MATH(cos)
TRANSPILE_VECTOR_MATH(tanh)
TRANSPILE_VECTOR_MATH(erf)
#undef TRANSPILE_VECTOR_MATH
#endif

namespace transpile {

// ---------------------------------------------------------------------------------------------
// Storage types: half and bfloat16 hold 16 bits in memory; kernels load them into float.
// ---------------------------------------------------------------------------------------------

inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// bfloat16 is the upper half of a float32: conversion rounds to nearest even, NaN stays NaN.
struct bfloat16 {
  uint16_t bits;

  bfloat16() = default;
  explicit bfloat16(float value) : bits(round_to_bfloat16(value)) {}
  operator float() const { return bits_float(uint32_t(bits) << 16); }

  static uint16_t round_to_bfloat16(float value) {
    const uint32_t bits = float_bits(value);
    const uint32_t lower_half_bias = 0x7fff + ((bits >> 16) & 1);  // ties go to the even neighbour
    // A quiet NaN stays NaN (the rounding bias could carry it into infinity); a bit test, not
    // std::isnan, keeps the conversion a branch-free select.
    const bool is_nan = (bits & 0x7fffffffu) > 0x7f800000u;
    return is_nan ? uint16_t(0x7fc0) : uint16_t((bits + lower_half_bias) >> 16);
  }
};
static_assert(sizeof(bfloat16) == 2, "bfloat16 must match torch.bfloat16's layout");

#if defined(__AVX512FP16__) || defined(TRANSPILE_FLOAT16_HALF)
// The compiler's IEEE binary16 type, where the CPU computes with it: GCC vectorises _Float16
// loops only with AVX512-FP16, so elsewhere the bit manipulation below is faster
// (TRANSPILE_FLOAT16_HALF selects this path anyway, so that tests cover it on any CPU).
using half = _Float16;
#else
// IEEE binary16 by bit manipulation, rounding to nearest even, written as selects rather than
// branches so that loops over half tensors vectorise.
struct half {
  uint16_t bits;

  half() = default;
  explicit half(float value) : bits(from_float(value)) {}
  operator float() const { return to_float(bits); }

  static uint16_t from_float(float value) {
    const uint32_t sign = (float_bits(value) >> 16) & 0x8000u;
    const uint32_t magnitude = float_bits(value) & 0x7fffffffu;
    // Normal halves: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
    const uint32_t normal = (magnitude + (uint32_t(15 - 127) << 23) + 0xfffu + ((magnitude >> 13) & 1u)) >> 13;
    // Subnormal halves and zero: adding a magic float lets the FPU round the mantissa.
    const uint32_t subnormal_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    const uint32_t subnormal = float_bits(bits_float(magnitude) + bits_float(subnormal_magic)) - subnormal_magic;
    // Too large for half: infinity, and NaN stays a (quiet) NaN.
    const uint32_t too_large = magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u;
    const uint32_t result = magnitude >= (143u << 23) ? too_large : magnitude < (113u << 23) ? subnormal : normal;
    return uint16_t(result | sign);
  }

  static float to_float(uint16_t bits) {
    const uint32_t exponent_mask = 0x7c00u << 13;
    uint32_t result = uint32_t(bits & 0x7fff) << 13;
    const uint32_t exponent = result & exponent_mask;
    result += (127u - 15u) << 23;
    if (exponent == exponent_mask) {  // infinity or NaN: the exponent saturates
      result += (128u - 16u) << 23;
    } else if (exponent == 0) {  // subnormal: renormalise through the FPU
      result += 1u << 23;
      result = float_bits(bits_float(result) - bits_float(113u << 23));
    }
    return bits_float(result | (uint32_t(bits & 0x8000) << 16));
  }
};
#endif
static_assert(sizeof(half) == 2, "half must match torch.float16's layout");

// ---------------------------------------------------------------------------------------------
// Rounding to the dtype eager holds a value in: kernels compute in C, eager rounds each op's result.
// ---------------------------------------------------------------------------------------------

// x rounded to D (a floating type, or bool: 0 or 1) and computed on as C: a no-op where D is C, one
// conversion each way otherwise.
template <typename D, typename C>
inline C rounded(C x) {
  if constexpr (std::is_same_v<D, C>) {
    return x;
  } else {
    return static_cast<C>(static_cast<D>(x));
  }
}

// How a kernel holds a value of dtype T: an integer in its own type (exact, and wrapping as torch's
// under -fwrapv), anything else as C, rounded to T after every op (`held`).
template <typename T, typename C>
using held_t = std::conditional_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, T, C>;

template <typename T, typename C, typename X>
inline held_t<T, C> held(X x) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(x);
  } else {
    return rounded<T, C>(static_cast<C>(x));
  }
}

// ---------------------------------------------------------------------------------------------
// Arithmetic with Python's semantics.
// ---------------------------------------------------------------------------------------------

// a // b: floor of the exact quotient, as torch computes it for floating types (div_floor_floating).
template <typename C>
inline C floor_divide(C a, C b) {
  if (b == C(0)) {
    return a / b;  // torch gives inf, -inf or NaN where Python would raise
  }
  const C mod = std::fmod(a, b);
  C quotient = (a - mod) / b;
  if (mod != C(0) && (b < C(0)) != (mod < C(0))) {
    quotient -= C(1);
  }
  if (quotient == C(0)) {
    return std::copysign(C(0), a / b);
  }
  const C floored = std::floor(quotient);
  return quotient - floored > C(0.5) ? floored + C(1) : floored;
}

// a % b: the result takes the divisor's sign (torch.remainder, Python's %).
template <typename C>
inline C remainder(C a, C b) {
  const C mod = std::fmod(a, b);
  return mod != C(0) && (b < C(0)) != (mod < C(0)) ? mod + b : mod;
}

// torch.pow with a scalar exponent: the exponents torch's CPU kernel special-cases become its
// multiplications and roots (float16 storage takes std::pow's roots, which differ at -inf and -0.0).
template <typename T, typename C>
inline C power_scalar(C base, C exponent) {
  const bool roots = !std::is_same<T, half>::value;
  if (exponent == C(2)) {
    return base * base;
  }
  if (exponent == C(3)) {
    return base * base * base;
  }
  if (exponent == C(0.5) || exponent == C(-0.5)) {
    // std::pow's root, written out: GCC's vectorised pow gives NaN for pow(-inf, 0.5).
    const C infinity = std::numeric_limits<C>::infinity();
    const C root = roots ? std::sqrt(base) : base == -infinity ? infinity : std::sqrt(base) + C(0);
    return exponent == C(0.5) ? root : C(1) / root;
  }
  if (exponent == C(-1)) {
    return C(1) / base;
  }
  if (exponent == C(-2)) {
    return C(1) / (base * base);
  }
  return std::pow(base, exponent);
}

// torch.pow of two tensors: std::pow, as torch computes it. Constant exponents that torch
// special-cases (2, 3, 0.5, ...) are rendered as its multiplications and roots instead (emit/cpp.py).
template <typename C>
inline C power(C base, C exponent) {
  return std::pow(base, exponent);
}

// torch.sign: -1, 0 or 1; NaN gives 0.
template <typename C>
inline C sign(C x) {
  return C(C(0) < x) - C(x < C(0));
}

// torch.minimum / torch.maximum: a NaN on either side gives NaN (std::min would drop it).
template <typename C>
inline C minimum(C a, C b) {
  return std::isnan(a) || std::isnan(b) ? a + b : (b < a ? b : a);
}

template <typename C>
inline C maximum(C a, C b) {
  return std::isnan(a) || std::isnan(b) ? a + b : (a < b ? b : a);
}

// torch.clamp: NaN in the value or in a bound propagates; a lower bound above the upper gives upper.
template <typename C>
inline C clamp_min(C x, C low) {
  return maximum(x, low);
}

template <typename C>
inline C clamp_max(C x, C high) {
  return minimum(x, high);
}

template <typename C>
inline C clamp(C x, C low, C high) {
  return minimum(maximum(x, low), high);
}

// torch.lerp: two formulas, so that weight 0 gives start and weight 1 gives end exactly.
template <typename C>
inline C lerp(C start, C end, C weight) {
  return std::abs(weight) < C(0.5) ? start + weight * (end - start) : end - (end - start) * (C(1) - weight);
}

template <typename C>
inline C nan_to_num(C x, C nan, C posinf, C neginf) {
  if (std::isnan(x)) {
    return nan;
  }
  if (std::isinf(x)) {
    return x > C(0) ? posinf : neginf;
  }
  return x;
}

// ---------------------------------------------------------------------------------------------
// Activations, with the formulas of torch's CPU kernels.
// ---------------------------------------------------------------------------------------------

// relu keeps NaN (a comparison with NaN is false, so NaN is returned as is).
template <typename C>
inline C relu(C x) {
  return x < C(0) ? C(0) : x;
}

template <typename C>
inline C sigmoid(C x) {
  return C(1) / (C(1) + std::exp(-x));
}

// softplus with beta 1 and threshold 20: linear above the threshold, where exp would overflow.
template <typename C>
inline C softplus(C x) {
  return x > C(20) ? x : std::log1p(std::exp(x));
}

// gelu(approximate='none'): x * Phi(x) with the exact normal CDF.
template <typename C>
inline C gelu(C x) {
  const C one_over_sqrt2 = C(0.70710678118654752440);
  return C(0.5) * x * (C(1) + std::erf(x * one_over_sqrt2));
}

// gelu(approximate='tanh'): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
template <typename C>
inline C gelu_tanh(C x) {
  const C sqrt_2_over_pi = C(0.79788456080286535588);
  const C kappa = C(0.044715);
  const C inner = sqrt_2_over_pi * (x + kappa * x * x * x);
  return C(0.5) * x * (C(1) + std::tanh(inner));
}

// ---------------------------------------------------------------------------------------------
// Inputs read at other elements (transpiler/ops.py SHIFTED_OPS).
// ---------------------------------------------------------------------------------------------

// torch.cat((-x[..., half:], x[..., :half]), dim=-1) at an output element whose coordinate in the last dim
// is in the first half (`first`) or the second, where x's element at the same coordinates is x[offset].
// x's last dim has size 2 * half and stride 1 (the caller checks), so x[..., j +- half] is `half` elements
// away. The kernel runs each half of the dim in a loop of its own (emit/cpp/kernels.py), where `first` is
// a constant: the loads are contiguous.
template <typename C, typename T, bool First>
inline C rotate_half(const T* x, int64_t offset, std::bool_constant<First>, int64_t half) {
  if constexpr (First) {
    return -static_cast<C>(x[offset + half]);
  } else {
    return static_cast<C>(x[offset - half]);
  }
}

// The halves of the rotated dim exchanged, no sign (rotate_half's backward reads its gradient so).
template <typename C, typename T, bool First>
inline C swap_halves(const T* x, int64_t offset, std::bool_constant<First>, int64_t half) {
  if constexpr (First) {
    return static_cast<C>(x[offset + half]);
  } else {
    return static_cast<C>(x[offset - half]);
  }
}

// ---------------------------------------------------------------------------------------------
// Kernel plumbing.
// ---------------------------------------------------------------------------------------------

// Store a computed value in a tensor's storage type. The 16-bit structs store their bits
// directly: GCC does not vectorise loops that copy a 2-byte struct.
template <typename T, typename C>
inline void store(T* data, int64_t index, C value) {
  data[index] = static_cast<T>(value);
}

template <typename C>
inline void store(bfloat16* data, int64_t index, C value) {
  data[index].bits = bfloat16::round_to_bfloat16(float(value));
}

#if !defined(__AVX512FP16__) && !defined(TRANSPILE_FLOAT16_HALF)
template <typename C>
inline void store(half* data, int64_t index, C value) {
  data[index].bits = half::from_float(float(value));
}
#endif

// A bool tensor element, read as a byte: GCC vectorises loops over byte loads, not over bool
// loads (a char type may alias any object, so the cast is well defined).
inline bool load_bool(const bool* data, int64_t offset) {
  return reinterpret_cast<const uint8_t*>(data)[offset] != 0;
}

// Kernels run on one thread below this many elements, where starting the OpenMP team costs
// more than it saves (torch's own grain size for pointwise ops, at::internal::GRAIN_SIZE).
constexpr int64_t parallel_grain = 32768;

// Row kernels sum a row in blocks of this many columns, then add the blocks' sums: a lane adds at
// most sum_block / vector width terms in sequence, so float32 sums of long rows stay as accurate
// as torch's cascade sums.
constexpr int64_t sum_block = 1024;

// The strides of tensor k inside the runtime's tensor-major stride array (NULL on the contiguous
// path, where kernels never read strides): tensor inputs for pointwise kernels, tensor inputs then
// element outputs for row kernels.
inline const int64_t* strides_of(const int64_t* strides, int k) { return strides ? strides + 4 * k : nullptr; }

// Calls `call(std::integral_constant<int, value>{})` for a `value` below N known only at run time,
// so that the callee takes it as a template argument: one instantiation per value.
template <int N, typename F>
inline void with_constant(int value, F&& call) {
  if constexpr (N > 0) {
    if (value == N - 1) {
      call(std::integral_constant<int, N - 1>{});
    } else {
      with_constant<N - 1>(value, call);
    }
  }
}

}  // namespace transpile
