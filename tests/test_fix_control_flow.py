"""The control-flow fixes (TP201 `if`, TP203 ternary, TP204 `and`/`or`/`not`, TP205 `assert`):
exact rewritten source, the reasons for leaving code alone, idempotency, and equivalence of the
original and rewritten models under eager torch, with no graph break left under Dynamo."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from transpiler.lint import engine  # noqa: E402

from transpiler.lint import fixer  # noqa: E402
from transpiler.source.diagnostics import Diagnostic  # noqa: E402

HEADER = "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"


@dataclass
class Fixed:
    text: str  # the source after every fix
    applied: list[Diagnostic]
    remaining: list[Diagnostic]


def fix(source: str, tmp_path: Path) -> Fixed:
    """All fixes (unsafe included) of the control-flow rules applied to `source` as one file
    (other rules are not selected, so their fixes cannot interfere)."""
    path = tmp_path / "model.py"
    path.write_text(source, encoding="utf-8")

    def lint(overlay):
        return engine.lint([path], lambda code: code.startswith("TP20"), "TP20", None, overlay=overlay)

    result = fixer.fix_project([path], lint, unsafe=True)
    return Fixed(result.sources.get(path, source), result.applied, result.remaining)


def model(forward: str) -> str:
    """A module whose `Model.forward` has the body `forward` (written at any indentation)."""
    return HEADER + textwrap.indent(textwrap.dedent(forward).strip() + "\n", "    ")


def load(source: str) -> torch.nn.Module:
    namespace: dict = {}
    exec(compile(source, "<model>", "exec"), namespace)
    return namespace["Model"]()


def assert_equivalent(original: str, fixed: str, inputs: list[tuple]) -> None:
    """Same eager outputs on every input, and the fixed forward is one graph under Dynamo."""
    before, after = load(original), load(fixed)
    for args in inputs:
        torch.testing.assert_close(after(*args), before(*args), equal_nan=True)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(after)(*inputs[0])
    assert explained.graph_break_count == 0, explained.break_reasons


def signed(*shape: int) -> list[tuple]:
    """Inputs whose sums go both ways, NaN, and an empty tensor."""
    base = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).abs() + 0.1
    return [(base,), (-base,), (base * 200,), (torch.full(shape, float("nan")),), (torch.randn(0),)]


# -- TP201: `if` -----------------------------------------------------------------------------------------

SIMPLE_IF = model("""
    def forward(self, x):
        y = x + 1
        if y.sum() > 0:
            y = y * 2
        return y - 1
    """)

CHAIN = model("""
    def forward(self, x):
        y = x + 1
        # double when positive
        if y.sum() > 0:  # hot path
            y = y * 2  # scale
            z = y + 1
        elif x.mean() < -1:
            z = x
        else:
            # negative
            z = -x
        return y - 1 + z
    """)

EARLY_RETURN = model("""
    def forward(self, x):
        h = x.relu()
        if h.sum() > 0:
            return h * 2
        # fall through
        g = h + 1
        return g.view(-1)
    """)

BOTH_RETURN = model("""
    def forward(self, x):
        if x.mean() > 0:  # positive
            return x * 2, x.sin()
        # otherwise
        else:  # negative
            return x, x.cos()
    """)

NESTED = model("""
    def forward(self, x):
        y = x.abs()
        if x.sum() > 0:
            if y.mean() > 1:
                y = y * 2
            y = y + 1
        return y
    """)

FLOAT_CONDITION = model("""
    def forward(self, x):
        s = x.sum()
        y = x * 1
        if s:
            y = y - s
        if not s:
            y = y + 1
        return y
    """)

FIXED_IF = {
    "simple": (
        SIMPLE_IF,
        """
        def forward(self, x):
            y = x + 1
            y = torch.where(y.sum() > 0, y * 2, y)
            return y - 1
        """,
    ),
    "chain": (
        CHAIN,
        """
        def forward(self, x):
            y = x + 1
            # double when positive
            # hot path
            # scale
            # negative
            cond = y.sum() > 0
            cond_elif1 = x.mean() < -1
            y_then = y * 2
            y = torch.where(cond, y_then, y)
            z = torch.where(cond, y_then + 1, torch.where(cond_elif1, x, -x))
            return y - 1 + z
        """,
    ),
    "early_return": (
        EARLY_RETURN,
        """
        def forward(self, x):
            h = x.relu()
            def then_branch(h):
                return h * 2
            def else_branch(h):
                # fall through
                g = h + 1
                return g.view(-1).clone()
            return torch.cond(h.sum() > 0, then_branch, else_branch, (h,))
        """,
    ),
    "both_return": (
        BOTH_RETURN,
        """
        def forward(self, x):
            # positive
            # otherwise
            # negative
            def then_branch(x):
                return x * 2, x.sin()
            def else_branch(x):
                return x.clone(), x.cos()
            return torch.cond(x.mean() > 0, then_branch, else_branch, (x,))
        """,
    ),
    "nested": (
        NESTED,
        """
        def forward(self, x):
            y = x.abs()
            y_then = torch.where(y.mean() > 1, y * 2, y)
            y = torch.where(x.sum() > 0, y_then + 1, y)
            return y
        """,
    ),
    "float_condition": (
        FLOAT_CONDITION,
        """
        def forward(self, x):
            s = x.sum()
            y = x * 1
            y = torch.where(s != 0, y - s, y)
            y = torch.where(s == 0, y + 1, y)
            return y
        """,
    ),
}


@pytest.mark.parametrize("case", FIXED_IF)
def test_if_is_rewritten(case, tmp_path):
    source, expected = FIXED_IF[case]
    result = fix(source, tmp_path)
    assert result.text == model(expected)
    assert {d.code for d in result.applied} == {"TP201"}
    assert result.remaining == []


@pytest.mark.parametrize("case", ["simple", "chain", "nested", "float_condition", "early_return"])
def test_rewritten_if_computes_the_same(case, tmp_path):
    source, _ = FIXED_IF[case]
    assert_equivalent(source, fix(source, tmp_path).text, signed(8))


def test_both_returning_branches_compute_the_same(tmp_path):
    source, _ = FIXED_IF["both_return"]
    assert_equivalent(source, fix(source, tmp_path).text, signed(8)[:3])


def test_an_elif_after_a_python_condition_becomes_an_else(tmp_path):
    source = model("""
        def forward(self, x):
            y = x + 1
            if self.training:
                y = y * 3
            elif y.sum() > 0:
                y = y * 2
            return y
        """)
    expected = """
        def forward(self, x):
            y = x + 1
            if self.training:
                y = y * 3
            else:
                y = torch.where(y.sum() > 0, y * 2, y)
            return y
        """
    result = fix(source, tmp_path)
    assert result.text == model(expected)
    assert_equivalent(source, result.text, signed(8))


LEFT_ALONE_IF = {
    # (a branch that only prints is a check that reports: fixed, see REPORT_ONLY)
    "side effect": ("y = y * 2; print(y)", "calls `print()` for its side effects"),
    "submodule": ("y = self.fc(y)", "calls a submodule"),
    "in place": ("y += 1", "updates a tensor in place"),
    "in-place method": ("y = y.add_(1)", "modifies a tensor in place"),
    "attribute": ("self.last = y", "changes an attribute"),
    "subscript": ("y[0] = 1", "writes into a tensor in place"),
    "raise": ("y = y * 2; raise ValueError('negative')", "raises"),
    "random": ("y = torch.randn(8)", "draws random numbers"),
    "non-tensor": ("y = y.sum().item()", "data-dependent scalar"),
    "unknown call": ("y = helper(y)", "may have side effects"),
}


@pytest.mark.parametrize("case", LEFT_ALONE_IF)
def test_if_left_alone_says_why(case, tmp_path):
    statement, reason = LEFT_ALONE_IF[case]
    source = model(f"""
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            y = x + 1
            if y.sum() > 0:
                {statement}
            return y
        """)
    result = fix(source, tmp_path)
    assert result.applied == []
    (finding,) = [d for d in result.remaining if d.code == "TP201"]
    assert reason in finding.no_fix


def test_conditions_mixing_python_values_are_left_alone(tmp_path):
    source = model("""
        def forward(self, x):
            y = x + 1
            if y.sum() > 0 and self.training:
                y = y * 2
            return y
        """)
    (finding,) = fix(source, tmp_path).remaining
    assert "is not only tensors" in finding.no_fix


def test_return_inside_a_nested_block_is_left_alone(tmp_path):
    source = model("""
        def forward(self, x):
            with torch.no_grad():
                if x.sum() > 0:
                    return x * 2
            return x
        """)
    (finding,) = fix(source, tmp_path).remaining
    assert "nested block" in finding.no_fix


# -- TP203: ternary --------------------------------------------------------------------------------------

TERNARY = model("""
    def forward(self, x):
        y = x + 1
        z = y * 2 if y.mean() > 0 else y * 3
        w = (x if x.sum() > 1 else -x) if y.max() > 2 else y
        return z + w
    """)


def test_ternary_becomes_where(tmp_path):
    result = fix(TERNARY, tmp_path)
    expected = """
        def forward(self, x):
            y = x + 1
            z = torch.where(y.mean() > 0, y * 2, y * 3)
            w = torch.where(y.max() > 2, (torch.where(x.sum() > 1, x, -x)), y)
            return z + w
        """
    assert result.text == model(expected)
    assert_equivalent(TERNARY, result.text, signed(8)[:4])  # `max()` of an empty tensor raises


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("y * 2 if y.mean() > 0 else 0.0", "not known to be a tensor"),
        ("self.fc(y) if y.mean() > 0 else y", "calls a submodule"),
        ("y if y.mean() > 0 and self.training else -y", "not only tensors"),
    ],
)
def test_ternary_left_alone_says_why(expression, reason, tmp_path):
    source = model(f"""
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            y = x + 1
            z = {expression}
            return z
        """)
    (finding,) = [d for d in fix(source, tmp_path).remaining if d.code == "TP203"]
    assert reason in finding.no_fix


# -- TP204: and / or / not -------------------------------------------------------------------------------

BOOL_OPS = model("""
    def forward(self, x):
        y = x + 1
        flag = (y > 0).any() or (y < -5).any()
        both = y.isfinite().all() and y.sum() > 0 and (x > -1).all()
        empty = not (y > 0).any()
        return y * 2, flag, both, empty
    """)


def test_bool_ops_become_bitwise(tmp_path):
    result = fix(BOOL_OPS, tmp_path)
    expected = """
        def forward(self, x):
            y = x + 1
            flag = (y > 0).any() | (y < -5).any()
            both = y.isfinite().all() & (y.sum() > 0) & (x > -1).all()
            empty = ~(y > 0).any()
            return y * 2, flag, both, empty
        """
    assert result.text == model(expected)
    before, after = load(BOOL_OPS), load(result.text)
    for (x,) in signed(8)[:4]:
        expected_values = before(x)
        for got, want in zip(after(x), expected_values):
            torch.testing.assert_close(torch.as_tensor(got), torch.as_tensor(want), equal_nan=True)
    assert torch._dynamo.explain(after)(signed(8)[0][0]).graph_break_count == 0


def test_bool_op_on_numbers_is_left_alone(tmp_path):
    source = model("""
        def forward(self, x):
            total = x.sum() or x.mean()
            return total
        """)
    (finding,) = fix(source, tmp_path).remaining
    assert "not known to be a boolean tensor" in finding.no_fix


# -- TP205: assert ---------------------------------------------------------------------------------------

ASSERTS = model("""
    def forward(self, x):
        y = x.abs() + 1
        # checks
        assert (y > 0).all(), f"non-positive values in {y.shape}"  # cheap
        assert (y > 0).all() and (y < 1e9).all()
        assert (y > 0).all() or (y < 1e9).all(), "never"
        return y * 2
    """)


def test_assert_becomes_assert_async(tmp_path):
    result = fix(ASSERTS, tmp_path)
    expected = """
        def forward(self, x):
            y = x.abs() + 1
            # checks
            torch._assert_async((y > 0).all(), "non-positive values in {y.shape}")  # cheap
            torch._assert_async((y > 0).all(), "assert (y > 0).all()")
            torch._assert_async((y < 1e9).all(), "assert (y < 1e9).all()")
            torch._assert_async((y > 0).all() | (y < 1e9).all(), "never")
            return y * 2
        """
    assert result.text == model(expected)
    assert_equivalent(ASSERTS, result.text, [(torch.randn(8),), (torch.randn(0),)])
    nan = torch.full((3,), float("nan"))
    with pytest.raises(AssertionError):
        load(ASSERTS)(nan)
    with pytest.raises(RuntimeError, match="non-positive"):  # the fix changes the exception type
        load(result.text)(nan)


def test_assert_on_python_values_from_tensors_uses_check(tmp_path):
    source = model("""
        def forward(self, x, n: int):
            total = x.sum().item()
            assert (x > -10).all() and total > -1e9 and n > 0, "bad input"
            return x * 2
        """)
    expected = """
        def forward(self, x, n: int):
            total = x.sum().item()
            torch._assert_async((x > -10).all(), "bad input")
            torch._check(total > -1e9, lambda: "bad input")
            assert n > 0, "bad input"
            return x * 2
        """
    result = fix(source, tmp_path)
    assert result.text == model(expected)
    torch.testing.assert_close(load(result.text)(torch.ones(3), 2), load(source)(torch.ones(3), 2))


def test_assert_with_or_over_numbers_is_left_alone(tmp_path):
    source = model("""
        def forward(self, x):
            assert x.sum() or x.mean(), "empty"
            return x
        """)
    (finding,) = fix(source, tmp_path).remaining
    assert "not all boolean" in finding.no_fix


# -- every fix -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", [*(s for s, _ in FIXED_IF.values()), TERNARY, BOOL_OPS, ASSERTS])
def test_a_second_run_changes_nothing(source, tmp_path):
    once = fix(source, tmp_path).text
    again = fix(once, tmp_path)
    assert again.applied == [] and again.text == once
    assert again.remaining == []


@pytest.mark.parametrize(
    ("forward", "reason"),
    [
        (
            """
            def forward(self, x):
                if x.sum() > 0:
                    return x * 2
                elif x.mean() < -1:
                    return x * 3
                return x
            """,
            "`elif` chain with `return`",
        ),
        (
            """
            def forward(self, x):
                if x.sum() > 0:
                    return x * 2, x
                return x
            """,
            "different numbers of values",
        ),
        (
            """
            def forward(self, x):
                if x.sum() > 0:
                    return x * 2
                print(x)
                return x
            """,
            "calls `print()`",
        ),
        (
            """
            def forward(self, x):
                if x.sum() > 0:
                    return x.sum().item()
                return x
            """,
            "not known to be a tensor",
        ),
    ],
)
def test_returning_branches_left_alone_say_why(forward, reason, tmp_path):
    finding, *_ = [d for d in fix(model(forward), tmp_path).remaining if d.code == "TP201"]
    assert reason in finding.no_fix


def test_cond_clones_only_what_may_alias_an_input(tmp_path):
    source = model("""
        def forward(self, x):
            if x.sum() > 0:
                a, b = x.chunk(2)
                return a, b * 2
            c = x + 1
            return c, x.t()
        """)
    expected = """
        def forward(self, x):
            def then_branch(x):
                a, b = x.chunk(2)
                return a.clone(), b * 2
            def else_branch(x):
                c = x + 1
                return c, x.t().clone()
            return torch.cond(x.sum() > 0, then_branch, else_branch, (x,))
        """
    assert fix(source, tmp_path).text == model(expected)


def test_python_flags_before_the_tensor_condition_stay_an_if(tmp_path):
    source = model("""
        def forward(self, x, mask=None):
            scores = x * 2
            if mask is not None and mask.any():  # skip an all-zero mask
                scores = scores + mask
            if self.training and x.sum() > 0: scores = scores - 1  # one line
            return scores
        """)
    expected = """
        def forward(self, x, mask=None):
            scores = x * 2
            if mask is not None:  # skip an all-zero mask
                scores = torch.where(mask.any(), scores + mask, scores)
            if self.training:
                # one line
                scores = torch.where(x.sum() > 0, scores - 1, scores)
            return scores
        """
    result = fix(source, tmp_path)
    assert result.text == model(expected)
    x = torch.randn(8)
    for mask in (None, torch.zeros(8), torch.randn(8)):
        torch.testing.assert_close(load(result.text)(x, mask), load(source)(x, mask))


def test_one_line_branches(tmp_path):
    source = model("""
        def forward(self, x):
            y = x + 1
            if y.sum() > 0: y = y * 2
            else: y = y * 3; y = y + 1
            return y
        """)
    expected = """
        def forward(self, x):
            y = x + 1
            y_else = y * 3
            y = torch.where(y.sum() > 0, y * 2, y_else + 1)
            return y
        """
    result = fix(source, tmp_path)
    assert result.text == model(expected)
    assert_equivalent(source, result.text, signed(8))


def test_chained_comparisons_are_split(tmp_path):
    source = model("""
        def forward(self, x):
            y = x + 1
            if 0 < y.sum() < 10:
                y = y * 2
            return y
        """)
    expected = """
        def forward(self, x):
            y = x + 1
            y = torch.where((0 < y.sum()) & (y.sum() < 10), y * 2, y)
            return y
        """
    result = fix(source, tmp_path)
    assert result.text == model(expected)
    assert_equivalent(source, result.text, signed(8) + [(torch.full((8,), 0.5),)])


def test_unpacking_branches_become_cond(tmp_path):
    source = model("""
        def forward(self, x):
            a = x * 1
            b = x * 2
            if x.sum() > 0:
                a, b = x.chunk(2)
                b = b * 3
            else:
                b = x[:4] + 1
                a = b - 1
            return a + b
        """)
    expected = """
        def forward(self, x):
            a = x * 1
            b = x * 2
            def then_branch(x):
                a, b = x.chunk(2)
                b = b * 3
                return a.clone(), b
            def else_branch(x):
                b = x[:4] + 1
                a = b - 1
                return a, b
            a, b = torch.cond(x.sum() > 0, then_branch, else_branch, (x,))
            return a + b
        """
    result = fix(source, tmp_path)
    assert result.text == model(expected)
    assert_equivalent(source, result.text, signed(8)[:4])


def test_unpacking_in_one_branch_returns_the_old_value_from_the_other(tmp_path):
    source = model("""
        def forward(self, x):
            a = x[:4] * 1
            if x.sum() > 0:
                a, b = x.chunk(2)
            return a
        """)
    (finding,) = fix(source, tmp_path).remaining
    assert "`b` is assigned in one branch only" in finding.no_fix


def test_assert_sharing_its_line_is_left_alone(tmp_path):
    source = model("""
        def forward(self, x):
            y = x + 1; assert (y > 0).all() and (y < 9).all()
            return y
        """)
    (finding,) = fix(source, tmp_path).remaining
    assert "shares its line" in finding.no_fix


# -- TP201: a check that only reports --------------------------------------------------------------------

REPORT_ONLY = """\
import warnings

