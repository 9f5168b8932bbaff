"""Triton kernels built ahead of time (`transpile precompile --targets sm_90`): what identifies a launch's binary,
and finding, checking and loading it at run time.

Copied into every output tree inside `_transpile_runtime/`: imports torch, triton and the standard library.

Triton compiles a kernel per *specialisation* of its arguments: the dtype of each pointer and whether it is
16-byte aligned, each integer's width and whether it is 1 (then a constant) or a multiple of 16, and the
constexprs. A launch is first *described* by what decides that (`describe`: dtypes, alignment, integer values,
constexprs, warps), which no device is needed for; Triton's own binder turns a description into the
specialisation for a CUDA capability (`specialize`), on the machine that precompiles as on the one that runs, so
the binary found for a launch is the one Triton's JIT would have compiled for it. Descriptions come from runs:
`TRANSPILE_RECORD_SIGNATURES=FILE` appends each new one to FILE (on a GPU, or on the CPU under
`TRITON_INTERPRET=1`), and `transpile precompile --signatures FILE` builds them.

The tree's `transpile-artifacts.json` (artifacts.py) has a "triton" section, per kernel file:

    "triton": {"models/_net_triton.py": {"source_sha256": ..., "binaries": {KEY: {
        "kernel": "fused_add_kernel", "target": "sm_90", "path": "models/_net_triton.sm_90/fused_add_kernel-KEY.cubin",
        "sha256": ..., "name": ..., "shared": 0, "num_warps": 4, "parameters": ["*bf16", "i32", ...]}}}},
    "triton_version": "3.6.0", "triton_support_sha256": ...

A binary is used only where the kernel file and triton_support.py (whose helpers the kernels inline) are the bytes
it was built from, Triton is the version that built it, and its own bytes match; it is then loaded and launched
through the CUDA driver (cuda_driver.py), with no compiler run. Otherwise the launch compiles as without
artifacts, and the runtime says why once per kernel file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import warnings
from pathlib import Path
from typing import NamedTuple

import triton
import triton.language as tl

import torch

from .artifacts import ROOT, read_manifest, sha256

RECORD = "TRANSPILE_RECORD_SIGNATURES"
SUPPORT = Path(__file__).with_name("triton_support.py")
# Compile options for eager's float semantics on NVIDIA GPUs (triton_support._options says why).
CUDA_OPTIONS = {"enable_reflect_ftz": False, "enable_fp_fusion": False}


class Variant(NamedTuple):
    """A launch's specialisation, as `triton.compile` takes it (ASTSource's signature, constexprs and attrs),
    with the compile options."""

    signature: dict
    constexprs: dict
    attrs: dict
    options: dict

    def parameters(self) -> list[tuple[int, str]]:
        """(position, Triton type) of each argument the binary takes: the constexprs are compiled in."""
        return [(i, kind) for i, kind in enumerate(self.signature.values()) if kind != "constexpr"]


# -- descriptions -------------------------------------------------------------------------------------------
def describe(kernel, arguments, constexprs: dict, num_warps: int) -> dict:
    """What decides the binary of a launch of `kernel` with positional `arguments` (tensors, or dtypes standing
    for fresh outputs, which are aligned; numbers), its `constexprs` and `num_warps`: JSON, the same on any device."""
    described = []
    for argument in arguments:
        if isinstance(argument, torch.dtype):
            described.append({"tensor": _dtype_name(argument), "aligned": True})
        elif isinstance(argument, torch.Tensor):
            described.append({"tensor": _dtype_name(argument.dtype), "aligned": argument.data_ptr() % 16 == 0})
        elif isinstance(argument, bool):
            described.append({"bool": argument})
        elif isinstance(argument, int):
            described.append({"int": argument})
        elif isinstance(argument, float):
            described.append({"float": True})  # never specialised on: its value does not matter
        elif argument is None:
            described.append({"none": True})
        else:
            raise TypeError(f"cannot describe an argument of type {type(argument).__name__}")
    function = getattr(kernel, "fn", None)
    if function is None:
        raise TypeError(f"{kernel!r} is not a Triton kernel")
    constants = {}
    for name, value in constexprs.items():
        constants[name] = {"dtype": str(value)} if isinstance(value, tl.dtype) else value
    path = Path(function.__code__.co_filename)
    return {
        "file": _relative(path) or path.name,
        "kernel": function.__name__,
        "arguments": described,
        "constexprs": constants,
        "num_warps": num_warps,
    }


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _relative(path: Path, root: Path = ROOT) -> str | None:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None


class _StandIn:
    """A tensor as Triton's binder sees it: a dtype and an address, aligned or not."""

    def __init__(self, dtype: torch.dtype, aligned: bool) -> None:
        self.dtype = dtype
        self._address = 1024 if aligned else 1026

    def data_ptr(self) -> int:
        return self._address


def _argument(described: dict):
    if "tensor" in described:
        return _StandIn(getattr(torch, described["tensor"]), described["aligned"])
    if "bool" in described:
        return bool(described["bool"])
    if "int" in described:
        return int(described["int"])
    if "none" in described:
        return None
    return 0.5


def _constant(value):
    return tl.dtype(value["dtype"]) if isinstance(value, dict) else value


# -- specialisations ----------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _binder(kernel, capability: int):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", capability, 32))
    return backend, create_function_from_signature(kernel.signature, kernel.params, backend)


def specialize(kernel, description: dict, capability: int) -> Variant:
    """The specialisation Triton's JIT compiles for a launch `description`d on a GPU of `capability` (90: sm_90),
    from Triton's own binder, as `JITFunction.run` computes it."""
    backend, binder = _binder(kernel, capability)
    arguments = [_argument(a) for a in description["arguments"]]
    keywords = {
        **{name: _constant(value) for name, value in description["constexprs"].items()},
        "num_warps": description["num_warps"],
        **CUDA_OPTIONS,
    }
    bound, specialization, options = binder(*arguments, **keywords)
    options, signature, constexprs, attrs = kernel._pack_args(backend, keywords, bound, specialization, options)
    return Variant(signature, constexprs, attrs, options.__dict__)


