"""Dynamo's graph breaks in the transformers families, before and after `transpile`, and the lint against them.

    nice python benchmarks/break_families.py [--families bert,mixtral] [--every N] [--limit N] [--jobs 1] [--before-only]
                                             [--timeout 300] [--kernels] [--share] [--json out.json] [--markdown out.md]
                                             [--tools ../shared/tools]
    python benchmarks/break_families.py --from-json out.json [--markdown out.md]   # the report of a saved run

For each family that `hf_families.py` (the shared tool that builds a tiny random model of a
transformers family and its inputs; `--tools` says where it is, it is imported from there) can
build, a child process (own interpreter, `--timeout` seconds)

1. builds the tiny model from the installed transformers code and runs it eagerly twice
   (`torch.manual_seed(hff.SEED)` before each forward; two runs that differ mark the family
   `nondeterministic`), recording which lines of the family's folder the forward executed;
2. runs `torch._dynamo.explain` on it (after `torch._dynamo.reset()`, under `no_grad`, the same
   inputs) with Dynamo's `graph_breaks` log on, and keeps three counts (they differ, so all three
   are reported):
   - `statements`: the distinct statements of the family's code where a logged break happened
     (the site, below) -- the headline figure, comparable to "lines where Dynamo breaks";
   - `logged`: the breaks of the log, one record per break Dynamo hit, those that make it skip
     the rest of a frame (a break in a loop, a `try`, a user context manager) included, and
     the same site again when Dynamo traces it again (a layer, a restart, a recompile);
   - `explain`: explain's `graph_break_count`, which misses the breaks of a frame Dynamo then
     skips (the smoke test's toy: 4 logged, 0 in explain's count); and Dynamo's own
     `graph_break` counter (`counter` in the JSON);
3. runs `transpile lint --format json` on the family's folder (the rules users get by default);
4. for each of `default` (`transpile build DIR -o OUT`) and `unsafe` (the same with
   `--unsafe-fixes`): transpiles the family's folder, imports the output's modeling file,
   builds the same class with the original's config object and seed (`hff.tiny_model(family,
   module=...)`), runs it on the same inputs and compares every output tensor with the
   original's (`equal`: bit for bit; `within tolerance`: `hff.compare_outputs`, rtol 1e-4,
   atol 1e-5, or as accurate as the original against the original run in float64, see
   `hf_families_check._as_accurate`; `different` otherwise), then explains it as in 2.
   A file the build leaves unchanged is an alias of the original module in the output, so a
   break's site may lie in the original folder.

`--no-kernels` is passed to `transpile build` unless `--kernels` is given: the emitted kernels
run only when `not torch.compiler.is_compiling()` (emit/host), so Dynamo traces the eager
reference either way; `--kernels` measures the default output tree itself (a C++ build per
family: much slower).

`--share` also measures, for the original and each version, the share of one forward's aten ops
that ran inside Dynamo's graphs (`benchmarks/isolation.py`'s `graph_share`: a counting backend,
second compiled call): the break counts say where Dynamo stopped, this says how much it compiled
(an isolated break adds break sites and can still put more of the forward in graphs).

Categories: each logged break is sorted by Dynamo's graph-break code (the first `gbNNNN` of
its reason: the cause) into issue 18's categories (`graph_breaks.CATEGORIES`; a code outside
them keeps its own `Gb_type`, as `other: GBNNNN <Gb_type>`); a break after which Dynamo skipped
the frame is marked `(frame skipped)`.

Lint against Dynamo (only for the original code, on the statements the forward executed):

- A break's *site* is the innermost frame of its user stack that lies in the family's folder
  (a break inside library code counts at the family's call into it; a break with no frame in
  the family's folder is `outside the family`, left out of both figures). A *break statement*
  is the statement holding a site.
- A line's *statement* is the innermost `ast` statement whose header holds it: a simple
  statement spans all its lines; a compound one (`if`, `for`, `with`, `def`, ...) spans from
  its first line to the line before its body. Findings and breaks are compared by statement,
  so a multi-line call matches whichever of its lines either side names.
- *Finding statements*: statements with a finding of a rule of the `break` family (the
  `Rule.family` of the registry; recompile / performance rules make no break claim) that the
  eager forward executed (findings elsewhere are counted as `unexecuted`). A finding statement
  that is no break statement, in a function where Dynamo logged a break that skipped the frame,
  is `shadowed`: Dynamo never traced the rest of that frame, so it can be neither confirmed nor
  refuted; shadowed statements are left out of precision and counted.
- precision = |finding statements that are break statements| / |finding statements|;
  recall = |break statements that are finding statements| / |break statements|.
  Totals sum the numerators and denominators over the families (not an average of ratios).

Families that fail to build or run (original or transpiled) are listed with the stage and
the error; they never stop the run, and a version that did not run under Dynamo is never
counted as fixed: the totals are over the families whose three versions all ran. Prints a
markdown report (also written to `--markdown`) and writes every family's row to `--json`.
"""

