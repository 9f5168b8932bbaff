"""Convolutions followed by a batch norm (transpiler/compiler/convs.py, emit/host/convs.py, emit/runtime/conv.py):
which statements are sites, the folded convolution against the two modules, every fallback, the cache of
folds, and transformers' ResNet and a torchvision-style block transpiled and run beside their originals."""

from __future__ import annotations

import ast
import importlib
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

# Imported at collection, with the other modules of jit functions: a module that sets TRITON_INTERPRET later in the
# session (test_triton_backend) must not make this one's kernel interpreted while the helpers it calls are compiled.
from emit.runtime import channel_bias  # noqa: E402
from emit.runtime import conv as runtime  # noqa: E402
from tests.transpiled import importable  # noqa: E402
from transpiler.compiler.convs import conv_sites  # noqa: E402
from transpiler.compiler.passes import compile_unit, start  # noqa: E402

nn = torch.nn


# -- sites ----------------------------------------------------------------------------------------------
DEFAULTS = {
    "conv": "nn.Conv2d(3, 8, 3, padding=1, bias=False)",
    "bn": "nn.BatchNorm2d(8)",
    "relu": "nn.ReLU(inplace=True)",
    "activation": "ACT2FN[act] if act is not None else nn.Identity()",  # as transformers' ResNetConvLayer
}


def sites(body: str, init: str = "", compiled=("m.M.forward",)):
    """The sites of module M's forward `body`; M's attributes are DEFAULTS, `init` (`self.<attr> = ...`) replacing one."""
    attributes = dict(DEFAULTS)
    if init:
        attr, _, value = init.removeprefix("self.").partition(" = ")
        attributes[attr] = value
    assignments = "".join(f"        self.{attr} = {value}\n" for attr, value in attributes.items())
    source = (
        "import torch\nfrom torch import nn\nfrom transformers.activations import ACT2FN\n\n\n"
        "class M(nn.Module):\n    def __init__(self, act):\n        super().__init__()\n"
        f"{assignments}\n    def forward(self, x):\n" + textwrap.indent(textwrap.dedent(body).strip() + "\n", " " * 8)
    )
    return conv_sites(ast.parse(source), "m", False, source, set(compiled), [])


def described(found) -> list[tuple]:
    return [(s.target, s.conv, s.norm, s.activation, s.argument) for s in found]


@pytest.mark.parametrize(
    "body, expected",
    [
        ("h = self.conv(x)\nh = self.bn(h)\nreturn h", [("h", "conv", "bn", None, "x")]),
        ("h = self.conv(x)\nh = self.bn(h)\nh = self.relu(h)\nreturn h", [("h", "conv", "bn", "relu", "x")]),
        ("out = self.bn(self.conv(x))\nreturn out", [("out", "conv", "bn", None, "x")]),
        ("out = self.relu(self.bn(self.conv(x)))\nreturn out", [("out", "conv", "bn", "relu", "x")]),
        # transformers' ResNetConvLayer: `ACT2FN[...]` chosen at run time, in an attribute named like an activation
        (
            "x = self.conv(x)\nx = self.bn(x)\nx = self.activation(x)\nreturn x",
            [("x", "conv", "bn", "activation", "x")],
        ),
        ("a = self.conv(x)\nb = self.bn(a)\nreturn b", [("b", "conv", "bn", None, "x")]),
        # the same module called twice: each call is a site
        (
            "h = self.bn(self.conv(x))\nh = self.relu(h)\ng = self.bn(self.conv(h))\nreturn g",
            [("h", "conv", "bn", "relu", "x"), ("g", "conv", "bn", None, "h")],
        ),
    ],
)
def test_sites_are_found(body, expected):
    assert described(sites(body)) == expected


@pytest.mark.parametrize(
    "init",
    [
        "self.conv = nn.Conv2d(3, 8, 3, groups=1, dilation=2, padding=2, bias=True)",
        "self.conv = nn.Conv2d(3, 8, 3, padding=1, padding_mode='reflect')",  # the runtime decides (it falls back)
        "self.conv = nn.Conv2d(4, 8, 3, groups=4)",
        "self.conv = torch.nn.Conv2d(3, 8, 1, bias=None)",
    ],
)
def test_any_conv2d_is_a_site(init):
    assert described(sites("h = self.conv(x)\nh = self.bn(h)\nreturn h", init)) == [("h", "conv", "bn", None, "x")]


