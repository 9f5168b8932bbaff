"""Recurrent modules Dynamo can trace (the fix of TP512).

Dynamo refuses to wrap any `nn.RNN`, `nn.LSTM` or `nn.GRU` instance (GB0014, unless
`torch._dynamo.config.allow_rnn`): not only the call breaks, so does reading a parameter of one.
The fix therefore changes the object, not the call: `nn.LSTM(...)` in `__init__` becomes
`TraceableLSTM(...)`, a class the fix writes once per file after the imports. It takes the same
arguments, holds the same parameters under the same names (taken over from a `nn.LSTM` built in
its `__init__`, so initialisation draws the same random numbers), makes the `torch._VF` call of
`nn.LSTM.forward` in eager, and under `torch.compile` writes the recurrence out step by step:
`torch._VF.lstm` itself is traced by Dynamo but does not compile under AOTAutograd with gradients
or Inductor on CPU, while matmuls and pointwise ops do.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from string import Template
from typing import TYPE_CHECKING

from rewrites import branches
from transpiler.analysis.kinds import Kind
from transpiler.analysis.symbols import NON_LITERAL
from transpiler.lint.rule import FixDeclined

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.lint.rule import Context, Edit

# What the fixed code may still read on the module: its hyperparameters, its parameters and the
# nn.Module methods any module has. Anything else of torch's RNN classes (`flatten_parameters()`,
# `all_weights`, `_flat_weights`) the generated class does not have.
HYPERPARAMETERS = frozenset(
    {
        "mode",
        "input_size",
        "hidden_size",
        "num_layers",
        "bias",
        "batch_first",
        "dropout",
        "bidirectional",
        "proj_size",
        "nonlinearity",
    }
)
PARAMETER = re.compile(r"(?:weight|bias)_(?:ih|hh)_l\d+(?:_reverse)?")
MODULE_ATTRIBUTES = frozenset(
    {
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "children",
        "named_children",
        "modules",
        "named_modules",
        "state_dict",
        "load_state_dict",
        "train",
        "eval",
        "training",
        "to",
        "requires_grad_",
        "zero_grad",
        "apply",
        "register_forward_hook",
        "register_forward_pre_hook",
    }
)


@dataclass(frozen=True)
class Recurrent:
    """One of torch's recurrent modules, and the pieces of its traceable twin that differ."""

    torch_class: str  # "LSTM"
    kernel: str  # the `torch._VF` function `nn.LSTM.forward` calls (`kernel`: chosen by `nonlinearity`)
    attributes: tuple[str, ...]  # the hyperparameters torch's module sets, copied over
    step: str  # the body of `_step`: one time step of one cell

    @property
    def name(self) -> str:
        return f"Traceable{self.torch_class}"


_COMMON = ("mode", "input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout", "bidirectional")
KINDS = {
    "LSTM": Recurrent(
        "LSTM",
        "lstm",
        (*_COMMON, "proj_size"),
        """h, c = state
        gates = gates_from_input + ${torch}.nn.functional.linear(h, w_hh, b_hh)
        input_gate, forget_gate, cell_gate, output_gate = gates.chunk(4, 1)
        c = ${torch}.sigmoid(forget_gate) * c + ${torch}.sigmoid(input_gate) * ${torch}.tanh(cell_gate)
        return ${torch}.sigmoid(output_gate) * ${torch}.tanh(c), c""",
    ),
    "GRU": Recurrent(
        "GRU",
        "gru",
        _COMMON,
        """(h,) = state
        reset_i, update_i, new_i = gates_from_input.chunk(3, 1)
        reset_h, update_h, new_h = ${torch}.nn.functional.linear(h, w_hh, b_hh).chunk(3, 1)
        reset = ${torch}.sigmoid(reset_i + reset_h)
        update = ${torch}.sigmoid(update_i + update_h)
        new = ${torch}.tanh(new_i + reset * new_h)
        return (new + update * (h - new),)""",
    ),
    "RNN": Recurrent(
        "RNN",
        "kernel",
        (*_COMMON, "nonlinearity"),
        """(h,) = state
        activation = ${torch}.tanh if self.nonlinearity == "tanh" else ${torch}.relu
        return (activation(gates_from_input + ${torch}.nn.functional.linear(h, w_hh, b_hh)),)""",
    ),
}

