"""Batch norm in eval mode (`nn.BatchNorm2d`, `nn.BatchNorm3d`; transpiler/compiler/ops.py CHANNEL_OPS): fused with
the activation after it, the per-channel statistics passed as views that broadcast along dim 1.

What becomes a region and the guard around it; a small tree transpiled, imported and compared with the
original (random statistics, float32, bfloat16 and float16, contiguous and channels_last inputs, 5-d
inputs) in C++ and through the Triton interpreter; training mode, statistics set to None and inputs the
module rejects take the original code (training updates the running statistics as eager does); then
transformers' ResNet, basic and bottleneck.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.test_regions import ir
from tests.transpiled import importable

torch = pytest.importorskip("torch")

PACKAGE = "transpiled_batchnorm"
SOURCE = """\
import torch
import torch.nn.functional as F
from torch import nn


class ConvLayer(nn.Module):
    \"\"\"transformers' ResNetConvLayer: the activation is chosen in __init__.\"\"\"

    def __init__(self, c, activation=True):
        super().__init__()
        self.convolution = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.normalization = nn.BatchNorm2d(c)
        self.activation = nn.ReLU() if activation else nn.Identity()

    def forward(self, x):
        h = self.convolution(x)
        h = self.normalization(h)
        h = self.activation(h)
        return h


class Volume(nn.Module):
    \"\"\"A 3-d batch norm inside one statement with its convolution (split) and a silu.\"\"\"

    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv3d(c, c, 1)
        self.bn = nn.BatchNorm3d(c, eps=1e-3, momentum=None)

    def forward(self, x):
        return F.silu(self.bn(self.conv(x)))


class Plain(nn.Module):
    \"\"\"A batch norm of the forward's own input: whatever it is given reaches the module.\"\"\"

    def __init__(self, c):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        h = self.bn(x)
        return h.relu()
"""
C = 6
TOLERANCE = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
}


# -- regions -----------------------------------------------------------------------------------
def test_the_norm_and_the_activation_are_one_region_guarded_by_the_modules_state():
    init = "self.bn = nn.BatchNorm2d(8)\nself.act = ACT2FN['relu']"
    (text,) = ir("h = self.bn(x)\nh = self.act(h)\nreturn h", init=init)
    assert "in  bn_weight: tensor = self.bn.weight[:, None, None]" in text
    assert "in  bn_eps: scalar = self.bn.eps" in text  # read at each call
    assert "batch_norm(x, bn_running_mean, bn_running_var, bn_weight, bn_bias, bn_eps)" in text
    assert "= activation(" in text
    conditions = [line.removeprefix("  when ") for line in text.splitlines() if line.startswith("  when ")]
    assert conditions == [
        "not self.bn.training",
        "self.bn.running_mean is not None",
        "self.bn.running_var is not None",
        "self.bn.weight is not None",
        "self.bn.bias is not None",
        "x.dim() == 4",
        "x.shape[1] == self.bn.num_features",
    ]
    (text,) = ir("return F.relu(self.bn(x))", init="self.bn = nn.BatchNorm3d(8)")
    assert "self.bn.weight[:, None, None, None]" in text and "when x.dim() == 5" in text


@pytest.mark.parametrize(
    "init, body",
    [
        ("self.bn = nn.BatchNorm2d(8)", "return self.bn(x)"),  # one eager kernel already
        ("self.bn = nn.BatchNorm1d(8)", "return self.bn(x).relu()"),  # 2-d or 3-d input: no one view fits
        ("self.bn = nn.BatchNorm2d(8, affine=False)", "return self.bn(x).relu()"),
        ("self.bn = nn.BatchNorm2d(8, track_running_stats=False)", "return self.bn(x).relu()"),  # batch statistics
    ],
)
def test_what_is_not_fused(init, body):
    assert ir(body, init=init) == []


def test_the_input_is_a_tensor_the_region_reads_not_one_it_computes():
    """The caller checks the input's rank and channels before the region, so the norm cannot take a value
    the region computes: `x * 2` stays outside (one op: no region), the norm and the relu are one, and
    the norm of `x + y` is not fused at all."""
    (text,) = ir("h = x * 2\nh = self.bn(h)\nreturn h.relu()", init="self.bn = nn.BatchNorm2d(8)")
    assert "mul(" not in text and "when h.dim() == 4" in text
    assert ir("return F.relu(self.bn(x + y))", init="self.bn = nn.BatchNorm2d(8)") == []


# -- the emitted code, run -----------------------------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def norms_as_kernels():
    """In eval, a convolution's norm is folded into it (emit/runtime/conv.py) and the norm's kernel is the fold's
    fallback: these tests turn the fold off (read when each transpiled tree's runtime is imported, in this module)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRANSPILE_CONV_FOLD", "0")
        yield


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("batchnorm")
    source = base / "source"
    source.mkdir()
    (source / "layers.py").write_text(SOURCE)
    with importable(base, {source: base / PACKAGE}, (PACKAGE,)):
        yield base


def randomise(model: torch.nn.Module) -> None:
    """Statistics and affine parameters far from their initial 0 and 1, so that each one matters."""
    torch.manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.running_mean.normal_()
                module.running_var.uniform_(0.25, 4.0)
                module.weight.normal_()
                module.bias.normal_()


def pair(name: str, *args):
    """The original class and its transpiled copy, with the same random weights and statistics."""
    namespace: dict = {}
    exec(compile(SOURCE, "layers.py", "exec"), namespace)
    original = namespace[name](*args).eval()
    randomise(original)
    compiled = importlib.import_module(f"{PACKAGE}.layers").__dict__[name](*args).eval()
    compiled.load_state_dict(original.state_dict(), strict=True)
    return original, compiled


def kernel(name: str):
    runtime = importlib.import_module(f"{PACKAGE}._transpile_runtime")
    (found,) = [k for k in runtime.KERNELS if k.name == name]
    return found


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("activation", [True, False])
def test_the_conv_layer_matches_the_original_in_cpp(tree, dtype, channels_last, activation):
    original, compiled = pair("ConvLayer", C, activation)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    original, compiled = (m.to(dtype=dtype, memory_format=memory_format) for m in (original, compiled))
    x = torch.randn(2, C, 7, 5, dtype=dtype).to(memory_format=memory_format)
    fused = kernel("fused_batch_norm_activation")
    before = fused.counts["cpp"]
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), original(x), **TOLERANCE[dtype])
    assert fused.counts["cpp"] == before + 1