import torch
from torch import nn


class Model(nn.Module):
    def forward(self, h):
        h = h * 2
        # warn on overflow
        if not torch.isfinite(h).all():  # rare
            warnings.warn("non-finite activations")
            print("bad", h.shape)
        return h + 1
"""

REPORT_ONLY_FIXED = REPORT_ONLY.replace(
    "if not torch.isfinite(h).all():", "if not torch.compiler.is_compiling() and not torch.isfinite(h).all():"
)


def test_a_check_that_only_reports_is_skipped_under_compile(tmp_path):
    fixed = fix(REPORT_ONLY, tmp_path)
    assert fixed.text == REPORT_ONLY_FIXED
    assert [d.fix.safety for d in fixed.applied] == ["safe"]
    assert fixed.remaining == []
    assert_equivalent(REPORT_ONLY, fixed.text, signed(4))


def test_a_check_that_only_reports_unwraps_the_guards_of_its_calls():
    """With every rule on, the calls are guarded first, then the `if`, which drops their guards."""
    from tests.rule_examples import fix_snippet

    result, text = fix_snippet(REPORT_ONLY, unsafe=False)
    assert text == REPORT_ONLY_FIXED
    assert sorted(d.code for d in result.applied) == ["TP101", "TP103", "TP201"]
    again, _ = fix_snippet(text, unsafe=True)
    assert again.applied == []


def test_an_if_that_reports_and_computes_is_not_a_check(tmp_path):
    source = REPORT_ONLY.replace('            print("bad", h.shape)\n', "            h = h.nan_to_num()\n")
    fixed = fix(source, tmp_path)
    assert all(d.fix.safety == "unsafe" for d in fixed.applied)


NUMBER_CHECK = """\
import logging
import math

