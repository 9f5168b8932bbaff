"""Differential tests of the C++ backend: every op of the table, and fused regions, against eager PyTorch.

All test regions are rendered into one kernel file, built once per module; hypothesis
draws shapes (0-dim and 0-size included), broadcasting, transposed and sliced inputs,
the four floating dtypes and bools, and values with NaN, infinities and signed zeros.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import ctypes
import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from emit.cpp.kernels import render_cpp_file
from emit.runtime import Kernel, layout
from emit.runtime.cpp_support import (
    NO_COMPILER,
    Binding,
    CppBuildError,
    CppLibrary,
    Kinds,
    Types,
    bind,
    find_compiler,
)
from tests.transpiled import reference_of, shapes_of
from transpiler.compiler.dtypes import ValueKind, value_kinds
from transpiler.compiler.ir import Input, Node, Output, Region
from transpiler.compiler.ops import BY_NAME, CAST, OPS, Op

FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# Tolerances against torch's CPU kernels: glibc's libm and torch's vectorised (Sleef) math
# differ by an ulp or two; half and bfloat16 results are rounded once, like torch's.
TOLERANCE = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-5},
    torch.float64: {"rtol": 1e-10, "atol": 1e-10},
    torch.float16: {"rtol": 2e-3, "atol": 2e-3},
    torch.bfloat16: {"rtol": 1.6e-2, "atol": 1.6e-2},
    torch.bool: {"rtol": 0, "atol": 0},
}
SPECIAL_VALUES = (math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 1.0, 2.0, -3.0)
# Constant operands of the ops that need them, as source would fold them.
CONSTANTS: dict[str, dict[int, object]] = {
    "addcmul": {3: 0.5},
    "addcdiv": {3: -2.0},
    "masked_fill": {2: -1.5},
    "nan_to_num": {1: 0.25, 2: 100.0, 3: -100.0},
}

# Ops also tested with Python scalars after the first operand: one of each template shape
# (torch.minimum, torch.maximum and torch.lerp want tensors there).
SCALAR_OPERAND_OPS = ("add", "floordiv", "remainder", "pow", "lt", "clamp")

BUILD_JOBS = 2
needs_compiler = pytest.mark.skipif(find_compiler() is None, reason="no C++ compiler")


@dataclass(frozen=True)
class Case:
    """A region under test and its eager reference."""

    region: Region
    reference: Callable[..., tuple[torch.Tensor, ...]]  # (tensors..., scalars...) -> outputs
    dtypes: tuple[torch.dtype, ...] = FLOATING  # what the numeric inputs are drawn in

    @property
    def input_kinds(self) -> list[ValueKind]:
        kinds = value_kinds(self.region)
        return [kinds[item.name] for item in self.region.tensor_inputs]


def one_node_case(op: Op, scalar_operands: bool = False, constants: dict[int, object] | None = None) -> Case:
    """`out = op(x, y, ...)`: value operands are tensor inputs (or, after the first, Python scalars)."""
    constants = constants if constants is not None else CONSTANTS.get(op.name, {})
    names = iter("xyzw")
    operands, inputs = [], []
    for position in range(op.arity):
        if position in constants:
            operands.append(constants[position])
            continue
        name = next(names)
        operands.append(name)
        inputs.append(Input(name, name, is_tensor=not (scalar_operands and position > 0)))
    suffix = "_scalar" if scalar_operands else ""
    dtype = f"_{constants[1]}" if op is CAST else ""
    node = Node(op.name, tuple(operands), "out", 1, tuple(sorted(constants)))
    region = Region(
        f"op_{op.name}{dtype}{suffix}", "test.py", "f", 1, 1, tuple(inputs), (node,), (Output("out", "out"),)
    )
    rendered = [repr(o) if i in constants and op is not CAST else str(o) for i, o in enumerate(operands)]
    expression = op.eager.format(*rendered)
    # Tensors first, then scalars: the order the runtime passes them in.
    ordered = [i.name for i in (*region.tensor_inputs, *region.scalar_inputs)]
    reference = eval(
        f"lambda {', '.join(ordered)}: ({expression},)", {"torch": torch, "nan": math.nan, "inf": math.inf}
    )
    # A cast to a floating dtype is in the dtype model when the input already has it.
    return Case(region, reference, (torch.float32,) if op is CAST and constants[1] == "float32" else FLOATING)


def fused_gelu_tanh_case() -> Case:
    """tanh-GELU written out with mul/add/tanh/pow and folded constants, the 8-kernel eager chain."""
    sqrt_2_over_pi = math.sqrt(2 / math.pi)
    nodes = (
        Node("pow", ("h", 3), "cube", 1, (1,)),
        Node("mul", (0.044715, "cube"), "scaled_cube", 1, (0,)),
        Node("add", ("h", "scaled_cube"), "inner", 1),
        Node("mul", (sqrt_2_over_pi, "inner"), "angle", 1, (0,)),
        Node("tanh", ("angle",), "tanh_angle", 1),
        Node("add", (1.0, "tanh_angle"), "one_plus", 1, (0,)),
        Node("mul", ("h", "one_plus"), "h_times", 1),
        Node("mul", (0.5, "h_times"), "gelu", 1, (0,)),
        Node("mul", ("gelu", "scale"), "out", 2),
    )
    region = Region(
        "fused_gelu_tanh_scale",
        "test.py",
        "MLP.forward",
        1,
        2,
        (Input("h", "h", True), Input("scale", "self.scale", False)),
        nodes,
        (Output("out", "h"),),
    )

    def reference(h, scale):
        gelu = 0.5 * h * (1.0 + torch.tanh(sqrt_2_over_pi * (h + 0.044715 * torch.pow(h, 3))))
        return (gelu * scale,)

    return Case(region, reference)


def casts_case() -> Case:
    """Casts inside a kernel round through their type: half, bfloat16, int32 and bool, then back to T."""
    nodes = (
        Node("to", ("x", "float16"), "x_half", 1, (1,)),
        Node("to", ("x_half", "float32"), "from_half", 1, (1,)),
        Node("to", ("x", "bfloat16"), "x_bf16", 2, (1,)),
        Node("to", ("x_bf16", "float32"), "from_bf16", 2, (1,)),
        Node("to", ("x", "int32"), "x_int", 3, (1,)),
        Node("to", ("x_int", "float32"), "from_int", 3, (1,)),
        Node("to", ("m", "float32"), "m_float", 4, (1,)),
        Node("mul", ("m_float", "from_int"), "masked", 4),
    )
    outputs = (Output("from_half", "a"), Output("from_bf16", "b"), Output("masked", "c"))
    region = Region("round_trips", "test.py", "f", 1, 4, (Input("x", "x", True), Input("m", "m", True)), nodes, outputs)

    def reference(x, m):
        return x.half().float(), x.bfloat16().float(), m.float() * x.int().float()

    return Case(region, reference, (torch.float32,))


def where_of_bools_case() -> Case:
    """Bools flowing through where, logic and comparisons keep their kind; a float read as a bool is != 0."""
    nodes = (
        Node("gt", ("x", 0.0), "positive", 1, (1,)),
        Node("where", ("m", "positive", False), "chosen", 1, (2,)),
        Node("or", ("chosen", "x"), "either", 2),
        Node("not", ("either",), "neither", 2),
    )
    outputs = (Output("chosen", "chosen"), Output("neither", "neither"))
    region = Region("bool_flow", "test.py", "f", 1, 2, (Input("x", "x", True), Input("m", "m", True)), nodes, outputs)

    def reference(x, m):
        chosen = torch.where(m, x > 0.0, False)
        return chosen, ~torch.logical_or(chosen, x)

    return Case(region, reference)


def awkward_names_case() -> Case:
    """Values named like C++ keywords and like the kernel's own names; infinite and huge constants."""
    tensors = tuple(Input(name, name, True) for name in ("n", "int", "x", "x_ptr"))
    nodes = (
        Node("add", ("n", "int"), "index", 1),
        Node("gt", ("x", "x_ptr"), "contiguous", 1),
        Node("where", ("contiguous", "index", -math.inf), "sizes", 1, (2,)),
        Node("mul", ("sizes", 2**60), "C", 1, (1,)),
        Node("gelu", ("x",), "gelu", 1),  # a value named like a helper that a later node calls
        Node("gelu", ("gelu",), "sign", 1),
    )
    outputs = (Output("sizes", "sizes"), Output("C", "C"), Output("contiguous", "contiguous"), Output("sign", "sign"))
    region = Region("awkward_names", "test.py", "f", 1, 1, tensors, nodes, outputs)

    def reference(n, int, x, x_ptr):
        contiguous = x > x_ptr
        sizes = torch.where(contiguous, n + int, -math.inf)
        gelu = torch.nn.functional.gelu(x)
        return sizes, sizes * 2**60, contiguous, torch.nn.functional.gelu(gelu)

    return Case(region, reference)


