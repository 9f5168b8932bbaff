"""`transpile verify OUT`: every generated kernel of an output tree against the eager code of its region, on
generated inputs; a gate for CI.

A kernel file's `Kernel` has its region's statements as an eager function (`reference`), which the transpiled
module runs whenever the kernel declines a call. Each kernel is called beside its reference on drawn cases:
shapes that broadcast as the region reads its inputs (and some that do not), float32, bfloat16 and float16,
contiguous, transposed, strided, broadcast and offset layouts, and its scalar inputs (evaluated from their source
where that names only the region's tensors, `q.shape[-1] // 2`; drawn where the region computes with them). NaN
and infinities only when asked (`nonfinite`): their placement is judged strictly, and an ulp's difference times
an infinity is NaN against an infinity (the C++ `erf` an ulp from eager's in GELU's far tail, times an infinite
`up`). `comparing.py` judges each case as the fuzzer does: values within the rounding the ops allow (widened by
eager's own distance from float64), NaN placement, shapes, dtypes, aliasing, inputs changed, errors raised; where
the kernel trains, the same under autograd with the inputs' gradients. A kernel is "equal" (every output bit for
bit), "within tolerance", "different" (with the first difference and the case shrunk while it stays different),
or "not exercised" (no case the kernel computed, and why it declined).

The tree is read, never written: its build manifest names the kernel files, its report (transpile-report.json)
the regions' inputs, and its runtime runs the kernels.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import random
import re
import sys
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from transpiler.compiler.ops import ACTIVATION, BY_NAME, CAST, CHANNEL_OPS, Domain

OUTCOMES = ("equal", "within tolerance", "different", "not exercised")
FLOATING = ("float32", "float64", "bfloat16", "float16")
# A case's dtype, most often float32. Not float64: the judge bounds a kernel's error by eager's own distance from
# the same code in float64, and a float64 case has nothing wider (a layer norm of one-element rows, zero in exact
# arithmetic, is 5e-14 in eager and 0 in the kernel: both rounding, neither provably so).
DTYPE_WEIGHTS = (("float32", 5), ("bfloat16", 2), ("float16", 1))
LAYOUTS = ("contiguous", "contiguous", "transposed", "strided", "broadcast", "offset")
SIZES = (1, 2, 3, 4, 5, 7, 8, 16, 33)
NUMBERS = (1e-5, 0.5, 2.0, -1.25, 3.0)
ACTIVATIONS = ("GELU", "SiLU", "ReLU", "Tanh", "Sigmoid")
ATTEMPTS_PER_CASE = 4  # draws per case asked for, shapes that eager rejects included


class VerifyError(ValueError):
    """The tree cannot be verified: the message says why."""


@dataclass(frozen=True)
class Spec:
    """One case, as drawn: regenerated from it exactly (`tensors`), and shrunk by replacing its fields."""

    full: tuple[int, ...]  # the shape every input broadcasts to
    shapes: tuple[tuple[int, ...], ...]  # per tensor input
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...]
    # Per tensor input, NaN, infinities and zeros among its values; never in a parameter or buffer (`self.*`):
    # a model's are finite, where activations overflow and attention masks hold -inf.
    special: tuple[bool, ...]
    scalars: tuple[object, ...]
    seed: int

    def describe(self, names: Sequence[str], scalars: Sequence[tuple[str, str | None]]) -> str:
        """The case in words; `scalars`: each scalar's name, and its source where the case evaluates it."""
        tensors = [
            f"{n}: {d} {tuple(s)}{'' if layout == 'contiguous' else f' {layout}'}"
            for n, s, d, layout in zip(names, self.shapes, self.dtypes, self.layouts)
        ]
        scalars = [f"{n}={source or repr(v)}" for (n, source), v in zip(scalars, self.scalars)]
        special = [n for n, flag in zip(names, self.special) if flag]
        return ", ".join(tensors + scalars) + (f", with NaN and infinities in {', '.join(special)}" if special else "")


