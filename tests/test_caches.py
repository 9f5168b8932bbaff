"""Attacks on the two caches, and failures of them: a cache never loads or runs what it did not write.

The C++ kernel cache (emit/runtime/cpp_support.py) must refuse a directory another user
owns or can write, load a library only when its bytes match the SHA-256 recorded when it
was built (a planted, empty, corrupt or truncated `.so` is built again), fall back to the
original code when the cache cannot be used, remember a failed build, and clean the
temporaries of builds that died. The lint cache (transpiler/lint/cache.py) must not run a
planted pickle.

The suite may run as root (it does on the development machine), and a test cannot make a
directory belong to another user, so "another user's directory" is simulated: `os.geteuid`
is monkeypatched to another uid, which makes our own directory look like someone else's to
both caches' owner check. Everything else is real: libraries built by the real compiler,
a planted library whose constructor writes a file, a truncated library loaded in a child
process (a SIGBUS would kill only the child, and fail the test), a pickle whose payload
writes a file.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from emit.cpp.kernels import render_cpp_file
from emit.runtime import Kernel
from emit.runtime import cpp_support
from emit.runtime.cpp_support import CppBuildError, CppLibrary, build, find_compiler
from tests.transpiled import importable, reference_of, shapes_of
from transpiler.lint.engine import Cache, RunResult
from transpiler.compiler.ir import Input, Node, Output, Region

ROOT = Path(__file__).resolve().parent.parent
COMPILER = find_compiler()
needs_compiler = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler")

# out = (x + y) * 2.0: one small kernel file, built once for the module and copied into each test's cache.
REGION = Region(
    "scaled_sum",
    "test.py",
    "forward",
    1,
    1,
    (Input("x", "x", True), Input("y", "y", True)),
    (Node("add", ("x", "y"), "s", 1), Node("mul", ("s", 2.0), "out", 1, (1,))),
    (Output("out", "out"),),
)
SOURCE_NAME = "_cache_kernels.cpp"


def make_kernel(source: Path) -> Kernel:
    return Kernel(REGION.name, reference_of(REGION), 2, shapes_of(REGION), "test.py:1", cpp=source)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A cache directory holding the kernel file's library and its record, as a first build leaves them."""
    if COMPILER is None:
        pytest.skip("no C++ compiler")
    base = tmp_path_factory.mktemp("pristine")
    source = base / SOURCE_NAME
    source.write_text(render_cpp_file([REGION], {1: "out = (x + y) * 2.0"}, "Cache tests."))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRANSPILE_CACHE_DIR", str(base / "cache"))
        build(source, COMPILER)
    return base


@pytest.fixture
def cached(pristine, tmp_path, monkeypatch):
    """This test's kernel file and a copy of the pristine cache: (source, library, record)."""
    source = tmp_path / SOURCE_NAME
    shutil.copy(pristine / SOURCE_NAME, source)
    shutil.copytree(pristine / "cache", tmp_path / "cache")
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    (library,) = (tmp_path / "cache").glob("*.so")
    return source, library, library.with_suffix(".sha256")


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(4, 8, generator=generator), torch.randn(8, generator=generator)


def _runs_the_kernel(source: Path) -> None:
    """The kernel runs (not the fallback) and computes eager's result."""
    kernel = make_kernel(source)
    x, y = _inputs()
    (out,) = kernel(x, y)
    torch.testing.assert_close(out, (x + y) * 2.0, rtol=0, atol=0)  # one add and one multiply: exact
    assert dict(kernel.counts) == {"cpp": 1}


def _falls_back(source: Path, reason: str) -> dict[str, int]:
    """The kernel returns None (its caller runs the original code), warns once, and counts why."""
    kernel = make_kernel(source)
    x, y = _inputs()
    with pytest.warns(RuntimeWarning, match=re.escape(reason)):
        assert kernel(x, y) is None
    assert kernel(x[:1], y) is None  # another signature: remembered, no second warning or build
    (counted,) = kernel.counts
    assert counted.startswith("fallback: ") and kernel.counts[counted] == 2
    return dict(kernel.counts)


# -- the C++ kernel cache ------------------------------------------------------------------------
@needs_compiler
def test_a_verified_library_is_loaded_from_the_cache(cached):
    source, library, record = cached
    before = library.stat().st_mtime_ns
    _runs_the_kernel(source)
    assert library.stat().st_mtime_ns == before  # a cache hit: not built again
    assert oct((library.parent.stat().st_mode) & 0o777) == "0o700"