def test_a_3d_norm_in_a_split_statement_matches_the_original_in_cpp(tree):
    original, compiled = pair("Volume", C)
    x = torch.randn(2, C, 3, 4, 5)
    fused = kernel("fused_batch_norm_silu")
    before = fused.counts["cpp"]
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), original(x))
    assert fused.counts["cpp"] == before + 1


def test_training_takes_the_original_code_and_updates_the_statistics_as_eager_does(tree):
    original, compiled = pair("ConvLayer", C)
    original.train(), compiled.train()
    fused = kernel("fused_batch_norm_activation")
    before = dict(fused.counts)
    for _ in range(2):
        x = torch.randn(4, C, 5, 5)
        torch.testing.assert_close(compiled(x), original(x))
    for key, value in original.state_dict().items():  # running_mean, running_var, num_batches_tracked
        torch.testing.assert_close(compiled.state_dict()[key], value, rtol=0, atol=0)
    assert original.normalization.num_batches_tracked.item() == 2
    assert dict(fused.counts) == before  # the guard failed: the kernel was not even called


def test_statistics_set_to_none_normalise_with_the_batchs_own(tree):
    original, compiled = pair("ConvLayer", C)
    for model in (original, compiled):
        model.normalization.running_mean = model.normalization.running_var = None
    fused = kernel("fused_batch_norm_activation")
    before = dict(fused.counts)
    x = torch.randn(4, C, 5, 5)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), original(x))
    assert dict(fused.counts) == before


@pytest.mark.parametrize("shape", [(2, C, 5), (2, C, 3, 4, 5), (2, 1, 4, 4), (1, C + 1, 4, 4)])
def test_inputs_the_module_rejects_raise_as_they_do_in_eager(tree, shape):
    """Wrong ranks and channel counts, including those that would broadcast against the statistics."""
    original, compiled = pair("Plain", C)
    x = torch.randn(shape)
    with pytest.raises((ValueError, RuntimeError)) as expected, torch.no_grad():
        original(x)
    with pytest.raises(type(expected.value), match=re.escape(str(expected.value))), torch.no_grad():
        compiled(x)


def test_a_bfloat16_input_to_a_float32_module_is_computed_as_eager_does(tree):
    """torch keeps the input's dtype; C++ kernels take one floating dtype a call, so this falls back."""
    original, compiled = pair("Plain", C)
    x = torch.randn(2, C, 4, 4, dtype=torch.bfloat16)
    with torch.no_grad():
        expected = original(x)
        assert expected.dtype == torch.bfloat16
        torch.testing.assert_close(compiled(x), expected)


