"""Unaligned linear layers (transpiler/compiler/linears.py, emit/runtime/linear.py): which calls are rewritten into
`_transpile_linear(self.<layer>, x)`, and the runtime's padded path against `module(x)`. The padded path is
forced on CPU tensors (`FORCE`) for the numerics and the fallbacks; a GPU test checks it in bfloat16 on
CUDA; a small tree is transpiled and run beside its original.
"""

from __future__ import annotations

import importlib
import textwrap

import pytest

from emit.runtime import linear as runtime
from tests.transpiled import importable
from emit.host.linears import route_linears as route
from transpiler.compiler.linears import linear_sites


def route_linears(text: str, module: str, is_package: bool, compiled: set[str], depth: int) -> str:
    """The pipeline's two steps: the compiler finds the sites, the host writer routes them."""
    return route(text, linear_sites(text, module, is_package, compiled), depth)


torch = pytest.importorskip("torch")

PACKAGE = "transpiled_linears"
MODEL = """
import torch
from torch import nn


class Head(nn.Module):
    def __init__(self, d=16, vocab=45):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        h = x * torch.sigmoid(x) + 1.0
        return self.lm_head(self.norm(h))
"""


def rewrite(body: str, init: str = "self.head = nn.Linear(d, vocab)", compiled=("m.M.forward",), depth=0) -> str:
    """The module M, with `init` in its __init__ and `body` as its forward, after the pass."""
    source = f"""
import torch
from torch import nn


class M(nn.Module):
    def __init__(self, d, vocab):
        super().__init__()
        {init}

    def forward(self, x):
        {body}
"""
    return route_linears(textwrap.dedent(source).lstrip(), "m", False, set(compiled), depth)


# -- the rewrite -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "init, body, expected",
    [
        ("self.head = nn.Linear(d, vocab)", "return self.head(x)", "return _transpile_linear(self.head, x)"),
        (
            "self.head = nn.Linear(d, config.num_labels)",
            "return self.head(x)",
            "return _transpile_linear(self.head, x)",
        ),
        ("self.head = nn.Linear(d, n_classes)", "return self.head(x)", "return _transpile_linear(self.head, x)"),
        (
            "self.head = torch.nn.Linear(d, 1001)",
            "return self.head(x) + 1",
            "return _transpile_linear(self.head, x) + 1",
        ),
        (
            "self.head = nn.Linear(in_features=d, out_features=vocab, bias=False)",
            "return self.head(x)",
            "return _transpile_linear(self.head, x)",
        ),
        (
            "self.head = nn.Linear(d, vocab)",
            "return self.head(self.head(x).relu())",
            "return _transpile_linear(self.head, _transpile_linear(self.head, x).relu())",
        ),
    ],
)
def test_calls_of_unaligned_linears_are_rewritten(init, body, expected):
    text = rewrite(body, init)
    assert expected in text
    assert "from ._transpile_runtime.linear import linear as _transpile_linear" in text
    assert "from _transpile_runtime.linear import linear as _transpile_linear" in text
    compile(text, "m.py", "exec")


@pytest.mark.parametrize(
    "init, body",
    [
        ("self.head = nn.Linear(d, 768)", "return self.head(x)"),  # a literal multiple of 8: aligned already
        ("self.head = nn.Linear(d, 4 * d)", "return self.head(x)"),  # a width a designer chose
        ("self.head = nn.Linear(d, config.intermediate_size)", "return self.head(x)"),
        ("self.head = nn.Linear(d, out_features=4096)", "return self.head(x)"),
        ("self.head = nn.Conv1d(d, vocab, 1)", "return self.head(x)"),  # not nn.Linear
        ("self.head = nn.Linear(d, vocab) if d else nn.Identity()", "return self.head(x)"),  # not sure to be one
        ("self.head = nn.Linear(d, vocab)\n        self.head = nn.Identity()", "return self.head(x)"),
        ("self.head = nn.Linear(d, vocab)", "return self.head(*x)"),  # not one positional argument
        ("self.head = nn.Linear(d, vocab)", "return self.head(input=x)"),
        ("self.head = nn.Linear(d, vocab)", "return self.head.weight @ x"),  # no call of the module
    ],
)
def test_other_calls_are_left_alone(init, body):
    assert "_transpile_linear" not in rewrite(body, init)


def test_only_functions_that_run_under_forward_are_rewritten():
    assert "_transpile_linear" not in rewrite("return self.head(x)", compiled=())
    assert "_transpile_linear(self.head, x)" in rewrite("return self.head(x)", compiled=("m.M.forward",))


