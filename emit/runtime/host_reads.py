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
- A read of a value the recording proves fixed needs no wait: one the forward made from constants alone
  (transformers' packed-sequence check reads position ids made by `torch.arange`) through deterministic
  PyTorch ops, whose memory no code outside the dispatcher got by pointer (`data_ptr()`: a Triton
  launcher). It reads the same at every replay. Its check still runs, into a second flag, which the next
  replay looks at once the device has run this one: should code outside the dispatcher have written it
  all the same (a C++ extension handed the tensor directly), that replay raises, naming the broken
  assumption, instead of letting it pass unseen. On the H100 this keeps GPT-2's and LLaMA's calls from
  waiting on the device: 2.80 -> 2.45 ms and 2.89 -> 2.71 ms in bf16.

What a forward does with the value is unchanged: a branch takes the arm the warm-up took, a number reaches
the kernels the recording launched. Reads of other kinds (copies to the host, data-dependent shapes such as
`nonzero`) still wait on the device, and the recording fails as before.
"""

from __future__ import annotations

import math
import threading

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
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


_TELLING = [0]  # recordings under way in any thread: torch's function is put back when the last one ends
_TELLING_LOCK = threading.Lock()


def _tell(change: int) -> None:
    """Put `_capturing_as_told` in `torch.cuda.is_current_stream_capturing` while any thread records; other
    threads get the true answer from it."""
    with _TELLING_LOCK:
        _TELLING[0] += change
        torch.cuda.is_current_stream_capturing = _capturing_as_told if _TELLING[0] else _is_capturing


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

    A read of a value the recording proves fixed (`fixed_reads`: made in the forward from constants by
    deterministic PyTorch ops, `torch.arange(n) + 1`, never handed to code outside PyTorch's dispatcher by
    pointer) reads the same at every replay: its check goes into `fixed_flag`, which a replay looks at only
    at the next replay, after the device has run it: this call does not wait for it (the next one waits
    at most for this replay to end before it launches its own). Every other read
    (`checked_reads`) goes into `flag`, which a replay reads before handing its outputs out. Both flags are
    0-dim bool tensors made before the capture and cleared at its start."""

    def __init__(self, values: list, flag: torch.Tensor, fixed_flag: torch.Tensor) -> None:
        super().__init__()
        self.values = values
        self.flag = flag
        self.fixed_flag = fixed_flag
        self.checked_reads = 0
        self.fixed_reads = 0
        self.fixed: set[tuple] = set()  # the storages (device, address) of values proved fixed so far
        self._pointers = _Pointers(self.fixed)

    def __enter__(self):
        if self.values:
            self.flag.zero_()
            self.fixed_flag.zero_()
        _LOCAL.answering = True
        _tell(+1)
        self._pointers.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        _LOCAL.answering = False
        _tell(-1)
        self._pointers.__exit__(*exc)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensor = _read(func, args)
        if tensor is None:
            value = func(*args, **kwargs)
            with torch._C.DisableTorchFunction():  # reading storages here is not handing a pointer out
                self._follow(func, args, kwargs, value)
            return value
        answered = self.checked_reads + self.fixed_reads
        if answered >= len(self.values):
            raise Unanswered("a host read the warm-up call did not make")
        value = self.values[answered]
        with torch._C.DisableTorchFunction():
            fixed = _storage(tensor) in self.fixed
        if func is torch.ops.aten.is_nonzero.default:
            tensor = tensor != 0
        (self.fixed_flag if fixed else self.flag).logical_or_(_differs(tensor.reshape(()), value))
        if fixed:
            self.fixed_reads += 1
        else:
            self.checked_reads += 1
        return value

    def _follow(self, func, args, kwargs, value) -> None:
        """Mark what `func` wrote fixed where it computed it from fixed values alone, deterministically."""
        inputs = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        proved = (
            func not in _UNINITIALISED
            and not any(tag in func.tags for tag in _NONDETERMINISTIC)
            and all(_storage(t) in self.fixed for t in inputs)
        )
        written = [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]
        for index, spec in enumerate(func._schema.arguments):  # in place, and `out=`
            arg = args[index] if index < len(args) else kwargs.get(spec.name)
            if spec.alias_info is not None and spec.alias_info.is_write:
                written += [t for t in pytree.tree_leaves(arg) if isinstance(t, torch.Tensor)]
        for tensor in written:
            (self.fixed.add if proved else self.fixed.discard)(_storage(tensor))


# Allocations whose contents nothing computed: what a kernel outside the dispatcher (Triton) writes into.
_UNINITIALISED = frozenset(
    op
    for name in ("empty.memory_format", "empty_strided.default", "empty_like.default", "new_empty.default")
    for op in [getattr(getattr(torch.ops.aten, name.split(".")[0]), name.split(".")[1])]
)
_NONDETERMINISTIC = (torch.Tag.nondeterministic_seeded, torch.Tag.nondeterministic_bitwise)
# Tensor methods that hand a tensor's memory to code the dispatcher does not see (a Triton launcher).
POINTER_METHODS = {torch.Tensor.data_ptr, torch.Tensor.untyped_storage, torch.Tensor.storage}


def _storage(tensor: torch.Tensor) -> tuple:
    return (tensor.device.type, tensor.device.index, tensor.untyped_storage().data_ptr())


class _Pointers(TorchFunctionMode):
    """While recording: a tensor whose memory is handed out by pointer is no longer proved fixed."""

    def __init__(self, fixed: set) -> None:
        super().__init__()
        self.fixed = fixed

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in POINTER_METHODS and args and isinstance(args[0], torch.Tensor):
            with torch._C.DisableTorchFunction():
                self.fixed.discard(_storage(args[0]))
        return func(*args, **(kwargs or {}))


def _differs(tensor: torch.Tensor, value) -> torch.Tensor:
    """A 0-dim bool tensor: whether `tensor` would read as another value than `value` (NaN and -0.0 included)."""
    if isinstance(value, int):  # bool too
        return tensor != value
    if isinstance(value, float):
        if math.isnan(value):
            return tensor == tensor
        return (tensor != value) | (torch.signbit(tensor) != (math.copysign(1.0, value) < 0))
    raise Unanswered(f"a host read of a {type(value).__name__} value")
