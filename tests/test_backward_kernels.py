"""Training through generated backward kernels: a transpiled model's gradients against eager autograd's.

Each fused region with a derivative (transpiler/compiler/autodiff.py) gets a `<region>_backward` kernel;
under autograd the runtime records the forward kernel as one node (emit/runtime `_Differentiated`) whose
backward runs that kernel. These tests train small models side by side with their originals: outputs,
input and parameter gradients (float64 to rounding, float32 and bfloat16 within what eager's own error
against float64 allows), which inputs get gradients, what the node saves, and the refusals.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.transpiled import original_and_transpiled

torch = pytest.importorskip("torch")

SOURCE = """\
import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = RMSNorm(d)
        self.ln = nn.LayerNorm(d)
        self.up = nn.Linear(d, 2 * d)
        self.down = nn.Linear(2 * d, d)

    def forward(self, x, bias):
        h = self.up(self.norm(x))
        h = F.silu(h) * h
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h * h * h)))
        y = self.down(h)
        p = torch.softmax(y * 0.5 + bias, dim=-1)
        return self.ln(x + y * p)


class Gate(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, d))

    def forward(self, x, keep, steps):
        h = torch.where(keep, x * torch.sigmoid(x), x * 0.1) * self.scale
        return h + steps


class Standardise(nn.Module):
    def forward(self, x):
        return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)


class InPlace(nn.Module):
    def forward(self, x):
        y = x * 2.0
        y.add_(1.0)
        return torch.tanh(y) * x


class TwoOutputs(nn.Module):
    def forward(self, x, y):
        t = torch.tanh(y) * 2.0
        u = 3.0 - x * (y > 0)
        return u, t


class Rounded(nn.Module):
    def forward(self, x, y, scale):
        t = torch.round(x - y)
        return t / scale + x * 2.0


class Chosen(nn.Module):
    def __init__(self, d, act):
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, d))
        self.act = act()

    def forward(self, x):
        h = x * 3.0 + self.bias
        h = self.act(h)
        return h * 0.5 - x


class UpdatedLater(nn.Module):
    def forward(self, x):
        t = torch.tanh(x) * 2.0
        x.clamp_(min=-0.5)
        return t + x


