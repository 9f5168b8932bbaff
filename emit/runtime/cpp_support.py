"""Build, cache and call the generated C++ kernels of a module (CPU tensors).

Copied into every output tree inside `_transpile_runtime/`: imports only the standard
library and torch. A kernel file is built once per content hash (source, header,
compiler, flags, CPU) into a shared library, loaded with ctypes. Without a C++
compiler the library is None and every kernel takes its eager fallback.

The cache trusts nothing it did not write (docs/compiler.md, "The C++ build cache"): its
directory must be this user's and writable by no one else (created 0700); each library
has a record of its SHA-256, written atomically beside it, and is loaded only when its
bytes match (otherwise it is built again, so a planted, corrupt or truncated file is
never loaded); a compile error is recorded too, so that no process builds the same
file again. Any error of the cache makes the kernels fall back, with a warning.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from . import abi, artifacts

HERE = Path(__file__).resolve().parent
HEADER = HERE / "transpile_runtime.h"
# No -ffast-math: kernels must keep NaN, infinities and signed zeros exactly as torch does.
# -fno-math-errno changes no value: it lets loops that call libm functions vectorise.
# -fwrapv: integer values wrap on overflow as torch's do (emit/cpp/kernels.py computes them in their own types).
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fwrapv", "-shared", "-fPIC", "-std=c++17")
# Where the CPU has AVX512-FP16, gcc 12 emits masked `vmovsh` for half values, which binutils 2.40 cannot
# assemble (the build failed): such builds do without those instructions (the kernels convert halves with
# F16C, as without AVX512-FP16).
NO_FP16_INSTRUCTIONS = "-mno-avx512fp16"
# Where the CPU has AVX-512, gcc's tuning still prefers 256-bit vectors (older parts slowed their clock for
# 512-bit code); torch's own CPU kernels use 512-bit ones there, and so do these: libmvec's 16-wide functions
# made SwiGLU's gate (silu, 180K elements, 2 threads) 42 -> 33 us.
WIDE_VECTORS = "-mprefer-vector-width=512"
# The options added per CPU feature (a flag of /proc/cpuinfo), where the compiler knows them.
CPU_OPTIONS = (("avx512_fp16", NO_FP16_INSTRUCTIONS), ("avx512f", WIDE_VECTORS))
# The x86-64 levels of the psABI a library can be built for ahead of time (`transpile precompile`), lowest first,
# each with the /proc/cpuinfo flags a CPU needs to run its code (its own and the lower levels'; `abm` is LZCNT).
CPU_LEVELS: dict[str, frozenset[str]] = {
    "x86-64-v2": frozenset({"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"})
}
CPU_LEVELS["x86-64-v3"] = CPU_LEVELS["x86-64-v2"] | {
    "avx",
    "avx2",
    "bmi1",
    "bmi2",
    "f16c",
    "fma",
    "abm",
    "movbe",
    "xsave",
}
CPU_LEVELS["x86-64-v4"] = CPU_LEVELS["x86-64-v3"] | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
NO_COMPILER = "no C++ compiler: using the eager fallback"
# Temporaries of a build start with this; one older than STALE_S was left by a process that
# died mid-build (a build takes seconds, up to minutes on a loaded machine).
TEMPORARY = ".tmp-"
STALE_S = 3600.0
# A compiler error located in a file (`k.cpp:12:3: error:`, gcc and clang): the code is wrong, and
# building it again would fail the same way, unlike a killed compiler or a full disk.
LOCATED_ERROR = re.compile(r":\d+:\d+: (fatal )?error")

# The dtype model of the generated kernels (emit/cpp/kernels.py): type parameters, each the dtype of a class of
# values, bound per call (`bind`); each kernel's entry points instantiate them for these input dtypes.
ENTRY_DTYPES = tuple(getattr(torch, name) for name in abi.ENTRY_DTYPES)
# The element types a type parameter can stand for, as C++ names them outside namespace transpile.
CPP_TYPES = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "transpile::half",
    torch.bfloat16: "transpile::bfloat16",
    torch.bool: "bool",
    torch.uint8: "uint8_t",
    torch.int8: "int8_t",
    torch.int16: "int16_t",
    torch.int32: "int32_t",
    torch.int64: "int64_t",
}


class CppBuildError(RuntimeError):
    """The compiler rejected a generated kernel file: a bug in transpile, reported with the compiler's message."""