from __future__ import annotations

import argparse
import ast
import collections
import concurrent.futures
import contextlib
import copy
import functools
import importlib
import io
import json
import linecache
import logging
import os
import platform
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TOOLS = ROOT.parent / "shared" / "tools"
VERSIONS = ("default", "unsafe")  # what `transpile build` is given besides the defaults
FLAGS = {"default": [], "unsafe": ["--unsafe-fixes"]}
LOOP = "GB7000"  # Dynamo skips a frame that breaks inside a loop


# --------------------------------------------------------------------------- child: one family


def _benchmarks() -> tuple[Any, Any]:
    """graph_breaks (categories, quiet) and hf_families_check (float64 judge), siblings of this file."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import graph_breaks
    import hf_families_check

    return graph_breaks, hf_families_check


def measure_family(
    family: str, tools: Path, work: Path, kernels: bool, versions: tuple[str, ...] = VERSIONS, share: bool = False
) -> dict:
    """Everything about one family, in this process (the transpiled `versions` only). A JSON-able row."""
    sys.path.insert(0, str(tools))
    import hf_families as hff
    import torch

    graph_breaks, _ = _benchmarks()
    hff._quiet()
    torch.set_num_threads(1)
    row: dict = {"family": family}
    folder = Path(hff.models_root()) / family
    try:
        original, inputs = hff.tiny_model(family)
        with graph_breaks.quiet():
            executed, first = _executed_lines(functools.partial(_forward, hff, original, inputs), folder)
            expected = _forward(hff, original, inputs)
    except Exception as error:
        return {**row, "status": "error", "stage": "original", "error": _short(error)}
    row["model_class"] = type(original).__name__
    row["nondeterministic"] = not hff.compare_outputs(first, expected, atol=0, rtol=0)[0]
    state = {name: value.clone() for name, value in original.state_dict().items()}  # what `expected` ran with
    row["before"] = explain(original, inputs, [folder])
    if share:
        row["before"]["share"] = graph_share(hff, original, inputs)
    row["lint"] = lint_against_dynamo(folder, row["before"], executed)
    for version in versions:
        row[version] = transpiled(hff, family, folder, work, version, kernels, expected, state, share)
    done = all(row[v].get("error") is None for v in ("before", *versions))
    row["status"] = ("ok" if versions == VERSIONS else "screened") if done else "error"
    if not done:
        row["stage"], row["error"] = next((v, row[v]["error"]) for v in ("before", *versions) if row[v].get("error"))
    return row


def _forward(hff: Any, model: Any, inputs: dict) -> Any:
    import torch

    torch.manual_seed(hff.SEED)  # models that draw random numbers in forward draw the same ones
    return hff.run_forward(model, inputs)


def _executed_lines(call: Any, folder: Path) -> tuple[dict[str, set[int]], Any]:
    """The lines of files under `folder` that `call()` executed, and its result (sys.settrace, other files untraced)."""
    prefix = str(folder) + os.sep
    lines: dict[str, set[int]] = collections.defaultdict(set)

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            lines[frame.f_code.co_filename].add(frame.f_lineno)
        return local

    def calls(frame: Any, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code.co_filename.startswith(prefix):
            lines[frame.f_code.co_filename].add(frame.f_lineno)
            return local
        return None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        result = call()
    finally:
        sys.settrace(previous)
    return dict(lines), result


def graph_share(hff: Any, model: Any, inputs: dict) -> dict:
    """How much of one forward ran inside Dynamo's graphs (`isolation.graph_share`, under `no_grad`)."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import isolation

    try:
        with _graph_break_log(), torch.no_grad():
            torch.manual_seed(hff.SEED)
            measured = isolation.graph_share(model, **copy.deepcopy(inputs))
    except Exception as error:
        return {"error": _short(error)}
    return {"in_graphs": measured.in_graphs, "ops": measured.ops, "graphs": measured.graphs}