def _cases() -> dict[str, Case]:
    cases = [one_node_case(op) for op in OPS]
    # Operands after the first as Python scalars, for the ops torch accepts them in
    # (torch.minimum, torch.maximum and torch.lerp want tensors).
    cases += [one_node_case(BY_NAME[name], scalar_operands=True) for name in SCALAR_OPERAND_OPS]
    # Single-node casts keep one floating dtype (the dtype model): to the input's own dtype,
    # here float32, and to bool. Casts between dtypes and to integers run inside regions
    # (casts_case); integer outputs are outside the model (test_unsupported_dtypes).
    cases += [one_node_case(CAST, constants={1: dtype}) for dtype in ("float32", "bool")]
    cases += [fused_gelu_tanh_case(), casts_case(), where_of_bools_case(), awkward_names_case()]
    cases += [constant_power_case(exponent) for exponent in POWERS]
    return {case.region.name: case for case in cases}


# The constant exponents torch's CPU pow special-cases (multiplications, roots), unlike a tensor exponent.
POWERS = (2, 3, 0.5, -0.5, -1, -2)


def constant_power_case(exponent: float) -> Case:
    case = one_node_case(BY_NAME["pow"], constants={1: exponent})
    name = f"op_pow_constant_{str(exponent).replace('-', 'minus_').replace('.', '_')}"
    return Case(dataclasses.replace(case.region, name=name), case.reference, case.dtypes)