import torch
from torch import nn

logger = logging.getLogger(__name__)


class Model(nn.Module):
    def forward(self, h):
        loss = (h * 2).mean()
        if not math.isfinite(loss):
            logger.warning("non-finite loss %.3f", loss.item())
        return loss + 1
"""


def test_a_check_on_a_number_read_from_a_tensor_that_only_reports_is_skipped_under_compile():
    """Dynamo breaks at `math.isfinite(loss)`; the `if` is reported with it and the whole check guarded, so the
    conversion and the `.item()` in the report run only in eager code. All rules on, default flags."""
    from tests.rule_examples import fix_snippet

    result, text = fix_snippet(NUMBER_CHECK, unsafe=False)
    assert "if not torch.compiler.is_compiling() and not math.isfinite(loss):" in text
    assert [d.fix.safety for d in result.applied] == ["safe"] * len(result.applied)
    assert result.remaining == []
    assert_equivalent(NUMBER_CHECK, text, signed(4))


REPORT_THEN_FILL = """\
import warnings

import torch
from torch import nn


class Model(nn.Module):
    def forward(self, h):
        h = h * 2
        # fill NaNs, and say so
        if torch.isnan(h).any():
            warnings.warn(f"NaNs in the activations: {h.isnan().sum()} values")
            h = torch.nan_to_num(h)
        return h + 1