def explain(model: Any, inputs: dict, folders: list[Path], args: tuple = ()) -> dict:
    """Dynamo's graphs and breaks of one forward (`model(*args, **inputs)`, the model the frame Dynamo starts
    from, as `torch.compile(model)` has it): explain's counts, the graph_break counter, and every break logged."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    graph_breaks, _ = _benchmarks()
    began = time.monotonic()
    try:
        with _graph_break_log() as messages, contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
            torch._dynamo.reset()
            counters.clear()
            torch.manual_seed(0)
            explained = torch._dynamo.explain(model)(*copy.deepcopy(args), **copy.deepcopy(inputs))
            counted = sum(counters["graph_break"].values())
    except Exception as error:
        return {"error": _short(error), "seconds": round(time.monotonic() - began, 1)}
    finally:
        torch._dynamo.reset()
    detail = logged_breaks(messages, folders)
    return {
        "graphs": explained.graph_count,
        "breaks": explained.graph_break_count,
        "reasons": len(explained.break_reasons),
        "counter": counted,
        "logged": len(detail),
        "statements": len({(b["file"], b["statement"]) for b in detail if b["file"]}),
        "explain_categories": dict(
            collections.Counter(graph_breaks.category(r.reason) for r in explained.break_reasons)
        ),
        "detail": detail,
        "seconds": round(time.monotonic() - began, 1),
    }


@contextlib.contextmanager
def _graph_break_log() -> Iterator[list[str]]:
    """Dynamo's `graph_breaks` log (one record per break it hits, those that make it skip a frame included),
    collected instead of printed; transformers' and Python's warnings silenced."""
    import torch._logging

    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if not _tracing_stdlib():
                messages.append(record.getMessage())

    torch._logging.set_logs(graph_breaks=True)
    collect = Collect()
    logger = logging.getLogger("torch._dynamo")
    printing = [(h, h.level) for name in ("torch", "torch._dynamo") for h in logging.getLogger(name).handlers]
    for handler, _ in printing:
        handler.setLevel(logging.CRITICAL + 1)
    logger.addHandler(collect)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield messages
    finally:
        logger.removeHandler(collect)
        for handler, level in printing:
            handler.setLevel(level)
        torch._logging.set_logs()


def _tracing_stdlib() -> bool:
    """Whether the frame Dynamo is compiling is a standard-library function (`logging.Logger.debug`): code that
    runs eagerly (a frame Dynamo skipped) calls it, Dynamo tries to compile that call as a frame of its own and
    logs a break in it, with the eager caller's line on the stack. No graph of the model is split there."""
    from torch._dynamo.symbolic_convert import InstructionTranslator

    try:
        filename = InstructionTranslator.current_tx().f_code.co_filename
    except Exception:  # no translation under way, or another torch's internals: count the break
        return False
    return filename.startswith(_STDLIB) and "site-packages" not in filename


_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
_AT = re.compile(r"^Graph break.* in user code at (.+):(\d+)$", re.MULTILINE)
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)', re.MULTILINE)
_SKIPPED = re.compile(r"Skipping the (function|frame)|frame skipped")


def logged_breaks(messages: list[str], folders: list[Path]) -> list[dict]:
    """The breaks of Dynamo's graph_breaks log: code, category, and the site in the family's code.

    A break's site is the innermost frame of its user stack in one of `folders` (the transpiled
    tree, and the original folder its unchanged files alias); `via` is the innermost frame when
    it lies elsewhere (a library function the family calls). Dynamo logs a repeated break without
    its stack: it gets the stack of the first record at the same place."""
    graph_breaks, _ = _benchmarks()
    stacks: dict[tuple[str, int], list[tuple[str, int]]] = {}
    out = []
    for message in messages:
        at = _AT.search(message)
        if not at or not message.startswith("Graph break"):
            continue
        where = (at.group(1), int(at.group(2)))
        reason, _, traceback = message.partition("User code traceback:")
        reason = reason.partition("\n\n")[2] or reason  # from the Gb_type line on
        frames = [(f, int(n)) for f, n in _FRAME.findall(traceback)] or stacks.get(where) or [where]
        stacks.setdefault(where, frames)
        inside = [(f, n, folder) for f, n in frames for folder in folders if _inside(f, folder)]
        site = inside[-1] if inside else None
        skipped = bool(_SKIPPED.search(message))
        out.append(
            {
                "code": graph_breaks.break_code(reason),
                "category": graph_breaks.category(reason),
                "frame_skipped": skipped,
                "file": os.path.relpath(site[0], site[2]) if site else None,
                "line": site[1] if site else None,
                "statement": _statement(site[0], site[1]) if site else None,
                "text": linecache.getline(site[0], site[1]).strip() if site else None,
                "via": None if site and frames[-1] == site[:2] else f"{frames[-1][0]}:{frames[-1][1]}",
                "frames": [(os.path.relpath(f, folder), n) for f, n, folder in inside],  # outermost first
            }
        )
    return out