@needs_compiler
@pytest.mark.parametrize("attack", ["owner", "writable"])
def test_another_users_or_a_shared_directory_is_refused(cached, monkeypatch, attack):
    source, library, _ = cached
    if attack == "owner":
        monkeypatch.setattr(os, "geteuid", lambda: library.parent.stat().st_uid + 4242)  # see the docstring
        reason = "belongs to another user"
    else:
        library.parent.chmod(0o777)
        reason = "writable by other users"
    counts = _falls_back(source, reason)
    assert reason in next(iter(counts))


@needs_compiler
@pytest.mark.parametrize("record", ["kept", "deleted"])
def test_a_planted_library_is_never_loaded(cached, tmp_path, record):
    """A library from other source in the cache's place (its record kept, or none): its constructor must not run."""
    source, library, record_file = cached
    marker = tmp_path / "constructor-ran"
    planted = tmp_path / "planted.cpp"
    planted.write_text(textwrap.dedent(f"""
            #include <cstdio>
            __attribute__((constructor)) static void planted() {{
                if (FILE* file = std::fopen("{marker}", "w")) std::fclose(file);
            }}
            extern "C" const char {REGION.name}_kinds[] = "x:T y:T -> out:T";
            """))
    planted_library = tmp_path / "planted.so"
    subprocess.run([*COMPILER.command, "-shared", "-fPIC", str(planted), "-o", str(planted_library)], check=True)
    shutil.copy(planted_library, library)
    if record == "deleted":
        record_file.unlink()
    with pytest.warns(RuntimeWarning, match="SHA-256"):
        _runs_the_kernel(source)
    assert not marker.exists()
    ctypes.CDLL(str(planted_library))  # the test can fail: loading the planted library runs its constructor
    assert marker.exists()


@needs_compiler
@pytest.mark.parametrize("damage", ["empty", "garbage"])
def test_an_empty_or_corrupt_library_is_built_again(cached, damage):
    source, library, record = cached
    library.write_bytes(b"" if damage == "empty" else os.urandom(4096))
    with pytest.warns(RuntimeWarning, match="SHA-256"):
        _runs_the_kernel(source)
    assert cpp_support._verified(library, record)


@needs_compiler
def test_a_truncated_library_is_built_again_not_a_crash(cached):
    """In a child process: loading a truncated library can kill a process with SIGBUS."""
    source, library, record = cached
    library.write_bytes(library.read_bytes()[: library.stat().st_size // 2])
    script = textwrap.dedent(f"""
        import warnings
        from pathlib import Path
        from tests.test_caches import _runs_the_kernel
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _runs_the_kernel(Path({str(source)!r}))
        assert any("SHA-256" in str(w.message) for w in caught), [str(w.message) for w in caught]
        """)
    child = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=os.environ, capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-3000:]
    assert cpp_support._verified(library, record)


@needs_compiler
@pytest.mark.parametrize("place", ["a file", "unwritable"])
def test_an_unusable_cache_directory_falls_back(tmp_path, monkeypatch, place):
    source = tmp_path / SOURCE_NAME
    source.write_text(render_cpp_file([REGION], {}, "Cache tests."))
    if place == "a file":
        blocker = tmp_path / "cache"
        blocker.write_text("")
        monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(blocker))
        reason = "is not a directory"
    else:
        if not Path("/proc/self").is_dir():
            pytest.skip("needs /proc: a directory no one can write, root included")
        monkeypatch.setenv("TRANSPILE_CACHE_DIR", "/proc")
        reason = "C++ kernel cache"  # root: writing fails; another user: /proc is root's
    _falls_back(source, reason)


