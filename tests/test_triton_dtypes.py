"""Triton kernels on calls whose floating inputs have several dtypes, against eager PyTorch.

A small tree is transpiled and run beside its original with the Triton backend forced on CPU
tensors, under Triton's interpreter. Eager rounds each op's result to its dtype: a half input
times a Python float is a half, that half plus a float32 buffer a float32. The kernels compute
in float32 and round each value to the dtype the eager reference gives it on the call, so the
results equal eager's bit for bit wherever eager rounds each op once (reductions: within the
error bound of their summation order). Each test checks that the kernel ran (runtime counters).
"""

from __future__ import annotations

import importlib

import pytest

# First: it turns Triton's interpreter on before triton is imported (or skips, as this module must).
from tests.test_triton_backend import INTERPRET, run_kernel  # noqa: F401  # isort: skip
from tests.test_triton_reductions import run_rows  # noqa: E402  # isort: skip

import torch  # noqa: E402

from emit.runtime import triton_support  # noqa: E402
from tests.cuda import check_compiled  # noqa: E402
from tests.tolerances import assert_within, layer_norm_magnitude  # noqa: E402
from tests.transpiled import original_and_transpiled  # noqa: E402
from transpiler.compiler.ir import Input, Node, Output, Region  # noqa: E402

PACKAGE = "transpiled_triton_dtypes"
MODEL = """
import torch
from torch import nn


class ScaleShift(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("shift", torch.randn(6))

    def forward(self, x):
        return x * 1.1 + self.shift


class TwoHalves(nn.Module):
    def forward(self, a, b):
        return (a * 1.1 + b * 1.3) * 0.7


class RowMaximum(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(9))

    def forward(self, x):
        return (x * 1.1 + self.bias).amax(-1)


class Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        nn.init.uniform_(self.norm.weight, 0.5, 1.5)
        nn.init.uniform_(self.norm.bias, -0.1, 0.1)

    def forward(self, x):
        return self.norm(x * 3.0)


class IntegerPlusHalf(nn.Module):
    def forward(self, x, i):
        return (i + x) * 2.0


class FloatPower(nn.Module):
    def forward(self, x, i):
        return i ** 2.0 * x + 1.0


class Double(nn.Module):
    def forward(self, x):
        return (x.double() * 0.1).sqrt() + x


class TinyRemainder(nn.Module):
    def forward(self, x):
        return torch.remainder(x * 3.0, 1e-3) + x


class HalfLogsumexp(nn.Module):
    def forward(self, x):
        return torch.logsumexp(x * 2.0, -1) + 1.0


class FloatScalar(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 0.1

    def forward(self, x):
        return x * self.scale + 1.0
"""


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    base = tmp_path_factory.mktemp("triton_dtypes")
    with original_and_transpiled(base, MODEL, PACKAGE, "models", "triton_dtypes_original") as pair:
        yield pair


@pytest.fixture
def runtime(trees, monkeypatch):
    """The tree's runtime with CPU tensors sent to the Triton kernels (as TRANSPILE_BACKEND=triton does)."""
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    monkeypatch.setattr(runtime, "_FORCED", "triton")
    runtime._backend.cache_clear()
    for kernel in runtime.KERNELS:
        kernel.counts.clear()
        kernel._plans.clear()
    yield runtime
    runtime._backend.cache_clear()


def run(trees, runtime, name: str, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.nn.Module]:
    """(eager's result, the transpiled module's, the original module) of module `name` on `inputs`; the kernel
    must have run."""
    original, transpiled = trees
    torch.manual_seed(0)
    expected_module, module = getattr(original, name)(), getattr(transpiled, name)()
    module.load_state_dict(expected_module.state_dict())
    with torch.no_grad():
        expected, actual = expected_module(*inputs), module(*inputs)
    counts = {path: n for kernel in runtime.KERNELS for path, n in kernel.counts.items()}
    assert counts == {"triton": 1}, counts
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    return expected, actual, expected_module


