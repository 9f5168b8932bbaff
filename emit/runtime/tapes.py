"""Tapes: the CPU's counterpart of the default CUDA graphs (graphs.py).

A transpiled forward on the CPU runs its source's Python on every call: module calls, config lookups,
mask set-up, each op through the dispatcher from Python. At the small shapes a CPU serves, that host
code costs as much as the arithmetic. The build proves which forwards have no data-dependent branch,
host sync or Python side effect (graphing.py marks them `graphed`); on CUDA they replay as graphs. On
the CPU there is no graph to replay, so the runtime records the ops one call of the forward runs (the
aten ops it dispatches and the fused kernels it launches) and writes them out as one straight-line
Python function, a tape, which later calls of the same signature run instead of the forward:

    def replay(i0):
        t1 = aten_embedding_default(c0, i0)
        t2, t3, t4 = aten_native_layer_norm_default(t1, [128], c1, c2, 1e-05)
        del t3, t4
        ...

What the tape leaves out, it proves it may:

- **Values fixed by the forward** (made by deterministic ops from constants and from the module's
  parameters and buffers alone, with no write a replay would repeat: transformers' causal masks,
  position ids, rotary tables, embeddings of position ids) are computed once, at the recording, and
  bound into the tape, up to FOLDED_BYTES. A host read of such a value (`.item()`, `bool(t)`) needs no
  check. The replayer's guards (graphs.py's `_Snapshot`) watch the parameters and buffers (identity,
  memory, version counter): `load_state_dict`, an optimizer step or `.to()` records the tape again.
- **Ops whose results nothing uses** (and that write nothing and draw no random numbers) are dropped.
- **Host reads of other values** stay, each followed by a check against the value the recording read:
  a replay whose read differs stops there, and the call runs the source's forward (the signature keeps
  running it). The check comes before any write into an input or parameter, and before any random draw,
  or the tape is refused: the forward run after a stopped replay must start from the state the call got.

A tape calls the ops the recording saw, with the same arguments, on the call's tensors: inputs it writes
into are written, random ops draw from the generator, parameters are read at every call (in-place updates
are seen). What it cannot see is Python state the forward reads outside its module's guards (graphs.py's
`_Snapshot`): the same contract as a CUDA graph. The recording refuses, with the reason, what it cannot
stand for: a tensor's memory read outside the dispatcher (`tolist()`, `numpy()`, `data_ptr()`), a tensor
subclass, an op result that is neither tensors nor a plain value.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import weakref
from typing import Any, Callable

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

_LOCAL = threading.local()
MISS = object()  # a replay stopped at a host read that differs from the recording's
_RANDOM = torch.Tag.nondeterministic_seeded
# Tensor methods that read a tensor's memory without the dispatcher: the recording would not see the read.
_RAW_READS = {
    torch.Tensor.tolist: "tolist()",
    torch.Tensor.numpy: "numpy()",
    torch.Tensor.__array__: "__array__()",
    torch.Tensor.data_ptr: "data_ptr()",
    torch.Tensor.untyped_storage: "untyped_storage()",
    torch.Tensor.storage: "storage()",
    torch.Tensor.__dlpack__: "__dlpack__()",
}
_LITERALS = (type(None), bool, int, str)
# The memory a tape may hold in folded values; the values past it are computed at each replay. A causal mask
# for 8k tokens (64 MiB in bool) is one: eager makes it at each call, the peak holds it either way.
FOLDED_BYTES = 64 << 20
# `torch.tensor(data)`: a tensor made from Python values outside the dispatcher, first seen as these ops' argument.
_LIFTS = (torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default)


def recorder() -> "Recorder | None":
    """The recorder of this thread, while a tape records (the runtime's kernels record themselves through it)."""
    return getattr(_LOCAL, "recorder", None)


class _Ref:
    """A tensor of the tape, in an entry's arguments: its slot."""

    __slots__ = ("slot",)

    def __init__(self, slot: int) -> None:
        self.slot = slot


class _Entry:
    """One call the forward made: an aten op, or a fused kernel of the runtime."""

    __slots__ = ("func", "name", "args", "kwargs", "inputs", "outs", "reads", "writes", "random", "effect")

    def __init__(self, func, name: str, args, kwargs, inputs, outs, reads, writes, random: bool, effect: bool) -> None:
        self.func = func
        self.name = name  # the global the tape calls it by
        self.args = args  # the arguments, tensors as `_Ref`s
        self.kwargs = kwargs
        self.inputs = inputs  # the slots of its tensor arguments
        self.outs = outs  # a slot, a list of slots (None for a missing tensor), or None (a value: `reads`)
        self.reads = reads  # the plain value the op returned (a host read), or _NO_READ
        self.writes = writes  # the slots it writes into (in place, `out=`)
        self.random = random
        self.effect = effect  # kept whether or not its results are used


_NO_READ = object()


class Recorder(TorchDispatchMode):
    """Records the calls of one forward; `tape()` turns them into a `Tape`, or says why it cannot."""

    def __init__(self, tensors: list[torch.Tensor], state: list[torch.Tensor] = ()) -> None:
        """`tensors`: the call's tensor arguments, in order. `state`: the module tree's parameters and buffers,
        which the replayer's guards watch (identity, memory and version): values made from them alone may be
        folded, since any change to them records the tape again."""
        super().__init__()
        self.entries: list[_Entry] = []
        self.refused = ""  # why no tape can stand for the forward; recording stops at the first reason
        self.kind: list[str] = []  # per slot: "input", "constant" or "result"
        self.base: list[int] = []  # per slot: the slot whose memory it uses (itself, for an allocation)
        self.held: dict[int, torch.Tensor] = {}  # constants, and results that may turn out fixed
        self.maybe_fixed: set[int] = set()  # results made from fixed values alone, deterministically
        self.views: set[int] = set()  # views of constants made from constants alone
        self._slots: dict[int, tuple[weakref.ref, int]] = {}  # id(tensor) -> (the tensor, its slot)
        # A storage seen (its address: held by the weak reference, never reused while recording) -> its base slot.
        self._storages: dict[int, tuple[StorageWeakRef, int]] = {}
        self._raw = _RawReads(self)
        self._state = {id(t) for t in state}
        self.state: set[int] = set()  # the slots of `state` tensors
        self.inputs = [self._slot(tensor, "input") for tensor in tensors]  # per argument; a repeated tensor repeats

    # -- recording ---------------------------------------------------------------------------------
    def __enter__(self):
        _LOCAL.recorder = self
        self._raw.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        _LOCAL.recorder = None
        self._raw.__exit__(*exc)
        return super().__exit__(*exc)

    @contextlib.contextmanager
    def paused(self):
        """Calls inside are not recorded (a kernel's own allocations and launch): the caller records the call."""
        _LOCAL.recorder = None
        with torch.utils._python_dispatch._disable_current_modes(), torch._C.DisableTorchFunction():
            try:
                yield
            finally:
                _LOCAL.recorder = self

    def refuse(self, reason: str) -> None:
        self.refused = self.refused or reason

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.refused:
            return func(*args, **kwargs)
        if any(t not in (torch.Tensor, torch.nn.Parameter) for t in types):
            self.refuse(f"a tensor subclass reached {func}")
            return func(*args, **kwargs)
        written = [
            arg
            for index, spec in enumerate(func._schema.arguments)
            if spec.alias_info is not None and spec.alias_info.is_write
            for arg in [args[index] if index < len(args) else kwargs.get(spec.name)]
        ]
        result = func(*args, **kwargs)
        self.record(func, _op_name(func), args, kwargs, result, written, random=_RANDOM in func.tags)
        return result

    def kernel(self, kernel, args: tuple, outputs: tuple) -> None:
        """A fused kernel of the runtime ran (outside the dispatcher): record it as one call."""
        self.record(kernel, re.sub(r"\W", "_", f"kernel_{kernel.name}"), args, {}, outputs, [], random=False)

    def record(self, func, name: str, args, kwargs, result, written, random: bool) -> None:
        with torch._C.DisableTorchFunction():  # storages read here are not the forward's raw reads
            arg_refs = self._refs(args)
            kwarg_refs = self._refs(kwargs)
            inputs = [r.slot for r in pytree.tree_leaves((arg_refs, kwarg_refs)) if isinstance(r, _Ref)]
            writes = [self._slot(t, "constant") for t in pytree.tree_leaves(written) if isinstance(t, torch.Tensor)]
            fixed = not random and all(s in self.maybe_fixed for s in inputs)
            if func in _LIFTS:
                fixed = True
            # A view of constants alone (`weight.t()`): its memory is theirs, so it is bound once and still reads
            # what they hold at each replay.
            viewing = not random and not writes and all(self.kind[s] == "constant" or s in self.views for s in inputs)
            reads, outs = _NO_READ, None
            if isinstance(result, torch.Tensor):
                outs = self._result(result, fixed, viewing)
            elif isinstance(result, (tuple, list)) and all(isinstance(r, (torch.Tensor, type(None))) for r in result):
                outs = [None if r is None else self._result(r, fixed, viewing) for r in result]
            elif isinstance(result, (bool, int, float)) or result is None:
                reads = result if result is not None else _NO_READ
            else:
                self.refuse(f"{name} returned a {type(result).__name__}, neither tensors nor a plain value")
                return
            effect = random or bool(writes) or (result is None)
            self.entries.append(_Entry(func, name, arg_refs, kwarg_refs, inputs, outs, reads, writes, random, effect))

    def _refs(self, value):
        if isinstance(value, torch.Tensor):
            return _Ref(self._slot(value, "constant"))
        if isinstance(value, (tuple, list)):
            return type(value)(self._refs(v) for v in value)
        if isinstance(value, dict):
            return {k: self._refs(v) for k, v in value.items()}
        return value

    def _slot(self, tensor: torch.Tensor, kind: str) -> int:
        """The slot of a tensor seen before, or a new one of `kind` (the first sight of a tensor the forward did
        not make: an input, or a constant such as a parameter)."""
        known = self._slots.get(id(tensor))
        if known is not None and known[0]() is tensor:
            return known[1]
        slot = len(self.kind)
        self.kind.append(kind)
        self._slots[id(tensor)] = (weakref.ref(tensor), slot)
        self.base.append(self._base(tensor, slot))
        if kind == "constant":
            self.held[slot] = tensor
            if id(tensor) in self._state:
                self.state.add(slot)
                self.maybe_fixed.add(slot)
        return slot

    def _base(self, tensor: torch.Tensor, slot: int) -> int:
        """The slot whose memory `tensor` uses: that of the first tensor seen on its storage, else its own."""
        storage = tensor.untyped_storage()
        known = self._storages.get(storage._cdata)
        if known is not None:
            return known[1]
        self._storages[storage._cdata] = (StorageWeakRef(storage), slot)
        return slot

    def _result(self, tensor: torch.Tensor, fixed: bool, viewing: bool) -> int:
        known = self._slots.get(id(tensor))
        if known is not None and known[0]() is tensor:  # in place, `out=`: the tensor it was given
            return known[1]
        slot = len(self.kind)
        self.kind.append("result")
        self._slots[id(tensor)] = (weakref.ref(tensor), slot)
        base = self._base(tensor, slot)
        self.base.append(base)
        if fixed and (base == slot or base in self.maybe_fixed):
            self.maybe_fixed.add(slot)
            self.held[slot] = tensor
        elif viewing and self.kind[base] == "constant":
            self.views.add(slot)
            self.held[slot] = tensor
        return slot

    # -- the tape ----------------------------------------------------------------------------------
    def tape(self, output: Any, label: str) -> "Tape | str":
        """The tape of the recorded forward, which returned `output`; or why there is none."""
        if self.refused:
            return self.refused
        leaves, spec = pytree.tree_flatten(output)
        with torch._C.DisableTorchFunction():
            outs = []
            for leaf in leaves:
                if isinstance(leaf, torch.Tensor):
                    outs.append(_Ref(self._slot(leaf, "constant")))
                elif isinstance(leaf, (*_LITERALS, float, torch.dtype, torch.device)):
                    outs.append(leaf)
                else:
                    return f"an output of type {type(leaf).__name__} (not a tensor or a plain value)"
        fixed, folded = self._fixed(outs)
        kept = self._kept(outs, folded)
        last_read = max((i for i in kept if self.entries[i].reads is not _NO_READ), default=-1)
        for index in kept:
            entry = self.entries[index]
            if index >= last_read:
                break
            if entry.random or any(self.kind[self.base[s]] != "result" for s in entry.writes):
                return (
                    "the forward writes into an input or parameter, or draws random numbers, before a host "
                    "read the replay must check"
                )
        return Tape(self, kept, fixed, outs, spec, label)

    def _fixed(self, outs: list) -> tuple[set[int], list[bool]]:
        """The slots whose values the recording computed once for every replay (see the module docstring), and
        per entry whether it is folded: run at the recording only."""
        banned: set[int] = set()  # bases a replayed op writes, or reads before a folded write
        output_bases = [self.base[o.slot] for o in outs if isinstance(o, _Ref)]
        banned |= {b for b in output_bases if output_bases.count(b) > 1}  # outputs sharing memory keep it
        banned |= {b for b in output_bases if self.kind[b] != "result"}  # a view of a parameter stays one
        while True:
            fixed: set[int] = set()
            folded: list[bool] = []
            budget = FOLDED_BYTES
            for entry in self.entries:
                slots = _slots_of(entry.outs)
                lifted = entry.func in _LIFTS
                if slots and all(s in self.views for s in slots):
                    folded.append(True)  # bound as it is: a view reads its constants' memory at each replay
                    continue
                folds = (
                    not entry.random
                    and all(s in self.maybe_fixed for s in slots)
                    and all(self.base[s] not in banned for s in slots + entry.writes)
                    and all(
                        s in fixed or s in self.state or (lifted and self.kind[s] == "constant") for s in entry.inputs
                    )
                    # writes into tensors the forward made: the ones it was given, or keeps, are written each call
                    and all(s in fixed and self.kind[self.base[s]] == "result" for s in entry.writes)
                    and budget >= _bytes(self.held, self.base, slots)
                )
                folded.append(folds)
                if folds:
                    fixed.update(slots)
                    budget -= _bytes(self.held, self.base, slots)
            more: set[int] = set()
            read_by_replay: set[int] = set()
            for entry, folds in zip(self.entries, folded):
                if folds:
                    more |= {self.base[s] for s in entry.writes if self.base[s] in read_by_replay}
                else:
                    more |= {self.base[s] for s in entry.writes}
                    read_by_replay |= {self.base[s] for s in entry.inputs}
            if more <= banned:
                return fixed, folded  # the views bound are `self.views`, not fixed: their values may change
            banned |= more

    def _kept(self, outs: list, folded: list[bool]) -> list[int]:
        """The entries a replay runs, in order: not folded, and used (or writing, or drawing random numbers)."""
        live = {o.slot for o in outs if isinstance(o, _Ref)}
        live |= {self.base[s] for s in live}
        kept: list[int] = []
        for index in range(len(self.entries) - 1, -1, -1):
            entry = self.entries[index]
            if folded[index]:
                continue  # computed at the recording
            if not (entry.effect or entry.reads is not _NO_READ or any(s in live for s in _slots_of(entry.outs))):
                continue
            kept.append(index)
            live.update(entry.inputs)
            live.update(self.base[s] for s in entry.inputs)
        kept.reverse()
        return kept


def _bytes(held: dict[int, torch.Tensor], base: list[int], slots: list[int]) -> int:
    """The memory folding `slots` would hold: their allocations (a view holds its base's memory)."""
    return sum(held[s].untyped_storage().nbytes() for s in slots if s in held and base[s] == s)


def _slots_of(outs) -> list[int]:
    if outs is None:
        return []
    if isinstance(outs, int):
        return [outs]
    return [s for s in outs if s is not None]


def _op_name(func) -> str:
    return re.sub(r"\W", "_", f"{func.namespace}_{func._schema.name.split('::')[-1]}_{func._overloadname}")


class Tape:
    """The straight-line function a recorded forward replays as, and what it binds."""

    def __init__(self, recorder: Recorder, kept: list[int], fixed: set[int], outs: list, spec, label: str) -> None:
        self.spec = spec
        self.guards = sum(1 for i in kept if recorder.entries[i].reads is not _NO_READ)
        self.folded_reads = sum(1 for e in recorder.entries if e.reads is not _NO_READ) - self.guards
        self.ops = len(kept)
        self.recorded = len(recorder.entries)
        namespace: dict[str, Any] = {"MISS": MISS, "_same": _same}
        names = _Names(recorder, fixed, namespace)
        lines = []
        last_use: dict[int, int] = {}  # slot of a result -> the last line using it
        body: list[tuple[str, list[int]]] = []
        for index in kept:
            entry = recorder.entries[index]
            function = names.function(entry)
            arguments = [names.render(a) for a in entry.args]
            arguments += [f"{k}={names.render(v)}" for k, v in entry.kwargs.items()]
            call = f"{function}({', '.join(arguments)})"
            if entry.reads is not _NO_READ:
                value = names.constant(entry.reads)
                code = f"if not _same({call}, {value}):\n        return MISS"
            elif entry.outs is None:
                code = call
            elif isinstance(entry.outs, int):
                code = f"{names.target(entry.outs)} = {call}"
            else:
                targets = [names.target(s) for s in entry.outs]
                code = f"{', '.join(targets)}{',' if len(targets) == 1 else ''} = {call}" if targets else call
            for slot in entry.inputs:
                last_use[slot] = len(body)
            body.append((code, _slots_of(entry.outs)))
        returned = []
        for out in outs:
            if isinstance(out, _Ref):
                name = names.render(out)
                if out.slot in fixed or recorder.base[out.slot] in fixed:
                    name = f"{name}.clone()"  # eager makes it anew at each call: so does the replay
                returned.append(name)
                last_use[out.slot] = len(body)
            else:
                returned.append(names.constant(out))
        for line, (code, made) in enumerate(body):
            lines.append(code)
            dead = sorted({s for s, last in last_use.items() if last == line and s in names.results})
            dead += [s for s in made if s not in last_use]  # made and never used (a write's own result)
            if dead:
                lines.append(f"del {', '.join(names.results[s] for s in dict.fromkeys(dead))}")
        inputs = [f"i{s}" if recorder.inputs.index(s) == p else f"_{p}" for p, s in enumerate(recorder.inputs)]
        self.source = (
            f"def replay({', '.join(inputs)}):\n"
            + "".join(f"    {line}\n" for line in lines)
            + f"    return [{', '.join(returned)}]\n"
        )
        exec(compile(self.source, f"<transpile tape of {label}>", "exec"), namespace)
        self.run: Callable[..., Any] = namespace["replay"]

    def replay(self, tensors: list, copy_outputs: bool = True) -> Any:
        """The forward's outputs for `tensors`, or MISS where a host read differs from the recording's."""
        outputs = self.run(*tensors)
        if outputs is MISS:
            return MISS
        return pytree.tree_unflatten(outputs, self.spec)


class _Names:
    """The names a tape's code gives its values: inputs `i`, results `t`, constants and bound values `c`."""

    def __init__(self, recorder: Recorder, fixed: set[int], namespace: dict) -> None:
        self.recorder = recorder
        self.fixed = fixed
        self.namespace = namespace
        self.results: dict[int, str] = {}
        self._constants: dict[int, str] = {}  # id of a bound object -> its name

    def result(self, slot: int) -> str:
        return self.results.setdefault(slot, f"t{slot}")

    def target(self, slot: int | None) -> str:
        """The name an op's result is assigned to: `_` where the tape names it otherwise (an input written in
        place, a tensor missing from the op's results)."""
        if slot is None or self.recorder.kind[slot] != "result" or slot in self.fixed or slot in self.recorder.views:
            return "_"
        return self.result(slot)

    def function(self, entry: _Entry) -> str:
        """The global an entry's op or kernel is called by: its name, made unique."""
        name = self._constants.get(id(entry.func))
        if name is None:
            name = entry.name if entry.name not in self.namespace else f"{entry.name}_{len(self._constants)}"
            self._constants[id(entry.func)] = name
            if entry.name.startswith("kernel_"):
                self.namespace[name] = _kernel_call(entry.func, len(entry.outs))
            else:
                self.namespace[name] = getattr(entry.func, "_op", entry.func)
        return name

    def render(self, value) -> str:
        if isinstance(value, _Ref):
            slot = value.slot
            kind = self.recorder.kind[slot]
            if kind == "input":
                return f"i{slot}"
            if kind == "constant" or slot in self.fixed or slot in self.recorder.views:
                return self.constant(self.recorder.held[slot])
            return self.result(slot)
        if isinstance(value, list):
            return f"[{', '.join(self.render(v) for v in value)}]"
        if isinstance(value, tuple):
            return f"({''.join(self.render(v) + ', ' for v in value)})"
        return self.constant(value)

    def constant(self, value) -> str:
        if isinstance(value, _LITERALS) or (isinstance(value, float) and math.isfinite(value)):
            return repr(value)
        name = self._constants.get(id(value))
        if name is None:
            name = self._constants[id(value)] = f"c{len(self._constants)}"
            self.namespace[name] = value
        return name


def _kernel_call(kernel, outputs: int) -> Callable:
    """A runtime kernel as a tape calls it: its outputs, or its eager reference's where it declines a call (its
    plans forgotten, a kernel compiling again): the recording saw it run on this signature."""

    run = kernel._run  # not `kernel(...)`: a replay never runs inside a recording, which that call checks for

    def call(*args):
        result = run(*args)
        return result if result is not None else kernel.reference(*args)[:outputs]

    return call


def _same(value: object, recorded: object) -> bool:
    """Whether a host read at a replay reads what the recording read (NaN and the sign of zero included)."""
    if type(value) is not type(recorded):
        return False
    if isinstance(value, float):
        if math.isnan(value):
            return math.isnan(recorded)
        return value == recorded and math.copysign(1.0, value) == math.copysign(1.0, recorded)
    return value == recorded


class _RawReads(TorchFunctionMode):
    """While recording: a read of a tensor's memory outside the dispatcher refuses the tape."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        how = _RAW_READS.get(func)
        if how is not None:
            self.recorder.refuse(f"the forward reads a tensor's memory outside PyTorch's dispatcher (`{how}`)")
        return func(*args, **(kwargs or {}))
