"""The kernel ABI: what the generated kernel files and the runtime that launches them agree on, defined once.

The generator (emit/cpp, emit/triton, emit/host) writes kernels and the runtime (this package) calls them:
the rank of the iteration space, the order and C types of a kernel's arguments, the symbols a C++ kernel
file exports, the names of a Triton kernel's launch constants and the helpers it may import are read by
both from here. Standard library only: the runtime is copied into every output tree, and the generator,
which needs no torch, loads this file by its path (emit/abi.py).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

RANK = 4  # a pointwise kernel's strided path indexes a broadcast iteration space of at most this many dims
ROW_DIMS = RANK - 1  # a row kernel's rows: the dims other than the reduced one, at most this many

# -- arguments --------------------------------------------------------------------------------------
# Every kernel takes its data first: a pointer per tensor input, the scalar inputs, a pointer per output
# (in the C++ entry points: untyped pointers and doubles, of these C types); then its layout's arguments.
C_INPUT, C_SCALAR, C_OUTPUT = "const void*", "double", "void*"
# The ctypes type of each C type an entry point's parameter has: the runtime declares every entry point's
# parameters with them (`prototype`), so that a wrong argument raises (ctypes.ArgumentError, TypeError) where
# C would run on garbage.
C_TYPES = {
    C_INPUT: ctypes.c_void_p,
    C_OUTPUT: ctypes.c_void_p,
    C_SCALAR: ctypes.c_double,
    "int64_t": ctypes.c_int64,
    "const int64_t*": ctypes.POINTER(ctypes.c_int64),
    "int": ctypes.c_int,
}


@dataclass(frozen=True)
class Layout:
    """How one kind of kernel indexes its tensors: its arguments after the data, in order, in both backends."""

    c: tuple[tuple[str, str], ...]  # the C++ entry points': (C type, name)
    triton: tuple[str, ...]  # the Triton kernel's, before the strides
    strides: tuple[str, ...]  # the Triton kernel's stride parameters of each strided tensor: suffixes of its name
    constants: tuple[str, ...]  # the Triton kernel's launch constants (tl.constexpr), after the strides

    def declarations(self) -> tuple[str, ...]:
        """The C declarations of the entry points' layout parameters: `int64_t n_elements`, ..."""
        return tuple(f"{ctype} {name}" for ctype, name in self.c)

    def c_parameters(self, inputs: Sequence[str], scalars: Sequence[str], outputs: Sequence[str]) -> list[str]:
        """An entry point's C parameters, named after the data they carry, then the layout's."""
        return [
            *(f"{C_INPUT} {name}" for name in inputs),
            *(f"{C_SCALAR} {name}" for name in scalars),
            *(f"{C_OUTPUT} {name}" for name in outputs),
            *self.declarations(),
        ]

    def triton_parameters(self, strided: Sequence[str]) -> list[str]:
        """The Triton kernel's parameters after the data: `strided` names the tensors that have strides."""
        return [*self.triton, *(f"{tensor}{suffix}" for tensor in strided for suffix in self.strides), *self.constants]


# A pointwise kernel: `n_elements` output elements; on the strided path RANK sizes (padded on the left with
# 1s) and, per tensor input, RANK element strides (C++: one array, tensor after tensor).
POINTWISE = Layout(
    c=(("int64_t", "n_elements"), ("const int64_t*", "sizes"), ("const int64_t*", "strides"), ("int", "contiguous")),
    triton=("n_elements", *(f"size{d}" for d in range(RANK))),
    strides=tuple(f"_stride{d}" for d in range(RANK)),
    constants=("CONTIGUOUS", "NDIM", "BLOCK_SIZE"),
)
# A row kernel: `n_rows` rows of `row_size` (Triton: R) columns; on the strided path the ROW_DIMS row dims
# (Triton: the last two, which locate a row) and, per element tensor (the tensor inputs, then the outputs
# with one value an element), its strides along the row dims, then along the reduced dim.
ROWS = Layout(
    c=(
        ("int64_t", "n_rows"),
        ("int64_t", "row_size"),
        ("const int64_t*", "outer_sizes"),
        ("const int64_t*", "strides"),
        ("int", "contiguous"),
    ),
    triton=("n_rows", "R", *(f"outer_size{d}" for d in range(1, ROW_DIMS))),
    strides=(*(f"_stride{d}" for d in range(ROW_DIMS)), "_stride_r"),
    constants=("CONTIGUOUS", "LOOPED", "ROWS", "RBLOCK"),
)

# -- the C++ kernel file ------------------------------------------------------------------------------
# The dtypes of the floating inputs of the calls each kernel's entry points are instantiated for, in order.
ENTRY_DTYPES = ("float32", "float64", "float16", "bfloat16")
# The kernels' entry templates, on untyped pointers with the parameters above: `<kernel>_entry<T..., C>`.
ENTRY_SUFFIX = "_entry"
# Each kernel's entry points, exported as an array of pointers: its entry template for each of ENTRY_DTYPES.
ENTRIES_SUFFIX = "_entries"
# Each kernel's exported strings: the element type of each tensor (`x:T mask:bool -> y:T1`), its type
# parameters' values and dtypes (cpp_support.Kinds and cpp_support.Types read them), and its entry points'
# C parameters, `const void* x, double a, ...` (`prototype` reads them).
KINDS_SUFFIX, TYPES_SUFFIX, PARAMETERS_SUFFIX = "_kinds", "_types", "_parameters"
# A region's kinds string starts so when it has no C++ kernel: the rest is the reason.
UNSUPPORTED = "unsupported: "
# Defined by the runtime's build of one call's instantiation, which includes the kernel file: it leaves out
# the file's entry points. That build exports its instantiation as a pointer of this name.
ONE_SIGNATURE = "TRANSPILE_ONE_SIGNATURE"
INSTANCE = "transpile_instance"


def prototype(parameters: str) -> type:
    """The ctypes function type of an entry point whose C parameters are `parameters`, as its kernel file exports
    them: its arguments are then checked, in number and type, before C sees them."""
    types = [declaration.rpartition(" ")[0] for declaration in parameters.split(", ")]
    return ctypes.CFUNCTYPE(None, *(C_TYPES[ctype] for ctype in types))


# -- the Triton kernel file ----------------------------------------------------------------------------
# A region's kernel is `<region>_kernel`.
KERNEL_SUFFIX = "_kernel"
# A kernel's last parameters, after its launch constants: the dtype eager holds some of its values in on the
# call, each named after its value with this suffix.
DTYPE_SUFFIX = "_dtype"
# The attribute a kernel file sets on a kernel: the values it does not compute as eager does where they are
# integers, with why, by value name.
INTEGER_REFUSALS = "integer_refusals"
# What a Triton kernel may import from the runtime's triton_support: its jit helpers and constexpr constants
# (tests/test_abi.py checks the list against the module).
TRITON_HELPERS = frozenset("""
    INTERPRETED accumulate_max accumulate_min accumulate_sum add addcmul cast ceil clamp clamp_max clamp_min
    divide expm1 floating floor floor_divide gelu gelu_tanh is_inf lerp log1p logical_and logical_not logical_or
    logical_xor max_partial maximum min_partial minimum nan_to_num power relu remainder rotate_half
    round_half_even rounded row_max row_min row_sum scalar_in sign softplus sqrt_rn stored sum_partial swap_halves tanh
    trunc
    widen
    """.split())
