"""`nn.Linear` layers whose output rows are not 16-byte aligned (GPT-2's LM head, 50257 wide), padded on CUDA,
in inference and in training.

A contiguous [rows, 50257] half-precision output has a row stride that is not a multiple of
8 elements, so cuBLAS can only pick its `align1` kernels (scalar loads and stores): 3.31 ms
for GPT-2's head at 4096 rows on an H100, where torch.compile, which pads N, takes 0.45 ms.
`linear(module, x)` computes into a padded width instead and returns the first N columns of it:
`module(x)`'s values and shape, as a view whose rows are ALIGN-padded, which is the layout
torch.compile returns for the same layer. Copying those columns into a contiguous tensor, as this
did before, cost 0.52 ms of a 3.4 ms GPT-2 forward (bf16, H100). Anything else runs `module(x)`
itself. This file may import only torch: it is copied into every output tree.
"""

from __future__ import annotations

import collections
import os
import weakref

import torch

from .activations import _MODULES, Activations, _hooked

# cuBLAS's vectorised kernels need the output's row stride and N to be multiples of 16 bytes;
# 8 elements covers float16 and bfloat16 (torch.compile's pad_mm pads to the same).
ALIGN = 8
DTYPES = (torch.float16, torch.bfloat16)  # float32: not measured to pay yet (benchmarks/linear_pad.py times it)
# When padding pays, measured on the H100 (benchmarks/linear_pad.py, bf16, device time): GPT-2's head
# (768 -> 50257) at 4096 rows 3285 -> 1009 us, at 512 rows 420 -> 190 us; 4096 -> 32001 at 64 rows 290 -> 288
# us (even); 768 -> 1001 loses at every row count up to 4096 (66 -> 100 us): the padded path's extra copies and
# launches cost ~100 us (measured when the path also copied the output out; benchmarks/linear_pad.py measures
# again). Break-even sits near 2**33 multiply-adds (align1 runs ~95 TFLOP/s: ~180 us).
MIN_ROWS = 128
MIN_WORK = 1 << 33
FORCE = False  # tests only: pad tensors of any device, dtype and size (the rest of the checks still hold)
_OFF = os.environ.get("TRANSPILE_BACKEND", "") == "eager"  # every transpile kernel off, this one too
_PLAIN = (torch.Tensor, torch.nn.Parameter)

counts: collections.Counter[str] = collections.Counter()  # "padded": calls that took the padded path


def linear(module: torch.nn.Module, input: torch.Tensor) -> torch.Tensor:
    """`module(input)`, computed into a padded width when `module` is a plain unaligned `nn.Linear` on CUDA."""
    # The checks a call fails most often come first: aligned layers and CPU tensors pay ~0.3 us.
    if (
        type(module) is torch.nn.Linear
        and module.out_features % ALIGN
        and (input.is_cuda or FORCE)
        and not _OFF
        and not torch.compiler.is_compiling()  # Dynamo traces `module(input)`; Inductor pads by itself
        and (dtype := _pays(module, input)) is not None
        and not _hooked(module)  # module and global forward (pre-)hooks must run: module(input) runs them
        and "forward" not in vars(module)  # a forward replaced on the instance (the `kernels` library)
    ):
        counts["padded"] += 1
        return padded_linear(input, module.weight, module.bias, dtype)
    return module(input)


def _pays(module: torch.nn.Linear, input: torch.Tensor) -> torch.dtype | None:
    """The dtype the matmul runs in, where the padded path computes what `module(input)` does and pays:
    plain tensors of one device, half precision (the operands', or autocast's for float32 operands), shapes
    `F.linear` takes, and enough work. None: the module computes it (or raises its own error)."""
    weight, bias = module.weight, module.bias
    if not (
        type(input) in _PLAIN
        and type(weight) in _PLAIN
        and (bias is None or type(bias) in _PLAIN)
        and weight.device == input.device
        and (bias is None or bias.device == input.device)
        and input.shape[-1:] == weight.shape[1:]
    ):
        return None
    dtypes = {input.dtype, weight.dtype} | ({bias.dtype} if bias is not None else set())
    if torch.is_autocast_enabled(input.device.type):
        # Autocast runs the matmul in its dtype, casting float32 operands (and no others) to it.
        dtype = torch.get_autocast_dtype(input.device.type)
        if not dtypes <= {torch.float32, dtype}:
            return None
    elif len(dtypes) == 1:
        dtype = input.dtype
    else:
        return None
    if not (dtype in DTYPES or FORCE):
        return None
    numel = input.numel()
    return dtype if FORCE or (numel >= MIN_ROWS * weight.shape[1] and numel * weight.shape[0] >= MIN_WORK) else None


