"""A convolution followed by a batch norm in eval, as one convolution: the norm folded into its weight and bias.

In eval, `bn(conv(x))` is `conv(x) * s + (beta - mean * s)` per output channel, with
`s = gamma / sqrt(var + eps)`: the convolution of x with the weight scaled by s and the bias
`(bias - mean) * s + beta`. One convolution then does the work of two kernels, and the norm's
pass over the feature map (a read and a write of it, as much memory traffic as a 1x1
convolution's output) is gone. `conv_bn(conv, norm, activation, input)` computes that where it
is exact, and returns None otherwise, for the caller to run its statements (the modules).

The folded weight is kept channels_last and the input converted to it: a chain of convolutions
stays NHWC, where NCHW tensors make cuDNN convert the layout around every convolution (NHWC is its
fastest layout for half precision), and oneDNN on the CPU is faster on NHWC too, as is the max
pooling between the stem and the first stage (this CPU, float32, ResNet at 4x3x64x64: 2.70 against
1.83 ms a forward; its convolutions 102 against 73 us each). Pointwise kernels (generated ones too, beside
per-channel parameters) and in-place adds keep their inputs' layout, so the feature maps of a
ResNet stay NHWC from the stem to the head. The tensors a model returns then have channels_last
strides where eager's are NCHW-contiguous: the same values and shape, `.contiguous()` gives
eager's layout, and a `.view` that merges the channel dim with the spatial ones raises (`.reshape`
copies). `TRANSPILE_CHANNELS_LAST=0` keeps the input's layout, as eager does.

The folded weight and bias are cached per module pair and made again when any tensor they come
from is replaced, moved or updated in place (identity, data pointer and version counter):
`load_state_dict`, `.to()`, an optimizer step. An update through `.data` (`w.data.copy_(...)`)
bumps no version counter and is not seen. The cache holds a second copy of the convolution's
weights. This file may import only torch: it is copied into every output tree.
"""

from __future__ import annotations

import collections
import os
import weakref
from typing import NamedTuple

import torch

from .activations import _hooked

_OFF = (
    os.environ.get("TRANSPILE_BACKEND", "") == "eager"  # every transpile kernel off, this one too
    or os.environ.get("TRANSPILE_CONV_FOLD", "1") == "0"  # the fold alone off: the norms' kernels run
)
# Measured on the H100 (benchmarks/RESULTS.md, issue 17, session 9), bf16 at 32x224²: transformers' ResNet-50
# 2.38 against 3.30 ms, a torchvision-style one 2.11 against 3.22 ms (its generated residual kernels walk the
# channels_last memory since then; before, they read it strided and channels_last was slower there).
CHANNELS_LAST = os.environ.get("TRANSPILE_CHANNELS_LAST", "1") == "1"
# `TRANSPILE_CONV_RELU=cudnn`: on CUDA a following nn.ReLU runs in cuDNN's fused convolution + bias + ReLU
# (torch.cudnn_convolution_relu) instead of an in-place ReLU after the convolution; benchmarks/conv_nets.py
# times both on the GPU before either becomes the default.
CUDNN_RELU = os.environ.get("TRANSPILE_CONV_RELU", "") == "cudnn"
# On CUDA the folded convolution runs without its bias, and one Triton kernel adds the bias and applies a
# following ReLU (emit/runtime/channel_bias.py): `TRANSPILE_CONV_BIAS=torch` leaves both to torch (two kernels).
FUSED_BIAS = os.environ.get("TRANSPILE_CONV_BIAS", "triton") != "torch"
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)

# "folded", "relu in cudnn", "bias in one kernel", "bias and ReLU in one kernel", "fallback: <why>"
counts: collections.Counter[str] = collections.Counter()


class _Fold(NamedTuple):
    key: tuple  # per source tensor: (id, data pointer, version); and eps, channels_last
    held: tuple  # the source tensors: held so that no other tensor takes their ids
    weight: torch.Tensor
    bias: torch.Tensor


# Per convolution module: its norm and their fold. Weak keys: a module that is dropped drops its fold.
_FOLDS: weakref.WeakKeyDictionary[torch.nn.Module, tuple[torch.nn.Module, _Fold]] = weakref.WeakKeyDictionary()


def conv_bn(
    conv: torch.nn.Module, norm: torch.nn.Module, activation: torch.nn.Module | None, input: torch.Tensor
) -> torch.Tensor | None:
    """`activation(norm(conv(input)))` (without `activation` when None) as one folded convolution, or None."""
    why = _refusal(conv, norm, input)
    if why is not None:
        counts[why] += 1
        return None
    channels_last = CHANNELS_LAST
    fold = _fold(conv, norm, channels_last)
    if fold is None:
        counts["fallback: a tensor without a version counter (made in inference mode)"] += 1
        return None
    if channels_last:
        input = input.contiguous(memory_format=torch.channels_last)
    if activation is not None and type(activation) is torch.nn.Identity and _plain_module(activation):
        activation = None  # transformers' last convolution of a bottleneck: `nn.Identity()` for no activation
    relu = activation is not None and type(activation) is torch.nn.ReLU and _plain_module(activation)
    if relu and CUDNN_RELU and input.is_cuda and not isinstance(conv.padding, str):
        counts["relu in cudnn"] += 1
        return torch.cudnn_convolution_relu(
            input, fold.weight, fold.bias, conv.stride, conv.padding, conv.dilation, conv.groups
        )
    epilogue = _channel_bias(input) if relu or activation is None else None
    if epilogue is not None:
        # The bias and the ReLU in one pass over the output, where torch would add the bias in a kernel of its own
        out = torch.nn.functional.conv2d(
            input, fold.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups
        )
        if epilogue.supported(out, fold.bias):
            counts["folded"] += 1
            counts["bias and ReLU in one kernel" if relu else "bias in one kernel"] += 1
            return epilogue.add_(out, fold.bias, relu)
        out.add_(fold.bias.reshape(-1, 1, 1))
    else:
        out = torch.nn.functional.conv2d(
            input, fold.weight, fold.bias, conv.stride, conv.padding, conv.dilation, conv.groups
        )
    counts["folded"] += 1
    if relu:
        return out.relu_()  # the convolution's own new tensor: nothing else holds it
    return out if activation is None else activation(out)


