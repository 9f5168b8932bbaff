"""Inlining in-tree submodules (transpiler/compiler/inlining.py): `self.norm(h)` of a small class fuses with its neighbours.

A tiny tree (an RMSNorm written as transformers writes LlamaRMSNorm, a block calling it after a
residual add) is transpiled, imported and compared with the original in float32 and bfloat16
(C++ kernels) and through the Triton interpreter; a swapped or hooked submodule takes the
original code. Then the same on transformers' LLaMA decoder layer.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.test_regions import regions_of as regions_of_body
from tests.transpiled import importable
from transpiler.compiler.lowering import kernel_view
from transpiler.compiler.ir import format_region
from transpiler.compiler.regions import find_regions

torch = pytest.importorskip("torch")

PACKAGE = "inlining_fixture"
NORM = """
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)
"""
BLOCK = """

class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.norm = RMSNorm(d, eps=1e-5)
        self.mlp = nn.Linear(d, d)

    def forward(self, hidden_states, update):
        residual = hidden_states
        hidden_states = self.proj(update)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.norm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states
"""


# The norm with a submodule its forward does not use (one variant below uses it).
WITH_ACT = NORM.replace("self.variance_epsilon = eps", "self.variance_epsilon = eps\n        self.act = nn.GELU()")


def regions_of(text: str) -> list[str]:
    return [format_region(r) for r in find_regions(ast.parse(text), "m.py", "m", False, text)]


def caller_regions(text: str) -> list[str]:
    return [r for r in regions_of(text) if "in m.Block.forward" in r.splitlines()[0]]


# -- what is inlined -------------------------------------------------------------------------
def test_the_residual_add_and_the_norm_are_one_region_with_both_outputs():
    (region,) = caller_regions(NORM + BLOCK)
    assert region.startswith("region fused_rms_norm_2 (m.py:30-33, in m.Block.forward)")
    assert region.splitlines()[5] == "  hidden_states_1 = add(residual, hidden_states)  # line 30"
    assert all(f" = {op}(" in region for op in ("pow", "mean", "rsqrt"))
    assert "in  norm_weight: tensor = self.norm.weight" in region
    assert "in  norm_variance_epsilon: scalar = self.norm.variance_epsilon" in region  # read at run time
    assert "out residual = hidden_states_1" in region and "out hidden_states = hidden_states_2" in region
    assert "to_like(t5, hidden_states_1)" in region  # the dtype of the add, a computed value
    assert "when type(self.norm) is RMSNorm" in region


@pytest.mark.parametrize(
    "change",
    [
        ("def forward(self, hidden_states: torch.Tensor)", "def forward(self, hidden_states: torch.Tensor, scale=1.0)"),
        (
            "        input_dtype = hidden_states.dtype\n",
            "        input_dtype = hidden_states.dtype\n        print(input_dtype)\n",
        ),
        (
            "        return self.weight",
            "        if hidden_states.dim() > 3:\n            hidden_states = hidden_states * 2\n        return self.weight",
        ),
        ("        return self.weight * hidden_states", "        return self.act(self.weight) * hidden_states"),
        ("class RMSNorm(nn.Module):", "class RMSNorm(nn.LayerNorm):"),
    ],
    ids=["two parameters", "a statement that is not fusible", "control flow", "a submodule of its own", "another base"],
)
def test_what_is_not_inlined(change):
    assert any("self.norm.weight" in r for r in caller_regions(WITH_ACT + BLOCK))
    norm = WITH_ACT.replace(*change)
    assert norm != WITH_ACT
    assert all("self.norm" not in r for r in caller_regions(norm + BLOCK))


def test_a_class_defined_after_its_caller_or_a_call_with_other_arguments_is_not_inlined():
    assert caller_regions(NORM + BLOCK)
    # The walk meets the callee's forward after the caller's: it is not known yet.
    assert (
        caller_regions("import torch\nfrom torch import nn\n" + BLOCK + NORM.split("from torch import nn", 1)[1]) == []
    )
    assert caller_regions(NORM + BLOCK.replace("self.norm(hidden_states)", "self.norm(hidden_states, 1)")) == []
    (region,) = caller_regions(
        NORM + BLOCK.replace("self.norm(hidden_states)", "self.norm(hidden_states=hidden_states)")
    )
    assert "self.norm.weight" in region


# -- the emitted code, run -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def transpiled(tmp_path_factory) -> Path:
    """The fixture tree transpiled into PACKAGE, beside it the original as `blocks_original`; on sys.path."""
    base = tmp_path_factory.mktemp("inlining")
    source = base / "src"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "blocks.py").write_text(NORM + BLOCK)
    (base / "blocks_original.py").write_text(NORM + BLOCK)
    with importable(base, {source: base / PACKAGE}, (PACKAGE, "blocks_original")):
        yield base


def models(transpiled: Path, dtype: torch.dtype, d: int = 32):
    """The original Block and the transpiled one, same weights (random, so the norm's weight matters)."""
    original_module = importlib.import_module("blocks_original")
    compiled = importlib.import_module(f"{PACKAGE}.blocks")
    torch.manual_seed(0)
    original = original_module.Block(d).eval()
    with torch.no_grad():
        original.norm.weight.normal_()
    model = compiled.Block(d).eval()
    model.load_state_dict(original.state_dict(), strict=True)
    return original.to(dtype), model.to(dtype), compiled


def block_kernel(compiled):
    kernels = importlib.import_module(f"{PACKAGE}._blocks_kernels")
    return kernels.fused_rms_norm_2


def test_the_guard_is_in_the_emitted_module(transpiled):
    text = (transpiled / PACKAGE / "blocks.py").read_text()
    assert "type(self.norm) is RMSNorm" in text
    assert '"forward" in vars(self.norm)' in text


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, {}), (torch.bfloat16, {"rtol": 2e-2, "atol": 2e-2})])
def test_the_transpiled_block_matches_the_original(transpiled, dtype, tolerance):
    original, model, compiled = models(transpiled, dtype)
    kernel = block_kernel(compiled)
    before = kernel.counts["cpp"]
    hidden, update = torch.randn(2, 5, 32, dtype=dtype), torch.randn(2, 5, 32, dtype=dtype)
    with torch.no_grad():
        torch.testing.assert_close(model(hidden, update), original(hidden, update), **tolerance)
    assert kernel.counts["cpp"] == before + 1


