"""The C++ row kernels (regions with reductions) against eager PyTorch, computed in float64.

Regions are built by hand, rendered into one kernel file (two, built on both cores), and
called through `CppLibrary.call_rows` with the runtime's own `row_layout`: contiguous rows,
rows along a dim that is not the last, transposed inputs (a large column stride),
broadcast inputs (stride 0), rows of 1, small, power-of-two and long lengths, the four
floating dtypes, NaN and infinities, keepdim both ways, and pointwise code fused before
and after the reductions.
"""

from __future__ import annotations

import concurrent.futures
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from emit.cpp.kernels import ROW_REDUCTIONS, render_cpp_file
from emit.runtime import Kernel, Rows, broadcast, row_layout
from emit.runtime.cpp_support import CppLibrary, find_compiler
from tests import tolerances
from tests.tolerances import assert_within, layer_norm_magnitude
from tests.transpiled import reference_of, shapes_of
from transpiler.compiler.ir import Input, Node, Output, Region
from transpiler.compiler import lowering
from transpiler.compiler.lowering import Level, lower

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C++ compiler")

FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
BUILD_JOBS = 2


@dataclass(frozen=True)
class Case:
    """A region with reductions, its eager reference and how to draw its inputs."""

    region: Region
    reference: Callable[..., tuple[torch.Tensor, ...]]  # (tensors..., scalars...) -> outputs, in region order
    # (R, dtype, transposed, generator) -> (tensors, scalars): R is the length of the reduced dim.
    inputs: Callable[..., tuple[list[torch.Tensor], list[float]]]
    # What each output's rounding error scales with (tests/tolerances.py), from the float64
    # (tensors, scalars, outputs), the reduced dim and the dtype computed in: a magnitude, or
    # (magnitude, rounded) where the elementwise roundings scale with more than the output.
    magnitudes: Callable[..., tuple[torch.Tensor, ...]]
    # A cast to float32 inside the region: float64 calls are only as precise as float32.
    rounds_to_float32: bool = False


def region(name: str, inputs: str, scalars: str, nodes: tuple[Node, ...], outputs: str) -> Region:
    tensor_inputs = tuple(Input(n, n, True) for n in inputs.split())
    scalar_inputs = tuple(Input(n, f"self.{n}", False) for n in scalars.split())
    last = max(node.line for node in nodes)
    return Region(
        name,
        "model.py",
        "Block.forward",
        1,
        last,
        tensor_inputs + scalar_inputs,
        nodes,
        tuple(Output(o, o) for o in outputs.split()),
    )


def randn(shape, dtype, transposed, generator, scale=1.0) -> torch.Tensor:
    """Values of `shape` in `dtype`; transposed: stored with the last two dims swapped (a column stride > 1)."""
    if transposed and len(shape) >= 2:
        stored = torch.randn((*shape[:-2], shape[-1], shape[-2]), generator=generator, dtype=torch.float64)
        return (stored * scale).to(dtype).transpose(-1, -2)
    return (torch.randn(shape, generator=generator, dtype=torch.float64) * scale).to(dtype)


def rows_of(shape: tuple[int, ...]) -> Callable:
    """Inputs for a one-tensor region: x of `shape`, its last dim R."""
    return lambda R, dtype, transposed, g: ([randn((*shape, R), dtype, transposed, g, scale=3.0)], [])