def padded_linear(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype
) -> torch.Tensor:
    """`F.linear(input, weight, bias)` through a weight padded to a multiple of ALIGN rows, in `dtype`: its first
    N columns.

    The result is a view of the padded output, so it holds the memory F.linear's output would (and
    the pad columns): the row stride is the padded width, as in torch.compile's output, and
    `.contiguous()` gives F.linear's layout at the cost of a copy. The padded weight is made per
    call, not cached: a cache could not see every update (`weight.data.copy_(...)` bumps no version
    counter) and would hold a second copy of the weight, while the copy costs ~0.05 ms for GPT-2's
    77 MB head; under autocast it is the cast eager makes anyway. Every op is one autograd records
    (the copy into the padded weight, the concatenated bias, the matmul, the slice), so the layer
    trains as the original does: its gradients reach `weight` and `bias` through them, and the
    backward's matmuls are aligned too. The pad rows are zeros: the output's pad columns get a zero
    gradient, which multiplies them in the input's gradient (uninitialised memory could hold NaN).
    """
    n, k = weight.shape
    width = n + -n % ALIGN
    padded = weight.new_empty((width, k), dtype=dtype)
    padded[:n].copy_(weight)
    padded[n:].zero_()
    if bias is not None:
        bias = torch.cat((bias.to(dtype), bias.new_zeros(width - n, dtype=dtype)))
    return torch.nn.functional.linear(input, padded, bias)[..., :n]


class LinearActivation:
    """`activation(layer(input))` for an `nn.Linear` or transformers `Conv1D` layer, with the activation in the matmul.

    `torch._addmm_activation` has cuBLASLt apply the bias and a ReLU or a GELU (the tanh approximation)
    in the matmul's epilogue, so the activation costs no kernel and no pass over the output: 1.25-1.53x of
    the pair's device time in bfloat16 on the H100 (benchmarks/linear_epilogue.py), nothing for GELU in
    float32. It is taken on CUDA in float16 and bfloat16 when `activation` is a module of `table` (codes:
    0 ReLU, 1 tanh-GELU) and `layer` a plain layer with a bias; otherwise the call returns None and the
    caller runs its statements (the two modules, or the activation's fused kernel). On CPU the same call
    computes the exact GELU, which is why CPU tensors never take it.
    """

    def __init__(self, table: Activations) -> None:
        self.table = table

    def __call__(self, layer: torch.nn.Module, activation: torch.nn.Module, input: torch.Tensor) -> torch.Tensor | None:
        if type(input) in _PLAIN and (input.is_cuda or FORCE) and not _OFF:
            # The activation first: a class lookup, and what rejects most calls (BERT's exact GELU, SiLU).
            entry = self.table.entry(activation)
            mat2 = _epilogue_operand(layer, input) if entry is not None else None
            if mat2 is not None:
                counts["epilogue"] += 1
                out = torch._addmm_activation(
                    layer.bias, input.reshape(-1, input.shape[-1]), mat2, use_gelu=entry.code == 1
                )
                return out.view(*input.shape[:-1], out.shape[-1])
        return None


def _epilogue_operand(layer: torch.nn.Module, input: torch.Tensor) -> torch.Tensor | None:
    """The matmul's second operand when `layer(input)` is `input @ it + bias` and the epilogue pays, else None."""
    if type(layer) is torch.nn.Linear:
        mat2 = layer.weight.t()
    elif type(layer).__name__ == "Conv1D" and type(layer).__module__ == "transformers.pytorch_utils":
        mat2 = layer.weight  # [in, out]: its forward is `torch.addmm(bias, x, weight)`
    else:
        return None
    bias = layer.bias
    if not (
        bias is not None
        and type(bias) in _PLAIN
        and type(mat2) in _PLAIN
        and (input.dtype in DTYPES or FORCE)
        and mat2.dtype == bias.dtype == input.dtype
        and mat2.device == input.device == bias.device
        and mat2.shape[1] % ALIGN == 0  # unaligned rows would take cuBLAS's slow kernels (see `linear`)
        and input.shape[-1:] == mat2.shape[:1]
        and bias.shape == mat2.shape[1:]
        and input.numel() > 0
    ):
        return None  # the modules compute it, or raise their own errors
    if torch.is_grad_enabled() and (input.requires_grad or mat2.requires_grad or bias.requires_grad):
        return None  # training keeps autograd's graph of the original layer
    if _hooked(layer) or "forward" in vars(layer):
        return None
    return mat2