"""


def test_a_check_that_reports_then_assigns_becomes_a_guarded_report_and_where(tmp_path):
    """The report runs only when not compiling, before the assignments, on the values it read before; the
    assignment becomes `torch.where` (unsafe here: `nan_to_num` raises on complex tensors)."""
    import warnings

    from tests.rule_examples import fix_snippet

    result, text = fix_snippet(REPORT_THEN_FILL, unsafe=True)
    assert "        if not torch.compiler.is_compiling() and torch.isnan(h).any():\n            warnings.warn(" in text
    assert "        h = torch.where(torch.isnan(h).any(), torch.nan_to_num(h), h)\n" in text
    assert "# fill NaNs, and say so" in text and result.remaining == []
    assert_equivalent(REPORT_THEN_FILL, text, signed(4))
    before, after = load(REPORT_THEN_FILL), load(text)
    for (x,) in signed(4):
        with warnings.catch_warnings(record=True) as said_before:
            warnings.simplefilter("always")
            before(x)
        with warnings.catch_warnings(record=True) as said_after:
            warnings.simplefilter("always")
            after(x)
        assert [str(w.message) for w in said_before] == [str(w.message) for w in said_after]
    assert fix_snippet(REPORT_THEN_FILL, unsafe=False)[1].count("torch.where") == 0  # not proven: stays unsafe


# -- TP201: in-place updates of module state (one-time initialisation) -----------------------------------

INIT_ONCE = """\
import math

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))
        self.register_buffer("initialized", torch.zeros(1, dtype=torch.uint8))
        self.register_buffer("seen", torch.zeros(3))

    def forward(self, x):
        # initialise from the first batch
        if self.initialized == 0:
            std = x.detach().std(0)
            self.scale.data.copy_(1 / (std + 1e-6))
            self.seen.zero_()
            self.initialized.fill_(1)
        return x * self.scale / math.sqrt(3)