def test_a_module_using_the_name_already_is_left_alone():
    assert "_transpile_linear(self.head" not in rewrite("_transpile_linear = 1\n        return self.head(x)")


def test_a_layer_of_a_base_class_of_the_file_is_rewritten_and_the_import_is_relative_to_the_depth():
    source = textwrap.dedent("""
        from torch import nn


        class Base(nn.Module):
            def __init__(self):
                super().__init__()
                self.head = nn.Linear(8, 50257)


        class M(Base):
            def forward(self, x):
                return self.head(x)
        """).lstrip()
    text = route_linears(source, "pkg.models.m", False, {"pkg.models.m.M.forward"}, depth=2)
    assert "return _transpile_linear(self.head, x)" in text
    assert "from ..._transpile_runtime.linear import linear as _transpile_linear" in text


# -- the runtime -------------------------------------------------------------------------------------------
@pytest.fixture
def forced(monkeypatch):
    """The padded path for CPU tensors of any dtype and size; the calls that took it, counted from here."""
    monkeypatch.setattr(runtime, "FORCE", True)
    monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
    return runtime.counts


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, {}), (torch.bfloat16, {"rtol": 2e-2, "atol": 2e-2})])
@pytest.mark.parametrize(
    "shape, layout",
    [((7, 24), "contiguous"), ((2, 5, 24), "contiguous"), ((24, 7), "transposed"), ((2, 24, 5), "transposed")],
)
def test_the_padded_path_computes_what_the_module_does(forced, bias, dtype, tolerance, shape, layout):
    torch.manual_seed(0)
    module = torch.nn.Linear(24, 45, bias=bias).to(dtype)
    x = torch.randn(shape, dtype=dtype)
    if layout == "transposed":
        x = x.transpose(-1, -2)
        assert not x.is_contiguous()
    with torch.no_grad():
        expected, got = module(x), runtime.linear(module, x)
    assert forced["padded"] == 1
    assert got.shape == expected.shape and got.dtype == expected.dtype
    # torch.compile's layout: rows padded to 48 elements, the first 45 of each visible.
    assert got.stride() == torch.empty(*x.shape[:-1], 48)[..., :45].stride()
    torch.testing.assert_close(got, expected, **tolerance)


def test_aligned_layers_and_mixed_dtypes_take_the_module(forced):
    x = torch.randn(4, 8)
    with torch.no_grad():
        runtime.linear(torch.nn.Linear(8, 16), x)  # aligned
        with pytest.raises(RuntimeError, match="same dtype"):  # F.linear's own error
            runtime.linear(torch.nn.Linear(8, 13).to(torch.float64), x)
    assert forced["padded"] == 0
    with torch.no_grad():
        runtime.linear(torch.nn.Linear(8, 13), x)
    assert forced["padded"] == 1  # the control


def _training_step(module, x, call):
    """The output of `call(module, x)` and the gradients of x and the module's parameters, from a fixed cotangent."""
    x = x.detach().requires_grad_()
    module.zero_grad(set_to_none=True)
    out = call(module, x)
    out.backward(torch.linspace(-1, 1, out.numel()).view(out.shape).to(out))
    return out.detach(), x.grad, *(p.grad for p in module.parameters())


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, {}), (torch.bfloat16, {"rtol": 2e-2, "atol": 2e-2})])
def test_the_padded_path_trains_as_the_module_does(forced, bias, dtype, tolerance):
    torch.manual_seed(0)
    module = torch.nn.Linear(24, 45, bias=bias).to(dtype)
    x = torch.randn(3, 7, 24, dtype=dtype)
    expected = _training_step(module, x, lambda m, i: m(i))
    got = _training_step(module, x, runtime.linear)
    assert forced["padded"] == 1
    assert all(g.dtype == e.dtype and g.shape == e.shape for g, e in zip(got, expected))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, **tolerance)


@pytest.mark.parametrize("bias", [True, False])
def test_under_autocast_the_padded_path_runs_in_autocasts_dtype(forced, bias):
    """Float32 weights under autocast: the matmul in bfloat16, as eager runs it; float32 gradients."""
    torch.manual_seed(0)
    module = torch.nn.Linear(24, 45, bias=bias)
    x = torch.randn(3, 7, 24)
    results = []
    for call in (lambda m, i: m(i), runtime.linear):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            results.append(_training_step(module, x, call))
    expected, got = results
    assert forced["padded"] == 1
    assert got[0].dtype == expected[0].dtype == torch.bfloat16
    assert all(g.dtype == e.dtype == torch.float32 for g, e in zip(got[1:], expected[1:]))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=2e-2, atol=2e-2)
    with torch.autocast("cpu", dtype=torch.float16):  # bfloat16 weights under a float16 autocast: the module's
        runtime.linear(module.to(torch.bfloat16), x.to(torch.bfloat16))
    assert forced["padded"] == 1


