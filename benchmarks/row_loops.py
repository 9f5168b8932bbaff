"""The generated Triton row kernels' loops over a row, in several forms, timed against each other on a CUDA GPU.

    python benchmarks/row_loops.py [--ops softmax,layer_norm,...] [--sizes 16384,32768,...]
        [--dtypes bfloat16,float32] [--forms while,range,stages3,stages4] [--elements 2**26]
        [--budget 0.3] [--json FILE]

Rows longer than a block (emit/runtime/triton_support.py: more than MAX_ONE_PASS columns) loop over
the row in blocks of LOOP_BLOCK columns, one loop per pass. The generator writes that loop as
`for start in tl.range(0, R, RBLOCK, num_stages=3):`; it used to write `start = 0` / `while start <
R:` / `start += RBLOCK` (for Triton's interpreter, which the tests now adapt: tests/interpreter.py).
Triton software-pipelines a `for` loop's loads, and loads that feed no `tl.dot` only where the loop
names its stages. This script renders each region's kernel with emit/triton/kernels.py, rewrites its
loops into each of `--forms` (`loop_form`: `while`, `range`, `stagesN`; the first is the baseline)
and launches every form through the runtime's own launcher (`rows_launcher`), in one process, on
the same inputs: rows of `--elements // size` x `size`, contiguous; layer_norm's and rms_norm's
weight broadcast over the rows (the strided path a model's norm takes).

Checks first: with the output poisoned (NaN) before the run, each form's result is compared with
eager on float64 copies of the inputs by ||out - ref|| / ||ref||, which must stay within twice
eager's own error in the input dtype (or one ulp of it); and every form must give the first form's
bits: the loop changes when loads are issued, not the arithmetic. Then each is timed with CUDA
events (L2 flushed before each call, benchmarks/benchlib.py), twice, alternating, and the median of
each round kept: the spread between a form's two rounds is the noise. Also reported: whether the
compiled kernel holds asynchronous copies (the pipeliner's cp.async), from its TTGIR. One-pass sizes
(no loop runs) are the control: every form is the same code there.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # emit and transpiler, when run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib
from benchlib import environment, median_seconds, synchronize  # noqa: E402

from emit.runtime import triton_support  # noqa: E402
from emit.triton.kernels import render_triton_file  # noqa: E402
from transpiler.compiler.dtypes import value_dtypes  # noqa: E402
from transpiler.compiler.ir import Input, Node, Output, Region  # noqa: E402
from transpiler.compiler.lowering import Level, lower  # noqa: E402

# The generated loop over a row's blocks, in any of the forms compared here.
LOOP = re.compile(r"^(?P<indent> *)for start in (?:tl\.)?range\(0, R, RBLOCK(?:, num_stages=\d+)?\):$", re.M)
DEVICE = "cuda"  # a module global, so that a CPU smoke run under the interpreter can set it


@dataclass(frozen=True)
class Case:
    """A row region: its nodes over `x` (and a weight `w`, bias `b`) and what eager computes."""

    inputs: tuple[str, ...]
    nodes: tuple[Node, ...]
    eager: Callable[..., torch.Tensor]

    def region(self, name: str) -> Region:
        inputs = tuple(Input(n, n, True) for n in self.inputs)
        return Region(name, "bench/rows.py", "Rows.forward", 1, 1, inputs, self.nodes, (Output("y", "y"),))


def _node(op: str, operands: tuple, out: str, constants: tuple[int, ...] = ()) -> Node:
    return Node(op, operands, out, 1, constants)


CASES = {
    "softmax": Case(("x",), (_node("softmax", ("x", -1), "y", (1,)),), lambda x: torch.softmax(x, -1)),
    "layer_norm": Case(
        ("x", "w", "b"),
        (_node("layer_norm", ("x", "w", "b", 1e-5), "y", (3,)),),
        lambda x, w, b: F.layer_norm(x, w.shape, w, b, 1e-5),
    ),
    # As LLaMA writes it: x * rsqrt(mean(x * x) + eps) * weight.
    "rms_norm": Case(
        ("x", "w"),
        (
            _node("mul", ("x", "x"), "t0"),
            _node("mean", ("t0", -1, True), "t1", (1, 2)),
            _node("add", ("t1", 1e-6), "t2", (1,)),
            _node("rsqrt", ("t2",), "t3"),
            _node("mul", ("x", "t3"), "t4"),
            _node("mul", ("t4", "w"), "y"),
        ),
        lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w,
    ),
    "sum": Case(("x",), (_node("sum", ("x", -1, True), "y", (1, 2)),), lambda x: x.sum(-1, keepdim=True)),
    "mean": Case(("x",), (_node("mean", ("x", -1, True), "y", (1, 2)),), lambda x: x.mean(-1, keepdim=True)),
}


def loop_form(text: str, form: str) -> str:
    """The kernel file with each row loop in `form`: `while` (as the generator wrote it before: `start = 0`,
    `while start < R:`, the same body, then `start += RBLOCK`), `range` (`for start in range(0, R, RBLOCK):`)
    or `stagesN` (`for start in tl.range(0, R, RBLOCK, num_stages=N):`)."""
    assert LOOP.search(text), "no row loop in the kernel"
    if form == "range":
        return LOOP.sub(r"\g<indent>for start in range(0, R, RBLOCK):", text)
    if form.startswith("stages"):
        return LOOP.sub(rf"\g<indent>for start in tl.range(0, R, RBLOCK, num_stages={int(form[6:])}):", text)
    assert form == "while", form
    lines, out = text.splitlines(), []
    k = 0
    while k < len(lines):
        line = lines[k]
        if not LOOP.match(line):
            out.append(line)
            k += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out += [f"{indent}start = 0", f"{indent}while start < R:"]
        k += 1
        while k < len(lines) and (not lines[k].strip() or lines[k].startswith(indent + " ")):
            out.append(lines[k])
            k += 1
        while out and not out[-1].strip():  # the increment goes after the body's last line, not a blank one
            k -= 1
            out.pop()
        out.append(f"{indent}    start += RBLOCK")
    return "\n".join(out) + "\n"


def load_kernel(text: str, region: Region, path: Path):
    """The region's kernel from `path`, written with `text` (Triton reads a kernel's source from its file)."""
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, f"{region.name}_kernel")


@dataclass
class Launch:
    """A kernel launched as the runtime launches it, on fixed inputs and outputs."""

    launcher: triton_support.Launcher
    tensors: list[torch.Tensor]
    outputs: list[torch.Tensor]

    def __call__(self) -> None:
        self.launcher(self.tensors, [], self.outputs)


def launch(kernel, region: Region, tensors: list[torch.Tensor]) -> Launch:
    """Rows along the last dim of x ([n_rows, R]); a 1-d weight or bias is broadcast over the rows."""
    x = tensors[0]
    n_rows, row_size = x.shape
    rows = lower(region)
    (output,) = region.outputs
    shape = (n_rows, 1) if rows.levels[output.value] is Level.ROW else (n_rows, row_size)
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    element_outputs = [out] if rows.levels[output.value] is Level.ELEMENT else []
    strides = [(0, 0, *t.expand(n_rows, row_size).stride()) for t in [*tensors, *element_outputs]]
    contiguous = all(t.shape == x.shape for t in tensors)
    names = {i.name: str(t.dtype).removeprefix("torch.") for i, t in zip(region.tensor_inputs, tensors, strict=True)}
    dtypes = {v: getattr(torch, d) for v, d in value_dtypes(region, names).items() if d is not None}
    launcher = triton_support.rows_launcher(kernel, n_rows, row_size, (1, 1, n_rows), strides, contiguous, dtypes)
    return Launch(launcher, tensors, [out])


def relative_error(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """||actual - reference|| / ||reference||, in float64; NaN anywhere in `actual` is infinite error."""
    actual = actual.double()
    if actual.isnan().any():
        return math.inf
    return ((actual - reference).norm() / reference.norm()).item()


def inputs(case: Case, n_rows: int, row_size: int, dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    x = torch.randn(n_rows, row_size, generator=generator, device=DEVICE) * 3 + 1
    extra = [torch.randn(row_size, generator=generator, device=DEVICE) * s for s in (1.0, 0.1)][: len(case.inputs) - 1]
    return [t.to(dtype) for t in (x, *extra)]


def has_async_copies(launch: Launch) -> bool | None:
    compiled = launch.launcher.compiled
    if compiled is None:
        return None
    return bool(re.search(r"async_copy_global_to_local|cp\.async", compiled.asm.get("ttgir", "")))


def measure(op: str, row_size: int, dtype: torch.dtype, args, directory: Path) -> dict:
    case = CASES[op]
    region = case.region(f"rows_{op}")
    text = render_triton_file([region], {}, "emit.runtime.triton_support")
    n_rows = max(1, args.elements // row_size)
    tensors = inputs(case, n_rows, row_size, dtype, seed=row_size)
    reference = case.eager(*(t.double() for t in tensors))
    eager_error = relative_error(case.eager(*tensors), reference)
    bound = max(2 * eager_error, torch.finfo(dtype).eps)
    launches, row = {}, {"op": op, "row_size": row_size, "rows": n_rows, "dtype": str(dtype).removeprefix("torch.")}
    row["looped"] = row_size > triton_support.MAX_ONE_PASS
    row["eager_error"] = eager_error
    for form in args.forms:
        path = directory / f"rows_{op}_{form}_{row_size}_{row['dtype']}.py"
        launches[form] = launch(load_kernel(loop_form(text, form), region, path), region, tensors)
        launches[form].outputs[0].fill_(math.nan)  # poisoned: every element must be written
        launches[form]()
        synchronize(DEVICE)
        row[f"{form}_error"] = error = relative_error(launches[form].outputs[0], reference)
        assert error <= bound, f"{op} {row_size} {dtype} {form}: error {error:.3g} over {bound:.3g}"
        # The loop changes when loads are issued, not the arithmetic: every form gives the same bits.
        first = launches[args.forms[0]].outputs[0]
        assert torch.equal(launches[form].outputs[0], first), f"{op} {row_size} {dtype}: {form} != {args.forms[0]}"
        row[f"{form}_async_copies"] = has_async_copies(launches[form])
    for round_ in (1, 2):  # alternating: a drift of the clock hits every form alike
        for form in args.forms:
            row[f"{form}_ms_{round_}"] = median_seconds(launches[form], DEVICE, args.budget)[0] * 1e3
    moved = sum(t.numel() * t.element_size() for t in [*tensors, *launches[args.forms[0]].outputs])
    for form in args.forms:
        row[f"{form}_gb_s"] = moved / (row[f"{form}_ms_1"] + row[f"{form}_ms_2"]) * 2 / 1e6
    return row


def table(rows: list[dict], forms: list[str]) -> str:
    """One line per case: each form's two medians, its time over the first form's, GB/s, cp.async in its TTGIR."""
    base = forms[0]
    header = "| op | dtype | row size | rows | " + " | ".join(f"{f} ms | {f} / {base} | {f} GB/s" for f in forms[1:])
    lines = [
        f"{header} | {base} ms | {base} GB/s | cp.async ({', '.join(forms)}) | error (max of forms), eager |",
        "|---|---|---:|---:|" + "---:|---:|---:|" * (len(forms) - 1) + "---:|---:|---|---|",
    ]
    for r in rows:

        def ms(form: str) -> str:
            return f"{r[f'{form}_ms_1']:.3f}, {r[f'{form}_ms_2']:.3f}"

        def total(form: str) -> float:
            return r[f"{form}_ms_1"] + r[f"{form}_ms_2"]

        cells = [f"{ms(f)} | {total(f) / total(base):.2f} | {r[f'{f}_gb_s']:.0f}" for f in forms[1:]]
        copies = "/".join("yes" if r[f"{f}_async_copies"] else "no" for f in forms)
        error = max(r[f"{f}_error"] for f in forms)
        lines.append(
            f"| {r['op']} | {r['dtype']} | {r['row_size']} | {r['rows']} | {' | '.join(cells)} "
            f"| {ms(base)} | {r[f'{base}_gb_s']:.0f} | {copies} | {error:.1e}, {r['eager_error']:.1e} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default=",".join(CASES))
    parser.add_argument("--sizes", default="16384,32768,131072,1048576", help="row sizes (columns)")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--elements", type=int, default=2**26, help="elements of x: rows = elements // size")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timed calls per median")
    parser.add_argument(
        "--forms", default="while,range,stages2,stages3", help="loop forms (`loop_form`); the first is the baseline"
    )
    parser.add_argument("--json", type=Path, help="write the rows and the environment here")
    args = parser.parse_args()
    args.forms = args.forms.split(",")
    if not torch.cuda.is_available():
        sys.exit("row_loops.py times compiled kernels: it needs a CUDA device")
    rows = []
    with tempfile.TemporaryDirectory(prefix="row_loops_") as directory:
        for op in args.ops.split(","):
            for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
                for size in (int(s) for s in args.sizes.split(",")):
                    rows.append(measure(op, size, dtype, args, Path(directory)))
                    print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({**environment("cuda"), "rows": rows}, indent=1) + "\n")
    print(table(rows, args.forms))


if __name__ == "__main__":
    main()
