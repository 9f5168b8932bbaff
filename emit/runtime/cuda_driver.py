"""The few CUDA driver calls that load a kernel binary built ahead of time and launch it, through ctypes.

Copied into every output tree inside `_transpile_runtime/`: imports only the standard library and torch. Triton
loads and launches its kernels through two C modules of its own (its driver's utilities and a launcher per kernel
signature) that it builds with the C compiler on first use, against the Python headers of the machine: a tree
built ahead of time must run where there is no compiler, so its binaries go through libcuda directly, as the
launcher Triton generates would (cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel).
"""

from __future__ import annotations

import ctypes
import functools

import torch

CUDA_SUCCESS = 0
# cuFuncSetAttribute's attribute: the dynamic shared memory a launch may ask for beyond the static 48 KiB.
MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
DEFAULT_SHARED_LIMIT = 48 * 1024

# The C type of each argument type of a Triton signature, as its launcher passes them (pointers are device
# addresses; a float scalar is passed at its own width).
ARGUMENT_TYPES = {
    "i1": ctypes.c_int8,
    "i8": ctypes.c_int8,
    "i16": ctypes.c_int16,
    "i32": ctypes.c_int32,
    "i64": ctypes.c_int64,
    "u1": ctypes.c_uint8,
    "u8": ctypes.c_uint8,
    "u16": ctypes.c_uint16,
    "u32": ctypes.c_uint32,
    "u64": ctypes.c_uint64,
    "fp32": ctypes.c_float,
    "f32": ctypes.c_float,
    "fp64": ctypes.c_double,
}


class DriverError(RuntimeError):
    """A CUDA driver call failed: the message names the call and the driver's error."""


@functools.lru_cache(maxsize=None)
def _library() -> ctypes.CDLL:
    library = ctypes.CDLL("libcuda.so.1")
    library.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    library.cuLaunchKernel.argtypes = [
        ctypes.c_void_p,  # CUfunction
        *[ctypes.c_uint] * 6,  # grid, then block dims
        ctypes.c_uint,  # dynamic shared memory
        ctypes.c_void_p,  # CUstream
        ctypes.POINTER(ctypes.c_void_p),  # kernelParams
        ctypes.c_void_p,  # extra
    ]
    library.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
    library.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]
    library.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    library.cuCtxGetCurrent.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    return library


def _check(name: str, status: int) -> None:
    if status != CUDA_SUCCESS:
        text = ctypes.c_char_p()
        _library().cuGetErrorName(status, ctypes.byref(text))
        raise DriverError(f"{name} failed: {(text.value or b'error %d' % status).decode()}")


class Function:
    """One kernel of a binary, loaded onto one device, and launched with arguments of the types `parameters`
    (Triton's names for them: "*bf16" for a pointer, "i32", "fp32") followed by Triton's two scratch pointers."""

    def __init__(self, binary: bytes, name: str, parameters: list[str], shared: int, num_warps: int, device) -> None:
        self.shared = shared
        self.block = 32 * num_warps
        library = _library()
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        with torch.cuda.device(device):
            torch.cuda.init()
            torch.cuda.current_stream(device)  # makes torch's context of the device current on this thread
            context = ctypes.c_void_p()
            _check("cuCtxGetCurrent", library.cuCtxGetCurrent(ctypes.byref(context)))
            if not context.value:
                raise DriverError(f"no CUDA context is current for {device}")
            _check("cuModuleLoadData", library.cuModuleLoadData(ctypes.byref(module), binary))
            _check("cuModuleGetFunction", library.cuModuleGetFunction(ctypes.byref(function), module, name.encode()))
            if shared > DEFAULT_SHARED_LIMIT:
                _check(
                    "cuFuncSetAttribute",
                    library.cuFuncSetAttribute(function, MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
                )
        self.module, self.function = module, function  # the module stays loaded for the process
        fields = [
            (f"a{i}", ctypes.c_uint64 if t.startswith("*") else ARGUMENT_TYPES[t]) for i, t in enumerate(parameters)
        ]
        fields += [("global_scratch", ctypes.c_uint64), ("profile_scratch", ctypes.c_uint64)]
        # One structure holds a launch's arguments; cuLaunchKernel takes a pointer to each.
        self._arguments = type("Arguments", (ctypes.Structure,), {"_fields_": fields})
        self._offsets = [getattr(self._arguments, field).offset for field, _ in fields]
        self._pointers = [t.startswith("*") for t in parameters]
        self._params = ctypes.c_void_p * len(fields)
        self._launch = library.cuLaunchKernel

    def __call__(self, grid: tuple[int, int, int], arguments, stream: int) -> None:
        """Launch on `stream` (a CUDA stream's handle) with `arguments` in the kernel's order: tensors for
        pointers, numbers for the rest."""
        values = [a.data_ptr() if pointer else a for a, pointer in zip(arguments, self._pointers, strict=True)]
        packed = self._arguments(*values, 0, 0)
        base = ctypes.addressof(packed)
        params = self._params(*[base + offset for offset in self._offsets])
        _check(
            "cuLaunchKernel",
            self._launch(self.function, *grid, self.block, 1, 1, self.shared, stream, params, None),
        )