# The parts of the class all three kinds share. `${...}` are filled in per kind; the text is
# black-formatted as written (line length 120), and so is what the fix adds to a file.
_CLASS = Template('''
class ${name}(${torch}.nn.Module):
    """`${torch}.nn.${torch_class}` that TorchDynamo can trace, written by `transpile --unsafe-fixes` (TP512).

    Dynamo does not trace torch's recurrent modules (graph break GB0014), not even a read of their
    parameters. This module takes the same arguments and holds the same parameters under the same
    names, so checkpoints load unchanged. Eager calls run the same `torch._VF` kernel as
    `nn.${torch_class}`; under `torch.compile` the recurrence is written out step by step, which
    Dynamo traces and Inductor compiles (the `_VF` kernel does not compile with gradients on CPU).
    ${support}
    """

    def __init__(self, *args, **kwargs):
        super().__init__()
        # torch's module checks the arguments and initialises the parameters (drawing the same random
        # numbers); this one takes its parameters over and keeps no reference to it.
        reference = ${torch}.nn.${torch_class}(*args, **kwargs)${refuse}
        for name in ${attributes}:
            setattr(self, name, getattr(reference, name))
        self._flat_weights_names = reference._flat_weights_names
        for name, parameter in reference.named_parameters():
            self.register_parameter(name, parameter)

    def forward(self, input, hx=None):${packed_dispatch}
        # Read by name on every call, as nn.${torch_class} does: load_state_dict(assign=True) replaces them.
        weights = [getattr(self, name) for name in self._flat_weights_names]
        batch_dim = 0 if self.batch_first else 1
        is_batched = input.dim() == 3
        if not is_batched:
            input = input.unsqueeze(batch_dim)
            if hx is not None:
                hx = ${unsqueeze_hx}
        if hx is None:
            ${zeros} = ${torch}.zeros(
                self.num_layers * (2 if self.bidirectional else 1),
                input.size(batch_dim),
                self.hidden_size,
                dtype=input.dtype,
                device=input.device,
            )${pair_zeros}
        if ${torch}.compiler.is_compiling():
            output, ${unrolled_hidden} = self._unrolled(input, ${hidden_state}, weights)
        else:${choose_kernel}
            output, ${hidden_unpacked} = ${kernel}(
                input,
                hx,
                weights,
                self.bias,
                self.num_layers,
                self.dropout,
                self.training,
                self.bidirectional,
                self.batch_first,
            )
        if not is_batched:
            output = output.squeeze(batch_dim)
            hidden = ${squeeze_hidden}
        return output, ${hidden_returned}

    def _unrolled(self, input, hx, weights${valid_parameter}):
        """The recurrence over the (static) time steps, as matmuls and pointwise ops `torch.compile` can trace."""
        num_directions = 2 if self.bidirectional else 1
        per_cell = len(weights) // (self.num_layers * num_directions)  # w_ih, w_hh[, b_ih, b_hh]
        steps = input.transpose(0, 1) if self.batch_first else input  # (time, batch, features)
        final_states = []
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout and self.training:
                # between layers, as the kernel does (with other random numbers than the kernel draws)
                steps = ${torch}.nn.functional.dropout(steps, self.dropout)
            outputs = []
            for direction in range(num_directions):
                cell = layer * num_directions + direction
                w_ih, w_hh, *biases = weights[cell * per_cell : (cell + 1) * per_cell]
                b_ih, b_hh = biases or (None, None)
                # The input's share of the gates, for all time steps in one matmul.
                gates_from_input = ${torch}.nn.functional.linear(steps, w_ih, b_ih)
                state = tuple(initial[cell] for initial in hx)
                cell_outputs = [None] * steps.size(0)
                times = range(steps.size(0))
                for time in reversed(times) if direction else times:
                    ${time_step}
                outputs.append(${torch}.stack(cell_outputs))
                final_states.append(state)
            steps = ${torch}.cat(outputs, 2)
        output = steps.transpose(0, 1) if self.batch_first else steps
        return output, tuple(${torch}.stack(parts) for parts in zip(*final_states))

    def _step(self, gates_from_input, state, w_hh, b_hh):
        """One time step of one cell, with torch's gate order and formulas."""
        ${step}
${packed_methods}''')