@dataclass
class Verdict:
    kernel: str
    source: str  # the region's `path:lines`
    outcome: str = "not exercised"
    cases: int = 0  # drawn, and captured from runs
    ran: int = 0  # computed by the kernel
    captured: int = 0  # of `cases`: calls a run made (`--calls`)
    detail: str = ""  # the first difference, or why not exercised
    case: str = ""  # a different case, shrunk
    declined: Counter = field(default_factory=Counter)  # why the kernel declined, by reason


def verify(
    out: Path,
    cases: int = 12,
    seed: int = 0,
    device: str = "cpu",
    gradients: bool = True,
    nonfinite: bool = False,
    calls: Path | None = None,
) -> list[Verdict]:
    """The verdict of every forward kernel of the output tree `out` (see the module's docstring); `nonfinite`: also
    cases with NaN and infinities among the inputs' values; `calls`: a directory of calls runs captured
    (`TRANSPILE_CAPTURE_CALLS`), each a case of its kernel, before the drawn ones."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise VerifyError("--device cuda: no CUDA device")
    paths = _kernel_modules(out)
    regions = _regions(out)
    captured = _captured(calls) if calls is not None else {}
    os.environ.setdefault("TRANSPILE_COMPILE", "sync")  # a Triton kernel compiled on first use, not declined
    verdicts = []
    for path in paths:
        module = _load(out, path)
        runtime = sys.modules["_transpile_runtime"]
        # A copy: running a kernel may add to its file's globals (an activation table's first lookup).
        for value in list(vars(module).values()):
            if isinstance(value, runtime.Kernel) and value.name in regions.get(path, {}):
                region = regions[path][value.name]
                calls_of = captured.get((path.relative_to(out).as_posix(), value.name), [])
                verdicts.append(_verify_kernel(value, region, cases, seed, device, gradients, nonfinite, calls_of))
    return verdicts


@dataclass(frozen=True)
class Captured:
    """A call a run made (emit/runtime/captures.py), as a case: its tensors and scalars as they were."""

    name: str  # the capture's file name
    args: tuple
    tensor_inputs: int
    seed: int = 0  # of the cotangents, for its gradients

    @property
    def full(self) -> tuple[int, ...]:
        import torch

        try:
            return tuple(torch.broadcast_shapes(*(t.shape for t in self.args[: self.tensor_inputs])))
        except RuntimeError:  # shapes that do not broadcast: eager raises, and the kernel must too
            return max((tuple(t.shape) for t in self.args[: self.tensor_inputs]), key=len, default=())

    @property
    def special(self) -> tuple[bool, ...]:
        """Per tensor, whether it holds NaN or infinities."""
        import torch

        tensors = self.args[: self.tensor_inputs]
        return tuple(bool(t.is_floating_point() and not torch.isfinite(t).all()) for t in tensors)


def _captured(directory: Path) -> dict[tuple[str, str], list[Captured]]:
    """The captures in `directory`, by (kernel file relative to the tree, kernel name); VerifyError for one that
    cannot be read, naming it."""
    import torch

    if not directory.is_dir():
        raise VerifyError(f"--calls {directory}: not a directory")
    found: dict[tuple[str, str], list[Captured]] = {}
    for path in sorted(directory.glob("*.pt")):
        try:
            # The captures' activation modules are objects: loading imports their classes (the user's own run).
            record = torch.load(path, map_location="cpu", weights_only=False)
            key = (record["file"], record["kernel"])
            case = Captured(path.name, tuple(record["args"]), int(record["tensor_inputs"]), len(found.get(key, ())))
        except Exception as error:
            raise VerifyError(f"{path}: not a captured call ({type(error).__name__}: {error})") from error
        found.setdefault(key, []).append(case)
    return found


def _kernel_modules(out: Path) -> list[Path]:
    """The kernel files the build wrote into `out` (from its manifest; NotBuilt without one)."""
    from transpiler.pipeline.build import built_files

    return [
        out / rel for rel in sorted(built_files(out)) if Path(rel).name.startswith("_") and rel.endswith("_kernels.py")
    ]


def _regions(out: Path) -> dict[Path, dict[str, dict]]:
    """Per kernel file, the regions of its module by kernel name, from the build's report."""
    from transpiler.pipeline.report import REPORT_JSON

    try:
        report = json.loads((out / REPORT_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise VerifyError(f"{out} has no readable report ({REPORT_JSON}): build it first") from error
    root = Path(report["output"])
    found: dict[Path, dict[str, dict]] = {}
    for entry in report["files"]:
        for kernel_file in entry["kernel_files"]:
            if kernel_file.endswith("_kernels.py"):
                path = out / Path(kernel_file).relative_to(root)
                found[path] = {region["name"]: region for region in entry["regions"]}
    return found


def _load(out: Path, path: Path):
    """The kernel file as a module of its own; its runtime is the tree's, imported with `out` on sys.path (another
    tree's, imported before, is forgotten first)."""
    root = out.resolve()
    loaded = sys.modules.get("_transpile_runtime")
    if loaded is not None and not Path(loaded.__file__).resolve().is_relative_to(root):
        for name in [n for n in sys.modules if n == "_transpile_runtime" or n.startswith("_transpile_runtime.")]:
            del sys.modules[name]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    name = "_transpile_verify_" + "_".join(path.relative_to(out).with_suffix("").parts)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- drawing cases --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Inputs:
    """What the region says of its inputs: tensor names in the kernel's order, which are read as conditions,
    the scalars with how each is drawn, and the region's op count and whether it reduces."""

    tensors: tuple[str, ...]
    bools: frozenset[str]
    # (name, source, role): "number", "positive" (a constant operand), "module", "dim" or "keepdim"
    scalars: tuple[tuple[str, str, str], ...]
    ops: int
    reduces: bool  # a row kernel: the bound allows for a reduction's rounding over the longest dim, as the fuzzer's
    # What the transpiled module checks before it calls the kernel (`x.shape[-1] % 2 == 0`, `not self.bn.training`),
    # in the source's names, and the source of each tensor input (`self.bn.running_mean`).
    conditions: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    # Tensor inputs (positions) of one value per element of the last dim: a layer norm's weight and bias.
    last_dim: frozenset[int] = frozenset()
    # Tensor inputs of one value per channel, viewed to broadcast along dim 1: a batch norm's statistics.
    channels: frozenset[str] = frozenset()
    # The region converts values to an integer dtype: NaN and infinities are not drawn (their conversion is
    # undefined in C++, and torch's result is the CPU's: INT64_MIN on x86).
    to_integers: bool = False


def _inputs_of(region: dict) -> _Inputs:
    roles: dict[str, str] = {}
    bools: set[str] = set()
    channels: set[str] = set()
    for node in region["nodes"]:
        op = BY_NAME.get(node["op"])
        if op in CHANNEL_OPS:  # operands 1-4: the statistics and the affine parameters
            channels.update(node["operands"][1:5])
        for position, operand in enumerate(node["operands"]):
            if op is None or position in node["constants"]:
                continue
            if op.name == ACTIVATION.name and position == 1:
                roles[operand] = "module"
            elif position == op.dim_operand:
                roles.setdefault(operand, "dim")
            elif position == op.keepdim_operand:
                roles.setdefault(operand, "keepdim")
            elif position in op.constant_operands:  # a norm's epsilon, a clamp's bound: a positive number will do
                roles.setdefault(operand, "positive")
            else:
                roles.setdefault(operand, "number")
            if position in op.bool_operands or (op.domain == Domain.BOOL and position not in op.constant_operands):
                bools.add(operand)
    tensors = tuple(i["name"] for i in region["inputs"] if i["is_tensor"])
    scalars = tuple(
        (i["name"], i["source"], roles.get(i["name"], "number")) for i in region["inputs"] if not i["is_tensor"]
    )
    bools = frozenset(bools & set(tensors))
    sources = tuple(i["source"] for i in region["inputs"] if i["is_tensor"])
    return _Inputs(
        tensors,
        bools,
        scalars,
        len(region["nodes"]),
        False,
        tuple(region["conditions"]),
        sources,
        channels=frozenset(channels & set(tensors)),
        to_integers=any(
            n["op"] == CAST.name and str(n["operands"][1]) not in FLOATING + ("bool",) for n in region["nodes"]
        ),
    )


def _draw(inputs: _Inputs, rng: random.Random, nonfinite: bool) -> Spec:
    # A rank the caller requires (`x.dim() == 4`, a batch norm's), else any.
    ranks = [int(m) for c in inputs.conditions for m in re.findall(r"\.dim\(\) == (\d)", c)]
    rank = ranks[0] if ranks else rng.choice((1, 2, 2, 3, 3, 4))
    full = tuple(rng.choice(SIZES) for _ in range(rank))
    shapes = []
    for position, _ in enumerate(inputs.tensors):
        shape = list(full)
        if position in inputs.last_dim and rng.random() < 0.8:
            shape = full[-1:]
        elif inputs.tensors[position] in inputs.channels and rank >= 2:  # as the caller views them, always
            shape = (full[1], *(1,) * (rank - 2))
        elif rng.random() < 0.4:  # broadcast: some dims 1, or leading dims dropped
            shape = [1 if rng.random() < 0.3 else s for s in shape][
                rng.randrange(len(shape)) if rng.random() < 0.3 else 0 :
            ]
        shapes.append(tuple(shape))
    dtype = rng.choices([d for d, _ in DTYPE_WEIGHTS], [w for _, w in DTYPE_WEIGHTS])[0]
    # One floating dtype for all: with float32 weights beside bfloat16 activations, a result rounded to float32
    # after bfloat16 steps, the judge allows float32's rounding only, where a bfloat16 step one ulp apart (a libm
    # and a vectorised exp differing in float32's last bit) moves it by bfloat16's.
    dtypes = ["bool" if name in inputs.bools else dtype for name in inputs.tensors]
    scalars = []
    for _, _, role in inputs.scalars:
        if role == "module":
            scalars.append(rng.choice(ACTIVATIONS))
        elif role == "dim":  # out of range for the rank at times: eager raises, and the kernel must not compute
            scalars.append(rng.choice((-1, -1, 0, 1, -2)))
        elif role == "keepdim":
            scalars.append(rng.random() < 0.5)
        else:
            scalars.append(rng.choice([n for n in NUMBERS if n > 0 or role == "number"]))
    layouts = tuple(rng.choice(LAYOUTS) for _ in inputs.tensors)
    special = rng.random() < 0.2 and nonfinite and not inputs.to_integers
    specials = tuple(special and not source.startswith("self.") for source in inputs.sources)
    return Spec(full, tuple(shapes), tuple(dtypes), layouts, specials, tuple(scalars), rng.randrange(2**31))


def _tensors(spec: Spec | Captured, device: str, widen: str = ""):
    """The case's tensor inputs; `widen`: "wide" float32 ones in float64, "exact" every floating one."""
    import torch

    if isinstance(spec, Captured):
        made = []
        for tensor in spec.args[: spec.tensor_inputs]:
            wanted = tensor.dtype
            if (widen == "wide" and wanted == torch.float32) or (widen == "exact" and wanted.is_floating_point):
                wanted = torch.float64
            made.append(tensor.to(device=device, dtype=wanted, copy=True))  # dense tensors keep their strides
        return made
    generator = torch.Generator().manual_seed(spec.seed)
    made = []
    for shape, dtype, layout, special in zip(spec.shapes, spec.dtypes, spec.layouts, spec.special):
        base = torch.randn(shape, generator=generator, dtype=torch.float64) * 2
        if special and base.numel():
            flat = base.view(-1)
            # Distinct places: a write of several values to one place keeps any of them (index_put's threads).
            picks = torch.randperm(flat.numel(), generator=generator)[: max(1, flat.numel() // 8)]
            flat[picks] = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0], dtype=torch.float64)[
                torch.arange(len(picks)) % 4
            ]
        wanted = getattr(torch, dtype)
        if (widen == "wide" and wanted == torch.float32) or (widen == "exact" and wanted.is_floating_point):
            wanted = torch.float64
        value = (base > 0) if dtype == "bool" else base.to(wanted)
        made.append(_laid_out(value.to(device), layout))
    return made


def _laid_out(tensor, layout: str):
    """`tensor`'s values in `layout`: the same values, other strides (or a storage offset)."""
    import torch

    if layout == "transposed" and tensor.dim() >= 2:
        return tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "strided" and tensor.dim() >= 1:
        wide = torch.zeros((*tensor.shape[:-1], tensor.shape[-1] * 2), dtype=tensor.dtype, device=tensor.device)
        wide[..., ::2] = tensor
        return wide[..., ::2]
    if layout == "broadcast" and any(s > 1 for s in tensor.shape):  # a dim of stride 0, as `expand` gives
        dim = next(d for d, s in enumerate(tensor.shape) if s > 1)
        return tensor.narrow(dim, 0, 1).expand(tensor.shape)
    if layout == "offset":
        storage = torch.zeros(tensor.numel() + 1, dtype=tensor.dtype, device=tensor.device)
        storage[1:] = tensor.reshape(-1)
        return storage[1:].view(tensor.shape)
    return tensor.contiguous()


def _scalars(spec: Spec | Captured, inputs: _Inputs, tensors: list) -> list:
    """The case's scalars: a source naming only the region's tensors is evaluated on them (`q.shape[-1] // 2`),
    as the transpiled module computes it; the others are the spec's."""
    import torch

    if isinstance(spec, Captured):
        return list(spec.args[spec.tensor_inputs :])
    names = dict(zip(inputs.tensors, tensors))
    values = []
    for (_, source, role), drawn in zip(inputs.scalars, spec.scalars):
        try:
            values.append(
                eval(source, {"__builtins__": {}, "torch": torch}, dict(names))
            )  # noqa: S307 (the tree's own source)
            continue
        except Exception:  # names `self.eps`, or anything else: drawn
            pass
        values.append(getattr(torch.nn, drawn)() if role == "module" else drawn)
    return values


# -- running and judging --------------------------------------------------------------------------------
def _verify_kernel(
    kernel,
    region: dict,
    cases: int,
    seed: int,
    device: str,
    gradients: bool,
    nonfinite: bool,
    calls: Sequence[Captured] = (),
) -> Verdict:
    inputs = _inputs_of(region)
    affine = {name for step in kernel.shapes.steps if step.affine for name in step.reads[1:]}
    last_dim = frozenset(n for n, name in enumerate(kernel.shapes.inputs) if name in affine)
    inputs = dataclasses.replace(inputs, last_dim=last_dim, reduces=kernel.rows is not None)
    verdict = Verdict(kernel.name, region["location"])
    rng = random.Random(f"{seed}:{kernel.name}:{region['location']}")
    worst = "equal"
    for spec in _cases(calls, inputs, verdict, cases, rng, nonfinite):
        verdict.cases += 1
        verdict.captured += isinstance(spec, Captured)
        outcome, detail = _case(kernel, spec, inputs, device, gradients, verdict.declined)
        if outcome is None:
            continue
        verdict.ran += 1
        if outcome == "different":
            verdict.outcome = "different"
            if isinstance(spec, Captured):
                verdict.detail, verdict.case = detail, f"the captured call {spec.name}"
                return verdict
            spec = _shrunk(kernel, spec, inputs, device, gradients)
            _, verdict.detail = _case(kernel, spec, inputs, device, gradients, Counter())
            evaluated = [(name, source if _names_only(source, inputs) else None) for name, source, _ in inputs.scalars]
            verdict.case = spec.describe(inputs.tensors, evaluated)
            return verdict
        if outcome == "within tolerance":
            worst = outcome
    if verdict.ran:
        verdict.outcome = worst
    else:
        reasons = verdict.declined.most_common(1)
        verdict.detail = f"the kernel declined every case: {reasons[0][0]}" if reasons else "no case was drawn"
    return verdict


def _cases(calls: Sequence[Captured], inputs: _Inputs, verdict: Verdict, cases: int, rng, nonfinite: bool):
    """A run's captured calls first (a difference there is one a model meets), then drawn cases until `cases` of
    them were computed (read from `verdict` as the caller judges them), drawing at most ATTEMPTS_PER_CASE times
    as many."""
    yield from calls
    computed, drawn = verdict.ran, 0
    while verdict.ran - computed < cases and drawn < cases * ATTEMPTS_PER_CASE:
        drawn += 1
        yield _draw(inputs, rng, nonfinite)


def _conditions(inputs: _Inputs, tensors: list, scalars: list) -> dict[str, bool | None]:
    """Each of the caller's conditions on this case: True, False, or None where it reads what verify does not
    have (`self.bn.num_features`). The inputs are bound under their sources' names, `self.bn.running_mean`
    as an attribute of a stand-in `self`."""
    import types

    import torch

    names: dict[str, object] = {"torch": torch}
    given = [*zip(inputs.sources, tensors), *((source, v) for (_, source, _), v in zip(inputs.scalars, scalars))]
    for source, value in given:
        *owners, last = source.split(".")
        if not all(part.isidentifier() for part in (*owners, last)):
            continue  # an expression (`q.shape[-1] // 2`), not a name
        scope = names
        for owner in owners:
            scope = vars(scope.setdefault(owner, types.SimpleNamespace())) if isinstance(scope, dict) else scope
        scope[last] = value
    held = {}
    for condition in inputs.conditions:
        try:
            held[condition] = bool(eval(condition, {"__builtins__": {}}, names))  # noqa: S307 (the tree's own source)
        except Exception:
            held[condition] = None
    return held


def _names_only(source: str, inputs: _Inputs) -> bool:
    """Whether `source` reads nothing but the region's tensors (and torch): evaluated on each case."""
    import ast

    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError:
        return False
    return all(n.id in inputs.tensors or n.id == "torch" for n in ast.walk(tree) if isinstance(n, ast.Name))


def _case(kernel, spec: Spec | Captured, inputs: _Inputs, device: str, gradients: bool, declined: Counter):
    """(outcome, detail) of one case: None where the kernel declined it (its reason counted in `declined`)."""
    from transpiler.pipeline import comparing

    eager_in, ours_in = _tensors(spec, device), _tensors(spec, device)
    scalars = _scalars(spec, inputs, eager_in)
    # A captured call was made by the transpiled module: its caller's conditions held.
    held = {} if isinstance(spec, Captured) else _conditions(inputs, eager_in, scalars)
    if False in held.values():  # the transpiled module runs the original code without calling the kernel
        failed = next(c for c, value in held.items() if value is False)
        declined[f"the caller's condition `{failed}` does not hold"] += 1
        return None, ""
    n = len(kernel.shapes.outputs)
    before = Counter(kernel.counts)
    with comparing.Narrowest() as narrowest:
        expected, eager_error = _call(kernel.reference, eager_in, scalars, n)
    actual, error = _call(kernel, ours_in, scalars, n)
    if actual is None and error is None:  # declined: the transpiled module runs the reference
        reasons = Counter(kernel.counts) - before
        declined.update(reasons.keys() or ["no reason counted"])
        return None, ""
    if eager_error and None in held.values():  # a condition verify cannot evaluate may be what rules the case out
        unknown = next(c for c, value in held.items() if value is None)
        declined[f"eager raises, and the caller's condition `{unknown}` is not known here"] += 1
        return None, ""
    raised = comparing.error_outcome(eager_error, error)
    if raised:
        return ("equal", "") if raised[0] == "ok" else ("different", raised[1])
    wide, _ = _call(kernel.reference, (wide_in := _tensors(spec, device, "wide")), _scalars(spec, inputs, wide_in), n)
    exact, _ = _call(
        kernel.reference, (exact_in := _tensors(spec, device, "exact")), _scalars(spec, inputs, exact_in), n
    )
    length = max(spec.full, default=1) if inputs.reduces else 1
    names = inputs.tensors
    mismatch = comparing.outputs_mismatch(
        names, inputs.ops, length, actual, expected, wide, exact, narrowest.dtype, eager_in, ours_in
    ) or comparing.inputs_mismatch(
        names, inputs.ops, length, eager_in, ours_in, wide_in if wide else None, exact_in if exact else None
    )
    if mismatch:
        return "different", f"{mismatch[0]}: {mismatch[1]}"
    # Gradients on finite inputs only: with an infinite one, a gradient summed over a broadcast dim is NaN or
    # infinite by the order of the sum and the product (eager's add backward sums the cotangents first, the
    # kernel multiplies each by the infinity), one expression of exact arithmetic either way.
    if gradients and kernel.gradients is not None and not any(spec.special):
        mismatch = _gradients_mismatch(kernel, spec, inputs, device, n, length)
        if mismatch:
            return "different", mismatch
    same = all(_identical(a, e) for a, e in zip(actual, expected))
    return ("equal" if same else "within tolerance"), ""


def _identical(a, e) -> bool:
    """Bit for bit, NaN where eager has NaN (and infinities of its signs) included."""
    import torch

    if not a.is_floating_point():
        return torch.equal(a, e)
    return torch.equal(a.isnan(), e.isnan()) and torch.equal(a.nan_to_num(0.0), e.nan_to_num(0.0))


def _call(function, tensors, scalars, n: int):
    """(the first `n` outputs, None), (None, None) where a kernel declined, or (None, the error's type name)."""
    import torch

    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = function(*tensors, *scalars)
    except Exception as error:  # whatever eager raises, the kernel must raise too, or decline
        return None, type(error).__name__
    return (None if result is None else tuple(result)[:n]), None


def _gradients_mismatch(kernel, spec: Spec | Captured, inputs: _Inputs, device: str, n: int, length: int) -> str | None:
    """Under autograd, each floating input's gradient from the kernel's backward against eager's, for the same
    cotangents; None where they agree (or the kernel declined)."""
    import torch

    from transpiler.pipeline import comparing

    def graded(function, widen: str):
        tensors = [t.detach().requires_grad_(t.is_floating_point()) for t in _tensors(spec, device, widen)]
        scalars = _scalars(spec, inputs, tensors)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                outputs = function(*tensors, *scalars)
            except Exception:
                return None
            if outputs is None:
                return None
            outputs = tuple(outputs)[:n]
            pairs = [(o, _cotangent(spec.seed, k, o)) for k, o in enumerate(outputs) if o.requires_grad]
            if pairs:
                torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])
        return [t.grad for t in tensors]

    with comparing.Narrowest() as narrowest:  # eager's rounding, forward and backward
        expected = graded(kernel.reference, "")
    actual = graded(kernel, "")
    if expected is None or actual is None:
        return None
    wide, exact = graded(kernel.reference, "wide"), graded(kernel.reference, "exact")
    for k, (name, e, a) in enumerate(zip(inputs.tensors, expected, actual)):
        if (e is None) != (a is None):
            return f"gradient: {name}.grad is {'None' if e is None else 'set'} in eager, not in the kernel's backward"
        if e is None:
            continue
        if a.shape != e.shape or a.dtype != e.dtype:
            return (
                f"gradient: {name}.grad {tuple(e.shape)} {e.dtype} in eager, {tuple(a.shape)} {a.dtype} from the kernel"
            )
        mismatch = comparing.value_mismatch(
            a, e, wide[k] if wide else None, 3 * inputs.ops, length, narrowest.dtype, exact[k] if exact else None
        )
        if mismatch:
            return f"gradient of {name}: {mismatch}"
    return None


