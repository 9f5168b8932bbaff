"""TP206's fix: `sorted()` of 0-dim tensors becomes a stable `torch.sort` of their stack, and
`sorted(xs, key=...)` with 0-dim keys a stable `torch.argsort` of the stacked keys that orders
the stacked elements (rows, tuples of tensors, or the indices of `range(n)`).

The text written, every refusal, and the original and rewritten modules run side by side in
eager (the same values in the same order, ties and `reverse=True` included, the same
gradients) and under Dynamo (no break left); NaN is where the two differ, which is why the fix
is unsafe.
"""

from __future__ import annotations

import re
import textwrap

import pytest

torch = pytest.importorskip("torch")

from tests.dynamo_harness import load_example, run_example  # noqa: E402
from tests.rule_examples import fix_snippet  # noqa: E402


def model(lines: str, params: str = "x") -> str:
    return (
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
        f"    def forward(self, {params}):\n" + textwrap.indent(textwrap.dedent(lines).strip("\n"), " " * 8) + "\n"
    )


def fixed(source: str, unsafe: bool = True) -> tuple[str, list]:
    result, text = fix_snippet(source, unsafe=unsafe)
    return text, [d for d in result.remaining if d.code == "TP206"]


RANKED = model("""
    scores = [x.sum(), x.mean(), x.amax(), (x * 2).min(), x.norm()]
    ranked = sorted(scores, reverse=True)
    low, high = sorted([x.mean(), x.amin()])
    return torch.stack(ranked) * low + high
""")
SCALARS = model("""
    outs = [h.sum() for h in x.unbind(0)]
    return sorted(outs), sorted([h.amax() for h in x])
""")
APPENDED = model("""
    norms = []
    for h in x.unbind(0):
        norms.append(h.norm())
    norms += [x.mean()]
    return sorted(norms, reverse=True)
""")


def test_text_written():
    text, left = fixed(model("return sorted([x.sum(), x.mean()], reverse=True)"))
    assert (
        "return list(torch.sort(torch.stack([x.sum(), x.mean()]), descending=True, stable=True).values.unbind(0))"
        in (text)
    )
    assert not left
    text, _ = fixed(model("low, high = sorted((x.sum(), x.amax()))\nreturn x * low + high"))
    assert "low, high = list(torch.sort(torch.stack((x.sum(), x.amax())), stable=True).values.unbind(0))" in text
    text, _ = fixed(model("norms = [x.sum(), x.mean()]\nreturn sorted(norms)[0]"))
    assert "return (list(torch.sort(torch.stack(norms), stable=True).values.unbind(0)) if norms else [])[0]" in text


def test_unsafe_only():
    source = model("return sorted([x.sum(), x.mean()])")
    text, left = fixed(source, unsafe=False)
    assert text == source and left and left[0].fix is not None and left[0].fix.safety == "unsafe"


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        ("parts = [x, x * 2]\nreturn sorted(parts, key=lambda t: t.sum())", "not known to stack"),
        ("return sorted(x.unbind(0), key=lambda h: h.norm())", "name the list first"),
        ("hs = list(x.unbind(0))\nhs += [x[0]]\nreturn sorted(hs, key=lambda h: h.sum())", "changed in place"),
        ("hs = list(x.unbind(0))\nhs.append(x[0, :2])\nreturn sorted(hs, key=lambda h: h.sum())", "not known to stack"),
        ("hs = x.unbind(0)\nreturn sorted(hs, key=torch.norm)", "only a `lambda` key of one parameter"),
        ("hs = x.unbind(0)\nreturn sorted(hs, key=lambda h: h[0])", "not known to give 0-dim tensors"),
        ("order = sorted(range(4), key=lambda i: x[i])\nreturn x * order[0]", "not known to give 0-dim tensors"),
        ("s = x.flatten()\norder = sorted(range(3), key=lambda i: s[i])\nreturn x[order[0]]", "0-dim tensors, which"),
        ("s = x.flatten()\norder = sorted(range(3), key=lambda i: s[i])\nreturn [order]", "0-dim tensors, which"),
        ("norms = [x.sum(), x.mean()]\nreturn sorted(norms, **options)", "`**kwargs`"),
        ("parts = list(x.unbind(0))\nparts.sort()\nreturn parts", "only `sorted(values)`"),
        ("return sorted([x.sum(dim=0), x.mean()])", "not known to be 0-dim"),
        ("return sorted(x.unbind(0))", "not known to be 0-dim"),
        ("return sorted([h.sum() for h in x])", "a comprehension may be empty"),
        ("norms = [x.sum(), x.mean()]\nnorms[0] = x\nreturn sorted(norms)", "not known to be 0-dim"),
        ("norms = [x.sum()]\nnorms.append(x * 2)\nreturn sorted(norms)", "not known to be 0-dim"),
    ],
)
def test_refusals_say_why(lines, reason):
    text, left = fixed(model(lines))
    assert text == model(lines)
    assert left and all(reason in (d.no_fix or "") for d in left), [d.no_fix for d in left]


