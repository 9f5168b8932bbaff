"""TP206's fix: `sorted()` of 0-dim tensors becomes a stable `torch.sort` of their stack.

The text written, every refusal, and the original and rewritten modules run side by side in
eager (the same values in the same order, ties and `reverse=True` included, the same
gradients) and under Dynamo (no break left); NaN is where the two differ, which is why the fix
is unsafe.
"""

from __future__ import annotations

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
        ("parts = [x, x * 2]\nreturn sorted(parts, key=lambda t: t.sum())", "with a `key`"),
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
    out = load_example(source, "sorting").Model()(x)
    flat = []
    for item in out if isinstance(out, (list, tuple)) else [out]:
        flat += item if isinstance(item, list) else [item]
    return flat


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
    for x in inputs:
        x = x.to(dtype)
        try:
            expected = _outputs(source, x)
        except RuntimeError as error:  # amax() of nothing: the rewritten module raises alike
            with pytest.raises(RuntimeError, match=str(error).split(":")[0]):
                _outputs(text, x)
            continue
        for before, after in zip(expected, _outputs(text, x), strict=True):  # bit for bit, the mean of nothing NaN
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
