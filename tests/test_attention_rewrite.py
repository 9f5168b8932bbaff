"""TP701: hand-written attention rewritten to `scaled_dot_product_attention`, checked against
the original modules in eager (fp32, eval, with and without masks), under Dynamo, and
left alone wherever the meaning would change."""

from __future__ import annotations

import ast
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from tests.dynamo_harness import example_inputs, load_example, run_example  # noqa: E402
from rewrites.attention import refusal  # noqa: E402
from rewrites.performance import HandWrittenAttention  # noqa: E402
from tests.rule_examples import fix_snippet, lint_snippet  # noqa: E402
from transpiler.analysis.walker import Walker  # noqa: E402

HEADER = """\
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


"""


def _inputs(*shapes: tuple[int, ...], masks: str = "") -> str:
    """A `make_inputs` returning random fp32 tensors of `shapes`, then the masks in `masks` (code)."""
    values = [f"torch.randn{shape}" for shape in shapes] + ([masks] if masks else [])
    return f"\n\ndef make_inputs(call):\n    return ({', '.join(values)},)\n"


QKV = ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4))
CAUSAL = ((2, 3, 6, 8), (2, 3, 6, 8), (2, 3, 6, 8))
ADDITIVE = "torch.randn(2, 1, 5, 7).clamp(max=0) * 3"
KEEP = "torch.rand(2, 1, 5, 7) > 0.3"

# Each supported spelling: the module, and the inputs it runs on.
SUPPORTED = {
    "statements-matmul-sqrt-functional-softmax": (
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
                weights = F.softmax(scores, dim=-1)
                return torch.matmul(weights, v)
        """,
        _inputs(*QKV),
    ),
    "one-expression-additive-mask-attribute-scale": (
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 8**-0.5

            def forward(self, q, k, v, mask):
                return F.softmax(q @ k.transpose(-1, -2) * self.scale + mask, dim=-1) @ v
        """,
        _inputs(*QKV, masks=ADDITIVE),
    ),
    "nanogpt-causal-buffer-dropout-module": (
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.attn_dropout = nn.Dropout(0.1)
                self.register_buffer("bias", torch.tril(torch.ones(8, 8)).view(1, 1, 8, 8))

            def forward(self, q, k, v):
                B, nh, T, hs = q.size()
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
                att = F.softmax(att, dim=-1)
                att = self.attn_dropout(att)
                y = att @ v
                y = y.transpose(1, 2).contiguous().view(B, T, nh * hs)
                return y
        """,
        _inputs(*CAUSAL),
    ),
    "transformers-eager-optional-mask-float32-softmax-functional-dropout": (
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.scaling = 0.3
                self.attention_dropout = 0.2

            def forward(self, query, key, value, attention_mask=None):
                attn_weights = torch.matmul(query, key.transpose(-1, -2)) * self.scaling
                if attention_mask is not None:
                    attn_weights = attn_weights + attention_mask

                attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
                attn_weights = nn.functional.dropout(attn_weights, p=self.attention_dropout, training=self.training)
                attn_output = torch.matmul(attn_weights, value)
                attn_output = attn_output.transpose(1, 2).contiguous()
                return attn_output
        """,
        _inputs(*QKV, masks=ADDITIVE),
    ),
    "gpt2-cast-to-value-dtype-no-mask": (
        """
        class Model(nn.Module):
            def forward(self, query, key, value):
                attn_weights = torch.matmul(query, key.transpose(-1, -2)) * query.size(-1) ** -0.5
                attn_weights = nn.functional.softmax(attn_weights, dim=-1)
                # Downcast (if necessary) back to V's dtype
                attn_weights = attn_weights.type(value.dtype)
                attn_weights = nn.functional.dropout(attn_weights, p=0.0, training=self.training)
                return torch.matmul(attn_weights, value).transpose(1, 2)
        """,
        _inputs(*QKV),
    ),
    "boolean-keep-mask-inverted-method-softmax": (
        """
        class Model(nn.Module):
            def forward(self, q, k, v, keep):
                scores = q @ k.transpose(-2, -1) * 0.5
                scores = scores.masked_fill(~keep, float("-inf"))
                return scores.softmax(-1) @ v
        """,
        _inputs(*QKV, masks=KEEP),
    ),
    "boolean-hide-mask-torch-softmax-mT-scaled-query": (
        """
        class Model(nn.Module):
            def forward(self, q, k, v, keep):
                hide = keep.logical_not()
                scores = (q * 0.25) @ k.mT
                scores = scores.masked_fill(hide, -math.inf)
                probs = torch.softmax(scores, -1)
                return probs @ v
        """,
        _inputs(*QKV, masks=KEEP),
    ),
    "optional-masked-fill-typed-helper": (
        """
        def attend(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None) -> Tensor:
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if mask is not None:
                scores = scores.masked_fill(mask == 0, float("-inf"))
            return F.softmax(scores, dim=-1) @ v


        class Model(nn.Module):
            def forward(self, q, k, v, mask):
                return attend(q, k, v, mask.int()), attend(q, k, v)
        """,
        _inputs(*QKV, masks=KEEP),
    ),
    "projections-and-reshapes-around-it": (
        """
        class Model(nn.Module):
            def __init__(self, dim=16, n_heads=2):
                super().__init__()
                self.n_heads = n_heads
                self.head_dim = dim // n_heads
                self.scale = self.head_dim**-0.5
                self.qkv = nn.Linear(dim, 3 * dim)
                self.proj = nn.Linear(dim, dim)

            def forward(self, x, mask):
                B, T, C = x.shape
                q, k, v = self.qkv(x).chunk(3, dim=-1)
                q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
                k = k.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
                v = v.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
                # attention
                scores = q @ k.transpose(-2, -1) * self.scale
                scores = scores + mask
                probs = scores.softmax(dim=-1)
                out = (probs @ v).transpose(1, 2).reshape(B, T, C)
                return x + self.proj(out)
        """,
        _inputs((2, 5, 16), masks="torch.randn(2, 1, 5, 5).clamp(max=0)"),
    ),
}

