"""Kernels compiled in the background: the original code runs until a kernel is ready, then the kernel.

No GPU here, so the Triton JIT function is a stand-in (`FakeJit`): it keeps Triton's own
`warmup` and `kernel[grid]` entry points and compiles the way `JITFunction.run` and
`_do_compile` do (under an active AsyncCompileMode the compile is submitted; otherwise it
runs on the caller). Everything else is the shipped code: the runtime's plans, counters and
compile threads, `Launcher.compile`/`ready`, and Triton's AsyncCompileMode.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from emit import runtime  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def fused_reference(x, y):
    return (x * y + 1,)


def fused_compiled(x, y, out, *tail):
    """What the compiled kernel computes: the launch passes tensors, scalars, outputs, then the tail."""
    torch.add(x * y, 1, out=out)


def fake_jit(compile_kernel):
    """A JITFunction as far as `Launcher` uses it; `compile_kernel()` stands for `triton.compile`.

    Triton is imported here, not at collection: test_triton_backend must import it first,
    with the interpreter on.
    """
    from triton.runtime._async_compile import active_mode
    from triton.runtime.jit import KernelInterface

    class FakeJit(KernelInterface):  # Triton's `warmup` (outputs as dtypes: aligned stand-ins) and `kernel[grid]`
        def __init__(self) -> None:
            self.cache: dict = {}  # the JIT's in-memory cache: specialisation -> compiled kernel
            self.submitted = 0  # compiles handed to an AsyncCompileMode
            self.compiled_at_launch = 0  # compiles a launch had to run itself

        def run(self, *args, grid, warmup, **kwargs):
            key = specialisation(args, kwargs)
            kernel = self.cache.get(key)
            if kernel is None:
                mode = active_mode.get()
                if mode is not None:
                    self.submitted += 1
                    return mode.submit(key, compile_kernel, lambda compiled: self.cache.__setitem__(key, compiled))
                self.compiled_at_launch += 1
                kernel = self.cache[key] = compile_kernel()
            if not warmup:
                kernel(*args)
            return kernel

    return FakeJit()


def specialisation(args, kwargs) -> tuple:
    """Triton's, roughly: dtype and 16-byte alignment of tensors, whether an int is 1 or a multiple of 16."""
    spec = []
    for arg in args:
        if hasattr(arg, "dtype"):
            spec.append((arg.dtype, arg.data_ptr() % 16 == 0))
        elif isinstance(arg, int):
            spec.append((arg == 1, arg % 16 == 0))
        else:
            spec.append(type(arg))
    return tuple(spec), tuple(sorted(kwargs.items()))


@pytest.fixture
def make_kernel(monkeypatch):
    """A pointwise `Kernel` (x * y + 1) whose Triton kernel is a `fake_jit`, with fresh compile threads."""
    triton_support = pytest.importorskip("emit.runtime.triton_support")

    monkeypatch.setitem(sys.modules, "_transpile_runtime", runtime)  # where the Triton backend imports its support
    monkeypatch.setattr(runtime, "_backend", lambda device: runtime._Triton())
    monkeypatch.setattr(triton_support, "BACKGROUND", True)  # the pytest process may have the interpreter on
    monkeypatch.setattr(runtime, "_BACKGROUND", True)
    monkeypatch.setattr(runtime, "_COMPILER", runtime._Compiler(2))
    made = []

    def make(compile_kernel):
        kernel = runtime.Kernel(
            "fused",
            fused_reference,
            2,
            runtime.Shapes(("x", "y"), (runtime.Step("z", ("x", "y")),), ("z",)),
            "test.py:1",
        )
        kernel.triton_kernel = fake_jit(compile_kernel)
        made.append(kernel)
        return kernel

    yield make
    for kernel in made:
        runtime.KERNELS.remove(kernel)


def gated(gate: threading.Event):
    """A compile that finishes when `gate` is set."""

    def compile_kernel():
        assert gate.wait(timeout=10)
        return fused_compiled

    return compile_kernel