def key(kernel_name: str, variant: Variant, capability: int) -> str:
    """A binary's name in the manifest: the hash of what it was compiled from, machine paths left out (Triton's
    own cache key hashes its installed files and libdevice's path, which differ between machines)."""
    options = {k: variant.options.get(k) for k in ("num_warps", "num_stages", "num_ctas", *CUDA_OPTIONS)}
    payload = [
        kernel_name,
        capability,
        list(variant.signature.items()),
        sorted((str(k), repr(v)) for k, v in variant.constexprs.items()),
        sorted((str(k), repr(v)) for k, v in variant.attrs.items()),
        sorted(options.items()),
    ]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:32]


# -- at run time --------------------------------------------------------------------------------------------
_recorded: set[str] = set()
_warned: set[tuple[str, str]] = set()
_loaded: dict[tuple[str, int], object] = {}
_lock = threading.Lock()


def record(description: dict) -> None:
    """Append `description` to $TRANSPILE_RECORD_SIGNATURES, once per process."""
    path = os.environ.get(RECORD)
    if not path:
        return
    line = json.dumps(description, sort_keys=True)
    with _lock:
        if line in _recorded:
            return
        _recorded.add(line)
        with open(path, "a", encoding="utf-8") as file:
            file.write(line + "\n")


def binary(kernel, arguments, constexprs: dict, num_warps: int, device: torch.device):
    """The binary built ahead of time for this launch (see `describe`), loaded onto `device` as a
    `cuda_driver.Function` with its argument positions; or None, after a warning where the tree has Triton
    binaries but none can serve this launch. Records the launch where $TRANSPILE_RECORD_SIGNATURES asks."""
    try:
        description = describe(kernel, arguments, constexprs, num_warps)
    except TypeError:  # an argument or a kernel Triton's binder would not take either: the JIT says what is wrong
        return None
    record(description)
    if device.type != "cuda" or torch.version.hip or os.environ.get("TRANSPILE_ARTIFACTS") == "0":
        return None
    found = _find(kernel, description, device)
    if isinstance(found, str):
        if (description["file"], found) not in _warned:
            _warned.add((description["file"], found))
            warnings.warn(f"{found}: compiling it here", RuntimeWarning, stacklevel=2)
        return None
    return found


def _find(kernel, description: dict, device: torch.device):
    manifest = read_manifest(ROOT)
    if not isinstance(manifest, dict):
        return manifest  # None (no artifacts) or why the manifest cannot be read
    section = manifest.get("triton")
    if not section:
        return None  # precompiled for CPUs only
    file = description["file"]
    entry = section.get(file)
    if not isinstance(entry, dict):
        return f"no Triton binary was built ahead of time for {file}"
    if manifest.get("triton_version") != triton.__version__:
        return (
            f"the Triton binaries were built by Triton {manifest.get('triton_version')}, this is {triton.__version__}"
        )
    stale = _stale(file, entry.get("source_sha256"), manifest.get("triton_support_sha256"))
    if stale:
        return stale
    major, minor = torch.cuda.get_device_capability(device)
    capability = major * 10 + minor
    try:
        variant = specialize(kernel, description, capability)
    except Exception as error:  # a Triton whose binder differs: the launch compiles as it would without artifacts
        return f"cannot specialise {description['kernel']} for sm_{capability} ({type(error).__name__}: {error})"
    name = key(description["kernel"], variant, capability)
    found = entry.get("binaries", {}).get(name)
    if not isinstance(found, dict):
        return (
            f"{file}: no sm_{capability} binary of {description['kernel']} for this call signature"
            f" (the signatures precompiled did not include it)"
        )
    return _load(found, variant, device)


@functools.lru_cache(maxsize=None)
def _stale(file: str, source_sha256: str | None, support_sha256: str | None) -> str | None:
    """Why the kernel file or the runtime's helpers are not the bytes the binaries were built from; read once per
    process (as the manifest is)."""
    try:
        if sha256(ROOT / file) != source_sha256:
            return f"{file} changed since its Triton binaries were built"
        if sha256(SUPPORT) != support_sha256:
            return "the runtime's triton_support.py changed since the Triton binaries were built"
    except OSError as error:
        return f"cannot read {file} or the runtime ({error.strerror or error})"
    return None


def _load(found: dict, variant: Variant, device: torch.device):
    from .cuda_driver import DriverError, Function

    path = (ROOT / found.get("path", "")).resolve()
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _lock:
        if (str(path), index) in _loaded:
            return _loaded[str(path), index]
        if not path.is_relative_to(ROOT.resolve()) or not path.is_file():
            return f"the Triton binary {found.get('path')} is missing"
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != found.get("sha256"):
            return f"the Triton binary {found.get('path')} does not match its recorded SHA-256"
        parameters = variant.parameters()
        if [kind for _, kind in parameters] != found.get("parameters"):
            return f"the Triton binary {found.get('path')} takes other arguments than this launch"
        if found.get("scratch"):
            return f"the Triton binary {found.get('path')} needs scratch memory, which only Triton's launcher allocates"
        try:
            function = Function(
                data,
                found["name"],
                found["parameters"],
                found["shared"],
                found["num_warps"],
                torch.device("cuda", index),
            )
        except (DriverError, OSError, KeyError) as error:
            return f"the Triton binary {found.get('path')} does not load ({error})"
        _loaded[str(path), index] = (function, [position for position, _ in parameters])
        return _loaded[str(path), index]