def _inside(filename: str, folder: Path) -> bool:
    return filename.startswith(str(folder) + os.sep)


def transpiled(
    hff: Any,
    family: str,
    folder: Path,
    work: Path,
    version: str,
    kernels: bool,
    expected: Any,
    state: dict,
    share: bool = False,
) -> dict:
    """`transpile build` of the family's folder with `version`'s flags; its outputs and its breaks.

    The model gets the original's `state_dict`: transformers initialises some weights differently when the
    same classes come from a copy of the package (GPT-2's scaled `c_proj` init; a verbatim copy, untranspiled,
    differs too), which is no effect of transpile; `init_differs` records where that happened."""
    from click.testing import CliRunner

    from transpiler.cli.main import main

    package = f"break_{version}_{family}"
    out = work / package / family
    flags = [*FLAGS[version], *([] if kernels else ["--no-kernels"])]
    began = time.monotonic()
    build = CliRunner().invoke(
        main, ["build", "--no-cache", "-j", "1", "--format", "json", *flags, str(folder), "-o", str(out)]
    )
    result: dict = {"transpile_s": round(time.monotonic() - began, 1)}
    if build.exit_code not in (0, 1):  # 1: findings left, kept as they were
        return {**result, "error": f"transpile: {_short(build.output or build.exception)}"}
    try:
        summary = json.loads(build.output[build.output.index("{") :])
        result["fixes"] = dict(collections.Counter(fix["code"] for fix in summary.get("fixes", [])))
        result["left"] = dict(collections.Counter(left["code"] for left in summary.get("left", [])))
    except ValueError:
        pass
    (work / package / "__init__.py").touch()
    if str(work) not in sys.path:
        sys.path.insert(0, str(work))
    stage = "import"
    try:
        module = importlib.import_module(f"{package}.{family}.{hff._modeling_files(family)[0][:-3]}")
        stage = "build"
        model, copied = hff.tiny_model(family, module=module)
        stage = "weights"
        own = model.state_dict()
        result["init_differs"] = own.keys() != state.keys() or any(not own[k].equal(state[k]) for k in state)
        model.load_state_dict(state)
        stage = "forward"
        actual = _forward(hff, model, copied)
    except Exception as error:
        return {**result, "error": f"{stage}: {_short(error)}"}
    result["output"], result["output_detail"] = _compare(hff, family, expected, actual)
    result.update(explain(model, copied, [out, folder]))
    if share:
        result["share"] = graph_share(hff, model, copied)
    return result


def _compare(hff: Any, family: str, expected: Any, actual: Any) -> tuple[str, str]:
    """equal (bit for bit) / within tolerance / different, with the detail."""
    if hff.compare_outputs(expected, actual, atol=0, rtol=0)[0]:
        return "equal", ""
    close, detail = hff.compare_outputs(expected, actual)
    if close:
        return "within tolerance", detail
    _, check = _benchmarks()
    rounding = check._as_accurate(hff, family, expected, actual)
    return ("within tolerance", f"{detail}; {rounding}") if rounding else ("different", detail)


# --------------------------------------------------------------------------- lint against Dynamo


