"""Gradients of the transformers families after `transpile`, against eager's (issue 19).

    nice python benchmarks/train_families.py [--families llama,gpt2] [--every N] [--limit N] [--jobs 1]
                                             [--timeout 600] [--json out.json] [--markdown out.md]
                                             [--tools ../shared/tools] [--float64]
    python benchmarks/train_families.py --from-json out.json [--markdown out.md]   # the report of a saved run

For each family that `hf_families.py` (the shared tool that builds a tiny random model of a transformers
family and its inputs; `--tools` says where it is, it is imported from there) can build, a child process
(own interpreter, `--timeout` seconds; a crash or a hang costs one row):

1. resolves the family's tiny config and inputs on the original code (`hff.tiny_model`), then sets every
   dropout probability of the config tree to 0 (fields named `*drop*` holding a positive number:
   `hidden_dropout_prob`, `attn_pdrop`, `drop_path_rate`, `layerdrop`, ...), so that a training forward
   is deterministic;
2. transpiles the family's folder (`transpile build <transformers>/models/<family>`, kernels on: the
   backward kernels are what is measured; the C++ builds go to `hf_families_check.DEFAULT_CACHE`, shared
   with that benchmark, unless `TRANSPILE_CACHE_DIR` says otherwise);
3. builds the original model and the transpiled one (the class of the same name from the output's
   modeling file, `hff.tiny_model(family, module=...)`) with the original's `state_dict`, in train mode,
   float32 on the CPU;
4. runs two training steps on each (forward with `torch.manual_seed(hff.SEED)`, backward; no optimiser
   step, gradients reset in between: the first plans and builds the kernels, the second runs them
   planned). The loss is the output's `loss` where the model returns one (the inputs carry labels where
   the tool gives them), else a weighted sum of squares of the main floating output (the first floating
   tensor of the output that requires grad, `sum(R * out**2)` with `R` a fixed normal tensor drawn from
   `hff.SEED`: a plain sum of squares is constant after a final LayerNorm or RMSNorm of unit weight, as in
   BERT, ViT and T5, and every gradient below that norm is then rounding noise; `loss` column:
   `sum of squares of <path>`);
5. compares, per step: the loss (rtol 1e-4), and every parameter's `.grad`: None in both or in neither,
   the same shape, and values within `|a - b| <= 1e-4 * max|eager grad| + 1e-6` (the bound of float32
   rounding for a reordered sum of these tiny widths, many times over), with the largest relative error
   `max|a - b| / max|eager grad|` reported. A parameter outside that bound is judged once more against
   the eager model run in float64 (`hf_families_check._as_accurate`'s rule, for gradients): the
   transpiled gradient at most twice as far from the float64 one as eager's float32 gradient is (or 2
   ulps of its largest magnitude) counts as float32 rounding (`within tolerance`, `by float64`);
6. with `--float64`, trains the transpiled model in float64 too (its C++ kernels run in float64) against eager in
   float64, and reports the largest relative gradient difference with the kernel calls of that step: where the
   kernels ran and the difference is at float64's rounding (~1e-12), their arithmetic is eager's, and a float32
   difference is the rounding of a reordered computation (the status still comes from the float32 bound);
7. reads the transpiled tree's `_transpile_runtime.KERNELS` over the second step: the calls of the
   backward kernels (`*_backward*`) and of the forward ones, by path (`cpp`, ...), and every fallback
   with its reason.

Statuses: `equal` (loss and every gradient bit for bit), `within tolerance`, `different`, `original
fails` (the tiny model does not build, run or train in eager: no transpile result), `transpile fails`
(the build, or the transpiled model's import, build or training step failed; `stage` says where),
`timeout`, `crash` (the child died), `nondeterministic` (two eager steps from the same seed give
different gradients, as sew_d's random masking of time steps in training does: no comparison can hold, and
the result is not counted as different).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import copy
import importlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from break_families import (
    DEFAULT_TOOLS,
    ROOT,
    _short,
    _version,
    publish,
    report_saved,
    selected_families,
)  # noqa: E402
from hf_families_check import DEFAULT_CACHE, _to_double  # noqa: E402

LOSS_RTOL = 1e-4
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6  # |a - b| <= GRAD_RTOL * max|eager grad| + GRAD_ATOL
STEPS = 2  # training steps per model, each compared (the first plans and builds the kernels)
_DROPOUT = re.compile(r"drop", re.IGNORECASE)
STATUSES = (
    "equal",
    "within tolerance",
    "different",
    "nondeterministic",
    "original fails",
    "transpile fails",
    "timeout",
    "crash",
)


# --------------------------------------------------------------------------- child: one family


def measure_family(family: str, tools: Path, work: Path, float64: bool = False) -> dict:
    """Everything about one family, in this process. A JSON-able row."""
    sys.path.insert(0, str(tools))
    import hf_families as hff
    import torch

    hff._quiet()
    torch.set_num_threads(1)
    row: dict = {"family": family}
    folder = Path(hff.models_root()) / family
    stage = "build"
    try:
        hff.tiny_model(family)  # resolves (and caches) the config and inputs on the original code
        row["dropout_zeroed"] = zero_dropout(hff, hff._resolve(family)[1])
        original, inputs = hff.tiny_model(family)
        row["model_class"] = type(original).__name__
        row["inputs"] = sorted(inputs)
        state = {name: value.clone() for name, value in original.state_dict().items()}
        stage = "train"
        steps = [train_step(hff, original, inputs) for _ in range(STEPS)]
    except Exception as error:
        return {**row, "status": "original fails", "stage": stage, "error": _short(error)}
    row["loss_kind"] = steps[0]["loss_kind"]
    row["nondeterministic"] = compare_step(steps[0], steps[1])["status"] != "equal"
    row["parameters"] = len(steps[0]["grads"])
    row["without_grad"] = sum(g is None for g in steps[0]["grads"].values())

    package = f"train_{family}"
    out = work / package / family
    began = time.monotonic()
    built = transpile(folder, out)
    row["transpile_s"] = round(time.monotonic() - began, 1)
    if built is not None:
        return {**row, "status": "transpile fails", "stage": "transpile", "error": built}
    (work / package / "__init__.py").touch()
    sys.path.insert(0, str(work))
    stage = "import"
    try:
        module = importlib.import_module(f"{package}.{family}.{hff._modeling_files(family)[0][:-3]}")
        runtime = _runtime(out, package, family)
        stage = "build"
        model, copied = hff.tiny_model(family, module=module)
        model.load_state_dict(state)
        stage = "train"
        results = []
        for _ in range(STEPS):
            before = _counts(runtime)
            results.append(train_step(hff, model, copied))
            if runtime is not None and hasattr(runtime, "wait_for_kernels"):
                runtime.wait_for_kernels()
        row["kernels"] = _kernel_calls(before, _counts(runtime))  # the last step's
    except Exception as error:
        return {**row, "status": "transpile fails", "stage": stage, "error": _short(error)}
    compared = [compare_step(e, a) for e, a in zip(steps, results)]
    worst = max(compared, key=lambda c: (STATUSES.index(c["status"]), c["max_rel_error"] or 0))
    row.update(worst)
    row["steps"] = [c["status"] for c in compared]
    if row["status"] == "different" and row["nondeterministic"]:
        row["status"] = "nondeterministic"  # eager differs from itself: TRANSPILE_BACKEND=eager gives the same
    if row["status"] == "different" and not row["nondeterministic"]:
        judged = as_accurate(hff, family, state, steps[-1], results[-1], row["mismatches"])
        if judged is not None:
            row["status"], row["float64"] = "within tolerance", judged
    if float64:
        row["float64_kernels"] = kernels_in_float64(hff, family, state, model, copied, runtime)
    return row


def kernels_in_float64(hff: Any, family: str, state: dict, model: Any, inputs: dict, runtime: Any) -> dict:
    """The transpiled model trained in float64 (its C++ kernels run in float64 too) against eager in float64: the
    largest relative gradient difference, and the kernel calls of that step. Where the kernels ran and the difference
    is at float64's rounding (~1e-12), their arithmetic is eager's, and a float32 difference is the rounding of a
    reordered computation; it does not tell whether that rounding is as small as eager's (the float32 bound does)."""
    import torch

    try:
        original, original_inputs = hff.tiny_model(family)
        original.load_state_dict(state)
        exact = train_step(hff, original.double(), _to_double(original_inputs))
        model.double()
        train_step(hff, model, _to_double(inputs))  # plans (and builds) the float64 kernels
        before = _counts(runtime)
        ours = train_step(hff, model, _to_double(inputs))
    except Exception as error:  # noqa: BLE001 - a model that does not train in float64: no evidence either way
        return {"error": _short(error)}
    worst, parameter = 0.0, ""
    for name, want in exact["grads"].items():
        got = ours["grads"][name]
        if want is None or got is None or got.shape != want.shape:
            continue
        error = (got - want).abs().max().item() / max(want.abs().max().item(), torch.finfo(torch.float64).tiny)
        if error > worst:
            worst, parameter = error, name
    return {"max_rel_error": worst, "worst_parameter": parameter, "kernels": _kernel_calls(before, _counts(runtime))}