def test_the_original_code_runs_until_the_kernel_is_compiled_then_the_kernel(make_kernel):
    gate = threading.Event()
    kernel = make_kernel(gated(gate))
    x, y = torch.randn(4, 256), torch.randn(4, 256)
    assert runtime.wait_for_kernels(timeout=0)  # nothing started yet

    assert kernel(x, y) is None
    assert kernel(x, y) is None
    assert not runtime.wait_for_kernels(timeout=0.05)
    assert kernel.triton_kernel.submitted == 1
    gate.set()
    assert runtime.wait_for_kernels(timeout=10)

    (result,) = kernel(x, y)
    torch.testing.assert_close(result, x * y + 1)
    assert kernel.counts == {runtime.COMPILING: 2, "triton": 1}
    # The warm-up compiled what the launch needed (the outputs given as dtypes): nothing compiled at launch.
    assert kernel.triton_kernel.compiled_at_launch == 0

    # A new signature whose specialisation was compiled already launches at once.
    x, y = torch.randn(8, 256), torch.randn(8, 256)  # the block size and flags of (4, 256)
    (result,) = kernel(x, y)
    torch.testing.assert_close(result, x * y + 1)
    assert kernel.triton_kernel.submitted == 1 and kernel.triton_kernel.compiled_at_launch == 0


def test_inside_a_backward_a_kernel_still_compiling_at_its_last_call_keeps_the_original_code(make_kernel):
    """A checkpoint's recomputation reruns a forward inside the backward: it must take the path the forward took
    (the original code while compiling), or it would save other tensors. Outside a backward the kernel joins."""
    gate = threading.Event()
    kernel = make_kernel(gated(gate))
    x, y = torch.randn(4, 256), torch.randn(4, 256)
    assert kernel(x, y) is None  # the forward: compiling
    gate.set()
    assert runtime.wait_for_kernels(timeout=10)
    inside = []

    def recompute(grad):
        with torch.no_grad():
            inside.append(kernel(x, y))
        return grad

    leaf = torch.ones(3, requires_grad=True)
    out = leaf * 2
    out.register_hook(recompute)
    out.sum().backward()
    assert inside == [None]
    (result,) = kernel(x, y)  # outside the backward: the kernel
    torch.testing.assert_close(result, x * y + 1)
    assert kernel.counts == {runtime.COMPILING: 2, "triton": 1}


def test_a_failed_compile_falls_back_for_good_and_says_why(make_kernel):
    def compile_kernel():
        raise RuntimeError("ptxas fatal: out of registers")

    kernel = make_kernel(compile_kernel)
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    assert kernel(x, y) is None
    assert runtime.wait_for_kernels(timeout=10)  # a failed compile does not hang the wait
    with pytest.warns(RuntimeWarning, match="ptxas fatal: out of registers"):
        assert kernel(x, y) is None
    assert kernel(x, y) is None
    failed = "fallback: the kernel failed to compile (RuntimeError)"
    assert kernel.counts == {runtime.COMPILING: 1, failed: 2}
    assert kernel.triton_kernel.submitted == 1 and kernel.triton_kernel.compiled_at_launch == 0


def test_sync_mode_compiles_on_the_first_call(make_kernel, monkeypatch):
    monkeypatch.setattr(runtime, "_BACKGROUND", False)
    kernel = make_kernel(lambda: fused_compiled)
    x, y = torch.randn(2, 7), torch.randn(7)
    (result,) = kernel(x, y)
    torch.testing.assert_close(result, x * y + 1)
    assert kernel.counts == {"triton": 1}
    assert kernel.triton_kernel.submitted == 0 and kernel.triton_kernel.compiled_at_launch == 1


def test_transpile_compile_sync_is_read_from_the_environment():
    check = "import emit.runtime as r; print(r._BACKGROUND)"
    for value, background in (("sync", "False"), (None, "True")):
        env = {k: v for k, v in os.environ.items() if k != "TRANSPILE_COMPILE"}
        if value is not None:
            env["TRANSPILE_COMPILE"] = value
        done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, env=env, capture_output=True, text=True)
        assert done.stdout.strip() == background, done.stderr[-2000:]


