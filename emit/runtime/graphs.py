"""CUDA graphs: the default replay of the forwards the build proved safe (`graphed`, emitted above them),
and the opt-in replay of a whole forward as one launch (`cuda_graphs`) or of each block of a model's layer
lists as one (`cuda_graph_blocks`), at the end of this file.

A transpiled model keeps its source's Python: the module calls, the mask set-up and the
ops left in eager run on every forward, and a batch-size-1-ish bf16 transformer spends
more time on the host issuing kernels than the GPU spends running them. `cuda_graphs`
records the kernels one forward launches and replays them, so the host cost of a call is
copying its tensor inputs and one graph launch (torch.compile's `mode="reduce-overhead"`
does the same for the code Dynamo captured).

    from compiled._transpile_runtime import cuda_graphs
    forward = cuda_graphs(model)            # or: model.forward = cuda_graphs(model.forward)
    with torch.no_grad():
        logits = forward(input_ids=ids).logits

A graph replays the Python decisions taken when it was recorded. It is recorded per call
signature: the structure of the arguments, every tensor's shape, strides, dtype and
device, the value of every other argument, and the module's training flags. Each call
also checks that the module's parameters and buffers are the tensors (and memory) it
recorded. Anything else a forward reads from Python state (a config attribute changed
after recording) is not seen: call `reset()` after such a change. Calls run the original
forward, counted with the reason, where a graph cannot be right or cannot be recorded:
autograd on, no CUDA tensor among the inputs, an argument that is not a tensor or a
plain value, an output that is neither (a cache object), a forward that waits on the device
other than to read a scalar (a copy to the host, data-dependent shapes), which fails the
recording, or a scalar read (`.item()`, `bool(t)`) that would read another value than the one
the recording answered from its warm-up (host_reads.py).

The outputs of a replay are handed out without a copy: tensors that alias the graph's memory
without owning it. Results of earlier calls stay valid all the same: before a graph replays
again, any output of its previous replay still referenced (by the caller, or a view of it) is
moved to memory of its own (its storage gets a copy), and so is every output still referenced
when the graph is forgotten. A block's output, consumed by the next block and dropped, is never
copied; a model's logits kept across calls are copied once, at the next call. (Before torch 2.12 a
view of an output cannot be moved: while one lives its graph is not replayed, and that graph's
outputs are copies from then on.) `copy_outputs=False`
returns the graph's own tensors, which the next replay of the same signature overwrites
(reduce-overhead's contract), and saves even that check.
"""

from __future__ import annotations

import collections
import functools
import itertools
import operator
import os
import threading
import time
import types
import weakref
from typing import Any, Callable, NamedTuple

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree

from . import host_reads, tapes

_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout)
WARMUP_CALLS = 1  # eager calls of a signature before it is recorded: lazy initialisation happens there
SEEN_LIMIT = 1024  # signatures whose warm-up calls are counted


class _WarmUps(collections.Counter):
    """The calls seen of each signature not recorded yet: one is recorded after WARMUP_CALLS of them (lazy
    initialisation happens there). Bounded by SEEN_LIMIT: shapes that never repeat would grow it without end."""

    def warming(self, key: tuple) -> bool:
        """Count a call of `key`; whether it is still one of its warm-up calls."""
        if len(self) >= SEEN_LIMIT:
            self.clear()
        self[key] += 1
        return self[key] <= WARMUP_CALLS


class _Unsupported(Exception):
    """A call whose arguments or outputs a graph cannot stand for; the message says why."""


def _describe(value: Any, tensors: list) -> Any:
    """A hashable description of an argument tree; its tensors are appended to `tensors`."""
    if isinstance(value, torch.Tensor):
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            raise _Unsupported("an argument is a tensor subclass")
        tensors.append(value)
        return (torch.Tensor, value.shape, value.stride(), value.dtype, value.device, value.requires_grad)
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(_describe(item, tensors) for item in value))
    if isinstance(value, dict):
        return (dict, tuple((key, _describe(item, tensors)) for key, item in value.items()))
    if isinstance(value, _PLAIN):
        return (type(value), value)
    raise _Unsupported(f"an argument of type {type(value).__name__} (not a tensor or a plain value)")


def _described(args: tuple, kwargs: dict) -> tuple[tuple, list] | str:
    """A call's arguments as `_describe` gives them, and their tensors; or why they cannot key a recording."""
    tensors: list = []
    try:
        return _describe((args, kwargs), tensors), tensors
    except _Unsupported as error:
        return f"original forward: {error}"


def _rebuild(value: Any, tensors) -> Any:
    """`value` with its tensors replaced, in `_describe`'s order, by the next of `tensors`."""
    if isinstance(value, torch.Tensor):
        return next(tensors)
    if isinstance(value, (tuple, list)):
        return type(value)(_rebuild(item, tensors) for item in value)
    if isinstance(value, dict):
        return {key: _rebuild(item, tensors) for key, item in value.items()}
    return value


_RECORDING = threading.local()  # `depth` > 0 while this thread warms up or records a graph


def recording() -> bool:
    """Whether this thread is warming up or recording a graph: a graphed forward called inside runs as it is."""
    return getattr(_RECORDING, "depth", 0) > 0