# -- every reduction, alone ------------------------------------------------------------------
def reduction_case(op: str, eager: Callable, dim: int, *constants, keepdim: bool | None = None) -> Case:
    """`y = op(x, dim, *constants, keepdim)` on x of shape (2, 3, R) (dim -1) or (2, R, 5) (dim 1)."""
    operands = ("x", dim, *constants) + (() if keepdim is None else (keepdim,))
    node = Node(op, operands, "y", 1, tuple(range(1, len(operands))))
    name = f"{op}_dim{dim % 3}" + ("" if keepdim is None else f"_keep{int(keepdim)}")
    name += f"_correction{constants[0]}" if op in ("var", "std") and constants[0] > 1 else ""
    if dim == -1:
        inputs = rows_of((2, 3))
    else:
        inputs = lambda R, dtype, transposed, g: ([randn((2, R, 5), dtype, transposed, g, scale=3.0)], [])  # noqa: E731
    correction = constants[0] if op in ("var", "std") else 1

    def magnitudes(tensors, scalars, outputs, reduced, dtype):
        (x,), (y,) = tensors, outputs
        scale = tolerances.magnitude(op, x, reduced, y.unsqueeze(reduced) if keepdim is False else y, dtype, correction)
        scale = scale.squeeze(reduced) if keepdim is False else scale
        return ((scale, tolerances.logsumexp_rounded(x, reduced, y)) if op == "logsumexp" else scale,)

    return Case(region(name, "x", "", (node,), "y"), lambda x: (eager(x),), inputs, magnitudes)


REDUCTION_CASES = [
    reduction_case("sum", lambda x: x.sum(-1, keepdim=True), -1, keepdim=True),
    reduction_case("sum", lambda x: x.sum(1), 1, keepdim=False),
    reduction_case("mean", lambda x: x.mean(-1), -1, keepdim=False),
    reduction_case("mean", lambda x: x.mean(1, keepdim=True), 1, keepdim=True),
    reduction_case("amax", lambda x: x.amax(-1, keepdim=True), -1, keepdim=True),
    reduction_case("amin", lambda x: x.amin(1), 1, keepdim=False),
    reduction_case("var", lambda x: x.var(-1, keepdim=True), -1, 1, keepdim=True),
    reduction_case("std", lambda x: x.std(1, correction=0), 1, 0, keepdim=False),
    # Rows of 1 and 2 have no degree of freedom left: ATen divides by max(0, n - 2), giving NaN or inf.
    reduction_case("var", lambda x: x.var(-1, correction=2, keepdim=True), -1, 2, keepdim=True),
    reduction_case("logsumexp", lambda x: x.logsumexp(-1), -1, keepdim=False),
    reduction_case("softmax", lambda x: x.softmax(-1), -1),
    reduction_case("softmax", lambda x: x.softmax(1), 1),
    reduction_case("log_softmax", lambda x: x.log_softmax(-1), -1),
]


