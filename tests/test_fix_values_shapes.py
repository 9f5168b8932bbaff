"""Fixes of dynamic-shape operators whose result is reduced, counted or scattered back (TP401,
TP402, TP403, TP406, TP407): the exact rewritten source, the reasons for leaving code alone, and
the rewritten module run against the original in eager on inputs whose masks select nothing,
everything, some elements or whole rows (NaN included), plus Dynamo seeing no break after."""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch")
import torch._dynamo  # noqa: E402, F811

from tests.test_fix_conversions import fix, lint  # noqa: E402

HEADER = (
    "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.proj = nn.Linear(5, 3)\n        self.table = nn.Embedding(5, 2)\n\n    def forward(self, x):\n"
)


def module(body: str) -> str:
    return HEADER + textwrap.indent(textwrap.dedent(body).strip() + "\n", " " * 8)


LABELS = "labels = torch.arange(x.numel()).view(x.shape) % 5\n"  # every class 0..4 once x has 5 elements
# name: (forward body, the body after fixing with --unsafe-fixes).
CASES = {
    "mask-mean": ("return x * x[x > 0].mean()", "return x * (torch.where(x > 0, x, 0).sum() / (x > 0).sum())"),
    "mask-counts": (
        "x = x.float()\nn = x[x > 0].numel()\nreturn x.sum() * n, len(x[~x.isnan()]) * x, x[x < 1].shape[0] + x, "
        "x[x > 0].size(0) - x",
        "x = x.float()\nn = (x > 0).sum()\nreturn x.sum() * n, (~x.isnan()).sum() * x, (x < 1).sum() + x, "
        "(x > 0).sum() - x",
    ),
    "mask-count-divides": (
        "x = x.float()\nreturn x.sum() / x[x > 0].numel()",
        "x = x.float()\nreturn x.sum() / (x > 0).sum().cpu()",
    ),
    # `x` may be a 0-d tensor of a narrow integer dtype, which a Python int yields to and an int64 one not.
    "mask-count-beside-any-dtype": ("return x * x[x > 0].numel()", "return x * (x > 0).sum()"),
    "row-mask-sum": (
        "m = x.sum(-1) > 0\nreturn x[m].sum() * x",
        "m = x.sum(-1) > 0\nreturn torch.where(m.reshape(m.shape + (1,) * (x.dim() - m.dim())), x, 0).sum() * x",
    ),
    "row-mask-mean-and-counts": (
        "m = x.amax(-1) > 0.5\nreturn x[m].mean() + x, x / x[m].numel(), len(x[m]) * x",
        "m = x.amax(-1) > 0.5\nreturn (torch.where(m.reshape(m.shape + (1,) * (x.dim() - m.dim())), x, 0).sum() "
        "/ (m.sum() * x.shape[m.dim():].numel())) + x, x / (m.sum() * x.shape[m.dim():].numel()), m.sum() * x",
    ),
    "masked-select-mean-count": (
        "return torch.masked_select(x, x > 0.5).mean() + x, (x.masked_select(~x.isnan()).numel() + 1) * x",
        "return (torch.where(x > 0.5, x, 0).sum() / (x > 0.5).sum()) + x, ((~x.isnan()).sum() + 1) * x",
    ),
    "nonzero-store": (
        "y = x.clone()\ny[torch.where(y > 0)] = 0.0\nreturn y",
        "y = x.clone()\ny[y > 0] = 0.0\nreturn y",
    ),
    "nonzero-index-summed": (
        "idx = (x > 0).nonzero(as_tuple=True)\nreturn x * x[idx].sum()",
        "idx = x > 0\nreturn x * torch.where(idx.reshape(idx.shape + (1,) * (x.dim() - idx.dim())), x, 0).sum()",
    ),
    "nonzero-of-values": (
        "y = x.clone()\ny[torch.nonzero(x, as_tuple=True)] = 1.0\nreturn y * x[torch.nonzero(x, as_tuple=True)].sum()",
        "y = x.clone()\ny[x != 0] = 1.0\nreturn y * torch.where(x != 0, x, 0).sum()",
    ),
    "one-hot-partner": (  # labels of the last class: a one-hot as wide as `x`'s rows
        "top = torch.full(x.shape[:-1], x.shape[-1] - 1)\nlogp = x.log_softmax(-1)\n"
        "return -(F.one_hot(top).to(x.dtype) * logp).sum(-1), x - F.one_hot(top)",
        "top = torch.full(x.shape[:-1], x.shape[-1] - 1)\nlogp = x.log_softmax(-1)\n"
        "return -(F.one_hot(top, num_classes=logp.shape[-1]).to(x.dtype) * logp).sum(-1), "
        "x - F.one_hot(top, num_classes=x.shape[-1])",
    ),
    "masked-copy": (
        "y = x.clone()\nrow = y[0]\ny[y > 0] = (x * 2)[y > 0]\nreturn y, row",
        "y = x.clone()\nrow = y[0]\ny.copy_(torch.where(y > 0, (x * 2), y))\nreturn y, row",
    ),
    "masked-copy-rows": (
        "y = torch.zeros_like(x)\nm = x.sum(-1) > 0\ny[m] = x.flip(0)[m]\nreturn y",
        "y = torch.zeros_like(x)\nm = x.sum(-1) > 0\n"
        "y.copy_(torch.where(m.reshape(m.shape + (1,) * (y.dim() - m.dim())), x.flip(0), y))\nreturn y",
    ),
    "masked-extremes": (
        "return x[x > 0].max() * x, torch.amin(x[~x.isnan()]), x.masked_select(x < 1).min() + x",
        "return torch.where(x > 0, x, x.take((x > 0).int().argmax())).max() * x, "
        "torch.where(~x.isnan(), x, x.take((~x.isnan()).int().argmax())).amin(), "
        "torch.where(x < 1, x, x.take((x < 1).int().argmax())).min() + x",
    ),
    "bincount": (
        LABELS + "flat = labels.flatten()\nreturn x * torch.bincount(flat, minlength=5).sum(), flat.bincount(None, 5)",
        LABELS + "flat = labels.flatten()\nreturn x * torch.zeros(5, dtype=torch.long, device=flat.device)"
        ".index_add_(0, flat, torch.ones_like(flat, dtype=torch.long)).sum(), torch.zeros(5, dtype=torch.long, "
        "device=flat.device).index_add_(0, flat, torch.ones_like(flat, dtype=torch.long))",
    ),
    "one-hot-linear": (
        LABELS + "return self.proj(F.one_hot(labels).to(x.dtype)) + x.sum()",
        LABELS + "return self.proj(F.one_hot(labels, num_classes=self.proj.in_features).to(x.dtype)) + x.sum()",
    ),
    "one-hot-embedding": (
        LABELS + "codes = F.one_hot(labels, -1).float()\nreturn codes @ self.table.weight * x.sum()",
        LABELS + "codes = F.one_hot(labels, num_classes=self.table.num_embeddings).float()\n"
        "return codes @ self.table.weight * x.sum()",
    ),
}