class _Graph:
    """One recorded forward: the static inputs it reads, the graph, and the outputs it writes.

    The recording refuses (`_Unsupported`) what a replay would not reproduce: a forward that writes
    into its inputs (the replay writes into the graph's copies), changes its argument containers or
    its modules' Python attributes (the replay runs no Python), or returns an input or a parameter
    (the replay's copy would no longer be that tensor).
    """

    def __init__(
        self, function: Callable, args: tuple, kwargs: dict, tensors: list, pool: "_Pool", module=None
    ) -> None:
        self.inputs = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device) for t in tensors]
        for static, tensor in zip(self.inputs, tensors):
            static.copy_(tensor)
        static_args, static_kwargs = _rebuild((args, kwargs), iter(self.inputs))
        before = _describe((static_args, static_kwargs), [])
        versions = [t._version for t in self.inputs]
        attributes = _attributes(module)
        _RECORDING.depth = getattr(_RECORDING, "depth", 0) + 1
        try:
            # Warm up on the stream the recording runs on: libraries set up per-stream state (cuBLAS
            # workspaces) on their first call there, which must not happen while recording.
            side = recording_stream()
            side.wait_stream(torch.cuda.current_stream())
            noted = host_reads.Noting()
            with torch.cuda.stream(side), noted:
                function(*static_args, **static_kwargs)
            torch.cuda.current_stream().wait_stream(side)
            _check_unchanged(before, (static_args, static_kwargs), versions, self.inputs, attributes, module)
            self.graph = torch.cuda.CUDAGraph()
            # Host reads are answered from the warm-up and checked at each replay (host_reads.py). Any other
            # wait on the device (a copy to the host, data-dependent shapes) cannot be recorded: torch's sync
            # check raises before the wait, which ends the recording cleanly; CUDA's own refusal would leave
            # torch's CUDA generator unusable. thread_local: a background compile's work is not refused.
            self.differs = torch.zeros((), dtype=torch.bool, device=self.inputs[0].device)
            self.fixed_differs = torch.zeros((), dtype=torch.bool, device=self.inputs[0].device)
            answering = host_reads.Answering(noted.values, self.differs, self.fixed_differs)
            debug_mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("error")
            try:
                with torch.cuda.graph(self.graph, pool=pool.handle(), stream=side, capture_error_mode="thread_local"):
                    with answering:
                        output = function(*static_args, **static_kwargs)
            except host_reads.Unanswered as error:
                raise _Unsupported(str(error)) from None
            finally:
                torch.cuda.set_sync_debug_mode(debug_mode)
            self.checked_reads = answering.checked_reads
            self.fixed_reads = answering.fixed_reads
            self._replayed = False
        finally:
            _RECORDING.depth -= 1
        self.outputs, self.spec = pytree.tree_flatten(output)
        for leaf in self.outputs:
            if not isinstance(leaf, (torch.Tensor, *_PLAIN)):
                raise _Unsupported(f"an output of type {type(leaf).__name__} (not a tensor or a plain value)")
        held = {t.untyped_storage().data_ptr() for t in self.inputs}
        if module is not None:
            held |= {t.untyped_storage().data_ptr() for t in (*module.parameters(), *module.buffers())}
        if any(isinstance(leaf, torch.Tensor) and leaf.untyped_storage().data_ptr() in held for leaf in self.outputs):
            raise _Unsupported("an output is an input or a parameter, or a view of one")
        self._handout = _Handout(self.outputs, order=pool.recordings)
        pool.recordings += 1
        # A replay writes its intermediates into memory of the pool that later recordings may have used for
        # their outputs: the outputs those handed out (and its own), if still referenced, move out first. An
        # earlier recording's outputs were alive all through this one, so it cannot have used their memory:
        # a chain of blocks hands its hidden state from one replay to the next without a copy.
        self._neighbours = pool.handouts
        self._neighbours.add(self._handout)
        finalizer = weakref.finalize(self, self._handout.release)  # outputs still referenced outlive the graph
        finalizer.atexit = False

    def replay(self, tensors: list, copy_outputs: bool) -> Any:
        """The outputs of one replay on `tensors`; `_STUCK` where an earlier output holds the pool's memory,
        `_DIFFERS` where a host read the recording answered from its warm-up would read another value now,
        `_BROKEN` where a read it proved fixed read otherwise at the previous replay."""
        order = self._handout.order
        later = [handout for handout in list(self._neighbours) if handout.order >= order]
        if not all([handout.evict() for handout in later]):  # a list: every one evicts
            return _STUCK
        # One call for all inputs: one dispatch, and one kernel for tensors of one dtype and layout.
        torch._foreach_copy_(self.inputs, tensors)
        # The previous replay's reads proved fixed, looked at now that the device has run it: a kernel
        # outside PyTorch's dispatcher wrote one (the proof's one assumption), and that call's outputs
        # may be wrong.
        if self.fixed_reads and self._replayed and self.fixed_differs.item():
            return _BROKEN
        self.graph.replay()
        self._replayed = True
        if (
            self.checked_reads and self.differs.item()
        ):  # a host read would have gone another way: these outputs are not its
            return _DIFFERS
        outputs = self._handout.hand_out() if copy_outputs else self.outputs
        return pytree.tree_unflatten(outputs, self.spec)


