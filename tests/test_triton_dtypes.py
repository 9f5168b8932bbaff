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
from tests.test_triton_backend import INTERPRET  # noqa: F401  # isort: skip

import torch  # noqa: E402

from tests.tolerances import assert_within, layer_norm_magnitude  # noqa: E402
from tests.transpiled import original_and_transpiled  # noqa: E402

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
