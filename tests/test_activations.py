"""Activation modules chosen at run time (`self.act = ACT2FN[config.hidden_act]`): fused with the code
around them, computed by the op each class maps to (transpiler/compiler/ops.py ACTIVATIONS) in C++ and in Triton
(interpreted), and anything else (another class, a class whose forward changed) on the original code.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.transpiled import importable
from transpiler.analysis.symbols import ACTIVATION_ATTRIBUTE
from transpiler.compiler.ops import ACTIVATIONS

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PACKAGE = "transpiled_activations"
BLOCK = """\
import torch
from torch import nn
from transformers.activations import ACT2FN


class Block(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, 24))
        self.act = ACT2FN[act] if isinstance(act, str) else act()

    def forward(self, x):
        h = x * 3.0 + self.bias
        h = self.act(h)
        return h * 0.5 - x


class Lone(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.act = ACT2FN[act]

    def forward(self, x):
        return self.act(x)
"""
TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
# Constructor arguments of torch's classes that set the attributes an entry pins.
TORCH_ARGUMENTS = ("approximate", "inplace")


def instance(entry):
    """A module of the entry's class whose attributes have the values the entry pins."""
    module, _, name = entry.cls.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    kwargs = {k: eval(v) for k, v in entry.attributes if k in TORCH_ARGUMENTS}
    return cls(**kwargs)


def entry_id(entry) -> str:
    return "-".join([entry.cls.rpartition(".")[2], *(f"{k}={v}" for k, v in entry.attributes if k in TORCH_ARGUMENTS)])


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """PACKAGE/block.py transpiled, its parent on sys.path for the module."""
    base = tmp_path_factory.mktemp("activations")
    source = base / "source"
    source.mkdir()
    (source / "block.py").write_text(BLOCK)
    with importable(base, {source: base / PACKAGE}, (PACKAGE,)):
        yield base


def blocks(act):
    """The original Block and its transpiled copy, with the same weights."""
    namespace: dict = {}  # the source tree is no package: the original runs from its text
    exec(compile(BLOCK, "block.py", "exec"), namespace)
    original = namespace["Block"](act).eval()
    compiled = importlib.import_module(f"{PACKAGE}.block").Block(act).eval()
    compiled.load_state_dict(original.state_dict())
    return original, compiled


def reference(original, x, dtype):
    """The original in `dtype`, as eager computes it: every step rounded to `dtype`, as the kernels round
    it too (a float32 reference is off by what cancellation in `h * 0.5 - x` magnifies)."""
    return original.to(dtype)(x.to(dtype)).float()


def counts(tree) -> dict[str, int]:
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    (kernel,) = [k for k in runtime.KERNELS if k.name == "fused_activation"]
    return dict(kernel.counts)


def test_the_naming_rule():
    names = ["act", "act_fn", "activation", "activation_fn", "intermediate_act_fn", "hidden_act", "act1", "act_layer"]
    assert all(ACTIVATION_ATTRIBUTE.fullmatch(n) for n in names)
    assert not any(ACTIVATION_ATTRIBUTE.fullmatch(n) for n in ["act_dropout", "act_scale", "react", "action", "fc"])


def test_the_activation_fuses_with_the_code_around_it(tree):
    report = json.loads((tree / PACKAGE / "transpile-report.json").read_text())
    (region,) = [r for f in report["files"] for r in f["regions"] if r["function"].endswith("Block.forward")]
    assert "h_1 = activation(h, act)" in region["ir"]
    assert region["lines"] == "13-15"  # the pointwise line before, the activation, the line after: one kernel
    text = (tree / PACKAGE / "_block_triton.py").read_text()
    assert "act: tl.constexpr" in text and "if act == 0:  # gelu" in text


@pytest.mark.parametrize("entry", ACTIVATIONS, ids=entry_id)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_every_table_entry_in_cpp(tree, entry, dtype):
    original, compiled = blocks(lambda: instance(entry))
    x = torch.randn(3, 5, 24) * 2
    before = counts(tree).get("cpp", 0)
    with torch.no_grad():
        expected, actual = reference(original, x, dtype), compiled.to(dtype)(x.to(dtype))
    torch.testing.assert_close(actual.float(), expected, **TOLERANCE[dtype])
    assert counts(tree).get("cpp", 0) == before + 1, counts(tree)


def test_an_unknown_class_falls_back(tree):
    class Softsign(torch.nn.Module):  # no table entry
        def forward(self, x):
            return x / (1 + x.abs())

    class Quick(transformers.activations.QuickGELUActivation):  # a subclass: another forward may hide in it
        def forward(self, x):
            return x * torch.sigmoid(1.5 * x)

    for act in (Softsign, Quick):
        original, compiled = blocks(act)
        x = torch.randn(4, 24)
        before = counts(tree).get("cpp", 0)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), original(x))
        assert counts(tree).get("cpp", 0) == before
    assert counts(tree)["fallback: an activation module the kernels do not compute"] >= 2