def values(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    """Values whose products with 1.1 and 1.3 round differently in half, bfloat16 and float32."""
    return (torch.linspace(-30.0, 30.0, torch.Size(shape).numel()).reshape(shape) + 0.0137).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_a_narrow_input_beside_a_float32_buffer(trees, runtime, dtype):
    """`x * 1.1` is a half (bfloat16) in eager, then widened to add the float32 buffer: float32."""
    expected, actual, _ = run(trees, runtime, "ScaleShift", values(5, 6, dtype=dtype))
    assert expected.dtype == torch.float32
    assert torch.equal(actual, expected)


def test_bfloat16_beside_float16_gives_float32(trees, runtime):
    """Each product rounded to its input's dtype, their sum and what follows in float32."""
    a, b = values(4, 6, dtype=torch.bfloat16), values(6, dtype=torch.float16).flip(0)
    expected, actual, _ = run(trees, runtime, "TwoHalves", a, b)
    assert expected.dtype == torch.float32
    assert torch.equal(actual, expected)


def test_a_reduction_of_a_half_value_plus_a_float32_parameter(trees, runtime):
    expected, actual, _ = run(trees, runtime, "RowMaximum", values(3, 4, 9, dtype=torch.float16))
    assert expected.dtype == torch.float32
    assert torch.equal(actual, expected)


def test_layer_norm_of_a_bfloat16_input_with_a_float32_weight(trees, runtime):
    """Eager holds `x * 3.0` and the norm's result in bfloat16 (computed in float32): so does the kernel,
    within the error bound of its summation order."""
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    expected, actual, module = run(trees, runtime, "Norm", x)
    assert expected.dtype == torch.bfloat16
    norm = module.norm
    weight, bias = norm.weight.detach().double(), norm.bias.detach().double()
    h = (x * 3.0).double()  # exact: the bfloat16 product, as eager rounds it
    wide = torch.nn.functional.layer_norm(h, (16,), weight, bias, norm.eps)
    magnitude, rounded = layer_norm_magnitude(h, weight, bias, wide, norm.eps)
    assert_within(actual, wide, 16, magnitude, rounded=rounded)
    assert_within(expected, wide, 16, magnitude, rounded=rounded)  # the bound holds for eager too


def test_an_integer_to_a_float_power_is_a_float(trees, runtime):
    """`i ** 2.0` of an int32 is float32 in eager: 100000 squared is 1e10, not an int32 that wrapped."""
    x, i = torch.ones(3), torch.tensor([100000, 5, -70000], dtype=torch.int32)
    expected, actual, _ = run(trees, runtime, "FloatPower", x, i)
    assert torch.equal(actual, expected)


def test_an_integer_that_eager_rounds_to_half_first_runs_the_original(trees, runtime):
    """`i + x_half` rounds the int64 2049 to the half 2048 before adding 1 (eager: 4096 after doubling); the
    kernel would add exactly and round the sum (4100). Such calls take the original code."""
    original, transpiled = trees
    x, i = torch.ones(3, dtype=torch.float16), torch.tensor([2049, 5, -3])
    expected, actual = original.IntegerPlusHalf()(x, i), transpiled.IntegerPlusHalf()(x, i)
    assert torch.equal(actual, expected) and expected[0].item() == 4096
    counts = {path: n for kernel in runtime.KERNELS for path, n in kernel.counts.items()}
    assert counts == {"fallback: an integer that eager rounds to half or bfloat16 before an op": 1}


# -- float64 ----------------------------------------------------------------------------------------
def test_a_float64_value_runs_in_float64(trees, runtime):
    """`(x.double() * 0.1).sqrt() + x`: eager computes in float64 with the double 0.1; so does the kernel."""
    x = values(4, 7, dtype=torch.float32).abs()
    expected, actual, _ = run(trees, runtime, "Double", x)
    assert expected.dtype == torch.float64
    assert torch.equal(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_a_python_divisor_takes_the_tensors_dtype_first(trees, runtime, dtype):
    """torch converts remainder's Python-number divisor to the tensor's dtype (1e-3 to half(1e-3)); so does
    the kernel (`scalar_in`): bit for bit eager's, where the divisor in float32 would leave other remainders."""
    expected, actual, _ = run(trees, runtime, "TinyRemainder", values(5, 6, dtype=dtype))
    assert torch.equal(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_logsumexp_rounds_what_eagers_composite_rounds(trees, runtime, dtype):
    """A half's logsumexp is half ops in eager (x - max, exp, sum, log each rounded); so in the kernel: at most
    2 of 256 rows a half ulp off (a sum in another order at a rounding boundary), not 10% as without."""
    x = torch.randn(256, 37, generator=torch.Generator().manual_seed(0)).to(dtype)
    expected, actual, _ = run(trees, runtime, "HalfLogsumexp", x)
    assert int((actual != expected).sum()) <= 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_a_float_scalar_beside_float64_values_runs_the_original(trees, runtime, dtype):
    """Triton passes the Python float 0.1 to a kernel as a float32 (0.100000001): float64 calls take the original
    code; float32 calls, where torch rounds 0.1 to a float32 too, run the kernel."""
    original, transpiled = trees
    x = values(4, 7, dtype=dtype)
    assert torch.equal(transpiled.FloatScalar()(x), original.FloatScalar()(x))
    counts = {path: n for kernel in runtime.KERNELS for path, n in kernel.counts.items()}
    reason = "fallback: a scalar argument beside float64 values (Triton passes a Python float as a float32)"
    assert counts == ({reason: 1} if dtype == torch.float64 else {"triton": 1})


def region_of(*nodes: Node, inputs: tuple[str, ...] = ("x",), scalars: tuple[str, ...] = ()) -> Region:
    """The nodes as a region of tensor `inputs` and Python `scalars`; every node's value an output."""
    items = tuple(Input(name, name, True) for name in inputs) + tuple(Input(name, name, False) for name in scalars)
    outputs = tuple(Output(node.out, node.out) for node in nodes)
    return Region("f64", "test.py", "f", 1, len(nodes), items, nodes, outputs)


def float64_values(device: str = "cpu") -> torch.Tensor:
    """float64 values no float32 holds (1 + 2**-40), huge and tiny ones, NaN and infinities."""
    special = [1 + 2**-40, 1e300, -1e300, 1e-300, 0.1, float("nan"), float("inf"), -float("inf"), -0.0, 7.3]
    values = special + torch.linspace(-50, 50, 22, dtype=torch.float64).tolist()
    return torch.tensor(values, dtype=torch.float64, device=device)


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Bit for bit, NaN where eager has NaN."""
    assert actual.dtype == expected.dtype
    assert torch.equal(actual.nan_to_num(7.0), expected.nan_to_num(7.0)), (actual, expected)
    assert torch.equal(actual.isnan(), expected.isnan())


def test_float64_ops_compute_as_eager(device: str = "cpu"):
    """Constants in the op's dtype (the double 0.1), IEEE square root and division, Python's floor division,
    and nan_to_num's float64 bounds: bit for bit."""
    nodes = (
        Node("mul", ("x", 0.1), "scaled", 1, (1,)),
        Node("sqrt", ("x",), "root", 2),
        Node("floordiv", ("x", 0.3), "floored", 3, (1,)),
        Node("div", ("x", 3.0), "third", 4, (1,)),
        Node("nan_to_num", ("x", 0.0, None, None), "finite", 5, (1, 2, 3)),
    )
    x = float64_values(device)
    # IEEE division by a tensor: CUDA's eager divides by a Python scalar as a product with its reciprocal.
    expected = (x * 0.1, x.sqrt(), x // 0.3, x / torch.full_like(x, 3.0), torch.nan_to_num(x, 0.0))
    actual = run_kernel(region_of(*nodes), [x], [], [e.dtype for e in expected])
    assert all(e.dtype == torch.float64 for e in expected)
    for a, e in zip(actual, expected, strict=True):
        assert_same(a, e)


def test_float64_rounds_to_half_and_bfloat16_through_float32(device: str = "cpu"):
    """1 + 2**-11 + 2**-40 lies just above the midpoint of two halves, but torch rounds a float64 to float32 first
    (c10::Half is made from a float): to the midpoint, then to even, down. The kernel rounds as torch does."""
    midpoints = [1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40, -(1 + 2**-11 + 2**-40), 65520.0, 2**-25 + 2**-60]
    x = torch.cat([float64_values(device), torch.tensor(midpoints, dtype=torch.float64, device=device)])
    nodes = (Node("to", ("x", "float16"), "half", 1, (1,)), Node("to", ("x", "bfloat16"), "brain", 2, (1,)))
    expected = (x.half(), x.bfloat16())
    assert expected[0][-5] == 1.0 and expected[1][-4] == 1.0  # rounded once, they would be above 1
    actual = run_kernel(region_of(*nodes), [x], [], [e.dtype for e in expected])
    for a, e in zip(actual, expected, strict=True):
        assert_same(a, e)


@pytest.mark.parametrize("looped", [False, True], ids=["one pass", "looped"])
def test_float64_rows_accumulate_in_float64(looped, monkeypatch):
    """Rows of 2**25 + 1 (no float32 holds it): sums exact in float64, a softmax within float64's bound."""
    if looped:
        monkeypatch.setattr(triton_support, "MAX_ONE_PASS", 16)
        monkeypatch.setattr(triton_support, "LOOP_BLOCK", 16)
    x = torch.full((3, 37), 2.0**25 + 1, dtype=torch.float64)
    x[1] = torch.linspace(-3, 3, 37, dtype=torch.float64) + 2**-40
    exact = x[[0, 2]]  # sums of integers below 2**53: exact in any order
    (total,) = run_rows(region_of(Node("sum", ("x", -1, True), "total", 1, (1, 2))), [exact], [], [torch.float64])
    assert torch.equal(total, exact.sum(-1, keepdim=True))
    (probabilities,) = run_rows(region_of(Node("softmax", ("x", -1), "p", 1, (1,))), [x[1:]], [], [torch.float64])
    expected = torch.softmax(x[1:], -1)
    torch.testing.assert_close(probabilities, expected, rtol=8 * 37 * torch.finfo(torch.float64).eps, atol=0)


# -- on a GPU: the same kernels compiled ---------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_float64_kernels_match_torch_on_cuda() -> None:
    check_compiled("tests.test_triton_dtypes")


def check_on_cuda() -> None:
    """The float64 tests' kernels compiled: ops, casts to half and bfloat16, rows of 37 and 20000 columns."""
    assert not triton_support.INTERPRETED
    test_float64_ops_compute_as_eager("cuda")
    test_float64_rounds_to_half_and_bfloat16_through_float32("cuda")
    for row_size in (37, 20000):
        x = torch.full((3, row_size), 2.0**25 + 1, dtype=torch.float64, device="cuda")
        x[1] = torch.linspace(-3, 3, row_size, dtype=torch.float64, device="cuda") + 2**-40
        exact = x[[0, 2]]
        (total,) = run_rows(region_of(Node("sum", ("x", -1, True), "total", 1, (1, 2))), [exact], [], [torch.float64])
        assert torch.equal(total, exact.sum(-1, keepdim=True))
        (p,) = run_rows(region_of(Node("softmax", ("x", -1), "p", 1, (1,))), [x[1:]], [], [torch.float64])
        eps = torch.finfo(torch.float64).eps
        torch.testing.assert_close(p, torch.softmax(x[1:], -1), rtol=8 * row_size * eps, atol=0)
