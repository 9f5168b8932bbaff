"""Fusing across an `if` (transpiler/compiler/tails.py): the statements right before an `if` and right after it
are copied into both branches, so that GPT-2's residual add and the LayerNorm after its optional cross
attention are one region where the cross attention does not run.

The rewritten text is pinned for a GPT-2-like block; every refusal rule leaves the text as hoisting
alone leaves it (each beside the block, which is rewritten); the block and transformers' GPT-2 (with
and without cross attention) run beside the originals with the C++ kernels, whose counts must show
the kernel of the branch that ran.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests.transpiled import importable
from transpiler.compiler.hoisting import hoist_regions
from transpiler.compiler.passes import compile_unit, start

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

BLOCK = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.attn = nn.Linear(d, d)
        self.cross = nn.Linear(d, d)
        self.ln_cross = nn.LayerNorm(d)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Linear(d, d)

    def forward(self, x, encoder_hidden_states=None):
        residual = x
        attn_output = self.attn(x)
        # residual connection
        hidden_states = attn_output + residual

        if encoder_hidden_states is not None:
            if encoder_hidden_states.shape != hidden_states.shape:
                raise ValueError("cross attention needs states of the block's shape")
            residual = hidden_states
            hidden_states = self.ln_cross(hidden_states)
            cross_attn_output = self.cross(hidden_states + encoder_hidden_states)
            hidden_states = residual + cross_attn_output

        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp(hidden_states)
        return residual + feed_forward_hidden_states
"""
IF_BLOCK = BLOCK[
    BLOCK.index("        if encoder_hidden_states") : BLOCK.index("\n\n        residual = hidden_states") + 1
]
FORWARD = [
    "residual = x",
    "attn_output = self.attn(x)",
    "# residual connection",
    "",
    '# transpile: line 19 and lines 29-30 copied into both branches to fuse (docs/compiler.md: "Fusing across an if")',
    "if encoder_hidden_states is not None:",
    "    hidden_states = attn_output + residual",
    "    if encoder_hidden_states.shape != hidden_states.shape:",
    '        raise ValueError("cross attention needs states of the block\'s shape")',
    "    residual = hidden_states",
    "    hidden_states = self.ln_cross(hidden_states)",
    "    cross_attn_output = self.cross(hidden_states + encoder_hidden_states)",
    "    hidden_states = residual + cross_attn_output",
    "    residual = hidden_states",
    "    hidden_states = self.ln_2(hidden_states)",
    "else:",
    "    hidden_states = attn_output + residual",
    "    residual = hidden_states",
    "    hidden_states = self.ln_2(hidden_states)",
    "",
    "feed_forward_hidden_states = self.mlp(hidden_states)",
    "return residual + feed_forward_hidden_states",
]


def fuse(text: str):
    """The build's passes over `text` (as on disk): the text they compile, its regions and their provenance."""
    return compile_unit(start("m.py", "m", False, text, text))


def forward_lines(text: str) -> list[str]:
    """The body of `forward`, dedented by its indentation."""
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == "forward")
    return [line[8:] for line in text.splitlines()[node.lineno : node.end_lineno]]


def line_of(text: str, statement: str) -> int:
    return [line.strip() for line in text.splitlines()].index(statement) + 1


# -- the rewritten text ------------------------------------------------------------------------
def test_the_add_and_the_norm_are_copied_into_both_branches_and_fuse_in_the_else_branch():
    fused = fuse(BLOCK)
    assert forward_lines(fused.text) == FORWARD
    else_line = fused.text.splitlines().index("        else:") + 1
    (skipped,) = [r for r in fused.regions if r.first_line > else_line]
    assert [n.op for n in skipped.nodes] == ["add", "layer_norm"]
    assert {o.target for o in skipped.outputs} == {"hidden_states", "residual"}  # both results kept
    # Reports and comments name the lines of the source: the add, then the norm below the `if`.
    shown = fused.origin.region(skipped)
    add, norm = line_of(BLOCK, "hidden_states = attn_output + residual"), line_of(
        BLOCK, "hidden_states = self.ln_2(hidden_states)"
    )
    assert (shown.first_line, shown.last_line) == (add, norm)
    assert [n.line for n in shown.nodes] == [add, norm]
    # With cross attention, its residual add and the norm are one region too.
    (crossed,) = [r for r in fused.regions if r.last_line < else_line and "layer_norm" in [n.op for n in r.nodes]]
    assert [n.op for n in crossed.nodes] == ["add", "layer_norm"]


def test_every_other_line_is_byte_identical():
    fused = fuse(BLOCK)
    moved = {
        "hidden_states = attn_output + residual",
        "residual = hidden_states",
        "hidden_states = self.ln_2(hidden_states)",
    }
    added = moved | {"else:"}
    kept = [line for line in BLOCK.splitlines(keepends=True) if line.strip() not in moved]
    new = [
        line
        for line in fused.text.splitlines(keepends=True)
        if line.strip() not in added and "# transpile:" not in line
    ]
    assert new == kept