class _Handout:
    """A graph's outputs as handed out: tensors on storages that alias the graph's output memory without
    owning it, watched through weak references, so that the ones still referenced when that memory is
    about to be written again (or freed) are given memory of their own first, holding their values.

    Moving a storage (torch >= 2.12's `_swap_data_ptr_` with a copy) moves every tensor on it, views
    included, and keeps the caller's objects. Older torch can only point tensors at a copy one by one
    (`set_`): that moves the outputs handed out when nothing else holds their storage (use count), and
    not a view of one; such an output is `stuck`: the graph is not replayed while it lives (its replayer
    runs the original forward), and its outputs are copies from then on."""

    def __init__(self, outputs: list, order: int) -> None:
        self.order = order  # the graph's place among its pool's recordings
        self.static = outputs  # the graph's own output tensors: they keep its output memory allocated
        storages: dict[int, int] = {}  # data pointer of an output's storage -> index among `self.memory`
        self.memory: list[tuple[int, torch.device, int]] = []  # (data pointer, device, bytes) per storage
        self.leaves: list[tuple[int, int, tuple, tuple, torch.dtype] | None] = []
        for leaf in outputs:
            if not isinstance(leaf, torch.Tensor):
                self.leaves.append(None)
                continue
            storage = leaf.untyped_storage()
            index = storages.setdefault(storage.data_ptr(), len(self.memory))
            if index == len(self.memory):
                self.memory.append((storage.data_ptr(), storage.device, storage.nbytes()))
            self.leaves.append((index, leaf.storage_offset(), tuple(leaf.shape), leaf.stride(), leaf.dtype))
        self.handed: list[tuple[StorageWeakRef, list[weakref.ref]]] = []  # per storage: it, and its tensors
        self.copies = False  # hand out copies (after an output got stuck)

    def hand_out(self) -> list:
        if self.copies:
            return [leaf.clone() if isinstance(leaf, torch.Tensor) else leaf for leaf in self.static]
        storages = [torch._C._construct_storage_from_data_pointer(*memory) for memory in self.memory]
        outputs = [
            static if leaf is None else _on_storage(storages[leaf[0]], *leaf[1:], static.device)
            for static, leaf in zip(self.static, self.leaves)
        ]
        tensors: list[list[weakref.ref]] = [[] for _ in storages]
        for output, leaf in zip(outputs, self.leaves):
            if leaf is not None:
                tensors[leaf[0]].append(weakref.ref(output))
        self.handed = [(StorageWeakRef(storage), refs) for storage, refs in zip(storages, tensors)]
        return outputs

    def evict(self) -> bool:
        """Move the outputs still referenced to memory of their own; False while one cannot be (stuck)."""
        stuck = [handed for handed in self.handed if not _move(*handed)]
        self.handed = stuck
        self.copies = self.copies or bool(stuck)
        return not stuck

    def release(self) -> None:
        """The graph goes: move what can be moved, and keep the memory of what cannot until it is dropped."""
        _STRANDED[:] = [(h, kept) for h, kept in _STRANDED if any(not ref.expired() for ref, _ in h)]
        if not self.evict():
            _STRANDED.append((self.handed, self.static))


_SWAP = hasattr(torch.UntypedStorage, "_swap_data_ptr_")  # torch >= 2.12
# The output memory of graphs gone while a view of one of their outputs lived (older torch): freed with the views.
_STRANDED: list[tuple[list, list]] = []


def _move(storage_ref: StorageWeakRef, tensor_refs: list[weakref.ref]) -> bool:
    """Give a handed-out storage, if still referenced, memory of its own; False if it cannot be moved."""
    storage = None if storage_ref.expired() else torch.UntypedStorage._new_with_weak_ptr(storage_ref.cdata)
    if storage is None:
        return True
    if _SWAP:
        storage._swap_data_ptr_(storage.clone())
        return True
    alive = [t for t in (ref() for ref in tensor_refs) if t is not None]
    if torch._C._storage_Use_Count(storage._cdata) != len(alive) + 1:  # held by a view, or by C++ code
        return False
    copy = storage.clone()
    for tensor in alive:
        tensor.set_(copy, tensor.storage_offset(), tensor.shape, tensor.stride())
    return True


def _on_storage(storage, offset: int, size: tuple, stride: tuple, dtype: torch.dtype, device) -> torch.Tensor:
    return torch.empty(0, dtype=dtype, device=device).set_(storage, offset, size, stride)


def _attributes(module) -> list[tuple[dict, str, object]]:
    """The Python attributes of `module`'s tree that are plain values, to see whether a forward changes them."""
    if module is None:
        return []
    return [(vars(m), k, v) for m in module.modules() for k, v in vars(m).items() if isinstance(v, _PLAIN)]


def _check_unchanged(before, arguments, versions, inputs, attributes, module) -> None:
    """Raise `_Unsupported` where the warm-up call changed what a replay would leave unchanged."""
    if any(t._version != v for t, v in zip(inputs, versions)):
        raise _Unsupported("the forward writes into an input tensor")
    if _describe(arguments, []) != before:
        raise _Unsupported("the forward changes its arguments (a list or dict it was given)")
    if any(table.get(name, _MISSING) != value for table, name, value in attributes) or len(attributes) != len(
        _attributes(module)
    ):
        raise _Unsupported("the forward sets Python attributes of its modules")


_MISSING = object()
_TRAINING = operator.attrgetter("training")
_VERSION = operator.attrgetter("_version")
_STUCK = object()
_DIFFERS = tapes.MISS
_BROKEN = object()


class _Ran(NamedTuple):
    """A recording that ran the call itself (a tape records an eager call): the call's outputs."""

    outputs: Any


def _versions(tensors: list) -> list[int]:
    """The version counters of `tensors` (-1 for an inference tensor, which has none)."""
    try:
        return list(map(_VERSION, tensors))
    except RuntimeError:
        return [_version(t) for t in tensors]


def _version(tensor: torch.Tensor) -> int:
    try:
        return tensor._version
    except RuntimeError:
        return -1


