"""Real transformers models against eager PyTorch and torch.compile: steady state, first call, memory, kernels.

    python benchmarks/models_bench.py --prepare compiled/hf [--targets x86-64-v4,sm_90]  # transpile the models
    python benchmarks/models_bench.py --compiled compiled/hf [--device cpu|cuda] [--models gpt2,llama,...]
        [--dtypes bfloat16,float32] [--variants eager,compile,transpiled] [--first-call MODELS|all|none]
        [--attention sdpa|eager] [--json FILE]
    python benchmarks/models_bench.py --tables run1.json run2.json          # one set of tables from several runs

The models are those of table `MODELS`, built from transformers configs with random
weights (nothing downloads), in eval mode under `torch.no_grad()`. On CUDA they have
the issue's sizes (GPT-2 12 layers at 8x512, BERT-base at 16x256, an 8-layer LLaMA of
hidden 1024 with 16 heads and intermediate 2816 at 4x1024, ResNet-50 and ViT-B/16 at
32x3x224x224); on CPU small configs of the same architectures (2 layers or blocks per
stage, hidden 128, short sequences), so that a whole run with torch.compile fits in
minutes on two cores.

`--prepare DIR` runs `transpile build <transformers>/models/<name> -o DIR/<name>` for
each model, in a subprocess (the repository's `python -m transpiler.cli.main`, else
`transpile` on PATH), writes DIR/__init__.py and records the transformers version in
DIR/prepared.json: the transpiled tree imports the installed transformers, so prepare
where you run. A run imports `<DIR name>.<name>.modeling_<name>` with DIR's parent on
sys.path. `--targets` then runs `transpile precompile` on each tree; CUDA targets (`sm_90`) first
record the Triton call signatures of a first forward per dtype, in a fresh process on `--device`,
into DIR/<name>.signatures.jsonl.

Steady state, per model and dtype, in this one process, on the same inputs: eager, then
`torch.compile(eager model)` (default mode), then the transpiled class built from the
same config with the eager model's state_dict; with `--variants ...,compile-graphs,transpiled-graphs`
(CUDA) also torch.compile's reduce-overhead mode and the transpiled model through its runtime's
`cuda_graphs`. Each variant: a first call, then one checking call of what the steady state runs (the
transpiled kernels once their background compiles finished; a graph replay): its primary output,
`logits` or `last_hidden_state`, against eager's (max abs difference and relative L2), the transpiled
kernels' counters over it (`_transpile_runtime.counters()`: calls per kernel and path), a timing (benchlib: warm-up, then a budget of iterations,
median; CUDA events), on CUDA the joules per forward and average watts (energy.py: the GPU's NVML
energy counter over a second or more of forwards after the timings; `energy_j`, `power_w`, null with
`energy_unavailable` where not read), the peak memory one forward needs above what is live before it
(CUDA `max_memory_allocated` after a reset; CPU the resident set's high water mark), and
one forward under torch.profiler: on CUDA the device kernels it launched (Memcpy/Memset
counted apart); on CPU the aten ops called from Python (views included) plus the
transpiled C++ kernel calls, and n/a for torch.compile, whose C++ kernels the profiler
does not see. The same profiled forward gives its reach: how many of its ops ran in
generated kernels (the transpiled runtime's counters around it; torch.compile's Triton
kernels on CUDA), in library calls (the classes of `LIBRARY_OPS`: matmuls, attention,
convolutions, embeddings, normalizations, pooling) and as leftover eager ops that launch
work, views and allocations counted apart (`reach`), with the leftover ops by name.

First call, per model (first dtype) and variant, in a fresh process: the time from the
parent starting the child to the first result (interpreter start, imports of torch,
transformers and the modeling module included), with model construction (random
initialisation on the device, the cast) timed apart and subtracted, and the first forward
alone. torch.compile and transpiled run twice, each with its own cache directories
(Inductor, Triton, the transpiled C++ kernels): cold (empty), then warm. A tree prepared with
`--targets` adds a third transpiled run, "precompiled": cold caches, the kernels loaded from the
libraries and binaries built ahead of time, no compiler to call (`CXX`, `CC` and `TRITON_PTXAS_PATH` name
none; the cold and warm runs ignore the artifacts). Each run counts the calls of its first forward that
waited for a compile, and the files its caches hold afterwards.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
import transformers
from torch import nn
from torch.autograd import DeviceType

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib, also when this file is loaded by path
from benchlib import (  # noqa: E402
    add_timing_arguments,
    cache_files,
    environment,
    fresh_process,
    ms,
    peak_extra_bytes,
    allocator_for_memory,
    allocator_for_timing,
    pick,
    quietest_timing,
    since_parent_start,
    synchronize,
)
from energy import EnergyMeter  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("eager", "compile", "transpiled")
# CUDA graphs on both sides (opt-in, steady state only): torch.compile(mode="reduce-overhead") and the
# transpiled model through its runtime's `cuda_graphs` (the whole forward) or `cuda_graph_blocks` (each
# block of its layer lists, the glue eager). Compared with each other and with the defaults.
TRANSPILED_GRAPHS = ("transpiled-graphs", "transpiled-block-graphs")
GRAPH_VARIANTS = ("compile-graphs", *TRANSPILED_GRAPHS)
TIMING_ROUNDS = 2
# Sanity bound on the relative L2 difference from eager's output: reduction order (fp32),
# and rounding of every intermediate through many layers (bf16).
SANITY_REL_L2 = {torch.float32: 1e-3, torch.bfloat16: 5e-2, torch.float16: 5e-2}


# -- the models ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    """A config (overrides of the config class's defaults) and the inputs' shape, for one device."""

    config: dict
    batch: int
    tokens: int = 0  # sequence length; 0 for image models
    image: int = 0  # height and width of the pixel values; 0 for text models


@dataclass(frozen=True)
class Model:
    name: str  # the directory under transformers/models
    config: str  # the config class in transformers
    cls: str  # the model class, in modeling_<name>
    output: str  # the output field compared with eager's
    cuda: Shape
    cpu: Shape
    attention: bool = True  # takes `attn_implementation`

    def shape(self, device: str) -> Shape:
        return self.cuda if device == "cuda" else self.cpu


_SMALL_TEXT = {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4, "vocab_size": 1024}
MODELS = (
    Model(
        "gpt2",
        "GPT2Config",
        "GPT2LMHeadModel",
        "logits",
        cuda=Shape({}, batch=8, tokens=512),  # the defaults: 12 layers, 768 wide, 12 heads, vocabulary 50257
        cpu=Shape({"n_layer": 2, "n_embd": 128, "n_head": 4, "vocab_size": 1024}, batch=4, tokens=128),
    ),
    Model(
        "bert",
        "BertConfig",
        "BertModel",
        "last_hidden_state",
        cuda=Shape({}, batch=16, tokens=256),  # BERT-base
        cpu=Shape({**_SMALL_TEXT, "intermediate_size": 512}, batch=8, tokens=64),
    ),
    Model(
        "llama",
        "LlamaConfig",
        "LlamaForCausalLM",
        "logits",
        # A small LLaMA: 64-wide heads, SwiGLU intermediate 8/3 of hidden rounded up to a multiple of 256.
        cuda=Shape(
            {
                "num_hidden_layers": 8,
                "hidden_size": 1024,
                "num_attention_heads": 16,
                "num_key_value_heads": 16,
                "intermediate_size": 2816,
                "vocab_size": 32000,
            },
            batch=4,
            tokens=1024,
        ),
        cpu=Shape({**_SMALL_TEXT, "num_key_value_heads": 4, "intermediate_size": 352}, batch=4, tokens=128),
    ),
    Model(
        "resnet",
        "ResNetConfig",
        "ResNetForImageClassification",
        "logits",
        cuda=Shape({"num_labels": 1000}, batch=32, image=224),  # the defaults are ResNet-50
        cpu=Shape(
            {"num_labels": 1000, "depths": [1, 1, 1, 1], "hidden_sizes": [64, 128, 256, 512], "embedding_size": 32},
            batch=4,
            image=64,
        ),
        attention=False,
    ),
    Model(
        "vit",
        "ViTConfig",
        "ViTModel",
        "last_hidden_state",
        cuda=Shape({}, batch=32, image=224),  # ViT-B/16
        cpu=Shape({**_SMALL_TEXT, "intermediate_size": 512, "image_size": 64}, batch=8, image=64),
    ),
)
MODELS_BY_NAME = {model.name: model for model in MODELS}


def config(model: Model, device: str, attention: str) -> transformers.PretrainedConfig:
    overrides = dict(model.shape(device).config)
    if model.attention:
        overrides["attn_implementation"] = attention
    return getattr(transformers, model.config)(**overrides)


def transpiled_module(model: Model, compiled: Path) -> ModuleType:
    """The transpiled `modeling_<name>`, imported as `<DIR name>.<name>.modeling_<name>`."""
    if str(compiled.parent) not in sys.path:
        sys.path.insert(0, str(compiled.parent))
    return importlib.import_module(f"{compiled.name}.{model.name}.modeling_{model.name}")


def transpiled_runtime(model: Model, compiled: Path) -> ModuleType | None:
    """The transpiled tree's `_transpile_runtime`; None where transpile compiled no region of the package,
    and wrote no runtime."""
    if not (compiled / model.name / "_transpile_runtime").is_dir():
        return None
    return importlib.import_module(f"{compiled.name}.{model.name}._transpile_runtime")


def kernel_counters(model: Model, compiled: Path) -> dict[str, dict[str, int]]:
    """The transpiled tree's `_transpile_runtime.counters()`: calls per kernel and path so far."""
    runtime = transpiled_runtime(model, compiled)
    return {} if runtime is None else runtime.counters()


def model_class(model: Model, variant: str, compiled: Path | None) -> type[nn.Module]:
    """The variant's class, its modeling module imported (transformers imports its own lazily, on this access)."""
    if variant.startswith("transpiled"):
        return getattr(transpiled_module(model, compiled), model.cls)
    return getattr(transformers, model.cls)


def build(cls: type[nn.Module], model: Model, args: argparse.Namespace) -> nn.Module:
    """The model from random weights (seeded), in eval mode, on the device, in the dtype."""
    torch.manual_seed(0)
    with torch.device(args.device):  # initialised where it runs: no host-side init, no copy
        return cls(config(model, args.device, args.attention)).to(dtype=args.dtype).eval()


def make_inputs(model: Model, args: argparse.Namespace) -> dict[str, torch.Tensor]:
    shape = model.shape(args.device)
    generator = torch.Generator(args.device).manual_seed(1)
    if shape.image:
        size = (shape.batch, 3, shape.image, shape.image)
        return {"pixel_values": torch.randn(size, generator=generator, device=args.device, dtype=args.dtype)}
    vocab = config(model, args.device, args.attention).vocab_size
    ids = torch.randint(0, vocab, (shape.batch, shape.tokens), generator=generator, device=args.device)
    # use_cache=False: one forward over the whole sequence, no KV cache to build (inference, not generation)
    return {"input_ids": ids} if model.name == "bert" else {"input_ids": ids, "use_cache": False}


def shape_label(model: Model, device: str) -> str:
    shape = model.shape(device)
    return f"{shape.batch}x3x{shape.image}x{shape.image}" if shape.image else f"{shape.batch}x{shape.tokens}"


# -- measuring -----------------------------------------------------------------------------
def counters_delta(before: dict, after: dict) -> dict[str, dict[str, int]]:
    """Calls per kernel and path between two `_transpile_runtime.counters()` snapshots."""
    delta = {}
    for kernel, paths in after.items():
        ran = {path: n - before.get(kernel, {}).get(path, 0) for path, n in paths.items()}
        ran = {path: n for path, n in ran.items() if n}
        if ran:
            delta[kernel] = ran
    return delta


def kernel_calls(delta: dict[str, dict[str, int]]) -> int:
    return sum(n for paths in delta.values() for path, n in paths.items() if not path.startswith("fallback"))


def profiled_counts(call: Callable[[], object], variant: str, counters: Callable[[], dict], device: str) -> dict:
    """What one forward launches: CUDA kernels (and copies/sets apart), or on CPU the aten ops called from Python;
    and its reach (`reach`), the generated kernels read from `counters` (the runtime's) around the same call."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    before = counters()
    with torch.profiler.profile(activities=activities) as profile:
        call()
        synchronize(device)
    delta = counters_delta(before, counters())
    events = profile.events()
    counts = {"reach": reach(events, generated_kernels(variant, events, delta, device))}
    if device == "cuda":
        device_events = [e for e in events if e.device_type == DeviceType.CUDA]
        kinds = [_device_activity(e) for e in device_events]
        return {
            **counts,
            "device_kernels": kinds.count("kernel"),
            "device_copies_and_sets": kinds.count("copy or set"),
            # Summed durations: against the timed milliseconds, how launch-bound the forward is.
            "device_busy_ms": sum(e.time_range.elapsed_us() for e in device_events) / 1e3,
            "top_kernels": top_kernels(device_events),
        }
    return {**counts, "aten_ops": sum(1 for e in events if e.name.startswith("aten::") and not _under_aten_op(e))}


def top_kernels(events, count: int = 8) -> list[dict]:
    """The device kernels taking the most time in one forward: name (shortened), calls, total ms."""
    totals: dict[str, list] = {}
    for event in events:
        name = event.name if len(event.name) <= 90 else event.name[:87] + "..."
        total = totals.setdefault(name, [0, 0.0])
        total[0] += 1
        total[1] += event.time_range.elapsed_us() / 1e3
    ranked = sorted(totals.items(), key=lambda item: -item[1][1])[:count]
    return [{"name": name, "calls": calls, "ms": round(ms, 4)} for name, (calls, ms) in ranked]


def _device_activity(event) -> str:
    """Kineto's activity type of a device event (`kernel`, `gpu_memcpy`, ...); by CUPTI's names where the
    profiler does not give it (older torch)."""
    kind = getattr(event, "activity_type", None)
    if kind is None:
        return "copy or set" if event.name.startswith(("Memcpy", "Memset")) else "kernel"
    return {"kernel": "kernel", "gpu_memcpy": "copy or set", "gpu_memset": "copy or set"}.get(kind, kind)


def _under_aten_op(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


# -- reach: where the ops of one forward run ----------------------------------------------
# Library calls: aten ops that eager runs as one tuned library kernel (BLAS, oneDNN, cuDNN, a
# fused native kernel), which a generated pointwise or row kernel would not beat and does not
# try to replace. The class is the table's key; an op under another aten op counts once, at the top.
LIBRARY_OPS = {
    # matmuls: BLAS / cuBLAS (linear and matmul dispatch to one of the others)
    "matmul": (
        "aten::linear",
        "aten::matmul",
        "aten::mm",
        "aten::addmm",
        "aten::_addmm_activation",
        "aten::bmm",
        "aten::baddbmm",
        "aten::mv",
        "aten::addmv",
        "aten::dot",
    ),
    # attention: one fused (flash, memory-efficient or math-CPU) kernel
    "attention": (
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
    ),
    # convolutions: oneDNN / cuDNN
    "convolution": ("aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution"),
    # embedding lookups: one gather kernel
    "embedding": ("aten::embedding",),
    # normalizations: one native kernel each in eager (a generated kernel pays only where it fuses neighbours)
    "normalization": (
        "aten::layer_norm",
        "aten::native_layer_norm",
        "aten::rms_norm",
        "aten::_fused_rms_norm",
        "aten::group_norm",
        "aten::native_group_norm",
        "aten::batch_norm",
        "aten::_batch_norm_impl_index",
        "aten::native_batch_norm",
        "aten::_native_batch_norm_legit_no_training",
    ),
    # pooling over windows: one native kernel, outside what pointwise and row kernels compute
    "pooling": (
        "aten::max_pool2d",
        "aten::max_pool2d_with_indices",
        "aten::adaptive_avg_pool2d",
        "aten::_adaptive_avg_pool2d",
        "aten::avg_pool2d",
    ),
}
LIBRARY_CLASS = {op: cls for cls, ops in LIBRARY_OPS.items() for op in ops}
# Ops that launch no work by themselves: views and allocations, and ops that only dispatch to others (`to` of
# the same dtype, `reshape` of a viewable tensor, `dropout` in eval return their input or a view). One of them
# counts as work where an aten op under it does (`contiguous` that copies, `to` that converts).
NO_WORK_OPS = frozenset(
    "aten::" + name
    for name in (
        "view _unsafe_view _reshape_alias reshape view_as as_strided alias t transpose permute expand expand_as "
        "unsqueeze squeeze slice select narrow split split_with_sizes chunk unbind unflatten flatten movedim "
        "diagonal unfold detach lift_fresh numpy_T contiguous to type_as dropout feature_dropout identity "
        "empty empty_strided empty_like new_empty new_empty_strided resolve_conj resolve_neg"
    ).split()
)


def reach(events, generated: int | None) -> dict:
    """Where one forward's ops ran: generated kernels (given), library calls by class, leftover eager ops that
    launch work (by name), and views and other ops that launch none. Counted over the aten ops called from
    Python: those under no other aten op."""
    library: dict[str, int] = {}
    leftover: dict[str, int] = {}
    no_work = 0
    for event in events:
        if not event.name.startswith("aten::") or _under_aten_op(event):
            continue
        cls = LIBRARY_CLASS.get(event.name)
        if cls is not None:
            library[cls] = library.get(cls, 0) + 1
        elif _launches_work(event):
            leftover[event.name] = leftover.get(event.name, 0) + 1
        else:
            no_work += 1
    return {
        "generated": generated,
        "library": sum(library.values()),
        "library_by_class": library,
        "leftover": sum(leftover.values()),
        "leftover_by_op": dict(sorted(leftover.items(), key=lambda item: -item[1])),
        "views": no_work,
    }


def _launches_work(event) -> bool:
    """Whether an aten op computes something: an op not in NO_WORK_OPS, or one with such an op under it."""
    if event.name.startswith("aten::") and event.name not in NO_WORK_OPS:
        return True
    return any(_launches_work(child) for child in event.cpu_children)


def generated_kernels(variant: str, events, delta: dict, device: str) -> int | None:
    """Generated kernels one forward ran: the transpiled runtime's kernel calls (its counters); torch.compile's
    Triton kernels on CUDA (the profiler's device rows named triton_*); None for Inductor's C++ kernels, which
    the profiler does not see; 0 for eager."""
    if variant.startswith("transpiled"):
        return kernel_calls(delta)
    if variant.startswith("compile"):
        if device != "cuda":
            return None
        return sum(1 for e in events if e.device_type == DeviceType.CUDA and e.name.startswith("triton_"))
    return 0


def ops_per_forward(variant: str, counts: dict, delta: dict, device: str) -> int | None:
    """The table's launches per forward: device kernels on CUDA; on CPU aten ops plus transpiled kernel calls."""
    if device == "cuda":
        return counts["device_kernels"]
    if variant == "compile":
        return None  # Inductor's C++ kernels are invisible to the profiler
    return counts["aten_ops"] + kernel_calls(delta)


def primary_output(output: object, model: Model) -> torch.Tensor:
    return getattr(output, model.output)


def difference(output: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> dict:
    wide, wide_reference = output.float(), reference.float()
    rel_l2 = float(torch.linalg.vector_norm(wide - wide_reference) / torch.linalg.vector_norm(wide_reference))
    return {
        "max_abs_diff": float((wide - wide_reference).abs().max()),
        "rel_l2_diff": rel_l2,
        "sane": rel_l2 <= SANITY_REL_L2[dtype],  # NaN compares False
    }


# -- steady state --------------------------------------------------------------------------
def steady_state(model: Model, args: argparse.Namespace) -> dict:
    """One row: every variant checked against eager, counted, timed and profiled on the same inputs."""
    torch._dynamo.reset()  # each row compiles its own graphs: no recompile limit, no stale guards
    row = {
        "model": model.name,
        "dtype": str(args.dtype).removeprefix("torch."),
        "shape": shape_label(model, args.device),
        "config": model.shape(args.device).config,
        "variants": {},
    }
    eager = build(model_class(model, "eager", None), model, args)
    inputs = make_inputs(model, args)
    reference = None
    calls = {}
    for variant in args.variants:
        try:
            result, output, calls[variant] = measure_variant(model, variant, eager, inputs, args)
        except Exception as error:  # one broken variant (e.g. a transpiled tree that does not import) is a cell
            traceback.print_exc()
            row["variants"][variant] = {"error": f"{type(error).__name__}: {error}".splitlines()[0]}
            continue
        if variant == "eager":
            reference = output
        elif reference is not None:
            result.update(difference(output, reference, args.dtype))
        row["variants"][variant] = result
        del output  # logits can be gigabytes
    # Timed in rounds (eager, compile, transpiled, then again), keeping each variant's fastest
    # round: one pass in order left the later variants up to 1.6x slower with identical kernels.
    allocator_for_timing()
    for _ in range(TIMING_ROUNDS):
        for variant, call in calls.items():
            timing = quietest_timing(call, args)
            result = row["variants"][variant]
            if "seconds" not in result or timing["seconds"] < result["seconds"]:
                result.update(timing)
    # Energy in a loop of its own, once per variant (energy.py): the timings above stay as they were.
    meter = EnergyMeter.for_device(args.device)
    for variant, call in calls.items():
        row["variants"][variant].update(meter.measure(call))
    # Profiled last: a profiler session can slow the launches that follow it.
    allocator_for_memory()
    for variant, call in calls.items():
        result = row["variants"][variant]
        result["peak_extra_bytes"] = peak_extra_bytes(call, args.device)
        counters = (lambda: kernel_counters(model, args.compiled)) if variant.startswith("transpiled") else dict
        counts = profiled_counts(call, variant, counters, args.device)
        result["profile"] = counts
        result["ops_per_forward"] = ops_per_forward(variant, counts, result.get("kernels", {}), args.device)
        if call.graphs is not None:
            result["graph_counts"] = dict(call.graphs.counts)
        runtime = transpiled_runtime(model, args.compiled) if variant.startswith("transpiled") else None
        if runtime is not None:  # what the default replays ran (CUDA graphs, tapes), over every call so far
            result["default_replays"] = dict(runtime.default_graph_counts())
    return row


def measure_variant(
    model: Model, variant: str, eager: nn.Module, inputs: dict, args: argparse.Namespace
) -> tuple[dict, torch.Tensor, Callable[[], object]]:
    """A variant's first-call numbers, its first output, and the call to time."""
    graphs = None
    if variant == "eager":
        module = eager
    elif variant.startswith("compile"):
        module = torch.compile(eager, mode="reduce-overhead" if variant == "compile-graphs" else "default")
    else:
        module = build(model_class(model, "transpiled", args.compiled), model, args)
        module.load_state_dict(eager.state_dict())  # the same weights as eager
        if variant == "transpiled-graphs":
            module = graphs = transpiled_runtime(model, args.compiled).cuda_graphs(module)
        elif variant == "transpiled-block-graphs":
            graphs = transpiled_runtime(model, args.compiled).cuda_graph_blocks(module)
    transpiled = variant.startswith("transpiled")
    call = lambda: module(**inputs)  # noqa: E731
    call.graphs = graphs  # its counts (replays, and why not) go into the result after the timings
    start = time.perf_counter()
    output = primary_output(call(), model)
    synchronize(args.device)
    result: dict = {"first_call_in_process_s": time.perf_counter() - start}  # torch.compile compiles here
    # Check and count what the steady state runs. Transpiled: the kernels, once the compiles the first call
    # started in the background are done (docs/compiler.md); graphs: a replay, not the first (eager) call.
    if transpiled:
        runtime = transpiled_runtime(model, args.compiled)
        if runtime is not None:
            runtime.wait_for_kernels()
        before = kernel_counters(model, args.compiled)
        del output
        output = primary_output(call(), model)  # transpiled graphs: this call records
        synchronize(args.device)
        result["kernels"] = delta = counters_delta(before, kernel_counters(model, args.compiled))
        if not delta or any(path.startswith("fallback") for paths in delta.values() for path in paths):
            print(f"{model.name} {args.dtype}: transpiled kernels off their fast path: {delta}", file=sys.stderr)
    if variant in GRAPH_VARIANTS:
        del output
        for _ in range(1 if transpiled else 2):  # reduce-overhead records on its second call
            output = primary_output(call(), model)
        synchronize(args.device)
    return result, output, call


# -- first call, in fresh processes --------------------------------------------------------
def child(spec: dict) -> dict:
    """Run in a fresh process: construction, then the first forward, timed from the process's start."""
    model = MODELS_BY_NAME[spec["model"]]
    args = argparse.Namespace(
        device=spec["device"],
        dtype=getattr(torch, spec["dtype"]),
        attention=spec["attention"],
        compiled=Path(spec["compiled"]) if spec["compiled"] else None,
    )
    files_at_start = cache_files()
    with torch.no_grad():
        cls = model_class(model, spec["variant"], args.compiled)  # imports count, construction does not
        start = time.perf_counter()
        module = build(cls, model, args)
        synchronize(args.device)
        construction = time.perf_counter() - start
        if spec["variant"] == "compile":
            module = torch.compile(module)  # imports Dynamo: part of the first call's cost, not construction
        inputs = make_inputs(model, args)
        synchronize(args.device)
        start = time.perf_counter()
        primary_output(module(**inputs), model)
        synchronize(args.device)
        first_call = time.perf_counter() - start
        to_first_result = since_parent_start()
    result = {
        "to_first_result_s": to_first_result,
        "construction_s": construction,
        "to_first_result_without_construction_s": to_first_result - construction,
        "first_call_s": first_call,
        "cache_files_at_start": files_at_start,  # 0: a cold start indeed
        "cache_files_at_end": cache_files(),  # still 0 after a precompiled run: nothing was compiled
    }
    if spec["variant"] == "transpiled":
        result["kernels"] = kernel_counters(model, args.compiled)
    return result


def first_calls(model: Model, args: argparse.Namespace) -> list[dict]:
    """Fresh processes for eager, and for torch.compile and transpiled with cold then warm caches; for a transpiled
    tree with kernels built ahead of time (`--prepare DIR --targets ...`), also a run with cold caches using
    them, with no compiler to call. The cold and warm runs ignore them (`TRANSPILE_ARTIFACTS=0`):
    they compile as before."""
    later = [v for v in args.variants if v not in ("eager", *GRAPH_VARIANTS)]  # a graph's first call is its warm-up
    runs = [("eager", "none")] + [(v, cache) for v in later for cache in ("cold", "warm")]
    if "transpiled" in later and args.compiled and (args.compiled / model.name / "transpile-artifacts.json").is_file():
        runs.append(("transpiled", "precompiled"))
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-caches-") as caches:
        for variant, cache in runs:
            env = {"TRANSPILE_ARTIFACTS": "0"}
            if cache == "precompiled":  # no compiler to run: C++ (CXX), Triton's launchers (CC), its kernels (ptxas)
                none = str(Path(caches) / "no-compiler")
                env = {"TRANSPILE_ARTIFACTS": "1", "CXX": none, "CC": none, "TRITON_PTXAS_PATH": none}
            spec = {
                "model": model.name,
                "variant": variant,
                "dtype": str(args.dtypes[0]).removeprefix("torch."),
                "device": args.device,
                "attention": args.attention,
                "compiled": str(args.compiled) if args.compiled else None,
            }
            label = f"{model.name} ({variant}, {cache} cache)"
            # The warm run finds what the cold one left; the precompiled run starts empty.
            where = Path(caches) / (f"{variant}-{cache}" if cache == "precompiled" else variant)
            found = fresh_process(Path(__file__).resolve(), spec, where, label, env)
            results.append({**spec, "cache": cache, **found})
            print(f"done first call {label}", file=sys.stderr)
    return results


# -- report --------------------------------------------------------------------------------
def markdown(report: dict) -> str:
    tables = (
        _steady_table(report),
        _energy_table(report),
        _reach_table(report),
        _graphs_table(report),
        _first_call_table(report),
        _kernels_table(report),
    )
    return "\n\n".join(table for table in tables if table)


def _ratio(slow: dict | None, fast: dict | None, key: str = "seconds") -> str:
    """`slow`'s `key` over `fast`'s: of times (the same batch), the throughput of `fast` over `slow`; of joules
    per forward, how many times less `fast` spends."""
    if not slow or not fast or slow.get(key) is None or fast.get(key) is None:
        return "-"
    return f"{slow[key] / fast[key]:.2f}x"


def _cell(result: dict | None, show: Callable[[dict], str], why: bool = False) -> str:
    """A variant's number, '-' where it was not run, 'failed' (and why, in one cell of the row) where it raised."""
    if result is None:
        return "-"
    if "error" in result:
        return f"failed: {result['error']}" if why else "failed"
    return show(result)


def _kernels(result: dict) -> str:
    paths: dict[str, int] = {}
    for kernel_paths in result.get("kernels", {}).values():
        for path, n in kernel_paths.items():
            paths[path] = paths.get(path, 0) + n
    summary = ", ".join(f"{path} x{n}" for path, n in sorted(paths.items())) or "none ran"
    kernels = len(result.get("kernels", {}))
    return f"{kernels} kernel{'' if kernels == 1 else 's'}: {summary}"


def _steady_table(report: dict) -> str:
    if not report["steady_state"]:
        return ""
    unit = "device kernels" if report["device"] == "cuda" else "aten ops + transpiled kernels"
    lines = [
        "| model | dtype | input | eager ms | torch.compile ms | transpiled ms | transpiled vs eager "
        "| transpiled vs compile | compile vs eager | peak extra MiB (eager / compile / transpiled) "
        f"| {unit} per forward (eager / compile / transpiled) | device busy ms (eager / compile / transpiled) "
        "| rel L2 diff vs eager (compile / transpiled) "
        "| transpiled kernels, calls per forward by path | cores busy elsewhere |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["steady_state"]:
        v = row["variants"]
        cells = [row["model"], row["dtype"], row["shape"]]
        cells += [_cell(v.get(name), _ms, why=True) for name in VARIANTS]
        transpiled, compiled, eager = v.get("transpiled"), v.get("compile"), v.get("eager")
        cells += [_ratio(eager, transpiled), _ratio(compiled, transpiled), _ratio(eager, compiled)]
        cells.append(" / ".join(_cell(v.get(name), _mib) for name in VARIANTS))
        cells.append(" / ".join(_cell(v.get(name), _ops) for name in VARIANTS))
        cells.append(" / ".join(_cell(v.get(name), _busy) for name in VARIANTS))
        cells.append(" / ".join(_cell(v.get(name), _diff) for name in VARIANTS[1:]))
        cells.append(_cell(transpiled, _kernels))
        busy = [r["other_processes_cores"] for r in v.values() if r.get("other_processes_cores") is not None]
        cells.append(f"{max(busy):.2f}" if busy else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _energy_table(report: dict) -> str:
    """CUDA runs that read the energy counter (energy.py): joules per forward and average watts per variant, and
    eager's joules over the others' (above 1x: it spends less); n/a, and why, where the counter was not read."""
    rows = [row for row in report["steady_state"] if any("energy_j" in r for r in row["variants"].values())]
    if report["device"] != "cuda" or not rows:
        return ""
    lines = [
        "| model | dtype | J/forward (eager / compile / transpiled) | W (eager / compile / transpiled) "
        "| eager J / compile J | eager J / transpiled J | not read because |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        v = row["variants"]
        cells = [row["model"], row["dtype"]]
        cells.append(" / ".join(_cell(v.get(name), _joules) for name in VARIANTS))
        cells.append(" / ".join(_cell(v.get(name), _watts) for name in VARIANTS))
        cells += [_ratio(v.get("eager"), v.get(name), "energy_j") for name in VARIANTS[1:]]
        reasons = sorted({r["energy_unavailable"] for r in v.values() if r.get("energy_unavailable")})
        cells.append("; ".join(reasons) or "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _reach_table(report: dict, top: int = 6) -> str:
    """Per model, dtype and variant: how many ops of one forward ran in generated kernels, in library calls and
    as leftover eager ops (`reach`), and the leftover ops called most."""
    lines = []
    for row in report["steady_state"]:
        for variant, result in row["variants"].items():
            found = result.get("profile", {}).get("reach")
            if found is None:
                continue
            generated = "n/a" if found["generated"] is None else str(found["generated"])
            classes = ", ".join(f"{cls} {n}" for cls, n in sorted(found["library_by_class"].items()))
            ops = ", ".join(f"{op.removeprefix('aten::')} {n}" for op, n in list(found["leftover_by_op"].items())[:top])
            cells = [row["model"], row["dtype"], variant, generated, f"{found['library']} ({classes or 'none'})"]
            cells += [str(found["leftover"]), str(found["views"]), ops or "-"]
            lines.append("| " + " | ".join(cells) + " |")
    if not lines:
        return ""
    header = (
        "| model | dtype | variant | generated kernels | library calls (by class) | leftover eager ops "
        f"| views, allocations (no work) | leftover ops, the {top} most called |"
    )
    return "\n".join([header, "|---|---|---|---|---|---|---|---|", *lines])


def _graphs_table(report: dict) -> str:
    """CUDA graphs on both sides, against the default modes (rows that ran a graph variant)."""
    rows = [row for row in report["steady_state"] if set(row["variants"]) & set(GRAPH_VARIANTS)]
    if not rows:
        return ""
    names = {
        "transpiled-graphs": "transpiled, whole-forward graph",
        "transpiled-block-graphs": "transpiled, block graphs",
    }
    header = ["model", "dtype", "torch.compile ms", "transpiled ms", "compile, reduce-overhead ms"]
    header += [f"{names[variant]} ms" for variant in TRANSPILED_GRAPHS]
    header += [
        f"{names[variant]} vs {versus}" for variant in TRANSPILED_GRAPHS for versus in ("compile", "reduce-overhead")
    ]
    header += ["peak extra MiB (compile ro / whole / blocks)", "rel L2 diff vs eager (compile ro / whole / blocks)"]
    header += [f"{names[variant]}: calls" for variant in TRANSPILED_GRAPHS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        v = row["variants"]
        cells = [row["model"], row["dtype"]]
        cells += [_cell(v.get(name), _ms, why=True) for name in ("compile", "transpiled", *GRAPH_VARIANTS)]
        for variant in TRANSPILED_GRAPHS:
            cells += [_ratio(v.get("compile"), v.get(variant)), _ratio(v.get("compile-graphs"), v.get(variant))]
        cells.append(" / ".join(_cell(v.get(name), _mib) for name in GRAPH_VARIANTS))
        cells.append(" / ".join(_cell(v.get(name), _diff) for name in GRAPH_VARIANTS))
        for variant in TRANSPILED_GRAPHS:
            counts = (v.get(variant) or {}).get("graph_counts", {})
            cells.append(", ".join(f"{why} x{n}" for why, n in sorted(counts.items())) or "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _kernels_table(report: dict) -> str:
    """Per model and variant, the device kernels taking the most time (CUDA runs only)."""
    lines = []
    for row in report["steady_state"]:
        for variant in VARIANTS + GRAPH_VARIANTS:
            top = row["variants"].get(variant, {}).get("profile", {}).get("top_kernels")
            for rank, kernel in enumerate(top or []):
                label = f"{row['model']} {row['dtype']} {variant}" if rank == 0 else ""
                lines.append(f"| {label} | `{kernel['name']}` | {kernel['calls']} | {kernel['ms']:.3f} |")
    if not lines:
        return ""
    return "\n".join(["| model, variant | device kernel | calls | ms per forward |", "|---|---|---|---|", *lines])


def _ms(result: dict) -> str:
    return ms(result["seconds"])


def _mib(result: dict) -> str:
    peak = result["peak_extra_bytes"]
    return "n/a" if peak is None else f"{peak / 2**20:.1f}"


def _ops(result: dict) -> str:
    return "n/a" if result["ops_per_forward"] is None else str(result["ops_per_forward"])


def _busy(result: dict) -> str:
    busy = result.get("profile", {}).get("device_busy_ms")
    return "-" if busy is None else f"{busy:.2f}"


def _joules(result: dict) -> str:
    return "n/a" if result.get("energy_j") is None else f"{result['energy_j']:.3f}"


def _watts(result: dict) -> str:
    return "n/a" if result.get("power_w") is None else f"{result['power_w']:.0f}"


def _diff(result: dict) -> str:
    if "rel_l2_diff" not in result:
        return "-"
    verdict = "" if result["sane"] else " CHECK"
    return f"{result['rel_l2_diff']:.1e}{verdict}"


def _first_call_table(report: dict) -> str:
    if not report["first_call"]:
        return ""
    lines = [
        "| model | dtype | variant | caches | process start to first result s (construction excluded) "
        "| model construction s | first call alone s | calls waiting for a compile | cache files after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in report["first_call"]:
        start = f"| {run['model']} | {run['dtype']} | {run['variant']} | {run['cache']} "
        if "error" in run:
            lines.append(start + f"| failed: {' '.join(run['error'])} | | | | |")
            continue
        caches = run["cache"] if run["cache"] == "none" else f"{run['cache']} ({run['cache_files_at_start']} files)"
        kernels = run.get("kernels")
        off = "-" if kernels is None else waiting_for_compiles(kernels)
        lines.append(
            f"| {run['model']} | {run['dtype']} | {run['variant']} | {caches} "
            f"| {run['to_first_result_without_construction_s']:.2f} | {run['construction_s']:.2f} "
            f"| {run['first_call_s']:.2f} | {off} | {run.get('cache_files_at_end', '-')} |"
        )
    return "\n".join(lines)


def waiting_for_compiles(kernels: dict) -> int:
    """Calls in `kernels` (counters) that took the original code because their kernel was not compiled or built
    yet, or failed to be: those the steady state runs as kernels (other fallbacks, such as a lone activation, are
    by design and stay)."""
    return sum(
        count
        for paths in kernels.values()
        for path, count in paths.items()
        if path.startswith("fallback") and any(word in path for word in ("compil", "build"))
    )


def merged(paths: list[Path]) -> dict:
    """Several runs' reports as one (the first run's environment): a GPU run is split to fit a time limit."""
    reports = [json.loads(path.read_text()) for path in paths]
    return {
        **reports[0],
        "steady_state": [row for r in reports for row in r["steady_state"]],
        "first_call": [run for r in reports for run in r["first_call"]],
    }


# -- command line --------------------------------------------------------------------------
def transpile_command() -> list[str]:
    """This repository's transpiler (what the benchmark measures), else `transpile` on PATH."""
    if importlib.util.find_spec("transpiler") is not None or (REPO / "transpiler" / "cli" / "main.py").is_file():
        return [sys.executable, "-m", "transpiler.cli.main", "build"]
    found = shutil.which("transpile")
    if found is None:
        raise SystemExit("neither this repository's transpiler nor `transpile` on PATH")
    return [found, "build"]


def prepare(directory: Path, models: list[Model], args: argparse.Namespace) -> int:
    """Transpile each model's package of the installed transformers into DIR/<name>, its kernels built ahead of time
    for `args.targets` where given; 1 if any failed. CUDA targets compile the Triton kernels for the call signatures
    of a first forward per dtype, recorded in a fresh process (`record_signatures`)."""
    source = Path(transformers.__file__).resolve().parent / "models"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "__init__.py").write_text(
        '"""Transpiled transformers model packages (benchmarks/models_bench.py)."""\n'
    )
    status = {}
    for model in models:
        command = [*transpile_command(), str(source / model.name), "-o", str(directory / model.name)]
        print(" ".join(command), file=sys.stderr)
        status[model.name] = subprocess.run(command, cwd=REPO).returncode
        if args.targets and status[model.name] in (0, 1):  # 1: findings left, the tree is written
            command = [*transpile_command()[:-1], "precompile", str(directory / model.name), "--targets", args.targets]
            if "sm_" in args.targets:
                command += ["--signatures", str(record_signatures(directory, model, args))]
            print(" ".join(command), file=sys.stderr)
            status[model.name] = max(status[model.name], subprocess.run(command, cwd=REPO).returncode)
    record = {"transformers": transformers.__version__, "torch": torch.__version__, "exit_codes": status}
    (directory / "prepared.json").write_text(json.dumps(record, indent=1) + "\n")
    failed = [name for name, code in status.items() if code != 0]
    if failed:
        print(f"transpile failed for {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def record_signatures(directory: Path, model: Model, args: argparse.Namespace) -> Path:
    """The Triton call signatures of the model's first forward in each of `args.dtypes` on `args.device`, recorded
    by fresh processes (TRANSPILE_RECORD_SIGNATURES) into DIR/<name>.signatures.jsonl."""
    path = directory / f"{model.name}.signatures.jsonl"
    path.write_text("")  # a model none of whose Triton kernels launches records none
    for dtype in args.dtypes:
        spec = {
            "model": model.name,
            "variant": "transpiled",
            "dtype": str(dtype).removeprefix("torch."),
            "device": args.device,
            "attention": args.attention,
            "compiled": str(directory.resolve()),
        }
        with tempfile.TemporaryDirectory(prefix="bench-record-") as caches:
            env = {"TRANSPILE_RECORD_SIGNATURES": str(path.resolve()), "TRANSPILE_ARTIFACTS": "0"}
            fresh_process(Path(__file__).resolve(), spec, Path(caches), f"{model.name} (recording)", env)
    return path


def check_prepared(compiled: Path) -> dict:
    """prepared.json, warning when the tree was transpiled from another transformers than the one installed."""
    record = json.loads((compiled / "prepared.json").read_text())
    if record["transformers"] != transformers.__version__:
        print(
            f"warning: {compiled} was transpiled from transformers {record['transformers']}, "
            f"{transformers.__version__} is installed: prepare again here",
            file=sys.stderr,
        )
    return record


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepare", type=Path, metavar="DIR", help="transpile the models' packages into DIR and exit")
    parser.add_argument(
        "--targets",
        metavar="TARGETS",
        help="with --prepare: build the kernels ahead of time for these CPU levels and CUDA capabilities (sm_90)",
    )
    parser.add_argument("--compiled", type=Path, metavar="DIR", help="the transpiled packages (from --prepare)")
    parser.add_argument(
        "--tables", type=Path, nargs="+", metavar="JSON", help="print the tables of these runs and exit"
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", default="all", help="steady-state models: names, all or none")
    parser.add_argument("--first-call", default="all", metavar="MODELS", help="models timed in fresh processes")
    parser.add_argument("--dtypes", default="bfloat16,float32", help="comma-separated (first call: the first)")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, of {', '.join(VARIANTS + GRAPH_VARIANTS)} (the graph variants: steady state, CUDA)",
    )
    parser.add_argument(
        "--attention", default="sdpa", help="transformers' attn_implementation (default sdpa, its own default)"
    )
    add_timing_arguments(parser, budget=2.0)
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every raw number here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.models = pick(parser, args.models, MODELS_BY_NAME, "model")
    args.first_call = pick(parser, args.first_call, MODELS_BY_NAME, "model")
    args.dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    args.variants = [v for v in VARIANTS + GRAPH_VARIANTS if v in args.variants.split(",")]
    if "eager" not in args.variants:
        parser.error("--variants needs eager: it is the reference and the baseline")
    if args.device != "cuda" and set(args.variants) & set(GRAPH_VARIANTS):
        parser.error("the CUDA-graph variants need --device cuda")
    if any(v.startswith("transpiled") for v in args.variants) and not (args.prepare or args.tables or args.child):
        if args.compiled is None:
            parser.error("the transpiled variant needs --compiled DIR (from --prepare DIR)")
        if not args.compiled.name.isidentifier():
            parser.error(f"--compiled {args.compiled}: its name must be a Python identifier (it is imported)")
        args.compiled = args.compiled.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.tables:
        print(markdown(merged(args.tables)))
        return 0
    if args.prepare:
        return prepare(args.prepare, args.models, args)
    report = {**environment(args.device), "benchmark": "models", "attention": args.attention}
    report["versions"]["transformers"] = transformers.__version__
    report["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    if any(v.startswith("transpiled") for v in args.variants):
        report["prepared"] = check_prepared(args.compiled)
    report["steady_state"], report["first_call"] = [], []
    with torch.no_grad():  # inference: the transpiled kernels need no autograd (and would fall back for it)
        for model in args.models:
            for dtype in args.dtypes:
                args.dtype = dtype
                report["steady_state"].append(steady_state(model, args))
                print(f"done {model.name} {args.dtype}", file=sys.stderr)
    for model in args.first_call:
        report["first_call"] += first_calls(model, args)
    report["machine"]["load_average_at_end"] = os.getloadavg()
    print(markdown(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    results = [result for row in report["steady_state"] for result in row["variants"].values()]
    failed = any("error" in r for r in results) or any("error" in run for run in report["first_call"])
    insane = any(not r.get("sane", True) for r in results)
    return 1 if failed or insane else 0


if __name__ == "__main__":
    sys.exit(main())