# -- what stays as it is -----------------------------------------------------------------------
REFUSED = {
    # rule: (a line of BLOCK, what it becomes)
    "test reads what the statements before bind": (
        "if encoder_hidden_states is not None:", "if hidden_states is not None:"
    ),
    "test calls": ("if encoder_hidden_states is not None:", "if encoder_hidden_states.any():"),
    "test is a truth value": ("if encoder_hidden_states is not None:", "if encoder_hidden_states:"),
    "test compares with ==": ("if encoder_hidden_states is not None:", "if encoder_hidden_states == None:"),
    "else": (
        "        residual = hidden_states\n        hidden_states = self.ln_2",
        "        else:\n            hidden_states = hidden_states * 1.0\n"
        "        residual = hidden_states\n        hidden_states = self.ln_2",
    ),
    "body returns": (
        "            hidden_states = residual + cross_attn_output\n",
        "            hidden_states = residual + cross_attn_output\n            return hidden_states\n",
    ),
    "body yields": (
        "            hidden_states = residual + cross_attn_output\n",
        "            hidden_states = residual + cross_attn_output\n            yield hidden_states\n",
    ),
    "body on the header's line": (IF_BLOCK, "        if encoder_hidden_states is not None: hidden_states = hidden_states * 2\n"),
    # the statements after the `if` compute nothing with those before it: no region spans both
    "nothing fuses": ("        hidden_states = self.ln_2(hidden_states)\n", ""),
}  # fmt: skip


@pytest.mark.parametrize("line, becomes", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_if_keeps_the_text_hoisting_gives_it(line, becomes):
    assert line in BLOCK
    text = BLOCK.replace(line, becomes)
    fused = fuse(text)
    assert fused.text == hoist_regions(ast.parse(text), "m.py", "m", False, text).text
    assert "# transpile:" not in fused.text


LOOP = """
import torch
from torch import nn


class Loop(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x, e=None):
        for _ in range(2):
            h = x + x
            if e is not None:
                {jump}
            r = h
            h = self.ln(h)
        return h, r
"""


@pytest.mark.parametrize(
    "jump, rewritten",
    [("break", False), ("continue", False), ("for _ in range(2):\n                    break", True)],
    ids=["break", "continue", "break of a loop in the body"],
)
def test_break_and_continue_refuse_only_when_they_leave_the_body(jump, rewritten):
    assert ("# transpile:" in fuse(LOOP.format(jump=jump)).text) == rewritten


# -- built and run -----------------------------------------------------------------------------
PACKAGE = "tails_fixture"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """BLOCK transpiled into PACKAGE, beside it the original as `tails_original`; on sys.path."""
    base = tmp_path_factory.mktemp("tails")
    source = base / "src"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "block.py").write_text(BLOCK)
    (base / "tails_original.py").write_text(BLOCK)
    gpt2 = Path(transformers.__file__).parent / "models" / "gpt2"
    with importable(
        base, {source: base / PACKAGE / "block", gpt2: base / PACKAGE / "gpt2"}, (PACKAGE, "tails_original")
    ):
        yield base


def kernel_counts(module) -> dict[str, int]:
    return {name: kernel.counts.get("cpp", 0) for name, kernel in vars(module).items() if hasattr(kernel, "counts")}


def ran(module, before: dict[str, int]) -> dict[str, int]:
    return {name: n - before.get(name, 0) for name, n in kernel_counts(module).items() if n != before.get(name, 0)}


def test_the_emitted_module_says_why_the_statements_appear_twice(built):
    text = (built / PACKAGE / "block" / "block.py").read_text()
    comment = "        # transpile: line 19 and lines 29-30 copied into both branches to fuse"
    assert text.count(comment) == 1
    assert text.split(comment, 1)[1].split("\n")[1] == "        if encoder_hidden_states is not None:"


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, {}), (torch.bfloat16, {"rtol": 2e-2, "atol": 2e-2})])
@pytest.mark.parametrize("cross", [False, True], ids=["no cross attention", "cross attention"])
def test_the_block_computes_what_the_original_does_in_either_branch(built, cross, dtype, tolerance):
    original = importlib.import_module("tails_original")
    compiled = importlib.import_module(f"{PACKAGE}.block.block")
    kernels = importlib.import_module(f"{PACKAGE}.block._block_kernels")
    torch.manual_seed(0)
    reference = original.Block().eval().to(dtype)
    model = compiled.Block().eval().to(dtype)
    model.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(2, 5, 16, dtype=dtype)
    encoder = torch.randn(2, 5, 16, dtype=dtype) if cross else None
    before = kernel_counts(kernels)
    with torch.no_grad():
        torch.testing.assert_close(model(x, encoder), reference(x, encoder), **tolerance)
    # One add+norm kernel per call: the else branch's, or the cross attention's residual and norm.
    assert ran(kernels, before) == {"fused_layer_norm" if cross else "fused_layer_norm_2": 1}


def test_transformers_gpt2_runs_its_residual_add_and_ln_2_as_one_kernel(built):
    from tests.test_real_models import CASES, compare, regions, tokens

    out = built / PACKAGE / "gpt2"
    found = [r for r in regions(out) if r["function"].endswith("GPT2Block.forward")]
    assert len(found) == 2 and all("= add(" in r["ir"] and "= layer_norm(" in r["ir"] for r in found)
    compiled = importlib.import_module(f"{PACKAGE}.gpt2.modeling_gpt2")
    kernels = importlib.import_module(f"{PACKAGE}.gpt2._modeling_gpt2_kernels")
    for cross in (False, True):
        torch.manual_seed(0)
        config = CASES["gpt2"].config()
        config.add_cross_attention = cross
        original = transformers.GPT2Model(config).eval()
        model = compiled.GPT2Model(config).eval()
        model.load_state_dict(original.state_dict(), strict=True)
        inputs = tokens()
        if cross:
            inputs["encoder_hidden_states"] = torch.randn(2, 7, config.n_embd)
        before = kernel_counts(kernels)
        with torch.no_grad():
            assert "last_hidden_state" in compare(model(**inputs), original(**inputs))
        name = {False: "fused_layer_norm_2", True: "fused_layer_norm"}[cross]
        assert ran(kernels, before).get(name) == config.n_layer, (cross, ran(kernels, before))
