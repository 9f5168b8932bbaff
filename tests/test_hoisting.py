"""Splitting statements (transpiler/compiler/hoisting.py): the pointwise part of a statement that mixes it with
calls the op table does not know becomes a statement of its own, and a region.

The split text is pinned for LLaMA's MLP line and its rotary lines; every refusal rule leaves its
statement byte-identical (each beside a control that the same code without the refused construct is
split); then a small tree and transformers' LLaMA are transpiled, run beside the originals in float32
and bfloat16, and the kernels of the split statements must have run.
"""

from __future__ import annotations

import ast
import importlib
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from transpiler.cli.main import main
from transpiler.compiler.hoisting import Hoisting, hoist_regions
from transpiler.compiler.ir import format_region

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HEADER = """
import torch
from torch import nn
from transformers.activations import ACT2FN
"""
ROTARY = """

def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed
"""
MLP = """

class MLP(nn.Module):
    def __init__(self, d=8, hidden=16, act="silu"):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden)
        self.up_proj = nn.Linear(d, hidden)
        self.down_proj = nn.Linear(hidden, d)
        self.act_fn = ACT2FN[act]
        self.drop = nn.Dropout(0.1)

    {async}def forward(self, x, y):
{body}
"""
ATTENTION = """

class Attention(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.mlp = MLP(d)

    def forward(self, x, cos, sin):
        h = self.mlp(x, x)
        q, k = apply_rotary_pos_emb(h.unsqueeze(1), h.unsqueeze(1), cos, sin)
        return q + k
"""
LLAMA_MLP = "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))\nreturn down_proj"


def module(body: str, asynchronous: bool = False, rotary: bool = True) -> str:
    """The MLP class whose forward runs `body`; with `rotary`, LLaMA's rotary helpers and a class calling both."""
    body = textwrap.indent(textwrap.dedent(body).strip(), " " * 8)
    mlp = MLP.replace("{async}", "async " if asynchronous else "").replace("{body}", body)
    return HEADER + ROTARY + mlp + ATTENTION if rotary else HEADER + mlp


def hoist(text: str) -> Hoisting:
    """Split and find the regions as a build does, the rotary helper typed by its call site."""
    params = {"m.apply_rotary_pos_emb": frozenset({"q", "k", "cos", "sin"})}
    return hoist_regions(ast.parse(text), "m.py", "m", False, text, tensor_params=params)


def lines_of(text: str, function: str) -> list[str]:
    """The body of `function` in `text`, dedented."""
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == function)
    return [line.strip() for line in text.splitlines()[node.lineno : node.end_lineno]]


# -- the split text ----------------------------------------------------------------------------
def test_the_llama_mlp_line_is_split_and_its_pointwise_part_is_a_region():
    text = module(LLAMA_MLP)
    split = hoist(text)
    assert lines_of(split.text, "forward") == [
        "_gate_proj = self.gate_proj(x)",
        "_up_proj = self.up_proj(x)",
        "_act_mul = self.act_fn(_gate_proj) * _up_proj",
        "down_proj = self.down_proj(_act_mul)",
        "return down_proj",
    ]
    (region,) = [r for r in split.regions if r.function == "m.MLP.forward"]
    line = split.text.splitlines().index("        _act_mul = self.act_fn(_gate_proj) * _up_proj") + 1
    assert (region.first_line, region.last_line) == (line, line)
    assert [n.op for n in region.nodes] == ["activation", "mul"]
    assert [i.source for i in region.tensor_inputs] == ["_gate_proj", "_up_proj"]
    # Comments and reports name the line before the split: the original statement.
    shown = split.origin.region(region)
    original = text.splitlines().index("        " + LLAMA_MLP.splitlines()[0]) + 1
    assert (shown.first_line, shown.last_line) == (original, original) and {n.line for n in shown.nodes} == {original}