CASES = _cases()
ONE_NODE = sorted(name for name in CASES if name.startswith("op_"))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory, monkeypatch_module):
    directory = tmp_path_factory.mktemp("cpp-cache")
    monkeypatch_module.setenv("TRANSPILE_CACHE_DIR", str(directory))
    return directory


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="module")
def kernel_files(tmp_path_factory) -> list[Path]:
    """The test regions in two files, so that the two cores build them at the same time (about 0.1 s per region and dtype)."""
    directory = tmp_path_factory.mktemp("kernels")
    regions = [case.region for case in CASES.values()]
    paths = []
    for part in range(BUILD_JOBS):
        path = directory / f"_test_kernels_{part}.cpp"
        lines = {1: "out = op(x, y)", 2: "out = out * self.scale"}
        path.write_text(render_cpp_file(regions[part::BUILD_JOBS], lines, "Kernels under test."))
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def library(kernel_files, cache_dir) -> Libraries:
    if find_compiler() is None:
        pytest.skip("no C++ compiler")
    with concurrent.futures.ThreadPoolExecutor(BUILD_JOBS) as pool:
        built = list(pool.map(CppLibrary.load, kernel_files))
    regions = list(CASES)
    return Libraries({name: built[i % BUILD_JOBS] for i, name in enumerate(regions)})


class Libraries:
    """The built test kernels, called like one library."""

    def __init__(self, by_region: dict[str, CppLibrary]) -> None:
        self.by_region = by_region

    def __repr__(self) -> str:
        return f"<{len(self.by_region)} test kernels>"

    def call(self, entry: str, *arguments) -> None:
        self.by_region[entry].call(entry, *arguments)


