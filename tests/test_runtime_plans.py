"""Calls the runtime plans a kernel for, beyond one dtype and one shape: a small tree transpiled with
C++ kernels and run beside its original (eager PyTorch), each call's kernel path counted.

- outputs of several shapes in one region (a value computed before a larger input broadcasts in):
  the kernel fills the broadcast shape, the call returns eager's part of it;
- a reduction over a value of lower rank than the iteration space (its dim right-aligned), and a
  region whose values are all 0-dim (one row of one column);
- integer values (after `x.int()`) computed in their integer types, wrapping as torch's; a region whose
  integer ops the C++ kernels do not compute exactly (floor division) gets no C++ kernel;
- integer inputs (an attention mask), converted to the call's floating dtype where eager converts
  them so first, else the original code;
- several floating dtypes in one call: widened to the widest where eager computes every op in it,
  else the original code (eager rounds a half value the kernel would hold as a float).
"""

from __future__ import annotations

import importlib

import pytest

from emit.runtime.cpp_support import find_compiler
from tests.tolerances import unit_roundoff
from tests.transpiled import original_and_transpiled

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C++ compiler")

PACKAGE = "transpiled_plans"
MODEL = """
import torch
from torch import nn


class Narrow(nn.Module):
    def forward(self, x, y):
        u = torch.sigmoid(x * 2.0)
        v = torch.tanh(u + y)
        return v, u


class LowRank(nn.Module):
    def forward(self, x, y):
        t = x.sum(-2, keepdim=True)
        return t * 2.0 + y, t


class Softmax(nn.Module):
    def forward(self, x):
        t = torch.softmax(x, -1)
        return t.sum(-1) * 3.0


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(6))

    def forward(self, x):
        return torch.tanh(x * 2.0) * self.weight


class SignOfComparison(nn.Module):
    def forward(self, z, w):
        t = z <= w
        t.sign_()
        return t


class BoolNumbers(nn.Module):
    def forward(self, x, m):
        return (torch.sigmoid(m) + 0.001).to(x.dtype) * x


class IntegerArithmetic(nn.Module):
    def forward(self, x):
        t = torch.maximum(x.int() * 2 - 7, x.int().abs())
        return t.float() + x


class IntegerClass(nn.Module):
    def forward(self, i, x):
        a = i + 1
        b = torch.maximum(a * 3 - i, a).relu()
        return a, b, b * 0.5 + x


class IntegerClassPower(nn.Module):
    def forward(self, i, x):
        a = i + 1
        p = a.pow(3) - a
        y = a * 0.5 + x
        return p, y


class HalfRemainder(nn.Module):
    def forward(self, x):
        return torch.remainder(x * 3.0, 1e-3), torch.remainder(x, 0.3) - x


class HalfLogsumexp(nn.Module):
    def forward(self, x):
        return torch.logsumexp(x * 2.0, -1) + 1.0


class ExtendedMask(nn.Module):
    def forward(self, x, mask):
        return (1.0 - mask[:, None, :].to(x.dtype)) * -10000.0 + x


class IntegerInput(nn.Module):
    def forward(self, x, i):
        return torch.sigmoid(i.long().float() + x) * 2.0


class IntegerDivision(nn.Module):
    def forward(self, x):
        return (x.long() // 3).float() * x
"""

# (class, inputs): the last dims broadcast, lower ranks, 0-dim tensors.
CALLS = [
    ("Narrow", lambda: (torch.randn(4, 1), torch.randn(4, 3))),  # u is (4, 1), v (4, 3)
    ("Narrow", lambda: (torch.randn(3), torch.randn(2, 5, 3))),
    ("Narrow", lambda: (torch.randn(()), torch.randn(2, 1))),
    ("LowRank", lambda: (torch.randn(4, 3), torch.randn(2, 4, 3))),  # x.sum(-2) is dim 1 of (2, 4, 3)
    ("LowRank", lambda: (torch.randn(5, 3).t(), torch.randn(2, 1, 5))),
    ("Softmax", lambda: (torch.randn(()),)),
    ("Softmax", lambda: (torch.randn(3, 7),)),
]


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    with original_and_transpiled(tmp_path_factory.mktemp("plans"), MODEL, PACKAGE, "plans", "plans_original") as pair:
        yield pair