class Dropped(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dense = nn.Linear(d, d)
        self.drop = nn.Dropout(0.25)
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        h = self.dense(x)
        h = self.drop(h)
        return self.ln(h + x)


def inv_attractor(dx, alpha=300, gamma=2):
    # ZoeDepth's: an exponent given as a Python number, so its derivative's `gamma == 0` is one.
    return dx.div(1 + alpha * dx.pow(gamma))


class Squashed(nn.Module):
    def __init__(self, alpha, gamma):
        super().__init__()
        self.alpha = alpha
        self.gamma = gamma

    def forward(self, x):
        return inv_attractor(x, self.alpha, self.gamma) * 2.0


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    def forward(self, q, cos, sin):
        cos = cos.unsqueeze(1)
        sin = sin.unsqueeze(1)
        return (q * cos) + (rotate_half(q) * sin)


class DeadStatistics(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.Sigmoid()

    def forward(self, x, y):
        t1 = torch.std(y, -1, correction=0, keepdim=True)
        t2 = t1 ** 2
        t4 = t2.to(t2.dtype)
        t4 = -t1
        return self.act(x)


class SmallerOutput(nn.Module):
    def forward(self, x, w):
        h = torch.tanh(x) + 1.0
        y = h * w * 2.0
        return h, y
"""


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """(original module, transpiled module, the transpiled tree's runtime)."""
    base = tmp_path_factory.mktemp("backward")
    with original_and_transpiled(base, SOURCE, "transpiled_backward", "models", "original_backward") as pair:
        original, transpiled = pair
        yield original, transpiled, importlib.import_module("transpiled_backward._transpile_runtime")


def twins(modules, name, *args, dtype=torch.float64):
    original, transpiled, _ = modules
    torch.manual_seed(0)
    a = getattr(original, name)(*args).to(dtype)
    b = getattr(transpiled, name)(*args).to(dtype)
    b.load_state_dict(a.state_dict())
    return a, b


def step(module, inputs, cotangent):
    """Outputs and gradients of one backward pass: each floating input's, then each parameter's."""
    leaves = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    out = module(*leaves)
    out.backward(cotangent)
    return out.detach(), [t.grad for t in leaves], [p.grad for p in module.parameters()]


def backward_counts(runtime) -> dict[str, int]:
    """Calls of every backward kernel, by path."""
    total: dict[str, int] = {}
    for kernel in runtime.KERNELS:
        if kernel.name.endswith("_backward"):
            for path, n in kernel.counts.items():
                total[path] = total.get(path, 0) + n
    return total


def block_inputs(dtype):
    torch.manual_seed(1)
    x = torch.randn(3, 5, 16, dtype=dtype).requires_grad_()
    bias = torch.randn(16, dtype=dtype).requires_grad_()  # broadcast: its gradient is summed over (3, 5)
    return [x, bias]


def test_a_training_step_gives_eager_gradients_in_float64(modules):
    runtime = modules[2]
    before = backward_counts(runtime).get("cpp", 0)
    a, b = twins(modules, "Block", 16)
    inputs = block_inputs(torch.float64)
    cotangent = torch.randn(3, 5, 16, dtype=torch.float64)
    expected, actual = step(a, inputs, cotangent), step(b, inputs, cotangent)
    torch.testing.assert_close(actual[0], expected[0], rtol=1e-12, atol=1e-12)
    for got, want in zip(actual[1] + actual[2], expected[1] + expected[2]):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # The norm, the activations and softmax + layer norm: three backward kernels ran in C++.
    assert backward_counts(runtime).get("cpp", 0) >= before + 3, backward_counts(runtime)


@pytest.mark.parametrize("gamma", [2.0, 0.0])
def test_a_derivative_conditioned_on_a_python_number_trains_through_its_kernel(modules, gamma):
    """The backward's eager reference (the dtype probe, and the fallback) takes `where(gamma == 0, ...)` with a
    Python bool for a condition: found by the families' gradients (zoedepth, which raised)."""
    runtime = modules[2]
    before = backward_counts(runtime).get("cpp", 0)
    a, b = twins(modules, "Squashed", 10.0, gamma)
    x = (torch.rand(4, 8, dtype=torch.float64) + 0.5).requires_grad_()
    cotangent = torch.randn(4, 8, dtype=torch.float64)
    expected, actual = step(a, [x], cotangent), step(b, [x], cotangent)
    torch.testing.assert_close(actual[1], expected[1], rtol=1e-12, atol=1e-12)
    assert backward_counts(runtime).get("cpp", 0) == before + 1, backward_counts(runtime)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_low_precision_gradients_are_as_near_float64_as_eager(modules, dtype):
    """Against float64, the kernels' gradients err by no more than eager's own (twice, plus a few ulps of the
    largest gradient): the backward kernels compute in float32 and round once, eager rounds after every op."""
    exact_module, _ = twins(modules, "Block", 16)
    a, b = twins(modules, "Block", 16, dtype=dtype)
    inputs = block_inputs(torch.float64)
    cotangent = torch.randn(3, 5, 16, dtype=torch.float64)
    exact = step(exact_module, inputs, cotangent)
    low = [t.detach().to(dtype).requires_grad_() for t in inputs]
    expected, actual = step(a, low, cotangent.to(dtype)), step(b, low, cotangent.to(dtype))
    eps = torch.finfo(dtype).eps
    for got, want, truth in zip(actual[1] + actual[2], expected[1] + expected[2], exact[1] + exact[2]):
        assert got.dtype == want.dtype == dtype
        eager_error = (want.double() - truth).abs().max()
        bound = 2 * eager_error + 8 * eps * truth.abs().max()
        assert (got.double() - truth).abs().max() <= bound


def test_only_the_inputs_that_require_grad_get_one(modules):
    a, b = twins(modules, "Block", 16)
    for module in (a, b):
        module.requires_grad_(False)
    x, bias = block_inputs(torch.float64)
    bias.requires_grad_(False)
    cotangent = torch.ones(3, 5, 16, dtype=torch.float64)
    expected, actual = step(a, [x, bias], cotangent), step(b, [x, bias], cotangent)
    assert actual[1][1] is None and all(p is None for p in actual[2])
    torch.testing.assert_close(actual[1][0], expected[1][0], rtol=1e-10, atol=1e-12)


def test_bool_and_integer_inputs_get_no_gradient_and_the_rest_do(modules):
    runtime = modules[2]
    a, b = twins(modules, "Gate", 8)
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    keep = torch.rand(4, 8) > 0.5
    steps = torch.arange(8)  # int64, broadcast
    before = backward_counts(runtime).get("cpp", 0)
    expected = step(a, [x, keep, steps], torch.ones(4, 8, dtype=torch.float64))
    actual = step(b, [x, keep, steps], torch.ones(4, 8, dtype=torch.float64))
    torch.testing.assert_close(actual[0], expected[0], rtol=1e-12, atol=1e-14)  # sigmoid: an ulp apart
    assert actual[1][1] is None and actual[1][2] is None
    torch.testing.assert_close(actual[1][0], expected[1][0], rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(actual[2][0], expected[2][0], rtol=1e-12, atol=1e-14)
    assert backward_counts(runtime).get("cpp", 0) == before + 1


def test_reductions_with_a_correction_and_the_row_length(modules):
    a, b = twins(modules, "Standardise")
    x = (torch.randn(6, 33, dtype=torch.float64) * 3 + 1).requires_grad_()
    cotangent = torch.randn(6, 33, dtype=torch.float64)
    expected, actual = step(a, [x], cotangent), step(b, [x], cotangent)
    torch.testing.assert_close(actual[1][0], expected[1][0], rtol=1e-10, atol=1e-12)


def test_the_node_saves_the_inputs_only(modules):
    _, b = twins(modules, "Standardise")
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    out = b(x)
    saved = out.grad_fn.saved_tensors
    assert len(saved) == 1 and saved[0].data_ptr() == x.data_ptr()  # nothing the kernel computed is kept


def test_a_second_derivative_raises_a_clear_error(modules):
    _, b = twins(modules, "Standardise")
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(b(x).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        grad.sum().backward()


def test_an_input_changed_before_backward_raises_as_in_eager(modules):
    for module in twins(modules, "Standardise"):
        x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
        y = x * 1.0  # a non-leaf the forward saves
        out = module(y)
        y.mul_(2.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


def test_a_region_updating_in_place_keeps_the_original_code_under_autograd(modules):
    runtime = modules[2]
    a, b = twins(modules, "InPlace")
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    kernels = [k for k in runtime.KERNELS if k.source.endswith(":53-55")]
    assert kernels and not any(k.gradients for k in kernels)
    expected, actual = step(a, [x], torch.ones(4, 8, dtype=torch.float64)), step(
        b, [x], torch.ones(4, 8, dtype=torch.float64)
    )
    torch.testing.assert_close(actual[1][0], expected[1][0], rtol=0, atol=0)
    assert kernels[0].counts["fallback: autograd needs the original code"] >= 1


def test_a_region_whose_input_is_updated_in_place_later_keeps_the_original_code_under_autograd(modules):
    """Eager's tanh saves its result, so clamping x afterwards leaves its backward valid; the node would save x
    and autograd would raise (the CUDA fuzzer's seed 19231). The region has no backward: the source runs."""
    runtime = modules[2]
    line = SOURCE.splitlines().index("        t = torch.tanh(x) * 2.0") + 1
    (kernel,) = [k for k in runtime.KERNELS if k.source.endswith(f":{line}")]
    assert kernel.gradients is None
    a, b = twins(modules, "UpdatedLater")
    x = torch.randn(4, 8, dtype=torch.float64)
    y = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    results = []
    for module in (a, b):
        leaf = y.detach().clone().requires_grad_()
        inner = leaf * 1.0  # a non-leaf: clamp_ may update it
        out = module(inner + x)
        out.backward(torch.ones_like(out))
        results.append((out.detach(), leaf.grad))
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)
    assert kernel.counts["fallback: autograd needs the original code"] >= 1


def test_dropout_in_training_draws_eagers_masks_and_the_norm_after_it_trains_through_its_kernel(modules):
    """Dropout stays eager: under one seed the transpiled model drops the same elements as the original, and the
    add + layer norm after it runs its forward and backward kernels; its gradients equal eager's (float64)."""
    runtime = modules[2]
    a, b = twins(modules, "Dropped", 16)
    a.train(), b.train()
    before = backward_counts(runtime).get("cpp", 0)
    x = torch.randn(4, 6, 16, dtype=torch.float64)
    cotangent = torch.randn(4, 6, 16, dtype=torch.float64)
    results = []
    for module in (a, b):
        torch.manual_seed(7)
        results.append(step(module, [x.requires_grad_()], cotangent))
    (out_a, grads_a, params_a), (out_b, grads_b, params_b) = results
    assert not torch.equal(out_a, a.ln(a.dense(x) + x))  # dropout dropped something
    torch.testing.assert_close(out_b, out_a, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads_b + params_b, grads_a + params_a):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert backward_counts(runtime).get("cpp", 0) == before + 1, backward_counts(runtime)


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_activation_checkpointing_recomputes_through_the_kernels(modules, reentrant):
    """`torch.utils.checkpoint` frees the block's saved tensors and reruns its forward in the backward: the
    kernels' nodes are recorded again and give eager's gradients. The dropout block too: checkpointing restores
    the RNG state before the recomputation, so the eager dropout between the kernels draws the same mask."""
    runtime = modules[2]
    for name in ("Block", "Dropped"):
        a, b = twins(modules, name, 16)
        a.train(), b.train()
        inputs = block_inputs(torch.float64)[:1] if name == "Dropped" else block_inputs(torch.float64)
        cotangent = torch.randn(3, 5, 16, dtype=torch.float64)
        before = backward_counts(runtime).get("cpp", 0)
        results = []
        for module in (a, b):
            leaves = [t.detach().clone().requires_grad_() for t in inputs]
            torch.manual_seed(3)
            out = torch.utils.checkpoint.checkpoint(module, *leaves, use_reentrant=reentrant)
            out.backward(cotangent)
            results.append([out.detach(), *(t.grad for t in leaves), *(p.grad for p in module.parameters())])
        for got, want in zip(results[1], results[0]):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        assert backward_counts(runtime).get("cpp", 0) > before, name


def test_tensor_and_module_backward_hooks_see_eagers_gradients(modules):
    """A hook on an input tensor and a module's full backward hook: they run, and see the gradients eager's do."""
    a, b = twins(modules, "Block", 16)
    cotangent = torch.randn(3, 5, 16, dtype=torch.float64)
    seen = []
    for module in (a, b):
        hooked = []
        module.register_full_backward_hook(lambda m, grad_in, grad_out: hooked.append((grad_in[0], grad_out[0])))
        x, bias = [t.detach().clone().requires_grad_() for t in block_inputs(torch.float64)]
        x.register_hook(lambda grad: hooked.append(grad * 2))
        module(x, bias).backward(cotangent)
        seen.append(hooked)
    assert len(seen[1]) == len(seen[0]) == 2
    torch.testing.assert_close(seen[1], seen[0], rtol=1e-10, atol=1e-12)


def rotary_inputs(dtype, transposed=False, shape=(2, 3, 5, 8), tables=None):
    """q [B, H, T, D] (or a transposed view: stride 1 on its last dim all the same), cos and sin [B, T, D] (or
    `tables`) whose halves differ (a real rotary's repeat them: that would hide a swap of sin's halves)."""
    b, h, t, d = shape
    generator = torch.Generator().manual_seed(5)
    q = torch.randn(b, t, h, d, dtype=dtype, generator=generator)
    q = q.transpose(1, 2) if transposed else q.reshape(b, h, t, d)
    cos, sin = (torch.randn(tables or (b, t, d), dtype=dtype, generator=generator) for _ in range(2))
    return [q, cos, sin]


@pytest.mark.parametrize(
    "transposed, shape, tables",
    [
        (False, (2, 3, 5, 8), None),
        (True, (2, 3, 5, 8), None),
        (False, (1, 2, 3, 2), None),  # D = 2: halves of one element
        (True, (3, 4, 7, 64), (1, 7, 64)),  # tables broadcast over the batch
    ],
    ids=["contiguous", "transposed q", "D=2", "broadcast tables"],
)
def test_rotary_embeddings_train_through_their_backward_kernel(modules, transposed, shape, tables):
    """rotate_half's backward reads the gradient times sin at the other half: R(g * sin) = R(g) * S(sin), with S the
    halves exchanged (autodiff.py). Gradients of q, cos and sin equal eager's in float64."""
    runtime = modules[2]
    a, b = twins(modules, "Rotary")
    inputs = [t.requires_grad_() for t in rotary_inputs(torch.float64, transposed, shape, tables)]
    cotangent = torch.randn(*shape, dtype=torch.float64)
    before = backward_counts(runtime).get("cpp", 0)
    expected, actual = step(a, inputs, cotangent), step(b, inputs, cotangent)
    torch.testing.assert_close(actual[0], expected[0], rtol=1e-12, atol=1e-12)
    for got, want in zip(actual[1], expected[1]):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert backward_counts(runtime).get("cpp", 0) == before + 1, backward_counts(runtime)


def test_a_rotary_gradient_not_read_at_stride_1_takes_the_reference(modules):
    """The backward kernel loads the gradient at the other half: a gradient whose last dim is not at stride 1 (here
    a transposed cotangent) takes the backward's eager reference, counted, with eager's gradients."""
    runtime = modules[2]
    a, b = twins(modules, "Rotary")
    inputs = [t.requires_grad_() for t in rotary_inputs(torch.float64)]
    cotangent = torch.randn(2, 3, 8, 5, dtype=torch.float64).transpose(-1, -2)
    (kernel,) = [k for k in runtime.KERNELS if k.shifted]
    expected, actual = step(a, inputs, cotangent), step(b, inputs, cotangent)
    for got, want in zip(actual[1], expected[1]):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert any("other half" in reason for reason in kernel.counts), dict(kernel.counts)


def test_an_output_requires_grad_only_where_an_input_it_is_computed_from_does(modules):
    """As in eager: `u` is computed from y only through a comparison, so with x frozen it requires no grad;
    `t` does. (A kernel's outputs all requiring grad was the fuzzer's "extra gradient", seeds 1023, 19089.)"""
    runtime = modules[2]
    (kernel,) = [k for k in runtime.KERNELS if k.source.endswith(":60-61") and k.gradients]
    assert kernel.gradients is not None
    before = kernel.counts.get("cpp", 0)
    a, b = twins(modules, "TwoOutputs")
    x, y = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    for module in (a, b):
        u, t = module(x, y)
        assert not u.requires_grad and u.grad_fn is None
        assert t.requires_grad
    u, t = b(x.requires_grad_(), y)
    assert u.requires_grad and t.requires_grad
    assert kernel.counts.get("cpp", 0) == before + 2


def test_an_input_reached_only_through_a_zero_derivative_gets_zeros(modules):
    """`round(x - y)`: y's gradient is 0, and eager sets `y.grad` to zeros, not None (the CUDA fuzzer's seed 19143)."""
    runtime = modules[2]
    first = SOURCE.splitlines().index("        t = torch.round(x - y)") + 1
    (kernel,) = [k for k in runtime.KERNELS if k.gradients and k.source.endswith(f":{first}-{first + 1}")]
    before = kernel.counts.get("cpp", 0)
    a, b = twins(modules, "Rounded")
    x, y = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64)
    scale = torch.rand(8, dtype=torch.float64) + 0.5
    for inputs in ([x.requires_grad_(), y.requires_grad_(), scale.requires_grad_()], [x, y, scale]):
        expected, actual = step(a, inputs, torch.ones(4, 8, dtype=torch.float64)), step(
            b, inputs, torch.ones(4, 8, dtype=torch.float64)
        )
        for got, want in zip(actual[1], expected[1]):
            assert (got is None) == (want is None)
            if want is not None:
                torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert expected[1][1] is not None and not expected[1][1].any()
    assert kernel.counts.get("cpp", 0) == before + 2


def test_an_input_only_the_fallback_reads_gets_no_gradient(modules):
    """The second region takes `t1` and `t2` (its fallback, the original code, computes the dead `-t1`), but no
    output is computed from them: autograd must not reach them, so `y.grad` stays None as in eager, not zeros
    (the fuzzer's seed 20041)."""
    a, b = twins(modules, "DeadStatistics")
    x, y = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64)
    expected = step(a, [x.requires_grad_(), y.requires_grad_()], torch.ones(4, 8, dtype=torch.float64))
    actual = step(b, [x, y], torch.ones(4, 8, dtype=torch.float64))
    assert expected[1][1] is None and actual[1][1] is None
    torch.testing.assert_close(actual[1][0], expected[1][0], rtol=1e-12, atol=1e-12)
    runtime = modules[2]
    first = SOURCE.splitlines().index("        t4 = t2.to(t2.dtype)") + 1
    (kernel,) = [k for k in runtime.KERNELS if k.gradients and k.source.endswith(f":{first}-{first + 2}")]
    assert kernel.counts.get("cpp", 0) >= 1


@pytest.mark.parametrize("used", ["u", "t"])
def test_an_output_no_loss_reaches_gives_its_inputs_no_gradient(modules, used):
    """`u` is computed from x, `t` from y, by one node: a loss of one of them leaves the other's input's `.grad`
    None, as eager's (whose graph never reaches the unused op), not zeros."""
    runtime = modules[2]
    (kernel,) = [k for k in runtime.KERNELS if k.source.endswith(":60-61") and k.gradients]
    before = kernel.counts.get("cpp", 0)
    a, b = twins(modules, "TwoOutputs")
    grads = []
    for module in (a, b):
        x = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3), requires_grad=True)
        y = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(4), requires_grad=True)
        u, t = module(x, y)
        (u if used == "u" else t).pow(2).sum().backward()
        grads.append((x.grad, y.grad))
    (want_x, want_y), (got_x, got_y) = grads
    assert (got_x is None, got_y is None) == (want_x is None, want_y is None) == (used == "t", used == "u")
    torch.testing.assert_close(
        got_x if used == "u" else got_y, want_x if used == "u" else want_y, rtol=1e-12, atol=1e-12
    )
    assert kernel.counts.get("cpp", 0) == before + 1


