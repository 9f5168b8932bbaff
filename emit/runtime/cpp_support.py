"""Build, cache and call the generated C++ kernels of a module (CPU tensors).

Copied into every output tree inside `_transpile_runtime/`: imports only the standard
library and torch. A kernel file is built once per content hash (source, header,
compiler, flags, CPU) into a shared library in a per-user cache directory, written
atomically so that concurrent processes are safe, and loaded with ctypes. Without a
C++ compiler the library is None and every kernel takes its eager fallback.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
HEADER = HERE / "transpile_runtime.h"
# No -ffast-math: kernels must keep NaN, infinities and signed zeros exactly as torch does.
# -fno-math-errno changes no value: it lets loops that call libm functions vectorise.
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-shared", "-fPIC", "-std=c++17")
NO_COMPILER = "no C++ compiler: using the eager fallback"

# The dtype model of the generated kernels (emit/cpp.py): one floating storage dtype per call, and bools.
ENTRY_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


class CppBuildError(RuntimeError):
    """The compiler rejected a generated kernel file: a bug in transpile, reported with the compiler's message."""


@dataclass(frozen=True)
class Compiler:
    command: tuple[str, ...]
    version: str  # the first line of `--version`, part of the cache key


def find_compiler() -> Compiler | None:
    """The compiler named by `CXX`, else `c++` or `g++` on PATH; None when there is none that runs."""
    requested = os.environ.get("CXX")
    command = shlex.split(requested) if requested else [shutil.which("c++") or shutil.which("g++") or "c++"]
    try:
        result = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    return Compiler(tuple(command), result.stdout.splitlines()[0] if result.stdout else "")