@pytest.mark.parametrize(
    "body, init",
    [
        ("h = self.conv(x)\ny = self.bn(h)\nreturn y + h", ""),  # the convolution's output is used twice
        ("h = self.conv(x)\nh = self.bn(h)\nreturn h", "self.bn = nn.BatchNorm1d(8)"),
        ("h = self.conv(x)\nh = self.bn(h)\nreturn h", "self.bn = nn.GroupNorm(2, 8)"),
        ("h = self.conv(x)\nh = self.bn(h)\nreturn h", "self.conv = nn.Conv1d(3, 8, 3)"),
        ("h = self.conv(x)\nh = self.bn(h)\nreturn h", "self.conv = MyConv(3, 8, 3)"),  # not known to be nn.Conv2d
        ("h = self.bn(self.conv(x + 1))\nreturn h", ""),  # the fallback would compute the argument again
        ("h = self.conv(x)\nh = x + 1\nh = self.bn(h)\nreturn h", ""),  # the norm does not read the conv's output
        ("h = self.bn(x)\nh = self.conv(h)\nreturn h", ""),  # the other order
        ("return self.bn(self.conv(x))", ""),  # not an assignment
    ],
)
def test_other_statements_are_not_sites(body, init):
    assert sites(body, init) == []


def test_only_functions_that_run_under_forward_have_sites():
    assert sites("h = self.bn(self.conv(x))\nreturn h", compiled=()) == []


def test_a_region_reaching_outside_the_site_keeps_its_kernel():
    """The norm fused with what follows it is one kernel already: folding would split it."""
    source = textwrap.dedent("""
        from torch import nn


        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3)
                self.bn = nn.BatchNorm2d(8)
                self.act = nn.ReLU()

            def forward(self, x, y):
                h = self.conv(x)
                h = self.bn(h)
                h = self.act(h)
                return h * y + 1
        """).lstrip()
    unit = compile_unit(start("m.py", "m", False, source, source))
    assert unit.regions and all(r.last_line == 15 for r in unit.regions)
    assert unit.convs == ()


# -- the folded convolution against the modules ------------------------------------------------------------
def pair(bias=True, affine=True, groups=1, dilation=1, stride=1, dtype=torch.float32, seed=0):
    """An nn.Conv2d and nn.BatchNorm2d in eval, with random weights and running statistics."""
    torch.manual_seed(seed)
    conv = nn.Conv2d(8, 12, 3, stride=stride, padding=dilation, dilation=dilation, groups=groups, bias=bias)
    norm = nn.BatchNorm2d(12, affine=affine)
    with torch.no_grad():
        norm.running_mean.normal_()
        norm.running_var.uniform_(0.25, 4.0)
        if affine:
            norm.weight.normal_()
            norm.bias.normal_()
    return conv.to(dtype).eval(), norm.to(dtype).eval()


def error_bound(conv, norm, x) -> torch.Tensor:
    """Per output element, what the fold and eager may each differ from the exact value by.

    Both sum K = in_channels/groups * kh * kw products (float32 accumulation: K * eps32 of the sum of their
    magnitudes); in a half dtype the fold's weight and bias are rounded once and so is the output (half an
    eps each, 2 eps together at most), as eager rounds the convolution's output and the norm's."""
    weight, bias = runtime.folded(conv.weight.double(), None if conv.bias is None else conv.bias.double(), norm)
    magnitude = torch.nn.functional.conv2d(
        x.double().abs(), weight.abs(), bias.abs(), conv.stride, conv.padding, conv.dilation, conv.groups
    )
    k = conv.weight[0].numel()
    eps = torch.finfo(x.dtype).eps
    return (k * torch.finfo(torch.float32).eps + (2 * eps if x.dtype != torch.float32 else 0)) * magnitude