class CacheError(RuntimeError):
    """The cache directory cannot be trusted or written: the message says why."""


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


@functools.lru_cache(maxsize=None)
def flags(compiler: Compiler, level: str | None = None) -> tuple[str, ...]:
    """The build's flags: FLAGS, and each of CPU_OPTIONS whose feature the CPU has and which the compiler
    knows (one probe per option and process). For a `level` of CPU_LEVELS (a library built ahead of time,
    for other machines), its `-march` instead of `-march=native`, and the options of the features it has."""
    if level is None:
        features = cpu_features()
        march = ()
    else:
        features, march = CPU_LEVELS[level], (f"-march={level}",)
    base = tuple(flag for flag in FLAGS if not (march and flag == "-march=native")) + march
    return base + tuple(option for feature, option in CPU_OPTIONS if feature in features and _knows(compiler, option))


def cpu_features() -> frozenset[str]:
    """This CPU's feature flags, as /proc/cpuinfo names them."""
    return frozenset(" ".join(line.split(":", 1)[-1] for line in cpu_identity().splitlines()).split())


def _knows(compiler: Compiler, option: str) -> bool:
    try:
        probe = subprocess.run(
            [*compiler.command, option, "-x", "c++", "-fsyntax-only", "-"],
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


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


def private_directory(path: Path) -> Path:
    """`path`, created with its missing parents (mode 0700) if needed; CacheError unless it is a
    directory of this user that no one else can write, as a library loaded from it runs as us.

    transpiler/lint/engine.py checks the lint cache the same way (the runtime imports no transpile code).
    """
    missing = []
    for directory in (path, *path.parents):
        if os.path.lexists(directory):
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:  # made by a concurrent process: checked below like any other
            pass
        except OSError as error:
            raise CacheError(f"cannot create {directory}: {error.strerror or error}") from error
    try:
        status = os.stat(path)
    except OSError as error:
        raise CacheError(f"cannot use {path}: {error.strerror or error}") from error
    if not stat.S_ISDIR(status.st_mode):
        raise CacheError(f"{path} is not a directory")
    if status.st_uid != os.geteuid():
        raise CacheError(f"{path} belongs to another user (uid {status.st_uid})")
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheError(f"{path} is writable by other users (mode {stat.S_IMODE(status.st_mode):o})")
    return path


def build(source: Path, compiler: Compiler) -> tuple[Path, bool]:
    """The shared library of `source` and whether it came from the cache.

    Raises CppBuildError when the compiler rejects the file (now, or in an earlier process:
    the failure is recorded), CacheError when the cache cannot be used, OSError when the
    kernel file cannot be read.
    """
    return build_text(source.read_text(), source.stem, compiler)


def build_text(text: str, stem: str, compiler: Compiler) -> tuple[Path, bool]:
    """The shared library of the C++ source `text`, named after `stem`, and whether it came from the cache
    (see `build`)."""
    key = hashlib.sha256(
        "\0".join(
            (text, HEADER.read_text(), compiler.version, " ".join(compiler.command), *flags(compiler), cpu_identity())
        ).encode()
    ).hexdigest()[:32]
    directory = private_directory(cache_directory())
    library = directory / f"{stem}-{key}.so"
    record, failure = library.with_suffix(".sha256"), library.with_suffix(".failed")
    if failure.exists():
        raise CppBuildError(f"{failure.read_text()}\n(recorded in {failure}: delete it to build again)")
    if library.exists():
        if _verified(library, record):
            return library, True
        warnings.warn(f"{library} does not match its recorded SHA-256: building it again", RuntimeWarning, stacklevel=2)
    _clean_temporaries(directory)
    # Compile into a private temporary file, then rename: a concurrent process sees either no
    # library or a complete one, never a half-written file. The record goes first: a library
    # renamed in later is checked against it, one left without it is built again.
    try:
        temporary = _temporary(directory, library, b"")
    except OSError as error:
        raise CacheError(f"cannot write in {directory}: {error.strerror or error}") from error
    try:
        try:
            compile_library(text, compiler, flags(compiler), temporary)
        except CppBuildError as error:
            if LOCATED_ERROR.search(str(error)):  # an error in the code, not a full disk: it would fail again
                with contextlib.suppress(OSError):  # unrecorded, the next process tries once more
                    os.replace(_temporary(directory, failure, str(error).encode()), failure)
            raise
        digest = hashlib.sha256(temporary.read_bytes()).hexdigest()
        os.replace(_temporary(directory, record, digest.encode()), record)
        os.replace(temporary, library)
    except OSError as error:
        raise CacheError(f"cannot write in {directory}: {error.strerror or error}") from error
    finally:
        temporary.unlink(missing_ok=True)
    return library, False


def compile_library(text: str, compiler: Compiler, options: Sequence[str], output: Path, include: Path = HERE) -> None:
    """Compile the C++ source `text` into the shared library `output` with `options`, the runtime's header read
    from `include`; CppBuildError with the compiler's message where it fails."""
    command = [*compiler.command, *options, f"-I{include}", "-x", "c++", "-", "-o", str(output)]
    result = subprocess.run(command, input=text, capture_output=True, text=True)
    if result.returncode != 0:
        raise CppBuildError(f"{shlex.join(command)} failed:\n{result.stderr}")


def _verified(library: Path, record: Path) -> bool:
    """Whether `library`'s bytes have the SHA-256 its record holds (no record: no)."""
    try:
        return hashlib.sha256(library.read_bytes()).hexdigest() == record.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return False


def _temporary(directory: Path, final: Path, content: bytes) -> Path:
    """A new file of `directory` holding `content`, to be renamed to `final` (its name says so, for `_clean_temporaries`)."""
    handle, name = tempfile.mkstemp(prefix=f"{TEMPORARY}{final.name}-", dir=directory)
    with os.fdopen(handle, "wb") as file:
        file.write(content)
    return Path(name)


def _clean_temporaries(directory: Path) -> None:
    """Remove temporaries that processes killed mid-build left in the cache (at most once an hour's worth old)."""
    now = time.time()
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith(TEMPORARY) and entry.is_file(follow_symlinks=False):
                    if now - entry.stat(follow_symlinks=False).st_mtime > STALE_S:
                        os.unlink(entry.path)
    except OSError:  # another process cleaned it first, or the directory went away: nothing to do
        pass


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


@dataclass(frozen=True)
class Kinds:
    """The element type of each tensor input and output of a kernel: a type parameter's name (`T`, `T1`, ...),
    `bool`, or a dtype's name (an output of a fixed dtype)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    unsupported: str | None = None  # why the region has no C++ kernel

    @classmethod
    def parse(cls, text: str) -> Kinds:
        """From the string each kernel file exports: `x:T mask:bool -> y:T1`, or `unsupported: <why>`."""
        if text.startswith(abi.UNSUPPORTED):
            return cls((), (), text.removeprefix(abi.UNSUPPORTED))
        inputs, _, outputs = text.partition("->")
        return cls(*(tuple(item.rpartition(":")[2] for item in side.split()) for side in (inputs, outputs)))


@dataclass(frozen=True)
class Types:
    """A kernel's type parameters, each with its values and its dtype in each entry point (ENTRY_DTYPES'
    order), and the values of a fixed dtype; per parameter an integer input can make integers, `int` where
    the kernel computes them exactly, else the op that stops it."""

    parameters: tuple[tuple[str, tuple[torch.dtype, ...], tuple[str, ...]], ...]
    fixed: tuple[tuple[str, torch.dtype], ...]
    integers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str) -> Types:
        """From the string each kernel file exports: `T:float32,float64,float16,bfloat16:int=x,t0 bool=t1`."""
        parameters, fixed, integers = [], [], []
        for group in text.split():
            head, _, values = group.partition("=")
            name, _, uniform = head.partition(":")
            uniform, _, exact = uniform.partition(":")
            if uniform:
                parameters.append((name, tuple(map(_dtype, uniform.split(","))), tuple(values.split(","))))
            else:
                fixed += [(value, _dtype(name)) for value in values.split(",")]
            if exact:
                integers.append((name, exact))
        return cls(tuple(parameters), tuple(fixed), tuple(integers))


@dataclass(frozen=True)
class Binding:
    """The dtypes of one call: each type parameter's, the type the kernel computes in, and the dtype the
    kernel reads each tensor input in and writes each output in."""

    parameters: tuple[torch.dtype, ...]
    compute: torch.dtype  # float64 where a value is float64, else float32
    inputs: tuple[torch.dtype, ...]
    outputs: tuple[torch.dtype, ...]


def bind(
    kinds: Kinds,
    types: Types,
    inputs: dict[str, torch.dtype],
    values: dict[str, torch.dtype],
    readers: dict[str, list[str]],
) -> Binding | str:
    """The binding of a call whose tensor inputs have `inputs` dtypes (by name, in order) and whose values
    eager computes in `values` dtypes, or why the kernel cannot take it.

    Each value of a fixed dtype must have it in eager, and the values of one type parameter one dtype:
    floating, bool, or an integer dtype where the kernel computes the class exactly in it (`Types.integers`).
    A bool or integer tensor of another dtype than its parameter's is converted to it at the boundary,
    exactly as eager promotes it, but only where eager converts it to that dtype before anything else
    (`readers`: the values computed from each input), or the kernel would see it rounded where eager did
    not round it (`x_int.long()`).
    """
    # A value eager does not name (a lowered reduction's rounded intermediate) follows the values it is typed by.
    for value, dtype in types.fixed:
        if value in values and values[value] != dtype:
            return f"eager computes {value} as {values.get(value)}, the C++ kernel as {dtype}"
    exact = dict(types.integers)
    bound = []
    for name, _, members in types.parameters:
        integers = [m for m in members if m in inputs and not (inputs[m].is_floating_point or inputs[m] == torch.bool)]
        held = {values[m] for m in members if m not in inputs and m in values}
        held |= {inputs[m] for m in members if m in inputs and inputs[m].is_floating_point}
        if not held:  # a class of bool or integer inputs alone: read as eager reads them
            held = {inputs[m] for m in members if inputs[m] == torch.bool}
            held |= {values.get(r) for m in integers for r in readers.get(m, ())}
        dtype = held.pop() if len(held) == 1 else None
        for member in integers:
            if dtype == inputs[member]:
                continue  # computed in its own type
            if dtype is None or dtype == torch.bool or any(values.get(r) != dtype for r in readers.get(member, ())):
                return f"an integer input ({member}) that eager does not convert to one dtype first"
        if dtype is None:
            return f"eager computes the values of {name} ({', '.join(members)}) in several dtypes"
        if dtype not in CPP_TYPES or not (dtype.is_floating_point or dtype == torch.bool or exact.get(name) == "int"):
            return _integers_refused(exact.get(name), members, dtype)
        bound.append(dtype)
    return _binding(kinds, types, bound)


def _integers_refused(op: str | None, members: Sequence[str], dtype: torch.dtype) -> str:
    """Why a class that eager holds in an integer `dtype` takes the original code (`op`: see `Types.integers`)."""
    if op == "saved":
        return "no C++ kernel: an integer value reused across passes"
    if op is not None:
        return f"no C++ kernel: {op} of integers"
    return f"{', '.join(members)}: {dtype} values, which the C++ kernel computes in floating point"


def _binding(kinds: Kinds, types: Types, bound: Sequence[torch.dtype]) -> Binding:
    """The Binding of type parameters bound to `bound`: double where a value is double, each tensor as its kind."""
    dtypes = {name: dtype for (name, _, _), dtype in zip(types.parameters, bound, strict=True)}
    wide = torch.float64 in (*bound, *(dtype for _, dtype in types.fixed))
    return Binding(
        tuple(bound),
        torch.float64 if wide else torch.float32,
        tuple(dtypes.get(kind) or _dtype(kind) for kind in kinds.inputs),
        tuple(dtypes.get(kind) or _dtype(kind) for kind in kinds.outputs),
    )


class CppLibrary:
    """The built kernels of one generated `.cpp` file, and the instantiations built for calls beside them."""

    _loaded: dict[Path, CppLibrary | None] = {}  # one build per file and process
    _lock = threading.Lock()

    def __init__(self, source: Path, compiler: Compiler | None, path: Path, cache_hit: bool) -> None:
        self.source = source  # the kernel file
        self.compiler = compiler  # None: the library was built ahead of time, and no compiler is looked for
        self.path = path  # the shared library
        self.cache_hit = cache_hit  # False: this process compiled it
        self._library = ctypes.CDLL(str(path))
        self._kinds: dict[str, Kinds] = {}
        self._types: dict[str, Types] = {}
        # Per (entry, parameters' dtypes, compute type): the instantiation's address, or why there is none.
        self._instances: dict[tuple, int | str] = {}
        self._instances_lock = threading.Lock()
        self._instance_libraries: list[ctypes.CDLL] = []  # kept loaded while their functions may run

    @classmethod
    def for_file(cls, source: Path) -> CppLibrary | str:
        """The library of a kernel file, built on first use, or why its kernels take the original code.

        Whatever stops the library (no compiler, a compile error, a cache that cannot be used)
        is warned about once and remembered for the process: one build attempt per file.
        """
        source = Path(source).resolve()
        with cls._lock:
            if source not in cls._loaded:
                cls._loaded[source] = cls._load_or_why(source)
            return cls._loaded[source]

    @classmethod
    def _load_or_why(cls, source: Path) -> CppLibrary | str:
        try:
            library = cls.load(source)
        except (CppBuildError, CacheError, OSError) as error:
            why, detail = _why(error, "the C++ kernels")
        else:
            return "no C++ compiler" if library is None else library
        warnings.warn(f"{source.name}: {why}, the original code runs: {detail}", RuntimeWarning, stacklevel=4)
        return why

    @classmethod
    def load(cls, source: Path) -> CppLibrary | None:
        """Load `source`'s library built ahead of time for this CPU (`transpile precompile`, verified by its
        hash: artifacts.py), else build (or find in the cache) and load it; None, with a one-line warning,
        without a compiler.

        Raises CppBuildError, CacheError or OSError (see `build`); `for_file` turns them into a fallback.
        """
        found = artifacts.precompiled(Path(source), cpu_features())
        if isinstance(found, Path):
            return cls(Path(source), None, found, True)
        if found is not None:
            warnings.warn(f"{Path(source).name}: {found}: building it here", RuntimeWarning, stacklevel=2)
        compiler = find_compiler()
        if compiler is None:
            warnings.warn(NO_COMPILER, RuntimeWarning, stacklevel=2)
            return None
        return cls(Path(source), compiler, *build(Path(source), compiler))

    @functools.cached_property
    def _set_threads(self) -> Callable[[int], None]:
        """OpenMP's omp_set_num_threads, which every kernel file links."""
        function = self._library.omp_set_num_threads
        function.argtypes, function.restype = [ctypes.c_int], None
        return function

    def _string(self, name: str) -> str:
        exported = ctypes.c_char.in_dll(self._library, name)  # a C string: read up to its NUL
        return ctypes.string_at(ctypes.addressof(exported)).decode()

    def kinds(self, entry: str) -> Kinds:
        if entry not in self._kinds:
            self._kinds[entry] = Kinds.parse(self._string(f"{entry}{abi.KINDS_SUFFIX}"))
        return self._kinds[entry]

    def types(self, entry: str) -> Types:
        if entry not in self._types:
            self._types[entry] = Types.parse(self._string(f"{entry}{abi.TYPES_SUFFIX}"))
        return self._types[entry]

    def uniform(self, entry: str, dtypes: Sequence[torch.dtype]) -> Binding:
        """The binding of the entry point for the widest floating dtype of `dtypes` (float32 without one)."""
        floating = [dtype for dtype in dtypes if dtype in ENTRY_DTYPES]
        k = ENTRY_DTYPES.index(functools.reduce(torch.promote_types, floating) if floating else torch.float32)
        types = self.types(entry)
        return _binding(self.kinds(entry), types, [uniform[k] for _, uniform, _ in types.parameters])

    def call(self, entry: str, tensors, scalars, outputs, n_elements, sizes, strides, contiguous) -> None:
        """Run kernel `entry` (a region name) once with the entry point of its tensors' dtype (`uniform`):
        see `launcher` and `pointwise_layout`."""
        binding = self.uniform(entry, [t.dtype for t in (*tensors, *outputs)])
        layout = pointwise_layout(n_elements, sizes, strides, contiguous)
        self.launcher(entry, binding, layout)(tensors, scalars, outputs)

    def call_rows(
        self, entry: str, tensors, scalars, outputs, n_rows, row_size, outer_sizes, strides, contiguous
    ) -> None:
        """Run the row kernel `entry` once (see `call` and `rows_layout`)."""
        binding = self.uniform(entry, [t.dtype for t in (*tensors, *outputs)])
        layout = rows_layout(n_rows, row_size, outer_sizes, strides, contiguous)
        self.launcher(entry, binding, layout)(tensors, scalars, outputs)

    def launcher(self, entry: str, binding: Binding, arguments: tuple) -> Callable[..., None] | str:
        """Kernel `entry` (a region name) as `launch(tensors, scalars, outputs)` for calls of `binding`, or why
        there is none.

        `arguments`: the C arguments after the data, from `pointwise_layout` or `rows_layout`. The entry
        point of the binding where the file has one, else an instantiation built for it (`instance`),
        called through the prototype of the parameters the file exports (`abi.prototype`): an argument of
        the wrong type or number raises, as a ctypes.ArgumentError or a TypeError, where C would run on
        garbage. A tensor of another dtype than the binding's (a bool or integer tensor read as a number,
        `bind` says when) is converted at the boundary, as torch would promote it; an output of another
        dtype gets a staging tensor.
        """
        kinds = self.kinds(entry)
        if kinds.unsupported is not None:
            return f"no C++ kernel: {kinds.unsupported}"
        types = self.types(entry)
        for k in range(len(ENTRY_DTYPES)):
            if all(uniform[k] == bound for (_, uniform, _), bound in zip(types.parameters, binding.parameters)):
                address = (ctypes.c_void_p * len(ENTRY_DTYPES)).in_dll(self._library, f"{entry}{abi.ENTRIES_SUFFIX}")[k]
                break
        else:
            address = self.instance(entry, binding)
            if isinstance(address, str):
                return address
        function = abi.prototype(self._string(f"{entry}{abi.PARAMETERS_SUFFIX}"))(address)
        set_threads = self._set_threads
        # Whether every tensor has the binding's dtype, so that the data pointers go to C as they are: decided on
        # the first call, since the calls of a launcher share one signature (a Plan's), dtypes included.
        direct: list[bool] = []

        def launch(tensors, scalars, outputs) -> None:
            if not direct:
                direct.append(
                    all(t.dtype == dtype for t, dtype in zip(tensors, binding.inputs))
                    and all(o.dtype == dtype for o, dtype in zip(outputs, binding.outputs))
                )
            set_threads(torch.get_num_threads())  # a fair comparison with eager: the same threads
            if direct[0]:  # the path of every call of most plans: no conversion, no staging, no generator
                function(*[t.data_ptr() for t in tensors], *scalars, *[o.data_ptr() for o in outputs], *arguments)
                return
            inputs = [_conform(t, dtype) for t, dtype in zip(tensors, binding.inputs)]
            staged = [
                o if o.dtype == dtype else torch.empty_like(o, dtype=dtype)
                for o, dtype in zip(outputs, binding.outputs)
            ]
            function(*(t.data_ptr() for t in inputs), *scalars, *(o.data_ptr() for o in staged), *arguments)
            for output, result in zip(outputs, staged):
                if result is not output:
                    output.copy_(result)

        return launch

    def instance(self, entry: str, binding: Binding) -> int | str:
        """The address of kernel `entry`'s entry template instantiated for `binding`: a library of the kernel file
        that exports it, built once (and cached like the file's library); or why not, warned about once."""
        key = (entry, binding.parameters, binding.compute)
        with self._instances_lock:
            if key not in self._instances:
                self._instances[key] = self._build_instance(entry, binding)
            return self._instances[key]

    def _build_instance(self, entry: str, binding: Binding) -> int | str:
        types = ", ".join(CPP_TYPES[dtype] for dtype in (*binding.parameters, binding.compute))
        instance = f"transpile::{entry}{abi.ENTRY_SUFFIX}<{types}>"
        text = (
            f'#define {abi.ONE_SIGNATURE}\n#line 1 "{self.source.name}"\n{self.source.read_text()}\n'
            f"// {entry} for a call of these dtypes, built by the runtime.\n"
            f'extern "C" decltype(&{instance}) const {abi.INSTANCE} = {instance};\n'
        )
        compiler = self.compiler or find_compiler()  # a library built ahead of time has the entry points only
        if compiler is None:
            return f"no C++ compiler to build the instantiation of {entry} for these dtypes"
        try:
            path, _ = build_text(text, f"{self.source.stem}-{entry}", compiler)
            library = ctypes.CDLL(str(path))
            self._instance_libraries.append(library)
            return ctypes.c_void_p.in_dll(library, abi.INSTANCE).value
        except (CppBuildError, CacheError, OSError) as error:
            why, detail = _why(error, f"the C++ instantiation of {entry}")
            warnings.warn(f"{self.source.name}: {why}, the original code runs: {detail}", RuntimeWarning, stacklevel=2)
            return why