def test_callers_on_several_threads_get_the_original_code_or_the_kernel(make_kernel):
    gate = threading.Event()
    kernel = make_kernel(gated(gate))
    x, y = torch.randn(16, 48), torch.randn(48)
    expected = x * y + 1
    results, errors = [], []

    def call(n: int) -> None:
        try:
            for i in range(n):
                if i == n // 2:
                    gate.set()
                results.append(kernel(x, y))
        except Exception as error:  # reported below: an exception in a thread would pass unseen
            errors.append(error)

    threads = [threading.Thread(target=call, args=(40,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert runtime.wait_for_kernels(timeout=10)
    results.append(kernel(x, y))
    assert results[-1] is not None
    for result in results:
        if result is not None:
            torch.testing.assert_close(result[0], expected)
    assert kernel.triton_kernel.compiled_at_launch == 0


def test_exit_cancels_queued_compiles_and_finishes_the_running_one():
    compiler = runtime._Compiler(threads=1)
    started, release, ran = threading.Event(), threading.Event(), []

    def slow():
        started.set()
        release.wait(10)
        ran.append("slow")
        return "slow"

    running = compiler.submit(slow)
    queued = compiler.submit(lambda: ran.append("queued"))
    assert started.wait(10)
    threading.Timer(0.2, release.set).start()  # the running compile ends while shutdown waits for it
    compiler.shutdown()
    assert running.done() and running.result() == "slow"
    assert queued.cancelled() and ran == ["slow"]
    assert compiler.wait(timeout=1)  # nothing left pending


def test_a_failed_compile_in_sync_mode_falls_back_for_good_and_says_why(make_kernel, monkeypatch):
    """Where the first launch compiles (the interpreter, no background compiles), its error is not the caller's:
    the original code runs, for this signature from then on."""
    monkeypatch.setattr(runtime, "_BACKGROUND", False)

    def compile_kernel():
        raise RuntimeError("Expected dtype fp32/fp64 but got int1")

    kernel = make_kernel(compile_kernel)
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    with pytest.warns(RuntimeWarning, match="Expected dtype fp32/fp64 but got int1"):
        assert kernel(x, y) is None
    assert kernel(x, y) is None
    failed = "fallback: the kernel failed to compile (RuntimeError)"
    assert kernel.counts == {failed: 2}
    assert kernel.triton_kernel.compiled_at_launch == 1


def test_triton_start_up_is_warmed_off_the_first_call_only_where_kernels_will_compile(monkeypatch):
    """Triton's file hash (and its CUDA driver) are computed on a thread at import where CUDA is there;
    nothing starts without CUDA, under the interpreter, with TRANSPILE_BACKEND=eager or sync compiles."""
    triton = pytest.importorskip("triton")
    triton.runtime.cache.triton_key.cache_clear()
    runtime._warm_triton()  # no CUDA driver here: the driver part is skipped quietly
    assert triton.runtime.cache.triton_key.cache_info().currsize == 1
    monkeypatch.setattr(runtime.torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    started = []
    monkeypatch.setattr(runtime.threading.Thread, "start", lambda thread: started.append(thread.name))
    monkeypatch.setattr(runtime.atexit, "register", lambda *args: None)
    assert runtime._warm_up_triton_in_background() is not None and started == ["transpile-warm-triton"]
    with monkeypatch.context() as patch:  # one runs already (another copy of the runtime started it)
        patch.setattr(runtime, "_warming", lambda: [object()])
        assert runtime._warm_up_triton_in_background() is None
    for name, value in [("_FORCED", "eager"), ("_BACKGROUND", False)]:
        with monkeypatch.context() as patch:
            patch.setattr(runtime, name, value)
            assert runtime._warm_up_triton_in_background() is None
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert runtime._warm_up_triton_in_background() is None
    monkeypatch.setattr(runtime.torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert runtime._warm_up_triton_in_background() is None