def test_each_rotary_line_is_one_region_and_the_rest_of_the_text_is_byte_identical():
    text = module(LLAMA_MLP)
    split = hoist(text)
    # rotate_half is an op of the table (tests/test_rotary.py): the rotary lines fuse without a split.
    assert lines_of(split.text, "apply_rotary_pos_emb") == [
        "cos = cos.unsqueeze(unsqueeze_dim)",
        "sin = sin.unsqueeze(unsqueeze_dim)",
        "q_embed = (q * cos) + (rotate_half(q) * sin)",
        "k_embed = (k * cos) + (rotate_half(k) * sin)",
        "return q_embed, k_embed",
    ]
    rotary = [format_region(r) for r in split.regions if r.function == "m.apply_rotary_pos_emb"]
    assert len(rotary) == 2 and all(r.count(" = mul(") == 2 and r.count(" = rotate_half(") == 1 for r in rotary)
    assert split.splits == 1
    # Only the MLP's statement changed: the other lines are the original ones, in order.
    changed = {"down_proj = self.down_proj("}
    kept = [line for line in text.splitlines(keepends=True) if not any(c in line for c in changed)]
    new = {"_gate_proj", "_up_proj", "_act_mul", "down_proj = self.down_proj("}
    assert [line for line in split.text.splitlines(keepends=True) if not any(c in line for c in new)] == kept


def test_comments_continuation_lines_and_non_ascii_text_are_kept():
    body = """
    größe = self.down_proj(  # project back
        self.act_fn(self.gate_proj(x))  # gated
        * self.up_proj(x)
    )  # done
    return größe
    """
    split = hoist(module(body))
    assert split.text.split("def forward(self, x, y):\n")[1].split("\n\n")[0] == textwrap.indent(
        textwrap.dedent("""\
        _gate_proj = self.gate_proj(x)
        _up_proj = self.up_proj(x)
        _act_mul = (self.act_fn(_gate_proj)  # gated
            * _up_proj)
        größe = self.down_proj(  # project back
            _act_mul
        )  # done
        return größe"""),
        " " * 8,
    )
    assert [r.function for r in split.regions].count("m.MLP.forward") == 1


def test_names_never_collide_with_the_functions_names():
    body = """
    _up_proj = y
    _act_mul = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x) * self.up_proj(y))
    return _act_mul + _up_proj
    """
    split = hoist(module(body).replace("def forward(self, x, y)", "def forward(self, x, y, _gate_proj=None)"))
    assert lines_of(split.text, "forward")[:5] == [
        "_up_proj = y",
        "_gate_proj_2 = self.gate_proj(x)",
        "_up_proj_2 = self.up_proj(x)",
        "_up_proj_3 = self.up_proj(y)",
        "_act_mul_2 = self.act_fn(_gate_proj_2) * _up_proj_2 * _up_proj_3",
    ]


# -- what stays as it is -----------------------------------------------------------------------
REFUSED = {
    # rule: (a statement left alone, the same without what refuses it, which is split)
    "in-place method": ("out = self.act_fn(self.gate_proj(x)) * y.mul_(2)", "out = self.act_fn(self.gate_proj(x)) * y.mul(2)"),
    "attribute target": ("self.out = self.act_fn(self.gate_proj(x)) * y", "out = self.act_fn(self.gate_proj(x)) * y"),
    "subscript target": ("y[0] = self.act_fn(self.gate_proj(x)) * y", "out = self.act_fn(self.gate_proj(x)) * y"),
    "unpacking": ("out, _ = self.act_fn(self.gate_proj(x)) * y, y", "out = self.act_fn(self.gate_proj(x)) * y"),
    "several targets": ("out = z = self.act_fn(self.gate_proj(x)) * y", "out = self.act_fn(self.gate_proj(x)) * y"),
    "walrus": ("out = self.act_fn(self.gate_proj(z := x)) * z", "out = self.act_fn(self.gate_proj(x)) * x"),
    "yield": ("out = self.act_fn(self.gate_proj((yield x))) * y", "out = self.act_fn(self.gate_proj(x)) * y"),
    "comprehension": ("out = self.act_fn(self.gate_proj(x)) * sum([t for t in y])", "out = self.act_fn(self.gate_proj(x)) * sum(list(y))"),
    "lambda": ("out = self.act_fn(self.gate_proj(x)) * torch.vmap(lambda t: t)(y)", "out = self.act_fn(self.gate_proj(x)) * torch.vmap(torch.neg)(y)"),
    "and/or": ("out = self.act_fn(self.gate_proj(x)) * (y or x)", "out = self.act_fn(self.gate_proj(x)) * (y | x)"),
    "conditional": ("out = self.act_fn(self.gate_proj(x) if y is None else x) * y", "out = self.act_fn(self.gate_proj(x)) * y"),
    # the call to self.down_proj ran before the one the split would hoist
    "call order": ("out = torch.cat([self.down_proj(y), self.act_fn(self.gate_proj(x)) * y])", "out = torch.cat([self.act_fn(self.gate_proj(x)) * y, self.down_proj(y)])"),
    "two statements on a line": ("out = self.act_fn(self.gate_proj(x)) * y; z = 1", "out = self.act_fn(self.gate_proj(x)) * y  # z = 1"),
}  # fmt: skip