@needs_compiler
def test_forward_returns_eagers_result_when_the_cache_cannot_be_used(tmp_path, monkeypatch):
    """End to end: a transpiled module whose kernel cache is a file computes eager's result."""
    package = tmp_path / "src" / "cachepkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(textwrap.dedent("""
            import torch
            from torch import nn


            class Scaled(nn.Module):
                def forward(self, x, y):
                    s = x + y
                    return torch.sigmoid(s) * 2.0 + s
            """))
    with importable(tmp_path, {package: tmp_path / "cachepkg"}, ("cachepkg",)):
        blocker = tmp_path / "blocker"
        blocker.write_text("")
        monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(blocker))
        import cachepkg.model as compiled
        from _transpile_runtime import counters

        x, y = _inputs()
        with pytest.warns(RuntimeWarning, match="is not a directory"):
            out = compiled.Scaled()(x, y)
        s = x + y
        torch.testing.assert_close(out, torch.sigmoid(s) * 2.0 + s, rtol=0, atol=0)
        paths = [path for counts in counters().values() for path in counts]
        assert any(path.startswith("fallback: C++ kernel cache") for path in paths), paths


@needs_compiler
def test_a_failed_build_falls_back_once_and_is_not_retried(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / SOURCE_NAME
    source.write_text(render_cpp_file([REGION], {}, "Cache tests.") + "\nint broken( {\n")
    compiles = []
    real_run = subprocess.run

    def counting_run(command, *args, **kwargs):
        if "-o" in command:
            compiles.append(command)
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(cpp_support.subprocess, "run", counting_run)
    _falls_back(source, "failed to build")
    assert len(compiles) == 1
    # A new process (CppLibrary.load does not look at this one's memory) finds the failure recorded.
    with pytest.raises(CppBuildError, match="recorded in"):
        CppLibrary.load(source)
    assert len(compiles) == 1


@needs_compiler
def test_stale_temporaries_are_cleaned(cached):
    source, library, record = cached
    stale, fresh = (library.parent / f"{cpp_support.TEMPORARY}{name}" for name in ("dead-build.so", "running-build.so"))
    for path in (stale, fresh):
        path.write_bytes(b"partial")
    hours_ago = time.time() - 2 * cpp_support.STALE_S
    os.utime(stale, (hours_ago, hours_ago))
    record.unlink()  # a build now (cleaning runs when something is built)
    with pytest.warns(RuntimeWarning, match="SHA-256"):
        _runs_the_kernel(source)
    assert not stale.exists() and fresh.exists()  # a build of another process still running is left alone


# -- the lint cache ------------------------------------------------------------------------------
class _Payload:
    """Unpickled by plain pickle, this writes a file: what a planted entry could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def test_a_planted_pickle_in_the_lint_cache_does_not_run(tmp_path):
    cache = Cache(tmp_path / "lint")
    entry = RunResult([], [("model.py", "0" * 64)])
    cache.put("a" * 64, entry)
    assert cache.get("a" * 64) == entry  # data of the project's own classes reads back
    marker = tmp_path / "payload-ran"
    planted = pickle.dumps(RunResult([], [_Payload(marker)]))
    key = "b" * 64
    (cache.directory / key[:2]).mkdir(exist_ok=True)
    (cache.directory / key[:2] / key).write_bytes(planted)
    assert cache.get(key) is None
    assert not marker.exists()
    pickle.loads(planted)  # the test can fail: a plain pickle.load runs the payload
    assert marker.exists()


@pytest.mark.parametrize("attack", ["owner", "writable"])
def test_the_lint_cache_refuses_another_users_or_a_shared_directory(tmp_path, monkeypatch, attack):
    directory = tmp_path / "lint"
    directory.mkdir(mode=0o700)
    if attack == "owner":
        monkeypatch.setattr(os, "geteuid", lambda: directory.stat().st_uid + 4242)  # see the docstring
    else:
        directory.chmod(0o777)
    with pytest.warns(RuntimeWarning, match="lint cache not used"):
        cache = Cache(directory)
    cache.put("a" * 64, RunResult([], []))
    assert cache.get("a" * 64) is None
    assert [p for p in directory.rglob("*") if p.is_file()] == []


@pytest.mark.skipif(cpp_support.find_compiler() is None, reason="no C++ compiler")
def test_cpu_options_follow_the_cpus_features(monkeypatch):
    """512-bit vectors where the CPU has AVX-512 (and the compiler knows the option), none without; the
    options are part of the cache key through `flags`."""
    compiler = cpp_support.find_compiler()
    for features, wide in (("fpu sse2 avx2", False), ("fpu sse2 avx2 avx512f", True)):
        monkeypatch.setattr(cpp_support, "cpu_identity", lambda features=features: f"flags\t\t: {features}")
        cpp_support.flags.cache_clear()
        flags = cpp_support.flags(compiler)
        assert flags[: len(cpp_support.FLAGS)] == cpp_support.FLAGS
        assert cpp_support.NO_FP16_INSTRUCTIONS not in flags
        if wide:
            assert (cpp_support.WIDE_VECTORS in flags) == cpp_support._knows(compiler, cpp_support.WIDE_VECTORS)
        else:
            assert cpp_support.WIDE_VECTORS not in flags
    cpp_support.flags.cache_clear()