# What a class gets when the file packs its batches (`pack_padded_sequence`, the module, `pad_packed_sequence`).
_PACKED_DISPATCH = """
        if isinstance(input, PaddedSequence):  # under torch.compile: see `pack_padded_sequence_for_tracing`
            return self._padded(input, hx)
        if isinstance(input, ${torch}.nn.utils.rnn.PackedSequence):
            return self._packed(input, hx)"""
_MASKED_STEP = """new_state = self._step(gates_from_input[time], state, w_hh, b_hh)
                    if valid is None:
                        state = new_state
                    else:  # past its end a sequence keeps its state and outputs zeros, as if packed
                        state = tuple(${torch}.where(valid[time], new, old) for new, old in zip(new_state, state))
                    cell_outputs[time] = state[0] if valid is None else ${torch}.where(valid[time], state[0], 0.0)"""
_PACKED_METHODS = Template('''
    def _packed(self, sequence, hx):
        """A `PackedSequence`, in eager mode: the `torch._VF` call of `nn.${torch_class}.forward`, bit for bit."""
        weights = [getattr(self, name) for name in self._flat_weights_names]
        data, batch_sizes, sorted_indices, unsorted_indices = sequence
        if hx is None:
            ${zeros} = ${torch}.zeros(
                self.num_layers * (2 if self.bidirectional else 1),
                int(batch_sizes[0]),
                self.hidden_size,
                dtype=data.dtype,
                device=data.device,
            )${pair_zeros}
        elif sorted_indices is not None:
            hx = ${sort_hx}${choose_kernel_packed}
        output, ${hidden_unpacked} = ${kernel}(
            data, batch_sizes, hx, weights, self.bias, self.num_layers, self.dropout, self.training, self.bidirectional
        )
        if unsorted_indices is not None:
            hidden = ${unsort_hidden}
        packed = ${torch}.nn.utils.rnn.PackedSequence(output, batch_sizes, sorted_indices, unsorted_indices)
        return packed, ${hidden_returned}

    def _padded(self, sequence, hx):
        """Under `torch.compile`, a batch packed by `pack_padded_sequence_for_tracing` arrives padded: every time
        step runs, and each sequence keeps its state past its end, which is what packing computes."""
        weights = [getattr(self, name) for name in self._flat_weights_names]
        data = sequence.data if sequence.batch_first == self.batch_first else sequence.data.transpose(0, 1)
        time_dim = 1 if self.batch_first else 0
        steps = ${torch}.arange(data.size(time_dim), device=data.device)
        valid = (steps[:, None] < sequence.lengths.to(data.device))[..., None]  # (time, batch, 1)
        if hx is None:
            ${zeros} = ${torch}.zeros(
                self.num_layers * (2 if self.bidirectional else 1),
                data.size(1 - time_dim),
                self.hidden_size,
                dtype=data.dtype,
                device=data.device,
            )${pair_zeros}
        output, ${unrolled_hidden} = self._unrolled(data, ${hidden_state}, weights, valid)
        if sequence.batch_first != self.batch_first:
            output = output.transpose(0, 1)
        return PaddedSequence(output, sequence.lengths, sequence.batch_first), ${hidden_returned}
''')

# Module-level companions of the packed form, written once per file that packs.
PACKING_NAMES = ("PaddedSequence", "pack_padded_sequence_for_tracing", "pad_packed_sequence_for_tracing")
_PACKING = Template('''
class PaddedSequence:
    """A padded batch and its lengths: what `pack_padded_sequence_for_tracing` gives a traceable recurrent module
    under `torch.compile`, where packing cannot be traced (its sizes are read from the lengths)."""

    def __init__(self, data, lengths, batch_first):
        self.data, self.lengths, self.batch_first = data, lengths, batch_first


def pack_padded_sequence_for_tracing(input, lengths, batch_first=False, enforce_sorted=True):
    """`${torch}.nn.utils.rnn.pack_padded_sequence`, written by `transpile --unsafe-fixes` (TP512); under
    `torch.compile`, the padded batch itself, which the traceable recurrent modules of this file run masked."""
    if ${torch}.compiler.is_compiling():
        return PaddedSequence(input, ${torch}.as_tensor(lengths, dtype=${torch}.int64, device="cpu"), batch_first)
    return ${torch}.nn.utils.rnn.pack_padded_sequence(input, lengths, batch_first, enforce_sorted)


def pad_packed_sequence_for_tracing(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """`${torch}.nn.utils.rnn.pad_packed_sequence`, and its counterpart for a `PaddedSequence`."""
    if not isinstance(sequence, PaddedSequence):
        return ${torch}.nn.utils.rnn.pad_packed_sequence(sequence, batch_first, padding_value, total_length)
    data = sequence.data if sequence.batch_first == batch_first else sequence.data.transpose(0, 1)
    time_dim = 1 if batch_first else 0
    if total_length is None:  # the longest sequence's length, read from the data (a graph break)
        total_length = int(sequence.lengths.max())
    if total_length <= data.size(time_dim):
        data = data.narrow(time_dim, 0, total_length)
    else:
        padding = [0, 0] * (data.dim() - 1 - time_dim) + [0, total_length - data.size(time_dim)]
        data = ${torch}.nn.functional.pad(data, padding)
    if padding_value != 0.0:
        steps = ${torch}.arange(total_length, device=data.device)
        valid = steps[None, :] < sequence.lengths.to(data.device)[:, None]  # (batch, time)
        data = ${torch}.where((valid if batch_first else valid.t())[..., None], data, padding_value)
    return data, sequence.lengths
''')


