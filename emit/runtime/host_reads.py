"""Host reads while a forward is recorded as a CUDA graph: answered from the warm-up, checked at each replay.

A forward that reads a tensor's value on the host (`bool(mask.all())`, `.item()`) cannot be recorded as
it runs: the read waits on the device, which a capture forbids. Libraries know this and take another path
while a capture is under way. transformers asks `torch.cuda.is_current_stream_capturing()` and then keeps
the attention mask it would drop after reading it (no padding, no packed sequences), which sends SDPA to
its masked kernel: on the H100, GPT-2's attention took 0.41 ms of a forward instead of 0.22. The graph is
right, and slower than the forward it stands for.

So the recording replays the eager forward's decisions instead:

- The warm-up call (the same inputs, on the side stream, not captured) runs under `Noting`, which keeps
  the value of every scalar read of a CUDA tensor, in order.
- The recording runs under `Answering`: `torch.cuda.is_current_stream_capturing()` says no in this thread
  (libraries take their eager path), and each scalar read of a CUDA tensor is answered, in order, with the
  value the warm-up read. The graph gets, in place of the read, kernels that compare the tensor with that
  value into one flag.
- A replay reads the flag (one wait on the device per call, where the source's forward waited once per
  read). Where any read would have differed, the call's outputs are not used: it runs the original forward,
  and the signature runs it from then on.

What a forward does with the value is unchanged: a branch takes the arm the warm-up took, a number reaches
the kernels the recording launched. Reads of other kinds (copies to the host, data-dependent shapes such as
`nonzero`) still wait on the device, and the recording fails as before.
"""

from __future__ import annotations

import math
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# The ops through which a tensor's value reaches Python as a number: `.item()`, `bool(t)`, `int(t)`, `float(t)`.
_READS = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default, torch.ops.aten.is_nonzero.default)

_LOCAL = threading.local()
_is_capturing = torch.cuda.is_current_stream_capturing


def capturing() -> bool:
    """Whether this thread's current CUDA stream is being captured (the truth, also while `Answering`)."""
    return _is_capturing()


def _capturing_as_told() -> bool:
    return False if getattr(_LOCAL, "answering", False) else _is_capturing()


class Unanswered(Exception):
    """The recording made a host read the warm-up did not make, or one no comparison can check."""


def _read(func, args) -> torch.Tensor | None:
    """The CUDA tensor whose value `func(*args)` reads on the host, or None."""
    if func in _READS and isinstance(args[0], torch.Tensor) and args[0].is_cuda:
        return args[0]
    return None


class Noting(TorchDispatchMode):
    """The warm-up: runs every op, and keeps the value of each host read of a CUDA tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.values: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        value = func(*args, **(kwargs or {}))
        if _read(func, args) is not None:
            self.values.append(value)
        return value


class Answering(TorchDispatchMode):
    """The recording: each host read of a CUDA tensor returns the warm-up's value and records its check.

    `flag` (a 0-dim bool tensor made before the capture) is cleared at the start of the recording and set by
    every read whose tensor holds another value than the warm-up read."""

    def __init__(self, values: list, flag: torch.Tensor) -> None:
        super().__init__()
        self.values = values
        self.flag = flag
        self.answered = 0

    def __enter__(self):
        if self.values:
            self.flag.zero_()
        _LOCAL.answering = True
        torch.cuda.is_current_stream_capturing = _capturing_as_told
        return super().__enter__()

    def __exit__(self, *exc):
        _LOCAL.answering = False
        torch.cuda.is_current_stream_capturing = _is_capturing
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensor = _read(func, args)
        if tensor is None:
            return func(*args, **(kwargs or {}))
        if self.answered >= len(self.values):
            raise Unanswered("a host read the warm-up call did not make")
        value = self.values[self.answered]
        self.answered += 1
        if func is torch.ops.aten.is_nonzero.default:
            tensor = tensor != 0
        self.flag.logical_or_(_differs(tensor.reshape(()), value))
        return value


def _differs(tensor: torch.Tensor, value) -> torch.Tensor:
    """A 0-dim bool tensor: whether `tensor` would read as another value than `value` (NaN and -0.0 included)."""
    if isinstance(value, bool) or isinstance(value, int):
        return tensor != value
    if isinstance(value, float):
        if math.isnan(value):
            return tensor == tensor
        return (tensor != value) | (torch.signbit(tensor) != (math.copysign(1.0, value) < 0))
    raise Unanswered(f"a host read of a {type(value).__name__} value")
