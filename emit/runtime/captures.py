"""Kernel calls saved as a run makes them, for `transpile verify OUT --calls DIR` to check each kernel on the
inputs a model really gives it (its own example inputs, a family's test inputs) beside the drawn ones.

Copied into every output tree inside `_transpile_runtime/`: imports only torch and the standard library. With
`TRANSPILE_CAPTURE_CALLS=DIR` (read at import), a kernel's first call of each signature (shapes, strides, dtypes,
devices, scalars), up to `PER_KERNEL` of them, is saved to `DIR/<kernel file>.<kernel>.<pid>-<n>.pt`: the kernel
file (relative to the tree), the kernel's name and its arguments, tensors copied to the CPU (dense tensors keep
their strides, others become contiguous). Activation modules are saved as objects, so loading a capture imports
their classes: read captures you made.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import torch

from .artifacts import ROOT

DIRECTORY = os.environ.get("TRANSPILE_CAPTURE_CALLS") or None
PER_KERNEL = 8

_seen: dict[int, set] = {}
_lock = threading.Lock()


def save(kernel, key: tuple, args: tuple) -> None:
    """Save this call of `kernel` (whose call signature is `key`) unless one of its signature, or PER_KERNEL
    calls, were saved already."""
    with _lock:
        seen = _seen.setdefault(id(kernel), set())
        if key in seen or len(seen) >= PER_KERNEL:
            return
        seen.add(key)
        number = len(seen)
    file = Path(kernel.reference.__code__.co_filename).resolve()
    try:
        relative = file.relative_to(ROOT.resolve()).as_posix()
    except ValueError:
        relative = file.name
    record = {
        "file": relative,
        "kernel": kernel.name,
        "tensor_inputs": kernel.tensor_inputs,
        "args": [a.detach().to("cpu", copy=True) if isinstance(a, torch.Tensor) else a for a in args],
    }
    directory = Path(DIRECTORY)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{file.stem}.{kernel.name}.{os.getpid()}-{number}.pt"
    temporary = path.with_name(f".{path.name}.tmp")
    torch.save(record, temporary)
    os.replace(temporary, path)  # a reader never sees half a file
