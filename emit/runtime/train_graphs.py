"""CUDA graphs in training: a graphed block's forward and its backward, each recorded once per call
signature and replayed under autograd (docs/compiler.md, "CUDA graphs in training").

In training a transpiled model's step is host-bound as its inference is: every kernel call under autograd
runs Python and the dispatcher, and the GPU waits. A forward the build marked `graphed` (graphs.py) that
is called with autograd on, on CUDA inputs, is therefore replayed as two CUDA graphs: its forward, and
the backward of that forward, recorded from the recording's own autograd graph. A call signature's first
call runs the source's forward (lazy initialisation happens there); its second records the forward
(after a warm-up on the recording stream that leaves the RNG and the buffers as they were) and replays it; the
backward through that replay runs the recording's autograd graph eagerly; the next forward call of any
training graph records the backwards that ran, latest forward first; later backwards replay. A node
(`_Replayed`) stands for the block in autograd: its inputs are the block's tensor inputs and parameters
that require grad, and its backward hands out the gradients the graph wrote (on the pool's memory, moved
when still referenced at the next replay that writes there), so that parameters accumulate them as eager's.

The values a forward saves for its backward stay in the graphs' memory pool, where later recordings reuse
memory that earlier ones freed, as eager's allocator does. A replay is therefore allowed only where it
cannot overwrite values a pending backward still needs: recordings are numbered in the order they were
made (blocks' forwards in the order they ran, then their backwards in reverse), and a replay of recording
number `n` is safe for a pending forward `h` when `h`'s forward was recorded before `n` and its backward
after `n` (so `h`'s saved values were allocated, and not yet freed, all through recording `n`). A training
step replays in the order it recorded, which keeps every replay safe; otherwise:

- a forward whose replay would break that rule (its own previous replay, or another's, still awaits its
  backward: a block called twice before a backward) runs the source's forward, counted with the reason;
- a backward whose replay breaks it (backward passes in another order than recorded) marks the pending
  replays it overwrites, and a backward replay marks its own (its temporaries may lie where its saved
  values were). A backward that reaches a marked replay (a second backward through a graph kept with
  `retain_graph=True`) runs the source's forward again on the call's inputs and differentiates it, as
  activation checkpointing does, or raises a clear error where that would not reproduce the forward
  (random numbers drawn, an input or parameter changed in place since).

The source's forward runs, counted with the reason, where a replay could not stand for the call: saved
tensor hooks are on (`torch.utils.checkpoint` without reentrance, `save_on_cpu`), the call runs inside a
backward (a reentrant checkpoint's recomputation), nothing requires grad, a parameter is a tensor subclass
(FSDP's DTensor) or has a tensor hook (which could keep the gradient it is given), a module inside has
hooks, the forward reads a tensor's value on the host, or the recording fails. The replay's RNG is the
generator's, advanced as the forward advances it, so `nn.Dropout` draws eager's masks.
"""

from __future__ import annotations

import collections
import math
import weakref

import torch
from torch.autograd.function import once_differentiable
from torch.utils import _pytree as pytree

from . import graphs, host_reads


class _Pool(graphs._Pool):
    """The training graphs' memory on one device and stream. Retired (the next recording takes a new pool) when
    its last graph goes, as the allocator frees a pool with its last graph and its id cannot be recorded into
    again, and when a recording into it fails, which can leave the allocator recording into it."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0  # steps recorded into it and not yet freed
        self.retired = False
        self.unrecorded: weakref.WeakSet[_Step] = weakref.WeakSet()  # steps whose backward is not recorded yet
        self.pending: weakref.WeakSet[_Step] = weakref.WeakSet()  # steps whose latest replay's backward may come

    def record_backwards(self) -> None:
        """Record the backwards not recorded yet whose replays' backward ran (a training step's), of the latest
        forward first: the order a training step's backwards run in, as all its forwards were recorded first.
        They are recorded here, at a forward's call, rather than in the backward that first needs them: a
        recording on autograd's own backward thread makes CUDA's legacy stream wait on the capture, which CUDA
        refuses. Until then a backward runs the recording's autograd graph eagerly."""
        ready = [step for step in list(self.unrecorded) if step.backward_ran and not _pending_step(step)]
        for step in sorted(ready, key=lambda step: -step.forward_position):
            self.unrecorded.discard(step)
            step.record_backward()

    def hold(self, step: _Step) -> None:
        self.live += 1
        weakref.finalize(step, self._drop)

    def _drop(self) -> None:
        self.live -= 1
        self.retired = self.retired or self.live == 0