class _Snapshot:
    """What recorded kernels depend on in a module tree: which modules, parameters and buffers it holds,
    their memory, and the training flags.

    Walking the tree (`module.parameters()`) costs ~0.7 ms for GPT-2 on every call; comparing the
    entries of the dicts seen at the last walk costs ~10 us, and sees every replacement, addition and
    removal, since changing anything in the tree changes an entry of one of those dicts.
    """

    def __init__(self, module: torch.nn.Module, reads: tuple[str, ...] = ()) -> None:
        modules = list(module.modules())
        # The attributes the build found the forward reading (`reads`), and those of the graphed forwards of the
        # modules it holds (a model's blocks, read through a list the build cannot index): their values now.
        for name, inner in module.named_modules(remove_duplicate=False):
            inner_reads = getattr(type(inner).forward, "__transpile_reads__", ()) if name else ()
            reads = (*reads, *(f"{name}.{read}" for read in inner_reads))
        self.reads = []  # (path, the submodule it starts from, the getter of the rest, the value, by value?)
        self.read_from: set[tuple[int, str]] = set()
        self.unstable = ""  # a read whose value is a new object each time, if any
        self.objects: dict[int, tuple[dict, Callable, tuple]] = {}  # plain fields of objects read (a config)
        for path in dict.fromkeys(reads):
            path, value = _read_path(path, module)
            # Compared by value: plain values, their tuples and lists, and bound methods (a new object at
            # each read, equal while they bind the same function to the same object). By identity: the rest,
            # tensors with their memory (a tensor attribute replaced, or given new memory, records again).
            plain = isinstance(value, (*_PLAIN, types.MethodType)) or (
                isinstance(value, (tuple, list)) and all(isinstance(v, _PLAIN) for v in value)
            )
            if not _same(_read_path(path, module)[1], value, plain):
                self.unstable = self.unstable or path  # a property that builds a new object: no guard can hold
                continue
            owner, rest = _owner(module, path)
            if (id(owner), rest) in self.read_from:
                continue
            self.read_from.add((id(owner), rest))
            get = operator.attrgetter(rest)
            self.reads.append((path, owner, get, value, plain))
            if isinstance(value, torch.Tensor):
                pointer = f"{path}.data_ptr()"
                data_ptr = lambda owner, get=get: get(owner).data_ptr()  # noqa: E731
                self.reads.append((pointer, owner, data_ptr, value.data_ptr(), True))
            owner = module
            for name in path.split(".")[:-1]:  # the objects the path passes through: a config read in part
                owner = getattr(owner, name, _MISSING)
                self._watch(owner)
            if not plain:
                self._watch(value)
        # Every entry of the tables (which submodules, parameters and buffers the tree holds, by name and
        # identity), their memory and the training flags, compared as lists: C loops, ~10 us for GPT-2.
        self.tables = [table for m in modules for table in (m._modules, m._parameters, m._buffers)]
        self.names = list(itertools.chain.from_iterable(self.tables))
        self.values = list(itertools.chain.from_iterable(map(dict.values, self.tables)))
        self.tensors = [value for value in self.values if isinstance(value, torch.Tensor)]
        self.pointers = list(map(torch.Tensor.data_ptr, self.tensors))
        # In-place writes (`load_state_dict`, an optimizer step): derived values the runtime keeps (a convolution
        # folded with its batch norm) and a tape's folded values follow them only through a new recording.
        self.versions = _versions(self.tensors)
        self.modules = modules
        self.training = list(map(_TRAINING, modules))

    def settle(self) -> bool:
        """Take the tensors' versions as they are now; whether they had changed (the forward writes its own)."""
        versions = _versions(self.tensors)
        changed = versions != self.versions
        self.versions = versions
        return changed

    def _watch(self, value: object) -> None:
        """Guard every plain field of an object the forward reads (a model's config): libraries around the
        forward (transformers' decorators, mask helpers) read fields of it the build does not see."""
        table = getattr(value, "__dict__", None)
        if (
            not isinstance(table, dict)
            or isinstance(value, (torch.nn.Module, torch.Tensor))
            or id(table) in self.objects
        ):
            return  # a module's fields are guarded through its tables and flags, a tensor's with its memory
        keys = tuple(key for key, field in table.items() if isinstance(field, _PLAIN))
        if keys:
            fields = operator.itemgetter(*keys)
            self.objects[id(table)] = (table, fields, fields(table), len(table))

    def holds(self, versions: bool = True) -> bool:
        """Whether nothing watched changed; `versions=False` ignores in-place writes (an optimizer's step), which
        a training graph reads as they are (it keeps no value derived from them)."""
        values = list(itertools.chain.from_iterable(map(dict.values, self.tables)))
        return (
            len(values) == len(self.values)
            and all(map(operator.is_, values, self.values))
            and list(itertools.chain.from_iterable(self.tables)) == self.names
            and list(map(torch.Tensor.data_ptr, self.tensors)) == self.pointers  # `.data = ...`, `.to()` in place
            and (not versions or _versions(self.tensors) == self.versions)
            and list(map(_TRAINING, self.modules)) == self.training
            # after the tables: the submodules a read starts from are still those of the tree
            and all(_same(_read(get, owner), value, plain) for _, owner, get, value, plain in self.reads)
            and all(
                _fields(table, fields) == values and len(table) == size
                for table, fields, values, size in self.objects.values()
            )
        )


def _same(value: object, recorded: object, plain: bool) -> bool:
    """Whether an attribute read still has its recorded value: equal plain values, else the same object."""
    return value is recorded or (plain and type(value) is type(recorded) and value == recorded)


def _read(get: Callable, module) -> object:
    try:
        return get(module)
    except AttributeError:
        return _MISSING


def _fields(table: dict, fields: Callable) -> object:
    try:
        return fields(table)
    except KeyError:
        return _MISSING


def _owner(module: torch.nn.Module, path: str) -> tuple[object, str]:
    """The submodule `path` reaches through `_modules` entries alone, and the rest of the path. A check of the
    tables' entries (`_Snapshot.tables`) sees any change on the way there, so a read need not walk it again
    (GPT-2's guards read 102 paths through `nn.Module.__getattr__`, four hops each: 0.5 ms per call)."""
    names = path.split(".")
    for index, name in enumerate(names[:-1]):
        inner = module._modules.get(name) if isinstance(module, torch.nn.Module) else None
        if inner is None or name in vars(module):
            return module, ".".join(names[index:])
        module = inner
    return module, names[-1]