def test_hooks_subclasses_and_replaced_forwards_take_the_module(forced):
    x = torch.randn(4, 8)
    hooked = torch.nn.Linear(8, 13)
    hooked.register_forward_hook(lambda module, args, out: out * 0)
    pre_hooked = torch.nn.Linear(8, 13, bias=False)  # zero input, zero output
    pre_hooked.register_forward_pre_hook(lambda module, args: (args[0] * 0,))
    replaced = torch.nn.Linear(8, 13)
    replaced.forward = lambda input: torch.zeros(4, 13)

    class Sub(torch.nn.Linear):
        def forward(self, input):
            return super().forward(input) * 0

    with torch.no_grad():
        for module in (hooked, pre_hooked, replaced, Sub(8, 13)):
            assert not runtime.linear(module, x).any()  # zero: the hook or the forward ran
        with torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: out * 0):
            assert not runtime.linear(torch.nn.Linear(8, 13), x).any()
    assert forced["padded"] == 0
    with torch.no_grad():
        assert runtime.linear(torch.nn.Linear(8, 13), x).any()
    assert forced["padded"] == 1  # the control


def test_without_force_cpu_tensors_take_the_module(monkeypatch):
    monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
    module = torch.nn.Linear(64, 1001).to(torch.bfloat16)
    x = torch.randn(256, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(runtime.linear(module, x), module(x), rtol=0, atol=0)
    assert runtime.counts["padded"] == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpt2s_lm_head_is_padded_on_cuda_in_bfloat16(monkeypatch):
    monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
    torch.manual_seed(0)
    head = torch.nn.Linear(768, 50257, bias=False).to("cuda", torch.bfloat16)
    x = torch.randn(2, 512, 768, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        expected, got = head(x), runtime.linear(head, x)
        decoding = runtime.linear(head, x[:, :4])  # 8 rows: the weight's copy would cost more than it saves
    assert runtime.counts["padded"] == 1
    assert got.shape == expected.shape and got.dtype == torch.bfloat16 and got.stride() == (512 * 50264, 50264, 1)
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got.view(-1, 50257), expected.view(-1, 50257), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(decoding, expected[:, :4], rtol=2e-2, atol=2e-2)
    del expected, got
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        _out = runtime.linear(head, x)  # kept alive while the peak is read
    # The padded output and the padded weight: not a second, contiguous output.
    bound = 1024 * 50264 * 2 + 50264 * 768 * 2
    assert torch.cuda.max_memory_allocated() - base <= bound + (1 << 20)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpt2s_lm_head_trains_padded_under_autocast_on_cuda(monkeypatch):
    monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
    torch.manual_seed(0)
    head = torch.nn.Linear(768, 50257, bias=False).cuda()
    x = torch.randn(2, 512, 768, device="cuda")
    results = []
    for call in (lambda m, i: m(i), runtime.linear):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            results.append(_training_step(head, x, call))
    assert runtime.counts["padded"] == 1
    for got, expected in zip(results[1], results[0]):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        # Each value is a bfloat16 matmul's, accumulated in float32 in another order (other cuBLAS kernels) and
        # rounded once: within two bfloat16 ulps of the largest value (sums of 50257 terms cancel to near 0).
        bound = 2 * torch.finfo(torch.bfloat16).eps * expected.abs().max().item()
        torch.testing.assert_close(got, expected, rtol=0, atol=bound)


# -- transpiled and run ------------------------------------------------------------------------------------
def test_a_transpiled_head_runs_the_padded_path_and_matches_the_original(tmp_path, monkeypatch):
    source = tmp_path / "src"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "head.py").write_text(MODEL)
    (tmp_path / "head_original.py").write_text(MODEL)
    with importable(tmp_path, {source: tmp_path / PACKAGE}, (PACKAGE, "head_original")):
        assert "return _transpile_linear(self.lm_head, self.norm(h))" in (tmp_path / PACKAGE / "head.py").read_text()
        emitted = importlib.import_module(f"{PACKAGE}._transpile_runtime.linear")
        monkeypatch.setattr(emitted, "FORCE", True)
        torch.manual_seed(0)
        original = importlib.import_module("head_original").Head().eval()
        model = importlib.import_module(f"{PACKAGE}.head").Head().eval()
        model.load_state_dict(original.state_dict(), strict=True)
        x = torch.randn(2, 5, 16)
        with torch.no_grad():
            torch.testing.assert_close(model(x), original(x))
        assert emitted.counts["padded"] == 1