def _why(error: Exception, what: str) -> tuple[str, str]:
    """Why a build or load of `what` failed, as a fallback reason, and the detail to warn with."""
    if isinstance(error, CppBuildError):
        return f"{what} failed to build", str(error)
    if isinstance(error, CacheError):
        return f"C++ kernel cache: {error}", str(error)
    return f"{what} cannot be loaded ({type(error).__name__})", str(error)


def pointwise_layout(
    n_elements: int, sizes: Sequence[int], strides: Sequence[Sequence[int]], contiguous: bool
) -> tuple:
    """A pointwise kernel's arguments after the data (abi.POINTWISE): `strides` holds RANK element strides per
    tensor input (ignored when `contiguous`)."""
    return (
        ctypes.c_int64(n_elements),
        (ctypes.c_int64 * abi.RANK)(*sizes) if sizes else None,
        _stride_array(strides, contiguous),
        ctypes.c_int(bool(contiguous)),
    )


def rows_layout(n_rows: int, row_size: int, outer_sizes: Sequence[int], strides, contiguous: bool) -> tuple:
    """A row kernel's arguments after the data (abi.ROWS), for `n_rows` rows of `row_size` columns.

    `outer_sizes` holds the ROW_DIMS row dims; `strides` ROW_DIMS + 1 element strides (the row
    dims, then the reduced dim) per ELEMENT tensor: the tensor inputs, then the element outputs
    (ignored when `contiguous`). Outputs with one value per row are contiguous.
    """
    return (
        ctypes.c_int64(n_rows),
        ctypes.c_int64(row_size),
        (ctypes.c_int64 * abi.ROW_DIMS)(*outer_sizes),
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
