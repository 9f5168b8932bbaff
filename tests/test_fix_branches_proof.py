"""The `torch.where` fixes proven equal (TP201/TP203 safe, applied by default), the guards that raise
(TP201 -> `torch._assert_async`) and the `while` loops (TP202 -> `torch.while_loop`): each rewrite
run beside the original on inputs of several dtypes, shapes and signs (both outcomes of every
condition, NaN, empty tensors), bit for bit with the same gradients for the safe ones, and with no
graph break left under Dynamo."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_fix_control_flow import Fixed, load, model  # noqa: E402
from transpiler.lint import engine, fixer  # noqa: E402


def fix(source: str, tmp_path: Path, unsafe: bool) -> Fixed:
    """The control-flow fixes applied to `source`: the safe ones, or all with `unsafe`."""
    path = tmp_path / "model.py"
    path.write_text(source, encoding="utf-8")

    def lint(overlay):
        return engine.lint([path], lambda code: code.startswith("TP20"), "TP20", None, overlay=overlay)

    result = fixer.fix_project([path], lint, unsafe=unsafe)
    return Fixed(result.sources.get(path, source), result.applied, result.remaining)


ALL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.int64, torch.bool, torch.complex64)


def inputs(dtypes=(torch.float32, torch.float64, torch.float16, torch.int64)) -> list[torch.Tensor]:
    """Both signs of every shape and dtype (so `x.sum() > 0` goes both ways), NaN and inf, empty;
    booleans all False and some True."""
    generator = torch.Generator().manual_seed(0)
    drawn = []
    for dtype in dtypes:
        for shape in [(8,), (2, 3, 4), (0, 3)]:
            base = torch.randn(shape, generator=generator) * 3 + 0.5
            base = base.round() if not dtype.is_floating_point else base
            if dtype is torch.bool:
                base = base > 2  # some True (if any element is large), and then all False
            drawn += [base.to(dtype), (-base).to(dtype)] if dtype is not torch.bool else [base, base & False]
        if dtype.is_floating_point:
            special = torch.tensor([1.0, float("nan"), -2.0, float("inf"), -0.0], dtype=dtype)
            drawn += [special, -special]
    return drawn


def outcome(module: torch.nn.Module, x: torch.Tensor):
    """The outputs and input gradient of one call, or the class of the exception it raises."""
    x = x.detach().clone().requires_grad_(x.dtype.is_floating_point or x.dtype.is_complex)
    try:
        out = module(x)
    except Exception as error:  # the rewrite must raise where the original raises
        return type(error)
    outputs = out if isinstance(out, tuple) else (out,)
    differentiable = [o for o in outputs if o.requires_grad]
    grads = ()
    if differentiable:
        ones = [torch.ones_like(o) for o in differentiable]
        grads = torch.autograd.grad(differentiable, x, ones, allow_unused=True)
    return outputs, tuple(o.requires_grad for o in outputs), grads


def assert_identical(a, b) -> None:
    if isinstance(a, type) or isinstance(b, type):
        assert a == b
        return
    for got, want in zip(a[0] + a[2], b[0] + b[2]):
        assert (got is None) == (want is None)
        if got is not None:
            assert got.dtype == want.dtype and got.shape == want.shape
            assert (
                torch.equal(got, want)
                or torch.equal(got.isnan(), want.isnan())
                and torch.equal(got.nan_to_num(), want.nan_to_num())
            ), (got, want)
    assert a[1] == b[1]


def assert_no_break(source: str, x: torch.Tensor) -> None:
    torch._dynamo.reset()
    explained = torch._dynamo.explain(load(source))(x)
    assert explained.graph_break_count == 0, explained.break_reasons


# -- proven equal: safe, applied by default -------------------------------------------------------------

PROVEN = {
    "scale": """
        y = x + 1
        if y.sum() > 0:
            y = y * 2
        return y - 1
        """,
    "float literals on both arms": """
        h = x.float()
        if x.sum() > 0:
            a = h * 0.5
            b = h / 4
        else:
            a = h * 2.0
            b = -h / 3
        return a, b
        """,
    "elif chain of total conditions": """
        y = x.double()
        if (x > 0).all():
            y = torch.relu(y) + 1
        elif (y < 0).any():
            y = -y
        else:
            y = y - 2
        return y
        """,
    "arithmetic that makes booleans integers": """
        y = x * 2
        if x.sum() > 0:
            y = y + 1
        return y
        """,
    "several names and a temporary": """
        y = x + 1
        z = x - 1
        if (y > 2).any():
            t = y * 3
            y = t - z
            z = t + 1
        return y, z
        """,
    "zero-dim name": """
        h = x.double()
        s = h.amax()
        y = h * 1
        if s:
            y = y - s
        return y
        """,
    "nan check condition": """
        y = x + 0
        if torch.isnan(x).any() or x.sum() > 3:
            y = y * 0
        return y
        """,
    "ternary": """
        return x * 2 if x.sum() > 0 else x * 3
        """,
    "partial reduction in the if condition": """
        y = x + 1
        if x.float().mean() > 0:
            y = y + y
        return y
        """,
    "detached arms": """
        y = x.detach()
        if x.sum() > 0:
            y = torch.zeros_like(x)
        return y
        """,
}


@pytest.mark.parametrize("case", PROVEN)
def test_proven_rewrite_is_default_and_bitwise_equal(case, tmp_path):
    source = model("def forward(self, x):\n" + "\n".join("    " + line for line in PROVEN[case].splitlines()))
    result = fix(source, tmp_path, unsafe=False)
    assert result.applied and all(d.fix.safety == "safe" for d in result.applied), result.remaining
    assert [d for d in result.remaining if d.code in ("TP201", "TP203")] == []
    assert "torch.where" in result.text
    before, after = load(source), load(result.text)
    for x in inputs(ALL_DTYPES):
        assert_identical(outcome(after, x), outcome(before, x))
    assert_no_break(result.text, torch.randn(8))


# Values whose dtype is floating or complex by construction: a `nn.Linear`'s output (its parameters'
# dtype), `torch.sigmoid` of anything. A float literal then keeps the dtype, so these are proven.
FLOATING = {
    "submodule output scaled": "h = self.fc(x)\nif h.mean() > 0:\n    h = h * 0.5\nreturn h",
    "submodule output, ternary": "h = self.fc(x)\nreturn h * 2 if h.sum() > 0 else h / 3",
    "sigmoid shifted": "h = torch.sigmoid(self.fc(x))\nif h.mean() > 0.5:\n    h = h - 0.5\nreturn h",
    "non-finite values zeroed": "h = self.fc(x).float()\nif torch.isnan(h).any():\n    h = torch.nan_to_num(h)\nreturn h",
}
WITH_LINEAR = (
    "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
    "        super().__init__()\n        self.fc = nn.Linear(4, 4)\n\n    def forward(self, x):\n"
)


@pytest.mark.parametrize("case", FLOATING)
def test_floating_values_are_proven_for_every_parameter_dtype(case, tmp_path):
    source = WITH_LINEAR + "".join("        " + line + "\n" for line in FLOATING[case].splitlines())
    result = fix(source, tmp_path, unsafe=False)
    assert result.applied and all(d.fix.safety == "safe" for d in result.applied), result.remaining
    before, after = load(source), load(result.text)
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64):
        after.to(dtype).load_state_dict(before.to(dtype).state_dict())
        for x in inputs((torch.float64,)):  # rows of 4 features, the empty batch and NaN/inf included
            x = x.reshape(-1)[: x.numel() // 4 * 4].reshape(-1, 4).to(dtype)
            assert_identical(outcome(after, x), outcome(before, x))


# -- not proven: unsafe, with the reason in the title ---------------------------------------------------

UNPROVEN = {
    "float literal on one arm": ("if x.sum() > 0:\n    y = y * 0.5", "dtypes of `y`"),
    "product of tensors": ("if x.sum() > 0:\n    y = y * x", "multiplies two tensors"),
    "unbounded derivative": ("if x.sum() > 0:\n    y = y.exp()", "zero gradient into NaN"),
    "several elements": ("if x > 0:\n    y = y + 1", "not proven to have one element"),
    "gradient sources": ("if x.sum() > 0:\n    y = torch.zeros_like(y)", "different tensors"),
    "elif that may raise": ("if x.sum() > 0:\n    y = y + 1\nelif x.mean() > 0:\n    y = y - 1", "raises"),
    "broadcast": ("if x.sum() > 0:\n    y = y + x[0]", "not among the operations"),
    # `x` may be boolean (`-` raises) or complex (`relu` raises) when the untaken arm now runs.
    "negation of a maybe-boolean": ("if x.sum() > 0:\n    y = -x", "raises on bool tensors"),
    "subtraction of a maybe-boolean": ("if x.sum() > 0:\n    y = x - 1", "raises on bool tensors"),
    "relu of a maybe-complex": ("if x.sum() > 0:\n    y = torch.relu(y)", "raises on complex tensors"),
    "nan_to_num of a maybe-complex": ("if x.sum() > 0:\n    y = torch.nan_to_num(y)", "raises on complex tensors"),
    "boolean kept beside one made an integer": ("if x.sum() > 0:\n    y = x.clone()", "dtypes of `y`"),
}


@pytest.mark.parametrize("case", UNPROVEN)
def test_unproven_rewrite_is_unsafe_and_says_why(case, tmp_path):
    body, reason = UNPROVEN[case]
    source = model(
        "def forward(self, x):\n    y = x + 1\n" + "\n".join("    " + l for l in body.splitlines()) + "\n    return y"
    )
    default = fix(source, tmp_path, unsafe=False)
    assert default.applied == []
    (finding,) = [d for d in default.remaining if d.code == "TP201" and d.fix is not None]
    assert finding.fix.safety == "unsafe" and reason in finding.fix.title
    assert fix(source, tmp_path, unsafe=True).applied  # still fixed under --unsafe-fixes


def test_a_name_assigned_in_one_branch_and_read_after_is_left_alone(tmp_path):
    source = model("""
        def forward(self, x):
            y = x + 1
            if y.sum() > 0:
                q = y * 2
            return q
        """)
    (finding,) = fix(source, tmp_path, unsafe=True).remaining
    assert "assigned in one branch only" in finding.no_fix


def test_a_name_local_to_one_branch_becomes_a_temporary(tmp_path):
    source = model("""
        def forward(self, x):
            y = x + 1
            if y.sum() > 0:
                q = y * 2
                y = q + 1
            return y
        """)
    expected = """
        def forward(self, x):
            y = x + 1
            q_then = y * 2
            y = torch.where(y.sum() > 0, q_then + 1, y)
            return y
        """
    result = fix(source, tmp_path, unsafe=False)
    assert result.text == model(expected)


# -- guards that raise ----------------------------------------------------------------------------------

GUARDS = model("""
    def forward(self, x):
        y = x + 1
        # validate
        if (y < 0).any():
            raise ValueError("negative values")
        if torch.isnan(y).any():
            raise ValueError(f"NaN in {y.shape}")
        return y * 2
    """)


def test_a_guard_that_raises_becomes_assert_async(tmp_path):
    result = fix(GUARDS, tmp_path, unsafe=True)
    expected = """
        def forward(self, x):
            y = x + 1
            # validate
            torch._assert_async(~(y < 0).any(), "negative values")
            torch._assert_async(~torch.isnan(y).any(), "NaN in {y.shape}")
            return y * 2
        """
    assert result.text == model(expected)
    before, after = load(GUARDS), load(result.text)
    for x in inputs((torch.float32,)):
        want = outcome(before, x)
        got = outcome(after, x)
        if want is ValueError:
            assert got is RuntimeError  # the documented difference: `_assert_async` raises RuntimeError
        else:
            assert_identical(got, want)
    assert_no_break(result.text, torch.rand(8))


def test_a_guard_raising_with_concatenated_f_strings_gets_its_condition_as_message(tmp_path):
    # `f"a" f"b"` is one JoinedStr for ast but a ConcatenatedString for libcst (a crash on minicpmv4_7).
    source = model("""
        def forward(self, x):
            if torch.isnan(x).any():
                raise ValueError(f"NaN in {x.shape} " f"of {x.dtype}")
            return x * 2
        """)
    result = fix(source, tmp_path, unsafe=True)
    expected = """
        def forward(self, x):
            torch._assert_async(~torch.isnan(x).any(), "assert torch.isnan(x).any()")
            return x * 2
        """
    assert result.text == model(expected)


# -- while loops ----------------------------------------------------------------------------------------

WHILE = model("""
    def forward(self, x):
        y = x.abs() + 1
        total = x * 0
        # grow until large
        while y.sum() < 100:  # data-dependent trip count
            t = y * 2
            y = t + 1
            total = total + t
        return y, total
    """)


def test_while_becomes_while_loop(tmp_path):
    result = fix(WHILE, tmp_path, unsafe=True)
    expected = """
        def forward(self, x):
            y = x.abs() + 1
            total = x * 0
            # grow until large
            # data-dependent trip count
            def loop_cond(y, total):
                return y.sum() < 100
            def loop_body(y, total):
                t = y * 2
                y = t + 1
                total = total + t
                return (y, total)
            loop_entered = loop_cond(y, total)
            y_looped, total_looped = torch.while_loop(loop_cond, loop_body, (y, total))
            # a loop that runs zero times keeps its inputs and their gradients
            y = torch.where(loop_entered, y_looped, y)
            total = torch.where(loop_entered, total_looped, total)
            return y, total
        """
    assert result.text == model(expected)
    assert fix(WHILE, tmp_path, unsafe=False).applied == []
    before, after = load(WHILE), load(result.text)
    # (an empty tensor would loop forever, in the original too)
    finite = [x for x in inputs((torch.float32, torch.float64)) if x.isfinite().all() and x.numel()]
    for x in finite:  # one iteration to many
        assert_identical(outcome(after, x), outcome(before, x))
    # No iteration: torch 2.13's while_loop backward alone would apply one iteration's derivative
    # (2 instead of 1); the `torch.where` on the condition's first value keeps the input's.
    for x in (torch.full((3,), 60.0), torch.full((2, 2), -70.0, dtype=torch.float64)):
        assert_identical(outcome(after, x), outcome(before, x))
    assert_no_break(result.text, torch.randn(8))


def test_while_loop_reads_other_tensors(tmp_path):
    source = model("""
        def forward(self, x):
            y = x.abs() + 1
            w = x.abs() * 0.5 + 0.5
            while (y < 10).all():
                y = (y + w).view(-1).view_as(x)
            return y
        """)
    result = fix(source, tmp_path, unsafe=True)
    assert "return (y.clone(),)" in result.text  # a view may alias a carried tensor
    (applied,) = result.applied
    assert "shapes not proven" in applied.fix.title
    before, after = load(source), load(result.text)
    for x in [x for x in inputs((torch.float32,)) if x.numel()][:4]:
        assert_identical(outcome(after, x), outcome(before, x))
    assert_no_break(result.text, torch.randn(8))


LEFT_ALONE_WHILE = {
    "break": ("while y.sum() < 100:\n    y = y * 2\n    if (y > 50).any():\n        break", "holds `if"),
    "counter": ("n = 0\nwhile y.sum() < 100:\n    y = y * 2\n    n = n + 1", "`n` is a scalar"),
    "else": ("while y.sum() < 100:\n    y = y * 2\nelse:\n    y = y + 1", "`else:`"),
    "side effect": ("while y.sum() < 100:\n    y = y * 2\n    print(y)", "side effects"),
    "python condition": ("while y.sum() < 100 and self.training:\n    y = y * 2", "not only tensors"),
}


@pytest.mark.parametrize("case", LEFT_ALONE_WHILE)
def test_while_left_alone_says_why(case, tmp_path):
    body, reason = LEFT_ALONE_WHILE[case]
    lines = "\n".join("    " + line for line in body.splitlines())
    source = model(f"def forward(self, x):\n    y = x.abs() + 1\n{lines}\n    return y")
    (finding,) = [d for d in fix(source, tmp_path, unsafe=True).remaining if d.code == "TP202"]
    assert reason in finding.no_fix
