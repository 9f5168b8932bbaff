"""Linear layers followed by an activation (transpiler/compiler/linears.py `epilogue_sites`, emit/runtime/linear.py
`LinearActivation`): which statement pairs become one call, the runtime's epilogue path against the two
modules (forced on CPU tensors for ReLU, whose CPU and CUDA kernels agree; on CUDA for both ops), its
fallbacks, and a transpiled tree run beside its original.
"""

from __future__ import annotations

import ast
import functools
import math
import importlib

import pytest

from emit.host.module import EPILOGUE, EPILOGUE_OPS, _activation_table
from emit.runtime import Activation, Activations
from emit.runtime import linear as runtime
from tests.transpiled import importable
from transpiler.compiler.hoisting import hoist_regions
from transpiler.compiler.linears import epilogue_sites

torch = pytest.importorskip("torch")
nn = torch.nn

PACKAGE = "transpiled_epilogue"
MODEL = """
import torch
from torch import nn

ACT = {"relu": nn.ReLU, "gelu_new": lambda: nn.GELU(approximate="tanh"), "silu": nn.SiLU}


class MLP(nn.Module):
    def __init__(self, d=16, inner=32, act="relu"):
        super().__init__()
        self.fc = nn.Linear(d, inner)
        self.act = ACT[act]()
        self.proj = nn.Linear(inner, d)

    def forward(self, x):
        h = x * 2.0 + 1.0
        h = self.fc(h)
        h = self.act(h)
        return self.proj(h)
"""


def sites(body: str, init: str = "self.fc = nn.Linear(d, 32)\n        self.act = ACT2FN[name]") -> list:
    """The epilogue sites of a module M with `init` in its __init__ and `body` as its forward."""
    source = f"""import torch
from torch import nn


class M(nn.Module):
    def __init__(self, d, name):
        super().__init__()
        {init}

    def forward(self, x):
        {body}
"""
    tree = ast.parse(source)
    split = hoist_regions(tree, "m.py", "m", False, source, {"m.M.forward"}, {})
    return epilogue_sites(ast.parse(split.text), "m", False, split.text, {"m.M.forward"}, split.regions)


# -- which pairs ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body, init",
    [
        ("h = self.fc(x)\n        h = self.act(h)\n        return h", None),
        ("h = self.fc(x)\n        y = self.act(h)\n        return y", None),  # h is not read again
        ("y = self.act(self.fc(x))\n        return y", None),
        (
            "h = self.fc(x)\n        h = self.relu(h)\n        return h",
            "self.fc = nn.Linear(d, 32)\n        self.relu = nn.ReLU()",
        ),
        (
            "h = self.fc(x)\n        h = self.gelu(h)\n        return h",
            "self.fc = nn.Linear(d, 32)\n        self.gelu = nn.GELU(approximate='tanh')",
        ),
    ],
)
def test_a_linear_layer_and_its_activation_are_a_site(body, init):
    (site,) = sites(body, *([init] if init else []))
    assert site.layer == "fc" and site.activation in ("act", "relu", "gelu") and site.argument == "x"


@pytest.mark.parametrize(
    "body, init",
    [
        ("h = self.fc(x)\n        y = self.act(h)\n        return y + h", None),  # the layer's output is read again
        ("h = self.fc(x)\n        h = self.act(h) * 2.0 + x\n        return h", None),  # the activation fuses on
        ("h = self.fc(x)\n        h = self.act(h)\n        h = h * 2.0 + 1.0\n        return h", None),  # its region
        ("h = self.fc(x, 1)\n        h = self.act(h)\n        return h", None),
        ("h = self.fc(x)\n        h = self.act(x)\n        return h", None),  # not the layer's output
        (
            "h = self.fc(x)\n        h = self.silu(h)\n        return h",
            "self.fc = nn.Linear(d, 32)\n        self.silu = nn.SiLU()",
        ),
        (
            "h = self.fc(x)\n        h = self.act(h)\n        return h",
            "self.fc = nn.Conv2d(d, 32, 1)\n        self.act = ACT2FN[name]",
        ),
        (
            "h = self.fc(x)\n        h = self.dropout(h)\n        return h",
            "self.fc = nn.Linear(d, 32)\n        self.dropout = ACT2FN[name]",
        ),
    ],
)
def test_other_pairs_are_not(body, init):
    assert sites(body, *([init] if init else [])) == []


# -- the runtime ---------------------------------------------------------------------------------------------
TABLE = eval(
    _activation_table(EPILOGUE_OPS),
    {"Activation": Activation, "Activations": Activations, "torch": torch, "functools": functools, "math": math},
)


@pytest.fixture
def forced(monkeypatch):
    """The epilogue for CPU tensors of any dtype; the calls that took it, counted from here."""
    monkeypatch.setattr(runtime, "FORCE", True)
    monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
    return runtime.counts


def conv1d(d: int, n: int) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    return transformers.pytorch_utils.Conv1D(n, d)