TRITON_RUN = textwrap.dedent("""
    import importlib, json, sys
    import torch
    sys.path.insert(0, sys.argv[1])
    from tests.test_batchnorm import TOLERANCE, pair
    runtime = importlib.import_module("transpiled_batchnorm._transpile_runtime")
    cases = [("ConvLayer", (6,), (2, 6, 7, 5)), ("Volume", (6,), (2, 6, 3, 4, 5))]
    for dtype in (torch.float32, torch.bfloat16):
        for name, args, shape in cases:
            for memory_format in (torch.contiguous_format, torch.channels_last) if len(shape) == 4 else (None,):
                original, compiled = pair(name, *args)
                original, compiled = (m.to(dtype) for m in (original, compiled))
                x = torch.randn(shape, dtype=dtype)
                if memory_format is not None:
                    x = x.to(memory_format=memory_format)
                with torch.no_grad():
                    torch.testing.assert_close(compiled(x), original(x), **TOLERANCE[dtype])
    # A bfloat16 input to a float32 module: eager holds the batch norm's result in bfloat16; the kernel
    # rounds each value to its dtype on the call, so it runs.
    original, compiled = pair("Plain", 6)
    x = torch.randn(2, 6, 4, 4, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), original(x), **TOLERANCE[torch.bfloat16])
    print(json.dumps({k.split(" (")[0]: v for k, v in runtime.counters().items()}))
    """)


def test_the_triton_kernels_through_the_interpreter(tree):
    env = {**os.environ, "TRANSPILE_BACKEND": "triton", "TRITON_INTERPRET": "1", "PYTHONPATH": str(Path.cwd())}
    run = subprocess.run(
        [sys.executable, "-c", TRITON_RUN, str(tree)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    counts = json.loads(run.stdout.splitlines()[-1])
    assert counts == {
        "fused_batch_norm_activation": {"triton": 4},
        "fused_batch_norm_silu": {"triton": 2},
        "fused_batch_norm_relu": {"triton": 1},
    }


# -- the real thing: transformers' ResNet ------------------------------------------------------------
RESNET_PACKAGE = "batchnorm_transformers"  # not test_real_models' package: both may run in one session


@pytest.fixture(scope="module")
def resnet(tmp_path_factory) -> Path:
    transformers = pytest.importorskip("transformers")
    base = tmp_path_factory.mktemp("resnet")
    out = base / RESNET_PACKAGE / "resnet"
    with importable(base, {Path(transformers.__file__).parent / "models" / "resnet": out}, (RESNET_PACKAGE,)):
        yield out


@pytest.mark.parametrize("layer_type", ["basic", "bottleneck"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_resnet_runs_every_conv_layer_as_one_kernel(resnet, layer_type, dtype):
    """Each ResNetConvLayer's norm and activation (ReLU, or Identity for the last of a block) in C++;
    the residual block's `+=` stays eager (in place on a tensor the region did not make) and its ReLU
    alone falls back (one eager kernel already)."""
    import transformers

    compiled_module = importlib.import_module(f"{RESNET_PACKAGE}.resnet.modeling_resnet")
    runtime = importlib.import_module(f"{RESNET_PACKAGE}.resnet._transpile_runtime")
    config = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 2], layer_type=layer_type)
    torch.manual_seed(0)
    original = transformers.ResNetModel(config).eval()
    randomise(original)
    compiled = compiled_module.ResNetModel(config).eval()
    compiled.load_state_dict(original.state_dict(), strict=True)
    original, compiled = original.to(dtype), compiled.to(dtype)
    (fused,) = [k for k in runtime.KERNELS if k.name == "fused_batch_norm_activation"]
    before = fused.counts["cpp"]
    pixels = torch.randn(2, 3, 32, 32, dtype=dtype)
    with torch.no_grad():
        expected, actual = original(pixel_values=pixels), compiled(pixel_values=pixels)
    tolerance = TOLERANCE[dtype] if dtype == torch.float32 else dict(rtol=5e-2, atol=5e-2)
    torch.testing.assert_close(actual.last_hidden_state, expected.last_hidden_state, **tolerance)
    layers = sum(isinstance(m, transformers.models.resnet.modeling_resnet.ResNetConvLayer) for m in original.modules())
    assert fused.counts["cpp"] - before == layers