# Each refused case: why (the matcher's reason), and the module, which the fixer must leave as it is.
REFUSED = {
    "weights-returned": (
        "`weights` (an attention step) is used elsewhere",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                weights = F.softmax(q @ k.transpose(-2, -1) * 0.5, dim=-1)
                return weights @ v, weights
        """,
    ),
    "weights-used-later": (
        "`weights` (an attention step) is used elsewhere",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                scores = q @ k.transpose(-2, -1) * 0.5
                weights = scores.softmax(-1)
                out = weights @ v
                return out + weights.mean()
        """,
    ),
    "scores-used-later": (
        "`scores` (an attention step) is used elsewhere",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                scores = q @ k.transpose(-2, -1) * 0.5
                out = scores.softmax(-1) @ v
                return out, scores.amax(-1)
        """,
    ),
    "softmax-over-another-dim": (
        "not over the last dimension",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                return F.softmax(q @ k.transpose(-2, -1), dim=-2) @ v
        """,
    ),
    "softmax-without-dim": (
        "not over the last dimension",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                return F.softmax(q @ k.transpose(-2, -1)) @ v
        """,
    ),
    "scale-after-mask": (
        "not a matrix product",
        """
        class Model(nn.Module):
            def forward(self, q, k, v, mask):
                return F.softmax((q @ k.transpose(-2, -1) + mask) * 0.5, dim=-1) @ v
        """,
    ),
    "boolean-mask-added": (
        "an additive mask that is boolean",
        """
        class Model(nn.Module):
            def forward(self, q, k, v, x):
                mask = x > 0
                return F.softmax(q @ k.transpose(-2, -1) + mask, dim=-1) @ v
        """,
    ),
    "finite-fill-value": (
        "masked_fill with a finite value",
        """
        class Model(nn.Module):
            def forward(self, q, k, v, keep):
                scores = (q @ k.transpose(-2, -1)).masked_fill(~keep, -1e9)
                return scores.softmax(-1) @ v
        """,
    ),
    "tensor-scale": (
        "scaled by a tensor",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("scale", torch.tensor(0.5))

            def forward(self, q, k, v):
                return F.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1) @ v
        """,
    ),
    "keys-transposed-by-position": (
        "keys are not transposed over their last two dimensions",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                return F.softmax(q @ k.transpose(2, 3), dim=-1) @ v
        """,
    ),
    "keys-not-transposed": (
        "keys are not transposed over their last two dimensions",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                return F.softmax(q @ k, dim=-1) @ v
        """,
    ),
    "float32-softmax-not-cast-back": (
        "not cast back",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                return F.softmax(q @ k.transpose(-2, -1), dim=-1, dtype=torch.float32) @ v
        """,
    ),
    "cast-to-another-tensor-dtype": (
        "cast to the dtype of a tensor other than q, k and v",
        """
        class Model(nn.Module):
            def forward(self, q, k, v, x):
                w = F.softmax(q @ k.transpose(-2, -1), dim=-1).to(x.dtype)
                return w @ v
        """,
    ),
    "operand-with-side-effects": (
        "`self.q_proj(x)` may have side effects",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.q_proj = nn.Linear(8, 8)

            def forward(self, x, k, v):
                scores = self.q_proj(x) @ k.transpose(-2, -1)
                return scores.softmax(-1) @ v
        """,
    ),
    "statement-in-between": (
        "`scores` is not bound by the statement right before",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                scores = q @ k.transpose(-2, -1)
                v = v * 2
                return scores.softmax(-1) @ v
        """,
    ),
    "mask-rebound-by-the-chain": (
        "`mask` reads `mask`, which the attention steps rebind",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                mask = q @ k.transpose(-2, -1)
                mask = mask + mask
                return mask.softmax(-1) @ v
        """,
    ),
    "two-statements-on-one-line": (
        "shares its line",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                s = q @ k.transpose(-2, -1); w = s.softmax(-1)
                return w @ v
        """,
    ),
    "weights-read-by-a-closure": (
        "`w` (an attention step) is used elsewhere",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                report = lambda: w.sum()
                w = (q @ k.transpose(-2, -1)).softmax(-1)
                return w @ v, report()
        """,
    ),
    "in-a-loop-read-before": (
        "`w` (an attention step) is used elsewhere",
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                out = v
                w = q @ k.transpose(-2, -1)
                for _ in range(2):
                    v = out + w.sum()
                    w = (q @ k.transpose(-2, -1)).softmax(-1)
                    out = w @ v
                return out
        """,
    ),
}


def _source(body: str, inputs: str = "") -> str:
    return HEADER + textwrap.dedent(body).strip() + "\n" + inputs


def _run(module, args, state=None):
    torch.manual_seed(0)
    model = module.Model().eval()
    if state is not None:
        model.load_state_dict(state)
    with torch.no_grad():
        return model(*args), model.state_dict()


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_supported_spelling_computes_what_the_original_does(name):
    body, inputs = SUPPORTED[name]
    source = _source(body, inputs)
    assert "TP701" in {d.code for d in lint_snippet(source)}
    result, text = fix_snippet(source)
    assert {d.code for d in result.applied} == {"TP701"}, text
    assert "scaled_dot_product_attention(" in text and "softmax" not in text.split("def make_inputs")[0], text
    original, rewritten = load_example(source, f"{name}-original"), load_example(text, f"{name}-rewritten")
    for seed in range(3):
        torch.manual_seed(seed)
        args = example_inputs(original)
        expected, state = _run(original, args)
        actual, _ = _run(rewritten, args, state)
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_rewritten_code_compiles_as_one_graph(name):
    body, inputs = SUPPORTED[name]
    _, text = fix_snippet(_source(body, inputs))
    report = run_example(text, name=f"{name}-sdpa")
    assert report.clean() and report.fullgraph_error is None, report.summary()


class _Reasons(HandWrittenAttention):
    """TP701's matcher on every matrix product, collecting why each one is not rewritten
    (no `code` of its own, so it joins no registry)."""

    def __init__(self) -> None:
        self.reasons: list[str | None] = []

    def _check(self, node, ctx) -> None:
        self.reasons.append(refusal(node, ctx))


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_case_is_left_alone(name):
    reason, body = REFUSED[name]
    source = _source(body)
    assert "TP701" not in {d.code for d in lint_snippet(source)}
    result, text = fix_snippet(source)
    assert text == source and not [d for d in result.applied if d.code == "TP701"]
    rule = _Reasons()
    Walker([rule]).check(ast.parse(source), "example", False, source)
    assert None not in rule.reasons and any(reason in r for r in rule.reasons), rule.reasons


def test_exact_rewrite_of_the_transformers_spelling():
    body, inputs = SUPPORTED["transformers-eager-optional-mask-float32-softmax-functional-dropout"]
    _, text = fix_snippet(_source(body, inputs))
    expected = """\
    def forward(self, query, key, value, attention_mask=None):
        attn_output = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, \
dropout_p=self.attention_dropout if self.training else 0.0, scale=self.scaling)
        attn_output = attn_output.transpose(1, 2).contiguous()
"""
    assert expected in text


def test_exact_rewrite_of_masks_and_dropout_modules():
    _, nanogpt = fix_snippet(_source(*SUPPORTED["nanogpt-causal-buffer-dropout-module"]))
    assert (
        "y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias[:, :, :T, :T] != 0, "
        "dropout_p=self.attn_dropout.p if self.attn_dropout.training else 0.0, scale=1.0 / math.sqrt(k.size(-1)))"
    ) in nanogpt
    _, helper = fix_snippet(_source(*SUPPORTED["optional-masked-fill-typed-helper"]))
    assert "attn_mask=mask != 0 if mask is not None else None, scale=1.0 / math.sqrt(q.shape[-1]))" in helper
    _, hidden = fix_snippet(_source(*SUPPORTED["boolean-hide-mask-torch-softmax-mT-scaled-query"]))
    assert "return F.scaled_dot_product_attention(q, k, v, attn_mask=~hide, scale=0.25)" in hidden


def test_comments_above_the_removed_statements_are_kept():
    _, text = fix_snippet(_source(*SUPPORTED["gpt2-cast-to-value-dtype-no-mask"]))
    assert "        # Downcast (if necessary) back to V's dtype\n        return F.scaled_dot_product_attention(" in text


def test_a_scale_on_v_stays_on_v():
    """`softmax(q @ kᵀ) @ (v * s)` is SDPA of `v * s` with scale 1: the scale is not folded into `scale=`."""
    source = _source(
        """
        class Model(nn.Module):
            def forward(self, q, k, v):
                return F.softmax(q @ k.transpose(-2, -1), dim=-1) @ (v * 0.5)
        """,
        _inputs(*QKV),
    )
    _, text = fix_snippet(source)
    assert "F.scaled_dot_product_attention(q, k, v * 0.5, scale=1.0)" in text
    original, rewritten = load_example(source, "scale-on-v"), load_example(text, "scale-on-v-sdpa")
    args = example_inputs(original)
    torch.testing.assert_close(_run(rewritten, args)[0], _run(original, args)[0], rtol=1e-5, atol=1e-5)


def test_the_call_is_spelled_with_the_modules_own_imports():
    spellings = [
        ("import torch.nn.functional\nfrom torch import nn as layers\n", "layers.Module", "layers.functional."),
        ("import torch as th\nfrom torch.nn import Module\n", "Module", "th.nn.functional."),
        # Neither torch nor torch.nn nor torch.nn.functional is bound: `import torch` is added.
        ("from torch.nn import Module\n", "Module", "torch.nn.functional."),
    ]
    for imports, base, prefix in spellings:
        source = f"""\
{imports}from torch.nn.functional import softmax


class Model({base}):
    def forward(self, q, k, v):
        return softmax(q @ k.transpose(-2, -1), dim=-1) @ v
"""
        _, text = fix_snippet(source)
        assert f"return {prefix}scaled_dot_product_attention(q, k, v, scale=1.0)" in text, text
        compile(text, "fixed.py", "exec")
    assert text.startswith("import torch\n")


def test_training_mode_keeps_dropout_on():
    """In training the rewritten module drops as often as the original (not the same elements:
    SDPA draws its own random numbers)."""
    body, inputs = SUPPORTED["nanogpt-causal-buffer-dropout-module"]
    source = _source(body.replace("nn.Dropout(0.1)", "nn.Dropout(0.5)"), inputs)
    _, text = fix_snippet(source)
    rewritten = load_example(text, "dropout-train")
    model = rewritten.Model().train()
    q = torch.randn(1, 1, 8, 8)
    ones = torch.ones(1, 1, 8, 8)
    # With v all ones, each output is the sum of the kept weights, scaled by 1 / (1 - p).
    drawn = torch.stack([model(q, q, ones) for _ in range(200)])
    assert drawn.std() > 0.1
    assert abs(drawn.mean().item() - 1.0) < 0.1
    torch.testing.assert_close(model.eval()(q, q, ones), torch.ones(1, 8, 8))


def test_transpile_writes_the_rewrite_with_unsafe_fixes(tmp_path):
    from click.testing import CliRunner

    from transpiler.cli.main import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(_source(*SUPPORTED["projections-and-reshapes-around-it"]), encoding="utf-8")
    for flag, rewritten in (("--no-unsafe-fixes", False), ("--unsafe-fixes", True)):
        out = tmp_path / flag
        CliRunner().invoke(main, [str(src), "-o", str(out), flag], catch_exceptions=False)
        text = (out / "model.py").read_text(encoding="utf-8")
        assert ("F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)" in text) is rewritten
        assert ("probs = scores.softmax(dim=-1)" in text) is not rewritten


def test_real_transformers_attention_is_rewritten_and_equal(tmp_path, monkeypatch):
    """MobileViT's self-attention (transformers' own source) before and after the fix."""
    import importlib.util

    pytest.importorskip("transformers")
    from transformers.models.mobilevit import configuration_mobilevit, modeling_mobilevit

    spec = importlib.util.find_spec(modeling_mobilevit.__name__)
    result, text = fix_snippet(spec.loader.get_source(spec.name), module="modeling_mobilevit")
    assert [d.code for d in result.applied] == ["TP701"]
    assert "context_layer = nn.functional.scaled_dot_product_attention(query_layer, key_layer, value_layer" in text
    # Loaded inside the transformers package, so that its relative imports and annotations resolve.
    path = tmp_path / "modeling_mobilevit_sdpa.py"
    path.write_text(text, encoding="utf-8")
    name = f"{spec.name}_sdpa"
    rewritten = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path))
    monkeypatch.setitem(sys.modules, name, rewritten)
    rewritten.__spec__.loader.exec_module(rewritten)
    config = configuration_mobilevit.MobileViTConfig(attention_probs_dropout_prob=0.1)
    torch.manual_seed(0)
    original = modeling_mobilevit.MobileViTSelfAttention(config, hidden_size=32).eval()
    model = rewritten.MobileViTSelfAttention(config, hidden_size=32).eval()
    model.load_state_dict(original.state_dict())
    hidden = torch.randn(3, 10, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(hidden), original(hidden), rtol=1e-5, atol=1e-5)
