"""The transpiled models with their default CUDA graphs on and off, beside eager, in one process.

    python benchmarks/models_bench.py --prepare gpu_models
    python benchmarks/default_graphs.py --compiled gpu_models [--models gpt2,bert,...] [--dtypes bfloat16]

Per model (models_bench.py's table and CUDA shapes, random weights, eval, `torch.no_grad()`): the eager
model, then the transpiled one with the default graphs on (`set_default_graphs(True)`, what a user gets)
and off, timed alternately (benchlib's median over a time budget, CUDA events synchronised), the
primary output of each against eager's, and what the graphed forwards' calls ran
(`default_graph_counts()`: replays, warm-ups, and each reason the original forward ran).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import add_timing_arguments, environment, pick, quietest_timing  # noqa: E402
from models_bench import (
    MODELS_BY_NAME,
    build,
    make_inputs,
    model_class,
    primary_output,
    transpiled_runtime,
)  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiled", type=Path, required=True)
    parser.add_argument("--models", default="gpt2,bert,llama,vit,resnet")
    parser.add_argument("--dtypes", default="bfloat16")
    parser.add_argument("--attention", default="sdpa")
    add_timing_arguments(parser, budget=1.0)
    args = parser.parse_args()
    args.device = "cuda"
    print(environment("cuda"))
    print(
        "| model | dtype | eager ms | graphs on ms | graphs off ms | on vs off | on vs eager | rel L2 on / off | calls |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for model in pick(parser, args.models, MODELS_BY_NAME, "model"):
        for dtype in args.dtypes.split(","):
            args.dtype = getattr(torch, dtype)
            print(row(model, args), flush=True)


def row(model, args) -> str:
    inputs = make_inputs(model, args)
    eager = build(model_class(model, "eager", None), model, args)
    transpiled = build(model_class(model, "transpiled", args.compiled), model, args)
    transpiled.load_state_dict(eager.state_dict())
    runtime = transpiled_runtime(model, args.compiled)
    with torch.no_grad():
        reference = primary_output(eager(**inputs), model).float()

        counts = collections.Counter()

        def switch(on: bool) -> None:
            nonlocal counts
            if not on:  # turning them off forgets the recordings and their counts: keep those
                counts += runtime.default_graph_counts()
            runtime.set_default_graphs(on)

        def run(on: bool):
            switch(on)
            return transpiled(**inputs)

        outputs = {}
        for on in (True, False, True):  # warm-up, recording, then what the steady state runs
            for _ in range(3):
                outputs[on] = primary_output(run(on), model).float()
        runtime.wait_for_kernels()
        times = {}
        for on in (True, False, True, False):
            run(on)
            run(on)
            seconds = quietest_timing(lambda on=on: transpiled(**inputs), args)["seconds"]
            times[on] = min(times.get(on, seconds), seconds)
        eager_s = quietest_timing(lambda: eager(**inputs), args)["seconds"]
        switch(True)

    def l2(out):
        return f"{((out - reference).norm() / reference.norm()).item():.1e}"

    calls = ", ".join(f"{reason} x{n}" for reason, n in counts.most_common())
    return (
        f"| {model.name} | {str(args.dtype).removeprefix('torch.')} | {eager_s * 1e3:.3f} | {times[True] * 1e3:.3f} | "
        f"{times[False] * 1e3:.3f} | {times[False] / times[True]:.2f}x | {eager_s / times[True]:.2f}x | "
        f"{l2(outputs[True])} / {l2(outputs[False])} | {calls} |"
    )


if __name__ == "__main__":
    main()