def test_a_class_whose_forward_changed_is_caught_by_the_probe(tree, monkeypatch):
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    monkeypatch.setattr(runtime.activations, "_VERIFIED", {})  # as in a fresh process
    monkeypatch.setattr(transformers.activations.QuickGELUActivation, "forward", lambda self, x: x * torch.sigmoid(x))
    original, compiled = blocks("quick_gelu")
    x = torch.randn(4, 24)
    before = counts(tree).get("cpp", 0)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), original(x))
    assert counts(tree).get("cpp", 0) == before
    assert runtime.activations._VERIFIED == {(transformers.activations.QuickGELUActivation, 8): False}


def test_a_module_with_other_attributes_falls_back(tree):
    original, compiled = blocks(lambda: torch.nn.ReLU(inplace=True))
    x = torch.randn(4, 24)
    before = counts(tree).get("cpp", 0)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), original(x))
    assert counts(tree).get("cpp", 0) == before


TRITON_SCRIPT = """
import importlib, json, sys
import torch
sys.path.insert(0, sys.argv[1])
from tests.test_activations import ACTIVATIONS, BLOCK, PACKAGE, TOLERANCE, instance, reference
namespace = {}
exec(compile(BLOCK, "block.py", "exec"), namespace)
Block = importlib.import_module(PACKAGE + ".block").Block
failures = []
for entry in ACTIVATIONS:
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        original = namespace["Block"](lambda: instance(entry)).eval()
        compiled = Block(lambda: instance(entry)).eval()
        compiled.load_state_dict(original.state_dict())
        x = torch.randn(3, 24) * 2
        with torch.no_grad():
            expected, actual = reference(original, x, dtype), compiled.to(dtype)(x.to(dtype))
        if not torch.allclose(actual.float(), expected, **TOLERANCE[dtype]):
            failures.append(f"{entry.cls} {entry.attributes} {dtype}")
runtime = importlib.import_module(PACKAGE + "._transpile_runtime")
print(json.dumps({"failures": failures, "counts": runtime.counters()}))
"""


def test_every_table_entry_in_triton_through_the_interpreter(tree):
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRANSPILE_BACKEND": "triton", "PYTHONPATH": str(Path.cwd())}
    run = subprocess.run(
        [sys.executable, "-c", TRITON_SCRIPT, str(tree)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["failures"] == []
    (counts,) = result["counts"].values()
    assert counts == {"triton": 2 * len(ACTIVATIONS)}


def test_gpt2_mlp_runs_its_activation_in_a_kernel(tmp_path):
    """GPT-2 from transformers: `self.act = ACT2FN[config.activation_function]` (gelu_new) in GPT2MLP."""
    models = Path(transformers.__file__).parent / "models"
    with importable(tmp_path, {models / "gpt2": tmp_path / "gpt2_act" / "gpt2"}, ("gpt2_act",)):
        compiled_class = importlib.import_module("gpt2_act.gpt2.modeling_gpt2").GPT2MLP
        runtime = importlib.import_module("gpt2_act.gpt2._transpile_runtime")
        config = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
        torch.manual_seed(0)
        original = transformers.models.gpt2.modeling_gpt2.GPT2MLP(256, config).eval()
        compiled = compiled_class(256, config).eval()
        compiled.load_state_dict(original.state_dict(), strict=True)
        x = torch.randn(2, 16, 64)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), original(x), rtol=1e-5, atol=1e-5)
        report = json.loads((tmp_path / "gpt2_act" / "gpt2" / "transpile-report.json").read_text())
        (region,) = [r for f in report["files"] for r in f["regions"] if r["function"].endswith("GPT2MLP.forward")]
        assert "activation(" in region["ir"]
        (kernel,) = [k for k in runtime.KERNELS if k.name == region["name"]]
        assert dict(kernel.counts) == {"cpp": 1}


def test_an_activation_alone_runs_a_kernel_only_where_eager_runs_several(tree):
    """relu alone is one eager kernel: a kernel of ours would only add launch cost. gelu_new is eight."""
    module = importlib.import_module(f"{PACKAGE}.block")
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    line = BLOCK.splitlines().index("        return self.act(x)") + 1
    (kernel,) = [k for k in runtime.KERNELS if k.source.endswith(f"block.py:{line}") and k.activations]
    x = torch.randn(4, 24)
    for act, path in (("relu", "fallback: the activation alone is one eager kernel already"), ("gelu_new", "cpp")):
        kernel.counts.clear()
        lone = module.Lone(act)
        with torch.no_grad():
            torch.testing.assert_close(lone(x), transformers.activations.ACT2FN[act](x))
        assert dict(kernel.counts) == {path: 1}