def _read_path(path: str, module) -> tuple[str, object]:
    """The path up to the first tensor on it (a tensor's own attributes, `weight.shape`, change only with the
    tensor), and the value there from `module`: `_MISSING` where an attribute is missing."""
    value, names = module, path.split(".")
    for index, name in enumerate(names):
        if isinstance(value, torch.Tensor):
            return ".".join(names[:index]), value
        value = getattr(value, name, _MISSING)
        if value is _MISSING:
            return path, _MISSING
    return path, value


_STREAMS: dict[torch.device, "torch.cuda.Stream"] = {}


def recording_stream() -> "torch.cuda.Stream":
    """The one stream, per device, that graphs are warmed up and recorded on. A stream is never the current one
    while recording (CUDA refuses to capture the legacy default stream), and libraries keep state per stream for
    the process's life: cuBLAS a 32 MiB workspace on Hopper, which a new stream per recording would leak (800 MiB
    over BERT-base's 24 training recordings)."""
    device = torch.cuda.current_stream().device
    if device not in _STREAMS:
        _STREAMS[device] = torch.cuda.Stream(device)
    return _STREAMS[device]


class _Pool:
    """The memory pool graphs record into, made on first use (it needs CUDA).

    Graphs may share one when they never run at once: each recording reuses the memory of the
    intermediates earlier ones freed, and keeps its own outputs alive until it is forgotten.
    """

    def __init__(self) -> None:
        self._handle = None
        self.handouts: weakref.WeakSet[_Handout] = weakref.WeakSet()  # the outputs handed out by its graphs
        self.recordings = 0  # graphs recorded into it so far

    def handle(self):
        if self._handle is None:
            self._handle = torch.cuda.graph_pool_handle()
        return self._handle

    def release(self) -> None:
        """Record into a new pool from now on; the old one is freed with the last graph that holds it."""
        self._handle = None
        self.handouts = weakref.WeakSet()
        self.recordings = 0


# A module's hook tables, and the process's: a replay runs no Python, so hooks of the modules a replayed forward
# calls would run only when it is recorded (eager runs them at every call).
_HOOKS = tuple(
    operator.attrgetter(name)
    for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
)
_GLOBAL_HOOKS = tuple(
    getattr(torch.nn.modules.module, name)
    for name in (
        "_global_forward_hooks",
        "_global_forward_pre_hooks",
        "_global_backward_hooks",
        "_global_backward_pre_hooks",
    )
)
HOOKED = "original forward: a module inside has hooks (or global module hooks are set)"


def hook_tables(function: Callable, module: torch.nn.Module) -> list[dict]:
    """The hook tables a replay of `function` would skip: the process's, and those of the modules `module` holds (its
    own too where `function` is the module, whose call runs them; a bound forward's caller runs them outside)."""
    inside = [m for m in module.modules() if m is not module or function is module]
    return [*_GLOBAL_HOOKS, *(hooks(m) for m in inside for hooks in _HOOKS)]