@functools.lru_cache(maxsize=None)
def _owners(path: str) -> tuple[dict[int, int], dict[int, int]]:
    """Per line of a file: the first line of the innermost statement whose header holds it (a simple statement
    spans all its lines, a compound one its lines before its body), and of the innermost function holding it."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    spans, defs = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            body = getattr(node, "body", None)
            end = max(node.lineno, body[0].lineno - 1) if isinstance(body, list) and body else node.end_lineno
            spans.append((end - node.lineno, node.lineno, end))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs.append((node.end_lineno - node.lineno, node.lineno, node.end_lineno))
    owners: tuple[dict[int, int], dict[int, int]] = ({}, {})
    for owner, found in zip(owners, (spans, defs)):
        for _, first, end in sorted(found, reverse=True):  # widest first: inner ones overwrite
            for line in range(first, end + 1):
                owner[line] = first
    return owners


def _statement(path: str, line: int) -> int:
    try:
        return _owners(path)[0].get(line, line)
    except (OSError, SyntaxError, ValueError):
        return line


def _function(path: str, line: int) -> int:
    try:
        return _owners(path)[1].get(line, 0)
    except (OSError, SyntaxError, ValueError):
        return 0


def lint_against_dynamo(folder: Path, before: dict, executed: dict[str, set[int]]) -> dict:
    """Precision and recall of `transpile lint` on the family's folder against Dynamo's break statements."""
    if before.get("error"):
        return {"error": "Dynamo did not run on the original"}
    from click.testing import CliRunner

    import transpiler.pipeline.rules  # noqa: F401  (registers the rule packages)
    from transpiler.cli.main import main
    from transpiler.lint.rule import REGISTRY

    began = time.monotonic()
    result = CliRunner().invoke(main, ["lint", "--format", "json", "--no-cache", "-j", "1", "--exit-zero", str(folder)])
    seconds = round(time.monotonic() - began, 2)
    try:
        findings = json.loads(result.output[result.output.index("[") :])
    except ValueError:
        return {"error": f"lint: {_short(result.output or result.exception)}"}
    breaks = {(b["file"], b["statement"]) for b in before["detail"] if b["file"]}
    skipped = {_skipped_frame(folder, b) for b in before["detail"] if b["file"] and b["frame_skipped"]}
    ran = {(os.path.relpath(path, folder), _statement(path, n)) for path, lines in executed.items() for n in lines}
    claims: dict[tuple[str, int], set[str]] = collections.defaultdict(set)
    shadowed: set[tuple[str, int]] = set()
    unexecuted = 0
    for finding in findings:
        rule = REGISTRY.get(finding["code"])
        if rule is None or rule.family != "break" or not _inside(finding["path"], folder):
            continue
        key = (os.path.relpath(finding["path"], folder), _statement(finding["path"], finding["line"]))
        if key not in ran:
            unexecuted += 1
        elif key not in breaks and (key[0], _function(finding["path"], finding["line"])) in skipped:
            shadowed.add(key)
        else:
            claims[key].add(finding["code"])
    hits = breaks & set(claims)
    own = {(b["file"], b["statement"]) for b in before["detail"] if b["file"] and b["via"] is None}
    return {
        "seconds": seconds,
        "break_statements": len(breaks),
        "outside_family": sum(1 for b in before["detail"] if not b["file"]),
        "finding_statements": len(claims),
        "true_positives": len(hits),
        "shadowed": len(shadowed),
        "unexecuted_findings": unexecuted,
        "precision": round(len(hits) / len(claims), 3) if claims else None,
        "recall": round(len(hits) / len(breaks), 3) if breaks else None,
        # statements where the break is the family's own code, not a library function it calls
        "own_break_statements": len(own),
        "own_true_positives": len(hits & own),
        "false_positives": sorted(
            f"{f}:{n} {','.join(sorted(c))}" for (f, n), c in claims.items() if (f, n) not in hits
        ),
        "missed": sorted(f"{f}:{n} {_categories_at(before, f, n)}" for f, n in breaks - hits),
    }


def _skipped_frame(folder: Path, b: dict) -> tuple[str, int]:
    """The function whose frame Dynamo skipped for the break `b`: the innermost frame of the family's code on
    its stack that is inside a loop there (a break in a helper called in a loop skips the caller's frame)."""
    for file, line in reversed(b.get("frames") or [(b["file"], b["line"])]):
        if _in_loop(str(folder / file), line):
            return file, _function(str(folder / file), line)
    return b["file"], _function(str(folder / b["file"]), b["line"])


@functools.lru_cache(maxsize=None)
def _loops(path: str) -> tuple[tuple[int, int, int], ...]:
    """(first line, last line, first line of the function holding it) of every `for`/`while` of a file."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return ()
    loops = (n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While)))
    return tuple((n.lineno, n.end_lineno, _function(path, n.lineno)) for n in loops)


def _in_loop(path: str, line: int) -> bool:
    function = _function(path, line)
    return any(first <= line <= last and owner == function for first, last, owner in _loops(path))


def _categories_at(run: dict, file: str, statement: int) -> str:
    return ",".join(sorted({b["category"] for b in run["detail"] if (b["file"], b["statement"]) == (file, statement)}))


def _short(error: object, n: int = 300) -> str:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return " ".join(str(text).split())[:n]


# --------------------------------------------------------------------------- parent: many families


def run_one(family: str, args: argparse.Namespace, env: dict) -> dict:
    """`measure_family` in a fresh interpreter under the timeout (a crash or hang costs one row)."""
    with tempfile.TemporaryDirectory(prefix=f"breaks_{family}_") as work:
        command = [sys.executable, __file__, "--child", family, "--tools", str(args.tools), "--work", work]
        command += ["--kernels"] if args.kernels else []
        command += ["--before-only"] if args.before_only else []
        command += ["--share"] if args.share else []
        began = time.monotonic()
        try:
            run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return {"family": family, "status": "error", "stage": "timeout", "error": f"over {args.timeout:g} s"}
        lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
        if run.returncode != 0 or not lines:
            tail = run.stderr.strip().splitlines()[-1:] or [f"exit code {run.returncode}"]
            return {"family": family, "status": "error", "stage": "crash", "error": _short(tail[0])}
        row = json.loads(lines[-1])
        row["wall_s"] = round(time.monotonic() - began, 1)
        return row


COUNTS = ("statements", "logged", "breaks", "counter", "graphs")  # per version, summed in the totals


def totals(rows: list[dict]) -> dict:
    """Sums over the families whose three versions all ran under Dynamo."""
    ok = [r for r in rows if r["status"] == "ok"]
    failed = sum(r["status"] == "error" for r in rows)
    out: dict = {"families": len(rows), "measured": len(ok), "failed": failed, "screened": len(rows) - len(ok) - failed}
    for version in ("before", *VERSIONS):
        out[version] = {key: sum(r[version][key] for r in ok) for key in COUNTS}
        out[version]["categories"] = dict(
            sum((_categories(r[version]) for r in ok), collections.Counter()).most_common()
        )
        shares = [r[version].get("share") or {} for r in ok]
        if shares and all("ops" in m for m in shares):  # --share, and measured everywhere
            out[version]["share"] = {key: sum(m[key] for m in shares) for key in ("in_graphs", "ops")}
    for version in VERSIONS:
        out[version]["removed"] = {key: _removed(out["before"][key], out[version][key]) for key in COUNTS[:3]}
        out[version]["outputs"] = dict(collections.Counter(r[version]["output"] for r in ok))
        compiled = [r[version]["compiled_output"] for r in ok if "compiled_output" in r[version]]
        if compiled:  # corpus_breaks.py: the transpiled model under torch.compile against the original's eager
            out[version]["compiled_outputs"] = dict(collections.Counter(compiled))
    lints = [r["lint"] for r in rows if "precision" in r.get("lint", {})]  # screened families too
    keys = ("break_statements", "finding_statements", "true_positives", "shadowed", "unexecuted_findings")
    keys += ("own_break_statements", "own_true_positives")
    lint = {key: sum(one.get(key, 0) for one in lints) for key in (*keys, "outside_family")}  # .get: older runs
    lint["precision"] = _ratio(lint["true_positives"], lint["finding_statements"])
    lint["recall"] = _ratio(lint["true_positives"], lint["break_statements"])
    lint["own_recall"] = _ratio(lint["own_true_positives"], lint["own_break_statements"])
    out["lint"] = lint
    return out


def _removed(before: int, after: int) -> float | None:
    return round((before - after) / before, 3) if before else None


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def _categories(run: dict) -> collections.Counter:
    """Logged breaks by category; a break that made Dynamo skip its frame is marked so."""
    return collections.Counter(
        b["category"] + (" (frame skipped)" if b["frame_skipped"] else "") for b in run["detail"]
    )


def render(rows: list[dict], summary: dict, seconds: float, command: str) -> str:
    versions = ("before", *VERSIONS)
    head = ["family"] + [f"statements {v}" for v in versions] + [f"logged {v}" for v in versions]
    head += [f"explain {v}" for v in versions] + [f"output {v}" for v in VERSIONS] + ["lint P", "lint R", "note"]
    shared = any("share" in r.get("before", {}) for r in rows)
    head[-1:-1] = ["ops in graphs " + " -> ".join(versions)] if shared else []
    lines = [f"Command: `{command}`", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "before" not in r:
            cells = [r["family"], f"failed ({r.get('stage')})"] + [""] * (len(head) - 3) + [r.get("error", "")[:160]]
            lines.append("| " + " | ".join(cells).replace("\n", " ") + " |")
            continue
        cells = [r["family"]]
        for key in ("statements", "logged", "breaks"):
            cells += ["error" if r.get(v, {}).get("error") else str(r.get(v, {}).get(key, "")) for v in versions]
        cells += [r.get(v, {}).get("output", "") for v in VERSIONS]
        lint = r.get("lint", {})
        cells += [_num(lint.get("precision")), _num(lint.get("recall"))]
        cells += [" -> ".join(_share(r.get(v, {}).get("share")) for v in versions)] if shared else []
        notes = [f"{v}: counter {r[v]['counter']}" for v in versions if _differs(r.get(v, {}))]
        notes += [f"{v}: {r[v]['error'][:120]}" for v in versions if r.get(v, {}).get("error")]
        notes += ["nondeterministic original"] if r.get("nondeterministic") else []
        notes += (
            ["a copy initialises other weights (the original's loaded)"]
            if r.get("default", {}).get("init_differs")
            else []
        )
        cells.append("; ".join(notes).replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    s = summary
    lines += [
        "",
        f"Totals over the {s['measured']} families whose three versions ran under Dynamo "
        f"({s['failed']} of {s['families']} failed somewhere, listed above; {s['screened']} only screened "
        "with --before-only):",
        "",
    ]
    for version in VERSIONS:
        v, b, gone = s[version], s["before"], s[version]["removed"]
        lines.append(
            f"- {version}: break statements {b['statements']} -> {v['statements']} ({_pct(gone['statements'])} "
            f"removed); logged breaks {b['logged']} -> {v['logged']} ({_pct(gone['logged'])}); explain's breaks "
            f"{b['breaks']} -> {v['breaks']} ({_pct(gone['breaks'])}); Dynamo's graph_break counter "
            f"{b['counter']} -> {v['counter']}; graphs {b['graphs']} -> {v['graphs']}; outputs "
            + ", ".join(f"{k} {n}" for k, n in v["outputs"].items())
            + (
                "; compiled (aot_eager) against the original's eager: "
                + ", ".join(f"{k} {n}" for k, n in v["compiled_outputs"].items())
                if "compiled_outputs" in v
                else ""
            )
        )
    if all("share" in s[v] for v in versions):
        lines.append(
            "- aten ops of one forward run inside Dynamo's graphs: "
            + " -> ".join(f"{v} {_share(s[v]['share'])}" for v in versions)
        )
    lint = s["lint"]
    lines.append(
        f"- lint (original code, statements the forward executed, every family whose original ran): precision {_num(lint['precision'])} "
        f"({lint['true_positives']}/{lint['finding_statements']} finding statements), recall {_num(lint['recall'])} "
        f"({lint['true_positives']}/{lint['break_statements']} break statements; {_num(lint['own_recall'])}, "
        f"{lint['own_true_positives']}/{lint['own_break_statements']}, over those where the break is in the family's "
        f"own code, not in a library function it calls); shadowed {lint['shadowed']}, "
        f"findings on statements not executed {lint['unexecuted_findings']}, breaks outside the family's code "
        f"{lint['outside_family']}"
    )
    names = sorted(
        set().union(*(s[v]["categories"] for v in versions)), key=lambda n: (-s["before"]["categories"].get(n, 0), n)
    )
    lines += ["", "Logged breaks by category:", "", "| category | " + " | ".join(versions) + " |", "|---|---|---|---|"]
    lines += [f"| {n} | " + " | ".join(str(s[v]["categories"].get(n, 0)) for v in versions) + " |" for n in names]
    left = collections.Counter(
        (r["family"], b["category"], f"{b['file']}:{b['line']}: {b['text']}" if b["file"] else f"via {b['via']}")
        for r in rows
        if r["status"] == "ok"
        for b in r["unsafe"]["detail"]
    )
    if left:
        lines += ["", "Breaks left after `--unsafe-fixes` (logged), by site in the transpiled tree:", ""]
        lines += ["| family | category | n | site |", "|---|---|---|---|"]
        lines += [f"| {f} | {c} | {n} | `{site[:150]}` |" for (f, c, site), n in sorted(left.items())]
    changed = [
        (r["family"], v, r[v].get("output_detail", ""))
        for r in rows
        for v in VERSIONS
        if r.get(v, {}).get("output") == "different"
    ]
    if changed:
        lines += ["", "Outputs changed by transpile:", ""] + [f"- {f} ({v}): {d}" for f, v, d in changed]
    import torch

    lines += [
        "",
        f"Python {platform.python_version()}, torch {torch.__version__}, transformers {_version('transformers')}, "
        f"{platform.machine()} with {os.cpu_count()} CPUs, {seconds:.0f} s",
    ]
    return "\n".join(lines)


def _share(measured: dict | None) -> str:
    if not measured or "error" in measured:
        return "error" if measured else ""
    return f"{measured['in_graphs']}/{measured['ops']} ({_pct(_ratio(measured['in_graphs'], measured['ops']))})"


def _differs(run: dict) -> bool:
    return not run.get("error") and run.get("counter") is not None and run["counter"] != run["breaks"]


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _commit() -> str:
    """The commit of the transpiler measured (this file's checkout), with `+dirty` for uncommitted changes."""
    git = ["git", "-C", str(ROOT)]
    try:
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "transpiler", "rewrites", "emit"], capture_output=True, text=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty.stdout.strip() else "")


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def selected_families(args: argparse.Namespace) -> list[str]:
    """The families of hf_families.py (in `args.tools`) that `--families`, `--every` and `--limit` pick; names it
    does not list are reported and skipped."""
    sys.path.insert(0, str(args.tools))
    import hf_families as hff

    families = hff.families()
    if args.families:
        wanted = args.families.split(",")
        unknown = [f for f in wanted if f not in families]
        if unknown:
            print(f"not families here: {','.join(unknown)}", file=sys.stderr)
        families = [f for f in wanted if f in families]
    families = families[:: max(1, args.every)]
    return families[: args.limit] if args.limit is not None else families