def test_a_dropout_around_fusible_work_is_split_off_and_stays_eager():
    """Dropout is no op of a region: the work inside its call becomes a region and the call reads its result,
    drawing eager's random numbers in training."""
    split = hoist(module("out = self.drop(self.act_fn(self.gate_proj(x)) * y)\nreturn out", rotary=False))
    assert split.splits == 1
    assert "_act_mul = self.act_fn(_gate_proj) * y\n        out = self.drop(_act_mul)\n" in split.text


@pytest.mark.parametrize("refused, control", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_statement_stays_byte_identical(refused, control):
    result = "self.out" if refused.startswith("self.out") else "y" if refused.startswith("y[0]") else "out"
    text = module(f"{refused}\nreturn {result}", rotary=False)
    split = hoist(text)
    assert split.text == text and split.splits == 0
    assert hoist(module(f"{control}\nreturn out", rotary=False)).splits == 1


@pytest.mark.parametrize(
    "body",
    [
        "with torch.autocast('cpu', enabled=bool(self.act_fn(self.gate_proj(x)) * y)):\n    out = y\nreturn out",
        "@torch.no_grad(self.act_fn(self.gate_proj(x)) * y)\ndef inner():\n    return y\nreturn inner()",
    ],
    ids=["with item", "decorator"],
)
def test_with_items_and_decorators_stay_byte_identical(body):
    text = module(body, rotary=False)
    assert hoist(text).text == text


async_body = "out = self.act_fn(self.gate_proj(await x)) * y\nreturn out"


def test_await_stays_byte_identical():
    text = module(async_body, asynchronous=True, rotary=False)
    assert hoist(text).text == text
    assert hoist(module(async_body.replace("await x", "x"), asynchronous=True, rotary=False)).splits == 1


@pytest.mark.parametrize(
    "body",
    [
        "out = self.down_proj(self.gate_proj(x) * 2)\nreturn out",  # one op: one eager kernel already
        "out = self.down_proj(self.up_proj(x))\nreturn out",  # nothing pointwise
        # two reductions along different dims are no one kernel: no region, so no split
        "out = self.down_proj(x.sum(-1, keepdim=True) + x.sum(0, keepdim=True))\nreturn out",
    ],
    ids=["one op", "nothing pointwise", "not one kernel"],
)
def test_a_statement_where_nothing_would_fuse_stays_byte_identical(body):
    text = module(body, rotary=False)
    split = hoist(text)
    assert split.text == text and split.splits == 0


# -- built and run -----------------------------------------------------------------------------
PACKAGE = "hoisting_fixture"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The module transpiled into PACKAGE, beside it the original as `hoisting_original`; on sys.path."""
    base = tmp_path_factory.mktemp("hoisting")
    source = base / "src"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "blocks.py").write_text(module(LLAMA_MLP))
    (base / "hoisting_original.py").write_text(module(LLAMA_MLP))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRANSPILE_CACHE_DIR", str(base / "cache"))
        run = CliRunner().invoke(main, ["build", "--no-cache", str(source), "-o", str(base / PACKAGE)])
        assert run.exit_code in (0, 1), run.output
        sys.path.insert(0, str(base))
        yield base
        sys.path.remove(str(base))
        for name in [n for n in sys.modules if n.split(".")[0] in (PACKAGE, "hoisting_original")]:
            del sys.modules[name]


def test_the_emitted_module_shows_the_split_statements_under_the_original_line(built):
    text = (built / PACKAGE / "blocks.py").read_text()
    line = module(LLAMA_MLP).splitlines().index("        " + LLAMA_MLP.splitlines()[0]) + 1
    # Named by its path in the tree, under the tree's own name: never the absolute path the build was given.
    guarded = text.split(f"# src/blocks.py:{line}\n", 1)
    assert len(guarded) == 2, text
    assert guarded[1].lstrip().startswith("#     _act_mul = self.act_fn(_gate_proj) * _up_proj")
    # The hoisted layer calls, on one input: sibling projections (docs/compiler.md).
    hoisted = "        _gate_proj = _transpile_siblings(_siblings_1, 0, x)\n        _up_proj = _transpile_siblings(_siblings_1, 1, x)\n"
    assert hoisted in guarded[0]


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, {}), (torch.bfloat16, {"rtol": 2e-2, "atol": 2e-2})])
def test_the_split_model_computes_what_the_original_does_in_the_kernels(built, dtype, tolerance):
    original = importlib.import_module("hoisting_original")
    compiled = importlib.import_module(f"{PACKAGE}.blocks")
    kernels = importlib.import_module(f"{PACKAGE}._blocks_kernels")
    torch.manual_seed(0)
    reference = original.Attention().eval().to(dtype)
    model = compiled.Attention().eval().to(dtype)
    model.load_state_dict(reference.state_dict(), strict=True)
    names = ("fused_activation", "fused_rotary", "fused_rotary_2")
    before = {name: getattr(kernels, name).counts["cpp"] for name in names}
    x = torch.randn(2, 5, 8, dtype=dtype)
    cos, sin = torch.randn(2, 5, 8, dtype=dtype), torch.randn(2, 5, 8, dtype=dtype)
    with torch.no_grad():
        torch.testing.assert_close(model(x, cos, sin), reference(x, cos, sin), **tolerance)
    assert {name: getattr(kernels, name).counts["cpp"] - before[name] for name in names} == dict.fromkeys(names, 1)


# -- the real thing: transformers' LLaMA ------------------------------------------------------------
LLAMA_PACKAGE = "hoisted_transformers"  # a package of its own: other tests transpile LLaMA too


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("llama")
    out = base / LLAMA_PACKAGE / "llama"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRANSPILE_CACHE_DIR", str(base / "cache"))
        source = Path(transformers.__file__).parent / "models" / "llama"
        run = CliRunner().invoke(main, ["build", "--no-cache", str(source), "-o", str(out)])
        assert run.exit_code in (0, 1), run.output
        sys.path.insert(0, str(base))
        yield out
        sys.path.remove(str(base))
        for name in [n for n in sys.modules if n.split(".")[0] == LLAMA_PACKAGE]:
            del sys.modules[name]


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, {}), (torch.bfloat16, {"rtol": 5e-2, "atol": 5e-2})])
def test_the_llama_mlp_and_rotary_lines_run_as_kernels(llama, dtype, tolerance):
    from tests.test_real_models import CASES, regions, run_counts, tokens

    mlp = [r for r in regions(llama) if r["function"].endswith("LlamaMLP.forward")]
    rotary = [r for r in regions(llama) if r["function"].endswith(".apply_rotary_pos_emb")]
    assert len(mlp) == 1 and len(rotary) == 2
    assert "activation(_gate_proj, act_fn)" in mlp[0]["ir"]
    assert [s["text"].strip() for s in mlp[0]["source_lines"]] == [
        "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))"
    ]  # the report shows the line as transformers writes it

    compiled = importlib.import_module(f"{LLAMA_PACKAGE}.llama.modeling_llama")
    runtime = importlib.import_module(f"{LLAMA_PACKAGE}.llama._transpile_runtime")
    torch.manual_seed(0)
    config = CASES["llama"].config()
    original = transformers.LlamaForCausalLM(config).eval().to(dtype)
    model = compiled.LlamaForCausalLM(config).eval().to(dtype)
    model.load_state_dict(original.state_dict(), strict=True)
    inputs = tokens()
    before = run_counts(runtime)
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, original(**inputs).logits, **tolerance)
    after = run_counts(runtime)
    layers = config.num_hidden_layers
    for region in [*mlp, *rotary]:
        assert after[region["name"]]["cpp"] - before.get(region["name"], {}).get("cpp", 0) == layers, region["name"]