_POOLS: dict[tuple, _Pool] = {}  # per device and stream


def _pool() -> _Pool:
    stream = torch.cuda.current_stream()
    key = (stream.device, stream.stream_id)
    if key not in _POOLS or _POOLS[key].retired:
        _POOLS[key] = _Pool()
    return _POOLS[key]


class TrainingGraphs:
    """The training replay of one module's graphed forward (`graphs.graphed` makes it on the first call)."""

    REPLAYED = "training graph replay"

    def __init__(self, function, reads: tuple[str, ...] = (), max_graphs: int = 16) -> None:
        self.function = function
        self.module = function.__self__
        self.reads = reads
        self.max_graphs = max_graphs
        self.counts: collections.Counter[str] = collections.Counter()
        # A model holding graphed blocks runs its own Python: its blocks replay, and the code around them (masks
        # read on the host, embeddings) stays eager.
        self.holds_blocks = any(
            hasattr(type(inner).forward, "__transpile_reads__")
            for inner in self.module.modules()
            if inner is not self.module
        )
        self.reset()

    def reset(self) -> None:
        """Forget every recording: the next calls record afresh."""
        self._steps: dict[tuple, _Step | str] = {}
        self._seen = graphs._WarmUps()
        self._state: graphs._Snapshot | None = None
        self._parameters: list[torch.Tensor] = []
        self._hooks: list[dict] = []  # the hook tables of the modules inside, and the global ones

    def __call__(self, *args, **kwargs):
        reason = self._signature(args, kwargs)
        if isinstance(reason, str):
            self.counts[reason] += 1
            return self.function(*args, **kwargs)
        key, tensors = reason
        step = self._steps.get(key)
        if step is None:
            if self._seen.warming(key):
                self.counts["warm-up (original forward)"] += 1
                return self.function(*args, **kwargs)
            step = self._steps[key] = self._record(args, kwargs, tensors)
        if isinstance(step, _Step) and step.refused:
            step = self._steps[key] = step.refused
        if isinstance(step, str):
            self.counts[step] += 1
            return self.function(*args, **kwargs)
        outputs = step.replay(tensors)
        if isinstance(outputs, str):
            self.counts[outputs] += 1
            return self.function(*args, **kwargs)
        self.counts[self.REPLAYED] += 1
        return outputs

    def _signature(self, args: tuple, kwargs: dict) -> tuple[tuple, list] | str:
        if self.holds_blocks:
            return "original forward: a model over graphed blocks (the blocks replay)"
        if torch._C._autograd._top_saved_tensors_default_hooks(True) is not None:
            return "original forward: saved tensor hooks are on (activation checkpointing, save_on_cpu)"
        if torch._C._current_graph_task_id() != -1:
            return "original forward: called inside a backward (a checkpoint's recomputation)"
        described = graphs._described(args, kwargs)
        if isinstance(described, str):
            return described
        description, tensors = described
        if not tensors or not all(t.is_cuda for t in tensors):
            return "original forward: an input is not a CUDA tensor, or none is a tensor"
        if host_reads.capturing():
            return "original forward: called while another graph is being recorded"
        if self._state is None or not self._state.holds(versions=False):
            self._steps.clear()
            self._seen.clear()
            self._state = graphs._Snapshot(self.module, self.reads)
            self._parameters = list(self.module.parameters())
            self._hooks = graphs.hook_tables(self.function, self.module)
        if self._state.unstable:
            return f"original forward: `{self._state.unstable}` is a new object at each read (it cannot be guarded)"
        if any(self._hooks):  # they would run at the recording only
            return graphs.HOOKED
        wanted = tuple(p.requires_grad for p in self._parameters)
        if not any(wanted) and not any(t.requires_grad for t in tensors):
            return "original forward: nothing requires grad"
        autocast = torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda")
        stream = torch.cuda.current_stream()
        return (description, wanted, autocast, stream.device, stream.stream_id), tensors

    def _record(self, args: tuple, kwargs: dict, tensors: list) -> _Step | str:
        if len(self._steps) >= self.max_graphs:
            return "original forward: more call signatures than max_graphs"
        if graphs._DefaultGraphs.recorded >= graphs.MAX_DEFAULT_GRAPHS:
            return "original forward: MAX_DEFAULT_GRAPHS recordings held already"
        parameters = [p for p in self._parameters if p.requires_grad]
        if any(type(p) not in (torch.Tensor, torch.nn.Parameter) for p in parameters):
            return "original forward: a parameter is a tensor subclass (FSDP's DTensor)"
        if any(p._backward_hooks for p in parameters):
            return "original forward: a parameter has a tensor hook (it could keep the gradient it is given)"
        from . import wait_for_kernels  # kernels still compiling would be recorded as the original code

        wait_for_kernels()
        pool = _pool()
        try:
            step: _Step | str = _Step(self.function, args, kwargs, tensors, parameters, pool, self.module)
        except graphs._Unsupported as error:
            pool.retired = True
            return f"original forward: {error}"
        except Exception as error:  # noqa: BLE001 - as for inference graphs: the source's forward runs instead
            pool.retired = True
            return f"original forward: the training step cannot be recorded ({graphs._first_line(error)})"
        pool.hold(step)
        graphs._DefaultGraphs.recorded += 1
        weakref.finalize(step, graphs._forget)
        return step


