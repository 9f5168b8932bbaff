"""The `--unsafe-fixes` output of corpus files against the originals on a CUDA machine (torch 2.11 there).

Transpile here (the lent machine has neither libcst nor black; the output needs neither), then run there:

    python -m transpiler benchmarks/corpus -o fixed_corpus --no-kernels --unsafe-fixes   # an untracked folder
    python benchmarks/fixes_on_cuda.py fixed_corpus seq_performer,vis_vae_kl,...          # on the device
    python benchmarks/fixes_on_cuda.py fixed_corpus seq_lstm_anomaly --float64            # nearest to float64?

For each file, on CUDA with the original's `state_dict` in the fixed model: the fixed model's eager output
against the original's (bit for bit is what the fixes promise in eager), the original and the fixed model
compiled by Inductor against the original's eager (the original's own compile gives the scale of
Inductor's rounding), and `explain`'s graphs and breaks of both. With `--float64`, each output's largest
relative error against the original run in float64: the original's eager (cuDNN's recurrent kernels use
TF32 unless `torch.backends.cudnn.allow_tf32` is off), the same without TF32, and the fixed model under
Inductor. Runs on a CPU too (a dry run of the harness).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import sys
from pathlib import Path

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CORPUS = Path(__file__).resolve().parent / "corpus"


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def moved(value, dtype: torch.dtype | None = None):
    """`value` (tensors in lists and tuples) on the device, floating tensors in `dtype` if given."""
    if isinstance(value, torch.Tensor):
        return value.to(DEVICE, dtype) if dtype is not None and value.is_floating_point() else value.to(DEVICE)
    if isinstance(value, (list, tuple)):
        return type(value)(moved(v, dtype) for v in value)
    return value


def run(model, args):
    torch.manual_seed(0)
    with torch.no_grad():
        return model(*copy.deepcopy(args))


def leaves(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in leaves(v)]
    return []


def compare(expected, actual) -> str:
    """equal / within tolerance (torch.testing's float32 defaults) / different, with the largest difference."""
    worst = max(
        [(a.double() - e.double()).abs().max().item() for e, a in zip(leaves(expected), leaves(actual)) if e.numel()]
        or [0.0]
    )
    for verdict, tolerance in (("equal", {"rtol": 0, "atol": 0}), ("within tolerance", {})):
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True, **tolerance)
            return f"{verdict} ({worst:.1e})"
        except AssertionError:
            pass
    return f"different ({worst:.1e})"


def relative_error(reference, actual) -> str:
    worst = 0.0
    for r, a in zip(leaves(reference), leaves(actual)):
        if r.is_floating_point() and r.numel():
            worst = max(worst, ((a.double() - r.double()).abs() / (r.double().abs() + 1e-3)).max().item())
    return f"{worst:.1e}"


def graphs(model, args) -> str:
    torch._dynamo.reset()
    torch.manual_seed(0)
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(*copy.deepcopy(args))
    return f"{explained.graph_count} graphs, {explained.graph_break_count} breaks"


def pair(fixed_folder: Path, stem: str):
    """The original and the fixed model (with the original's state_dict) and the inputs, on CPU."""
    original = load(CORPUS / f"{stem}.py", f"original_{stem}")
    fixed = load(fixed_folder / f"{stem}.py", stem)
    torch.manual_seed(0)
    before, args = original.build()
    torch.manual_seed(0)
    after, _ = fixed.build()
    after.load_state_dict(before.state_dict())
    return before, after, args


def check(fixed_folder: Path, stem: str) -> list[str]:
    before, after, args = pair(fixed_folder, stem)
    before, after, args = before.to(DEVICE), after.to(DEVICE), moved(args)
    try:
        expected = run(before, args)
    except Exception as error:  # noqa: BLE001 (an original that keeps CPU tensors inside)
        return [stem, f"the original fails on {DEVICE}: {type(error).__name__}"]
    row = [stem, compare(expected, run(after, args))]
    for model in (before, after):
        torch._dynamo.reset()
        try:
            row.append(compare(expected, run(torch.compile(model), args)))
        except Exception as error:  # noqa: BLE001
            row.append(f"compile error: {type(error).__name__}")
    return row + [graphs(before, args), graphs(after, args)]


def float64(fixed_folder: Path, stem: str) -> list[str]:
    before, after, args = pair(fixed_folder, stem)
    reference = run(copy.deepcopy(before).to(DEVICE, torch.float64), moved(args, torch.float64))
    before, after, args = before.to(DEVICE), after.to(DEVICE), moved(args, torch.float32)
    eager = run(before, args)
    allowed, torch.backends.cudnn.allow_tf32 = torch.backends.cudnn.allow_tf32, False
    eager_without_tf32 = run(before, args)
    torch.backends.cudnn.allow_tf32 = allowed
    torch._dynamo.reset()
    compiled = run(torch.compile(after), args)
    return [stem, *(relative_error(reference, out) for out in (eager, eager_without_tf32, compiled))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixed", type=Path, help="the output of `transpile benchmarks/corpus --unsafe-fixes`")
    parser.add_argument("stems", help="corpus files, comma-separated, without `.py`")
    parser.add_argument("--float64", action="store_true", help="errors against the original run in float64")
    options = parser.parse_args()
    torch._inductor.config.fallback_random = True  # the global generator's draws as eager makes them
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU"
    print(f"torch {torch.__version__}, {name}\n")
    if options.float64:
        header = ["file", "original, eager", "original, eager without TF32", "fixed, Inductor"]
    else:
        header = ["file", "fixed, eager", "original, Inductor", "fixed, Inductor", "original", "fixed"]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for stem in options.stems.split(","):
        row = (float64 if options.float64 else check)(options.fixed, stem)
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
