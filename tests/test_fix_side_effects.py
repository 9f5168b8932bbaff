"""The rewrites of progress bars (TP113), deep copies of tensors (TP511) and explicit breaks (TP517):
the exact text written, every refusal, and the original and rewritten modules run side by side in
eager (same values, same exceptions, the bar still shown) and under Dynamo (no break left)."""

from __future__ import annotations

import contextlib
import io
import tempfile
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.dynamo_harness import load_example, run_example  # noqa: E402
from transpiler.lint import engine  # noqa: E402
from transpiler.lint.fixer import fix_project  # noqa: E402


def fix(source: str, unsafe: bool = False, side_effects: str = "guard"):
    """The fixed text of `source` and the diagnostics left (with their no-fix reasons)."""
    source = textwrap.dedent(source).lstrip("\n")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "example.py"
        path.write_text(source, encoding="utf-8")
        files = [path]
        result = fix_project(
            files,
            lambda overlay: engine.lint(files, lambda code: True, "all", None, 1, None, overlay),
            unsafe,
            side_effects,
        )
        return result.sources.get(path, source), result.remaining


HEADER = "import copy\n\nimport torch\nfrom torch import nn\nfrom tqdm import tqdm, trange\n\n\n"


def body(lines: str) -> str:
    """A module whose `Model.forward(self, x)` runs `lines`."""
    return (
        HEADER
        + "class Model(nn.Module):\n    def forward(self, x):\n"
        + textwrap.indent(textwrap.dedent(lines).strip("\n"), " " * 8)
        + "\n"
    )


# --- TP113 progress bars -----------------------------------------------------------------

BAR = body("""
    y = x + 1
    for scale in tqdm([1.0, 0.5], desc="denoise", file=SINK):
        y = y * scale
    for step, _ in enumerate(trange(2, 4, file=SINK)):
        y = y + step
    return y
""").replace("class Model", "SINK = io.StringIO()\n\n\nclass Model").replace("import copy", "import copy\nimport io")


def test_iterated_bars_run_bare_under_compile():
    text, left = fix(BAR)
    assert (
        'for scale in ([1.0, 0.5] if torch.compiler.is_compiling() else tqdm([1.0, 0.5], desc="denoise", file=SINK)):'
        in text
    )
    assert (
        "for step, _ in enumerate((range(2, 4) if torch.compiler.is_compiling() else trange(2, 4, file=SINK))):" in text
    )
    assert left == []


def test_iterated_bars_compute_the_same_show_the_bar_in_eager_and_compile_as_one_graph():
    text, _ = fix(BAR)
    original, rewritten = load_example(BAR, "TP113-original"), load_example(text, "TP113-rewritten")
    x = torch.randn(8)
    expected = original.Model()(x)
    assert torch.equal(rewritten.Model()(x), expected)
    assert "denoise" in original.SINK.getvalue() and "denoise" in rewritten.SINK.getvalue()
    assert not run_example(BAR, name="TP113-bars-before").clean()
    assert run_example(text, name="TP113-bars-after").clean()


def test_remove_policy_drops_the_bar():
    text, _ = fix(BAR, side_effects="remove")
    assert "for scale in [1.0, 0.5]:" in text
    assert "for step, _ in enumerate(range(2, 4)):" in text


def test_bar_statements_are_guarded_and_kept_bars_refused():
    text, left = fix(body("""
        y = x + 1
        tqdm.write("step")
        bar = tqdm(total=3, disable=True)
        return y * 2
    """))
    assert '        if not torch.compiler.is_compiling():\n            tqdm.write("step")\n' in text
    assert [(d.code, d.no_fix) for d in left] == [
        ("TP113", "only a bar that is iterated at once, or a statement of its own, can be skipped")
    ]


# --- TP511 deep copies ---------------------------------------------------------------------

DEEPCOPY = body("""
    y = x * 2
    snapshot = copy.deepcopy(y)
    snapshot.add_(1)
    return y, snapshot
""")


def test_deepcopy_of_a_computed_tensor_becomes_a_clone_where_no_grad_is_required():
    text, left = fix(DEEPCOPY)
    assert "snapshot = (y.detach().clone() if not y.requires_grad else copy.deepcopy(y))" in text
    assert left == []