def packing_source(torch_name: str = "torch") -> dict[str, str]:
    """The module-level definitions the packed form needs, by the name each defines."""
    text = _PACKING.substitute(torch=torch_name).strip("\n")
    parts = text.split("\n\n\n")
    return dict(zip(PACKING_NAMES, (part + "\n" for part in parts)))


def class_source(kind: str, torch_name: str = "torch", packed: bool = False) -> str:
    """The source of the traceable class for `kind` ("LSTM", "GRU", "RNN"), with torch spelled `torch_name`;
    `packed`: also for batches packed by `pack_padded_sequence_for_tracing`."""
    recurrent = KINDS[kind]
    lstm = kind == "LSTM"
    fields = {
        "name": recurrent.name,
        "torch_class": kind,
        "kernel": f"{torch_name}._VF.{recurrent.kernel}" if recurrent.kernel != "kernel" else "kernel",
        "choose_kernel": (
            f'\n            kernel = {torch_name}._VF.rnn_tanh if self.nonlinearity == "tanh" else {torch_name}._VF.rnn_relu'
            if recurrent.kernel == "kernel"
            else ""
        ),
        "attributes": "(\n" + "".join(f'            "{name}",\n' for name in recurrent.attributes) + "        )",
        "support": (
            "Batches packed by `pack_padded_sequence_for_tracing` run masked under `torch.compile`."
            if packed
            else "Not supported: `PackedSequence` inputs"
        )
        + (" Not supported: `proj_size`." if packed and lstm else ", `proj_size`." if lstm else "" if packed else "."),
        "refuse": (
            '\n        if reference.proj_size:\n            raise ValueError("proj_size is not supported")'
            if lstm
            else ""
        ),
        "unsqueeze_hx": "(hx[0].unsqueeze(1), hx[1].unsqueeze(1))" if lstm else "hx.unsqueeze(1)",
        "zeros": "zeros" if lstm else "hx",
        "pair_zeros": "\n            hx = (zeros, zeros)" if lstm else "",
        "hidden_state": "hx" if lstm else "(hx,)",
        "unrolled_hidden": "hidden" if lstm else "(hidden,)",
        "hidden_unpacked": "*hidden" if lstm else "hidden",
        "squeeze_hidden": "[state.squeeze(1) for state in hidden]" if lstm else "hidden.squeeze(1)",
        "hidden_returned": "tuple(hidden)" if lstm else "hidden",
        "sort_hx": (
            "tuple(state.index_select(1, sorted_indices) for state in hx)"
            if lstm
            else "hx.index_select(1, sorted_indices)"
        ),
        "unsort_hidden": (
            "[state.index_select(1, unsorted_indices) for state in hidden]"
            if lstm
            else "hidden.index_select(1, unsorted_indices)"
        ),
    }
    fields["choose_kernel_packed"] = fields["choose_kernel"].replace("\n            ", "\n        ")
    step = Template(recurrent.step).substitute(torch=torch_name)
    plain_step = "state = self._step(gates_from_input[time], state, w_hh, b_hh)\n                    cell_outputs[time] = state[0]"
    variant = {
        "packed_dispatch": Template(_PACKED_DISPATCH).substitute(torch=torch_name) if packed else "",
        "valid_parameter": ", valid=None" if packed else "",
        "time_step": Template(_MASKED_STEP).substitute(torch=torch_name) if packed else plain_step,
        "packed_methods": _PACKED_METHODS.substitute(fields, torch=torch_name) if packed else "",
    }
    return _CLASS.substitute(fields, **variant, torch=torch_name, step=step).lstrip("\n")