class CudaGraphs:
    """A callable that runs `function` (a module or a module's bound forward) through CUDA graphs."""

    REPLAYED = "graph replay"  # what its counts call a call its recording ran

    def __init__(
        self,
        function: Callable,
        copy_outputs: bool = True,
        max_graphs: int = 16,
        pool: _Pool | None = None,
        reads: tuple[str, ...] = (),
    ) -> None:
        module = function if isinstance(function, torch.nn.Module) else getattr(function, "__self__", None)
        if not isinstance(module, torch.nn.Module):
            raise TypeError("cuda_graphs takes a torch.nn.Module or a module's bound method")
        self.function = function
        self.module = module
        self.copy_outputs = copy_outputs
        self.max_graphs = max_graphs
        self.reads = reads  # attributes of the module the forward reads (the build's list): a change records again
        self._pool = pool or _Pool()  # one pool: the graphs of one callable never overlap
        self.counts: collections.Counter[str] = collections.Counter()
        self.reset()

    def reset(self) -> None:
        """Forget every recorded graph (and the memory they hold): the next calls record afresh."""
        self._graphs: dict[tuple, _Graph | str] = {}
        self._seen = _WarmUps()
        self._pool.release()
        self._state = None
        self._hooks: list[dict] = []  # `hook_tables`, as of the guards' snapshot (the tables are read at each call)
        self._writes_own = False  # whether the forward writes into its own parameters or buffers

    def __call__(self, *args, **kwargs):
        reason = self._signature(args, kwargs)
        if isinstance(reason, str):
            self.counts[reason] += 1
            return self.function(*args, **kwargs)
        key, tensors = reason
        graph = self._graphs.get(key)
        if isinstance(graph, str):  # decided already (a refusal, or the blocks' graphs are faster): no guard to walk
            self.counts[graph] += 1
            return self.function(*args, **kwargs)
        refusal = self._guarded()
        if refusal is not None:
            self.counts[refusal] += 1
            return self.function(*args, **kwargs)
        graph = self._graphs.get(key)  # the guard may have forgotten every recording
        if graph is None:
            if self._seen.warming(key):
                self.counts["warm-up (original forward)"] += 1
                outputs = self.function(*args, **kwargs)
                self._writes_own |= self._state.settle()
                return outputs
            graph = self._record(key, args, kwargs, tensors)
            self._writes_own |= self._state.settle()  # the recording ran the forward: its own writes are not a change
            if isinstance(graph, _Ran):
                return graph.outputs
        if isinstance(graph, str):
            self.counts[graph] += 1
            return self.function(*args, **kwargs)
        outputs = graph.replay(tensors, self.copy_outputs)
        if outputs is _STUCK:
            self.counts["original forward: a view of an earlier output holds the graph's memory"] += 1
            return self.function(*args, **kwargs)
        if outputs is _BROKEN:
            self._graphs[key] = "original forward: a host read its recording proved fixed changed"
            raise RuntimeError(
                f"transpile: the CUDA graph of {self.function} read, at its previous replay, a value its recording "
                "proved fixed (made in the forward from constants) and found it changed: code outside PyTorch's "
                "dispatcher wrote it, and that call's outputs may be wrong. The graph is dropped; "
                "TRANSPILE_CUDA_GRAPHS=0 turns default graphs off."
            )
        if outputs is _DIFFERS:  # the graph took a branch this call would not: drop it, run the source
            reason = self._graphs[key] = "original forward: a host read differed from the one its recording answered"
            self.counts[reason] += 1
            return self.function(*args, **kwargs)
        self.counts[self.REPLAYED] += 1
        if self._writes_own:  # a tape's replay writes them as the forward did: not a change to record again for
            self._state.settle()
        return outputs

    def _signature(self, args: tuple, kwargs: dict) -> tuple[tuple, list] | str:
        """The call's key and tensors, or why it runs the original forward."""
        if torch.is_grad_enabled():
            return "original forward: autograd is on (graphs are for inference: use torch.no_grad())"
        described = _described(args, kwargs)
        if isinstance(described, str):
            return described
        description, tensors = described
        if not tensors or not all(t.is_cuda for t in tensors):
            # A CPU tensor's values reach a graph only as they were when it was recorded (as kernel arguments).
            return "original forward: an input is not a CUDA tensor, or none is a tensor"
        if host_reads.capturing():
            return "original forward: called while another graph is being recorded"
        return description, tensors

    def _guarded(self) -> str | None:
        """None where the module's guards hold (recordings made again after a change), else why they cannot."""
        if not self._unchanged():  # parameters replaced, moved or cast, or train()/eval(): record again
            self._graphs.clear()
            self._seen.clear()
            self._state = _Snapshot(self.module, self.reads)
            self._hooks = hook_tables(self.function, self.module)
        if self._state.unstable:
            return f"original forward: `{self._state.unstable}` is a new object at each read (it cannot be guarded)"
        if any(self._hooks):
            return HOOKED
        return None

    def _unchanged(self) -> bool:
        return self._state is not None and self._state.holds()

    def _record(self, key: tuple, args: tuple, kwargs: dict, tensors: list) -> _Graph | str:
        if len(self._graphs) >= self.max_graphs:
            return "original forward: more call signatures than max_graphs"
        from . import wait_for_kernels  # kernels still compiling would be recorded as the original code

        wait_for_kernels()
        try:
            graph: _Graph | str = _Graph(self.function, args, kwargs, tensors, self._pool, self.module)
        except _Unsupported as error:
            graph = f"original forward: {error}"
        except Exception as error:  # noqa: BLE001 - a wait on the device, CUDA refusing an operation while
            # recording, or the recording's dispatch modes meeting code they do not suit: the source's forward
            # runs instead, and raises there if the error is its own.
            graph = f"original forward: the forward cannot be recorded ({_first_line(error)})"
        else:
            if graph.checked_reads:
                self.counts["recorded with host reads checked at each replay"] += 1
            elif graph.fixed_reads:
                self.counts["recorded with host reads proved fixed (checked one replay later)"] += 1
        self._graphs[key] = graph
        return graph


def _first_line(error: Exception) -> str:
    """An error's message as a reason: its first line, shortened."""
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:120]


def cuda_graphs(function: Callable, copy_outputs: bool = True, max_graphs: int = 16) -> CudaGraphs:
    """`function` (a module, or a module's bound forward) replayed through CUDA graphs; see the module docstring."""
    return CudaGraphs(function, copy_outputs=copy_outputs, max_graphs=max_graphs)


# -- by default: the forwards the build proved safe ------------------------------------------------------
# `TRANSPILE_CUDA_GRAPHS=0` (read at import) or `set_default_graphs(False)` turns the default replay off.
_DEFAULT_ON = os.environ.get("TRANSPILE_CUDA_GRAPHS", "1") != "0"
MAX_DEFAULT_GRAPHS = 256  # recordings held at once by every default replay together: their memory stays bounded
# Every module's replayer, for the switch and the counts. A replayer holds its module (the bound forward, the
# guards), so it lives on the module (`_Recordings`) and goes with it; this set holds it weakly.
_REPLAYERS: "weakref.WeakSet[CudaGraphs]" = weakref.WeakSet()
_KEY = "_transpile_graphs"  # the instance attribute holding a module's `_Recordings`
_TAPES_KEY = "_transpile_tapes"  # the same for its tapes (tapes.py): the CPU's replay
_TRAIN_KEY = "_transpile_training_graphs"  # the same for its replay under autograd (train_graphs.py)
# `TRANSPILE_TAPES=0` (read at import) or `set_default_tapes(False)` turns the CPU's default replay off.
_TAPES_ON = os.environ.get("TRANSPILE_TAPES", "1") != "0"
_POOLS: dict[tuple, _Pool] = {}  # per device and stream: graphs that never run at once share memory


def set_default_graphs(enabled: bool) -> None:
    """Turn the default replay of graphed forwards on or off for this process (forgets every recording when off)."""
    global _DEFAULT_ON
    _DEFAULT_ON = enabled
    if not enabled:
        _forget_replayers(_DefaultGraphs, _KEY)
        from .train_graphs import TrainingGraphs

        _forget_replayers(TrainingGraphs, _TRAIN_KEY)


def _forget_replayers(kind: type, key: str) -> None:
    for kept in [r for r in list(_REPLAYERS) if isinstance(r, kind)]:
        kept.reset()
        vars(kept.module).pop(key, None)
        _REPLAYERS.discard(kept)


def set_default_tapes(enabled: bool) -> None:
    """Turn the CPU's default replay of graphed forwards (tapes) on or off for this process (off forgets them)."""
    global _TAPES_ON
    _TAPES_ON = enabled
    if not enabled:
        _forget_replayers(_DefaultTapes, _TAPES_KEY)