def _outputs(source: str, x: torch.Tensor) -> list[torch.Tensor]:
    return _flat(load_example(source, "sorting").Model()(x))


def _flat(out) -> list:
    return [leaf for item in out for leaf in _flat(item)] if isinstance(out, (list, tuple)) else [out]


@pytest.mark.parametrize("source", [RANKED, SCALARS, APPENDED], ids=["ranked", "comprehension", "appended"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_same_values_in_the_same_order(source, dtype):
    text, _ = fixed(source)
    assert text != source
    generator = torch.Generator().manual_seed(0)
    inputs = [
        torch.randn(4, 6, generator=generator),
        torch.ones(4, 6),  # every score ties
        torch.tensor([[1.0, 2.0], [2.0, 1.0], [1.0, 2.0], [0.0, 3.0]]),  # ties among the rows' sums
        -torch.rand(4, 6, generator=generator) * 1e30,
        torch.zeros(0, 6),  # nothing to sort
    ]
    # amax() of nothing raises: the rewritten module raises the same error
    _agree(source, text, [x.to(dtype) for x in inputs], (RuntimeError,), same_message=True)


def _agree(source: str, text: str, inputs: list, errors: tuple, same_message: bool = False) -> None:
    """`source` and its rewrite `text` on each input: the same outputs bit for bit (values, dtypes, shapes; NaN
    where NaN was), or the same error class (and message, up to its first colon, with `same_message`)."""
    for x in inputs:
        try:
            expected = _outputs(source, x)
        except errors as error:
            match = re.escape(str(error).split(":")[0]) if same_message else None
            with pytest.raises(type(error), match=match):
                _outputs(text, x)
            continue
        actual = _outputs(text, x)
        assert len(actual) == len(expected)
        for before, after in zip(expected, actual, strict=True):
            torch.testing.assert_close(after, before, rtol=0, atol=0, equal_nan=True)


def test_same_gradients():
    text, _ = fixed(RANKED)
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    grads = []
    for source in (RANKED, text):
        leaf = x.clone().requires_grad_(True)
        _outputs(source, leaf)[0].sum().backward()
        grads.append(leaf.grad)
    assert torch.equal(*grads)


def test_nan_is_where_they_differ():
    """Python's comparisons with NaN are all false, so `sorted` leaves it where it falls;
    `torch.sort` puts it last: the reason the fix is unsafe."""
    source = model("outs = [h.sum() for h in x.unbind(0)]\nreturn sorted(outs)")
    text, _ = fixed(source)
    x = torch.tensor([[1.0], [float("nan")], [0.0]])
    before, after = (torch.stack(_outputs(s, x)) for s in (source, text))
    assert before.isnan().tolist() == [False, True, False] and after.isnan().tolist() == [False, False, True]


@pytest.mark.parametrize(("source", "line"), [(RANKED, 8), (APPENDED, 11)], ids=["ranked", "appended"])
def test_dynamo_breaks_before_and_not_after(source, line):
    text, _ = fixed(source)
    before = run_example(source, name="sorted-before")
    assert before.breaks_at(line), before.summary()
    after = run_example(text, name="sorted-after")
    assert after.clean(), after.summary()


# `sorted(xs, key=...)`: rows of one tensor, tuples grown in a loop over rows, `range(n)` by a 1-D tensor.
ROWS = model("""
    hs = x.unbind(0)
    by_norm = sorted(hs, key=lambda h: h.norm())
    by_sum = sorted(hs, key=lambda h: -h.sum(), reverse=True)
    return by_norm, by_sum
""")
TUPLES = model("""
    candidates = []
    for row in x.unbind(0):
        candidates.append((row.amax(), row * 2, row.sum()))
    ranked = sorted(candidates, key=lambda c: c[0], reverse=True)
    return ranked, sorted(candidates, key=lambda c: c[2])
""")
INDICES = model("""
    scores = x.amax(dim=1).flatten()
    order = sorted(range(x.shape[0]), key=lambda i: scores[i], reverse=True)
    return x * order[0] + x[0] * order[-1] + len(order)
""")


def test_text_written_with_a_key():
    text, left = fixed(ROWS)
    assert not left
    assert (
        "by_norm = (list(torch.stack(hs)[torch.argsort(torch.stack([h.norm() for h in hs]), stable=True)].unbind(0))"
        " if hs else [])" in text
    )
    assert "torch.argsort(torch.stack([-h.sum() for h in hs]), descending=True, stable=True)" in text
    text, left = fixed(TUPLES)
    assert not left
    assert (
        "ranked = (list(zip(*[torch.stack(field)[order].unbind(0) for order in [torch.argsort(torch.stack("
        "[c[0] for c in candidates]), descending=True, stable=True)] for field in zip(*candidates)]))"
        " if candidates else [])" in text
    )
    text, left = fixed(INDICES)
    assert not left
    assert (
        "order = (list(torch.argsort(torch.stack([scores[i] for i in range(x.shape[0])]), descending=True, "
        "stable=True).unbind(0)) if x.shape[0] > 0 else [])" in text
    )
    text, _ = fixed(model("s = torch.stack([x.sum(), x.amax()])\nreturn x * sorted(range(2), key=lambda i: s[i])[0]"))
    assert "return x * list(torch.argsort(torch.stack([s[i] for i in range(2)]), stable=True).unbind(0))[0]" in text


def test_fresh_names_for_the_order():
    """`order` and `field` are bound inside the comprehension: names the function uses are not taken."""
    text, _ = fixed(TUPLES.replace("row", "order").replace("ranked", "field"))
    assert "for order_ in [torch.argsort(" in text and "for field_ in zip(*candidates)" in text


@pytest.mark.parametrize("source", [ROWS, TUPLES, INDICES], ids=["rows", "tuples", "indices"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_same_elements_in_the_same_order_by_key(source, dtype):
    text, _ = fixed(source)
    assert text != source
    generator = torch.Generator().manual_seed(0)
    inputs = [
        torch.randn(5, 3, generator=generator),
        torch.ones(5, 3),  # every key ties: the order of the list stays
        torch.tensor([[1.0, 2.0], [2.0, 1.0], [0.0, 3.0], [2.0, 2.0]]),  # ties among some keys
        -torch.rand(4, 6, generator=generator) * 1e30,
        torch.zeros(0, 3),  # nothing to sort
    ]
    # `order[0]` of nothing raises: the rewritten module raises alike
    _agree(source, text, [x.to(dtype) for x in inputs], (RuntimeError, IndexError))


@pytest.mark.parametrize("source", [ROWS, TUPLES, INDICES], ids=["rows", "tuples", "indices"])
def test_same_gradients_by_key(source):
    text, _ = fixed(source)
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(2))
    grads = []
    for version in (source, text):
        leaf = x.clone().requires_grad_(True)
        outputs = _outputs(version, leaf)
        sum((o * (i + 1)).sum() for i, o in enumerate(outputs)).backward()  # weights that see the order
        grads.append(leaf.grad)
    assert torch.equal(*grads)


def test_nan_key_is_where_they_differ():
    text, _ = fixed(ROWS)
    x = torch.tensor([[1.0], [float("nan")], [0.0]])
    before, after = (torch.cat(_outputs(s, x)[:3]) for s in (ROWS, text))
    assert before.isnan().tolist() == [False, True, False] and after.isnan().tolist() == [False, False, True]


@pytest.mark.parametrize(("source", "line"), [(ROWS, 8), (TUPLES, 10), (INDICES, 8)], ids=["rows", "tuples", "indices"])
def test_dynamo_breaks_before_and_not_after_by_key(source, line):
    source += "\n\ndef make_inputs(call):\n    return torch.randn(4 + call, 3)\n"  # rows to sort
    text, _ = fixed(source)
    before = run_example(source, name="sorted-key-before")
    assert before.breaks_at(line), before.summary()
    after = run_example(text, name="sorted-key-after")
    assert after.clean(), after.summary()