def plan(node: ast.Call, ctx: Context, attr: str, kind: str) -> tuple[str | None, tuple]:
    """Why `self.<attr>(...)` (a `nn.<kind>`) gets no fix, or None, and the fix's data: the attribute, the kind,
    and the classes whose `__init__` may construct it (this one and its bases in the file)."""
    args, keywords = ctx.cls.attr_ctor_args.get(attr, ((), ()))
    proj_size = dict(keywords).get("proj_size", args[7] if len(args) > 7 else 0)
    if proj_size is NON_LITERAL or proj_size:
        return "`proj_size` is not known to be 0 (the unrolled recurrence has no projection)", ()
    source = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "input"), None)
    packing = _packing(node, source, ctx)
    if isinstance(packing, str):
        return packing, ()
    if packing is None and (source is None or ctx.kind(source) is not Kind.TENSOR):
        return "the input is not known to be a tensor, nor packed by `pack_padded_sequence` just before", ()
    owners, queue = [ctx.cls.name], list(ctx.cls.bases)
    while queue:
        base = ctx.typer.classes.get(queue.pop(0))
        if base is not None and attr in base.attr_ctors:
            owners.append(base.name)
            queue.extend(base.bases)
    return None, (attr, kind, tuple(owners), packing)


_PACK = "torch.nn.utils.rnn.pack_padded_sequence"
_PAD = "torch.nn.utils.rnn.pad_packed_sequence"