def default_graph_counts() -> collections.Counter[str]:
    """What the calls of every graphed forward ran: replays, warm-ups, and why the original forward."""
    return sum((r.counts for r in list(_REPLAYERS)), collections.Counter())


def replayer(module: torch.nn.Module, key: str = _KEY) -> "CudaGraphs | None":
    """The replayer of `module`'s graphed forward, once a call on CUDA (on the CPU, with `_TAPES_KEY`) made one."""
    kept = vars(module).get(key)
    return kept.replayer if isinstance(kept, _Recordings) and kept.replayer.module is module else None


class _Recordings:
    """A module's replayer, as an attribute of the module: freed with it. A copy or a pickle of the module
    starts without recordings (graphs cannot be copied, and a copy's forward must not run the original's)."""

    __slots__ = ("replayer",)

    def __init__(self, replayer: "_DefaultGraphs | None" = None) -> None:
        self.replayer = replayer

    def __deepcopy__(self, memo: dict) -> None:
        return None

    def __reduce__(self):
        return (type(None), ())


def _first_tensor(args: tuple, kwargs: dict) -> torch.Tensor | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
    return None


class _DefaultGraphs(CudaGraphs):
    """`CudaGraphs` for one module whose forward the build marked `graphed`: graphs share the pool of their
    device and stream, and count against MAX_DEFAULT_GRAPHS."""

    recorded = 0  # graphs held by every instance

    def _record(self, key: tuple, args: tuple, kwargs: dict, tensors: list) -> _Graph | str:
        if _DefaultGraphs.recorded >= MAX_DEFAULT_GRAPHS:
            return "original forward: MAX_DEFAULT_GRAPHS recordings held already"
        stream = torch.cuda.current_stream()
        self._pool = _POOLS.setdefault((stream.device, stream.stream_id), _Pool())
        graph = super()._record(key, args, kwargs, tensors)
        if not isinstance(graph, str):
            _DefaultGraphs.recorded += 1
            weakref.finalize(graph, _forget)
            inner = [r for m in self.module.modules() if m is not self.module and (r := replayer(m)) is not None]
            if inner:
                graph = self._graphs[key] = self._faster(graph, inner, args, kwargs, tensors)
        return graph

    def _faster(self, graph: _Graph, inner: list, args: tuple, kwargs: dict, tensors: list) -> _Graph | str:
        """A model over graphed blocks: its one graph, or its blocks' graphs, whichever runs the call faster.

        One graph has none of the model's Python left, but libraries record a different forward than
        they run where the capture hides something from them (a read host_reads.py cannot answer, a path
        chosen for another reason). The blocks' graphs leave that code to run eagerly. Timed once per
        signature, synchronised, best of TRIALS each: the blocks record at the first run of the original
        forward, and replay after."""
        self.function(*args, **kwargs)
        blocks = _best_seconds(lambda: self.function(*args, **kwargs))
        whole = _best_seconds(lambda: graph.replay(tensors, copy_outputs=False))
        if whole <= blocks:
            for kept in inner:  # never called outside this graph now: their recordings go
                kept.reset()
            return graph
        return (
            f"original forward: its blocks' graphs run it faster ({blocks * 1e3:.2f} ms against "
            f"{whole * 1e3:.2f} ms as one graph)"
        )

    def _signature(self, args: tuple, kwargs: dict) -> tuple[tuple, list] | str:
        reason = super()._signature(args, kwargs)
        if isinstance(reason, str):
            return reason
        key, tensors = reason
        return (key, torch.cuda.current_stream().stream_id), tensors  # a graph replays on the stream it was made on


def _forget() -> None:
    _DefaultGraphs.recorded -= 1


class _DefaultTapes(CudaGraphs):
    """The CPU's default replay of a module whose forward the build marked `graphed`: each call signature is
    recorded once as a tape (tapes.py) and replayed; the `cuda_graphs` rules of signatures, warm-up and
    guards hold. A tape records an eager call, and that call returns its own outputs. Tapes count against
    MAX_DEFAULT_GRAPHS with the graphs: they hold the values they fold."""

    REPLAYED = "tape replay"

    def _signature(self, args: tuple, kwargs: dict) -> tuple[tuple, list] | str:
        if torch.is_grad_enabled():
            return "original forward: autograd is on (tapes are for inference: use torch.no_grad())"
        if torch.is_autocast_enabled("cpu"):
            return "original forward: autocast is on"
        described = _described(args, kwargs)
        if isinstance(described, str):
            return described
        description, tensors = described
        if not tensors or not all([t.device.type == "cpu" for t in tensors]):
            return "original forward: an input is not a CPU tensor, or none is a tensor"
        identities = list(map(id, tensors))  # an argument given twice is one slot of the tape
        repeats = () if len(set(identities)) == len(identities) else tuple(map(identities.index, identities))
        return (description, repeats, torch.is_inference_mode_enabled(), torch.get_default_dtype()), tensors

    def _record(self, key: tuple, args: tuple, kwargs: dict, tensors: list) -> "_Ran | str":
        if _DefaultGraphs.recorded >= MAX_DEFAULT_GRAPHS:
            return "original forward: MAX_DEFAULT_GRAPHS recordings held already"
        if len(self._graphs) >= self.max_graphs:
            return "original forward: more call signatures than max_graphs"
        from . import wait_for_kernels  # kernels still compiling would be recorded as the original code

        wait_for_kernels()
        state = self._state.tensors  # what the guards watch: the tape may fold values made from them
        held = {t.untyped_storage().data_ptr() for t in state}
        if any(t.untyped_storage().data_ptr() in held for t in tensors):
            return "original forward: an input is a parameter or buffer of the module, or a view of one"
        before = _describe((args, kwargs), [])
        attributes = _attributes(self.module)
        recorder = tapes.Recorder(tensors, state)
        _RECORDING.depth = getattr(_RECORDING, "depth", 0) + 1
        try:
            with recorder:
                output = self.function(*args, **kwargs)
        finally:
            _RECORDING.depth -= 1
        try:
            _check_unchanged(before, (args, kwargs), [], [], attributes, self.module)
            tape: tapes.Tape | str = recorder.tape(output, getattr(self.function, "__qualname__", "the forward"))
        except _Unsupported as error:
            tape = str(error)
        except Exception as error:  # noqa: BLE001 - the call ran and returns; later calls run the source's forward
            tape = f"the forward cannot be recorded ({_first_line(error)})"
        if isinstance(tape, str):
            self._graphs[key] = f"original forward: {tape}"
        else:
            self._graphs[key] = tape
            _DefaultGraphs.recorded += 1
            weakref.finalize(tape, _forget)
            self.counts["recorded as a tape"] += 1
        return _Ran(output)