@pytest.mark.parametrize("layer", [lambda: nn.Linear(24, 40), lambda: conv1d(24, 40)], ids=["linear", "conv1d"])
@pytest.mark.parametrize("shape", [(7, 24), (2, 5, 24)])
def test_the_epilogue_computes_what_the_modules_do(forced, layer, shape):
    torch.manual_seed(0)
    layer, act = layer(), nn.ReLU()
    x = torch.randn(shape)
    with torch.no_grad():
        got, expected = runtime.LinearActivation(TABLE)(layer, act, x), act(layer(x))
    assert forced["epilogue"] == 1
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)


def test_the_tables_codes_pick_the_epilogues_activation():
    assert EPILOGUE_OPS == ("relu", "gelu_tanh")  # the runtime's `use_gelu = code == 1`
    assert TABLE.entry(nn.ReLU()).code == 0
    assert TABLE.entry(nn.GELU(approximate="tanh")).code == 1
    assert (
        TABLE.entry(nn.GELU()) is None and TABLE.entry(nn.SiLU()) is None and TABLE.entry(nn.ReLU(inplace=True)) is None
    )


def test_the_epilogue_is_not_taken_where_the_modules_must_run(forced):
    epilogue = runtime.LinearActivation(TABLE)
    x = torch.randn(4, 8)
    hooked = nn.Linear(8, 16)
    hooked.register_forward_hook(lambda module, args, out: out * 0)

    class Sub(nn.Linear):
        pass

    with torch.no_grad():
        assert epilogue(nn.Linear(8, 16), nn.SiLU(), x) is None  # not an op of the epilogue
        assert epilogue(nn.Linear(8, 16, bias=False), nn.ReLU(), x) is None
        assert epilogue(nn.Linear(8, 13), nn.ReLU(), x) is None  # unaligned rows
        assert epilogue(hooked, nn.ReLU(), x) is None
        assert epilogue(Sub(8, 16), nn.ReLU(), x) is None
        assert epilogue(nn.Linear(8, 16), nn.ReLU(), torch.randn(4, 7)) is None  # the module raises its error
        assert epilogue(nn.Linear(8, 16).double(), nn.ReLU(), x) is None
    assert epilogue(nn.Linear(8, 16), nn.ReLU(), x) is None  # autograd records the modules
    assert forced["epilogue"] == 0
    with torch.no_grad():
        assert epilogue(nn.Linear(8, 16), nn.ReLU(), x) is not None  # the control
    assert forced["epilogue"] == 1


def test_without_force_cpu_tensors_take_the_statements(monkeypatch):
    monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
    with torch.no_grad():
        assert runtime.LinearActivation(TABLE)(nn.Linear(8, 16), nn.ReLU(), torch.randn(4, 8)) is None
    assert runtime.counts["epilogue"] == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("act", [nn.ReLU(), nn.GELU(approximate="tanh")], ids=["relu", "gelu_tanh"])
@pytest.mark.parametrize("layer", [lambda: nn.Linear(768, 3072), lambda: conv1d(768, 3072)], ids=["linear", "conv1d"])
def test_the_epilogue_on_cuda_in_bfloat16(monkeypatch, act, layer):
    monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
    torch.manual_seed(0)
    layer = layer().to("cuda", torch.bfloat16)
    x = torch.randn(4, 512, 768, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        got, expected = runtime.LinearActivation(TABLE)(layer, act, x), act(layer(x))
        fp32 = act.float()(layer.float()(x.float()))
    assert runtime.counts["epilogue"] == 1
    # Against float32: no further from it than the two bfloat16 modules are.
    assert (got.float() - fp32).abs().max() <= 2 * (expected.float() - fp32).abs().max() + 1e-2


# -- transpiled and run ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("act", ["relu", "gelu_new", "silu"])
def test_a_transpiled_mlp_matches_the_original(tmp_path, monkeypatch, act):
    source = tmp_path / "src"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "mlp.py").write_text(MODEL)
    (tmp_path / "mlp_original.py").write_text(MODEL)
    with importable(tmp_path, {source: tmp_path / PACKAGE}, (PACKAGE, "mlp_original")):
        emitted_text = (tmp_path / PACKAGE / "mlp.py").read_text()
        assert f"{EPILOGUE}(self.fc, self.act, h)" in emitted_text
        emitted = importlib.import_module(f"{PACKAGE}._transpile_runtime.linear")
        torch.manual_seed(0)
        original = importlib.import_module("mlp_original").MLP(act=act).eval()
        model = importlib.import_module(f"{PACKAGE}.mlp").MLP(act=act).eval()
        model.load_state_dict(original.state_dict(), strict=True)
        x = torch.randn(2, 5, 16)
        with torch.no_grad():
            torch.testing.assert_close(model(x), original(x))  # CPU: the statements run
            if act == "relu":  # forced, the epilogue computes it (CPU's GELU in it is the exact one)
                monkeypatch.setattr(emitted, "FORCE", True)
                torch.testing.assert_close(model(x), original(x))
                assert emitted.counts["epilogue"] == 1
