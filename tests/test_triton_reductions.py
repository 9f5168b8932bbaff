"""Differential tests of the Triton row kernels (regions with reductions) against eager PyTorch in float64.

Kernels run under Triton's interpreter (`TRITON_INTERPRET=1`) on CPU tensors, launched
the way the runtime launches them: rows along the reduced dim of the broadcast shape,
per-tensor strides (0 where an input broadcasts), contiguous or not. The one-pass path
is tested at its real block sizes; the looped path (rows longer than a block) at small
block sizes (the same kernel code, cheaper to interpret) and once at 70000 columns.
The `gpu` test compiles the same kernels for a CUDA device.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest

# First: it turns Triton's interpreter on before triton is imported (or skips, as this module must).
from tests.test_triton_backend import INTERPRET, compile_region, eager_dtypes  # isort: skip

import black  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from emit.runtime import triton_support  # noqa: E402
from emit.triton.kernels import HELPERS, render_triton, render_triton_file, triton_helpers_used  # noqa: E402
from tests import tolerances  # noqa: E402
from tests.cuda import check_compiled  # noqa: E402
from tests.tolerances import layer_norm_magnitude, softmax_rounded  # noqa: E402
from transpiler.compiler.ir import Input, Node, Output, Region  # noqa: E402
from transpiler.compiler.lowering import Level, lower  # noqa: E402

# The interpreter computes with numpy, which warns on log(0) and the like; torch warns on var of one element.
pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"), pytest.mark.filterwarnings("ignore:var\\(\\)")]

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


# -- launching as the runtime does ----------------------------------------------------------------
def run_rows(region: Region, tensors: list[torch.Tensor], scalars: list, out_dtypes, dim: int = -1):
    """The region's outputs from its row kernel, rows along `dim` of the inputs' broadcast shape."""
    rows = lower(region)
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    dim %= len(shape)
    reduced = [*shape[:dim], *([1] if rows.keepdim else []), *shape[dim + 1 :]]
    device = tensors[0].device
    outputs = [
        torch.empty(reduced if rows.levels[o.value] is Level.ROW else shape, dtype=dtype, device=device)
        for o, dtype in zip(region.outputs, out_dtypes)
    ]
    element_outputs = [t for o, t in zip(region.outputs, outputs) if rows.levels[o.value] is Level.ELEMENT]
    # Each element tensor seen as [*row dims, R]: broadcast dims get stride 0 from expand.
    views = [t.expand(shape).movedim(dim, -1) for t in [*tensors, *element_outputs]]
    outer = tuple(shape[:dim]) + tuple(shape[dim + 1 :])
    assert len(outer) <= 3
    pad = (0,) * (3 - len(outer))
    strides = [pad + view.stride() for view in views]
    contiguous = dim == len(shape) - 1 and all(t.shape == shape and t.is_contiguous() for t in tensors)
    kernel = compile_region(region)
    n_rows = math.prod(outer)
    outer_sizes, dtypes = (1,) * len(pad) + outer, eager_dtypes(region, tensors, scalars)
    triton_support.launch_rows(
        kernel, tensors, scalars, outputs, n_rows, shape[dim], outer_sizes, strides, contiguous, dtypes
    )
    return outputs


@pytest.fixture
def small_blocks(monkeypatch):
    """Rows longer than 16 columns take the looped path, in blocks of 16."""
    monkeypatch.setattr(triton_support, "MAX_ONE_PASS", 16)
    monkeypatch.setattr(triton_support, "LOOP_BLOCK", 16)


def within(actual: torch.Tensor, expected: torch.Tensor, n: int, magnitude: torch.Tensor, rounded=None) -> None:
    """`tolerances.assert_within` for a Triton kernel's result. The interpreter converts float32 to
    bfloat16 by truncation (triton/runtime/interpreter.py's cast_impl passes no rounding mode; compiled
    kernels round to nearest): a whole ulp there."""
    truncated = INTERPRET and actual.dtype == torch.bfloat16
    tolerances.assert_within(actual, expected, n, magnitude, rounded=rounded, final_rounding=2.0 if truncated else 1.0)


# -- one reduction per region -----------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One reduction op: its node (reducing `x`, with `w`, `b` for layer_norm) and torch's result."""

    node: Node
    reference: Callable[..., torch.Tensor]  # on float64 tensors: (x) or (x, w, b)

    @property
    def region(self) -> Region:
        names = ("x", "w", "b") if self.node.op == "layer_norm" else ("x",)
        inputs = tuple(Input(n, n, True) for n in names)
        name = f"{self.node.op}_region"
        return Region(name, "models/norm.py", "Norm.forward", 7, 7, inputs, (self.node,), (Output("y", "y"),))

    def run(self, x: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        """(kernel result, float64 reference) on x; layer_norm also gets a weight and bias."""
        (actual,) = run_rows(self.region, [x, *self._extra(x)], [], [x.dtype], dim)
        return actual, self.reference(*(t.double() for t in (x, *self._extra(x))))

    def check(self, x: torch.Tensor) -> torch.Tensor:
        """The kernel's result on x (rows along -1) within its error bound of the float64 reference."""
        actual, expected = self.run(x)
        wide = [t.double() for t in (x, *self._extra(x))]
        op, n = self.node.op, x.shape[-1]
        if op == "layer_norm":
            magnitude, rounded = layer_norm_magnitude(*wide, expected, 1e-5)
        else:
            keepdim = op in ("softmax", "log_softmax") or self.node.operands[-1] is True
            shaped = expected if keepdim else expected.unsqueeze(-1)
            correction = self.node.operands[2] if op in ("var", "std") else 1
            magnitude = tolerances.magnitude(op, wide[0], -1, shaped, torch.float32, correction)
            magnitude = magnitude if keepdim else magnitude.squeeze(-1)
            rounded = tolerances.logsumexp_rounded(wide[0], -1, expected) if op == "logsumexp" else None
        # Where the result overflows x's dtype, eager's is infinite too (a half sum of 70000 values near 1).
        overflows = expected.to(x.dtype).isinf()
        compared = actual
        if overflows.any():
            assert torch.equal(actual[overflows].cpu(), expected.to(x.dtype)[overflows].cpu())
            kept = ~overflows
            compared, expected, magnitude = actual[kept], expected[kept], magnitude.expand_as(kept)[kept]
            rounded = None if rounded is None else rounded.expand_as(kept)[kept]
        within(compared, expected, n, magnitude, rounded=rounded)
        return actual

    def _extra(self, x: torch.Tensor) -> list[torch.Tensor]:
        if self.node.op != "layer_norm":
            return []
        generator = torch.Generator().manual_seed(1)
        return [(torch.randn(x.shape[-1], generator=generator) * s).to(x.dtype).to(x.device) for s in (1.0, 0.1)]


def reduction(op: str, *args, keepdim: bool = True) -> Case:
    """sum, mean, ... along -1 (var and std take their correction as `args`)."""
    operands = ("x", -1, *args, keepdim)
    node = Node(op, operands, "y", 7, tuple(range(1, len(operands))))
    return Case(node, lambda x: getattr(torch, op)(x, -1, *args, keepdim=keepdim))


CASES = {
    "sum": reduction("sum"),
    "mean": reduction("mean"),
    "amax": reduction("amax"),
    "amin": reduction("amin"),
    "var": Case(Node("var", ("x", -1, 1, True), "y", 7, (1, 2, 3)), lambda x: x.var(-1, correction=1, keepdim=True)),
    "std": Case(Node("std", ("x", -1, 0, True), "y", 7, (1, 2, 3)), lambda x: x.std(-1, correction=0, keepdim=True)),
    "logsumexp": reduction("logsumexp"),
    "softmax": Case(Node("softmax", ("x", -1), "y", 7, (1,)), lambda x: torch.softmax(x, -1)),
    "log_softmax": Case(Node("log_softmax", ("x", -1), "y", 7, (1,)), lambda x: torch.log_softmax(x, -1)),
    "layer_norm": Case(
        Node("layer_norm", ("x", "w", "b", 1e-5), "y", 7, (3,)), lambda x, w, b: F.layer_norm(x, w.shape, w, b, 1e-5)
    ),
}


def random_rows(n_rows: int, row_size: int, dtype: torch.dtype, device: str = "cpu", seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(n_rows, row_size, generator=generator) * 3 + 1).to(dtype).to(device)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("row_size", [1, 3, 17, 64, 1000])
@pytest.mark.parametrize("op", CASES)
def test_one_pass_matches_torch(op: str, row_size: int, dtype: torch.dtype) -> None:
    # 5 rows: the program's last rows are masked off.
    CASES[op].check(random_rows(5, row_size, dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("row_size", [17, 100])
@pytest.mark.parametrize("op", CASES)
def test_looped_matches_torch(op: str, row_size: int, dtype: torch.dtype, small_blocks) -> None:
    CASES[op].check(random_rows(3, row_size, dtype))


@pytest.mark.parametrize("op", ["softmax", "layer_norm", "var", "amax"])
def test_rows_of_70000_columns(op: str) -> None:
    """The looped path at its real block size, over a row one block cannot hold."""
    CASES[op].check(random_rows(2, 70000, torch.float32))


def test_a_row_of_5000_columns_in_one_pass() -> None:
    assert 5000 <= triton_support.MAX_ONE_PASS
    CASES["softmax"].check(random_rows(3, 5000, torch.bfloat16))


def special_rows(row_size: int) -> torch.Tensor:
    """Rows with NaN (first, middle, last), +-inf, and all -inf: what masking and NaN propagation must get right."""
    x = random_rows(7, row_size, torch.float32)
    x[0, 0] = math.nan
    x[1, row_size // 2] = math.nan
    x[2, -1] = math.nan
    x[3, ::3] = -math.inf  # a masked attention row
    x[4, :] = -math.inf
    x[5, 1] = math.inf
    x[6, -1] = -math.inf
    return x


@pytest.mark.parametrize("looped", [False, True])
@pytest.mark.parametrize("op", ["amax", "amin", "sum", "logsumexp", "softmax", "log_softmax"])
def test_nan_and_infinities_propagate_like_torch(op: str, looped: bool, monkeypatch) -> None:
    if looped:
        monkeypatch.setattr(triton_support, "MAX_ONE_PASS", 16)
        monkeypatch.setattr(triton_support, "LOOP_BLOCK", 16)
    actual = CASES[op].check(special_rows(37))
    if op in ("amax", "amin"):
        assert actual[:3].isnan().all() and not actual[3:].isnan().any()


@pytest.mark.parametrize("keepdim", [True, False])
@pytest.mark.parametrize("op", ["sum", "amax", "mean"])
def test_row_outputs_keep_or_drop_the_dim(op: str, keepdim: bool) -> None:
    case = reduction(op, keepdim=keepdim)
    actual = case.check(torch.randn(2, 3, 40))
    assert actual.shape == ((2, 3, 1) if keepdim else (2, 3))


# -- layouts: any reduced dim, strided and broadcast inputs ------------------------------------------
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("op", ["sum", "softmax", "amax"])
def test_a_reduced_dim_that_is_not_last(op: str, dim: int) -> None:
    node = Node(op, ("x", dim, True) if op != "softmax" else ("x", dim), "y", 7, (1, 2) if op != "softmax" else (1,))
    region = Region(f"{op}_dim{dim}", "m.py", "f", 7, 7, (Input("x", "x", True),), (node,), (Output("y", "y"),))
    x = torch.randn(6, 37, 5)
    (actual,) = run_rows(region, [x], [], [torch.float32], dim)
    expected = torch.softmax(x.double(), dim) if op == "softmax" else getattr(torch, op)(x.double(), dim, keepdim=True)
    within(actual, expected, x.shape[dim], tolerances.magnitude(op, x.double(), dim, expected, torch.float32))


def test_a_transposed_input_reduced_along_its_last_dim() -> None:
    CASES["layer_norm"].check(torch.randn(33, 20).t())  # stride along the row: 20


def attention_region() -> Region:
    """scores * scale + mask, then softmax: a [B, 1, 1, S] mask against [B, H, S, S] scores."""
    nodes = (
        Node("mul", ("scores", "scale"), "scaled", 20),
        Node("add", ("scaled", "mask"), "masked", 20),
        Node("softmax", ("masked", -1), "probs", 21, (1,)),
    )
    inputs = (
        Input("scores", "scores", True),
        Input("mask", "attention_mask", True),
        Input("scale", "self.scale", False),
    )
    return Region(
        "attention_probs",
        "models/attention.py",
        "Attention.forward",
        20,
        21,
        inputs,
        nodes,
        (Output("probs", "probs"),),
    )


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_scale_mask_softmax_with_a_broadcast_mask(dtype: torch.dtype) -> None:
    scores = torch.randn(2, 3, 9, 9).to(dtype)
    mask = torch.zeros(2, 1, 1, 9)
    mask[0, ..., 6:] = -math.inf  # padding
    mask[1, ..., 4:] = torch.finfo(torch.float32).min  # HF's additive mask
    (probs,) = run_rows(attention_region(), [scores, mask], [0.125], [dtype])
    assert_attention_probs(probs, scores, mask)


def assert_attention_probs(probs: torch.Tensor, scores: torch.Tensor, mask: torch.Tensor) -> None:
    z = scores.double() * 0.125 + mask.double()
    expected = torch.softmax(z, -1)
    magnitude = tolerances.magnitude("softmax", expected, -1, expected, torch.float32)
    within(probs, expected, z.shape[-1], magnitude, rounded=softmax_rounded(expected, z))


def residual_layer_norm_region() -> Region:
    """h = x + residual; y = layer_norm(h): both outputs, the norm's weight and bias broadcast along the rows."""
    nodes = (
        Node("add", ("x", "residual"), "h", 30),
        Node("layer_norm", ("h", "weight", "bias", 1e-6), "y", 31, (3,)),
    )
    inputs = tuple(
        Input(n, n if n in ("x", "residual") else f"self.norm.{n}", True) for n in ("x", "residual", "weight", "bias")
    )
    return Region(
        "add_layer_norm",
        "models/block.py",
        "Block.forward",
        30,
        31,
        inputs,
        nodes,
        (Output("h", "h"), Output("y", "y")),
    )


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_residual_add_and_layer_norm_give_both_outputs(dtype: torch.dtype) -> None:
    x, residual = (torch.randn(4, 7, 96).to(dtype) for _ in range(2))
    weight, bias = torch.randn(96).to(dtype), torch.randn(96).to(dtype)
    h, y = run_rows(residual_layer_norm_region(), [x, residual, weight, bias], [], [dtype, dtype])
    expected_h = x.double() + residual.double()
    within(h, expected_h, 96, torch.zeros_like(expected_h))  # one rounding
    expected_y = F.layer_norm(expected_h, (96,), weight.double(), bias.double(), 1e-6)
    magnitude, rounded = layer_norm_magnitude(expected_h, weight.double(), bias.double(), expected_y, 1e-6)
    within(y, expected_y, 96, magnitude, rounded=rounded)


@pytest.mark.parametrize("looped", [False, True])
def test_layer_norm_of_rows_whose_squares_overflow(looped: bool, monkeypatch) -> None:
    """Rows of ±1e20 and of ±1e30 whose mean rounds: eager's variance overflows to inf and its output is the
    bias; inf - inf in the corrected two-pass variance must not make it NaN (seen on an H100, seed 7921)."""
    if looped:
        monkeypatch.setattr(triton_support, "MAX_ONE_PASS", 16)
        monkeypatch.setattr(triton_support, "LOOP_BLOCK", 16)
    x = torch.zeros(3, 1, 37)
    x[0, 0, ::2], x[0, 0, 1::2] = 1e20, -1e20
    x[1, 0], x[1, 0, ::3] = 1e30, -1e30
    x[2, 0] = torch.randn(37)
    residual = torch.zeros_like(x)
    weight, bias = torch.randn(37), torch.randn(37)
    _, y = run_rows(residual_layer_norm_region(), [x, residual, weight, bias], [], [torch.float32, torch.float32])
    expected = F.layer_norm(x, (37,), weight, bias, 1e-6)
    assert torch.equal(y.isnan(), expected.isnan()) and torch.equal(y.isinf(), expected.isinf())
    torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-4)


def rms_norm_region(dtype: str) -> Region:
    """LLaMA's RMSNorm: in float32, back to the input dtype, times the weight."""
    nodes = (
        Node("to", ("x", "float32"), "h", 40, (1,)),
        Node("pow", ("h", 2), "squares", 41, (1,)),
        Node("mean", ("squares", -1, True), "variance", 41, (1, 2)),
        Node("add", ("variance", "eps"), "shifted", 42),
        Node("rsqrt", ("shifted",), "scale", 42),
        Node("mul", ("h", "scale"), "normed", 42),
        Node("to", ("normed", dtype), "narrowed", 43, (1,)),
        Node("mul", ("weight", "narrowed"), "y", 43),
    )
    inputs = (
        Input("x", "hidden_states", True),
        Input("weight", "self.weight", True),
        Input("eps", "self.variance_epsilon", False),
    )
    return Region("rms_norm", "models/llama.py", "RMSNorm.forward", 40, 43, inputs, nodes, (Output("y", "y"),))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_rms_norm_with_casts(dtype: torch.dtype) -> None:
    x = torch.randn(6, 128).to(dtype)
    weight = (torch.rand(128) + 0.5).to(dtype)
    (y,) = run_rows(rms_norm_region(str(dtype).removeprefix("torch.")), [x, weight], [1e-6], [dtype])
    h = x.double()
    expected = weight.double() * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype).double()
    # A mean of squares (relative error) under a square root; rounded to the dtype before the weight.
    within(y, expected, 128, 2 * expected.abs(), rounded=expected.abs())


def test_a_row_output_and_an_element_output(small_blocks) -> None:
    """mean (keepdim, one value a row) and x - mean (one value an element), looped."""
    nodes = (Node("mean", ("x", -1, True), "m", 50, (1, 2)), Node("sub", ("x", "m"), "centered", 51))
    region = Region(
        "centered", "m.py", "f", 50, 51, (Input("x", "x", True),), nodes, (Output("m", "m"), Output("centered", "c"))
    )
    x = torch.randn(3, 4, 50)
    m, centered = run_rows(region, [x], [], [torch.float32, torch.float32])
    mean = x.double().mean(-1, keepdim=True)
    magnitude = tolerances.magnitude("mean", x.double(), -1, mean, torch.float32)  # centered carries the mean's error
    within(m, mean, 50, magnitude)
    within(centered, x.double() - mean, 50, magnitude)


# -- the kernel text ----------------------------------------------------------------------------------------
def test_kernel_text_is_readable_and_black_formatted() -> None:
    source = render_triton(
        attention_region(),
        {20: "        x = scores * self.scale + attention_mask", 21: "        probs = x.softmax(-1)"},
    )
    assert source == black.format_str(source, mode=black.Mode(line_length=120))
    function = ast.parse(source).body[0]
    assert function.name == "attention_probs_kernel"
    arguments = [a.arg for a in function.args.args]
    assert arguments[:4] == ["scores_ptr", "mask_value_ptr", "scale", "probs_out_ptr"]
    assert arguments[-7:] == ["CONTIGUOUS", "LOOPED", "ROWS", "RBLOCK", "scaled_dtype", "masked_dtype", "probs_dtype"]
    assert "    mask_value_ptr,  # input attention_mask\n" in source
    assert "# models/attention.py:21  probs = x.softmax(-1)" in source
    for phase in (
        "# One pass",
        "# Pass 1: the row maximum of masked",
        "# Pass 2: the row sum of exp0",
        "# Pass 3: the element outputs",
    ):
        assert phase in source
    # The strided path divides per row ([ROWS, 1]), never per element.
    assert "index2 = row % outer_size2" in source and "col //" not in source and "col %" not in source


def test_region_values_never_shadow_kernel_names() -> None:
    """Values named like the kernel's locals (`row`, `mask`, `R`, `x_row`) are renamed; the kernel still computes."""
    nodes = (
        Node("mul", ("x", 2.0), "row", 60, (1,)),
        Node("add", ("row", "x"), "x_row", 60),
        Node("softmax", ("x_row", -1), "R", 61, (1,)),
    )
    region = Region(
        "clash", "m.py", "f", 60, 61, (Input("mask", "mask", True), Input("x", "x", True)), nodes, (Output("R", "R"),)
    )
    source = render_triton(region, {})
    assert "row_value = rounded(x * 2.0, row_dtype)" in source and "R_value = " in source
    assert "x_row_value = rounded(row_value + x, x_row_dtype)" in source
    mask, x = torch.randn(3, 10), torch.randn(3, 10)
    (actual,) = run_rows(region, [mask, x], [], [torch.float32])
    expected = torch.softmax(3 * x.double(), -1)
    magnitude = tolerances.magnitude("softmax", expected, -1, expected, torch.float32)
    within(actual, expected, 10, magnitude, rounded=softmax_rounded(expected, 3 * x.double()))


def test_kernel_file_imports_exactly_the_helpers_used() -> None:
    regions = [attention_region(), CASES["amin"].region]
    text = render_triton_file(regions, {}, "_transpile_runtime.triton_support")
    tree = ast.parse(text)
    (imported,) = [node for node in tree.body if isinstance(node, ast.ImportFrom)]
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} & HELPERS
    assert imported.module == "_transpile_runtime.triton_support"
    assert [alias.name for alias in imported.names] == sorted(used)
    helpers = ["accumulate_min", "min_partial", "rounded", "row_min", "widen"]
    assert triton_helpers_used(CASES["amin"].region) == helpers


def test_launch_refuses_int32_overflow_and_skips_empty_work() -> None:
    with pytest.raises(ValueError, match="2\\*\\*31"):
        triton_support.launch_rows(None, [], [], [], 2**20, 2**11, (1, 1, 2**20), [(0, 0, 2**11, 1)], True, {})
    with pytest.raises(ValueError, match="2\\*\\*31"):  # a large stride, few elements
        triton_support.launch_rows(None, [], [], [], 2, 2, (1, 1, 2), [(0, 0, 2**31, 1)], False, {})
    triton_support.launch_rows(None, [], [], [], 0, 5, (1, 1, 0), [(0, 0, 5, 1)], True, {})  # no rows: no launch


# -- on a GPU: the same kernels compiled, with their real block sizes ------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_row_kernels_match_torch_on_cuda() -> None:
    check_compiled("tests.test_triton_reductions")


def check_on_cuda() -> None:
    """Every op at one-pass and looped row sizes, special values, layouts and fused regions, on the GPU."""
    assert not INTERPRET
    for op, case in CASES.items():
        for dtype in FLOATS:
            for row_size in (1, 17, 512, 4096, 8192, 70000):
                case.check(random_rows(300 if row_size < 70000 else 3, row_size, dtype, "cuda"))
        if op != "layer_norm" and op not in ("mean", "var", "std"):
            case.check(special_rows(37).cuda())
            case.check(special_rows(20000).cuda())
    scores = torch.randn(4, 12, 256, 256, device="cuda", dtype=torch.bfloat16)
    mask = torch.zeros(4, 1, 1, 256, device="cuda")
    mask[:, ..., 200:] = -math.inf
    (probs,) = run_rows(attention_region(), [scores, mask], [0.125], [torch.bfloat16])
    assert_attention_probs(probs, scores, mask)
    x = torch.randn(64, 700, 5, device="cuda")
    CASES["softmax"].check(x.transpose(1, 2))
    hidden, weight = x.reshape(-1, 1000).bfloat16(), torch.rand(1000, device="cuda").bfloat16()
    (y,) = run_rows(rms_norm_region("bfloat16"), [hidden, weight], [1e-6], [torch.bfloat16])
    h = hidden.double()
    expected = weight.double() * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).bfloat16().double()
    within(y, expected, 1000, 2 * expected.abs(), rounded=expected.abs())