TRIALS = 2


def _best_seconds(call: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(TRIALS):
        torch.cuda.synchronize()
        began = time.perf_counter()
        call()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - began)
    return best


def graphed(reads: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Decorate a forward the build proved free of host syncs, data-dependent branches and Python side
    effects: in eval mode, without autograd, on CUDA inputs, each call signature is recorded once as a CUDA
    graph and replayed (the `cuda_graphs` rules: warm-up, guards, outputs copied out); with autograd on, its
    forward and backward are (train_graphs.py). `reads`: the attributes of the module (dotted paths) the
    forward and the modules it calls read; a change to one records again. Anywhere else, and inside another
    graphed forward, the forward runs as it is."""

    def decorate(forward: Callable) -> Callable:
        @functools.wraps(forward)
        def replayed(self, *args, **kwargs):
            if recording() or (self.training and not torch.is_grad_enabled()):
                return forward(self, *args, **kwargs)
            first = _first_tensor(args, kwargs)
            if first is None or torch.compiler.is_compiling():
                return forward(self, *args, **kwargs)
            if torch.is_grad_enabled():
                if not (first.is_cuda and _DEFAULT_ON):
                    return forward(self, *args, **kwargs)
                from .train_graphs import TrainingGraphs

                key, kind = _TRAIN_KEY, TrainingGraphs
            elif first.is_cuda and _DEFAULT_ON:
                key, kind = _KEY, _DefaultGraphs
            elif first.device.type == "cpu" and _TAPES_ON:
                key, kind = _TAPES_KEY, _DefaultTapes
            else:
                return forward(self, *args, **kwargs)
            kept = replayer(self, key)  # None also for a shallow copy, which shares the original's attribute
            if kept is None:
                kept = kind(forward.__get__(self), reads=reads)
                vars(self)[key] = _Recordings(kept)
                _REPLAYERS.add(kept)
            return kept(*args, **kwargs)

        replayed.__transpile_reads__ = reads
        return replayed

    return decorate


class GraphedBlocks:
    """The blocks of a model's layer lists, each replayed through CUDA graphs; see `cuda_graph_blocks`."""

    def __init__(self, model: torch.nn.Module, copy_outputs: bool = True, max_graphs: int = 16) -> None:
        self.pool = _Pool()
        self.blocks: dict[str, CudaGraphs] = {}  # a block's qualified name -> the forward installed on it
        lists: list[str] = []
        for name, module in model.named_modules():
            if not isinstance(module, torch.nn.ModuleList) or any(_inside(name, outer) for outer in lists):
                continue
            lists.append(name)
            for index, block in enumerate(module):
                if "forward" in vars(block):
                    raise ValueError(f"block {_qualified(name, index)} has its own forward already (graphed twice?)")
                wrapper = CudaGraphs(block.forward, copy_outputs=copy_outputs, max_graphs=max_graphs, pool=self.pool)
                block.forward = wrapper  # an instance attribute: nn.Module.__call__ (and its hooks) calls it
                self.blocks[_qualified(name, index)] = wrapper
        if not self.blocks:
            raise ValueError(
                f"{type(model).__name__} holds no nn.ModuleList of blocks: graph the whole forward with cuda_graphs"
            )

    @property
    def counts(self) -> collections.Counter[str]:
        """What the blocks' calls ran (replays, warm-ups, and why the original forward), summed over blocks."""
        return sum((wrapper.counts for wrapper in self.blocks.values()), collections.Counter())

    def reset(self) -> None:
        """Forget every block's graphs and their memory: the next calls record afresh, into a new shared pool."""
        for wrapper in self.blocks.values():
            wrapper.reset()

    def remove(self) -> None:
        """Give every block its own forward back."""
        for wrapper in self.blocks.values():
            del wrapper.module.forward
        self.blocks.clear()


def _inside(name: str, outer: str) -> bool:
    return outer == "" or name.startswith(outer + ".")


def _qualified(name: str, index: int) -> str:
    return f"{name}.{index}" if name else str(index)


def cuda_graph_blocks(model: torch.nn.Module, copy_outputs: bool = True, max_graphs: int = 16) -> GraphedBlocks:
    """Replay each block of `model`'s layer lists through CUDA graphs, and run the code around them as it is.

    The blocks are the elements of every outermost `nn.ModuleList` (a transformer's layers, a
    ResNet's stages); each gets a `cuda_graphs` forward, and all share one memory pool, as
    they run one after another. The code between them (embeddings, mask set-up, the head)
    runs eagerly, so a library that asks whether it is being recorded, or reads a padding
    mask on the host, behaves as without graphs: see docs/compiler.md.
    """
    return GraphedBlocks(model, copy_outputs=copy_outputs, max_graphs=max_graphs)