def _channel_bias(input: torch.Tensor):
    """The module adding the bias (and ReLU) in one kernel where it runs (CUDA, with Triton), else None."""
    if not (FUSED_BIAS and input.is_cuda):
        return None
    try:
        from . import channel_bias
    except ImportError:  # no Triton: torch adds the bias
        return None
    return channel_bias


def _refusal(conv: torch.nn.Module, norm: torch.nn.Module, input: torch.Tensor) -> str | None:
    """Why the fold would not compute what the modules do, or None."""
    if _OFF:
        return "fallback: TRANSPILE_BACKEND=eager"
    if type(conv) is not torch.nn.Conv2d or type(norm) is not torch.nn.BatchNorm2d:
        return "fallback: not exactly nn.Conv2d and nn.BatchNorm2d"
    if norm.training or norm.running_mean is None or norm.running_var is None:
        return "fallback: the norm uses the batch's statistics (training, or no running statistics)"
    if not (_plain_module(conv) and _plain_module(norm)):
        return "fallback: hooks or a forward replaced on the instance"
    if conv.padding_mode != "zeros":
        return "fallback: a padding mode other than zeros"
    weight = conv.weight
    if not (
        type(input) in _PLAIN
        and input.dim() == 4
        and input.dtype in _FLOATS
        and type(weight) in _PLAIN
        and weight.dtype == input.dtype
        and (conv.bias is None or conv.bias.dtype == weight.dtype)
        and weight.device == input.device
        and input.shape[1] == conv.in_channels
        and norm.num_features == conv.out_channels
        and all(type(t) in _PLAIN and t.device == input.device for t in _norm_tensors(conv, norm) if t is not None)
    ):
        return "fallback: inputs the modules check themselves"  # they compute it, or raise their own error
    if torch.is_grad_enabled() and (
        input.requires_grad or any(t is not None and t.requires_grad for t in _norm_tensors(conv, norm))
    ):
        return "fallback: autograd needs the modules"
    return None


def _plain_module(module: torch.nn.Module) -> bool:
    """No hooks to run and no forward replaced on the instance (the `kernels` library does that)."""
    return not _hooked(module) and "forward" not in vars(module)


def _norm_tensors(conv: torch.nn.Module, norm: torch.nn.Module) -> tuple:
    return (conv.weight, conv.bias, norm.weight, norm.bias, norm.running_mean, norm.running_var)


def _fold(conv: torch.nn.Module, norm: torch.nn.Module, channels_last: bool) -> _Fold | None:
    """The folded weight and bias, made again when a tensor they come from changed; None: a change not watchable."""
    tensors = _norm_tensors(conv, norm)
    try:
        with torch._C.DisableTorchFunction():  # the cache's key: not a read of the memory (tapes.py watches those)
            key = tuple(None if t is None else (id(t), t.data_ptr(), t._version) for t in tensors)
    except RuntimeError:  # an inference tensor has no version counter
        return None
    key += (norm.eps, channels_last)
    kept = _FOLDS.get(conv)
    if kept is not None and kept[0] is norm and kept[1].key == key:
        return kept[1]
    weight, bias = folded(conv.weight, conv.bias, norm)
    if channels_last:
        weight = weight.contiguous(memory_format=torch.channels_last)
    fold = _Fold(key, tensors, weight, bias)
    _FOLDS[conv] = (norm, fold)
    return fold


def folded(
    weight: torch.Tensor, bias: torch.Tensor | None, norm: torch.nn.BatchNorm2d
) -> tuple[torch.Tensor, torch.Tensor]:
    """The weight and bias of the convolution that computes `norm(conv(x))` in eval, in the weight's dtype.

    Computed in float32 (float64 for a float64 weight) and rounded once: eager's batch norm of a half or bfloat16 tensor computes in
    float32 too, and a scale computed in bfloat16 (8 bits of mantissa) would be off by up to 2**-8 of
    every output channel before the weight's own rounding. The fold rounds each weight once instead.
    """
    wide = torch.promote_types(weight.dtype, torch.float32)  # float64 stays float64
    with torch.no_grad():
        scale = torch.rsqrt(norm.running_var.to(wide) + norm.eps)
        if norm.weight is not None:
            scale = scale * norm.weight.to(wide)
        mean = norm.running_mean.to(wide)
        shift = (-mean if bias is None else bias.to(wide) - mean) * scale
        if norm.bias is not None:
            shift = shift + norm.bias.to(wide)
        return (weight.to(wide) * scale.reshape(-1, 1, 1, 1)).to(weight.dtype), shift.to(weight.dtype)
