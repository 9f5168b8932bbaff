"""Sibling projections (transpiler/compiler/linears.py, emit/host/linears.py, emit/runtime/linear.py): which calls
of `nn.Linear` layers on one input are grouped, and the runtime's computation of them at once against their own calls
under CPU autocast (bfloat16): outputs, every gradient against float32's and eager autocast's own distance to it,
and the calls that must run the layers as they are.
"""

from __future__ import annotations

import importlib
import textwrap

import pytest
import torch
from torch import nn

from emit.host.linears import route_siblings
from emit.runtime import linear as runtime
from tests.transpiled import importable
from transpiler.compiler.linears import sibling_groups


def rewrite(body: str, init: str = "", compiled=("m.M.forward",)) -> str:
    """The module M (three linear layers q, k, v and a convolution, plus `init`) with `body` as its forward."""
    source = textwrap.dedent(f"""
        import torch
        from torch import nn


        class M(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.q = nn.Linear(d, d)
                self.k = nn.Linear(d, d)
                self.v = nn.Linear(d, d)
                self.conv = nn.Conv1d(d, d, 1)
                {init}

            def forward(self, x, y):
                {textwrap.indent(textwrap.dedent(body), " " * 16).lstrip()}
        """).lstrip()
    text = route_siblings(source, sibling_groups(source, "m", False, set(compiled)), 0)
    compile(text, "m.py", "exec")
    return text


# -- which calls are grouped -------------------------------------------------------------------------------
def test_layers_applied_to_one_input_in_one_block_are_one_group():
    text = rewrite("""
        q = self.q(x).view(2, -1)
        k = self.k(x)
        v = self.v(x).transpose(0, 1)
        return q, k, v
    """)
    assert "_siblings_1 = (self.q, self.k, self.v)" in text
    assert "q = _transpile_siblings(_siblings_1, 0, x).view(2, -1)" in text
    assert "k = _transpile_siblings(_siblings_1, 1, x)" in text
    assert "v = _transpile_siblings(_siblings_1, 2, x).transpose(0, 1)" in text
    assert "from ._transpile_runtime.linear import siblings as _transpile_siblings" in text
    lines = text.splitlines()  # the group is named right before its first call's statement, indented as it
    assert lines[lines.index("        q = _transpile_siblings(_siblings_1, 0, x).view(2, -1)") - 1] == (
        "        _siblings_1 = (self.q, self.k, self.v)"
    )


def test_calls_within_one_expression_are_grouped_in_evaluation_order():
    text = rewrite("return self.conv(self.k(x) * torch.sigmoid(self.q(x)))")
    assert "_siblings_1 = (self.k, self.q)" in text
    assert "_transpile_siblings(_siblings_1, 0, x) * torch.sigmoid(_transpile_siblings(_siblings_1, 1, x))" in text


@pytest.mark.parametrize(
    "body",
    [
        "a = self.q(x)\nx = a + 1\nreturn self.k(x)",  # the input rebound between the calls
        "a = self.q(x)\ny, x = x, y\nreturn a + self.k(x)",
        "return self.q(x) + self.q(x)",  # one layer twice: no sibling
        "a = self.q(x)\nif y is None:\n    a = a + 1\nreturn a + self.k(x)",  # a compound statement between them
        "a = self.q(x)\nreturn [self.k(x) for _ in range(2)]",  # a call that may run any number of times
        "a = self.q(x)\nreturn a + self.conv(x)",  # not a linear layer
        "return self.q(x) + self.k(y)",  # two inputs
        "return self.q(x[0]) + self.k(x[0])",  # not a name: each subscript is a new tensor
        "return self.q(x) + self.k(x := y)",  # the input rebound inside the statement
    ],
)
def test_other_calls_are_left_alone(body):
    assert "_transpile_siblings" not in rewrite(body)


def test_only_functions_that_run_under_forward_are_rewritten_and_a_taken_name_is_left_alone():
    assert "_transpile_siblings" not in rewrite("return self.q(x) + self.k(x)", compiled=())
    assert "_transpile_siblings(" not in rewrite("_transpile_siblings = 1\nreturn self.q(x) + self.k(x)")
    text = rewrite("_siblings_1 = 1\nreturn self.q(x) + self.k(x) + _siblings_1")
    assert "_siblings_2 = (self.q, self.k)" in text


# -- the runtime -----------------------------------------------------------------------------------------------
def layers(bias: bool = True, out: int = 24, seed: int = 0) -> tuple[nn.Linear, ...]:
    torch.manual_seed(seed)
    return tuple(nn.Linear(16, out, bias=bias) for _ in range(3))


def through(group, x, autocast: bool = True) -> list[torch.Tensor]:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        return [runtime.siblings(group, index, x) for index in range(len(group))]


def gradients(group, outputs, x, seed: int = 1) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    grads = [torch.randn(o.shape) for o in outputs]
    return list(torch.autograd.grad(outputs, [x, *(p for m in group for p in m.parameters())], grads))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(2, 5, 16), (16,)])
