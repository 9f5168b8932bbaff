"""Host time of one block call: the transpiled block's own forward against its `cuda_graph_blocks` replay (GPU).

    python benchmarks/block_overhead.py --compiled gpu_models [--models gpt2,bert,llama] [--dtype bfloat16]

The first block of each model is called with the arguments the model passes it (caught by a
forward pre-hook). Host time: `perf_counter` around CALLS calls with no synchronisation inside
(few enough that the launch queue never fills), best of ROUNDS; device time: CUDA events
around the same calls, after a synchronisation.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

import models_bench as mb  # noqa: E402

CALLS, ROUNDS = 10, 30


def timed(call) -> tuple[float, float]:
    """Best host and device microseconds per call over ROUNDS rounds of CALLS calls."""
    host, device = [], []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        began = time.perf_counter()
        for _ in range(CALLS):
            call()
        host.append((time.perf_counter() - began) / CALLS * 1e6)
        end.record()
        torch.cuda.synchronize()
        device.append(start.elapsed_time(end) / CALLS * 1e3)
    return min(host), min(device)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compiled", type=Path, required=True)
    parser.add_argument("--models", default="gpt2,bert,llama")
    parser.add_argument("--dtype", default="bfloat16")
    options = parser.parse_args()
    args = argparse.Namespace(
        device="cuda", dtype=getattr(torch, options.dtype), attention="sdpa", compiled=options.compiled.resolve()
    )
    sys.path.insert(0, str(args.compiled.parent))
    print("| model | block | original forward: host us / device us | block graph replay: host us / device us |")
    print("|---|---|---|---|")
    for name in options.models.split(","):
        model = mb.MODELS_BY_NAME[name]
        module = mb.build(mb.model_class(model, "transpiled", args.compiled), model, args)
        inputs = mb.make_inputs(model, args)
        runtime = mb.transpiled_runtime(model, args.compiled)
        blocks = runtime.cuda_graph_blocks(module)
        block_name, wrapper = next(iter(blocks.blocks.items()))
        block = wrapper.module
        caught = {}

        def catch(_module, call_args, call_kwargs):  # the first call's arguments; None: the call goes on unchanged
            caught.setdefault("call", (call_args, call_kwargs))

        handle = block.register_forward_pre_hook(catch, with_kwargs=True)
        with torch.no_grad():
            for _ in range(3):  # warm-up, record, replay
                module(**inputs)
            runtime.wait_for_kernels()
            handle.remove()
            a, k = caught["call"]
            graphed = timed(lambda: block(*a, **k))
            blocks.remove()
            original = timed(lambda: block(*a, **k))
        print(
            f"| {name} | {block_name} | {original[0]:.1f} / {original[1]:.1f} | {graphed[0]:.1f} / {graphed[1]:.1f} |"
        )
        del module, blocks


if __name__ == "__main__":
    main()