# Counts of elementwise selections meeting tensors proven int64, boolean, floating or complex directly in
# `+ - *`, a comparison or as a divisor: safe, so applied by default (a divisor stays on the CPU: CUDA
# reads a number and a 0-d CPU tensor alike).
SAFE = {"mask-counts", "mask-count-divides"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixed_source(name):
    before, after = CASES[name]
    fixed, result = fix(module(before))
    assert fixed == module(after), fixed
    assert result.applied and not [d for d in result.remaining if d.fix is not None]
    assert fix(module(before), unsafe=False)[0] == module(after if name in SAFE else before)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fix_is_idempotent(name):
    assert fix(module(CASES[name][1]))[0] == module(CASES[name][1])


NO_FIX = {
    "mask-drawn-twice": ("return x * x[torch.rand_like(x) > 0.5].mean()", "TP402", "not plain reads"),
    "count-returned": ("return x[x > 0].numel()", "TP402", "the count is a Python int; its value is returned"),
    "count-as-size": ("return x.new_zeros(len(x[x > 0]))", "TP402", "in `x.new_zeros(len(x[x > 0]))`"),
    "count-beside-numbers": ("n = x[x > 0].numel()\nreturn x / (n / 2)", "TP402", None),
    "selection-used": ("sel = x[x > 0]\nreturn sel * 2", "TP402", "not only summed or counted"),
    "masked-select-other-mask": (
        "m = x.sum(-1, keepdim=True) > 0\nreturn torch.masked_select(x, m).mean()",
        "TP403",
        "not an elementwise test",
    ),
    "nonzero-matrix": ("return x * x[torch.nonzero(x > 0)].sum()", "TP401", "only `nonzero(as_tuple=True)`"),
    "nonzero-kept": ("idx = torch.where(x > 0)\nreturn x, idx", "TP401", "not only as the index of a tensor"),
    "extreme-of-row-mask": ("return x[x.sum(-1) > 0].max()", "TP402", "first selected element"),
    "copy-through-other-mask": (
        "y = x.clone()\ny[y > 0] = x[x > 0]\nreturn y",
        "TP402",
        "stored somewhere other than through the same mask",
    ),
    "copy-into-call": (
        "y = x.clone()\nm = y.view(-1) > 0\ny.view(-1)[m] = x.view(-1)[m]\nreturn y",
        "TP402",
        None,
    ),
    "one-hot-partner-bound-after": (
        LABELS + "target = F.one_hot(labels).float()\nlogp = x.log_softmax(-1)\nreturn target * logp",
        "TP406",
        "beside a tensor bound before the `one_hot`",
    ),
    "unique-sorted": ("return x * torch.unique(x, sorted=True).numel()", "TP404", "no static shape"),
    "unique-counts": ("return torch.unique(x, return_counts=True)[1].sum() * x", "TP404", "`return_counts`"),
    "bincount-without-minlength": (
        LABELS + "return x * torch.bincount(labels.flatten()).sum()",
        "TP407",
        "without `minlength`",
    ),
    "bincount-weighted": (
        LABELS + "return torch.bincount(labels.flatten(), x.flatten(), minlength=5)",
        "TP407",
        "weighted",
    ),
    "one-hot-broadcast": (
        LABELS + "return F.one_hot(labels).float() * x[..., None]",
        "TP406",
        "not known to equal a size of the module",
    ),
}


@pytest.mark.parametrize("name", sorted(NO_FIX))
def test_no_fix_and_why(name):
    body, code, reason = NO_FIX[name]
    found = [d for d in lint(module(body)) if d.code == code]
    if reason is None:  # fixed, but only with --unsafe-fixes
        assert found and all(d.fix is not None and d.fix.safety == "unsafe" for d in found)
        return
    assert found and all(d.fix is None for d in found)
    assert reason in found[0].no_fix, found[0].no_fix


def _model(source: str):
    namespace: dict = {}
    exec(compile(source, "<model>", "exec"), namespace)
    torch.manual_seed(0)
    return namespace["Model"]()


def _inputs(dtype) -> dict[str, torch.Tensor]:
    """Masks `x > 0`, `x > 0.5`, `amax > 0.5` that select some, none, all; NaN; zeros; a 1-d x."""
    some = torch.randn(4, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with_nan = some.clone()
    with_nan[1, 2] = float("nan")
    with_zeros = torch.where(some.abs() < 0.5, 0.0, some)
    inputs = {
        "some": some,
        "none": -some.abs() - 0.5,
        "all": some.abs() + 1,
        "nan": with_nan,
        "zeros": with_zeros,
        "vector": some[0],
    }
    return {k: v.to(dtype) for k, v in inputs.items()}


def _outputs(model, x):
    try:
        out = model(x)
    except Exception as err:  # compared below: eager's exception is kept where there is one
        return err
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_rewritten_code_computes_the_same(name, dtype):
    original, rewritten = (_model(module(body)) for body in CASES[name])
    rewritten.load_state_dict(original.state_dict())
    for label, x in _inputs(dtype).items():
        expected, actual = _outputs(original, x.clone()), _outputs(rewritten, x.clone())
        if isinstance(expected, Exception):
            continue  # documented: the static form may compute where eager raised (e.g. a mismatched width)
        assert not isinstance(actual, Exception), (label, actual)
        assert [e.dtype for e in expected] == [a.dtype for a in actual], label
        # A reordered sum of n terms: float16 rounds its result to 2**-10 relative, twice for a mean.
        tolerance = {"rtol": 4e-3, "atol": 4e-3} if dtype == torch.float16 else {}
        if name in SAFE:  # safe fixes: bit for bit
            tolerance = {"rtol": 0, "atol": 0}
        torch.testing.assert_close(actual, expected, equal_nan=True, **tolerance, msg=label)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_agree(name):
    grads = []
    for body in CASES[name]:
        x = _inputs(torch.float32)["some"].requires_grad_()  # the layers' dtype
        outputs = [o for o in _outputs(_model(module(body)), x) if o.requires_grad]
        if outputs:
            sum(o.sum() for o in outputs).backward()
        grads.append(x.grad)
    if grads[0] is None:
        assert grads[1] is None
    else:
        torch.testing.assert_close(grads[1], grads[0])


def _graph_breaks(source: str) -> int:
    torch._dynamo.reset()
    model = _model(source)
    explained = torch._dynamo.explain(model.forward)(_inputs(torch.float32)["some"])
    torch._dynamo.reset()
    return explained.graph_break_count


@pytest.mark.parametrize("name", sorted(CASES))
def test_fix_removes_the_graph_break(name):
    before, after = CASES[name]
    assert _graph_breaks(module(before)) > 0
    assert _graph_breaks(module(after)) == 0


def test_integer_and_boolean_values_keep_their_dtypes():
    body = (
        "y = x.clone()\ny[y > 0] = (x * 3)[y > 0]\n"
        "return x[x > 2].sum(), (x > 2)[x > 0].sum(), x[x > 0].numel() * x, x[x < 2].max(), (x > 0)[x > 1].min(), y"
    )
    original, rewritten = _model(module(body)), _model(fix(module(body))[0])
    for x in (torch.arange(-3, 5, dtype=torch.int32), torch.arange(-3, 5).view(2, 4), torch.arange(5, -3, -1)):
        expected, actual = original(x), rewritten(x)
        assert [e.dtype for e in expected] == [a.dtype for a in actual]
        torch.testing.assert_close(list(actual), list(expected))


def test_documented_differences_of_the_unsafe_forms():
    """An empty selection's `max()` raised and now gives the first element; values of another dtype
    written through a mask raised (`index_put_` wants equal dtypes) and are now cast by `copy_`."""
    body = "y = x.clone()\ny[y > 0] = x.double()[y > 0]\nreturn x[x > 9].max(), y"
    original, rewritten = _model(module(body)), _model(fix(module(body))[0])
    x = torch.arange(-3.0, 5.0)
    with pytest.raises(RuntimeError):
        original(x)
    largest, y = rewritten(x)
    assert largest == x[0] and torch.equal(y, x)
    # Labels all 0: a one-hot of width 1 spread over the partner's width; now a true one-hot.
    body = "t = x.unsqueeze(-1) + torch.ones(3)\nreturn F.one_hot(x.long()).float() * t"
    x = torch.zeros(2)
    expected, actual = _model(module(body))(x), _model(fix(module(body))[0])(x)
    assert torch.equal(expected, torch.ones(2, 3)) and torch.equal(actual, torch.eye(3)[[0, 0]])