# -- drawing inputs ----------------------------------------------------------------------
@st.composite
def shapes(draw) -> tuple[int, ...]:
    """Output shapes: 0-dim, 0-size, small irregular sizes, and one long last dim for the vector loops."""
    return tuple(draw(st.lists(st.sampled_from((0, 1, 2, 3, 5, 7, 33)), min_size=0, max_size=3)))


@st.composite
def tensors_like(draw, shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A tensor that broadcasts to `shape`: some dims 1 or missing, contiguous, transposed or sliced."""
    own = [size if draw(st.booleans()) else 1 for size in shape]
    own = own[draw(st.integers(0, len(own))) :]
    generator = torch.Generator().manual_seed(seed)
    layout_kind = draw(st.sampled_from(("contiguous", "transposed", "sliced")))
    allocated = own
    if layout_kind == "transposed":
        allocated = list(reversed(own))
    elif layout_kind == "sliced" and own:
        allocated = own[:-1] + [2 * own[-1]]  # every other element of the last dim
    values = torch.randn(allocated, generator=generator, dtype=torch.float64) * 3
    special = torch.tensor(SPECIAL_VALUES, dtype=torch.float64)
    picks = torch.randint(0, len(SPECIAL_VALUES), allocated, generator=generator)
    values = torch.where(torch.rand(allocated, generator=generator) < 0.2, special[picks], values)
    values = (values > 0) if dtype == torch.bool else values.to(dtype)
    if layout_kind == "transposed":
        return values.permute(tuple(reversed(range(len(own)))))
    if layout_kind == "sliced" and own:
        return values[..., ::2]
    return values


@st.composite
def arguments(draw, case: Case):
    """Tensors and scalars for `case`, with one floating dtype for its numeric inputs."""
    dtype = draw(st.sampled_from(case.dtypes))
    shape = draw(shapes())
    tensors = [
        draw(tensors_like(shape, torch.bool if kind is ValueKind.BOOL else dtype, draw(st.integers(0, 2**31))))
        for kind in case.input_kinds
    ]
    scalars = [draw(st.sampled_from((0.5, -2.0, 3, 0.0, math.inf, -1.25))) for _ in case.region.scalar_inputs]
    return tensors, scalars


def run(library: Libraries, case: Case, tensors: list[torch.Tensor], scalars: list) -> tuple[torch.Tensor, ...]:
    """Call the kernel the way the runtime does: outputs allocated with the eager result dtypes."""
    metas = case.reference(*(t.to("meta") for t in tensors), *scalars)
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    outputs = tuple(torch.empty(shape, dtype=m.dtype) for m in metas)
    contiguous, sizes, strides = layout(tensors, shape)
    library.call(case.region.name, tensors, scalars, outputs, math.prod(shape), sizes, strides, contiguous)
    return outputs


def assert_matches(actual: tuple[torch.Tensor, ...], expected: tuple[torch.Tensor, ...]) -> None:
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, equal_nan=True, **TOLERANCE[want.dtype])


SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# -- differential tests -------------------------------------------------------------------
def test_every_op_has_a_case():
    """Every op of the table is rendered and tested (casts by target dtype)."""
    tested = {case.region.nodes[0].op for case in CASES.values() if case.region.name.startswith("op_")}
    assert tested == {op.name for op in (*OPS, CAST)}


@needs_compiler
@pytest.mark.parametrize("name", ONE_NODE)
@SETTINGS
@given(data=st.data())
def test_op_matches_eager(library, name, data):
    case = CASES[name]
    tensors, scalars = data.draw(arguments(case))
    if name == "op_gelu":
        # torch's float32 and bfloat16 gelu give NaN at +inf (its float64 kernel and the
        # formula give inf, as this kernel does): compare on finite and -inf inputs.
        tensors = [t.nan_to_num(posinf=1e4) for t in tensors]
    assert_matches(run(library, case, tensors, scalars), case.reference(*tensors, *scalars))


def _finite(t: torch.Tensor) -> torch.Tensor:
    bound = min(1e6, torch.finfo(t.dtype).max)
    return torch.nan_to_num(t, 0.0, bound, -bound)


@needs_compiler
@pytest.mark.parametrize("name", ["round_trips", "bool_flow", "awkward_names"])
@SETTINGS
@given(data=st.data())
def test_multi_node_regions(library, name, data):
    case = CASES[name]
    tensors, scalars = data.draw(arguments(case))
    # int32 casts of NaN, infinities and huge values are implementation-defined in C++ and torch alike; and
    # torch's vectorised float gelu gives NaN at +inf (its scalar path inf): finite values only, in each dtype.
    tensors = [_finite(t) if t.is_floating_point() else t for t in tensors]
    expected = case.reference(*tensors, *scalars)
    # Outputs that do not cover the broadcast shape take the runtime's fallback, not a kernel.
    assume(all(e.shape == torch.broadcast_shapes(*(t.shape for t in tensors)) for e in expected))
    assert_matches(run(library, case, tensors, scalars), case.reference(*tensors, *scalars))


@needs_compiler
@SETTINGS
@given(data=st.data())
def test_fused_gelu_tanh(library, data):
    """The fused chain computes half and bfloat16 in float32 and rounds once: compare with float32 eager, rounded."""
    case = CASES["fused_gelu_tanh_scale"]
    tensors, scalars = data.draw(arguments(case))
    # An infinite scale would turn an ulp of difference at gelu's underflow into inf against NaN.
    scalars = [scale if math.isfinite(scale) else 2.0 for scale in scalars]
    (actual,) = run(library, case, tensors, scalars)
    dtype = tensors[0].dtype
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    (expected,) = case.reference(*(t.to(wide) for t in tensors), *scalars)
    assert_matches((actual,), (expected.to(dtype),))


@needs_compiler
@pytest.mark.parametrize("exponent", POWERS)
def test_pow_matches_torch_at_special_values(library, exponent):
    """Where a root and std::pow disagree (-inf, -0.0): torch takes the root for a constant exponent only."""
    base = torch.tensor([-0.0, 0.0, -math.inf, math.inf, -2.0, 3.0, math.nan, 1.5])
    case = CASES[constant_power_case(exponent).region.name]
    assert_matches(run(library, case, [base], []), (torch.pow(base, exponent),))
    exponents = torch.full_like(base, exponent)
    assert_matches(run(library, CASES["op_pow"], [base, exponents], []), (torch.pow(base, exponents),))


@needs_compiler
def test_bool_tensor_read_as_number_is_converted(library):
    """A bool tensor where the kernel reads numbers is promoted at the boundary, as torch promotes it."""
    case = CASES["op_mul"]
    x, y = torch.randn(4, 3), torch.rand(3) > 0.5
    assert case.input_kinds == [ValueKind.FLOAT, ValueKind.FLOAT]
    assert_matches(run(library, case, [x, y], []), (x * y,))
    both_bool = [torch.rand(4, 3) > 0.5, torch.rand(4, 3) > 0.5]  # bool * bool is a bool in torch
    assert_matches(run(library, case, both_bool, []), case.reference(*both_bool))


@needs_compiler
def test_runtime_kernel_runs_cpp(kernel_files, cache_dir):
    """Through the runtime's Kernel: the C++ path runs and agrees with the region's eager code."""
    case = CASES["fused_gelu_tanh_scale"]
    part = list(CASES).index(case.region.name) % BUILD_JOBS
    kernel = Kernel(
        case.region.name, reference_of(case.region), 1, shapes_of(case.region), "test.py:1-2", cpp=kernel_files[part]
    )
    h = torch.randn(64, 33)[:, 1:]
    (out,) = kernel(h, 0.5)
    assert_matches((out,), case.reference(h, 0.5))
    assert dict(kernel.counts) == {"cpp": 1}


# -- dtype model ----------------------------------------------------------------------------
def test_bind_types_each_class_from_eager_dtypes():
    """`bind` gives each type parameter eager's dtype of its values, and refuses what the kernel cannot compute."""
    kinds = Kinds.parse("x:T w:T1 i:T2 m:bool -> y:T3 c:bool")
    uniform = "float32,float64,float16,bfloat16"
    types = Types.parse(f"T:{uniform}=x,h T1:{uniform}=w T2:{uniform}=i T3:{uniform}=y bool=c")
    f16, f32, f64, i64 = torch.float16, torch.float32, torch.float64, torch.int64
    readers = {"x": ["h"], "w": ["y"], "i": ["y"], "m": ["c"]}
    inputs = {"x": f16, "w": f32, "i": i64, "m": torch.bool}
    values = {"h": f16, "y": f32, "c": torch.bool}
    binding = bind(kinds, types, inputs, values, readers)
    assert binding == Binding((f16, f32, f32, f32), f32, (f16, f32, f32, torch.bool), (f32, torch.bool))
    # A float64 value makes the kernel compute in double.
    assert bind(kinds, types, {**inputs, "w": f64}, {**values, "y": f64}, readers).compute == f64
    # Eager splits a class: h is float32 where x is a half.
    assert "several dtypes" in bind(kinds, types, inputs, {**values, "h": f32}, readers)
    # A fixed dtype eager does not give (`~i` of an integer is bitwise: an int64, not a bool).
    assert "c" in bind(kinds, types, inputs, {**values, "c": i64}, readers)
    # Integer values of a class: the kernel would compute them in floating point.
    assert "int64" in bind(kinds, types, {**inputs, "i": f32}, {**values, "y": i64}, readers)
    # An integer input read by a value that keeps it an integer is not converted first in eager.
    assert "integer input" in bind(kinds, types, inputs, values, {**readers, "i": ["y", "h"]})


def test_kinds_come_from_the_ir():
    kinds = value_kinds(CASES["bool_flow"].region)
    assert kinds["m"] is ValueKind.BOOL  # only ever a where condition
    assert kinds["x"] is ValueKind.FLOAT  # compared, and read as a bool by `or`: a number first
    assert kinds["chosen"] is kinds["neither"] is ValueKind.BOOL


# -- storage types ----------------------------------------------------------------------------
CONVERSIONS = """
#include "transpile_runtime.h"

extern "C" void half_to_float(const uint16_t* bits, float* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    transpile::half value;
    std::memcpy(&value, &bits[i], 2);
    values[i] = float(value);
  }
}

extern "C" void float_to_half(const float* values, uint16_t* bits, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    transpile::store(reinterpret_cast<transpile::half*>(bits), i, values[i]);
  }
}

extern "C" void float_to_bfloat16(const float* values, uint16_t* bits, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    transpile::store(reinterpret_cast<transpile::bfloat16*>(bits), i, values[i]);
  }
}
"""


@needs_compiler
@pytest.mark.parametrize("float16_half", [False, True], ids=["bits-half", "_Float16-half"])
def test_storage_conversions_match_torch(tmp_path, cache_dir, float16_half):
    """Every half bit pattern widens like torch; floats round to half and bfloat16 like torch (nearest even)."""
    source = tmp_path / "conversions.cpp"
    source.write_text(("#define TRANSPILE_FLOAT16_HALF\n" if float16_half else "") + CONVERSIONS)
    library = ctypes.CDLL(str(CppLibrary.load(source).path))
    every_half = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    widened = torch.empty(every_half.numel(), dtype=torch.float32)
    library.half_to_float(_pointer(every_half), _pointer(widened), every_half.numel())
    torch.testing.assert_close(widened, every_half.view(torch.float16).float(), rtol=0, atol=0, equal_nan=True)
    # Neighbours of every half value, midpoints (ties), the overflow edge, subnormals, NaN and infinities.
    floats = torch.cat(
        [
            widened,
            widened.nextafter(torch.tensor(math.inf)),
            widened.nextafter(torch.tensor(-math.inf)),
            (widened[:-1] + widened[1:]) / 2,
            torch.tensor([65504.0, 65519.0, 65520.0, 1e-8, 3e-8, -6e-8, 1e30, -1e30]),
            torch.randn(10000) * 1e3,
        ]
    ).contiguous()
    for function, dtype in ((library.float_to_half, torch.float16), (library.float_to_bfloat16, torch.bfloat16)):
        rounded = torch.empty(floats.numel(), dtype=torch.int16)
        function(_pointer(floats), _pointer(rounded), floats.numel())
        torch.testing.assert_close(
            rounded.view(dtype).float(), floats.to(dtype).float(), rtol=0, atol=0, equal_nan=True
        )


def _pointer(tensor: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(tensor.data_ptr())


# -- building and caching ---------------------------------------------------------------------
@needs_compiler
def test_second_build_is_a_cache_hit(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "_small_kernels.cpp"
    source.write_text(render_cpp_file([CASES["op_add"].region], {}, "Cache test."))
    first, second = CppLibrary.load(source), CppLibrary.load(source)
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert first.path == second.path and first.path.parent == tmp_path / "cache"
    source.write_text(source.read_text() + "\n// changed\n")
    # Two builds at once (as two processes would race): both get a complete library.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        racing = list(pool.map(CppLibrary.load, [source, source]))
    assert racing[0].path == racing[1].path and False in (racing[0].cache_hit, racing[1].cache_hit)
    assert CppLibrary.load(source).cache_hit is True
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")] == []  # no temporaries left


def test_missing_compiler_warns_and_falls_back(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent")
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    case = CASES["op_add"]
    source = tmp_path / "_no_compiler_kernels.cpp"
    source.write_text(render_cpp_file([case.region], {}, "No compiler."))
    with pytest.warns(RuntimeWarning, match=re.escape(NO_COMPILER)):
        assert CppLibrary.load(source) is None
    kernel = Kernel(case.region.name, reference_of(case.region), 2, shapes_of(case.region), "test.py:1", cpp=source)
    with pytest.warns(RuntimeWarning, match=re.escape(NO_COMPILER)):
        assert kernel(torch.ones(3), torch.ones(3)) is None
    assert dict(kernel.counts) == {"fallback: no C++ compiler": 1}


@needs_compiler
def test_compile_error_raises_with_the_compilers_message(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "_broken_kernels.cpp"
    source.write_text('#include "transpile_runtime.h"\nint broken( {\n')
    with pytest.raises(CppBuildError, match="error"):
        CppLibrary.load(source)


BOOLS_BESIDE_INTEGERS = """\
import torch
from torch import nn


class Mixed(nn.Module):
    def forward(self, x, y):
        m = x > y
        a = torch.where(m, m, x)
        b = torch.where(m, y, m)
        c = m * x + m
        return a, b, torch.maximum(c, m)
"""


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_bools_beside_integers_are_promoted_to_the_integers_not_to_float(tmp_path, monkeypatch, dtype):
    """A bool operand of an op whose result is an integer is 0 or 1 in that integer type: through C (float) an
    int32 past 2**24 lost its low bits (`torch.where(m, m, x)`; the differential fuzzer's seed 19073)."""
    from tests.transpiled import original_and_transpiled

    monkeypatch.setenv("TRANSPILE_COMPILE", "sync")
    info = torch.iinfo(dtype)
    generator = torch.Generator().manual_seed(0)
    x, y = (torch.randint(info.min // 4, info.max // 4, (5, 7), generator=generator, dtype=dtype) for _ in range(2))
    x[0, :3] = torch.tensor([2**24 + 1, -(2**31) + 3, 2**31 - 5], dtype=dtype)
    with original_and_transpiled(tmp_path, BOOLS_BESIDE_INTEGERS, "mixed_ints", "mixed", "mixed_original") as pair:
        original, transpiled = pair
        expected, actual = original.Mixed()(x, y), transpiled.Mixed()(x, y)
        for got, want in zip(actual, expected, strict=True):
            assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
        runtime = importlib.import_module("mixed_ints._transpile_runtime")
        assert any(k.counts.get("cpp") for k in runtime.KERNELS), [dict(k.counts) for k in runtime.KERNELS]