def _packing(call: ast.Call, source: ast.expr | None, ctx: Context) -> tuple[str, str, str] | str | None:
    """For `packed = pack_padded_sequence(...)`, `out, hidden = self.rnn(packed)`, `out, _ =
    pad_packed_sequence(out, ..., total_length=...)` in three consecutive statements: (the function, the
    packed name, the output name), whose packing calls the fix replaces. None when the input is not packed
    just before the call; why not, when it is packed otherwise."""
    if not isinstance(source, ast.Name):
        return None
    statement = ctx.statement
    block = branches.enclosing_block(ctx.node, statement)
    body = block[2] if block is not None else None
    index = next(i for i, s in enumerate(body) if s is statement) if body is not None else -1
    before = body[index - 1] if index > 0 else None
    if not (_assigns_call(before, _PACK, ctx) and before.targets[0].id == source.id):
        return None
    after = body[index + 1] if index + 1 < len(body) else None
    target = statement.targets[0] if isinstance(statement, ast.Assign) and len(statement.targets) == 1 else None
    output = target.elts[0] if isinstance(target, ast.Tuple) and statement.value is call else None
    if not isinstance(output, ast.Name):
        return "the packed output is not unpacked as `out, hidden = self.<rnn>(packed)`"
    pad = after.value if _assigns_call(after, _PAD, ctx, tuple_target=True) else None
    if pad is None or not (pad.args and isinstance(pad.args[0], ast.Name) and pad.args[0].id == output.id):
        return f"`{output.id}` is not padded by `pad_packed_sequence({output.id}, ...)` in the next statement"
    if not any(k.arg == "total_length" for k in pad.keywords) and len(pad.args) < 4:
        return "`pad_packed_sequence` has no `total_length`: the padded length would be read from the lengths"
    loads = [n for n in ast.walk(ctx.node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    if sum(n.id == source.id for n in loads) != 1:
        return f"`{source.id}` is used besides the call of the recurrent module"
    rebinds = any(isinstance(n, ast.Name) and n.id == output.id for n in ast.walk(after.targets[0]))
    if not rebinds and sum(n.id == output.id for n in loads) != 1:
        return f"`{output.id}` is used besides `pad_packed_sequence`"
    return ctx.node.name, source.id, output.id


def _assigns_call(statement: ast.stmt | None, qualname: str, ctx: Context, tuple_target: bool = False) -> bool:
    """`name = <qualname>(...)` (or `a, b = ...` with `tuple_target`)."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        return False
    target = statement.targets[0]
    if not (isinstance(target, ast.Tuple) if tuple_target else isinstance(target, ast.Name)):
        return False
    value = statement.value
    return isinstance(value, ast.Call) and ctx.qualname(value.func) == qualname


def apply(node: cst.Call, data: tuple, edit: Edit) -> cst.Call:
    """Ask for the traceable class and for the constructor's replacement; the call itself stays as it is.
    Raises FixDeclined where the file uses the module in a way the traceable class does not keep."""
    import libcst as cst

    attr, kind, owners, packing = data
    constructors = 0
    for child, parent, cls, function in _walk(edit.module):
        if (
            cls in owners
            and isinstance(child, cst.Assign)
            and any(_is_self_attr(t.target, attr) for t in child.targets)
        ):
            if function != "__init__" or not _constructs(child.value, kind):
                raise FixDeclined(f"`self.{attr}` is assigned other than `nn.{kind}(...)` in `__init__`")
            if any(arg.star for arg in child.value.args):
                raise FixDeclined(f"`nn.{kind}(...)` gets `*args` or `**kwargs`: `proj_size` may be set")
            constructors += 1
        elif cls in owners and _is_self_attr(child, attr):
            refused = _refused_use(child, parent, attr)
            if refused:
                raise FixDeclined(refused)
        elif _names(child, kind) and not _exempt(child, parent):
            raise FixDeclined(f"the file refers to `{_dotted(child) or kind}` other than to construct it")
    if not constructors:
        raise FixDeclined(f"`self.{attr} = nn.{kind}(...)` is not in the `__init__` of {' or '.join(owners)}")
    name = KINDS[kind].name
    edit.torch()  # the class spells torch with the module's alias; `import torch` is added where missing
    # One class per kind and file: with packing support wherever the file packs, for every module of the kind.
    packs = any(
        isinstance(c, cst.Call) and (_dotted(c.func) or "").endswith("pack_padded_sequence")
        for c, *_ in _walk(edit.module)
    )
    if packing:  # first: the class refers to them
        edit.definitions.update(packing_source(edit.torch_name))
    edit.definitions[name] = class_source(kind, edit.torch_name, packed=packs)
    if packing:
        function, packed_name, output = packing
        edit.module_edits[f"packing in {function} ({packed_name}, {output})"] = lambda module: _replace_packing(
            module, function, packed_name, output
        )
    edit.module_edits[f"{name} for {'/'.join(owners)}.{attr}"] = lambda module: _replace_constructors(
        module, attr, kind, owners, cst.Name(name)
    )
    # Last, after the renames above: the imports the rewrite leaves unused (`from torch.nn import LSTM`, the
    # packing functions); moved to the end again by each fix that adds renames of its own.
    unused = frozenset({kind, "pack_padded_sequence", "pad_packed_sequence"} if packing else {kind})
    key = f"imports {sorted(unused)} left unused by TP512"
    edit.module_edits.pop(key, None)
    edit.module_edits[key] = lambda module: _drop_unused_imports(module, unused)
    return node


def _walk(node: cst.CSTNode, cls: str | None = None, function: str | None = None):
    """(node, parent, enclosing class, enclosing function) for every node below `node`, imports left out."""
    import libcst as cst

    for child in node.children:
        if isinstance(child, cst.Import | cst.ImportFrom):
            continue
        yield child, node, cls, function
        yield from _walk(
            child,
            child.name.value if isinstance(child, cst.ClassDef) else cls,
            child.name.value if isinstance(child, cst.FunctionDef) else function,
        )


def _refused_use(use: cst.Attribute, parent: cst.CSTNode, attr: str) -> str | None:
    """Why a use of `self.<attr>` (not its assignment) needs torch's class, or None: calls, hyperparameters,
    parameters and what every `nn.Module` has are kept."""
    import libcst as cst

    if isinstance(parent, cst.Call) and parent.func is use or isinstance(parent, cst.AssignTarget):
        return None  # an assignment's target: `apply` checks the assignment
    if isinstance(parent, cst.Attribute) and parent.value is use:
        read = parent.attr.value
        if read in HYPERPARAMETERS or read in MODULE_ATTRIBUTES or PARAMETER.fullmatch(read):
            return None
        return f"`self.{attr}.{read}` is not kept by the traceable class"
    return f"`self.{attr}` is used other than called or read (its class changes)"


def _replace_constructors(
    module: cst.Module, attr: str, kind: str, owners: tuple[str, ...], name: cst.Name
) -> cst.Module:
    """`module` with `self.<attr> = nn.<kind>(...)` in the `__init__` of `owners` constructing `name` instead."""
    import libcst as cst

    class Replace(cst.CSTTransformer):
        def __init__(self) -> None:
            super().__init__()
            self.scopes: list[tuple[str, str]] = []

        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            self.scopes.append(("class", node.name.value))

        def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
            self.scopes.pop()
            return updated

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.scopes.append(("def", node.name.value))

        def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
            self.scopes.pop()
            return updated

        def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
            in_init = self.scopes[-2:] in ([("class", owner), ("def", "__init__")] for owner in owners)
            if (
                in_init
                and _constructs(updated.value, kind)
                and any(_is_self_attr(t.target, attr) for t in updated.targets)
            ):
                return updated.with_changes(value=updated.value.with_changes(func=name))
            return updated

    return module.visit(Replace())


def _replace_packing(module: cst.Module, function: str, packed: str, output: str) -> cst.Module:
    """In the functions named `function`, `packed = pack_padded_sequence(...)` and `pad_packed_sequence(output,
    ...)` calling their traceable counterparts."""
    import libcst as cst

    class Replace(cst.CSTTransformer):
        def __init__(self) -> None:
            super().__init__()
            self.inside = 0

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.inside += node.name.value == function

        def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
            self.inside -= original.name.value == function
            return updated

        def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
            value = updated.value
            if not (self.inside and isinstance(value, cst.Call)):
                return updated
            callee = (_dotted(value.func) or "").rpartition(".")[2]
            targets = [t.target for t in updated.targets]
            if callee == "pack_padded_sequence" and any(_dotted(t) == packed for t in targets):
                return updated.with_changes(value=value.with_changes(func=cst.Name("pack_padded_sequence_for_tracing")))
            if callee == "pad_packed_sequence" and value.args and _dotted(value.args[0].value) == output:
                return updated.with_changes(value=value.with_changes(func=cst.Name("pad_packed_sequence_for_tracing")))
            return updated

    return module.visit(Replace())


def _drop_unused_imports(module: cst.Module, names: set[str]) -> cst.Module:
    """`module` without the names of `names` that a `from ... import` binds and nothing else refers to
    (a linter would flag them once the fix replaced their uses); a statement left importing nothing goes."""
    import libcst as cst

    class References(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.found: set[str] = set()

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

        def visit_Name(self, node: cst.Name) -> None:
            self.found.add(node.value)

    references = References()
    module.visit(references)
    unused = names - references.found

    def bound(alias: cst.ImportAlias) -> str:
        return (alias.asname.name if alias.asname else alias.name).value

    class Drop(cst.CSTTransformer):
        def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom):
            if isinstance(updated.names, cst.ImportStar) or not any(bound(a) in unused for a in updated.names):
                return updated
            kept = [a for a in updated.names if bound(a) not in unused]
            if not kept:
                return cst.RemoveFromParent()
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(names=kept)

    return module.visit(Drop()) if unused else module


def _dotted(node: cst.CSTNode) -> str | None:
    import libcst as cst

    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def _is_self_attr(node: cst.CSTNode, attr: str) -> bool:
    return _dotted(node) == f"self.{attr}"


def _constructs(node: cst.CSTNode, kind: str) -> bool:
    """`nn.LSTM(...)`, `torch.nn.LSTM(...)`, `LSTM(...)`: the analysis resolved which `LSTM` it is."""
    import libcst as cst

    return isinstance(node, cst.Call) and (_dotted(node.func) or "").rpartition(".")[2] == kind


def _names(node: cst.CSTNode, kind: str) -> bool:
    import libcst as cst

    return (isinstance(node, cst.Name) and node.value == kind) or (
        isinstance(node, cst.Attribute) and node.attr.value == kind
    )


def _exempt(node: cst.CSTNode, parent: cst.CSTNode) -> bool:
    """A mention of the class name that is not a use of torch's class as a value: a constructor call, an
    attribute's own name, a definition's name, a keyword."""
    import libcst as cst

    return (
        (isinstance(parent, cst.Call) and parent.func is node)
        or (isinstance(parent, cst.Attribute) and parent.attr is node)
        or (isinstance(parent, cst.ClassDef | cst.FunctionDef | cst.Param) and parent.name is node)
        or (isinstance(parent, cst.Arg) and parent.keyword is node)
    )