def cache_directory() -> Path:
    """`TRANSPILE_CACHE_DIR`, else `$XDG_CACHE_HOME/transpile/cpp`, else `~/.cache/transpile/cpp`."""
    if os.environ.get("TRANSPILE_CACHE_DIR"):
        return Path(os.environ["TRANSPILE_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "transpile" / "cpp"


def cpu_identity() -> str:
    """What -march=native compiles for: the CPU model and its feature flags."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    wanted = ("model name", "flags", "Features", "CPU part")  # x86 names, then ARM's
    return "\n".join(sorted({line for line in cpuinfo if line.split(":")[0].strip() in wanted}))


def build(source: Path, compiler: Compiler) -> tuple[Path, bool]:
    """The shared library of `source` and whether it came from the cache; raises CppBuildError."""
    text = source.read_text()
    key = hashlib.sha256(
        "\0".join(
            (text, HEADER.read_text(), compiler.version, " ".join(compiler.command), *FLAGS, cpu_identity())
        ).encode()
    ).hexdigest()[:32]
    directory = cache_directory()
    library = directory / f"{source.stem}-{key}.so"
    if library.exists():
        return library, True
    directory.mkdir(parents=True, exist_ok=True)
    # Compile into a private temporary file, then rename: a concurrent process sees either no
    # library or a complete one, never a half-written file.
    handle, temporary = tempfile.mkstemp(prefix=f".{library.stem}-", suffix=".so", dir=directory)
    os.close(handle)
    try:
        command = [*compiler.command, *FLAGS, f"-I{HERE}", str(source), "-o", temporary]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise CppBuildError(f"{shlex.join(command)} failed:\n{result.stderr}")
        os.replace(temporary, library)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return library, False


def unsupported(tensor_dtypes: Sequence[torch.dtype], output_dtypes: Sequence[torch.dtype]) -> str | None:
    """Why the C++ kernels cannot take these dtypes, or None: one floating dtype per call, plus bools."""
    dtypes = [*tensor_dtypes, *output_dtypes]
    other = sorted({str(d).removeprefix("torch.") for d in dtypes if d not in ENTRY_DTYPES and d != torch.bool})
    if other:
        return f"C++ kernels take floating and bool tensors, not {', '.join(other)}"
    floating = sorted({str(d).removeprefix("torch.") for d in dtypes if d in ENTRY_DTYPES})
    if len(floating) > 1:
        return f"C++ kernels take one floating dtype per call, not {', '.join(floating)}"
    return None


@dataclass(frozen=True)
class Kinds:
    """Which tensor inputs and outputs of a kernel are stored as bool (the rest in the call's floating dtype)."""

    inputs: tuple[bool, ...]
    outputs: tuple[bool, ...]

    @classmethod
    def parse(cls, text: str) -> Kinds:
        """From the string each kernel file exports: `x:T mask:bool -> y:T`."""
        inputs, _, outputs = text.partition("->")
        return cls(*(tuple(item.endswith(":bool") for item in side.split()) for side in (inputs, outputs)))


class CppLibrary:
    """The built kernels of one generated `.cpp` file."""

    _loaded: dict[Path, CppLibrary | None] = {}  # one build per file and process
    _lock = threading.Lock()

    def __init__(self, path: Path, cache_hit: bool) -> None:
        self.path = path  # the shared library
        self.cache_hit = cache_hit  # False: this process compiled it
        self._library = ctypes.CDLL(str(path))
        self._kinds: dict[str, Kinds] = {}

    @classmethod
    def for_file(cls, source: Path) -> CppLibrary | None:
        """The library of a kernel file, built on first use; None (with a warning) without a compiler."""
        source = Path(source).resolve()
        with cls._lock:
            if source not in cls._loaded:
                cls._loaded[source] = cls.load(source)
            return cls._loaded[source]

    @classmethod
    def load(cls, source: Path) -> CppLibrary | None:
        """Build (or find in the cache) and load `source`; None, with a one-line warning, without a compiler."""
        compiler = find_compiler()
        if compiler is None:
            warnings.warn(NO_COMPILER, RuntimeWarning, stacklevel=2)
            return None
        return cls(*build(Path(source), compiler))

    def kinds(self, entry: str) -> Kinds:
        if entry not in self._kinds:
            exported = ctypes.c_char.in_dll(self._library, f"{entry}_kinds")  # a C string: read up to its NUL
            self._kinds[entry] = Kinds.parse(ctypes.string_at(ctypes.addressof(exported)).decode())
        return self._kinds[entry]

    def call(self, entry: str, tensors, scalars, outputs, n_elements, sizes, strides, contiguous) -> None:
        """Run kernel `entry` (a region name) once: see `launcher` and `pointwise_layout`."""
        dtypes = [t.dtype for t in (*tensors, *outputs)]
        layout = pointwise_layout(n_elements, sizes, strides, contiguous)
        self.launcher(entry, dtypes, layout)(tensors, scalars, outputs)

    def call_rows(self, entry: str, tensors, scalars, outputs, n_rows, row_size, outer_sizes, strides, contiguous) -> None:
        """Run the row kernel `entry` once: see `launcher` and `rows_layout`."""
        dtypes = [t.dtype for t in (*tensors, *outputs)]
        layout = rows_layout(n_rows, row_size, outer_sizes, strides, contiguous)
        self.launcher(entry, dtypes, layout)(tensors, scalars, outputs)

    def launcher(self, entry: str, dtypes: Sequence[torch.dtype], layout: tuple) -> Callable[..., None]:
        """Kernel `entry` (a region name) as `launch(tensors, scalars, outputs)`, for tensors of `dtypes`.

        `dtypes` are the tensor inputs' and then the outputs' (which `unsupported` accepted);
        `layout` the C arguments after the data, from `pointwise_layout` or `rows_layout`.
        The entry point is the one of the call's floating dtype. A tensor whose dtype
        disagrees with the kernel's kinds (a bool tensor the IR reads as a number, a
        number it reads as a bool, a bool result of numbers) is converted at the
        boundary, as torch would promote it.
        """
        floating = next((dtype for dtype in dtypes if dtype in ENTRY_DTYPES), torch.float32)
        kinds = self.kinds(entry)
        input_dtypes = [torch.bool if is_bool else floating for is_bool in kinds.inputs]
        output_dtypes = [torch.bool if is_bool else floating for is_bool in kinds.outputs]
        function = getattr(self._library, f"{entry}_{str(floating).removeprefix('torch.')}")
        set_threads = self._library.omp_set_num_threads

        def launch(tensors, scalars, outputs) -> None:
            inputs = [_conform(t, dtype) for t, dtype in zip(tensors, input_dtypes)]
            # Outputs of another dtype get a staging tensor, copied (and so converted) afterwards.
            staged = [
                o if o.dtype == dtype else torch.empty_like(o, dtype=dtype) for o, dtype in zip(outputs, output_dtypes)
            ]
            set_threads(torch.get_num_threads())  # a fair comparison with eager: the same threads
            function(
                *(ctypes.c_void_p(t.data_ptr()) for t in inputs),
                *(ctypes.c_double(float(s)) for s in scalars),
                *(ctypes.c_void_p(o.data_ptr()) for o in staged),
                *layout,
            )
            for output, result in zip(outputs, staged):
                if result is not output:
                    output.copy_(result)

        return launch


def pointwise_layout(n_elements: int, sizes: Sequence[int], strides: Sequence[Sequence[int]], contiguous: bool) -> tuple:
    """A pointwise kernel's arguments after the data: `strides` holds 4 element strides per
    tensor input (ignored when `contiguous`)."""
    return (
        ctypes.c_int64(n_elements),
        (ctypes.c_int64 * 4)(*sizes) if sizes else None,
        _stride_array(strides, contiguous),
        ctypes.c_int(bool(contiguous)),
    )


def rows_layout(n_rows: int, row_size: int, outer_sizes: Sequence[int], strides, contiguous: bool) -> tuple:
    """A row kernel's arguments after the data, for `n_rows` rows of `row_size` columns.

    `outer_sizes` holds the 3 row dims; `strides` 4 element strides (3 row dims, then the
    reduced dim) per ELEMENT tensor: the tensor inputs, then the element outputs (ignored
    when `contiguous`). Outputs with one value per row are contiguous.
    """
    return (
        ctypes.c_int64(n_rows),
        ctypes.c_int64(row_size),
        (ctypes.c_int64 * 3)(*outer_sizes),
        _stride_array(strides, contiguous),
        ctypes.c_int(bool(contiguous)),
    )


def _stride_array(strides: Sequence[Sequence[int]], contiguous: bool):
    """The strides, tensor after tensor, as a C array; NULL on the contiguous path, where kernels never read them."""
    flat = [stride for per_tensor in strides for stride in per_tensor]
    return (ctypes.c_int64 * len(flat))(*flat) if flat and not contiguous else None


def _conform(tensor: torch.Tensor, wanted: torch.dtype) -> torch.Tensor:
    """`tensor` in the dtype the kernel reads it in, with the same strides; the same tensor when it already is."""
    if tensor.dtype == wanted:
        return tensor
    # Convert all the memory the tensor spans, so that the strides the runtime computed
    # (broadcast and sliced layouts included) still address the converted copy.
    extent = (
        1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride())) if tensor.numel() else 0
    )
    return tensor.as_strided((extent,), (1,)).to(wanted).as_strided(tensor.shape, tensor.stride())