# -- sibling projections: the `nn.Linear` layers a forward applies to one input, computed at once -------------------


class _Taken:
    """The outputs of one stacked call that later calls of its group may take: valid while the input is the same
    tensor at the same version, the layers' parameters the same tensors at theirs, and autocast's dtype as it was."""

    def __init__(self, input: torch.Tensor, group: tuple, outputs: list, dtype: torch.dtype) -> None:
        self.input = weakref.ref(input)
        self.versions = _versions(input, group)
        self.outputs: list = outputs  # None once taken
        self.dtype = dtype

    def take(self, input: torch.Tensor, group: tuple, index: int, dtype: torch.dtype) -> torch.Tensor | None:
        output = self.outputs[index]
        if output is None or self.input() is not input or dtype != self.dtype:
            return None
        if any(earlier is not None for earlier in self.outputs[1:index]):
            return None  # in the group's order only: a call skipped since (an exception between them) ends the group
        if _versions(input, group) != self.versions:
            return None
        self.outputs[index] = None
        return output


_TAKEN: "weakref.WeakKeyDictionary[torch.nn.Module, _Taken]" = weakref.WeakKeyDictionary()  # by a group's first layer


def siblings(group: tuple, index: int, input: torch.Tensor) -> torch.Tensor:
    """`group[index](input)`. Under autocast with autograd on, the first call of the group computes every layer's
    output at once (`_Stacked`: the input cast once, its gradient one matmul), and the later calls take theirs
    (docs/compiler.md, "Sibling projections")."""
    module = group[index]
    dtype = _stacking(group, input)
    if dtype is None:
        return module(input)
    if index == 0:
        outputs = stacked_linears(group, input, dtype)
        counts["stacked"] += 1
        _TAKEN[group[0]] = _Taken(input, group, [None, *outputs[1:]], dtype)
        return outputs[0]
    taken = _TAKEN.get(group[0])
    output = None if taken is None else taken.take(input, group, index, dtype)
    return module(input) if output is None else output


def _stacking(group: tuple, input: torch.Tensor) -> torch.dtype | None:
    """Autocast's dtype where `_Stacked` computes what the group's layers do and pays, else None.

    It pays under autocast with autograd on: each layer casts the same input to autocast's dtype, saves that
    copy for its backward, and sends back a half-precision gradient that autograd casts to float32 and sums with
    the others. Without autocast there is no cast to share and autograd's sum is in the input's dtype already;
    without autograd (inference) nothing is saved or summed, and autocast's cache casts each weight once per
    autocast region, where the stacked buffer is made at every call."""
    device = input.device.type
    if _OFF or not torch.is_grad_enabled() or not torch.is_autocast_enabled(device):
        return None
    if torch.compiler.is_compiling() or type(input) not in _PLAIN or input.dim() == 0:
        return None
    dtype = torch.get_autocast_dtype(device)
    if not input.is_floating_point() or input.dtype == torch.float64:
        return None  # autocast leaves float64 alone; the layers raise their own errors for integers
    first = group[0]
    for module in group:
        if type(module) is not torch.nn.Linear or "forward" in vars(module) or _hooked(module):
            return None
        if module._backward_hooks or module._backward_pre_hooks:
            return None
        weight, bias = module.weight, module.bias
        if type(weight) not in _PLAIN or weight.shape != first.weight.shape or weight.device != input.device:
            return None
        if weight.dtype != first.weight.dtype or weight.dtype == torch.float64:
            return None
        if (bias is None) != (first.bias is None) or (bias is not None and type(bias) not in _PLAIN):
            return None
        if bias is not None and (bias.dtype != weight.dtype or bias.device != input.device):
            return None
    if input.shape[-1] != first.in_features:
        return None  # the layer raises its error
    if _MODULES._global_backward_hooks or _MODULES._global_backward_pre_hooks:
        return None
    return dtype


