"""Runtime support for modules written by transpile: run a fused kernel or say why not, and count.

This package is copied verbatim into every output tree as `_transpile_runtime/`. It
imports only torch, and triton when a CUDA tensor first reaches a kernel, so the
output runs without transpile installed.

A `Kernel` call returns the region's outputs, or None: the caller then runs the
original statements. The preconditions (plain tensors on one device, dtypes the
backend handles, every output as large as the iteration space) and the launch
geometry are worked out once per call signature (types, shapes, strides, dtypes) and
kept in a `Plan`: a call whose signature was seen before checks only autograd, then
allocates the outputs and launches. Result dtypes come from torch itself, by running
the region's eager reference on one-element tensors.

A Triton kernel not compiled yet for a new signature compiles in the background: calls
of that signature take the original code until it is ready (`wait_for_kernels()` blocks
until every compile started has finished; `TRANSPILE_COMPILE=sync` compiles on the
first call instead).
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import functools
import importlib.util
import math
import os
import queue
import sys
import threading
import warnings
from pathlib import Path
from typing import Callable, NamedTuple

import torch

from . import abi
from .abi import RANK as RANK

# Re-exported: emitted modules and kernel files import them from the runtime package.
from .activations import Activation as Activation, Activations as Activations
from .graphs import CudaGraphs as CudaGraphs, GraphedBlocks as GraphedBlocks
from .graphs import cuda_graph_blocks as cuda_graph_blocks, cuda_graphs as cuda_graphs
from .graphs import default_graph_counts as default_graph_counts, graphed as graphed
from .graphs import set_default_graphs as set_default_graphs, set_default_tapes as set_default_tapes
from . import captures, tapes

_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_SCALARS = (bool, int, float)
_INTEGRAL = (int, bool)
# `TRANSPILE_BACKEND=triton` sends CPU tensors to Triton too (with TRITON_INTERPRET=1:
# how the Triton kernels are tested without a GPU); `eager` turns every kernel off.
_FORCED = os.environ.get("TRANSPILE_BACKEND", "")
# `TRANSPILE_COMPILE=sync`: a Triton kernel compiles on its signature's first call, which waits for it.
_BACKGROUND = os.environ.get("TRANSPILE_COMPILE", "background") != "sync"
COMPILING = "fallback: compiling in the background"
EMPTY = "empty: no element to compute"

KERNELS: list["Kernel"] = []
MAX_PLANS = 256  # call signatures remembered per kernel

# Make later generated files able to `import _transpile_runtime` however this package
# was first imported (as `compiled._transpile_runtime` or from the output root).
sys.modules.setdefault("_transpile_runtime", sys.modules[__name__])


class Plan(NamedTuple):
    """How every call with one signature runs: the outputs to allocate, and the launch."""

    outputs: tuple[tuple[torch.Size, tuple[int, ...], torch.dtype], ...]  # shape, strides and dtype per output
    device: torch.device
    launch: Callable[[tuple, tuple, tuple], None]  # (tensors, scalars, outputs): fills the outputs
    path: str  # what the counters count its calls as: the backend's name, or EMPTY (nothing to launch)
    # Per output, the shape eager gives it where that is smaller than the kernel's (a value computed
    # before a larger input broadcasts in): the kernel fills all of its shape, the call returns a copy
    # of the part at index 0 along the broadcast dims. Empty: every output as allocated.
    narrow: tuple[torch.Size | None, ...] = ()


class _Compiling(NamedTuple):
    """A plan whose kernel compiles in the background: its calls take the original code meanwhile."""

    plan: Plan

    def settled(self, kernel: "Kernel") -> "Plan | str | _Compiling":
        """The plan once its kernel is ready, the reason to fall back if it failed to compile, else self."""
        try:
            if not self.plan.launch.ready():
                return self
        except Exception as error:  # whatever the compiler raised, the original code is still right
            warnings.warn(
                f"{kernel!r}: the kernel failed to compile, the original code runs: {error}",
                RuntimeWarning,
                stacklevel=2,
            )
            return f"fallback: the kernel failed to compile ({type(error).__name__})"
        return self.plan


class _Compiler:
    """Threads that compile kernels, and the compiles not finished yet.

    Daemon threads, not a ThreadPoolExecutor: the executor's workers are joined at exit, so
    a short script would wait for every queued compile before exiting. At exit the queued
    compiles are cancelled and the running ones (at most one a thread) finished: a thread
    cut off inside Triton's native code or its gcc run crashed the exiting interpreter on
    the H100 ("FATAL: exception not rethrown", a launcher's .so half linked). Threads, not
    processes: Triton's compile holds the GIL for most of its work (its Python front end
    and MLIR passes; ptxas and gcc run as subprocesses), but a process would first import
    torch and triton, seconds that a first call must not pay.
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._pending: set[concurrent.futures.Future] = set()

    def submit(self, job: Callable[[], object]) -> concurrent.futures.Future:
        """Run `job` on a compile thread; a Future of its result (Executor's interface, as Triton expects)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self._pending.add(future)
            if len(self._workers) < self.threads:  # started on demand: a model without Triton kernels starts none
                worker = threading.Thread(target=self._work, name="transpile-compile", daemon=True)
                worker.start()
                self._workers.append(worker)
        future.add_done_callback(self._finished)
        self._jobs.put((future, job))
        return future

    def _work(self) -> None:
        while True:
            future, job = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except BaseException as error:  # a future left unset would hang wait_for_kernels
                future.set_exception(error)

    def _finished(self, future: concurrent.futures.Future) -> None:
        with self._lock:
            self._pending.discard(future)

    def wait(self, timeout: float | None) -> bool:
        with self._lock:
            pending = list(self._pending)
        return not concurrent.futures.wait(pending, timeout).not_done

    def shutdown(self) -> None:
        """Cancel the compiles not started yet and wait for those running (at exit)."""
        with self._lock:
            pending = list(self._pending)
        running = [future for future in pending if not future.cancel()]
        concurrent.futures.wait(running, timeout=EXIT_WAIT_S)


# Two threads: the GIL leaves little to gain from more (ptxas and gcc overlap), and the caller's
# original code competes with them for it.
_COMPILER = _Compiler(max(1, int(os.environ.get("TRANSPILE_COMPILE_THREADS", "2"))))
EXIT_WAIT_S = 60.0  # a compile takes ~1 s; a hung one must not keep the process from exiting
atexit.register(_COMPILER.shutdown)


def _warm_triton() -> None:
    """Triton's per-process start-up, off the first call's path: the hash of its installed files that keys its
    caches (`triton_key`, 0.75 s on the lent H100's host) and its CUDA driver's helper module (built with the C
    compiler when ~/.triton/cache is empty, 0.5 s). Neither touches the GPU. The first kernel call joins this
    thread (`_Triton`) rather than doing the same work beside it."""
    try:
        import triton
    except Exception:  # the first kernel call says why, as before
        return
    for step in (triton.runtime.cache.triton_key, lambda: triton.runtime.driver.active):  # the property builds
        try:
            step()
        except Exception:  # no active driver (no GPU): the first kernel call says why, as before
            pass


WARM_THREAD = "transpile-warm-triton"


def _warm_up_triton_in_background() -> threading.Thread | None:
    """Start `_warm_triton` on a daemon thread where Triton kernels will compile (CUDA, background compiles),
    unless one runs already: a process may import two copies of this package (an output tree imported both as
    a package and from its root on sys.path), and Triton's start-up is the process's."""
    if _FORCED == "eager" or not _BACKGROUND or os.environ.get("TRITON_INTERPRET") == "1":
        return None
    if importlib.util.find_spec("triton") is None or not torch.cuda.is_available() or _warming():
        return None
    if _precompiled_for_cuda():  # kernels built ahead of time load without Triton's compiler or its driver module
        return None
    thread = threading.Thread(target=_warm_triton, name=WARM_THREAD, daemon=True)
    thread.start()
    # Joined at exit, as the compile threads are: cut off inside its C compiler run, it could crash the exit.
    atexit.register(thread.join, EXIT_WAIT_S)
    return thread


def _precompiled_for_cuda() -> bool:
    """Whether the tree's Triton kernels were built ahead of time (`precompile --targets sm_...`), for the launches
    its runs recorded: a launch left out compiles as without artifacts, with its own start-up."""
    from .artifacts import ROOT, read_manifest

    manifest = read_manifest(ROOT)
    return isinstance(manifest, dict) and "triton" in manifest and os.environ.get("TRANSPILE_ARTIFACTS") != "0"


def _warming() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == WARM_THREAD]


_warm_up_triton_in_background()


def wait_for_kernels(timeout: float | None = None) -> bool:
    """Block until every kernel compile started so far has finished; False if `timeout` seconds passed first.

    A plan whose compile finished launches its kernel from its next call on (or falls back
    for good, counted, if the compile failed). Call it before capturing a CUDA graph, and
    where a first call must run the kernels: after one call that plans the signatures.
    """
    return _COMPILER.wait(timeout)


def _in_backward() -> bool:
    """Whether this thread runs inside an autograd backward (a graph task)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


def _autocast() -> tuple:
    """The autocast regions the call runs in, per device type, with their dtypes; () outside autocast.

    Autocast makes some ops compute in float32 (on CUDA: exp, pow, softmax, the norms, sum, ...), so
    eager's dtypes differ inside it: plans are kept per state, and the dtype probe runs in it."""
    return tuple((d, torch.get_autocast_dtype(d)) for d in ("cpu", "cuda") if torch.is_autocast_enabled(d))


def _signature(tensors: tuple, scalars: tuple) -> tuple | None:
    """What a call's plan depends on, as a dict key; None when an input is not a tensor.

    Layout: type, shape, strides, dtype and device. Triton specialises a compiled kernel
    on data pointers being 16-byte aligned and on integer argument values, so those
    are in the key too; float scalars only by type (promotion depends on nothing else).
    A list built in place, not a generator: this runs on every call.
    """
    try:
        key = [(type(t), t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16) for t in tensors]
    except (AttributeError, RuntimeError, TypeError):  # not a tensor, or one without storage
        return None
    if scalars:
        key += [s if type(s) in _INTEGRAL else type(s) for s in scalars]
    return tuple(key)


def _activation_codes(scalars: tuple, table: Activations, positions: tuple[int, ...], alone: bool) -> tuple | str:
    """`scalars` with the activation module at each of `positions` replaced by its code, or why not.

    `alone`: the region is the activation and nothing else, worth a kernel only where the
    module's own forward launches several.
    """
    codes = None  # made once a module is taken: most calls of an activation alone are refused
    for position in positions:
        entry = table.entry(scalars[position])
        if entry is None:
            return "fallback: an activation module the kernels do not compute"
        if alone and entry.eager_kernels <= 1:
            return "fallback: the activation alone is one eager kernel already"
        if codes is None:
            codes = list(scalars)
        codes[position] = entry.code
    return scalars if codes is None else tuple(codes)


def _rounds_zero_dim(tensors) -> bool:
    """Whether torch would round a 0-dim float input to a narrower dtype before computing.

    A 0-dim tensor does not take part in promotion against tensors with dims of its
    category: `x_bf16 % torch.tensor(1.541)` rounds 1.541 to bfloat16 first. Kernels load
    every input in its own dtype, so such calls take the original code.
    """
    dims = [t.dtype for t in tensors if t.dim() and t.is_floating_point()]
    return any(
        torch.promote_types(t.dtype, dtype) != dtype
        for t in tensors
        if not t.dim() and t.is_floating_point()
        for dtype in dims
    )


def inplace(result: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
    """What `tensor.op_(...)` leaves in `tensor`, given `result` of the out-of-place op: eager casts it to the
    tensor's dtype, and raises where torch does not cast that way (a float result into an int tensor)."""
    if not torch.can_cast(result.dtype, tensor.dtype):
        raise RuntimeError(f"result type {result.dtype} can't be cast to the desired output type {tensor.dtype}")
    return result.to(tensor.dtype)


def _shiftable(tensors: list, shape: torch.Size) -> bool:
    """Whether a kernel can read `tensors` at the other half of the last dim of its iteration space `shape`: each
    holds that whole dim, of even length, at stride 1 (ops.SHIFTED_OPS's conditions, for a backward's inputs)."""
    return (
        bool(shape)
        and shape[-1] % 2 == 0
        and all(t.dim() and t.shape[-1] == shape[-1] and t.stride(-1) == 1 for t in tensors)
    )


def _nothing(tensors, scalars, outputs) -> None:
    """The launch of a plan whose outputs are empty."""


class Kernel:
    """A fused region: its eager reference, its kernels, and how often each path ran."""

    def __init__(
        self,
        name: str,
        reference,
        tensor_inputs: int,
        shapes: Shapes,
        source: str,
        triton: tuple[Path, str] | None = None,
        cpp: Path | None = None,
        rows: Rows | None = None,
        like_inputs: tuple[int, ...] = (),
        activations: tuple[Activations, tuple[int, ...], bool] | None = None,
        bool_hazards: tuple[tuple[int, ...], ...] = (),
        same_as: str | None = None,
        renamed: dict[str, str] | None = None,
        gradients: "Gradients | None" = None,
        shifted: tuple[int, ...] = (),
    ) -> None:
        self.name = name
        # Its kernels' name in the kernel files: its own, or that of an earlier region computing the same thing
        # on values of other names; `renamed` maps its values' names to theirs where they differ. Shapes and
        # dtypes are then kept by the kernels' names, which the C++ kinds and Triton parameters use.
        self.entry = same_as or name
        self._renamed = renamed or {}
        self.reference = reference  # the region in eager PyTorch: (tensors..., scalars...) -> tuple
        self.tensor_inputs = tensor_inputs  # the first arguments are tensors, the rest Python scalars
        # How each value's shape follows from the inputs', as in eager.
        self.shapes = _renamed_shapes(shapes, self._renamed) if renamed else shapes
        # Tensor inputs no step reads for its shape (read for their dtype only): they join no broadcast.
        read = {r for step in shapes.steps for r in step.reads}
        self.dtype_only = frozenset(n for n, name in enumerate(shapes.inputs) if name not in read)
        self.source = source  # `path:first-last` of the statements it replaces
        self._triton_file = triton
        self._cpp_file = cpp
        self.rows = rows  # None: a pointwise kernel
        # Casts to the dtype of a value the region computes: the kernels cast to the dtype of these
        # tensor inputs instead, one per value the reference returns after the outputs.
        self.like_inputs = like_inputs
        # The table of activation modules, which scalar inputs are such modules (`self.act`), and
        # whether the region is one alone: kernels take their codes, the reference the modules.
        self.activations = activations
        # Sets of tensor inputs (positions) which, when all are bool, make eager keep as bool a value the
        # kernels compute as a number (`m + m` is True, not 2): such calls take the original code.
        self.bool_hazards = bool_hazards
        # Tensor inputs a backward kernel reads at the other half of the last dim (rotate_half's backward): each
        # must hold that whole dim, even, at stride 1, or the call takes the reference.
        self.shifted = shifted
        # The kernel computing its inputs' gradients (None: calls under autograd take the original code).
        self.gradients = gradients
        # Tensor inputs no output is computed from through ops carrying gradients (a value the original code
        # reads only in its fallback): passed to autograd detached, so a gradient never reaches them or their
        # producers, as in eager.
        self._no_gradient = frozenset()
        if gradients is not None and gradients.sources:
            self._no_gradient = frozenset(range(tensor_inputs)).difference(*gradients.sources)
        # Whether a new signature's Triton kernel compiles in the background (its calls falling back meanwhile).
        # A backward kernel compiles on its first call instead: it runs on autograd's thread, where background
        # compiles on the H200 were seen to stay pending (benchmarks/RESULTS.md, issue 19).
        self.background = True
        if gradients is not None:
            for backward in gradients.kernel if isinstance(gradients.kernel, tuple) else (gradients.kernel,):
                backward.background = False
        self.counts: collections.Counter[str] = collections.Counter()
        self._signature_plans = functools.lru_cache(maxsize=256)(self._signature_plan)
        self._plans: dict[tuple, Plan | str] = {}  # per call signature (see `_signature`)
        # Under autograd, per call signature: the reduced dim's length and why the node cannot take it (`_autograd`).
        self._autograd: dict[tuple, tuple[int | None, str | None]] = {}
        KERNELS.append(self)

    def __repr__(self) -> str:
        return f"<kernel {self.name} for {self.source}>"

    def __call__(self, *args):
        """The region's outputs computed by a kernel, or None to run the original code; while a tape records
        (tapes.py), a call that ran its kernel is recorded as one call."""
        recorder = tapes.recorder()
        if recorder is None:
            return self._run(*args)
        with recorder.paused():
            outputs = self._run(*args)
        if outputs is not None:
            recorder.kernel(self, args, outputs)
        return outputs

    def _run(self, *args):
        """The region's outputs computed by a kernel, or None to run the original code.

        The path of a call whose signature was seen before is kept short (it runs on every call of a
        forward, between library calls): a signature, a dict lookup, the outputs and the launch. A
        signature refused once is refused by the same lookup.
        """
        tensors, scalars = args[: self.tensor_inputs], args[self.tensor_inputs :]
        modules = scalars
        if self.activations is not None:
            scalars = _activation_codes(modules, *self.activations)
            if type(scalars) is str:
                self.counts[scalars] += 1
                return None
        key = _signature(tensors, scalars)
        if key is not None and (autocast := _autocast()):
            key += autocast  # autocast changes eager's dtypes (CUDA's softmax of a half is float32)
        if captures.DIRECTORY is not None and key is not None:
            captures.save(self, key, args)
        if key is None:
            plan = "fallback: an input is not a plain tensor"
        elif torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            if self.gradients is not None:
                return self._differentiable(key, tensors, scalars, modules)
            plan = "fallback: autograd needs the original code"
        else:
            plan = self._planned(key, tensors, scalars, modules)
        return self._launch(key, plan, tensors, scalars)

    def _planned(self, key: tuple, tensors: tuple, scalars: tuple, modules: tuple) -> Plan | str:
        plan = self._plans.get(key)
        if plan is None or type(plan) is _Compiling:
            if type(plan) is _Compiling and _in_backward():
                # A forward rerun inside a backward (`torch.utils.checkpoint`'s recomputation) takes the path its
                # first run took: it found the kernel compiling and ran the original code. The kernel joins at
                # the next call outside a backward; a recomputation saving other tensors would be an error.
                return COMPILING
            plan = self._settled_plan(key, plan, tensors, scalars, modules)
        return plan

    def _launch(self, key: tuple | None, plan: Plan | str, tensors: tuple, scalars: tuple):
        """The outputs `plan` computes from the inputs, or None (counted) to run the original code."""
        if type(plan) is str:
            self.counts[plan] += 1
            return None
        device = plan.device
        outputs = tuple(
            [torch.empty_strided(size, strides, dtype=dtype, device=device) for size, strides, dtype in plan.outputs]
        )
        try:
            plan.launch(tensors, scalars, outputs)
        except Exception as error:  # a kernel that does not compile here (its first launch compiles it)
            warnings.warn(f"{self!r}: the kernel failed, the original code runs: {error}", RuntimeWarning, stacklevel=3)
            reason = f"fallback: the kernel failed to compile ({type(error).__name__})"
            self._plans[key] = reason  # and keeps running, for this signature
            self.counts[reason] += 1
            return None
        self.counts[plan.path] += 1
        if plan.narrow:
            outputs = tuple(o if shape is None else _narrowed(o, shape) for o, shape in zip(outputs, plan.narrow))
        return outputs

    def _differentiable(self, key: tuple, tensors: tuple, codes: tuple, scalars: tuple):
        """The outputs computed by the kernel, recorded by autograd as one node whose backward runs the kernel
        of `self.gradients`; or None (counted) to run the original code. `codes`: the scalars with an activation
        module's code in its place. The plan and `_autograd`'s facts are those of the signature `key` (which a
        tensor's requiring grad does not change): a call costs one dict lookup more than one without autograd."""
        gradients = self.gradients
        backward, passed = gradients.kernel, scalars
        if gradients.activation is not None:  # the backward of the op the module maps to, given the other scalars
            backward = backward[codes[gradients.activation]]
            passed = scalars[: gradients.activation] + scalars[gradients.activation + 1 :]
        facts = self._autograd.get(key)
        if facts is None:
            if len(self._autograd) >= MAX_PLANS:
                self._autograd.clear()
            facts = self._autograd[key] = _autograd(self.shapes, tensors, gradients, self.rows)
        row_length, refused = facts
        if refused is not None:
            self.counts[refused] += 1
            return None
        with torch.no_grad():  # the kernel reads the inputs' memory: no need to detach them
            outputs = self._launch(key, self._planned(key, tensors, codes, scalars), tensors, codes)
        if outputs is None:
            return None
        if self._no_gradient:
            tensors = tuple(t.detach() if n in self._no_gradient else t for n, t in enumerate(tensors))
        return _Differentiated.apply(self, (outputs, backward, passed, row_length), *tensors)

    # -- planning, once per input signature -----------------------------------------------
    def _settled_plan(
        self, key: tuple, plan: "_Compiling | None", tensors: tuple, scalars: tuple, modules: tuple
    ) -> Plan | str:
        """The plan of a signature seen for the first time (`plan` None: made now), or whose kernel was compiling."""
        if plan is None:
            if len(self._plans) >= MAX_PLANS:  # shapes that keep changing: keep the cache bounded
                self._plans.clear()
            plan = self._plan(tensors, scalars, modules)
            if self.background:
                plan = _compile_in_background(plan, tensors, scalars)
            self._plans[key] = plan
        if type(plan) is _Compiling:
            plan = self._plans[key] = plan.settled(self)
            if type(plan) is _Compiling:
                return COMPILING
        return plan

    def _plan(self, tensors: tuple, scalars: tuple, modules: tuple) -> Plan | str:
        """How calls with this signature run: a Plan, or the reason they take the original code.

        `modules`: the scalars as the caller passed them, activation modules where `scalars` has their codes.
        """
        if _FORCED == "eager":
            return "fallback: TRANSPILE_BACKEND=eager"
        if not all(type(t) in _PLAIN_TENSORS for t in tensors):
            return "fallback: an input is not a plain tensor"
        if not all(type(s) in _SCALARS for s in scalars):
            return "fallback: a scalar input is not a Python number"
        device = tensors[0].device
        if any(t.device != device for t in tensors):
            return "fallback: inputs on several devices"
        if _rounds_zero_dim([t for i, t in enumerate(tensors) if i not in self.dtype_only]):
            return "fallback: a 0-dim tensor of a wider float dtype (torch rounds it first)"
        signature = tuple((t.shape, t.dtype) for t in tensors) + tuple(type(s) for s in scalars) + _autocast()
        try:
            values, dtypes, value_dtypes = self._signature_plans(signature, modules, device)
        except (RuntimeError, TypeError, ValueError, IndexError) as error:  # torch would raise: the original code does
            return f"fallback: {type(error).__name__} from torch"
        read = [t for i, t in enumerate(tensors) if i not in self.dtype_only]
        try:
            shape = broadcast([t.shape for t in read])
        except ValueError:
            return "fallback: values of shapes that do not broadcast together"
        if self.shifted and not _shiftable([tensors[i] for i in self.shifted], shape):
            return "fallback: an input read at the other half is not of the whole, even last dim at stride 1"
        outputs = [values[v] for v in self.shapes.outputs]
        # Only the inputs read for their values are indexed; a dtype-only input stands in as 0-dim.
        tensors = tuple(t.new_empty(()) if i in self.dtype_only else t for i, t in enumerate(tensors))
        dtypes, computed = dtypes[: len(outputs)], dtypes[len(outputs) :]
        backend = _backend(device)
        if backend is None:
            return f"fallback: no kernel for {device.type} tensors"
        typing = backend.typing(self, tensors, dtypes, computed, value_dtypes)
        if isinstance(typing, str):
            return f"fallback: {typing}"
        if self._rounds_integers(value_dtypes):
            return "fallback: an integer that eager rounds to half or bfloat16 before an op"
        if self.rows is not None:
            return self._plan_rows(backend, tensors, scalars, shape, values, dtypes, typing)
        narrow = _narrowing(outputs, [shape] * len(outputs))
        if narrow is None:
            return "fallback: an output's shape is not the broadcast of the inputs'"
        dense = _shared_dense_strides(tensors, shape)
        if dense is not None:  # e.g. all channels_last: one linear index over the memory serves every tensor
            contiguous, sizes, strides = True, (), []
        else:
            # Inputs of the full shape in one dense layout beside broadcast ones (a channels_last feature map
            # and per-channel parameters): the kernel walks the memory order, the outputs keep the layout.
            dense = _full_inputs_dense_strides(tensors, shape)
            order = None if dense is None else sorted(range(len(shape)), key=lambda d: -dense[d])
            contiguous, sizes, strides = layout(tensors, shape, order)
            dense = dense or tuple(_contiguous_strides(shape))
        if sizes is None:
            return f"fallback: more than {RANK} dimensions after merging"
        n_elements = math.prod(shape)
        if n_elements >= 2**31:
            return "fallback: 2**31 elements or more"
        launch = _nothing
        if n_elements:
            launch = backend.pointwise(self, typing, len(scalars), n_elements, sizes, strides, contiguous)
            if isinstance(launch, str):
                return f"fallback: {launch}"
        path = backend.name if n_elements else EMPTY
        return Plan(tuple((shape, dense, dtype) for dtype in dtypes), device, launch, path, narrow)

    def _plan_rows(self, backend, tensors, scalars, shape, values, dtypes, typing) -> Plan | str:
        """A kernel with reductions: the rows of the iteration space `shape` along the reduced dim.

        `values`: the shape of every value, by name, as eager computes them. A reduction's dim
        is its operand's, right-aligned in the space (`x.sum(-2)` of a 2-d x beside a 3-d y
        reduces the space's dim 1, once per row of y's leading dim). A space of 0 dims (every
        input 0-dim) is one row of one column. `typing`: what the backend's `typing` gave the call.
        """
        rows = self.rows
        space, dim = (shape, None) if shape else (torch.Size([1]), 0)
        for step in self.shapes.steps:
            if step.dim is None or not shape:
                continue
            operand = values[step.reads[0]]
            if not operand:
                return "fallback: a reduction of a 0-dim value beside larger inputs"
            own = step.dim % len(operand)  # value_shapes checked the range
            at = own + len(shape) - len(operand)
            if dim is not None and at != dim:
                return "fallback: reductions along different dims of the iteration space"
            # An operand broadcast along the reduced dim would count one value R times.
            if operand[own] != shape[at]:
                return "fallback: a reduction's operand does not span the iteration space's reduced dim"
            dim = at
        if dim is None:
            return "fallback: no reduction step"
        shape = space
        row_size = shape[dim]
        if row_size == 0:
            return "fallback: reduction over an empty dim"
        plan = row_layout(tensors, shape, dim)
        if plan is None:
            return f"fallback: more than {abi.ROW_DIMS} row dims after merging"
        outer_sizes, strides, contiguous = plan
        reduced = list(shape)
        if rows.keepdim:
            reduced[dim] = 1
        else:
            del reduced[dim]
        expected = [torch.Size(reduced) if n in rows.row_outputs else shape for n in range(len(dtypes))]
        narrow = _narrowing([values[v] for v in self.shapes.outputs], expected)
        if narrow is None:
            return "fallback: an output's shape is not the kernel's"
        outputs = tuple(
            (size, tuple(_contiguous_strides(size)), dtype)
            for size, dtype in (
                (torch.Size(reduced) if n in rows.row_outputs else shape, dtype) for n, dtype in enumerate(dtypes)
            )
        )
        if outputs and max(math.prod(s) for s, _, _ in outputs) >= 2**31:
            return "fallback: 2**31 elements or more"
        n_rows = math.prod(outer_sizes)
        launch = _nothing
        if n_rows:
            # Every element output is a contiguous tensor of `shape`: one layout serves them all.
            strides = strides[:-1] + strides[-1:] * (len(outputs) - len(rows.row_outputs))
            launch = backend.rows(self, typing, len(scalars), n_rows, row_size, outer_sizes, strides, contiguous)
            if isinstance(launch, str):
                return f"fallback: {launch}"
        path = backend.name if n_rows else EMPTY
        return Plan(outputs, device=tensors[0].device, launch=launch, path=path, narrow=narrow)

    def _rounds_integers(self, value_dtypes: dict[str, torch.dtype]) -> bool:
        """Whether an op meets an integer with a half or bfloat16 value: eager rounds the integer to that dtype
        first (`i + x_half` of 2049 adds 2048), the kernels convert it exactly and round only the result.

        A value computed from one tensor alone is a cast where it turns an integer into a half (exact in
        both); `i * 0.5` is a float32.
        """
        narrow = (torch.float16, torch.bfloat16)
        for step in self.shapes.steps:
            if len(step.reads) > 1 and value_dtypes.get(step.value) in narrow:
                read = [value_dtypes.get(r) for r in step.reads]
                if any(d is not None and not d.is_floating_point and d != torch.bool for d in read):
                    return True
        return False

    def _signature_plan(
        self, signature: tuple, scalars: tuple, device: torch.device
    ) -> tuple[dict[str, torch.Size], tuple[torch.dtype, ...], dict[str, torch.dtype]]:
        """Every value's shape, the outputs' dtypes and every value's dtype for one input signature, as torch
        computes them.

        Shapes: by the kernel's shape program (`value_shapes`), which raises where eager
        would. Dtypes: the eager reference run on one-element tensors of the input dtypes
        (0-dim where an input is 0-dim, since that changes promotion), on the call's device:
        some errors are the device's (CUDA's `where` rejects a 1e30 scalar beside a half
        tensor, CUDA's layer norm a float32 weight beside a half input; the CPU's take both).
        Meta tensors would do both, but their first use imports torch's Python meta kernels
        and sympy: a second that a first call must not pay. The reference computes one value
        a line, named as in the region: its locals give each value's dtype (`_run_keeping_locals`).
        """
        values = value_shapes(self.shapes, [shape for shape, _ in signature[: self.tensor_inputs]])
        samples = [
            torch.ones((1,) * len(s), dtype=dtype, device=device) for s, dtype in signature[: self.tensor_inputs]
        ]
        with warnings.catch_warnings():  # about the one-element samples (a std's degrees of freedom), not the call's
            warnings.simplefilter("ignore")
            results, local = _run_keeping_locals(self.reference, (*samples, *scalars))
        value_dtypes = {self._renamed.get(n, n): v.dtype for n, v in local.items() if isinstance(v, torch.Tensor)}
        return values, tuple(r.dtype for r in results), value_dtypes

    # -- kernels, loaded on first use ---------------------------------------------------
    @functools.cached_property
    def triton_kernel(self):
        path, function = self._triton_file
        return getattr(_load_file(path), function)

    @functools.cached_property
    def cpp_library(self):
        """The kernel file's CppLibrary, or why its kernels fall back (warned once, never built again)."""
        from .cpp_support import CppLibrary

        return CppLibrary.for_file(self._cpp_file)


def _run_keeping_locals(function, args: tuple) -> tuple[object, dict[str, object]]:
    """`function(*args)` and the local variables it ended with (a profile hook sees its frame return)."""
    kept: dict[str, object] = {}

    def profile(frame, event, arg) -> None:
        if event == "return" and frame.f_code is function.__code__:
            kept.update(frame.f_locals)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = function(*args)
    finally:
        sys.setprofile(previous)
    return result, kept


def _compile_in_background(plan: Plan | str, tensors: tuple, scalars: tuple) -> Plan | str | _Compiling:
    """`plan`, as `_Compiling` while its kernel compiles: launchers with a `compile` method can start one."""
    if isinstance(plan, str) or not _BACKGROUND:
        return plan
    compile = getattr(plan.launch, "compile", None)
    if compile is None or not compile(tensors, scalars, [dtype for _, _, dtype in plan.outputs], _COMPILER):
        return plan
    return _Compiling(plan)


def _narrowing(eager, kernel) -> tuple[torch.Size | None, ...] | None:
    """Per output, its eager shape where the kernel's is larger (else None), or None when an eager
    shape is not part of the kernel's: right-aligned, each of its dims the kernel's size or 1.

    A value of a smaller shape than the kernel's is computed from inputs that broadcast along
    the missing dims, so every position along them holds the same value (reductions too: their
    operands span the reduced dim, `_plan_rows` checks). `()` when no output is narrowed.
    """
    narrow = []
    for have, full in zip(eager, kernel, strict=True):
        if have == full:
            narrow.append(None)
            continue
        if len(have) > len(full) or any(h not in (f, 1) for h, f in zip(reversed(have), reversed(full))):
            return None
        if math.prod(full) == 0 and math.prod(have):  # a (1,) value beside a (0,) input: the kernel computes none
            return None
        narrow.append(torch.Size(have))
    return tuple(narrow) if any(n is not None for n in narrow) else ()


def _narrowed(output: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """A contiguous copy of `output`'s part of `shape` (see `_narrowing`): index 0 along the dims it lacks."""
    skip = output.dim() - len(shape)
    strides = [0 if size == 1 else stride for size, stride in zip(shape, output.stride()[skip:])]
    return output.as_strided(shape, strides).clone(memory_format=torch.contiguous_format)


def broadcast(shapes) -> torch.Size:
    """The broadcast of `shapes` (torch's rules); ValueError when they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    result = [1] * ndim
    for shape in shapes:
        for d, size in enumerate(shape, ndim - len(shape)):
            if size != result[d]:
                if result[d] != 1 and size != 1:
                    raise ValueError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
                result[d] = size if result[d] == 1 else result[d]
    return torch.Size(result)


def layout(tensors, shape, order=None) -> tuple[bool, tuple[int, ...] | None, list[tuple[int, ...]]]:
    """How kernels index the inputs: (contiguous, sizes, strides per tensor).

    Contiguous: every input is contiguous with exactly the output's shape, so one
    linear index serves all. Otherwise the iteration space is `shape` with its dims in
    `order` (outermost first; default their own order), broadcast dims given stride 0,
    dims that are contiguous in every tensor merged (also the output's, which is dense in
    that order), and the result padded on the left to RANK dims; sizes is None when more
    than RANK dims remain.
    """
    if order is None and all(t.shape == shape and t.is_contiguous() for t in tensors):
        return True, (), []
    ndim = len(shape)
    strides = [
        [0] * (ndim - t.dim()) + [0 if size == 1 else stride for size, stride in zip(t.shape, t.stride())]
        for t in tensors
    ]
    sizes = list(shape)
    dims = range(ndim) if order is None else order
    merged_sizes, merged = _merge_dims(sizes, strides, [d for d in dims if sizes[d] != 1])
    if len(merged_sizes) > RANK:
        return False, None, []
    pad = RANK - len(merged_sizes)
    return False, (1,) * pad + tuple(merged_sizes), [(0,) * pad + tuple(m) for m in merged]


def _shared_dense_strides(tensors, shape) -> tuple[int, ...] | None:
    """The strides every input has, where they are a dense layout of `shape` other than the contiguous one.

    Inputs that all share one dense, non-overlapping layout (channels_last, a transposed
    matrix) are read by one linear index, and outputs given the same strides keep the
    layout, as eager's pointwise ops do: a convolution after them then needs no conversion.
    """
    first = tensors[0]
    strides = first.stride()
    if first.shape != shape or first.is_contiguous() or any(t.shape != shape or t.stride() != strides for t in tensors):
        return None
    expected = 1
    for size, stride in sorted(
        ((size, stride) for size, stride in zip(shape, strides) if size != 1), key=lambda d: d[1]
    ):
        if stride != expected:
            return None
        expected *= size
    return strides


def _full_inputs_dense_strides(tensors, shape) -> tuple[int, ...] | None:
    """The strides the inputs of exactly `shape` share, where they are channels_last (4-D or 5-D) and some input
    broadcasts (else `_shared_dense_strides` or the contiguous layout serve).

    Only channels_last: every torch op gives its output that layout when its input has it (batch norm, say),
    where other permutations keep theirs through pointwise ops only; a region ends in either kind."""
    full = [t for t in tensors if t.shape == shape]
    if not full or len(full) == len(tensors) or len(shape) not in (4, 5):
        return None
    memory_format = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    if not full[0].is_contiguous(memory_format=memory_format):
        return None
    return _shared_dense_strides(full, shape)


def _merge_dims(sizes, strides, dims: list[int]) -> tuple[list[int], list[list[int]]]:
    """`dims` of `sizes` in order, a dim merged into the previous one where it continues it in
    every tensor's `strides`; the merged sizes, and each tensor's strides along them."""
    merged_sizes: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for d in dims:
        if merged_sizes and all(m[-1] == s[d] * sizes[d] for m, s in zip(merged, strides)):
            merged_sizes[-1] *= sizes[d]
            for m, s in zip(merged, strides):
                m[-1] = s[d]
        else:
            merged_sizes.append(sizes[d])
            for m, s in zip(merged, strides):
                m.append(s[d])
    return merged_sizes, merged


class Gradients(NamedTuple):
    """A kernel's backward (transpiler/compiler/autodiff.py): the Kernel computing the gradients of the tensor
    inputs at positions `inputs` from those of the outputs at positions `outputs`. It takes the forward's tensor
    inputs, those gradients, the forward's scalars and, with `row_length`, the reduced dim's length."""

    # The backward Kernel; for a kernel calling an activation module chosen at run time, one per activation code
    # (the op the module maps to), which takes the forward's scalars less the module at position `activation`.
    kernel: "Kernel | tuple[Kernel, ...]"
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    # Per forward output, the tensor inputs it is computed from through ops that carry gradients: it requires
    # grad, as in eager, only where one of them does.
    sources: tuple[tuple[int, ...], ...] = ()
    row_length: bool = False
    activation: int | None = None


class _Differentiated(torch.autograd.Function):
    """A kernel's outputs as autograd's node: it saves the kernel's tensor inputs, nothing it computed (the
    backward kernel recomputes what it needs), and runs the backward kernel, or its eager reference where
    that kernel cannot run. Twice differentiable it is not: `once_differentiable` makes a double backward
    raise a clear error.

    An output autograd gives no gradient (None: no loss reaches it) contributes none: an input computed into
    such outputs only gets None, as in eager, where autograd never reaches the ops computing them. The others'
    gradients are computed with zeros in its place."""

    @staticmethod
    def forward(ctx, kernel: "Kernel", computed: tuple, *tensors):
        outputs, ctx.backward, ctx.scalars, ctx.row_length = computed
        ctx.kernel = kernel
        ctx.save_for_backward(*tensors)
        ctx.set_materialize_grads(False)
        ctx.outputs = tuple((output.shape, output.dtype) for output in outputs)
        sources = kernel.gradients.sources
        ctx.mark_non_differentiable(
            *(
                output
                for n, output in enumerate(outputs)
                if not output.is_floating_point() or (sources and not any(tensors[i].requires_grad for i in sources[n]))
            )
        )
        return outputs

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *output_grads):
        gradients = ctx.kernel.gradients
        tensors = ctx.saved_tensors
        sources = gradients.sources
        given = [n for n, grad in enumerate(output_grads) if grad is not None]
        if not given:
            return (None,) * (2 + len(tensors))
        if len(given) < len(output_grads):
            if sources:  # only the outputs given a gradient carry it to inputs
                sources = tuple(s if n in given else () for n, s in enumerate(sources))
            output_grads = tuple(
                torch.zeros(shape, dtype=dtype, device=tensors[0].device) if grad is None else grad
                for grad, (shape, dtype) in zip(output_grads, ctx.outputs)
            )
        reached = {p for s in sources for p in s} if sources else None  # None: unknown, every input
        args = (*tensors, *(output_grads[n] for n in gradients.outputs), *ctx.scalars)
        if gradients.row_length:
            args += (ctx.row_length,)
        grads = ctx.backward(*args)
        if grads is None:  # counted by the backward kernel: its reference computes the same in eager
            grads = ctx.backward.reference(*args)[: len(gradients.inputs)]
        result = [None] * len(tensors)
        for position, grad in zip(gradients.inputs, grads):
            if ctx.needs_input_grad[2 + position] and (reached is None or position in reached):
                result[position] = _summed_to(grad, tensors[position].shape)
        # An input reached only through ops of zero derivative (`round`, `sign`) gets zeros, as eager's does, not
        # None: autograd's graph reaches it.
        for position in (reached or set()).difference(gradients.inputs):
            if ctx.needs_input_grad[2 + position]:
                result[position] = torch.zeros_like(tensors[position])
        return (None, None, *result)


def _summed_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """`grad` (of the iteration space's shape, or of a row value's) as the gradient of an input of `shape`:
    summed over the dims the input was broadcast along, as autograd does."""
    if grad.shape == shape:
        return grad
    # Most often the input was broadcast into `grad`'s shape: `sum_to_size` alone, without torch's Python
    # broadcast_shapes (~30 us a call); otherwise (a row value's gradient, narrower than the input) expand first.
    if len(shape) <= grad.dim() and all(s in (1, g) for s, g in zip(reversed(shape), reversed(grad.shape))):
        return grad.sum_to_size(shape)
    return grad.expand(torch.broadcast_shapes(grad.shape, shape)).sum_to_size(shape)


def _autograd(
    shapes: "Shapes", tensors: tuple, gradients: Gradients, rows: "Rows | None"
) -> tuple[int | None, str | None]:
    """For a call under autograd with these inputs: the length of the dim the reductions reduce (None: none) and
    why the kernel's node cannot take the call (None: it can).

    The backward kernel runs over the region's whole iteration space and reads an output's gradient where the
    forward computed the output. An output of fewer elements than that space (`h` of x's shape where `y = h * w`
    broadcasts over w's leading dims; a row output counts the reduced dim) would be read at several of its
    places, its gradient added to the inputs' as many times, where autograd sums the other outputs' over the
    broadcast first and adds it once (LLaMA's residual beside a norm whose weight broadcasts): such calls take
    the original code."""
    try:
        values = value_shapes(shapes, [t.shape for t in tensors])
    except (ValueError, IndexError):
        return None, "fallback: shapes eager rejects (the original code raises)"
    row_length = next(
        (values[s.reads[0]][s.dim] if values[s.reads[0]] else 1 for s in shapes.steps if s.dim is not None and s.reads),
        None,
    )
    if gradients.row_length and row_length is None:
        return None, "fallback: the reduced dim's length is unknown"
    space = max((math.prod(s) for s in values.values()), default=1)
    for n in gradients.outputs:
        elements = math.prod(values[shapes.outputs[n]])
        if elements * ((row_length or 1) if rows is not None and n in rows.row_outputs else 1) != space:
            return row_length, "fallback: an output smaller than the kernel's iteration space (its gradient is summed)"
    return row_length, None


class Step(NamedTuple):
    """How one value of a region gets its shape in eager PyTorch: a step of a kernel's shape program."""

    value: str  # its name in the region
    reads: tuple[str, ...]  # the values whose shapes broadcast into its own: tensor inputs, earlier steps'
    dim: int | None = None  # a reduction's or softmax's dim, as written
    keepdim: bool | None = None  # a reduction keeps its dim (size 1) or drops it; None: the operand's shape
    inplace: bool = False  # updates reads[0] in place: its shape must be the broadcast (eager raises otherwise)
    affine: bool = False  # layer norm: reads[1:] are its weight and bias, one value per element of the last dim


class Shapes(NamedTuple):
    """A kernel's shape program: its tensor inputs, a step per region node, and the value of each output."""

    inputs: tuple[str, ...]
    steps: tuple[Step, ...]
    outputs: tuple[str, ...]


def _renamed_shapes(shapes: Shapes, renamed: dict[str, str]) -> Shapes:
    """`shapes` with each value named as `renamed` says (by default as it is)."""

    def names(values: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(renamed.get(v, v) for v in values)

    steps = tuple(s._replace(value=renamed.get(s.value, s.value), reads=names(s.reads)) for s in shapes.steps)
    return Shapes(names(shapes.inputs), steps, names(shapes.outputs))


def value_shapes(shapes: Shapes, inputs) -> dict[str, torch.Size]:
    """The shapes of the tensor inputs and of each step's value, by name, as eager computes them.

    Raises ValueError (shapes that do not broadcast, an in-place update that would grow its
    tensor, a layer norm whose weight does not fit) or IndexError (a dim out of range) where
    eager raises; the caller then runs the original code, which raises the same error.
    """
    values = {name: torch.Size(s) for name, s in zip(shapes.inputs, inputs, strict=True)}
    for step in shapes.steps:
        operands = [values[r] for r in step.reads]
        shape = broadcast(operands)
        if step.inplace and shape != operands[0]:
            raise ValueError(f"an in-place update of a {tuple(operands[0])} tensor by {tuple(shape)} values")
        if step.affine and any(tuple(p) != tuple(operands[0][-1:]) for p in operands[1:]):
            raise ValueError("a layer norm weight or bias that is not one value per element of the last dim")
        if step.dim is not None:
            ndim = len(operands[0])
            if not -max(ndim, 1) <= step.dim < max(ndim, 1):
                raise IndexError(f"dim {step.dim} of a {ndim}-d tensor")
            if step.keepdim is not None and ndim:
                dim = step.dim % ndim
                shape = torch.Size([*operands[0][:dim], *([1] if step.keepdim else []), *operands[0][dim + 1 :]])
        values[step.value] = shape
    return values


class Rows(NamedTuple):
    """What a kernel with reductions needs besides a pointwise kernel's facts."""

    dim: int  # the reduced dim, as written (negative: from the end)
    keepdim: bool  # row outputs keep the reduced dim (size 1) or drop it
    row_outputs: tuple[int, ...]  # positions of the outputs with one value per row


def row_layout(tensors, shape, dim: int) -> tuple[tuple[int, int, int], list[tuple[int, ...]], bool] | None:
    """How row kernels index: (outer sizes, strides, contiguous), or None past abi.ROW_DIMS row dims.

    Rows are the dims of `shape` other than `dim`, in order, merged where every tensor
    (the inputs, then a contiguous output of `shape`) continues the previous dim, and
    padded on the left to abi.ROW_DIMS. Strides: per input, then one for the outputs:
    (abi.ROW_DIMS row-dim strides, the stride along `dim`), 0 where a tensor broadcasts.
    Contiguous: the reduced dim is the last and every input is a contiguous tensor of
    `shape`, so element (row, col) is at `row * shape[dim] + col` in every tensor.
    """
    ndim = len(shape)
    output = _contiguous_strides(shape)
    full = [
        [0] * (ndim - t.dim()) + [0 if size == 1 else stride for size, stride in zip(t.shape, t.stride())]
        for t in tensors
    ]
    full.append(output)
    merged_sizes, merged = _merge_dims(shape, full, [d for d in range(ndim) if d != dim and shape[d] != 1])
    if len(merged_sizes) > abi.ROW_DIMS:
        return None
    pad = abi.ROW_DIMS - len(merged_sizes)
    strides = [tuple([0] * pad + m + [s[dim]]) for m, s in zip(merged, full)]
    contiguous = dim == ndim - 1 and all(t.shape == shape and t.is_contiguous() for t in tensors)
    return (1,) * pad + tuple(merged_sizes), strides, contiguous


def _contiguous_strides(shape) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return strides[::-1]


def _load_file(path: Path):
    """Import a generated kernel file by path (it need not be on sys.path or in a package)."""
    name = f"_transpile_kernels_{abs(hash(str(path))):x}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class _Backend:
    """One kernel backend: whether its kernels take a call's dtypes, and launchers for planned geometries.

    `typing` returns what the launchers need to know of the call's dtypes, or why the kernels
    cannot take them; `pointwise` and `rows` return `launch(tensors, scalars, outputs)`, or why
    there is none.
    """

    name: str


class _Triton(_Backend):
    """Triton kernels load each input in its own dtype and round each value to the dtype eager holds it in on
    the call (`value_dtypes`), so a call with several floating dtypes needs no one dtype."""

    name = "triton"

    def __init__(self) -> None:
        for thread in _warming():  # what is left of Triton's start-up, rather than all of it again on this thread
            thread.join()
        from . import triton_support

        self.support = triton_support

    def typing(self, kernel: Kernel, tensors, dtypes, computed, value_dtypes) -> dict | str:
        """The call's value dtypes, or why the Triton kernels do not model them.

        Bools stay int1 in the kernels, so every op eager keeps bools in computes as eager on them (an add of
        two is their `or`); integer reductions accumulate in int64: neither needs a check here."""
        if any(dtype != tensors[i].dtype for dtype, i in zip(computed, kernel.like_inputs, strict=True)):
            return "a cast to the dtype of a computed value other than its input's"
        return self.support.unsupported(tuple(t.dtype for t in tensors), tuple(dtypes)) or value_dtypes

    def pointwise(self, kernel: Kernel, value_dtypes, scalars, n_elements, sizes, strides, contiguous):
        if _float64_beside_scalars(kernel, value_dtypes, scalars):
            return FLOAT64_BESIDE_SCALARS
        try:
            return self.support.pointwise_launcher(
                kernel.triton_kernel, n_elements, sizes, strides, contiguous, kernel.tensor_inputs, value_dtypes
            )
        except ValueError as error:  # int32 offsets would overflow, or a value the reference does not type
            return str(error)

    def rows(self, kernel: Kernel, value_dtypes, scalars, n_rows, row_size, outer_sizes, strides, contiguous):
        if _float64_beside_scalars(kernel, value_dtypes, scalars):
            return FLOAT64_BESIDE_SCALARS
        try:
            return self.support.rows_launcher(
                kernel.triton_kernel, n_rows, row_size, outer_sizes, strides, contiguous, value_dtypes
            )
        except ValueError as error:
            return str(error)


FLOAT64_BESIDE_SCALARS = "a scalar argument beside float64 values (Triton passes a Python float as a float32)"


def _float64_beside_scalars(kernel: Kernel, value_dtypes, scalars: int) -> bool:
    """Whether a Triton call computes float64 values and passes the kernel numbers (`scalars` of them, activation
    modules' codes aside): Triton types a Python float argument float32, where eager computes with the double."""
    modules = len(kernel.activations[1]) if kernel.activations else 0
    return scalars > modules and torch.float64 in value_dtypes.values()


class _Cpp(_Backend):
    """C++ kernels are templates over the dtypes of classes of values, bound per call (`cpp_support.bind`)."""

    name = "cpp"

    def __init__(self) -> None:
        from . import cpp_support

        self.support = cpp_support

    def typing(self, kernel: Kernel, tensors, dtypes, computed, value_dtypes):
        """The call's `cpp_support.Binding`, or why the C++ kernel cannot take it."""
        library = kernel.cpp_library
        if isinstance(library, str):  # no compiler, a failed build, an unusable cache
            return library
        kinds = library.kinds(kernel.entry)
        if kinds.unsupported is not None:
            return f"no C++ kernel: {kinds.unsupported}"
        inputs = {name: t.dtype for name, t in zip(kernel.shapes.inputs, tensors)}
        readers = {name: [step.value for step in kernel.shapes.steps if name in step.reads] for name in inputs}
        return self.support.bind(kinds, library.types(kernel.entry), inputs, value_dtypes, readers)

    def pointwise(self, kernel: Kernel, binding, scalars, n_elements, sizes, strides, contiguous):
        layout = self.support.pointwise_layout(n_elements, sizes, strides, contiguous)
        return kernel.cpp_library.launcher(kernel.entry, binding, layout)

    def rows(self, kernel: Kernel, binding, scalars, n_rows, row_size, outer_sizes, strides, contiguous):
        layout = self.support.rows_layout(n_rows, row_size, outer_sizes, strides, contiguous)
        return kernel.cpp_library.launcher(kernel.entry, binding, layout)


@functools.lru_cache(maxsize=None)
def _backend(device: torch.device):
    """The backend for tensors on `device`, or None (then every kernel falls back)."""
    try:
        if device.type == "cuda" or (device.type == "cpu" and _FORCED == "triton"):
            return _Triton()
        if device.type == "cpu":
            return _Cpp()
    except ImportError:  # triton is not installed: CUDA tensors take the original code
        return None
    return None


def counters() -> dict[str, dict[str, int]]:
    """How often each kernel ran on each path (`triton`, `cpp`, `fallback: <why>`)."""
    return {f"{k.name} ({k.source})": dict(k.counts) for k in KERNELS if k.counts}


def report() -> str:
    """`counters()` as a table, for logs."""
    lines = []
    for kernel, counts in counters().items():
        paths = ", ".join(f"{path}: {n}" for path, n in sorted(counts.items()))
        lines.append(f"{kernel}: {paths}")
    return "\n".join(lines) or "no kernel has run"