def test_a_swapped_or_hooked_submodule_takes_the_original_code(transpiled):
    original, model, compiled = models(transpiled, torch.float32)
    kernel = block_kernel(compiled)
    original.norm = torch.nn.LayerNorm(32)
    model.norm = torch.nn.LayerNorm(32)
    model.norm.load_state_dict(original.norm.state_dict())
    hidden, update = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    before = dict(kernel.counts)
    with torch.no_grad():
        torch.testing.assert_close(model(hidden, update), original(hidden, update))
    assert dict(kernel.counts) == before  # the guard failed: the kernel was not even called

    original, model, compiled = models(transpiled, torch.float32)
    seen = []
    model.norm.register_forward_hook(lambda module, args, output: seen.append(output.shape))
    with torch.no_grad():
        torch.testing.assert_close(model(hidden, update), original(hidden, update))
    assert seen == [torch.Size([2, 5, 32])] and dict(kernel.counts) == before

    # A forward replaced on the instance, as the `kernels` library's `kernelize` does.
    original, model, compiled = models(transpiled, torch.float32)
    original.norm.forward = model.norm.forward = torch.tanh
    with torch.no_grad():
        torch.testing.assert_close(model(hidden, update), original(hidden, update))
    assert dict(kernel.counts) == before


def test_a_computed_dtype_other_than_its_stand_ins_falls_back(transpiled):
    """The cast back goes to the dtype of `residual + h`; the kernel uses `residual`'s. bfloat16
    residual plus float32 update is float32: the runtime sees it and takes the original code."""
    original, model, compiled = models(transpiled, torch.float32)
    kernel = block_kernel(compiled)
    hidden = torch.randn(2, 5, 32, dtype=torch.bfloat16)
    update = torch.randn(2, 5, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(hidden, update), original(hidden, update))
    # The C++ kernel types the cast like its stand-in: eager gives them two dtypes, so the call falls back.
    split = [r for r in kernel.counts if r.startswith("fallback: eager computes the values of") and "residual" in r]
    assert split and kernel.counts[split[0]] >= 1, dict(kernel.counts)