def _cotangent(seed: int, k: int, output):
    import torch

    generator = torch.Generator().manual_seed(seed * 16 + k)
    return torch.randn(output.shape, generator=generator, dtype=torch.float64).to(output.dtype).to(output.device)


def _shrunk(kernel, spec: Spec, inputs: _Inputs, device: str, gradients: bool) -> Spec:
    """`spec` made simpler while the kernel stays different on it: normal values, contiguous float32 inputs,
    smaller dims."""
    changed = True
    while changed:
        changed = False
        for smaller in _simpler(spec):
            if _case(kernel, smaller, inputs, device, gradients, Counter())[0] == "different":
                spec, changed = smaller, True
                break
    return spec


def _simpler(spec: Spec) -> list[Spec]:
    out = []
    if any(spec.special):
        out.append(dataclasses.replace(spec, special=(False,) * len(spec.special)))
    for k, layout in enumerate(spec.layouts):
        if layout != "contiguous":
            out.append(dataclasses.replace(spec, layouts=(*spec.layouts[:k], "contiguous", *spec.layouts[k + 1 :])))
    if any(d in FLOATING and d != "float32" for d in spec.dtypes):
        out.append(dataclasses.replace(spec, dtypes=tuple("float32" if d in FLOATING else d for d in spec.dtypes)))
    for dim, size in enumerate(spec.full):
        if size > 1:
            smaller = max(1, size // 2) if size > 2 else 1
            full = (*spec.full[:dim], smaller, *spec.full[dim + 1 :])
            shapes = tuple(_resized(s, spec.full, dim, smaller) for s in spec.shapes)
            out.append(dataclasses.replace(spec, full=full, shapes=shapes))
    return out


def _resized(shape: tuple[int, ...], full: tuple[int, ...], dim: int, size: int) -> tuple[int, ...]:
    """`shape` (broadcast to `full`, aligned at the end) with `full`'s dim `dim` resized to `size`."""
    at = dim - (len(full) - len(shape))
    if at < 0 or shape[at] == 1:
        return shape
    return (*shape[:at], size, *shape[at + 1 :])


# -- the report -----------------------------------------------------------------------------------------
def render(verdicts: list[Verdict], fmt: str = "text") -> str:
    if fmt == "json":
        records = [{k: v for k, v in dataclasses.asdict(v).items() if k != "declined"} for v in verdicts]
        return json.dumps({"kernels": records, "counts": _counts(verdicts)}, indent=1) + "\n"
    lines = []
    for v in verdicts:
        runs = f", {v.captured} captured from runs" if v.captured else ""
        line = f"{v.source}: {v.kernel}: {v.outcome} ({v.ran} of {v.cases} cases computed{runs})"
        if v.detail:
            line += f"\n    {v.detail}"
        if v.case:
            line += f"\n    shrunk case: {v.case}"
        lines.append(line)
    counts = _counts(verdicts)
    lines.append(f"{len(verdicts)} kernels: " + ", ".join(f"{counts[o]} {o}" for o in OUTCOMES))
    return "\n".join(lines) + "\n"


def _counts(verdicts: list[Verdict]) -> dict[str, int]:
    counts = Counter(v.outcome for v in verdicts)
    return {outcome: counts[outcome] for outcome in OUTCOMES}