class _Step:
    """One call signature's recordings: the forward's graph, and its backward's once a backward ran."""

    def __init__(self, function, args: tuple, kwargs: dict, tensors: list, parameters: list, pool, module) -> None:
        self.pool = pool
        self.name = getattr(function, "__qualname__", "the forward")
        # An input that is an earlier replay's output as handed out (the previous block's hidden state) is read where
        # it lies, as eager's next block reads it: no copy and no memory of its own. Its producer keeps that memory
        # until it goes, and rewrites it only in its own forward replay, which the pending rule below refuses while
        # this replay's backward may still read the input. Other inputs are copied into memory of the step's own.
        self.chained = [_produced(pool, t) for t in tensors]
        self.inputs = [
            (
                _alias(output)
                if output is not None
                else torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
            )
            for t, output in zip(tensors, self.chained)
        ]
        self.copied = [index for index, output in enumerate(self.chained) if output is None]
        with torch.no_grad():
            for index in self.copied:
                self.inputs[index].copy_(tensors[index])
        for static, tensor in zip(self.inputs, tensors):
            static.requires_grad_(tensor.requires_grad)
        # What a replay copies its inputs into: the same memory, with version counters of their own, since the
        # recording's autograd graph saved the static inputs and checks their versions in the first backward.
        self.slots = [_alias(self.inputs[index]) for index in self.copied]
        self.places = [
            (index, _where(self.inputs[index])) for index, output in enumerate(self.chained) if output is not None
        ]
        self.wanted = [index for index, t in enumerate(tensors) if t.requires_grad]  # inputs that get a gradient
        self.parameters = parameters
        # The recording reads stand-ins of the parameters: new leaves on the same memory. Autograd keeps a leaf's
        # accumulator node, with the stream it was made on, while any graph holds it (the previous step's, kept by
        # a `loss` variable), and a backward recorded into such a node on another stream would have to wait on
        # it, which a capture refuses. The stand-ins' nodes are made on the recording's stream.
        # They have version counters of their own: the recording's autograd graph checks the versions of what it
        # saved when its backward is recorded, after an optimizer's step wrote the parameters in place.
        standins = {id(p): torch.nn.Parameter(_alias(p), requires_grad=True) for p in parameters}
        self.recorded_targets = [self.inputs[index] for index in self.wanted] + [standins[id(p)] for p in parameters]
        static_args, static_kwargs = graphs._rebuild((args, kwargs), iter(self.inputs))
        self.function, self.call = function, (static_args, static_kwargs)  # for a recomputation (`_recomputed`)
        self.autocast = torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda")
        before = graphs._describe((static_args, static_kwargs), [])
        versions = [t._version for t in self.inputs]
        attributes = graphs._attributes(module)
        device = self.inputs[0].device
        graphs._RECORDING.depth = getattr(graphs._RECORDING, "depth", 0) + 1
        caching = torch.is_autocast_cache_enabled()
        replaced = _replace_parameters(module, standins)
        stream = graphs.recording_stream()
        try:
            self._warm_up(function, static_args, static_kwargs, module, device)
            graphs._check_unchanged(before, (static_args, static_kwargs), versions, self.inputs, attributes, module)
            # Autocast's cache would hand the recording a cast made outside it (its memory freed when the autocast
            # region ends) or keep one made inside it (memory only replays write): off, the graph casts each time.
            torch.set_autocast_cache_enabled(False)
            self.forward_graph = torch.cuda.CUDAGraph()
            with (
                _no_waits(),
                torch.cuda.graph(
                    self.forward_graph, pool=pool.handle(), stream=stream, capture_error_mode="thread_local"
                ),
            ):
                output = function(*static_args, **static_kwargs)
        finally:
            _replace_parameters(module, replaced)
            torch.set_autocast_cache_enabled(caching)
            graphs._RECORDING.depth -= 1
        leaves, self.spec = pytree.tree_flatten(output)
        for leaf in leaves:
            if not isinstance(leaf, (torch.Tensor, *graphs._PLAIN)):
                raise graphs._Unsupported(f"an output of type {type(leaf).__name__} (not a tensor or a plain value)")
        held = {t.untyped_storage().data_ptr() for t in (*self.inputs, *module.parameters(), *module.buffers())}
        if any(isinstance(leaf, torch.Tensor) and leaf.untyped_storage().data_ptr() in held for leaf in leaves):
            raise graphs._Unsupported("an output is an input or a parameter, or a view of one")
        self.tensor_leaves = [index for index, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        self.leaves = leaves
        outputs = [leaves[index] for index in self.tensor_leaves]
        self.differentiable = [index for index, t in enumerate(outputs) if t.requires_grad]
        if not self.differentiable:
            raise graphs._Unsupported("no output requires grad")
        # The recording's autograd graph: its saved values are the memory the forward's replays write. Its
        # backward runs once eagerly and is then recorded, which frees them for the recordings after it.
        self.recorded = [outputs[index] for index in self.differentiable]
        self.grad_outputs: list[torch.Tensor] = []  # the backward graph's inputs, made when it is recorded
        self.forward_position = pool.recordings
        pool.recordings += 1
        self.handout = graphs._Handout([t.detach() for t in outputs], order=self.forward_position)
        pool.handouts.add(self.handout)
        pool.unrecorded.add(self)
        finalizer = weakref.finalize(self, self.handout.release)
        finalizer.atexit = False
        self.backward_graph: torch.cuda.CUDAGraph | None = None
        self.backward_position = math.inf  # recorded after every other recording, until it is
        self.gradients: graphs._Handout | None = None  # the backward graph's gradients, per target, once recorded
        self.generation = 0  # replays of the forward so far
        self.live: weakref.ref | None = None  # the node of the latest replay
        self.marker = torch.empty(0)  # saved by each node: autograd frees it with the node's saved values
        self.backward_ran = False  # whether a backward ran (eagerly): then it can be recorded
        self.refused = ""  # set when the backward cannot be recorded: the signature runs the source from then on

    def _warm_up(self, function, args: tuple, kwargs: dict, module, device) -> None:
        """Run the forward and its backward once on the stream the recordings run on (libraries set up per-stream
        state on a first call), leaving the RNG and the module's buffers as they were."""
        buffers = list(module.buffers())
        kept = [b.clone() for b in buffers]
        side = graphs.recording_stream()
        side.wait_stream(torch.cuda.current_stream(device))
        noted = host_reads.Noting()
        with torch.random.fork_rng(devices=[device]), torch.cuda.stream(side):
            state = torch.cuda.get_rng_state(device)
            with noted:
                output = function(*args, **kwargs)
            self.random = not torch.equal(state, torch.cuda.get_rng_state(device))  # dropout: no recomputation
            outputs = [t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad]
            if outputs:
                ones = [torch.ones_like(t) for t in outputs]
                torch.autograd.grad(outputs, self.recorded_targets, ones, allow_unused=True)
            del output, outputs
        torch.cuda.current_stream(device).wait_stream(side)
        if buffers:
            with torch.no_grad():
                torch._foreach_copy_(buffers, kept)
        if noted.values:
            raise graphs._Unsupported("the forward reads a tensor's value on the host (a replay would wait for it)")

    def replay(self, tensors: list):
        """The outputs of one replay on `tensors`, as the node's; or why the source's forward runs instead."""
        if self.pool.unrecorded:
            self.pool.record_backwards()
            if self.refused:
                return self.refused
        node = self.live() if self.live is not None else None
        if node is not None and _pending(node):
            return "original forward: its previous replay awaits its backward (called again before a backward)"
        position = self.forward_position
        for other in list(self.pool.pending):
            if other is not self and not other.forward_position < position < other.backward_position:
                if _pending_step(other):
                    return "original forward: a replay would overwrite values another replay's backward needs"
                self.pool.pending.discard(other)
        if not all([handout.evict() for handout in self._later(position)]):
            return "original forward: a view of an earlier output holds the graph's memory"
        if any(_where(tensors[index]) != place for index, place in self.places):
            return (
                "original forward: an input is not the output it was recorded on (the previous block's, where it lies)"
            )
        if self.slots:
            with torch.no_grad():
                torch._foreach_copy_(self.slots, [tensors[index] for index in self.copied])
        self.forward_graph.replay()
        self.generation += 1
        outputs = self.handout.hand_out()
        wanted = [tensors[index] for index in self.wanted]
        results = _Replayed.apply(self, outputs, tensors, *wanted, *self.parameters)
        self.live = weakref.ref(results[self.differentiable[0]].grad_fn)
        self.pool.pending.add(self)
        leaves = list(self.leaves)
        for index, result in zip(self.tensor_leaves, results):
            leaves[index] = result
        return pytree.tree_unflatten(leaves, self.spec)

    def _later(self, position: int) -> list:
        return [handout for handout in list(self.pool.handouts) if handout.order >= position]

    def backward(self, node, grads: tuple) -> list:
        """The gradients of the targets for one backward of the replay `node` stands for."""
        grads = [grads[index] for index in self.differentiable]
        if getattr(node, "spent", False) or node.generation != self.generation:
            return self._recomputed(node, grads)
        if self.backward_graph is None:
            return self._eager_backward(grads)
        position = self.backward_position
        for other in list(self.pool.pending):
            if other is not self and not other.forward_position < position < other.backward_position:
                if _pending_step(other):
                    other.live().spent = True  # its backward, should one come, recomputes (`_recomputed`)
                self.pool.pending.discard(other)
        if not all([handout.evict() for handout in self._later(position)]):
            raise RuntimeError(
                f"transpile: the backward graph of {self.name} cannot replay: a view of an earlier output holds its "
                "memory (torch < 2.12). TRANSPILE_CUDA_GRAPHS=0 turns graphs off."
            )
        torch._foreach_copy_(self.grad_outputs, grads)
        self.backward_graph.replay()
        node.spent = True  # its own temporaries may lie where its saved values were: a second backward recomputes
        return self.gradients.hand_out()

    def _recomputed(self, node, grads: list) -> list:
        """The backward of a replay whose saved values later replays overwrote (a second backward through a graph
        kept with `retain_graph=True`, or backwards run in another order than recorded): the source's forward runs
        again on the call's inputs, as activation checkpointing does, and is differentiated."""
        if self.random or graphs._versions([*node.inputs, *self.parameters]) != node.versions:
            raise RuntimeError(
                f"transpile: a backward reached the CUDA-graph replay of {self.name} after later replays overwrote "
                "the values it saved, and its forward cannot be run again as it ran: "
                + ("it draws random numbers (dropout)" if self.random else "an input or a parameter changed in place")
                + ". TRANSPILE_CUDA_GRAPHS=0 turns graphs off."
            )
        inputs = [t.detach().requires_grad_(t.requires_grad) for t in node.inputs]
        args, kwargs = graphs._rebuild(self.call, iter(inputs))
        with torch.enable_grad(), torch.autocast("cuda", self.autocast or torch.float32, enabled=bool(self.autocast)):
            output = self.function(*args, **kwargs)  # inside a backward: graphed forwards run as they are
        outputs = [leaf for leaf in pytree.tree_leaves(output) if isinstance(leaf, torch.Tensor)]
        recomputed = [outputs[index] for index in self.differentiable]
        wanted = [inputs[index] for index in self.wanted]
        return list(torch.autograd.grad(recomputed, [*wanted, *self.parameters], grads, allow_unused=True))

    def _eager_backward(self, grads: list) -> list:
        """Until the backward is recorded: the recording's autograd graph run eagerly, and kept (its saved values
        are the memory the replays write)."""
        device = self.inputs[0].device
        capture_stream = graphs.recording_stream()
        current = torch.cuda.current_stream(device)
        capture_stream.wait_stream(current)  # the recording's nodes run on the stream it ran on
        targets = self.recorded_targets
        gradients = torch.autograd.grad(self.recorded, targets, grads, retain_graph=True, allow_unused=True)
        current.wait_stream(capture_stream)
        self.backward_ran = True
        return list(gradients)

    def record_backward(self) -> None:
        """Record the backward from the recording's autograd graph, which frees its saved values to the pool."""
        try:
            graph = torch.cuda.CUDAGraph()
            with (
                _no_waits(),
                torch.cuda.graph(
                    graph, pool=self.pool.handle(), stream=graphs.recording_stream(), capture_error_mode="thread_local"
                ),
            ):
                # The output gradients and the gradients are the pool's, where the saved values of the backwards
                # recorded before lay: as in eager, a backward's gradients take the memory its saved values free.
                self.grad_outputs = [torch.empty_like(t) for t in self.recorded]  # allocations only: no kernel
                static = torch.autograd.grad(self.recorded, self.recorded_targets, self.grad_outputs, allow_unused=True)
        except Exception as error:  # noqa: BLE001 - the next calls run the source
            self.pool.retired = True
            self.refused = f"original forward: its backward cannot be recorded ({graphs._first_line(error)})"
        else:
            self.backward_graph = graph
            self.backward_position = self.pool.recordings
            self.pool.recordings += 1
            # Handed out as a forward's outputs are: a parameter's `.grad` lies in the pool until the next replay that
            # writes there, which moves it first if it is still held (accumulation without `zero_grad`).
            self.gradients = graphs._Handout(list(static), order=self.backward_position)
            self.pool.handouts.add(self.gradients)
            finalizer = weakref.finalize(self, self.gradients.release)
            finalizer.atexit = False
        self.recorded = self.recorded_targets = None


def _replace_parameters(module: torch.nn.Module, by: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """Put `by[id(p)]` in place of each parameter `p` of `module`'s tree it names; the map that puts them back."""
    back = {}
    for inner in module.modules():
        table = inner._parameters
        for name, parameter in table.items():
            if parameter is not None and id(parameter) in by:
                table[name] = by[id(parameter)]
                back[id(table[name])] = parameter
    return back


def _alias(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor on `tensor`'s memory with a version counter of its own."""
    return graphs._on_storage(tensor.untyped_storage(), *_layout(tensor), tensor.device)


def _layout(tensor: torch.Tensor) -> tuple:
    return tensor.storage_offset(), tensor.shape, tensor.stride(), tensor.dtype


def _produced(pool: _Pool, tensor: torch.Tensor) -> torch.Tensor | None:
    """The output of a replay in `pool` that `tensor` is, as handed out (on its memory, with its layout), or None."""
    place = _where(tensor)
    for handout in list(pool.handouts):
        if not handout.copies:
            for output in handout.static:
                if isinstance(output, torch.Tensor) and _where(output) == place:
                    return output
    return None


def _where(tensor: torch.Tensor) -> tuple:
    storage = tensor.untyped_storage()
    return (storage.data_ptr(), storage.device, storage.nbytes()), *_layout(tensor)


def _pending(node) -> bool:
    """Whether the replay `node` stands for may still get a backward that reads its saved values."""
    if getattr(node, "spent", False):
        return False
    try:
        node.saved_tensors  # noqa: B018 - reading them raises once autograd freed them
    except RuntimeError:  # autograd freed them: the backward ran without retain_graph
        return False
    return True


def _pending_step(step: _Step) -> bool:
    node = step.live() if step.live is not None else None
    return node is not None and _pending(node)


class _no_waits:
    """Recordings run under torch's sync check set to `error`: a wait on the device raises before it happens,
    which ends the recording cleanly (CUDA's own refusal would leave torch's CUDA generator unusable)."""

    def __enter__(self):
        self.mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")

    def __exit__(self, *exc):
        torch.cuda.set_sync_debug_mode(self.mode)


class _Replayed(torch.autograd.Function):
    """The node of one forward replay: its inputs are the block's inputs and parameters that get gradients."""

    @staticmethod
    def forward(ctx, step: _Step, outputs: list, tensors: list, *targets):
        ctx.step = step
        ctx.generation = step.generation
        ctx.inputs = tensors  # for a recomputation, with the versions of everything it reads
        ctx.versions = graphs._versions([*tensors, *step.parameters])
        ctx.save_for_backward(step.marker)  # freed with the node's saved values: `_pending` looks
        ctx.mark_non_differentiable(*(t for index, t in enumerate(outputs) if index not in step.differentiable))
        return tuple(outputs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        return (None, None, None, *ctx.step.backward(ctx, grads))
