"""Convolution nets: eager, torch.compile and the transpiled model, and the folded convolution's own choices.

    python benchmarks/conv_nets.py [--device cuda|cpu] [--dtypes bfloat16,float32] [--batch 32] [--image 224]
        [--models hf,torchvision] [--no-compile] [--budget 2]

Models, built with random weights and random batch-norm statistics, in eval under `torch.no_grad()`:
`hf` is transformers' ResNetForImageClassification with its default config (ResNet-50), `torchvision`
a hand-written torchvision-style ResNet-50 (Bottleneck blocks, `out += identity; out = self.relu(out)`,
the downsample an `nn.Sequential`). Each is transpiled here (`transpile build` into a temporary
directory, the installed transformers' package for `hf`) and run beside eager and torch.compile
(default mode) on the same input, NCHW-contiguous as a user passes it.

Per model and dtype: the steady-state time of a forward (benchlib: warm-up, then CUDA events after an
L2 flush, median), the output's relative L2 difference from eager's, the transpiled runtime's folded
convolution counters (`_transpile_runtime.conv.counts`).
The transpiled model runs in four settings of emit/runtime/conv.py, a new model each (its forward
replays the CUDA graph its first calls recorded): the default (channels_last on CUDA, the bias and a
ReLU in one Triton kernel after the convolution), `CHANNELS_LAST = False` (the input's layout, as
eager), `FUSED_BIAS = False` (torch's bias add and ReLU) and `CUDNN_RELU = True` (cuDNN's fused
convolution + bias + ReLU): the last three say whether the defaults are the right ones. On CUDA
torch.compile's reduce-overhead mode runs too. Then, per ResNet-50 convolution shape, the device time of eager's
conv + batch norm + ReLU (NCHW), the folded convolution + in-place ReLU (NHWC) and
`torch.cudnn_convolution_relu` (NHWC).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib, also when this file is loaded by path
from benchlib import median_seconds, synchronize  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

TORCHVISION_STYLE = """
import torch
from torch import nn


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)

        out = self.conv3(out)
        out = self.bn3(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        out += identity
        out = self.relu(out)

        return out


class ResNet50(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._layer(64, 3)
        self.layer2 = self._layer(128, 4, 2)
        self.layer3 = self._layer(256, 6, 2)
        self.layer4 = self._layer(512, 3, 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2048, num_classes)

    def _layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * 4:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4)
            )
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * 4
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)
"""

# ResNet-50's convolutions at 224x224: (in, out, kernel, stride, input height), each followed by a batch norm and a ReLU.
CONV_SHAPES = ((3, 64, 7, 2, 224), (64, 64, 1, 1, 56), (64, 64, 3, 1, 56), (128, 128, 3, 2, 56), (256, 256, 3, 1, 14))


def transpile(source: Path, out: Path) -> None:
    command = [sys.executable, "-m", "transpiler.cli.main", "build", str(source), "-o", str(out)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if result.returncode not in (0, 1):  # 1: findings left
        raise SystemExit(f"transpile failed:\n{result.stdout}\n{result.stderr}")


def build_models(name: str, work: Path) -> tuple[nn.Module, Callable[[], nn.Module], object]:
    """(eager model, a maker of transpiled models with the eager one's weights, the transpiled tree's conv runtime
    module). A new transpiled model per setting: its forward replays the graph its first calls recorded."""
    root = work / f"conv_nets_{name}"
    sys.path.insert(0, str(work))
    if name == "hf":
        import transformers

        transpile(Path(transformers.__file__).parent / "models" / "resnet", root / "resnet")
        (root / "__init__.py").write_text("")
        module = importlib.import_module(f"{root.name}.resnet.modeling_resnet")
        config = transformers.ResNetConfig(num_labels=1000)
        eager = transformers.ResNetForImageClassification(config)

        def make() -> nn.Module:
            return module.ResNetForImageClassification(config)

    else:
        source = work / "torchvision_style"
        source.mkdir()
        (source / "__init__.py").write_text("")
        (source / "resnet.py").write_text(TORCHVISION_STYLE)
        transpile(source, root)
        module = importlib.import_module(f"{root.name}.resnet")
        namespace: dict = {}
        exec(compile(TORCHVISION_STYLE, "torchvision_style.py", "exec"), namespace)
        eager, make = namespace["ResNet50"](), module.ResNet50
    with torch.no_grad():
        for m in eager.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)

    def transpiled() -> nn.Module:
        model = make()
        model.load_state_dict(eager.state_dict())
        return model.eval()

    conv = sys.modules[module._transpile_conv_bn.__module__]  # the transpiled tree's copy of emit/runtime/conv.py
    return eager.eval(), transpiled, conv


def relative_l2(got: torch.Tensor, wanted: torch.Tensor) -> float:
    return float((got.float() - wanted.float()).norm() / wanted.float().norm())


def logits(out) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out


def run_model(name: str, args: argparse.Namespace, work: Path) -> None:
    eager, make, conv = build_models(name, work)
    for dtype in args.dtypes:
        eager.to(args.device, dtype)
        x = torch.randn(args.batch, 3, args.image, args.image, device=args.device, dtype=dtype)
        with torch.no_grad():
            wanted = logits(eager(x))
            rows = [("eager", eager, {})]
            if args.compile:
                rows.append(("torch.compile", torch.compile(eager), {}))
                if args.device == "cuda":
                    rows.append(("torch.compile reduce-overhead", torch.compile(eager, mode="reduce-overhead"), {}))
            rows += [
                ("transpiled", make().to(args.device, dtype), {}),
                ("transpiled, input layout kept", make().to(args.device, dtype), {"CHANNELS_LAST": False}),
                ("transpiled, bias and ReLU by torch", make().to(args.device, dtype), {"FUSED_BIAS": False}),
                ("transpiled, ReLU in cuDNN", make().to(args.device, dtype), {"CUDNN_RELU": True}),
            ]
            base = None
            for label, model, settings in rows:
                call = functools.partial(model, x)
                saved = {key: getattr(conv, key) for key in settings}
                for key, value in settings.items():
                    setattr(conv, key, value)
                try:
                    conv.counts.clear()
                    out = logits(call())
                    synchronize(args.device)
                    counts = dict(conv.counts)
                    seconds, _ = median_seconds(call, args.device, args.budget)
                finally:
                    for key, value in saved.items():
                        setattr(conv, key, value)
                base = base or seconds
                print(
                    f"| {name} | {str(dtype)[6:]} | {label} | {seconds * 1e3:.2f} | {base / seconds:.2f}x "
                    f"| {relative_l2(out, wanted):.1e} | {counts if label.startswith('transpiled') else ''} |"
                )
    sys.path.remove(str(work))


def run_shapes(args: argparse.Namespace) -> None:
    """Per convolution shape: eager's three modules (NCHW) against the folded convolution (NHWC) and cuDNN's fused ReLU."""
    from emit.runtime.conv import folded

    print("\n| in -> out, k, stride, HxW | dtype | eager conv+bn+relu ms | folded + relu_ ms | cudnn conv+relu ms |")
    print("|---|---|---|---|---|")
    for cin, cout, k, stride, size in CONV_SHAPES:
        for dtype in args.dtypes:
            c = nn.Conv2d(cin, cout, k, stride, k // 2, bias=False).to(args.device, dtype).eval()
            b = nn.BatchNorm2d(cout).to(args.device, dtype).eval()
            x = torch.randn(args.batch, cin, size, size, device=args.device, dtype=dtype)
            w, bias = folded(c.weight, None, b)
            w = w.contiguous(memory_format=torch.channels_last)
            xl = x.contiguous(memory_format=torch.channels_last)
            with torch.no_grad():
                calls = [
                    lambda: torch.relu(b(c(x))),
                    lambda: torch.nn.functional.conv2d(xl, w, bias, c.stride, c.padding).relu_(),
                ]
                if args.device == "cuda":
                    calls.append(lambda: torch.cudnn_convolution_relu(xl, w, bias, c.stride, c.padding, c.dilation, 1))
                times = [median_seconds(call, args.device, args.budget)[0] * 1e3 for call in calls]
            cells = " | ".join(f"{t:.3f}" for t in times) + (" | n/a" if len(times) == 2 else "")
            print(f"| {cin} -> {cout}, {k}, {stride}, {size}x{size} | {str(dtype)[6:]} | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--models", default="hf,torchvision")
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timed iterations per row")
    args = parser.parse_args()
    args.dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    sys.path.insert(0, str(REPO))
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}")
    print(f"batch {args.batch}, {args.image}x{args.image}; time in ms (median), speed-up against eager\n")
    print("| model | dtype | variant | ms | vs eager | rel L2 vs eager | folded conv counters |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            run_model(name, args, Path(work))
    run_shapes(args)


if __name__ == "__main__":
    main()
