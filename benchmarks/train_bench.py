"""One training step of real transformers models: eager vs torch.compile vs transpiled, in one process.

    python benchmarks/models_bench.py --prepare compiled/hf --models gpt2,bert,llama   # transpile the packages
    python benchmarks/train_bench.py --compiled compiled/hf [--device cuda|cpu] [--models gpt2,bert,llama]
        [--variants eager,compile,transpiled] [--steps 5] [--rounds 5] [--json FILE]

A step is a forward with labels (the model's own loss), `loss.backward()` and an AdamW step
(`torch.optim.AdamW`, its default foreach implementation), the model's parameters in float32. On CUDA the
forward runs under `torch.autocast("cuda", torch.bfloat16)`, as mixed-precision training does, at the
shapes of benchmarks/models_bench.py (GPT-2 12 layers at 8x512, BERT-base with its masked-LM head at
16x256, an 8-layer LLaMA at 4x1024); on CPU in float32, at its small configs. Configs keep their
defaults, but `use_cache` off (no key-value cache in training), dropout included (GPT-2 and BERT 0.1): dropout stays eager's call between the kernels (its masks
are eager's under a seed); `--no-dropout` sets every dropout probability to 0.

Per model, every variant is built from the same config and state_dict and trained on the same batches:
- the first step, from a model that has never run (torch.compile compiles its forward and backward
  there; the transpiled model plans its kernels and compiles them: in the background on CUDA, the
  C++ library on the CPU);
- the steady state: the variants' steps alternated in rounds (benchlib.alternating_seconds), the
  median per round, so that ratios hold on a noisy machine;
- peak memory: on CUDA everything a variant holds at a step's peak (weights, optimizer state, activations:
  `max_memory_allocated` above what was allocated before the variant was built, plus the memory its CUDA graphs
  keep in pools of their own for their intermediates, which `memory_allocated` misses); on the CPU what one step
  needs above what is live before it;
- the losses of the first steps against eager's (a sanity check: same weights, same batch), and, for the
  transpiled model, how often its backward kernels ran and why they fell back (the runtime's counters).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402
    alternating_seconds,
    environment,
    graph_pool_idle_bytes,
    graph_pools,
    ms,
    peak_extra_bytes,
    pick,
    synchronize,
)
from models_bench import MODELS_BY_NAME, Model, config, transpiled_module, transpiled_runtime  # noqa: E402

VARIANTS = ("eager", "compile", "transpiled")
# The training head of each model: its loss from `labels`.
HEADS = {"gpt2": "GPT2LMHeadModel", "bert": "BertForMaskedLM", "llama": "LlamaForCausalLM"}


def batch(model: Model, device: str, vocab: int, seed: int) -> dict:
    shape = model.shape(device)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (shape.batch, shape.tokens), generator=generator).to(device)
    return {"input_ids": ids, "labels": ids}


# Config fields holding dropout probabilities, set to 0 by `--no-dropout` (LLaMA has none above 0).
DROPOUT = {
    "gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
    "bert": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    "llama": ("attention_dropout",),
}


def build(model: Model, variant: str, device: str, compiled: Path | None, state: dict | None, dropout: bool):
    cfg = config(model, device, "sdpa")
    cfg.use_cache = False  # training: no key-value cache is built (transformers' own training scripts do the same)
    if not dropout:
        for field in DROPOUT[model.name]:
            setattr(cfg, field, 0.0)
    if variant == "transpiled":
        cls = getattr(transpiled_module(model, compiled), HEADS[model.name])
    else:
        import transformers

        cls = getattr(transformers, HEADS[model.name])
    torch.manual_seed(0)
    module = cls(cfg).to(device).train()
    if state is not None:
        module.load_state_dict(state)
    runnable = torch.compile(module) if variant == "compile" else module
    return module, runnable, torch.optim.AdamW(module.parameters(), lr=1e-4), cfg.vocab_size


def make_step(runnable, optimiser, inputs: dict, device: str):
    def step() -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = runnable(**inputs).loss
        loss.backward()
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def backward_counters(model: Model, compiled: Path) -> dict[str, int]:
    runtime = transpiled_runtime(model, compiled)
    total: dict[str, int] = {}
    for kernel in [] if runtime is None else runtime.KERNELS:
        for path, n in kernel.counts.items():
            key = f"{'backward' if kernel.name.endswith('_backward') else 'forward'}: {path}"
            total[key] = total.get(key, 0) + n
    return total


def run_model(model: Model, args: argparse.Namespace) -> dict:
    device = args.device
    state = None  # the first variant's initial weights, which the others load
    steps, rows = {}, {}
    for variant in args.variants:
        if device == "cuda":  # what the variant holds is counted from here
            gc.collect()
            torch.cuda.empty_cache()
            pools, allocated = graph_pools(), torch.cuda.memory_allocated()
        module, runnable, optimiser, vocab = build(model, variant, device, args.compiled, state, args.dropout)
        if state is None:
            state = {k: v.clone() for k, v in module.state_dict().items()}
        inputs = batch(model, device, vocab, seed=1)
        step = make_step(runnable, optimiser, inputs, device)
        synchronize(device)
        torch.manual_seed(2)  # the same dropout draws in eager and transpiled (torch.compile draws its own)
        start = time.perf_counter()
        loss = step()
        synchronize(device)
        rows[variant] = {"first_step_s": time.perf_counter() - start, "first_loss": loss.item()}
        losses = [loss]
        for _ in range(args.steps):  # warm: plans, background compiles, recordings, the allocator's pools
            losses.append(step())
        rows[variant]["losses"] = [value.item() for value in losses]  # the same batch: eager's curve, step by step
        if variant == "transpiled" and hasattr(transpiled_runtime(model, args.compiled), "wait_for_kernels"):
            transpiled_runtime(model, args.compiled).wait_for_kernels()
            step()
        if device == "cuda":
            # Everything the variant holds at a step's peak: weights, optimizer state, activations, and the memory its
            # CUDA graphs keep in pools of their own for their intermediates, which `memory_allocated` misses.
            synchronize(device)
            torch.cuda.reset_peak_memory_stats()
            step()
            synchronize(device)
            rows[variant]["graph_pool_bytes"] = graph_pool_idle_bytes(excluding=pools)
            rows[variant]["peak_bytes"] = (
                torch.cuda.max_memory_allocated() - allocated + rows[variant]["graph_pool_bytes"]
            )
        else:
            rows[variant]["peak_bytes"] = peak_extra_bytes(step, device)
        steps[variant] = step
        if variant == "transpiled":
            rows[variant]["counters"] = backward_counters(model, args.compiled)
            runtime = transpiled_runtime(model, args.compiled)
            if runtime is not None:  # what the blocks' calls ran: training graph replays, or why not
                graphs = importlib.import_module(f"{runtime.__name__}.graphs")
                rows[variant]["graph_counts"] = dict(graphs.default_graph_counts())
    seconds = alternating_seconds(steps, device, rounds=args.rounds, per_round=args.per_round)
    for variant, value in seconds.items():
        rows[variant]["step_s"] = value
    return rows


def table(results: dict) -> str:
    lines = [
        "| model | variant | step (ms) | vs eager | vs compile | peak memory (MiB) | first step (s) | loss: first -> last |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        eager, compiled = rows.get("eager", {}).get("step_s"), rows.get("compile", {}).get("step_s")
        for variant, row in rows.items():
            ratio = lambda base: f"{base / row['step_s']:.2f}x" if base else "n/a"  # noqa: E731
            peak = "n/a" if row.get("peak_bytes") is None else f"{row['peak_bytes'] / 2**20:.0f}"
            lines.append(
                f"| {name} | {variant} | {ms(row['step_s'])} | {ratio(eager)} | {ratio(compiled)} | {peak} | "
                f"{row['first_step_s']:.2f} | {row['first_loss']:.4f} -> {row.get('losses', [row['first_loss']])[-1]:.4f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiled", type=Path, help="the transpiled packages (models_bench.py --prepare DIR)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", default="gpt2,bert,llama")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--steps", type=int, default=5, help="steps after the first, before measuring")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=5)
    parser.add_argument("--no-dropout", dest="dropout", action="store_false", help="set the configs' dropout to 0")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    models = pick(parser, args.models, {m: MODELS_BY_NAME[m] for m in HEADS}, "model")
    args.variants = pick(parser, args.variants, {v: v for v in VARIANTS}, "variant")
    if "transpiled" in args.variants and args.compiled is None:
        parser.error("the transpiled variant needs --compiled DIR")
    results = {}
    for model in models:
        results[model.name] = run_model(model, args)
        print(f"{model.name}: {json.dumps(results[model.name])}", file=sys.stderr)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps({"environment": environment(args.device), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