def stacked_linears(group: tuple, input: torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
    """Each layer's `F.linear(input, weight, bias)` under autocast to `dtype`, the input cast once (`_Stacked`)."""
    parameters = [m.weight for m in group] + ([m.bias for m in group] if group[0].bias is not None else [])
    return list(_Stacked.apply(input, dtype, len(group), *parameters))


class _Stacked(torch.autograd.Function):
    """k linear layers of one input as autocast runs them, with what the k separate calls repeat done once.

    Forward: the input cast to autocast's dtype once (each layer casts it, and saves its copy), the weights cast
    into one buffer [k * out, in], and a matmul per layer into an output of its own (contiguous, and free to be
    updated in place as a layer's output is). Backward: the input's gradient is one matmul of the output
    gradients side by side with that buffer, summed in float32 inside it and rounded once, where eager rounds
    each layer's half-precision gradient, casts it to float32 and adds them; each weight's and bias's gradient
    is its layer's own. A layer whose output gets no gradient gives its parameters none, as eager's does
    (`set_materialize_grads(False)`): an optimizer then leaves them alone. Once differentiable, as the kernels'
    nodes are."""

    @staticmethod
    def forward(ctx, input, dtype, count, *parameters):
        with torch.autocast(input.device.type, enabled=False):  # every operand is cast to `dtype` here
            return _Stacked._forward(ctx, input, dtype, count, parameters)

    @staticmethod
    def _forward(ctx, input, dtype, count, parameters):
        cast = input.to(dtype)
        weights = parameters[:count]
        rows = weights[0].shape[0]
        stacked = torch.empty((count * rows, input.shape[-1]), dtype=dtype, device=input.device)
        torch._foreach_copy_(list(stacked.split(rows)), list(weights))
        biases = [b.to(dtype) for b in parameters[count:]] or [None] * count
        flat = cast.reshape(-1, cast.shape[-1])
        outputs = []
        for weight, bias in zip(stacked.split(rows), biases):
            # An output of its own written through a 2-d view: a layer's output may be updated in place, which a
            # view (`F.linear` with a bias returns one) returned from a Function may not.
            output = torch.empty((*input.shape[:-1], rows), dtype=dtype, device=input.device)
            if bias is None:
                torch.mm(flat, weight.t(), out=output.view(-1, rows))
            else:
                torch.addmm(bias, flat, weight.t(), out=output.view(-1, rows))
            outputs.append(output)
        ctx.save_for_backward(cast, stacked)
        ctx.input = (input.shape, input.dtype)
        ctx.count, ctx.biased = count, bool(parameters[count:])
        ctx.set_materialize_grads(False)
        return tuple(outputs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):
        cast, stacked = ctx.saved_tensors
        flat = cast.reshape(-1, cast.shape[-1])
        shape, dtype = ctx.input
        count, rows = ctx.count, stacked.shape[0] // ctx.count
        used = [i for i, g in enumerate(grads) if g is not None]
        flats = {i: grads[i].reshape(-1, rows).to(flat.dtype) for i in used}
        input_grad = None
        if used and ctx.needs_input_grad[0]:
            side_by_side = torch.cat([flats[i] for i in used], dim=1) if len(used) > 1 else flats[used[0]]
            weights = torch.cat([stacked[i * rows : (i + 1) * rows] for i in used]) if len(used) < count else stacked
            input_grad = (side_by_side @ weights).view(shape).to(dtype)
        weight_grads = [
            flats[i].t() @ flat if i in flats and ctx.needs_input_grad[3 + i] else None for i in range(count)
        ]
        bias_grads = [
            flats[i].sum(0) if i in flats and ctx.needs_input_grad[3 + count + i] else None
            for i in range(count if ctx.biased else 0)
        ]
        return (input_grad, None, None, *weight_grads, *bias_grads)


def _versions(input: torch.Tensor, group: tuple) -> tuple:
    parameters = [p for m in group for p in (m.weight, m.bias) if p is not None]
    return (input._version, *(p._version for p in parameters), *map(id, parameters))