TRITON_RUN = textwrap.dedent("""
    import importlib, json, sys
    import torch
    sys.path.insert(0, sys.argv[1])
    original = importlib.import_module("blocks_original")
    compiled = importlib.import_module("inlining_fixture.blocks")
    runtime = importlib.import_module("inlining_fixture._transpile_runtime")
    torch.manual_seed(0)
    block = original.Block(16).eval()
    model = compiled.Block(16).eval()
    model.load_state_dict(block.state_dict(), strict=True)
    hidden, update = torch.randn(3, 16), torch.randn(3, 16)
    with torch.no_grad():
        torch.testing.assert_close(model(hidden, update), block(hidden, update), rtol=1e-5, atol=1e-5)
    print(json.dumps(runtime.counters()))
    """)


def test_the_triton_kernel_through_the_interpreter(transpiled):
    env = {**os.environ, "TRANSPILE_BACKEND": "triton", "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [sys.executable, "-c", TRITON_RUN, str(transpiled)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    counts = json.loads(run.stdout.splitlines()[-1])
    assert any(key.startswith("fused_rms_norm_2 ") and value == {"triton": 1} for key, value in counts.items()), counts


# -- the real thing: transformers' LLaMA ------------------------------------------------------------
LLAMA_PACKAGE = "inlined_transformers"  # not test_real_models' package: both may run in one session


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    """transformers' llama directory transpiled into LLAMA_PACKAGE/llama, its root on sys.path."""
    transformers = pytest.importorskip("transformers")
    base = tmp_path_factory.mktemp("llama")
    out = base / LLAMA_PACKAGE / "llama"
    with importable(base, {Path(transformers.__file__).parent / "models" / "llama": out}, (LLAMA_PACKAGE,)):
        yield out


def test_the_llama_decoder_layer_fuses_the_residual_add_with_its_rms_norm(llama):
    from tests.test_real_models import CASES, compare, regions, run_counts, tokens_and_labels

    (fused,) = [
        r for r in regions(llama)
        if r["function"].endswith("LlamaDecoderLayer.forward") and "type(self.post_attention_layernorm) is LlamaRMSNorm" in r["conditions"]
    ]  # fmt: skip
    assert "= add(residual, hidden_states)" in fused["ir"] and " = rsqrt(" in fused["ir"]
    assert "out residual = " in fused["ir"] and "out hidden_states = " in fused["ir"]  # both results of one kernel

    import transformers

    compiled = importlib.import_module(f"{LLAMA_PACKAGE}.llama.modeling_llama")
    runtime = importlib.import_module(f"{LLAMA_PACKAGE}.llama._transpile_runtime")
    torch.manual_seed(0)
    config = CASES["llama"].config()
    original = transformers.LlamaForCausalLM(config).eval()
    model = compiled.LlamaForCausalLM(config).eval()
    model.load_state_dict(original.state_dict(), strict=True)
    inputs = tokens_and_labels()
    with torch.no_grad():
        compare(model(**inputs), original(**inputs))
    layers = config.num_hidden_layers
    assert run_counts(runtime)[fused["name"]] == {"cpp": layers}


def test_a_cast_to_a_computed_values_dtype_uses_the_dtype_promotion_gives_it():
    """`x.to(m.dtype)` of a comparison's `m` is a cast to bool whatever the inputs, with nothing to check at
    run time; `x.to(s.dtype)` of `s = y * 2.0` has y's dtype on every call (y stands in for it, checked);
    of `s = x + y` neither input's, so its first input stands in, checked."""
    (region,) = regions_of_body("""
        m = x > 0.5
        s = y * 2.0
        a = (x * 3.0).to(m.dtype)
        b = torch.exp(x).to(s.dtype)
        u = x + y
        c = torch.sin(y).to(u.dtype)
        return a, b, c
        """)
    view, checks = kernel_view(region)
    casts = {node.out: (node.op, node.operands[1]) for node in view.nodes if node.op in ("to", "to_like")}
    assert casts["a"] == ("to", "bool")
    assert casts["b"] == ("to_like", "y") and casts["c"] == ("to_like", "x")
    positions = {i.name: n for n, i in enumerate(view.tensor_inputs)}
    assert dict(checks) == {"s": positions["y"], "u": positions["x"]}