def test_deepcopy_fix_keeps_values_grad_mode_and_the_error_on_autograd_history():
    text, _ = fix(DEEPCOPY)
    original, rewritten = load_example(DEEPCOPY, "TP511-original"), load_example(text, "TP511-rewritten")
    x = torch.randn(5, 3)[:, 1]  # a view that is not dense: the copy's values still agree
    for module in (original, rewritten):
        y, snapshot = module.Model()(x)
        assert torch.equal(y, x * 2) and torch.equal(snapshot, x * 2 + 1)  # the copy owns its storage
        assert not snapshot.requires_grad and snapshot.is_leaf
    leaf = torch.randn(4, requires_grad=True)
    errors = []
    for module in (original, rewritten):
        with pytest.raises(RuntimeError, match="graph leaves") as raised:
            module.Model()(leaf)
        errors.append(str(raised.value))
    assert errors[0] == errors[1]
    with torch.no_grad():
        assert torch.equal(rewritten.Model()(leaf)[1], original.Model()(leaf)[1])


def test_deepcopy_fix_compiles_as_one_graph():
    text, _ = fix(DEEPCOPY)
    assert not run_example(DEEPCOPY, name="TP511-before").clean()
    assert run_example(text, name="TP511-after").clean()


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        ("y = x + 1\nreturn copy.deepcopy(y, {})", "only `copy.deepcopy(t)` with one argument"),
        ("y = x + 1\nreturn copy.copy(y)", "only `copy.deepcopy(t)` with one argument"),
        ("return copy.deepcopy(x + 1)", "only a tensor computed in the function"),
    ],
)
def test_deepcopy_refusals(lines, reason):
    text, left = fix(body(lines))
    assert [d.code for d in left] == ["TP511"]
    assert left[0].no_fix.startswith(reason)


# --- TP517 explicit breaks -----------------------------------------------------------------

GRAPH_BREAK = body("""
    y = x + 1
    torch._dynamo.graph_break()
    return y * 2
""")


def test_explicit_break_is_deleted_only_with_unsafe_fixes():
    safe, left = fix(GRAPH_BREAK)
    assert safe == textwrap.dedent(GRAPH_BREAK).lstrip("\n") and [d.code for d in left] == ["TP517"]
    text, left = fix(GRAPH_BREAK, unsafe=True)
    assert "graph_break" not in text and left == []
    original, rewritten = load_example(GRAPH_BREAK, "TP517-original"), load_example(text, "TP517-rewritten")
    x = torch.randn(8)
    assert torch.equal(original.Model()(x), rewritten.Model()(x))
    assert run_example(text, name="TP517-after").clean()


def test_guarded_bars_and_copies_are_not_reported_again():
    with contextlib.redirect_stderr(io.StringIO()):
        for source in (BAR, DEEPCOPY):
            text, _ = fix(source)
            again, left = fix(text)
            assert again == text and left == []


def test_deepcopy_of_an_input_is_fixed_only_as_unsafe():
    """An input may be an `nn.Parameter` (its deep copy is one, the clone a plain tensor): unsafe, the same form;
    on plain tensors the values, grad mode and raised error are the deep copy's."""
    source = body("snapshot = copy.deepcopy(x)\nsnapshot.add_(1)\nreturn x, snapshot")
    text, left = fix(source)
    assert text == textwrap.dedent(source).lstrip("\n") and [d.fix.safety for d in left] == ["unsafe"]
    text, left = fix(source, unsafe=True)
    assert left == [] and "(x.detach().clone() if not x.requires_grad else copy.deepcopy(x))" in text
    original, rewritten = load_example(source, "TP511-input-original"), load_example(text, "TP511-input-rewritten")
    x = torch.randn(4)
    assert all(torch.equal(a, b) for a, b in zip(original.Model()(x), rewritten.Model()(x)))
    parameter = torch.nn.Parameter(torch.randn(4), requires_grad=False)
    copied, cloned = original.Model()(parameter)[1], rewritten.Model()(parameter)[1]
    assert isinstance(copied, torch.nn.Parameter) and not isinstance(cloned, torch.nn.Parameter)  # why unsafe
    assert run_example(text, name="TP511-input-after").clean()
