"""The capture fix (rewrites/capture.py): data-dependent values Dynamo traces once the function says so.

Each case is fixed (an unsafe fix: a backend may fail to compile what is captured), then run beside the original: eager outputs and gradients bit for
bit, Dynamo's breaks before and none after, and the compiled fixed model (AOTAutograd, forward and backward)
against eager within float32 rounding. Refusals name their reason.
"""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch")
import torch._dynamo  # noqa: E402, F811

from tests.test_fix_conversions import fix, lint  # noqa: E402

HEADER = (
    "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
    "class Model(nn.Module):\n"
    "    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(8, 5)\n\n"
    "    def forward(self, x, labels, lengths):\n"
)
DECORATOR = "@torch._dynamo.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True)"


def module(body: str) -> str:
    return HEADER + textwrap.indent(textwrap.dedent(body).strip() + "\n", " " * 8)


# name: forward body (x: 3x6x8 floats, labels: 3x6 ints in [-1, 5), lengths: 3 ints in [1, 6]).
CASES = {
    "length-as-size": """
        n = int(lengths.max())
        pos = torch.arange(n, device=x.device)
        keep = pos[None, :] < lengths[:, None]
        return (self.lin(x[:, :n]) * keep[..., None]).sum()
    """,
    "item-as-size": """
        n = lengths.max().item()
        return self.lin(x).narrow(1, 0, n).mean()
    """,
    "tensor-as-size": """
        n = lengths.max()
        pos = torch.arange(n, device=x.device)
        return self.lin(x[:, : pos.numel()]).sum()
    """,
    "masked-loss": """
        h = self.lin(x)
        active = labels >= 0
        logits = h[active]
        return F.cross_entropy(logits, labels[active])
    """,
    "nonzero-gather-scatter": """
        out = torch.zeros_like(x)
        rows = torch.nonzero(labels.flatten() > 1).squeeze(1)
        flat = x.reshape(-1, 8)
        out.view(-1, 8)[rows] = flat[rows] * 2
        return self.lin(out).sum()
    """,
    "unique-and-repeat": """
        classes = torch.unique(labels)
        spread = torch.repeat_interleave(self.lin(x[:, 0]), lengths, dim=0)
        return spread.sum() * classes.numel()
    """,
    "bincount-grown-list": """
        counts = torch.bincount(labels.flatten() + 1)
        parts = []
        for row in x:
            k = int(row.abs().argmax()) % 5 + 1
            parts.append(self.lin(row[:k]).sum())
        return torch.stack(parts).sum() + counts.float().std()
    """,
}


def _inputs(seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 6, 8, generator=g)
    labels = torch.randint(-1, 5, (3, 6), generator=g)
    lengths = torch.randint(1, 7, (3,), generator=g)
    return x, labels, lengths


def _model(source: str):
    namespace: dict = {}
    exec(compile(source, "<model>", "exec"), namespace)
    torch.manual_seed(0)
    return namespace["Model"]()