def test_the_group_at_once_gives_the_layers_outputs_and_gradients(bias, shape):
    group = layers(bias)
    x = torch.randn(shape, requires_grad=True)
    before = runtime.counts["stacked"]
    stacked = through(group, x)
    assert runtime.counts["stacked"] == before + 1  # computed once for the three calls
    assert runtime._TAKEN[group[0]].outputs == [None, None, None]  # every output taken
    with torch.autocast("cpu", dtype=torch.bfloat16):
        separate = [m(x) for m in group]
    for got, want in zip(stacked, separate):
        assert got.dtype == want.dtype == torch.bfloat16 and got.shape == want.shape and got.is_contiguous()
        torch.testing.assert_close(got, want)  # bfloat16's tolerance: the same products, summed in float32
    # Each gradient against float32's (no autocast): within the distance eager's autocast gets, or 1 bfloat16 ulp.
    exact = gradients(group, [m(x) for m in group], x)
    eager = gradients(group, separate, x)
    ours = gradients(group, stacked, x)
    for e, o, t in zip(eager, ours, exact):
        scale = t.abs().max()
        assert (o - t).abs().max() <= max((e - t).abs().max() * 1.5, scale * 2**-8), (o - t).abs().max() / scale


def test_outputs_can_be_updated_in_place_as_the_layers_outputs_can():
    group = layers()
    x = torch.randn(2, 5, 16, requires_grad=True)
    q, k, v = through(group, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = [m(x) for m in group]
    q.mul_(2)
    (q.float().sum() + k.float().sum()).backward()
    torch.testing.assert_close(q, want[0] * 2)
    assert x.grad is not None and group[2].weight.grad is None


def test_a_changed_input_another_input_or_a_changed_layer_runs_the_layer_itself():
    group = layers()
    x = torch.randn(2, 5, 16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = x * 1  # a non-leaf: it may be updated in place
        q = runtime.siblings(group, 0, h)
        with torch.no_grad():
            h.add_(1)  # between the group's calls: the next layer must see the new values
        k = runtime.siblings(group, 1, h)
        other = x * 2
        v = runtime.siblings(group, 2, other)  # not the group's input
        assert torch.equal(k, group[1](h)) and torch.equal(v, group[2](other))
        runtime.siblings(group, 0, x)
        group[1].weight = nn.Parameter(group[1].weight.detach() + 1)  # replaced between the calls
        assert torch.equal(runtime.siblings(group, 1, x), group[1](x))
        runtime.siblings(group, 0, x)
        # Out of the group's order (a call skipped: an exception between them): the layer runs itself.
        assert torch.equal(runtime.siblings(group, 2, x), group[2](x))
        assert runtime._TAKEN[group[0]].outputs[2] is not None
    assert q.shape == k.shape


@pytest.mark.parametrize("case", ["no autocast", "no grad", "hooked", "subclass", "shapes", "bias mismatch"])
def test_calls_stacking_would_not_stand_for_run_the_layers(case):
    group = layers()
    x = torch.randn(3, 16, requires_grad=True)
    seen = []
    if case == "hooked":
        group[1].register_forward_hook(lambda m, args, out: seen.append(out.shape))
    elif case == "subclass":

        class Linear(nn.Linear):
            pass

        group = (*group[:2], Linear(16, 24))
    elif case == "shapes":
        group = (*group[:2], nn.Linear(16, 8))
    elif case == "bias mismatch":
        group = (*group[:2], nn.Linear(16, 24, bias=False))
    before = runtime.counts["stacked"]
    with torch.set_grad_enabled(case != "no grad"):
        outputs = through(group, x, autocast=case != "no autocast")
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=case != "no autocast"):
            want = [m(x) for m in group]
    assert runtime.counts["stacked"] == before
    assert all(torch.equal(o, w) for o, w in zip(outputs, want))
    assert seen == ([torch.Size([3, 24])] * 2 if case == "hooked" else [])


# -- a transpiled model trains as its original under autocast -------------------------------------------------
MODEL = """
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.o_proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        x = x * torch.sigmoid(x) + 1.0  # a region: the module is emitted with its kernels
        q = self.q_proj(x).view(b, t, self.heads, -1).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.heads, -1).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.heads, -1).transpose(1, 2)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, d))
"""


def test_a_transpiled_attention_trains_as_its_original_under_autocast(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "attention.py").write_text(MODEL)
    (tmp_path / "attention_original.py").write_text(MODEL)
    with importable(
        tmp_path, {source: tmp_path / "transpiled_siblings"}, ("transpiled_siblings", "attention_original")
    ):
        text = (tmp_path / "transpiled_siblings" / "attention.py").read_text()
        assert "_siblings_1 = (self.q_proj, self.k_proj, self.v_proj)" in text
        emitted = importlib.import_module("transpiled_siblings._transpile_runtime.linear")
        torch.manual_seed(0)
        original = importlib.import_module("attention_original").Attention()
        model = importlib.import_module("transpiled_siblings.attention").Attention()
        model.load_state_dict(original.state_dict())
        x = torch.randn(2, 6, 16)
        results = []
        for m, autocast in ((original, True), (model, True), (original, False)):  # the last: float32's gradients
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = m(x).float().square().mean()
            grads = torch.autograd.grad(loss, list(m.parameters()))
            results.append((loss, grads))
        assert emitted.counts["stacked"] == 1
    (eager_loss, eager), (loss, ours), (_, exact) = results
    torch.testing.assert_close(loss, eager_loss, rtol=2e-2, atol=1e-3)
    for e, o, t in zip(eager, ours, exact):
        scale = t.abs().max()
        assert (o - t).abs().max() <= max((e - t).abs().max() * 1.5, scale * 2**-8)
