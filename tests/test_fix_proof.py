"""Every fix, proven on its rule's own examples against the real torch.

For each INVALID example a fixable rule fixes (unsafe fixes included):
1. the fixed module computes what the original does, in eager, on inputs hypothesis
   draws around the example's own (scaled, shifted, sign-flipped so branches go both
   ways, with NaN, with an empty leading dimension), and raises where it raises;
2. the gradients with respect to the inputs agree;
3. Dynamo sees no graph break where the fixes removed the findings, and
   `torch.compile(fullgraph=True, backend="eager")` succeeds when nothing is left;
4. the fixed source is valid Python and a second fix run changes nothing.
Safe fixes must give bitwise-identical results; unsafe ones the same within rounding.
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.dynamo_harness import example_inputs, load_example, run_example  # noqa: E402
from tests.rule_examples import CHECKED_RULES, fix_snippet, lint_snippet  # noqa: E402

FIXABLE = [rule for rule in CHECKED_RULES if rule.fix_safety]


@functools.lru_cache(maxsize=None)
def fixed(source: str):
    result, text = fix_snippet(source, unsafe=True)
    return result, text


def _cases():
    return [
        pytest.param(rule, source, id=f"{rule.code}-invalid{index}")
        for rule in FIXABLE
        for index, source in enumerate(rule.examples("INVALID"))
    ]


def _applied(rule, source):
    result, text = fixed(source)
    codes = {d.code for d in result.applied}
    if rule.code not in codes:
        reasons = {d.no_fix for d in result.remaining if d.code == rule.code}
        pytest.skip(f"{rule.code} leaves this example alone: {reasons}")
    return result, text


def test_there_are_fixable_rules():
    assert {"TP101", "TP102", "TP103"} <= {rule.code for rule in FIXABLE}


@pytest.mark.parametrize("rule", FIXABLE, ids=lambda rule: rule.code)
def test_every_fixable_rule_fixes_one_of_its_examples(rule):
    fixed_codes = [{d.code for d in fixed(source)[0].applied} for source in rule.examples("INVALID")]
    assert any(rule.code in codes for codes in fixed_codes), f"{rule.code} fixes none of its INVALID examples"


@pytest.mark.parametrize(("rule", "source"), _cases())
def test_fixed_example_is_valid_idempotent_and_one_graph(rule, source):
    result, text = _applied(rule, source)
    compile(text, "fixed.py", "exec")
    again, _ = fix_snippet(text, unsafe=True)
    assert again.applied == [] and again.sources == {}, f"a second run changed:\n{text}"
    left = lint_snippet(text)
    assert rule.code not in {d.code for d in left}, text
    before, after = run_example(source, name=f"{rule.code}-before"), run_example(text, name=f"{rule.code}-fixed")
    if not left:
        assert after.clean(), f"{after.summary()}\n{text}"
        assert after.fullgraph_error is None, after.fullgraph_error
    else:
        assert after.graph_break_count < before.graph_break_count or before.frame_skipped, after.summary()


def _variant(template: torch.Tensor, seed: int, scale: float, shift: float, nan: bool, empty: bool) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    shape = list(template.shape)
    if empty and shape:
        shape[0] = 0
    if template.dtype == torch.bool:
        return torch.rand(shape, generator=generator) < 0.5
    if not template.is_floating_point():
        low, high = (int(template.min()), int(template.max()) + 1) if template.numel() else (0, 2)
        return torch.randint(low, high, shape, generator=generator, dtype=template.dtype)
    values = torch.randn(shape, generator=generator, dtype=torch.float64) * scale + shift
    values = values.to(template.dtype)
    if nan and values.numel():
        values.view(-1)[0] = float("nan")
    return values


_inputs = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**16),
        "scale": st.sampled_from([1e-3, 1.0, 1e3]),
        "shift": st.sampled_from([-2.0, 0.0, 2.0]),
        "nan": st.booleans(),
        "empty": st.booleans(),
    }
)


def _run(module, args, grad: bool):
    torch.manual_seed(0)
    model = module.Model().eval()
    args = tuple(
        a.detach().clone().requires_grad_(grad and a.is_floating_point()) if torch.is_tensor(a) else a for a in args
    )
    torch.manual_seed(1)
    try:
        out = model(*args)
    except Exception as err:  # compared below: the fixed code must fail where the original fails
        return err, None
    if not grad:
        return out, None
    leaves = [a for a in args if torch.is_tensor(a) and a.requires_grad]
    tensors = [o for o in _flatten(out) if torch.is_tensor(o) and o.requires_grad]
    if not leaves or not tensors:
        return out, None
    loss = sum(t.double().nan_to_num(0.0, 0.0, 0.0).sum() for t in tensors)
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return out, [torch.zeros_like(a) if g is None else g for a, g in zip(leaves, grads)]


def _flatten(value):
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flatten(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _flatten(item)]
    return [value]


def _same(actual, expected, exact: bool) -> None:
    tolerance = {"rtol": 0.0, "atol": 0.0} if exact else {}
    for a, e in zip(_flatten(actual), _flatten(expected), strict=True):
        if torch.is_tensor(e):
            torch.testing.assert_close(a, e, equal_nan=True, **tolerance)
        else:
            assert a == e or (a != a and e != e), (a, e)


@pytest.mark.parametrize(("rule", "source"), _cases())
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(draw=_inputs)
def test_fixed_example_computes_the_same(rule, source, draw):
    result, text = _applied(rule, source)
    original, rewritten = load_example(source, f"{rule.code}-original"), load_example(text, f"{rule.code}-rewritten")
    exact = all(d.fix.safety == "safe" for d in result.applied)
    template = example_inputs(original)
    args = tuple(_variant(t, **draw) if torch.is_tensor(t) else t for t in template)
    for grad in (False, True):
        expected, expected_grads = _run(original, args, grad)
        actual, actual_grads = _run(rewritten, args, grad)
        if isinstance(expected, Exception):
            assert isinstance(actual, Exception), f"the original raised {expected!r}, the fixed code did not"
            continue
        assert not isinstance(actual, Exception), f"the fixed code raised {actual!r}"
        _same(actual, expected, exact)
        if expected_grads is not None:
            assert actual_grads is not None
            _same(actual_grads, expected_grads, exact)