def paths(runtime) -> dict[str, int]:
    """How often the kernels took each path since the last call (and start counting again)."""
    counts: dict[str, int] = {}
    for kernel in runtime.KERNELS:
        for path, n in kernel.counts.items():
            counts[path] = counts.get(path, 0) + n
        kernel.counts.clear()
    return counts


def pair(trees, name: str, weight_dtype: torch.dtype | None = None):
    """The original module `name` and its transpiled twin with the same weights (cast to `weight_dtype`)."""
    original, transpiled = trees
    torch.manual_seed(0)
    expected, model = getattr(original, name)(), getattr(transpiled, name)()
    model.load_state_dict(expected.state_dict())
    if weight_dtype is not None:
        expected, model = expected.to(weight_dtype), model.to(weight_dtype)
    return expected, model


def assert_same(expected_model, model, inputs: tuple) -> None:
    """Equal shapes and dtypes, values within the roundings that differ: a libm function against ATen's
    (tanh, exp: a few units in the last place) and a sum of at most 7 terms in another order (6 u of
    its terms, here of magnitude at most 3): 16 u, relative to max(1, |eager|)."""
    with torch.no_grad():
        expected, actual = expected_model(*inputs), model(*inputs)
    for e, a in zip(expected, actual, strict=True) if isinstance(expected, tuple) else [(expected, actual)]:
        assert (a.shape, a.dtype) == (e.shape, e.dtype)
        bound = 16 * unit_roundoff(e.dtype) if e.dtype.is_floating_point else 0
        torch.testing.assert_close(a, e, rtol=bound, atol=bound)


@pytest.mark.parametrize("name, inputs", CALLS, ids=[f"{name}-{k}" for k, (name, _) in enumerate(CALLS)])
def test_the_kernel_runs_and_matches_eager(trees, name, inputs):
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    paths(runtime)
    assert_same(*pair(trees, name), inputs())
    assert paths(runtime) == {"cpp": 1}


def test_mixed_floating_dtypes(trees):
    """A bfloat16 weight beside a float32 x: eager computes every op in float32. A float16 x beside it: eager
    rounds `x * 2.0` and the tanh to halves and multiplies in float32. Each call binds the kernel's classes
    of values to eager's dtypes (the second one with an instantiation built for it) and runs."""
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    paths(runtime)
    expected, model = pair(trees, "Scale", torch.bfloat16)
    x = torch.randn(5, 6)
    assert_same(expected, model, (x,))
    assert_same(expected, model, (x.half(),))
    assert paths(runtime) == {"cpp": 2}


def test_bool_inputs_read_as_numbers(trees):
    """A bool m read as a number: `sigmoid(m) + 0.001` is float32 in eager, rounded once to x's dtype. The
    kernel converts m to the dtype of its class (float32) at the boundary, exactly, beside a half or a float32
    x, and reads a half m as it is."""
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    paths(runtime)
    expected, model = pair(trees, "BoolNumbers")
    x = torch.randn(5, 6)
    m = torch.rand(5, 6) < 0.5
    assert_same(expected, model, (x.half(), m))
    assert_same(expected, model, (x.half(), m.half()))
    assert_same(expected, model, (x, m))
    assert paths(runtime) == {"cpp": 3}


def test_an_output_with_elements_beside_an_empty_input_falls_back(trees):
    """u = sigmoid(x * 2.0) of a (3,) x beside a (0, 3) y: the kernel's space is empty, u is not: the original
    code computes it (the narrowed view of an empty output raised)."""
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    paths(runtime)
    assert_same(*pair(trees, "Narrow"), (torch.randn(3), torch.randn(0, 3)))
    assert list(paths(runtime)) == ["fallback: an output's shape is not the broadcast of the inputs'"]


def test_half_kernels_build_on_this_cpu(trees):
    """A half region of comparisons: gcc 12 with -march=native on a CPU with AVX512-FP16 emitted masked
    `vmovsh` that binutils 2.40 rejects, and the file's kernels all fell back (cpp_support.flags)."""
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    paths(runtime)
    z, w = torch.randn(4, 33).half(), torch.randn(33).half()
    assert_same(*pair(trees, "SignOfComparison"), (z, w))
    assert paths(runtime) == {"cpp": 1}