def publish(rows: list[dict], args, seconds: float, script: str, argv, render, totals) -> None:
    """A family harness's report of `rows`: printed, and written to `--markdown` and `--json` (the rows, their
    `totals`, the command and the transpiler's commit)."""
    rows.sort(key=lambda r: r["family"])
    summary = totals(rows)
    command = f"{script} " + " ".join(argv if argv is not None else sys.argv[1:])
    report = render(rows, summary, seconds, command.strip()) + f", transpile at {_commit()}"
    print(report)
    if args.markdown:
        args.markdown.write_text(report + "\n")
    if args.json:
        payload = {"command": command.strip(), "commit": _commit(), "seconds": round(seconds, 1)}
        payload.update(totals=summary, families=rows)
        args.json.write_text(json.dumps(payload, indent=1) + "\n")


def report_saved(args, render, totals) -> None:
    """The report of a saved `--json` run (`--from-json`), printed and written to `--markdown`."""
    saved = json.loads(args.from_json.read_text())
    report = render(saved["families"], totals(saved["families"]), saved["seconds"], saved["command"])
    report += f", transpile at {saved.get('commit', 'unknown')}"
    print(report)
    if args.markdown:
        args.markdown.write_text(report + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", help="comma-separated family names (default: every family hf_families.py lists)")
    parser.add_argument("--limit", type=int, help="only the first N families (after --every)")
    parser.add_argument("--every", type=int, default=1, help="every Nth family in name order (a spread-out subset)")
    parser.add_argument("--jobs", type=int, default=1, help="families measured at a time")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per family")
    parser.add_argument("--kernels", action="store_true", help="transpile with kernels (default: --no-kernels)")
    parser.add_argument("--share", action="store_true", help="also the share of aten ops run inside Dynamo's graphs")
    parser.add_argument("--json", type=Path, help="write every family's row and the totals here")
    parser.add_argument("--markdown", type=Path, help="write the report here too")
    parser.add_argument("--tools", type=Path, default=DEFAULT_TOOLS, help="the directory of hf_families.py")
    parser.add_argument(
        "--before-only", action="store_true", help="screen: the original's breaks and the lint only, no transpile"
    )
    parser.add_argument("--from-json", type=Path, help="render the report of a saved --json run instead of running")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        versions = () if args.before_only else VERSIONS
        print(json.dumps(measure_family(args.child, args.tools, args.work, args.kernels, versions, args.share)))
        return 0

    if args.from_json:
        report_saved(args, render, totals)
        return 0
    families = selected_families(args)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    began = time.monotonic()
    rows: list[dict] = []
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = [pool.submit(run_one, family, args, env) for family in families]
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            row = future.result()
            rows.append(row)
            brief = (
                {v: row[v].get("logged", "error") for v in ("before", *VERSIONS) if v in row}
                if "before" in row
                else row.get("error")
            )
            print(f"[{done}/{len(families)}] {row['family']}: {row['status']} {brief}", file=sys.stderr, flush=True)
    publish(rows, args, time.monotonic() - began, f"python benchmarks/{Path(__file__).name}", argv, render, totals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