def zero_dropout(hff: Any, cfg: Any) -> list[str]:
    """Set every positive dropout probability of the config tree to 0 (in place); the fields set."""
    changed = []
    for sub in hff._walk_configs(cfg):
        for name, value in list(vars(sub).items()):
            positive = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
            if _DROPOUT.search(name) and positive and value <= 1:
                setattr(sub, name, 0.0)
                changed.append(f"{type(sub).__name__}.{name}={value:g}")
    return changed


def train_step(hff: Any, model: Any, inputs: dict) -> dict:
    """Forward (seeded, train mode) and backward: the loss, how it was made, and every parameter's gradient."""
    import torch

    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(hff.SEED)
    output = model(**copy.deepcopy(inputs))
    loss, kind = _loss(hff, output)
    loss.backward()
    grads = {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return {"loss": loss.detach().double().item(), "loss_kind": kind, "grads": grads}


def _loss(hff: Any, output: Any) -> tuple[Any, str]:
    import torch

    loss = output.get("loss") if hasattr(output, "get") else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.requires_grad and loss.numel() == 1:
        return loss.reshape(()), "model loss"
    for path, value in hff.flatten_outputs(output):
        if value.is_floating_point() and value.requires_grad:
            # weighted: a plain sum of squares is constant after a final LayerNorm/RMSNorm of unit weight (BERT,
            # ViT, T5), where every gradient below the norm is rounding noise
            weights = torch.randn(value.shape, generator=torch.Generator().manual_seed(hff.SEED), dtype=value.dtype)
            return (weights * value.pow(2)).sum(), f"sum of squares of {path}"
    raise ValueError("no floating output requires grad")


def compare_step(expected: dict, actual: dict) -> dict:
    """The loss and every gradient of one step against eager's: status, largest relative error, mismatches."""
    import torch

    loss_a, loss_b = expected["loss"], actual["loss"]
    loss_ok = abs(loss_a - loss_b) <= LOSS_RTOL * abs(loss_a) or (loss_a != loss_a and loss_b != loss_b)
    exact = loss_a == loss_b
    mismatches: list[dict] = []
    worst, worst_name = 0.0, None
    names = list(expected["grads"])
    if names != list(actual["grads"]):
        missing = sorted(set(names) ^ set(actual["grads"]))
        mismatches.append({"parameter": ",".join(missing[:4]), "why": "parameters differ"})
    for name in names:
        a, b = expected["grads"][name], actual["grads"].get(name)
        if a is None or b is None:
            if (a is None) != (b is None):
                mismatches.append({"parameter": name, "why": f"grad None in {'eager' if a is None else 'transpiled'}"})
            continue
        if a.shape != b.shape:
            mismatches.append({"parameter": name, "why": f"shape {tuple(a.shape)} vs {tuple(b.shape)}"})
            continue
        if torch.equal(a, b):
            continue
        exact = False
        if (a.isnan() != b.isnan()).any():
            mismatches.append({"parameter": name, "why": "NaN in one only"})
            continue
        both = ~a.isnan()
        error = (a[both] - b[both]).abs().max().item() if both.any() else 0.0
        scale = a[both].abs().max().item() if both.any() else 0.0
        rel = error / scale if scale else (0.0 if error == 0 else float("inf"))
        if rel > worst:
            worst, worst_name = rel, name
        if not error <= GRAD_RTOL * scale + GRAD_ATOL:
            mismatches.append({"parameter": name, "why": "values", "max_abs": error, "max_eager": scale, "rel": rel})
    if mismatches or not loss_ok:
        status = "different"
    else:
        status = "equal" if exact and not worst else "within tolerance"
    return {
        "status": status,
        "loss": loss_a,
        "loss_transpiled": loss_b,
        "loss_ok": loss_ok,
        "max_rel_error": worst,
        "worst_parameter": worst_name,
        "mismatches": mismatches,
    }


def as_accurate(hff: Any, family: str, state: dict, expected: dict, actual: dict, mismatches: list[dict]) -> str | None:
    """Whether the mismatched gradients are float32 rounding: the transpiled one no further from eager's float64
    gradient than twice eager's float32 one (or 2 ulps of its largest magnitude). None where not, or where the
    model does not train in float64."""
    import torch

    if any(m["why"] != "values" for m in mismatches):
        return None
    try:
        model, inputs = hff.tiny_model(family)
        model.load_state_dict(state)
        exact = train_step(hff, model.double(), _to_double(inputs))
    except Exception:
        return None
    ratio = 0.0
    for m in mismatches:
        x, y, t = expected["grads"][m["parameter"]], actual["grads"][m["parameter"]], exact["grads"][m["parameter"]]
        if t is None:
            return None
        ulp = torch.finfo(torch.float32).eps * t.abs().max().item()
        own, ours = (x.double() - t).abs().max().item(), (y.double() - t).abs().max().item()
        if ours > 2 * max(own, ulp):
            return None
        ratio = max(ratio, ours / max(own, ulp))
    return f"float32 rounding: at most {ratio:.2f}x eager's own distance to its float64 gradient"


def transpile(folder: Path, out: Path) -> str | None:
    """`transpile build` of the family's folder (kernels on); None, or why it failed."""
    from click.testing import CliRunner

    from transpiler.cli.main import main

    build = CliRunner().invoke(
        main, ["build", "--no-cache", "-j", "1", "--format", "json", str(folder), "-o", str(out)]
    )
    if build.exit_code not in (0, 1):  # 1: findings left, kept as they were
        return _short(build.output or build.exception)
    return None


def _runtime(out: Path, package: str, family: str) -> Any:
    """The transpiled tree's `_transpile_runtime`; None where transpile compiled no region (and wrote none)."""
    if not (out / "_transpile_runtime").is_dir():
        return None
    return importlib.import_module(f"{package}.{family}._transpile_runtime")


def _counts(runtime: Any) -> dict[tuple[str, str], int]:
    if runtime is None:
        return {}
    return {(k.name, path): n for k in runtime.KERNELS for path, n in k.counts.items()}


def _kernel_calls(before: dict, after: dict) -> dict:
    """The calls between two snapshots of the counters: per direction, by path; fallbacks with their reasons."""
    calls: dict = {"backward": collections.Counter(), "forward": collections.Counter()}
    kernels: dict = {"backward": set(), "forward": set()}
    for (name, path), n in after.items():
        n -= before.get((name, path), 0)
        if n:
            direction = "backward" if "_backward" in name else "forward"
            calls[direction][path] += n
            kernels[direction].add(name)
    return {
        **{d: dict(c.most_common()) for d, c in calls.items()},
        **{f"{d}_kernels": len(k) for d, k in kernels.items()},
    }


# --------------------------------------------------------------------------- parent: many families


def run_one(family: str, args: argparse.Namespace, env: dict) -> dict:
    """`measure_family` in a fresh interpreter under the timeout."""
    with tempfile.TemporaryDirectory(prefix=f"train_{family}_") as work:
        command = [sys.executable, __file__, "--child", family, "--tools", str(args.tools), "--work", work]
        command += ["--float64"] if args.float64 else []
        began = time.monotonic()
        try:
            run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return {"family": family, "status": "timeout", "error": f"over {args.timeout:g} s"}
        lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
        if run.returncode != 0 or not lines:
            tail = run.stderr.strip().splitlines()[-1:] or [f"exit code {run.returncode}"]
            return {"family": family, "status": "crash", "error": _short(f"exit code {run.returncode}: {tail[0]}")}
        row = json.loads(lines[-1])
        row["wall_s"] = round(time.monotonic() - began, 1)
        return row


def _calls(path_counts: dict, fallbacks: bool) -> int:
    return sum(n for path, n in path_counts.items() if path.startswith("fallback") == fallbacks)


def totals(rows: list[dict]) -> dict:
    out: dict = {"families": len(rows), "statuses": dict(collections.Counter(r["status"] for r in rows))}
    compared = [r for r in rows if "kernels" in r]
    for direction in ("backward", "forward"):
        out[f"{direction}_calls"] = sum(_calls(r["kernels"][direction], False) for r in compared)
        out[f"{direction}_fallbacks"] = sum(_calls(r["kernels"][direction], True) for r in compared)
        out[f"families_with_{direction}_kernels"] = sum(_calls(r["kernels"][direction], False) > 0 for r in compared)
    out["model_loss"] = sum(r.get("loss_kind") == "model loss" for r in rows)
    out["nondeterministic"] = sorted(r["family"] for r in rows if r.get("nondeterministic"))
    out["max_rel_error"] = max((r.get("max_rel_error") or 0 for r in compared), default=0.0)
    return out


def _fallback_text(path_counts: dict) -> str:
    return "; ".join(f"{path.removeprefix('fallback: ')} x{n}" for path, n in path_counts.items() if "fallback" in path)


def _float64_text(checked: dict) -> str:
    if "error" in checked:
        return f"float64: does not train ({checked['error'][:80]})"
    k = checked["kernels"]
    calls = sum(
        n for d in ("backward", "forward") for path, n in k.get(d, {}).items() if not path.startswith("fallback")
    )
    return f"float64 with {calls} kernel calls: max rel error {checked['max_rel_error']:.1e} ({checked['worst_parameter']})"


def render(rows: list[dict], summary: dict, seconds: float, command: str) -> str:
    head = ["family", "status", "loss", "max rel error (parameter)", "backward calls", "forward calls"]
    head += ["fallbacks", "note"]
    lines = [f"Command: `{command}`", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        k = r.get("kernels", {})
        back, fwd = k.get("backward", {}), k.get("forward", {})
        error = r.get("max_rel_error")
        cells = [
            r["family"],
            r["status"],
            r.get("loss_kind", "").replace("sum of squares of ", "sum sq ") or "",
            (
                ""
                if error is None
                else f"{error:.2e}" + (f" ({r['worst_parameter']})" if r.get("worst_parameter") else "")
            ),
            _path_text(back) if k else "",
            _path_text(fwd) if k else "",
            "; ".join(x for x in (_fallback_text(back), _fallback_text(fwd)) if x),
        ]
        notes = [f"{r.get('stage', '')}: {r['error'][:160]}" if r.get("error") else ""]
        notes += ["nondeterministic in eager"] if r.get("nondeterministic") else []
        notes += [r["float64"]] if r.get("float64") else []
        notes += [_float64_text(r["float64_kernels"])] if r.get("float64_kernels") else []
        notes += [f"steps {'/'.join(r['steps'])}"] if len(set(r.get("steps", []))) > 1 else []
        notes += [f"{m['parameter']}: {_mismatch(m)}" for m in r.get("mismatches", [])[:3]]
        cells.append("; ".join(n for n in notes if n))
        lines.append("| " + " | ".join(c.replace("|", "/").replace("\n", " ") for c in cells) + " |")
    s = summary
    lines += [
        "",
        f"Totals over {s['families']} families: "
        + ", ".join(f"{status} {s['statuses'][status]}" for status in STATUSES if status in s["statuses"])
        + f". The model's own loss in {s['model_loss']}, the sum of squares of the main output elsewhere. "
        f"Backward kernel calls (last step) {s['backward_calls']} in {s['families_with_backward_kernels']} families, "
        f"{s['backward_fallbacks']} backward fallbacks; forward kernel calls {s['forward_calls']} in "
        f"{s['families_with_forward_kernels']} families, {s['forward_fallbacks']} forward fallbacks. "
        f"Largest relative gradient error {s['max_rel_error']:.2e}"
        + (f"; nondeterministic in eager: {', '.join(s['nondeterministic'])}" if s["nondeterministic"] else "")
        + ".",
    ]
    differ = [r for r in rows if r["status"] == "different"]
    if differ:
        lines += ["", "Gradients that differ:", ""]
        lines += [
            f"- {r['family']}: "
            + "; ".join(f"{m['parameter']}: {_mismatch(m)}" for m in r["mismatches"][:8])
            + ("" if r.get("loss_ok", True) else f"; loss {r['loss']:.8g} vs {r['loss_transpiled']:.8g}")
            for r in differ
        ]
    import torch

    lines += [
        "",
        f"Python {platform.python_version()}, torch {torch.__version__}, transformers {_version('transformers')}, "
        f"{platform.machine()} with {os.cpu_count()} CPUs, {seconds:.0f} s",
    ]
    return "\n".join(lines)


def _path_text(path_counts: dict) -> str:
    calls = {p: n for p, n in path_counts.items() if "fallback" not in p}
    return ", ".join(f"{p} {n}" for p, n in calls.items()) or "0"


def _mismatch(m: dict) -> str:
    if m["why"] != "values":
        return m["why"]
    return f"max |diff| {m['max_abs']:.3g} against max |eager grad| {m['max_eager']:.3g} (rel {m['rel']:.2e})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", help="comma-separated family names (default: every family hf_families.py lists)")
    parser.add_argument("--limit", type=int, help="only the first N families (after --every)")
    parser.add_argument("--every", type=int, default=1, help="every Nth family in name order (a spread-out subset)")
    parser.add_argument("--jobs", type=int, default=1, help="families measured at a time")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per family")
    parser.add_argument("--json", type=Path, help="write every family's row and the totals here")
    parser.add_argument("--markdown", type=Path, help="write the report here too")
    parser.add_argument("--tools", type=Path, default=DEFAULT_TOOLS, help="the directory of hf_families.py")
    parser.add_argument("--from-json", type=Path, help="render the report of a saved --json run instead of running")
    parser.add_argument(
        "--float64",
        action="store_true",
        help="also train the transpiled model in float64 against eager in float64 (its kernels' arithmetic)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure_family(args.child, args.tools, args.work, args.float64)))
        return 0
    if args.from_json:
        report_saved(args, render, totals)
        return 0
    families = selected_families(args)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TRANSPILE_CACHE_DIR": os.environ.get("TRANSPILE_CACHE_DIR", str(DEFAULT_CACHE)),
    }
    began = time.monotonic()
    rows: list[dict] = []
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = [pool.submit(run_one, family, args, env) for family in families]
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            row = future.result()
            rows.append(row)
            brief = row.get("error") or f"max rel {row.get('max_rel_error')}, {row.get('kernels', {}).get('backward')}"
            print(f"[{done}/{len(families)}] {row['family']}: {row['status']} {brief}", file=sys.stderr, flush=True)
    publish(rows, args, time.monotonic() - began, f"python benchmarks/{Path(__file__).name}", argv, render, totals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