# -- reductions fused with pointwise code ------------------------------------------------------
def attention_case() -> Case:
    """Scale, additive mask [B, 1, 1, S] against scores [B, H, S, S], softmax."""
    nodes = (
        Node("mul", ("scores", "scale"), "scaled", 1),
        Node("add", ("scaled", "mask"), "masked", 1),
        Node("softmax", ("masked", -1), "probs", 2, (1,)),
    )

    def inputs(R, dtype, transposed, g):
        scores = randn((2, 3, 5, R), dtype, transposed, g, scale=4.0)
        mask = torch.zeros(2, 1, 1, R, dtype=dtype)
        mask[0, ..., R // 2 :] = -math.inf  # padding: masked columns get probability 0
        mask[1, ..., 1::3] = torch.finfo(dtype).min
        return [scores, mask], [0.125]

    def magnitudes(tensors, scalars, outputs, reduced, dtype):
        (scores, mask), (scale,), (probs,) = tensors, scalars, outputs
        # z = scores * scale + mask is rounded to the dtype as eager holds it.
        rounded = tolerances.softmax_rounded(probs, scores * scale + mask)
        return ((tolerances.magnitude("softmax", probs, reduced, probs, dtype), rounded),)

    return Case(
        region("scaled_masked_softmax", "scores mask", "scale", nodes, "probs"),
        lambda scores, mask, scale: (torch.softmax(scores * scale + mask, -1),),
        inputs,
        magnitudes,
    )


def masked_fill_case() -> Case:
    """masked_fill with a bool mask [B, 1, 1, S] (a byte load, broadcast), then softmax."""
    nodes = (
        Node("masked_fill", ("scores", "padding", -math.inf), "filled", 1, (2,)),
        Node("softmax", ("filled", -1), "probs", 1, (1,)),
    )

    def inputs(R, dtype, transposed, g):
        padding = torch.zeros(2, 1, 1, R, dtype=torch.bool)
        padding[1, ..., (R + 1) // 2 :] = True
        return [randn((2, 3, 4, R), dtype, transposed, g), padding], []

    return Case(
        region("masked_fill_softmax", "scores padding", "", nodes, "probs"),
        lambda scores, padding: (scores.masked_fill(padding, -math.inf).softmax(-1),),
        inputs,
        _softmax_magnitude,
    )


def _softmax_magnitude(tensors, scalars, outputs, reduced, dtype):
    (probs,) = outputs
    return (tolerances.magnitude("softmax", probs, reduced, probs, dtype),)


def residual_layer_norm_case() -> Case:
    """Residual add then layer norm, producing both the sum and the normalised output; weight [R] (stride 0 rows)."""
    nodes = (
        Node("add", ("x", "residual"), "h", 1),
        Node("layer_norm", ("h", "weight", "bias", 1e-5), "y", 2, (3,)),
    )

    def inputs(R, dtype, transposed, g):
        x, residual = randn((4, 3, R), dtype, transposed, g), randn((4, 3, R), dtype, False, g)
        return [x, residual, randn((R,), dtype, False, g), randn((R,), dtype, False, g)], []

    def reference(x, residual, weight, bias):
        h = x + residual
        return h, F.layer_norm(h, (h.shape[-1],), weight, bias, 1e-5)

    def magnitudes(tensors, scalars, outputs, reduced, dtype):
        (_, _, weight, bias), (h, y) = tensors, outputs
        # h: one rounding. y: the layer norm of h, whose own rounding (u*|h|) the mean's term covers.
        return torch.zeros_like(h), layer_norm_magnitude(h, weight, bias, y, 1e-5)

    return Case(region("add_layer_norm", "x residual weight bias", "", nodes, "h y"), reference, inputs, magnitudes)


def rms_norm_case() -> Case:
    """LLaMA's RMSNorm: to fp32, x * rsqrt(mean(x**2) + eps), back to the input's dtype, times the weight."""
    nodes = (
        Node("to", ("x", "float32"), "hidden", 1, (1,)),
        Node("pow", ("hidden", 2), "squares", 2, (1,)),
        Node("mean", ("squares", -1, True), "variance", 2, (1, 2)),
        Node("add", ("variance", "eps"), "shifted", 3),
        Node("rsqrt", ("shifted",), "scale", 3),
        Node("mul", ("hidden", "scale"), "normed", 3),
        Node("to_like", ("normed", "x"), "cast", 4),
        Node("mul", ("weight", "cast"), "out", 4),
    )

    def inputs(R, dtype, transposed, g):
        return [randn((3, 5, R), dtype, transposed, g), randn((R,), dtype, False, g)], [1e-6]

    def reference(x, weight, eps):
        hidden = x.to(torch.float32)
        variance = hidden.pow(2).mean(-1, keepdim=True)
        return (weight * (hidden * torch.rsqrt(variance + eps)).to(x.dtype),)

    def magnitudes(tensors, scalars, outputs, reduced, dtype):
        # A mean of squares (non-negative: relative error), under a square root: relative on the
        # output; rounded to x's dtype before the weight multiplies it.
        return ((2 * outputs[0].abs(), outputs[0].abs()),)

    return Case(
        region("rms_norm", "x weight", "eps", nodes, "out"), reference, inputs, magnitudes, rounds_to_float32=True
    )


def statistics_case() -> Case:
    """Several row outputs with keepdim=False, one pass computing a sum and a maximum together."""
    nodes = (
        Node("mul", ("x", "x"), "squares", 1),
        Node("sum", ("squares", -1, False), "total", 1, (1, 2)),
        Node("amax", ("x", -1, False), "largest", 2, (1, 2)),
        Node("amin", ("x", -1, False), "smallest", 2, (1, 2)),
        Node("sub", ("largest", "smallest"), "spread", 3),
    )

    def magnitudes(tensors, scalars, outputs, reduced, dtype):
        total, largest, spread = outputs
        # A sum of squares (non-negative: relative), each rounded to the dtype as eager holds it;
        # the maximum is exact, the spread one rounding.
        return (total.abs(), total.abs()), torch.zeros_like(largest), torch.zeros_like(spread)

    return Case(
        region("row_statistics", "x", "", nodes, "total largest spread"),
        lambda x: ((x * x).sum(-1), x.amax(-1), x.amax(-1) - x.amin(-1)),
        rows_of((7,)),
        magnitudes,
    )


def bools_across_passes_case() -> Case:
    """A bool value a reduction's pass computes and the store pass uses again (saved to scratch as a number,
    restored as a bool: fuzz seed 3425's kernel did not compile)."""
    nodes = (
        Node("gt", ("x", 0.0), "positive", 1, (1,)),
        Node("where", ("positive", "x", 0.0), "kept", 1, (2,)),
        Node("var", ("kept", -1, 1, True), "spread", 2, (1, 2, 3)),
        Node("and", ("positive", "positive"), "both", 3),
        Node("mul", ("kept", "spread"), "scaled", 3),
    )

    def magnitudes(tensors, scalars, outputs, reduced, dtype):
        (x,), (_, scaled) = tensors, outputs
        kept = x.clamp_min(0.0)
        bound = tolerances.magnitude("var", kept, reduced, kept.var(reduced, keepdim=True), dtype, 1)
        return None, (kept * bound, scaled.abs())

    def reference(x):
        kept = torch.where(x > 0.0, x, 0.0)
        return (x > 0.0) & (x > 0.0), kept * kept.var(-1, keepdim=True)

    return Case(region("bools_across_passes", "x", "", nodes, "both scaled"), reference, rows_of((5,)), magnitudes)


def normalise_case() -> Case:
    """Pointwise code after the reductions: (x - mean) / (std + eps) * gain, with a scalar gain."""
    nodes = (
        Node("mean", ("x", -1, True), "mu", 1, (1, 2)),
        Node("std", ("x", -1, 1, True), "sigma", 1, (1, 2, 3)),
        Node("sub", ("x", "mu"), "centered", 2),
        Node("add", ("sigma", 1e-3), "guarded", 2, (1,)),
        Node("div", ("centered", "guarded"), "z", 2),
        Node("mul", ("z", "gain"), "out", 2),
    )

    def magnitudes(tensors, scalars, outputs, reduced, dtype):
        (x,), (gain,), (out,) = tensors, scalars, outputs
        # The mean's absolute error, scaled by gain / (std + eps), and std's relative error on out.
        guarded = x.std(-1, keepdim=True) + 1e-3
        mean_error = abs(gain) * x.abs().sum(-1, keepdim=True) / x.shape[-1] / guarded
        # Eager rounds the mean, the deviation, std and the quotient to the dtype: the mean's
        # rounding is absolute (u*|mean|), the others relative on out.
        return ((mean_error + 2 * out.abs(), mean_error + 2 * out.abs()),)

    return Case(
        region("standardise", "x", "gain", nodes, "out"),
        lambda x, gain: ((x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-3) * gain,),
        lambda R, dtype, transposed, g: ([randn((4, 2, R), dtype, transposed, g)], [1.5]),
        magnitudes,
    )


def awkward_names_case() -> Case:
    """Values named like the row kernel's own names and helpers, and like another value's derived names."""
    nodes = (
        Node("mul", ("R", "col"), "row", 1),
        Node("sum", ("row", -1, True), "store", 1, (1, 2)),
        Node("sub", ("row", "store"), "block", 2),
        Node("amax", ("block", -1, True), "R_row", 2, (1, 2)),
    )

    def reference(R, col):
        row = R * col
        store = row.sum(-1, keepdim=True)
        return store, row - store, (row - store).amax(-1, keepdim=True)

    def inputs(R, dtype, transposed, g):
        return [randn((2, 3, R), dtype, transposed, g, scale=0.1), randn((3, R), dtype, False, g)], []

    def magnitudes(tensors, scalars, outputs, reduced, dtype):
        # `store` sums the row, whose terms are rounded to the dtype as eager holds them; `block`
        # and its maximum carry that sum's error.
        R, col = tensors
        row_sum = (R * col).abs().sum(-1, keepdim=True)
        return ((row_sum, row_sum),) * 3

    return Case(region("awkward_names", "R col", "", nodes, "store block R_row"), reference, inputs, magnitudes)


CASES = {
    c.region.name: c
    for c in [
        *REDUCTION_CASES,
        attention_case(),
        masked_fill_case(),
        residual_layer_norm_case(),
        rms_norm_case(),
        statistics_case(),
        bools_across_passes_case(),
        normalise_case(),
        awkward_names_case(),
    ]
}


# -- building and calling -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def kernel_files(tmp_path_factory) -> list[Path]:
    """The cases' kernels in two files, so that both cores build at once."""
    directory = tmp_path_factory.mktemp("row-kernels")
    regions = [case.region for case in CASES.values()]
    paths = []
    for part in range(BUILD_JOBS):
        path = directory / f"_row_kernels_{part}.cpp"
        path.write_text(render_cpp_file(regions[part::BUILD_JOBS], {1: "y = op(x)"}, "Row kernels under test."))
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def libraries(kernel_files, tmp_path_factory) -> dict[str, CppLibrary]:
    """Every case's library by region name, built into a private cache (kept for the runtime's own loads)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path_factory.mktemp("cpp-cache")))
        with concurrent.futures.ThreadPoolExecutor(BUILD_JOBS) as pool:
            built = list(pool.map(CppLibrary.load, kernel_files))
        yield {name: built[n % BUILD_JOBS] for n, name in enumerate(CASES)}


def run(libraries, case: Case, tensors: list[torch.Tensor], scalars: list) -> tuple[torch.Tensor, ...]:
    """Call the kernel as the runtime does: its row layout, outputs of torch's result shapes and dtypes."""
    lowered = lower(case.region)
    shape = broadcast([t.shape for t in tensors])
    dim = lowered.dim % len(shape)
    expected = case.reference(*(t.to("meta") for t in tensors), *scalars)
    outputs = tuple(torch.empty(e.shape, dtype=e.dtype) for e in expected)
    outer_sizes, strides, contiguous = row_layout(tensors, shape, dim)
    element_outputs = len(lowered.element_outputs)
    strides = strides[:-1] + strides[-1:] * element_outputs
    libraries[case.region.name].call_rows(
        case.region.name,
        tensors,
        scalars,
        outputs,
        math.prod(outer_sizes),
        shape[dim],
        outer_sizes,
        strides,
        contiguous,
    )
    return outputs


def check(libraries, case: Case, tensors, scalars) -> tuple[torch.Tensor, ...]:
    """The kernel's outputs equal the float64 reference within their error bounds (shapes and dtypes exactly)."""
    actual = run(libraries, case, tensors, scalars)
    assert_matches(case, tensors, scalars, actual)
    return actual


def assert_matches(case: Case, tensors, scalars, actual) -> None:
    """`actual` (a call's outputs) against the float64 reference, within each output's error bound."""
    eager = case.reference(*tensors, *scalars)
    wide_tensors = [t.double() if t.is_floating_point() else t for t in tensors]
    wide = case.reference(*wide_tensors, *scalars)
    shape = broadcast([t.shape for t in tensors])
    reduced = lower(case.region).dim % len(shape)
    dtype = next(t.dtype for t in tensors if t.is_floating_point())
    computed_in = torch.float32 if case.rounds_to_float32 and dtype == torch.float64 else dtype
    magnitudes = case.magnitudes(wide_tensors, scalars, wide, reduced, computed_in)
    for got, want, exact, scale in zip(actual, wide, eager, magnitudes, strict=True):
        assert got.dtype == exact.dtype and got.shape == exact.shape
        if got.dtype == torch.bool:  # comparisons of the inputs themselves: exact
            assert torch.equal(got, exact)
            continue
        scale, rounded = scale if isinstance(scale, tuple) else (scale, None)
        dtype = computed_in if got.dtype == torch.float64 else got.dtype
        assert_within(got, want, shape[reduced], scale, dtype, rounded)


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- tests --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATING, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager(libraries, name, dtype):
    """Every case, every dtype: row lengths 1, 3, 17, 64 and 300; contiguous and transposed inputs."""
    case = CASES[name]
    for R in (1, 3, 17, 64, 300):
        for transposed in (False, True):
            tensors, scalars = case.inputs(R, dtype, transposed, generator(R))
            check(libraries, case, tensors, scalars)


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_long_rows(libraries, dtype):
    """70000 columns: float32 sums stay within 1e-5 of float64 (lane-wise partial sums), softmax and norms too."""
    R = 70000
    for name in ("sum_dim2_keep1", "softmax_dim2", "add_layer_norm", "rms_norm", "var_dim2_keep1"):
        case = CASES[name]
        tensors, scalars = case.inputs(R, dtype, False, generator(1))
        tensors = [t[:1] if t.dim() > 1 else t for t in tensors]  # one batch: 3 to 5 rows of 70000
        check(libraries, case, tensors, scalars)


def test_long_sum_precision(libraries):
    """A float32 sum of 70000 positive values within the probabilistic bound of its n roundings.

    The worst-case bound gamma(n) (4e-3 relative here) holds for any order but is far from
    what rounding does; with independent rounding errors the error stays below
    6 * sqrt(n) * u (tests/tolerances.py). How far below depends on the summation order
    (vector width, threads: a serial sum comes to about u * sqrt(n) / 3, 5e-6), so no
    tighter constant holds on every machine.
    """
    case = CASES["sum_dim2_keep1"]
    x = torch.rand(1, 4, 70000, generator=generator(2))
    (got,) = run(libraries, case, [x], [])
    exact = x.double().sum(-1, keepdim=True)
    assert ((got.double() - exact).abs() / exact).max() < tolerances.likely_gamma(70000, torch.float32)


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_nan_and_infinities(libraries, dtype):
    """amax/amin propagate NaN; softmax of -inf entries, of an all -inf row (NaN, like torch); logsumexp of +-inf."""
    x = torch.randn(2, 3, 16, generator=generator(3), dtype=torch.float64).to(dtype)
    x[0, 0, 5] = math.nan
    x[0, 1, :4] = -math.inf
    x[0, 2, :] = -math.inf
    x[1, 0, 7] = math.inf
    x[1, 1, 15] = math.nan
    x[1, 2, 0] = -math.inf
    for name in (
        "amax_dim2_keep1",
        "amin_dim1_keep0",
        "softmax_dim2",
        "log_softmax_dim2",
        "logsumexp_dim2_keep0",
        "sum_dim2_keep1",
        "row_statistics",
    ):
        check(libraries, CASES[name], [x], [])
    (largest,) = run(libraries, CASES["amax_dim2_keep1"], [x], [])
    assert torch.isnan(largest[0, 0]).all() and torch.isnan(largest[1, 1]).all() and largest[1, 0] == math.inf


def hard_rows(n: int = 33) -> torch.Tensor:
    """Rows whose squares overflow or underflow float32, equal large values, and a plain one."""
    x = torch.zeros(6, n, dtype=torch.float32)
    x[0] = 123456789.0  # a mean that does not round exactly: plain two-pass leaves a variance of 64
    x[1, ::2], x[1, 1::2] = 1e20, -1e20  # squares overflow float32
    x[2, :3] = 1e-30  # squares underflow
    x[3] = torch.randn(n, generator=generator(4))
    x[4], x[4, 0] = 1e30, -1e30
    x[5, 1] = math.inf
    return x


@pytest.mark.parametrize("name", ["var_dim2_keep1", "std_dim1_keep0", "var_dim2_keep1_correction2"])
def test_variance_of_hard_rows(libraries, name):
    """var and std as robust as eager's (float32 accumulated in double on the CPU), in float32."""
    case = CASES[name]
    x = hard_rows()
    x = x.T.unsqueeze(0) if "dim1" in name else x.unsqueeze(0)
    (got,), (want,) = run(libraries, case, [x], []), case.reference(x)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    finite = want.isfinite()
    assert torch.allclose(got[finite], want[finite], rtol=1e-5, atol=0)


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
def test_layer_norm_of_constant_rows_is_its_bias(libraries, dtype):
    """x - mean(x) is exactly 0 on a constant row (as eager's exact mean gives in float32), not the mean's
    rounding error amplified by 1/sqrt(eps): the output is the bias, bit for bit."""
    case = CASES["add_layer_norm"]
    R = 6
    values = torch.tensor([-1.1575524806976318, 0.1, 3.3, 1e4], dtype=torch.float64).to(dtype)
    x = values.view(4, 1, 1).expand(4, 3, R)  # a stride-0 row, as fuzz seed 1117 drew it
    residual = torch.zeros(4, 3, R, dtype=dtype)
    weight, bias = randn((R,), dtype, False, generator(5)), randn((R,), dtype, False, generator(6))
    _, y = run(libraries, case, [x, residual, weight, bias], [])
    assert torch.equal(y, bias.expand_as(y))


def test_layer_norm_of_rows_whose_squares_overflow(libraries):
    """Rows whose centered squares overflow float32 (±1e20, a mix of ±1e30 whose mean rounds): eager's variance
    is infinite there and its output the bias; the corrected two-pass variance must not make inf - inf = NaN."""
    case = CASES["add_layer_norm"]
    x = hard_rows().unsqueeze(0)
    residual = torch.zeros_like(x)
    weight, bias = randn((x.shape[-1],), torch.float32, False, generator(5)), randn(
        (x.shape[-1],), torch.float32, False, generator(6)
    )
    (_, got), (_, want) = run(libraries, case, [x, residual, weight, bias], []), case.reference(
        x, residual, weight, bias
    )
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    finite = want.isfinite()
    assert torch.allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


def test_broadcast_along_rows(libraries):
    """An input broadcast over the row dims (stride 0 between rows) and one with a zero column stride elsewhere."""
    case = CASES["add_layer_norm"]
    g = generator(4)
    x = torch.randn(6, 1, 40, generator=g).expand(6, 5, 40)  # rows repeat: outer stride 0
    residual, weight, bias = (
        torch.randn(6, 5, 40, generator=g),
        torch.randn(40, generator=g),
        torch.randn(40, generator=g),
    )
    check(libraries, case, [x, residual, weight, bias], [])
    sliced = torch.randn(6, 5, 80, generator=g)[..., ::2]  # column stride 2
    check(libraries, case, [sliced, residual, weight, bias], [])


def test_several_row_dims_and_empty(libraries):
    """Rows over three outer dims (4-d input, reduced dim 1 of a permuted view), and zero rows."""
    case = CASES["softmax_dim1"]
    x = torch.randn(3, 7, 5, generator=generator(5)).permute(2, 1, 0)  # (5, 7, 3), reduced dim 1 strided
    check(libraries, case, [x], [])
    empty = torch.empty(0, 9, 5)
    (out,) = run(libraries, case, [empty], [])
    assert out.shape == (0, 9, 5)


@pytest.mark.parametrize("keepdim", [True, False])
def test_through_the_runtime(libraries, kernel_files, keepdim):
    """The runtime's Kernel picks the row kernel, lays the rows out (a strided input) and counts a C++ run."""
    case = CASES["add_layer_norm"] if keepdim else CASES["row_statistics"]
    part = list(CASES).index(case.region.name) % BUILD_JOBS
    lowered = lower(case.region)
    row_outputs = tuple(n for n, o in enumerate(case.region.outputs) if lowered.levels[o.value] is Level.ROW)
    rows = Rows(dim=-1, keepdim=keepdim, row_outputs=row_outputs)
    tensors, _ = case.inputs(96, torch.float32, True, generator(7))
    kernel = Kernel(
        case.region.name,
        reference_of(case.region),
        len(tensors),
        shapes_of(case.region),
        "model.py:1-3",
        cpp=kernel_files[part],
        rows=rows,
    )
    outputs = kernel(*tensors)
    assert dict(kernel.counts) == {"cpp": 1}
    assert_matches(case, tensors, [], outputs)


def test_rendered_kernel_reads_like_the_source(kernel_files):
    """A pass per reduction with its comment, the NaN flag beside the maximum, source lines as comments."""
    text = kernel_files[list(CASES).index("scaled_masked_softmax") % BUILD_JOBS].read_text()
    kernel = text[text.index("// scaled_masked_softmax:") :]
    kernel = kernel[: kernel.index("\n}\n")]
    assert "// Pass 1: the row maximum of masked." in kernel
    assert "// Pass 2: the row sum of exp0." in kernel
    assert "// Pass 3: compute and store the element outputs." in kernel
    assert "#pragma omp simd reduction(max: row_max0) reduction(|: row_max0_nan)" in kernel
    assert "// line 1: y = op(x)" in kernel
    # Later passes restore what earlier ones computed: one exponential per element, as in torch.
    assert kernel.count("std::exp(") == 1 and "const C exp0 = exp0_saved[col];" in kernel


def test_every_row_reduction_is_rendered():
    assert set(ROW_REDUCTIONS) == lowering.ROW_REDUCTIONS


@pytest.mark.parametrize("dtype", FLOATING, ids=str)
@pytest.mark.parametrize(
    "name", ["sum_dim2_keep1", "mean_dim1_keep1", "var_dim2_keep1", "softmax_dim1", "add_layer_norm"]
)
def test_the_bounds_catch_a_dropped_element(libraries, name, dtype):
    """The error bounds still catch a real bug: every row's reduction leaving out its first element.

    The kernel runs on the rows without column 0; element outputs get eager's own value in that
    column, so that only the reduction is wrong. Rows of 300 (the longest `test_matches_eager` checks)
    in float32 and float64; of 64 in the half dtypes, where one value of 300 moves a variance by
    less than bfloat16's resolution (2**-8).
    """
    case = CASES[name]
    tensors, scalars = case.inputs(300 if dtype in (torch.float32, torch.float64) else 64, dtype, False, generator(9))
    shape = broadcast([t.shape for t in tensors])
    reduced = lower(case.region).dim % len(shape)
    kept = torch.arange(1, shape[reduced])

    def without_column_0(t: torch.Tensor) -> torch.Tensor:
        dim = reduced - (len(shape) - t.dim())
        return t.index_select(dim, kept) if dim >= 0 and t.shape[dim] == shape[reduced] else t

    buggy = run(libraries, case, [without_column_0(t) for t in tensors], scalars)
    outputs = []
    for wrong, eager in zip(buggy, case.reference(*tensors, *scalars), strict=True):
        if wrong.shape != eager.shape:  # an element output: eager's value in column 0, the buggy kernel's elsewhere
            wrong = eager.clone().index_copy_(reduced, kept, wrong)
        outputs.append(wrong)
    with pytest.raises(AssertionError, match="beyond the bound"):
        assert_matches(case, tensors, scalars, outputs)
    assert_matches(case, tensors, scalars, run(libraries, case, tensors, scalars))  # the kernel itself passes