"""


def _state(model: torch.nn.Module) -> dict:
    return {name: value.clone() for name, value in model.state_dict().items()}


def test_state_updates_under_a_tensor_condition_become_masked_writes(tmp_path):
    """Each update writes through `torch.where` on every call, the condition read once before the first;
    over several calls (the first initialises, the others do not) outputs and state stay equal, eager
    and compiled, and Dynamo sees one graph."""
    result = fix(INIT_ONCE, tmp_path)
    assert result.remaining == []
    assert "        # initialise from the first batch\n        # transpile (TP201): these updates run" in result.text
    assert "        cond = self.initialized == 0\n        std = x.detach().std(0)\n" in result.text
    assert "self.scale.data.copy_(torch.where(cond, 1 / (std + 1e-6), self.scale.data))" in result.text
    assert "self.seen.copy_(torch.where(cond, 0, self.seen))" in result.text
    assert "self.initialized.copy_(torch.where(cond, 1, self.initialized))" in result.text
    batches = [torch.randn(5, 3, generator=torch.Generator().manual_seed(i)) * (i + 1) for i in range(3)]
    for compiled in (False, True):
        before, after = load(INIT_ONCE), load(result.text)
        after.seen.fill_(7.0)
        before.seen.fill_(7.0)
        run = torch.compile(after, backend="aot_eager", fullgraph=True) if compiled else after
        for x in batches:
            torch.testing.assert_close(run(x), before(x), rtol=0, atol=0)
            torch.testing.assert_close(_state(after), _state(before), rtol=0, atol=0)
    torch._dynamo.reset()
    assert torch._dynamo.explain(load(result.text))(batches[0]).graph_break_count == 0
    assert torch._dynamo.explain(load(INIT_ONCE))(batches[0]).graph_break_count > 0


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("self.scale.copy_(x.mean(0))", "`self.scale.copy_()` may write into a tensor autograd records"),
        ("self.seen.add_(x.mean(0))", "a branch calls `self.seen.add_()` for its side effects"),
        ("self.seen.copy_(x.mean(0), non_blocking=True)", "is called with other arguments than the value"),
        (
            "m = x.mean(0)\n            self.seen.copy_(m)\n        y = m",
            "`m` is assigned in the branch and read outside it",
        ),
    ],
)
def test_state_updates_left_alone_say_why(body, reason, tmp_path):
    source = INIT_ONCE.replace(
        "std = x.detach().std(0)\n            self.scale.data.copy_(1 / (std + 1e-6))\n            self.seen.zero_()\n"
        "            self.initialized.fill_(1)",
        body,
    )
    assert body in source
    (finding,) = fix(source, tmp_path).remaining
    assert reason in finding.no_fix


# -- TP201: `if <tensor>: break` in a `for` loop over a static range, bounded -----------------------------

MARCHING = """\
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.field = nn.Linear(4, 4)

    def forward(self, x, eps):
        total = x.new_zeros(x.shape[0])
        light = x.new_ones(x.shape[0])
        for step in range(6):
            h = torch.tanh(self.field(x * (step + 1)))
            light = light * torch.sigmoid(h.sum(-1))
            if light.max() < eps:  # opaque: stop marching
                break
            weight, rest = h.abs().mean(-1), h.amax(-1)
            total += weight * light + rest
        return total, light
