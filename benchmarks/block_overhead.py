"""Host time against device time, per forward and per block, of the default output on CUDA (issue 17's profile).

    python benchmarks/models_bench.py --prepare gpu_models
    python benchmarks/block_overhead.py --compiled gpu_models [--models gpt2,bert,llama,vit,resnet] [--dtype bfloat16]

Per model (models_bench.py's CUDA shapes, random weights, eval, `torch.no_grad()`), after three
calls (warm-up, recording, replay):

- **forward**: the whole call as a user makes it; which graphed forward replayed (the model's own,
  one graph for the call, or only its blocks'), its host time and its device time.
- **block**: the first block called with the arguments the model passes it (caught by a forward
  pre-hook), through its source forward (`__wrapped__`, what runs without graphs) and through its own
  graph replay (what runs when the model's forward cannot record).

Host time: `perf_counter` around CALLS calls with no synchronisation inside (few enough that the
launch queue never fills), best of ROUNDS; device time: CUDA events around the same calls. Where host
time is below device time the GPU never waits on Python.
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


def graphed_modules(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The modules whose forward the build marked graphed, outermost first."""
    return [(n, m) for n, m in module.named_modules() if hasattr(type(m).forward, "__transpile_reads__")]


def profile(name: str, args: argparse.Namespace) -> str:
    model = mb.MODELS_BY_NAME[name]
    module = mb.build(mb.model_class(model, "transpiled", args.compiled), model, args)
    inputs = mb.make_inputs(model, args)
    runtime = mb.transpiled_runtime(model, args.compiled)
    graphs = sys.modules[f"{runtime.__name__}.graphs"]
    marked = graphed_modules(module)
    blocks = [(n, m) for n, m in marked if n and not graphed_modules(m)[1:]]  # innermost: the blocks
    block_name, block = blocks[0]
    caught = {}

    def catch(_module, call_args, call_kwargs):  # the first call's arguments; None: the call goes on unchanged
        caught.setdefault("call", (call_args, call_kwargs))

    handle = block.register_forward_pre_hook(catch, with_kwargs=True)
    with torch.no_grad():
        for _ in range(3):  # warm-up, record, replay
            module(**inputs)
        runtime.wait_for_kernels()
        handle.remove()
        replays = [n or type(module).__name__ for n, m in marked if _replays(graphs, m)]
        forward = timed(lambda: module(**inputs))
        a, k = caught["call"]
        source = type(block).forward.__wrapped__
        original = timed(lambda: source(block, *a, **k))
        for _ in range(3):
            block(*a, **k)
        graphed = timed(lambda: block(*a, **k))
    what = ", ".join(replays[:2]) + (f" (+{len(replays) - 2})" if len(replays) > 2 else "") or "none"
    cells = [f"{host:.0f} / {device:.0f}" for host, device in (forward, original, graphed)]
    return f"| {name} | {what} | {cells[0]} | {block_name} | {cells[1]} | {cells[2]} |"


def _replays(graphs, module: torch.nn.Module) -> bool:
    kept = graphs.replayer(module)
    return kept is not None and kept.counts["graph replay"] > 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiled", type=Path, required=True)
    parser.add_argument("--models", default="gpt2,bert,llama,vit,resnet")
    parser.add_argument("--dtype", default="bfloat16")
    options = parser.parse_args()
    args = argparse.Namespace(
        device="cuda", dtype=getattr(torch, options.dtype), attention="sdpa", compiled=options.compiled.resolve()
    )
    sys.path.insert(0, str(args.compiled.parent))
    print(
        "| model | forwards replayed | forward: host us / device us | block | block, source forward: host us /"
        " device us | block, its own graph: host us / device us |"
    )
    print("|---|---|---|---|---|---|")
    for name in options.models.split(","):
        print(profile(name, args), flush=True)


if __name__ == "__main__":
    main()