@pytest.mark.parametrize("shapes", [((3, 4), (4,)), ((1, 4), (2, 1, 4)), ((4,), (3, 4))], ids=str)
def test_an_output_smaller_than_the_iteration_space_gets_its_gradient_once(modules, shapes):
    """`h` has x's shape and `y = h * w` broadcasts over w's leading dims: autograd adds h's gradient to x's once,
    where the backward kernel, running over y's shape, would add it once per broadcast element (found by
    `transpile verify` in LLaMA's residual and norm). Such calls take the original code under autograd."""
    runtime = modules[2]
    first = SOURCE.splitlines().index("        h = torch.tanh(x) + 1.0") + 1
    (kernel,) = [k for k in runtime.KERNELS if k.gradients and k.source.endswith(f":{first}-{first + 1}")]
    before = dict(kernel.counts)
    a, b = twins(modules, "SmallerOutput")
    grads = []
    for module in (a, b):
        x = torch.randn(shapes[0], dtype=torch.float64, generator=torch.Generator().manual_seed(0), requires_grad=True)
        w = torch.randn(shapes[1], dtype=torch.float64, generator=torch.Generator().manual_seed(1), requires_grad=True)
        h, y = module(x, w)
        (h.sum() * 0.5 + y.sum()).backward()
        grads.append((x.grad, w.grad))
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    ran = kernel.counts.get("cpp", 0) - before.get("cpp", 0)
    assert ran == (1 if shapes[0] == (3, 4) else 0)  # the kernel trains where h has y's shape