"""


def test_a_break_in_a_static_loop_becomes_a_bounded_loop(tmp_path):
    """Every iteration runs; from the `break` on, `torch.where` keeps each carried value as it was: the same
    bits as the original wherever it stops (at once, midway, never), also statements after the test in the
    same iteration, and one graph under Dynamo."""
    result = fix(MARCHING, tmp_path)
    assert [d.code for d in result.remaining] == []
    text = result.text
    assert "        stopped = light.new_zeros((), dtype=torch.bool)\n        for step in range(6):\n" in text
    assert "            light_step = light * torch.sigmoid(h.sum(-1))\n" in text
    assert "            light = torch.where(stopped, light.expand_as(light_step), light_step)\n" in text
    assert "            # opaque: stop marching\n            stopped = stopped | (light.max() < eps)\n" in text
    assert "            total_step = total + (weight * light + rest)\n" in text
    assert "weight, rest = h.abs().mean(-1), h.amax(-1)\n" in text  # computed per iteration, not carried
    torch.manual_seed(0)  # the weights decide where the original stops; the eps below are chosen for them
    before, after = load(MARCHING), load(text)
    after.load_state_dict(before.state_dict())
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    stops = set()
    for eps in (2.0, 0.5, 0.3, 0.15, 0.0):
        with torch.no_grad():
            got, want = after(x, torch.tensor(eps)), before(x, torch.tensor(eps))
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        stops.add(float(want[1].max()))
    assert len(stops) >= 3  # the original left the loop at different iterations
    compiled = torch.compile(after, backend="aot_eager", fullgraph=True)
    for eps in (2.0, 0.5, 0.0):
        torch.testing.assert_close(compiled(x, torch.tensor(eps)), before(x, torch.tensor(eps)))
    torch._dynamo.reset()
    explained = [torch._dynamo.explain(m)(x, torch.tensor(0.5)) for m in (before, after)]
    # Dynamo skips the original's frame (a break in a loop) or splits it; the bounded loop is one graph.
    assert [(e.graph_count, e.graph_break_count) == (1, 0) for e in explained] == [False, True]


@pytest.mark.parametrize(
    ("loop", "reason"),
    [
        (
            "for step in range(4):\n    seq = torch.cat([seq, seq[:, -1:] + 1], 1)\n    if seq.sum() > 9:\n        break",
            "`torch.cat()` may change the shape of a carried value",
        ),
        (
            "for step in range(4):\n    y = seq * 2\n    if y.sum() > 9:\n        break\n    last = y",
            "`last` is carried by the loop but not bound before it",
        ),
        (
            "total = 0\nfor step in range(4):\n    total = total + seq.sum()\n    if total > 9:\n        break\n"
            "seq = seq * total",
            "`total` is carried by the loop and not known to be a tensor before it",
        ),
        (
            "for step in range(4):\n    seq = seq * 2\n    if seq.sum() > 9:\n        break\n    if seq.sum() < 0:\n"
            "        continue",
            "the loop holds `continue`",
        ),
        (
            "for step in range(int(seq.sum())):\n    seq = seq * 2\n    if seq.sum() > 9:\n        break",
            "the `range()` bounds are read from tensors",
        ),
        (
            "for step in range(4):\n    seq = seq * 2\n    print(seq)\n    if seq.sum() > 9:\n        break",
            "not only assignments to names",
        ),
    ],
)
def test_a_break_left_alone_says_why(loop, reason, tmp_path):
    body = "seq = x.reshape(1, -1)\n" + loop + ("\nreturn seq, last" if "last" in loop else "\nreturn seq")
    source = model("def forward(self, x):\n" + textwrap.indent(body, "    "))
    found = [d for d in fix(source, tmp_path).remaining if d.code == "TP201"]
    assert any(reason in (d.no_fix or "") for d in found), [d.no_fix for d in found]