def _breaks(model, args) -> tuple[int, int]:
    """Graphs, and breaks by Dynamo's counter (which also counts a break that made it skip a frame)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    try:
        explained = torch._dynamo.explain(model)(*args)
        return explained.graph_count, sum(counters["graph_break"].values())
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize("name", sorted(CASES))
def test_capture_keeps_eager_and_removes_the_breaks(name):
    source = module(CASES[name])
    found = lint(source)
    captured = [d for d in found if d.fix is not None and d.fix.data == ("capture data-dependent values",)]
    assert captured and all(d.fix.safety == "unsafe" for d in captured)
    assert fix(source, unsafe=False)[0].count(DECORATOR) == 0
    fixed, _ = fix(source)
    assert DECORATOR in fixed and fixed.count(DECORATOR) == 1
    assert not [d for d in lint(fixed) if d.code in {d.code for d in captured}]  # the linter knows the patch
    assert fix(fixed)[0] == fixed
    original, rewritten = _model(source), _model(fixed)
    for seed in range(3):
        args = _inputs(seed)
        expected, actual = original(*args), rewritten(*args)
        assert torch.equal(expected, actual)
        grads = [torch.autograd.grad(out, m.lin.weight)[0] for out, m in ((expected, original), (actual, rewritten))]
        assert torch.equal(*grads)
    args = _inputs(0)
    assert _breaks(original, args)[1] > 0
    assert _breaks(rewritten, args) == (1, 0)
    torch._dynamo.reset()
    compiled = torch.compile(rewritten, backend="aot_eager", fullgraph=False)
    try:
        for seed in range(2):
            args = _inputs(seed)
            out = compiled(*args)
            grad = torch.autograd.grad(out, rewritten.lin.weight)[0]
            torch.testing.assert_close(out, rewritten(*args))
            torch.testing.assert_close(grad, torch.autograd.grad(rewritten(*args), rewritten.lin.weight)[0])
    finally:
        torch._dynamo.reset()


# name: (forward body, code, reason given)
REFUSED = {
    "branched-on": ("s = x.sum().item()\nif s > 0:\n    return x\nreturn -x", "TP301", "it decides a branch at line"),
    "iterated": ("sel = x[labels > 0]\nfor v in sel:\n    x = x + v\nreturn x", "TP402", "it is iterated over"),
    "python-list-index": ("i = int(lengths.argmax())\nreturn [x, x][i]", "TP303", "it indexes a Python object"),
    "unknown-helper": ("n = int(lengths.max())\nreturn helper(x, n)", "TP303", "which the analysis does not follow"),
    "read-back": ("sel = x[labels > 0]\nreturn sel.tolist()", "TP402", "`.tolist()` reads it in Python"),
    "conditional": (
        "if self.training:\n    return self.lin(x[labels > 0])\nreturn x",
        "TP402",
        "it runs only on some calls",
    ),
    "stored": ("self.n = int(lengths.max())\nreturn x", "TP303", "it is stored outside the function's tensors"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_capture_refused_and_why(name):
    body, code, reason = REFUSED[name]
    found = [d for d in lint(module(body)) if d.code == code]
    assert found and all(d.fix is None for d in found)
    assert any(reason in (d.no_fix or "") for d in found), [d.no_fix for d in found]
    assert DECORATOR not in fix(module(body))[0]


def test_decorated_or_nested_functions_are_not_decorated():
    decorated = HEADER.replace("    def forward", "    @torch.no_grad()\n    def forward")
    (found,) = [d for d in lint(decorated + "        return self.lin(x[labels > 0])\n") if d.code == "TP402"]
    assert found.fix is None and "`forward` has decorators already" in found.no_fix
    nested = HEADER + "        def inner(y):\n            return self.lin(y[labels > 0])\n\n        return inner(x)\n"
    (found,) = [d for d in lint(nested) if d.code == "TP402"]
    assert found.fix is None and "it is in a nested function, which runs only where it is called" in found.no_fix


def test_one_flag_of_the_two_leaves_the_other_break_reported():
    patched = "    @torch._dynamo.config.patch(capture_scalar_outputs=True)\n    def forward"
    source = HEADER.replace("    def forward", patched) + "        return x[labels > 0].sum() * int(lengths.max())\n"
    codes = {d.code for d in lint(source)}
    assert "TP402" in codes  # the decorator does not turn on dynamic shapes: still a break
    both = HEADER.replace("    def forward", f"    {DECORATOR}\n    def forward")
    assert not {d.code for d in lint(both + "        return x[labels > 0].sum() * int(lengths.max())\n")} & {
        "TP402",
        "TP303",
    }


def test_a_captured_submodule_called_from_a_compiled_caller_breaks_only_at_the_call():
    """Documented behaviour (docs/fixes.md): Dynamo cannot enter the patch while tracing a caller, so the caller
    breaks at the call, as it did for the break inside; the callee is one graph of its own."""
    fixed, _ = fix(module(CASES["masked-loss"]))
    inner = _model(fixed)
    assert _breaks(inner, _inputs(0)) == (1, 0)

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x, labels, lengths):
            return self.inner(x * 2, labels, lengths) + 1

    # The caller's two graphs around the call and the callee's one. The original callee breaks at the call too,
    # and again inside.
    assert _breaks(Outer(), _inputs(0)) == (3, 1)
    inner = _model(module(CASES["masked-loss"]))
    graphs, breaks = _breaks(Outer(), _inputs(0))
    assert graphs > 3 and breaks > 1