ACTIVATION_MODULES = {
    "gelu": lambda: torch.nn.GELU(),
    "gelu_tanh": lambda: torch.nn.GELU(approximate="tanh"),
    "relu": lambda: torch.nn.ReLU(),
    "silu": lambda: torch.nn.SiLU(),
    "mish": lambda: torch.nn.Mish(),
    "tanh": lambda: torch.nn.Tanh(),
    "sigmoid": lambda: torch.nn.Sigmoid(),
    "identity": lambda: torch.nn.Identity(),
}


@pytest.mark.parametrize("op", ACTIVATION_MODULES)
def test_an_activation_chosen_at_run_time_trains_through_its_ops_backward(modules, op):
    """`self.act(h)` with the module chosen at run time: the backward kernel of the op the module maps to runs."""
    runtime = modules[2]
    (kernel,) = [k for k in runtime.KERNELS if k.name.endswith(f"_backward_{op}")]
    before = kernel.counts.get("cpp", 0)
    a, b = twins(modules, "Chosen", 8, ACTIVATION_MODULES[op])
    x = (torch.randn(5, 8, dtype=torch.float64) * 2).requires_grad_()
    cotangent = torch.randn(5, 8, dtype=torch.float64)
    expected, actual = step(a, [x], cotangent), step(b, [x], cotangent)
    torch.testing.assert_close(actual[1][0], expected[1][0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(actual[2][0], expected[2][0], rtol=1e-10, atol=1e-12)
    assert kernel.counts.get("cpp", 0) == before + 1


def test_inference_still_runs_the_forward_kernels(modules):
    runtime = modules[2]
    _, b = twins(modules, "Block", 16, dtype=torch.float32)
    forward = [k for k in runtime.KERNELS if not k.name.endswith("_backward") and k.gradients]
    before = sum(k.counts.get("cpp", 0) for k in forward)
    with torch.no_grad():
        out = b(torch.randn(2, 3, 16), torch.randn(16))
    assert out.grad_fn is None
    assert sum(k.counts.get("cpp", 0) for k in forward) >= before + 3


TRITON_SCRIPT = """
import importlib, sys, torch
sys.path.insert(0, {base!r})
original = importlib.import_module("original_backward")
transpiled = importlib.import_module("transpiled_backward.models")
runtime = importlib.import_module("transpiled_backward._transpile_runtime")
torch.manual_seed(0)
a = original.Block(16)
b = transpiled.Block(16)
b.load_state_dict(a.state_dict())
x = torch.randn(3, 5, 16, requires_grad=True)
bias = torch.randn(16, requires_grad=True)
cotangent = torch.randn(3, 5, 16)
grads = []
for module in (a, b):
    module.zero_grad()
    leaves = [x.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()]
    module(*leaves).backward(cotangent)
    grads.append([t.grad for t in leaves] + [p.grad for p in module.parameters()])
for want, got in zip(*grads):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
generator = torch.Generator().manual_seed(5)
q, cos, sin = (torch.randn(*shape, generator=generator) for shape in ((2, 3, 5, 8), (2, 5, 8), (2, 5, 8)))
cotangent = torch.randn(2, 3, 5, 8, generator=generator)
grads = []
for module in (original.Rotary(), transpiled.Rotary()):
    leaves = [t.clone().requires_grad_() for t in (q, cos, sin)]
    module(*leaves).backward(cotangent)
    grads.append([t.grad for t in leaves])
for want, got in zip(*grads):
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
ran = sum(k.counts.get("triton", 0) for k in runtime.KERNELS if k.name.endswith("_backward"))
assert ran >= 4, [(k.name, dict(k.counts)) for k in runtime.KERNELS]
print("ok", ran)
"""


def test_the_triton_backward_kernels_in_the_interpreter(modules, tmp_path):
    base = Path(sys.modules["transpiled_backward"].__file__).parent.parent
    env = {**os.environ, "TRANSPILE_BACKEND": "triton", "TRITON_INTERPRET": "1", "TRANSPILE_COMPILE": "sync"}
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent(TRITON_SCRIPT.format(base=str(base))))
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok")


NEGATIVE_BASE = """\
import torch
from torch import nn


class Power(nn.Module):
    def forward(self, x):
        y = (-2.0) ** x
        return y * x - 3.0
"""


def test_references_keep_a_negative_constant_in_parentheses(tmp_path):
    """The eager references (the backward's fallback) of `(-2.0) ** x`: not `-2.0 ** x`, which is -(2.0 ** x)."""
    with original_and_transpiled(tmp_path, NEGATIVE_BASE, "negative_base", "power", "negative_original") as pair:
        original, transpiled = pair
        kernels = importlib.import_module("negative_base._power_kernels")
        x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
        (reference,) = kernels.fused_pow_mul_sub_reference(x.detach())
        torch.testing.assert_close(reference, original.Power()(x).detach(), rtol=0, atol=0)
        (grad,) = kernels.fused_pow_mul_sub_backward_reference(x.detach(), torch.ones(3, dtype=torch.float64))
        (expected,) = torch.autograd.grad(original.Power()(x).sum(), x)
        # NaN everywhere, as torch's: the exponent's term is log(-2.0); -(2.0 ** x) would have given numbers.
        assert grad.isnan().all()
        torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-12, equal_nan=True)
