"""Real models as input (issue 5): the GPT-2, BERT, LLaMA, ViT and ResNet directories of the installed
transformers, each transpiled whole, imported as a package (`transpiled_transformers.gpt2.modeling_gpt2`),
given the original's `state_dict` and compared with the original on a small random config, fp32 on
CPU: the C++ kernels in this process, the Triton kernels through the interpreter in a subprocess.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.transpiled import importable

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PACKAGE = "transpiled_transformers"  # the output root's name on sys.path: OUT is PACKAGE/<model>
MODELS = Path(transformers.__file__).parent / "models"
VOCAB, SEQ = 128, 16
TEXT = dict(
    num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=VOCAB,
    max_position_embeddings=64,
)  # fmt: skip
IMAGE = dict(
    num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=8
)


def tokens() -> dict:
    return {"input_ids": torch.randint(0, VOCAB, (2, SEQ))}


def tokens_and_labels() -> dict:
    """With labels, so the loss code (where the regions of the task heads are) runs too."""
    inputs = tokens()
    return {**inputs, "labels": inputs["input_ids"]}


def tokens_and_spans() -> dict:
    return {**tokens(), "start_positions": torch.randint(0, SEQ, (2,)), "end_positions": torch.randint(0, SEQ, (2,))}


def pixels() -> dict:
    return {"pixel_values": torch.randn(2, 3, 32, 32)}


@dataclass(frozen=True)
class Case:
    config: Callable[[], transformers.PreTrainedConfig]
    classes: dict[str, Callable[[], dict]]  # classes of modeling_<model>.py -> their inputs


# fmt: off
# (black 26.10 cannot lay out this table: BracketMatchError)
CASES = {
    "gpt2": Case(
        lambda: transformers.GPT2Config(
            n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64, bos_token_id=0, eos_token_id=0
        ),
        {"GPT2LMHeadModel": tokens_and_labels, "GPT2ForQuestionAnswering": tokens_and_spans},
    ),
    "bert": Case(
        lambda: transformers.BertConfig(**TEXT), {"BertModel": tokens, "BertForQuestionAnswering": tokens_and_spans}
    ),
    "llama": Case(
        lambda: transformers.LlamaConfig(**TEXT, num_key_value_heads=2), {"LlamaForCausalLM": tokens_and_labels}
    ),
    "vit": Case(lambda: transformers.ViTConfig(**IMAGE), {"ViTModel": pixels}),
    # A post-norm block (`h = norm(h); residual = h`): two names, one kernel output (issue 15).
    "bart": Case(
        lambda: transformers.BartConfig(
            vocab_size=VOCAB, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
        ),
        {"BartModel": tokens},
    ),  # fmt: skip
    "resnet": Case(
        lambda: transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"),
        {"ResNetModel": pixels},
    ),
}
# fmt: on
RTOL, ATOL = 1e-4, 1e-5  # fp32; kernels may sum in another order than eager
# The runtime's words for integer values eager keeps integers where the kernel cannot (`clamp` by a Python int).
INT_FALLBACK = ("fallback: an integer input (", "values, which the C++ kernel computes in floating point")
LONE_ACTIVATION = "fallback: the activation alone is one eager kernel already"


@pytest.fixture(scope="module")
def transpiled(tmp_path_factory) -> Path:
    """The directory holding PACKAGE, with every model transpiled into it, on sys.path for the module."""
    base = tmp_path_factory.mktemp("real_models")
    with importable(base, {MODELS / model: base / PACKAGE / model for model in CASES}, (PACKAGE,)):
        yield base


def regions(out: Path) -> list[dict]:
    """The regions the build report lists for the output tree `out`."""
    report = json.loads((out / "transpile-report.json").read_text())
    return [region for file in report["files"] for region in file["regions"]]


def run_counts(runtime) -> dict[str, dict[str, int]]:
    """Per kernel name, how often each path ran (empty without a runtime: no regions)."""
    return {key.split(" (")[0]: counts for key, counts in runtime.counters().items()} if runtime else {}


def compare(actual, expected) -> list[str]:
    """Assert every tensor field of two model outputs is close; returns the names of those compared."""
    assert list(actual.keys()) == list(expected.keys())
    compared = [key for key, value in expected.items() if isinstance(value, torch.Tensor)]
    for key in compared:
        torch.testing.assert_close(actual[key], expected[key], rtol=RTOL, atol=ATOL, msg=lambda m, k=key: f"{k}: {m}")
    return compared


@pytest.mark.parametrize("model, name", [(model, name) for model, case in CASES.items() for name in case.classes])
def test_the_transpiled_model_is_a_drop_in_for_the_original(transpiled, model, name):
    out = transpiled / PACKAGE / model
    original_class = getattr(importlib.import_module(f"transformers.models.{model}.modeling_{model}"), name)
    compiled_class = getattr(importlib.import_module(f"{PACKAGE}.{model}.modeling_{model}"), name)
    assert Path(inspect.getfile(compiled_class)) == out / f"modeling_{model}.py"  # not the original, re-exported

    torch.manual_seed(0)
    config = CASES[model].config()
    original, compiled = original_class(config).eval(), compiled_class(config).eval()
    assert list(compiled.state_dict()) == list(original.state_dict())
    compiled.load_state_dict(original.state_dict(), strict=True)
    inputs = CASES[model].classes[name]()
    runtime = importlib.import_module(f"{PACKAGE}.{model}._transpile_runtime") if regions(out) else None
    before = run_counts(runtime)
    folded_before = dict(getattr(sys.modules.get(f"{PACKAGE}.{model}._transpile_runtime.conv"), "counts", {}))
    with torch.no_grad():
        expected, actual = original(**inputs), compiled(**inputs)
    assert {"logits", "last_hidden_state", "start_logits"} & set(compare(actual, expected))

    # Kernels of this output ran, in C++ where their inputs are floating point; the only
    # fallbacks are the runtime's documented policies: integer inputs (clamped answer spans),
    # and an activation alone that is one eager kernel already (ResNet's ReLU after the residual add;
    # its conv layers' batch norms are folded into the convolutions, emit/runtime/conv.py, their kernels
    # the fold's fallback).
    after = run_counts(runtime)
    ran = {k: {path: n - before.get(k, {}).get(path, 0) for path, n in c.items()} for k, c in after.items()}
    ran = {k: {path: n for path, n in c.items() if n} for k, c in ran.items() if any(c.values())}
    assert set(ran) <= {r["name"] for r in regions(out)}
    assert all(
        path == "cpp" or path.startswith((INT_FALLBACK[0], LONE_ACTIVATION)) or path.endswith(INT_FALLBACK[1])
        for c in ran.values()
        for path in c
    ), ran
    conv = sys.modules.get(f"{PACKAGE}.{model}._transpile_runtime.conv")
    folded = conv is not None and conv.counts["folded"] > folded_before.get("folded", 0)
    assert folded or any(c.get("cpp") for c in ran.values()), ran


def test_regions_are_found_and_the_runtime_is_written_where_they_are(transpiled):
    """At least the regions found before reductions: GPT-2 and BERT in their question-answering
    loss, LLaMA in its RMSNorm. An output tree gets the runtime exactly when it has regions."""
    found = {model: {r["function"].split(".")[-2] for r in regions(transpiled / PACKAGE / model)} for model in CASES}
    assert {"GPT2ForQuestionAnswering"} <= found["gpt2"] and {"BertForQuestionAnswering"} <= found["bert"]
    assert {"LlamaRMSNorm"} <= found["llama"]
    for model in CASES:
        assert (transpiled / PACKAGE / model / "_transpile_runtime").is_dir() == bool(found[model])


def test_no_relative_import_leaves_an_output_tree(transpiled):
    """Each output tree imports the original transformers by absolute name, its own modules relatively."""
    for model in CASES:
        out = transpiled / PACKAGE / model
        text = (out / f"modeling_{model}.py").read_text()
        assert f"from .configuration_{model} import" in text
        assert "from transformers.modeling_utils import" in text
        for path in out.rglob("*.py"):
            depth = len(path.relative_to(out).parts) - 1
            assert "from " + "." * (depth + 2) not in path.read_text(), path


# The runtime reads TRANSPILE_BACKEND at import, and the interpreter must be chosen before triton is
# imported: a fresh interpreter.
TRITON_RUN = textwrap.dedent("""
    import importlib, json, sys
    import torch
    import transformers
    sys.path.insert(0, sys.argv[1])
    compiled = importlib.import_module("transpiled_transformers.llama.modeling_llama")
    runtime = importlib.import_module("transpiled_transformers.llama._transpile_runtime")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        num_hidden_layers=1, hidden_size=32, num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
        vocab_size=64, max_position_embeddings=16,
    )
    original = transformers.LlamaForCausalLM(config).eval()
    model = compiled.LlamaForCausalLM(config).eval()
    model.load_state_dict(original.state_dict(), strict=True)
    ids = torch.randint(0, 64, (1, 8))
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, original(input_ids=ids).logits, rtol=1e-4, atol=1e-5)
    print(json.dumps(runtime.counters()))
    """)


def test_the_triton_kernels_through_the_interpreter_on_a_tiny_llama(transpiled):
    env = {**os.environ, "TRANSPILE_BACKEND": "triton", "TRITON_INTERPRET": "1"}
    env["TRANSPILE_CACHE_DIR"] = str(transpiled / "cache")
    run = subprocess.run(
        [sys.executable, "-c", TRITON_RUN, str(transpiled)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    counts = json.loads(run.stdout.splitlines()[-1])
    assert counts and all(set(c) == {"triton"} for c in counts.values()), counts