def test_integer_values_wrap_as_torchs(trees):
    """`x.int() * 2` of 2e9 wraps to -294967296 in eager; computed in float and converted back it was
    -4e9 rounded to an int32 (wrong). Integer values are computed in their own types."""
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    paths(runtime)
    x = torch.tensor([2e9, -2.1e9, 1.5e9, 3.0, -7.5, 16777217.0, 0.0, -1.0])
    assert_same(*pair(trees, "IntegerArithmetic"), (x,))
    assert paths(runtime) == {"cpp": 1}


def test_values_an_integer_input_keeps_integers_are_computed_in_its_type(trees):
    """`i + 1` of an int64 or int32 input is an integer of its dtype in eager: the kernel's class of it is bound
    to that dtype on the call and computed exactly, wrapping over the whole range; the same kernel takes
    float inputs. A power is not exact in the kernel: a call that makes its class integers falls back."""
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    paths(runtime)
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.int64, torch.int32):
        info = torch.iinfo(dtype)
        i = torch.randint(info.min, info.max, (4, 9), generator=g, dtype=torch.int64).to(dtype)
        assert_same(*pair(trees, "IntegerClass"), (i, torch.randn(4, 9)))
    assert_same(*pair(trees, "IntegerClass"), (torch.randn(4, 9), torch.randn(9)))
    assert paths(runtime) == {"cpp": 3}
    assert_same(*pair(trees, "IntegerClassPower"), (torch.randint(-9, 9, (5,)), torch.randn(5)))
    assert paths(runtime) == {"fallback: no C++ kernel: pow of integers": 1}
    assert_same(*pair(trees, "IntegerClassPower"), (torch.randn(5), torch.randn(5)))
    assert paths(runtime) == {"cpp": 1}


def test_a_python_divisor_takes_the_tensors_dtype_first(trees):
    """torch converts remainder's Python-number divisor to the tensor's dtype (1e-3 to half(1e-3)), unlike
    add's or mul's scalar: the kernel does too, so the results are eager's bit for bit."""
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    paths(runtime)
    x = torch.linspace(-3, 3, 997)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        expected_model, model = pair(trees, "HalfRemainder")
        with torch.no_grad():
            for e, a in zip(expected_model(x.to(dtype)), model(x.to(dtype)), strict=True):
                assert torch.equal(a, e), dtype
    assert paths(runtime) == {"cpp": 3}


def test_logsumexp_rounds_what_eagers_composite_rounds(trees):
    """torch's logsumexp is tensor ops: a half's x - max, exp, sum and log are each rounded to half. The kernel
    rounds them too, so it is eager's value (without, 10% of these rows were a half ulp off). A sum in
    another order may still land on the other side of a rounding boundary, rarely: at most 2 of 256."""
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    paths(runtime)
    x = torch.randn(256, 37, generator=torch.Generator().manual_seed(0))
    for dtype in (torch.float16, torch.bfloat16):
        expected_model, model = pair(trees, "HalfLogsumexp")
        with torch.no_grad():
            expected, actual = expected_model(x.to(dtype)), model(x.to(dtype))
        assert actual.dtype == expected.dtype and int((actual != expected).sum()) <= 2, dtype
    assert paths(runtime) == {"cpp": 2}


def test_integer_ops_the_kernels_cannot_compute_exactly_run_the_original(trees):
    """Floor division of integers: no C++ kernel (the kernel file says why), the original code runs."""
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    paths(runtime)
    assert_same(*pair(trees, "IntegerDivision"), (torch.tensor([2e9, -7.5, 5.0]),))
    assert paths(runtime) == {"fallback: no C++ kernel: floordiv of integers": 1}


def test_integer_inputs_converted_as_eager_converts_them(trees):
    """An int64 attention mask made a float (transformers' extended mask): the kernel reads it converted to
    x's dtype at the boundary, as eager converts it first. `i.long().float()` reads i as an integer first:
    converted at the boundary, 2**40 + 1 would become 2**40 in float32, so the kernel reads it as int64."""
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    paths(runtime)
    mask = torch.tensor([[1, 1, 0, 2**40 + 1], [0, 1, 1, 1]])
    for dtype in (torch.float32, torch.bfloat16):
        assert_same(*pair(trees, "ExtendedMask"), (torch.randn(2, 3, 4, dtype=dtype), mask))
    assert paths(runtime) == {"cpp": 2}
    assert_same(*pair(trees, "IntegerInput"), (torch.randn(4), mask[0]))
    assert paths(runtime) == {"cpp": 1}
