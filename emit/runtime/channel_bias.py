"""A per-channel bias added in place to a convolution's output, with the ReLU that may follow, in one pass.

`F.conv2d(x, w, bias)` on CUDA runs cuDNN's convolution and then adds the bias in a second kernel, a
broadcast add that torch does not vectorise, and a following ReLU is a third: on ResNet-50 (bf16, the
H100) those two passes over every feature map took longer than the convolutions' own epilogues could.
`add_(out, bias, relu)` does both in one read and one write of `out`, with eager's arithmetic: the
value and the bias widened to float32 (as torch's add computes half and bfloat16), rounded once to
the output's dtype, then the ReLU (which commutes with that rounding), NaN kept as torch's ReLU keeps it.

This file may import only torch and triton: it is copied into every output tree, and imported only
where a CUDA convolution needs it (or under `TRITON_INTERPRET=1`, for the tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_support import Launcher, rounded, widen

BLOCK = 1024
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


@triton.jit
def _add_channel_bias(out_ptr, bias_ptr, numel, channels, channel_stride, RELU: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < numel
    value = widen(tl.load(out_ptr + offsets, mask=inside))
    bias = widen(tl.load(bias_ptr + (offsets // channel_stride) % channels, mask=inside))
    value = rounded(value + bias, out_ptr.dtype.element_ty)  # eager rounds the sum (the interpreter too)
    if RELU:
        value = tl.where(value < 0, 0, value)  # NaN < 0 is false: NaN stays, as in torch.relu
    tl.store(out_ptr + offsets, value.to(out_ptr.dtype.element_ty), mask=inside)


def channel_stride(out: torch.Tensor) -> int | None:
    """The memory distance between two channels of a dense 4-D tensor (NCHW or channels_last), or None."""
    if out.dim() != 4:
        return None
    if out.is_contiguous():
        return out.shape[2] * out.shape[3]
    if out.is_contiguous(memory_format=torch.channels_last):
        return 1
    return None


def supported(out: torch.Tensor, bias: torch.Tensor) -> bool:
    """Whether `add_` computes `out + bias[:, None, None]` for these tensors (else the caller adds it)."""
    return (
        out.dtype in _DTYPES
        and bias.dtype == out.dtype
        and bias.dim() == 1
        and bias.is_contiguous()
        and out.dim() == 4
        and bias.shape[0] == out.shape[1]
        and bias.device == out.device
        and channel_stride(out) is not None
    )


# A launcher per geometry, as the generated kernels' plans keep theirs: it launches a binary built ahead of time
# where the tree has one (triton_artifacts.py), else the kernel Triton's JIT compiled on its first call. Bounded as
# the plans are: a server of ever new batch sizes must not grow it for ever.
_launchers: dict[tuple, Launcher] = {}
MAX_LAUNCHERS = 256


def add_(out: torch.Tensor, bias: torch.Tensor, relu: bool) -> torch.Tensor:
    """`out += bias[:, None, None]` (then `out.relu_()`), in place, for `supported` tensors; returns `out`."""
    numel = out.numel()
    if numel:
        tail = (numel, out.shape[1], channel_stride(out))
        # Everything the kernel is specialised on: dtypes, the 16-byte alignment of the data, the integers.
        key = (out.dtype, out.device, tail, relu, out.data_ptr() % 16, bias.data_ptr() % 16)
        launcher = _launchers.get(key)
        if launcher is None:
            if len(_launchers) >= MAX_LAUNCHERS:
                _launchers.clear()
            grid = (triton.cdiv(numel, BLOCK),)
            launcher = _launchers[key] = Launcher(_add_channel_bias, grid, tail, {"RELU": relu, "BLOCK": BLOCK}, 4)
        launcher((out, bias), (), ())
    return out