def exact(conv, norm, x, activation=None) -> torch.Tensor:
    """`activation(norm(conv(x)))` in float64."""
    c, n = pair(conv.bias is not None, norm.affine, conv.groups, conv.dilation[0], conv.stride[0], torch.float64)
    c.load_state_dict(conv.state_dict())
    n.load_state_dict(norm.state_dict())
    n.eps = norm.eps  # not in the state_dict
    y = n(c(x.double()))
    return y if activation is None else activation(y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize(
    "options",
    [{}, {"bias": False}, {"affine": False}, {"groups": 4}, {"dilation": 2, "stride": 2}],
    ids=["bias", "no-bias", "affine-false", "groups", "dilation-stride"],
)
def test_the_fold_computes_the_modules_result(dtype, channels_last, options, monkeypatch):
    monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
    conv, norm = pair(dtype=dtype, **options)
    x = torch.randn(2, 8, 11, 13, dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        got = runtime.conv_bn(conv, norm, None, x)
        eager = norm(conv(x))
    assert runtime.counts == {"folded": 1}
    assert got.dtype == eager.dtype and got.shape == eager.shape
    # channels_last by default (TRANSPILE_CHANNELS_LAST): on the CPU too, where oneDNN is faster on it
    nhwc = runtime.CHANNELS_LAST or eager.is_contiguous(memory_format=torch.channels_last)
    assert got.is_contiguous(memory_format=torch.channels_last) == nhwc
    wanted, bound = exact(conv, norm, x), error_bound(conv, norm, x)
    assert ((eager.double() - wanted).abs() <= bound).all()  # the bound holds for eager itself
    assert ((got.double() - wanted).abs() <= bound).all()


@pytest.mark.parametrize("activation", [nn.ReLU(), nn.ReLU(inplace=True), nn.SiLU(), nn.Identity()])
def test_the_activation_follows_the_fold(activation, monkeypatch):
    monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
    conv, norm = pair()
    x = torch.randn(2, 8, 7, 7)
    with torch.no_grad():
        got = runtime.conv_bn(conv, norm, activation, x)
    wanted = exact(conv, norm, x, activation)
    assert runtime.counts == {"folded": 1}
    assert ((got.double() - wanted).abs() <= error_bound(conv, norm, x)).all()
    assert got is not x


def fallback(conv, norm, x, reason: str, monkeypatch, grad=False):
    monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
    with torch.set_grad_enabled(grad):
        assert runtime.conv_bn(conv, norm, None, x) is None
    (path,) = runtime.counts  # one call, one path
    assert path.startswith(f"fallback: {reason}")


def test_training_mode_falls_back(monkeypatch):
    conv, norm = pair()
    fallback(conv, norm.train(), torch.randn(2, 8, 5, 5), "the norm uses the batch's statistics", monkeypatch)


def test_a_norm_without_running_statistics_falls_back(monkeypatch):
    conv, _ = pair()
    norm = nn.BatchNorm2d(12, track_running_stats=False).eval()
    fallback(conv, norm, torch.randn(2, 8, 5, 5), "the norm uses the batch's statistics", monkeypatch)


@pytest.mark.parametrize("which", ["conv", "norm", "global"])
def test_hooks_fall_back(which, monkeypatch):
    conv, norm = pair()
    if which == "global":
        handle = nn.modules.module.register_module_forward_hook(lambda *a: None)
    else:
        handle = (conv if which == "conv" else norm).register_forward_pre_hook(lambda *a: None)
    try:
        fallback(conv, norm, torch.randn(2, 8, 5, 5), "hooks or a forward replaced on the instance", monkeypatch)
    finally:
        handle.remove()


def test_a_forward_replaced_on_the_instance_falls_back(monkeypatch):
    conv, norm = pair()
    norm.forward = lambda x: x
    fallback(conv, norm, torch.randn(2, 8, 5, 5), "hooks or a forward replaced on the instance", monkeypatch)


def test_subclasses_fall_back(monkeypatch):
    class MyNorm(nn.BatchNorm2d):
        pass

    conv, _ = pair()
    norm = MyNorm(12).eval()
    fallback(conv, norm, torch.randn(2, 8, 5, 5), "not exactly nn.Conv2d and nn.BatchNorm2d", monkeypatch)


def test_autograd_falls_back(monkeypatch):
    conv, norm = pair()
    fallback(conv, norm, torch.randn(2, 8, 5, 5), "autograd needs the modules", monkeypatch, grad=True)


def test_other_padding_modes_fall_back(monkeypatch):
    conv, norm = pair()
    conv.padding_mode = "reflect"
    fallback(conv, norm, torch.randn(2, 8, 5, 5), "a padding mode other than zeros", monkeypatch)


@pytest.mark.parametrize("x", [torch.randn(8, 5, 5), torch.randn(2, 8, 5, 5).double(), torch.randn(2, 3, 5, 5)])
def test_inputs_the_modules_check_fall_back(x, monkeypatch):
    conv, norm = pair()
    fallback(conv, norm, x, "inputs the modules check themselves", monkeypatch)


def test_inference_tensors_fall_back(monkeypatch):
    with torch.inference_mode():
        conv, norm = pair()
    fallback(conv, norm, torch.randn(2, 8, 5, 5), "a tensor without a version counter", monkeypatch)


def test_eager_backend_turns_it_off(monkeypatch):
    monkeypatch.setattr(runtime, "_OFF", True)
    conv, norm = pair()
    fallback(conv, norm, torch.randn(2, 8, 5, 5), "TRANSPILE_BACKEND=eager", monkeypatch)


# -- the bias and ReLU in one kernel (CUDA; here under Triton's interpreter) ----------------------------------
def _same_bits(got: torch.Tensor, wanted: torch.Tensor) -> bool:
    """Equal values, NaN at the same places, the same signs of zero, the same strides."""
    return (
        got.dtype == wanted.dtype
        and got.stride() == wanted.stride()
        and torch.equal(got.isnan(), wanted.isnan())
        and torch.equal(got.nan_to_num(0.0), wanted.nan_to_num(0.0))
        and torch.equal(got.signbit() & ~got.isnan(), wanted.signbit() & ~wanted.isnan())  # a NaN's sign is noise
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("shape", [(2, 5, 3, 4), (3, 7, 13, 11), (1, 3, 1, 1), (0, 4, 2, 2)])
def test_the_bias_kernel_adds_as_torch_does(dtype, layout, relu, shape):
    """One pass computes what torch's broadcast `add_` and `relu_` do, bit for bit (shapes crossing blocks)."""
    generator = torch.Generator().manual_seed(sum(shape))
    out = (torch.randn(shape, generator=generator, dtype=torch.float64) * 3).to(dtype)
    if out.numel() > 8:
        out.view(-1)[3], out.view(-1)[7] = float("nan"), -0.0
    out = out.contiguous(memory_format=layout)
    bias = (torch.randn(shape[1], generator=generator, dtype=torch.float64) * 3).to(dtype)
    bias[0] = 0.0  # -0.0 + 0.0, and 0.0 added to small values
    wanted = out.clone(memory_format=torch.preserve_format).add_(bias.reshape(-1, 1, 1))
    if relu:
        wanted.relu_()
    got = out.clone(memory_format=torch.preserve_format)
    assert channel_bias.supported(got, bias)
    assert channel_bias.add_(got, bias, relu) is got
    assert _same_bits(got, wanted)


def test_the_bias_kernel_refuses_other_layouts():
    bias = torch.randn(4)
    assert not channel_bias.supported(torch.randn(2, 4, 6, 6)[..., ::2], bias)  # not dense
    assert not channel_bias.supported(torch.randn(2, 6, 6, 4).permute(0, 3, 2, 1), bias)  # neither layout
    assert not channel_bias.supported(torch.randn(2, 4, 6, 6), bias.double())  # another dtype
    assert not channel_bias.supported(torch.randn(2, 4, 6), bias)  # not 4-D


@pytest.mark.parametrize("activation", [None, nn.Identity(), nn.ReLU(), nn.ReLU(inplace=True), nn.SiLU()])
@pytest.mark.parametrize("channels_last", [False, True])
def test_the_fold_adds_its_bias_in_one_kernel(activation, channels_last, monkeypatch):
    """Where the kernel runs (CUDA; here forced on the CPU), the fold still computes the modules' result."""
    monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
    monkeypatch.setattr(runtime, "_channel_bias", lambda input: channel_bias)
    conv, norm = pair()
    x = torch.randn(2, 8, 9, 7)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        got = runtime.conv_bn(conv, norm, activation, x)
    relu = isinstance(activation, nn.ReLU)
    kernel = {"bias and ReLU in one kernel" if relu else "bias in one kernel": 1}
    assert runtime.counts == {"folded": 1, **(kernel if relu or type(activation) in (type(None), nn.Identity) else {})}
    wanted = exact(conv, norm, x, activation)
    assert ((got.double() - wanted).abs() <= error_bound(conv, norm, x)).all()


# -- the cache of folds --------------------------------------------------------------------------------------
def _update_running_mean(conv, norm):
    with torch.no_grad():
        norm.running_mean.add_(1.0)


def _replace_weight(conv, norm):
    conv.weight = nn.Parameter(torch.randn_like(conv.weight))


def _load_state_dict(conv, norm):
    other, _ = pair(seed=1)
    conv.load_state_dict(other.state_dict())


def _update_gamma(conv, norm):
    with torch.no_grad():
        norm.weight.mul_(2.0)


def _set_eps(conv, norm):
    norm.eps = 0.5


@pytest.mark.parametrize("change", [_update_running_mean, _replace_weight, _load_state_dict, _update_gamma, _set_eps])
def test_a_changed_tensor_makes_a_new_fold(change):
    conv, norm = pair()
    x = torch.randn(2, 8, 6, 6)
    with torch.no_grad():
        runtime.conv_bn(conv, norm, None, x)
        first = runtime._FOLDS[conv][1]
        runtime.conv_bn(conv, norm, None, x)
        assert runtime._FOLDS[conv][1] is first  # unchanged: the same fold
        change(conv, norm)
        got = runtime.conv_bn(conv, norm, None, x)
    assert runtime._FOLDS[conv][1] is not first
    assert ((got.double() - exact(conv, norm, x)).abs() <= error_bound(conv, norm, x)).all()


def test_another_norm_with_the_same_conv_makes_a_new_fold():
    conv, norm = pair()
    _, other = pair(seed=1)
    x = torch.randn(2, 8, 6, 6)
    with torch.no_grad():
        runtime.conv_bn(conv, norm, None, x)
        got = runtime.conv_bn(conv, other, None, x)
    assert ((got.double() - exact(conv, other, x)).abs() <= error_bound(conv, other, x)).all()


# -- transpiled models ----------------------------------------------------------------------------------------
BLOCK = """
import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        out += identity
        out = self.relu(out)

        return out


class Net(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(width, width), BasicBlock(width, width))
        self.layer2 = nn.Sequential(BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 2 * width))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2 * width, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)
"""


def randomise_statistics(model: nn.Module) -> None:
    torch.manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.2)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)


def relative_l2(got: torch.Tensor, wanted: torch.Tensor) -> float:
    return float((got.double() - wanted.double()).norm() / wanted.double().norm())


def conv_counts(module) -> dict:
    """The folded convolution's counters of the transpiled tree `module` belongs to."""
    return dict(sys.modules[module._transpile_conv_bn.__module__].counts)


def compare(original: nn.Module, transpiled: nn.Module, x: torch.Tensor, output=lambda out: out) -> None:
    """The transpiled model against eager: float32 within float32's reduction error of the float64 model, bfloat16
    no further from the float64 model than eager's own bfloat16 result is (times two: the fold rounds its weights
    where eager rounds the convolution's output, a comparable error)."""
    randomise_statistics(original)
    transpiled.load_state_dict(original.state_dict())
    original.eval(), transpiled.eval()
    with torch.no_grad():
        exact_out = output(original.double()(x.double()))
        original.float(), transpiled.float()
        assert relative_l2(output(transpiled(x)), exact_out) <= 1e-5  # float32 sums of a few hundred products
        original.bfloat16(), transpiled.bfloat16()
        eager = relative_l2(output(original(x.bfloat16())), exact_out)
        assert relative_l2(output(transpiled(x.bfloat16())), exact_out) <= 2 * eager


def test_a_torchvision_style_resnet_transpiled(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "__init__.py").write_text("")
    (source / "resnet.py").write_text(BLOCK)
    (tmp_path / "original_resnet.py").write_text(BLOCK)
    with importable(tmp_path, {source: tmp_path / "transpiled_resnet"}, ("transpiled_resnet", "original_resnet")):
        module = importlib.import_module("transpiled_resnet.resnet")
        original = importlib.import_module("original_resnet")
        text = Path(module.__file__).read_text()
        assert text.count("_transpile_conv_bn(self.conv1, self.bn1, self.relu, x)") == 2  # the stem's and the block's
        # conv2's norm is copied into the branches of the `if` to fuse with the residual add (tails.py): one kernel
        # for the norm and the add, as many passes over memory as the add alone after a folded convolution
        assert "self.conv2, self.bn2" not in text
        before = conv_counts(module).get("folded", 0)
        compare(original.Net(), module.Net(), torch.randn(2, 3, 32, 32))
        # float32 and bfloat16 (the float64 run is eager's): the stem's site and each of 4 blocks' conv1
        assert conv_counts(module)["folded"] - before == 2 * (1 + 4)


def test_transformers_resnet_transpiled(tmp_path):
    transformers = pytest.importorskip("transformers")
    package = Path(transformers.__file__).parent / "models" / "resnet"
    with importable(tmp_path, {package: tmp_path / "transpiled_hf_resnet" / "resnet"}, ("transpiled_hf_resnet",)):
        (tmp_path / "transpiled_hf_resnet" / "__init__.py").write_text("")
        module = importlib.import_module("transpiled_hf_resnet.resnet.modeling_resnet")
        config = transformers.ResNetConfig(
            embedding_size=8, hidden_sizes=[16, 32], depths=[1, 2], layer_type="bottleneck", num_labels=5
        )
        torch.manual_seed(0)
        original = transformers.ResNetForImageClassification(config)
        transpiled = module.ResNetForImageClassification(config)
        before = conv_counts(module).get("folded", 0)
        compare(original, transpiled, torch.randn(2, 3, 32, 32), output=lambda out: out.logits)
        # each bottleneck: 3 conv layers and the first's shortcut; the stem's conv layer; float32 and bfloat16
        assert conv_counts(module)["folded"] - before == 2 * (1 + 3 * 3 + 2)


# -- CUDA --------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_on_cuda_the_fold_runs_channels_last(dtype, monkeypatch):
    monkeypatch.setattr(runtime, "CHANNELS_LAST", True)  # the opt-in
    monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # float32 products, as the bound counts them
    conv, norm = pair(dtype=dtype)
    conv, norm = conv.cuda(), norm.cuda()
    x = torch.randn(4, 8, 17, 19, dtype=dtype, device="cuda")
    with torch.no_grad():
        got = runtime.conv_bn(conv, norm, nn.ReLU(), x)
        again = runtime.conv_bn(conv, norm, None, got[:, :8].contiguous())
    assert runtime.counts == {"folded": 2, "bias and ReLU in one kernel": 1, "bias in one kernel": 1}
    assert got.is_contiguous(memory_format=torch.channels_last) and again.is_contiguous(
        memory_format=torch.channels_last
    )
    assert runtime._FOLDS[conv][1].weight.is_contiguous(memory_format=torch.channels_last)
    bound = error_bound(conv.cpu(), norm.cpu(), x.cpu())
    wanted = exact(conv, norm, x.cpu(), nn.ReLU())
    assert ((got.cpu().double() - wanted).abs() <= bound).all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("activation", [None, nn.ReLU()])
def test_on_cuda_the_bias_kernel_computes_what_torch_adds(dtype, channels_last, activation, monkeypatch):
    """The convolution without its bias, then the bias and ReLU in one kernel: bit for bit torch's convolution
    with its bias (cuDNN's convolution, then torch's broadcast add) and `relu_`."""
    monkeypatch.setattr(runtime, "CHANNELS_LAST", channels_last)
    conv, norm = pair(dtype=dtype)
    conv, norm = conv.cuda(), norm.cuda()
    x = torch.randn(4, 8, 17, 19, dtype=dtype, device="cuda")
    with torch.no_grad():
        monkeypatch.setattr(runtime, "counts", runtime.counts.__class__())
        got = runtime.conv_bn(conv, norm, activation, x)
        assert runtime.counts["bias and ReLU in one kernel" if activation else "bias in one kernel"] == 1
        monkeypatch.setattr(runtime, "FUSED_BIAS", False)
        wanted = runtime.conv_bn(conv, norm, activation, x)
    assert _same_bits(got, wanted)
