"""The driver of `transpile SRC... -o OUT`: mirror the source tree into OUT with the graph-break
fixes applied and the fusible regions compiled into kernels.

The inputs are only ever read: fixes are computed in memory (the lint runs over an
overlay of the edited sources) and written under OUT only. Every file of the source
tree lands at the same relative path, so packages and relative imports keep working;
files with nothing to rewrite are copied byte for byte.

OUT is updated in place. `OUT/.transpile-manifest.json` records what the last run
wrote; a later run deletes a file it wrote before only when that file no longer comes
from any source and is still exactly as written (same size and modification time).
Anything else in OUT (files the user put there, or edited) is never deleted.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from transpiler.pipeline.compiling import Compiled, Failed
from transpiler.source.diagnostics import Diagnostic, file_diagnostic
from transpiler.source.discovery import DiscoveryError, Skipped, check_exists, module_name, not_regular, tree_files
from transpiler.lint.engine import ProjectFacts
from transpiler.lint.fixer import SideEffects, encode_source, fix_project
from transpiler.pipeline.imports import ImportRewrite, plan_imports, shared_module_text, shared_modules
from transpiler.compiler.ir import Region
from transpiler.pipeline.precompiling import artifact_files
from transpiler.pipeline.report import REPORT_DIR, REPORT_HTML, REPORT_JSON, write_report
from transpiler.lint.rule import REGISTRY
from transpiler.source.writing import copy_atomic, remove_stale_temporaries, write_atomic

MANIFEST = ".transpile-manifest.json"
# What a run wrote, one JSON line per file as it is written: the list a run interrupted or killed before it
# writes its manifest leaves for the next one (`_Written`).
JOURNAL = ".transpile-journal"
_MANIFEST_VERSION = 1

# lint(overlay, advance) -> diagnostics: lints the planned Python files, reading the
# paths in `overlay` from memory; `advance(n)` (or None) ticks a progress bar.
Lint = Callable[[Mapping[Path, bytes], Callable[[int], None] | None], list[Diagnostic]]
# facts(overlay) -> which functions run compiled and their tensor parameters, over the same overlay.
Facts = Callable[[Mapping[Path, bytes]], ProjectFacts]


class LayoutError(DiscoveryError):
    """The sources and the output overlap, or two sources map to one output file."""


@dataclass(frozen=True)
class Plan:
    """Where each input file goes: destination -> source (both as the user spelled them)."""

    out: Path
    files: dict[Path, Path]
    # Entries of the sources not read (special files, directories that cannot be listed), by destination.
    skipped: dict[Path, Skipped] = field(default_factory=dict)

    @property
    def python_files(self) -> list[Path]:
        return sorted(src for src in self.files.values() if src.suffix == ".py")

    @property
    def destinations(self) -> dict[Path, Path]:
        """Per source: its destination."""
        return {src: dst for dst, src in self.files.items()}

    @property
    def depths(self) -> dict[Path, int]:
        """Per Python source: the number of directories between `out` and its output."""
        return {src: len(dst.relative_to(self.out).parts) - 1 for dst, src in self.files.items() if src.suffix == ".py"}


def plan(sources: list[Path], out: Path, is_excluded_entry: Callable[[Path], bool]) -> Plan:
    """Map every file of `sources` into `out`: a directory's contents go to `out` itself
    (`transpile pkg -o build/pkg`), a file to `out/<name>`.

    Raises LayoutError when `out` is, or is inside, a source directory (the output would
    become input on the next run), when a source is inside `out` (writing could overwrite
    it), or when two sources map to the same output path.
    """
    out_real = _real(out)
    if out.exists() and not out.is_dir():
        raise LayoutError(f"output {out} exists and is not a directory")
    files: dict[Path, Path] = {}
    skipped: dict[Path, Skipped] = {}
    for src in _outermost(sources):
        src_real = _real(src)
        if src.is_dir() and _within(out_real, src_real):
            where = "is the source directory" if out_real == src_real else "is inside the source directory"
            raise LayoutError(f"output directory {out} {where} {src}; choose an output outside it")
        if _within(src_real, out_real):
            raise LayoutError(f"source {src} is inside the output directory {out}; choose an output outside it")
        if src.is_dir():
            # The manifest and reports of an earlier output used as input are ours, not the user's.
            ours = {src / MANIFEST, src / JOURNAL, src / REPORT_HTML, src / REPORT_JSON, *artifact_files(src)}
            found = tree_files(src, is_excluded_entry)
            skipped.update((out / s.path.relative_to(src), s) for s in found.skipped)
            mapped = [
                (f, out / f.relative_to(src))
                for f in found.files
                if f not in ours and f.relative_to(src).parts[0] != REPORT_DIR
            ]
        elif (kind := not_regular(src)) is not None:
            skipped[out / src.name] = Skipped(src, kind)
            continue
        else:
            mapped = [(src, out / src.name)]
        for file, dst in mapped:
            if dst in files and _real(files[dst]) != _real(file):
                raise LayoutError(f"{files[dst]} and {file} would both be written to {dst}")
            files[dst] = file
    return Plan(out, files, skipped)


def _outermost(sources: list[Path]) -> list[Path]:
    """The sources not inside another source directory (those are mirrored with it)."""
    for src in sources:
        check_exists(src)
    dirs = [_real(s) for s in sources if s.is_dir()]
    kept, seen = [], set()
    for src in sources:
        real = _real(src)
        if real in seen or any(real != d and _within(real, d) for d in dirs):
            continue
        seen.add(real)
        kept.append(src)
    return kept


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _within(path: Path, directory: Path) -> bool:
    """Whether `path` is `directory` or lies under it (both resolved)."""
    return path == directory or directory in path.parents


@dataclass
class BuildResult:
    """What a build wrote and what its fixes did. `found` and `applied` name the input files;
    `remaining` names the output files, as its lines and columns are those of the rewritten text."""

    out: Path
    files: int = 0
    rewritten: list[Path] = field(default_factory=list)  # destinations with fixes applied
    removed: list[Path] = field(default_factory=list)  # stale outputs of an earlier run
    unreadable: list[Path] = field(default_factory=list)  # sources that could not be read, not copied
    found: list[Diagnostic] = field(default_factory=list)  # what `transpile lint` reports on the inputs
    applied: list[Diagnostic] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)
    regions: dict[Path, list[Region]] = field(default_factory=dict)  # by source file, those compiled
    # By source file: classes whose forward replays as a CUDA graph, and blocks that do not (class, line, why).
    graphed: dict[Path, tuple[str, ...]] = field(default_factory=dict)
    not_graphed: dict[Path, tuple[tuple[str, int, str], ...]] = field(default_factory=dict)
    not_fused: dict[Path, tuple[tuple[str, int, str], ...]] = field(default_factory=dict)  # (function, line, why)
    kernel_files: list[Path] = field(default_factory=list)  # generated beside the modules, and the runtime
    kernels: dict[Path, list[Path]] = field(default_factory=dict)  # by source file, the kernel files beside its module
    imports: list[ImportRewrite] = field(default_factory=list)  # relative imports leaving `out`, made absolute
    # Sources written as modules shared with the original (a file importing the original module, docs/compiler.md):
    # neither rewritten nor copied, and their imports are not the output's.
    shared: list[Path] = field(default_factory=list)


def build(
    layout: Plan,
    lint: Lint,
    unsafe: bool = False,
    side_effects: SideEffects = "guard",
    progress: Callable[..., None] | None = None,
    kernels: bool = True,
    facts: Facts | None = None,
    jobs: int | None = None,
) -> BuildResult:
    """Fix the Python files of `layout` in memory, compile their regions into kernels (unless
    `kernels` is False), then write every file under `layout.out`.

    `progress(n)` ticks the lint, `progress(n, "compiling")` the compile phase. `facts(overlay)` gives
    the project's facts as the lint saw them (default: analysed again, uncached); `jobs`: worker
    processes for the compile phase (default: one per core). Each compiled file is written as soon as
    it is done (transpiler/pipeline/compiling.py), so memory stays bounded on any tree."""
    remove_stale_temporaries(layout.out)  # what a killed run left
    rounds: list[list[Diagnostic]] = []

    def lint_round(overlay: Mapping[Path, bytes]) -> list[Diagnostic]:
        # Only the first round reads every file; later rounds are answered mostly from the cache.
        diagnostics = lint(overlay, None if rounds else progress)
        rounds.append(diagnostics)
        return diagnostics

    imports = plan_imports(layout.depths)  # before any work: raises for an import with nowhere to go
    fixed = fix_project(layout.python_files, lint_round, unsafe, side_effects)
    sources = imports.apply(fixed.sources)
    result = BuildResult(
        layout.out,
        len(layout.files) + len(layout.skipped),
        found=list(rounds[0]),
        applied=fixed.applied,
        imports=imports.rewrites,
    )
    previous = _read_manifest(layout.out)
    written = _Written(layout.out)
    output_of: dict[str, str] = {}
    errors: list[Diagnostic] = []
    for dst, skipped in sorted(layout.skipped.items()):
        result.unreadable.append(skipped.path)
        errors.append(skipped.diagnostic("not copied"))
        # What an earlier run wrote from there is not stale: its source may still exist.
        rel = dst.relative_to(layout.out).as_posix()
        written.update((r, signature) for r, signature in previous.items() if r == rel or r.startswith(f"{rel}/"))
    lines: dict[Path, dict[int, str]] = {}  # per compiled file, the lines its regions span (for the report)
    hazards = _graph_hazards(fixed.remaining, fixed.sources)
    for src, outcome in _compile(layout, sources, hazards, facts, jobs, progress) if kernels else ():
        dst = layout.destinations[src]
        if isinstance(outcome, Failed):
            errors.append(outcome.diagnostic)
            continue
        if not result.kernel_files:  # first: a run interrupted while writing modules leaves the runtime they import
            _write_runtime(layout.out, written, result)
        result.regions[src], lines[src] = list(outcome.regions), outcome.lines
        if outcome.graphed or outcome.not_graphed:
            result.graphed[src], result.not_graphed[src] = outcome.graphed, outcome.not_graphed
        if outcome.not_fused:
            result.not_fused[src] = outcome.not_fused
        for name, text in outcome.files:
            target = dst.with_name(name)
            _write_if_changed(target, encode_source(src, text) if target == dst else text.encode(), like=src)
            written[target.relative_to(layout.out).as_posix()] = _signature(target)
            if target != dst:
                result.kernel_files.append(target)
                result.kernels.setdefault(src, []).append(target)
        output_of[str(src)] = str(dst)
        if src in sources:
            result.rewritten.append(dst)
    result.regions = dict(sorted(result.regions.items()))  # as they finished: sorted, so that reports do not vary
    shared = shared_modules(layout.depths, {*result.regions, *fixed.sources})  # imported from the original package
    for dst, src in sorted(layout.files.items()):
        rel = dst.relative_to(layout.out).as_posix()
        if src in result.regions:
            continue  # written above
        if src in shared:
            _write_if_changed(dst, shared_module_text(shared[src]).encode(), like=src)
            result.shared.append(src)
        elif src in sources:
            _write_if_changed(dst, encode_source(src, sources[src]), like=src)
            result.rewritten.append(dst)
        else:
            error = _read_error(src)
            if error is not None:
                result.unreadable.append(src)
                errors.append(error)
                if rel in previous:  # its source still exists: the earlier output is not stale
                    written[rel] = previous[rel]
                continue
            _copy_if_changed(src, dst)
        written[rel] = _signature(dst)
        output_of[str(src)] = str(dst)
    gone = {str(src) for src in result.shared}  # a shared module's file is the original's: its imports are not made
    result.imports = [r for r in result.imports if r.path not in gone]
    # Unreadable files get one diagnostic each, saying they were not copied (the lint
    # reported the Python ones already, without knowing that).
    unreadable = {str(src) for src in result.unreadable}
    result.found = [d for d in result.found if not (d.code == "TP902" and d.path in unreadable)] + errors
    kept = [d for d in fixed.remaining if not (d.code == "TP902" and d.path in unreadable)]
    result.remaining = [replace(d, path=output_of.get(d.path, d.path)) for d in kept] + errors
    result.kernel_files.sort()
    result.rewritten.sort()
    shown = {src: shown_path(src, dst, layout.out) for dst, src in layout.files.items()}
    for path in write_report(result, layout.out, lines, layout.destinations, shown):
        written[path.relative_to(layout.out).as_posix()] = _signature(path)
    result.removed = _remove_stale(layout.out, previous, written)
    manifest = {"tool": "transpile", "version": _MANIFEST_VERSION, "files": written}
    # Unchanged, it is not written: a second run over the same tree writes nothing.
    _write_if_changed(
        layout.out / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode(), like=None
    )
    written.journal.unlink(missing_ok=True)
    return result


def _graph_hazards(remaining: list[Diagnostic], texts: Mapping[Path, str]) -> dict[Path, dict[str, tuple[int, str]]]:
    """Per file, per function (`Class.method`), the first graph-break finding the fixes left in it: such a
    function does not replay as a CUDA graph (transpiler/compiler/graphing.py). Performance findings
    (TP7xx) and file diagnostics (TP9xx) say nothing about what a replay would skip."""
    import ast

    from transpiler.compiler.graphing import hazards_by_function
    from transpiler.source.reading import read_source

    findings: dict[Path, list[tuple[int, str]]] = {}
    for d in remaining:
        if d.code[:3] in ("TP1", "TP2", "TP3", "TP4", "TP5", "TP6"):
            findings.setdefault(Path(d.path), []).append((d.line, f"{d.code} {d.message}"))
    hazards = {}
    for path, found in findings.items():
        try:
            tree = ast.parse(texts[path] if path in texts else read_source(path))
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError, RecursionError):
            continue  # not compiled either
        hazards[path] = hazards_by_function(tree, found)
    return hazards


def _compile(
    layout: Plan,
    fixed: Mapping[Path, str],
    hazards: Mapping[Path, Mapping[str, tuple[int, str]]],
    facts: Facts | None,
    jobs: int | None,
    progress: Callable[..., None] | None,
) -> Iterator[tuple[Path, Compiled | Failed]]:
    """Per Python source with regions (or whose compile failed), in the order they finish: what to write."""
    from emit.host.module import kernel_stems
    from transpiler.pipeline.compiling import Job, compile_files, compiled_modules
    from transpiler.lint.engine import project_facts

    sources, depths = layout.python_files, layout.depths
    overlay = {p: encode_source(p, t) for p, t in fixed.items()}
    found = facts(overlay) if facts is not None else project_facts(sources, overlay)
    stems = kernel_stems(layout.files)  # by destination: names unique in each output directory
    modules = compiled_modules(found)
    todo = []
    for src in sources:
        if module_name(src) not in modules:  # no function of it runs compiled: no region
            if progress:
                progress(1, "compiling")
            continue
        dst = layout.destinations[src]
        shown = shown_path(src, dst, layout.out)
        left = tuple(sorted(hazards.get(src, {}).items()))
        todo.append(Job(src, fixed.get(src), shown, module_name(src), depths[src], stems[dst], left))
    tick = (lambda n: progress(n, "compiling")) if progress else None
    for job, outcome in compile_files(todo, found, jobs or os.cpu_count() or 1, tick):
        if outcome is not None:
            yield job.src, outcome


def shown_path(src: Path, dst: Path, out: Path) -> str:
    """How generated comments and the report name a source file: its path in the tree, under the name of the
    tree's root directory (`models/bert/modeling_bert.py` for `transpile /abs/transformers/models -o OUT`
    and `transpile transformers/models -o OUT` alike), never an absolute path: outputs must not depend on
    where the sources are."""
    relative = dst.relative_to(out)
    root = Path(os.path.abspath(src)).parents[len(relative.parts) - 1]
    return (Path(root.name) / relative).as_posix()


def _write_runtime(out: Path, written: _Written, result: BuildResult) -> None:
    """The runtime package every kernel file imports, once into the output root."""
    from emit.host.module import RUNTIME, runtime_files

    for name, data in runtime_files():
        target = out / RUNTIME / name
        _write_if_changed(target, data, like=None)
        written[target.relative_to(out).as_posix()] = _signature(target)
        result.kernel_files.append(target)


def _read_error(src: Path) -> Diagnostic | None:
    """A TP902 diagnostic when `src` cannot be opened (it is then not copied), else None."""
    try:
        with open(src, "rb"):
            return None
    except OSError as err:
        message = f"cannot read file: {err.strerror or err}; not copied"
        return file_diagnostic(str(src), "TP902", message)


def _write_if_changed(dst: Path, data: bytes, like: Path) -> None:
    """Write `data` atomically, unless `dst` already holds it (an unchanged output keeps its mtime)."""
    try:
        if dst.read_bytes() == data:
            return
    except OSError:
        pass
    write_atomic(dst, data, like=like)


def _copy_if_changed(src: Path, dst: Path) -> None:
    """Copy with `shutil.copy2` (bytes, permission bits, times) into a temporary file renamed over
    `dst`: a crash never leaves a half-copied file. Skipped when `dst` has the size and
    modification time copy2 gave it last time (rsync's quick check), so large data files
    are not copied again on every run."""
    source, target = src.stat(), _stat(dst)
    if target is not None and (target.st_size, target.st_mtime_ns) == (source.st_size, source.st_mtime_ns):
        return
    copy_atomic(src, dst)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


def _signature(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


class _Written(dict):
    """The files this run wrote, relative path -> (size, mtime). Each one recorded is also appended to OUT's
    journal, so that a run interrupted or killed before it writes its manifest leaves the list of what it
    wrote: the next run reads it with the manifest, and deletes what turns out stale."""

    def __init__(self, out: Path) -> None:
        super().__init__()
        self.journal = out / JOURNAL

    def __setitem__(self, rel: str, signature: tuple[int, int]) -> None:
        super().__setitem__(rel, signature)
        with open(self.journal, "a", encoding="utf-8") as handle:
            handle.write(json.dumps([rel, *signature]) + "\n")


class NotBuilt(ValueError):
    """A directory that is no output of `transpile build` (or whose manifest cannot be read)."""


def built_files(out: Path) -> dict[str, tuple[int, int]]:
    """The files the last complete build wrote into `out` (relative path -> size and modification time), from its
    manifest; NotBuilt where it has none that reads (`transpile precompile` and `verify` need a built tree)."""
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("tool") == "transpile" and manifest.get("version") == _MANIFEST_VERSION:
            return {str(rel): (int(size), int(mtime)) for rel, (size, mtime) in manifest["files"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    raise NotBuilt(f"{out} has no readable build manifest ({MANIFEST}): build it first")


def _read_manifest(out: Path) -> dict[str, tuple[int, int]]:
    """The files earlier runs wrote: the manifest of the last complete one, then the journal of any
    interrupted since (empty when neither can be read)."""
    try:
        files = built_files(out)
    except NotBuilt:
        files = {}
    try:
        journal = (out / JOURNAL).read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError):
        journal = []
    for line in journal:
        try:
            rel, size, mtime = json.loads(line)
            files[str(rel)] = (int(size), int(mtime))
        except (ValueError, TypeError):
            continue  # the last line of a killed run may be cut off
    return files


def _remove_stale(
    out: Path, previous: Mapping[str, tuple[int, int]], written: Mapping[str, tuple[int, int]]
) -> list[Path]:
    """Delete the files an earlier run wrote that no source produces any more, if untouched since."""
    removed = []
    for rel, signature in sorted(previous.items()):
        path = out / rel
        if rel in written or Path(rel).is_absolute() or ".." in Path(rel).parts or path.is_symlink():
            continue
        stat = _stat(path)
        if stat is None or (stat.st_size, stat.st_mtime_ns) != tuple(signature):
            continue  # gone already, or edited by someone: not ours to delete
        path.unlink()
        removed.append(path)
        _remove_empty_parents(path.parent, out)
    return removed


def _remove_empty_parents(directory: Path, out: Path) -> None:
    while directory != out and out in directory.parents:
        try:
            directory.rmdir()
        except OSError:
            return  # not empty
        directory = directory.parent


def reason(d: Diagnostic, unsafe: bool) -> str:
    """Why a finding was left in the output, in words a user understands."""
    if d.no_fix:
        return d.no_fix
    if d.fix is not None:
        if d.fix.safety == "unsafe" and not unsafe:
            return f"unsafe fix ({d.fix.title}); enable with --unsafe-fixes"
        return f"fix not applied ({d.fix.title}): it overlaps another fix"
    if d.code in ("TP901", "TP902"):  # a file that does not parse or decode is copied as it is
        done = d.message.endswith(("not copied", "written without kernels"))  # the message says what was done
        return d.message if done else f"{d.message}; copied unchanged"
    return "no automatic fix"


@dataclass(frozen=True)
class RuleRow:
    code: str
    name: str
    found: int
    rewritten: int
    left: int


def rule_rows(result: BuildResult) -> list[RuleRow]:
    """Per rule: findings in the input, rewritten away, left in the output; most found first, as
    ruff's statistics. A finding is rewritten when it is gone from the output: by its own fix or,
    for a break in a loop or `try`, by the fix of the break inside."""
    found, left = Counter(d.code for d in result.found), Counter(d.code for d in result.remaining)
    codes = sorted(found.keys() | left.keys(), key=lambda c: (-found[c], c))
    return [RuleRow(c, REGISTRY[c].name, found[c], max(found[c] - left[c], 0), left[c]) for c in codes]


def file_counts(result: BuildResult) -> tuple[int, int]:
    """Files written with kernels but no fix or import rewritten, and files copied unchanged; with
    `result.rewritten`, `result.shared` and `result.unreadable` they add up to `result.files` (the summary and the
    report count them so)."""
    changed = {d.path for d in result.applied} | {r.path for r in result.imports}
    kernels_only = sum(1 for src in result.regions if str(src) not in changed)
    others = len(result.rewritten) + kernels_only + len(result.shared) + len(result.unreadable)
    return kernels_only, result.files - others


def file_counts_text(rewritten: int, kernels_only: int, shared: int, copied: int, unreadable: int) -> str:
    """The summary's and the report's words for the files: "3 rewritten, 2 shared with the original, ..."."""
    text = f"{rewritten} rewritten, " + (f"{kernels_only} with kernels only, " if kernels_only else "")
    text += f"{shared} shared with the original (importing its module), " if shared else ""
    return text + f"{copied} copied unchanged" + (f", {unreadable} unreadable (not copied)" if unreadable else "")


# Findings about a file that could not be read, parsed or compiled: the compact summary lists them too.
_FILE_ERRORS = ("TP901", "TP902")


def render_summary(result: BuildResult, fmt: str, unsafe: bool, detail: str = "compact") -> str:
    """The closing report: `text` or `json` (all the data, whatever `detail`).

    Text `detail`: "compact" counts (files, regions, classes graphed, the per-rule table, what is left)
    and lists only the files that could not be read, parsed or compiled,
    "verbose" also names every region and class and lists each finding left with its reason, "quiet"
    prints only the findings left, one a line (as `ruff -q` prints only diagnostics): a tree of a few
    hundred files has thousands of kernel names and findings, which bury the counts."""
    rows = rule_rows(result)
    kernels_only, copied = file_counts(result)
    left = sorted(result.remaining, key=lambda d: (d.path, d.line, d.col, d.code))
    if fmt == "json":
        document = {
            "output": str(result.out),
            "files": {
                "total": result.files,
                "rewritten": len(result.rewritten),
                "kernels_only": kernels_only,
                "shared": len(result.shared),
                "copied": copied,
                "unreadable": [str(p) for p in result.unreadable],
                "removed": [str(p) for p in result.removed],
            },
            "rules": [row.__dict__ for row in rows],
            "regions": [
                {"path": str(src), "name": r.name, "first_line": r.first_line, "last_line": r.last_line}
                for src, found in sorted(result.regions.items())
                for r in found
            ],
            "report": str(result.out / REPORT_HTML),
            "imports": [r.__dict__ for r in result.imports],
            "fixes": [
                # No line: fixes nested in others are planned on partly rewritten text.
                {"path": d.path, "code": d.code, "title": d.fix.title, "safety": d.fix.safety}
                for d in sorted(result.applied)
            ],
            "left": [
                {
                    "path": d.path,
                    "line": d.line,
                    "col": d.col,
                    "end_line": d.end_line,
                    "end_col": d.end_col,
                    "code": d.code,
                    "name": d.name,
                    "message": d.message,
                    "reason": reason(d, unsafe),
                }
                for d in left
            ],
        }
        return json.dumps(document, indent=2) + "\n"
    shown = [f"{d.path}:{d.line}:{d.col}: {d.code} {reason(d, unsafe)}" for d in left]
    if detail == "quiet":
        return "".join(f"{line}\n" for line in shown)
    verbose = detail == "verbose"
    counts = file_counts_text(len(result.rewritten), kernels_only, len(result.shared), copied, len(result.unreadable))
    lines = [f"Transpiled {_plural(result.files, 'file')} into {result.out}: {counts}."]
    regions = [r for found in result.regions.values() for r in found]
    if regions:
        files = sum(1 for found in result.regions.values() if found)
        names = f": {', '.join(r.name for r in regions)}" if verbose else ""
        lines.append(
            f"Compiled {_plural(len(regions), 'region')} of {_plural(files, 'file')} into fused kernels"
            f" (Triton on CUDA, C++ on CPU){names}."
        )
    graphed = [cls for classes in result.graphed.values() for cls in classes]
    if graphed:
        names = f": {', '.join(graphed)}" if verbose else ""
        lines.append(
            f"Replaying by default (CUDA graphs on CUDA, a block's backward too in training; tapes on the CPU without autograd) the forward of "
            f"{len(graphed)} class{'' if len(graphed) == 1 else 'es'} (models and their blocks){names}."
        )
    if result.imports:
        first, files = result.imports[0], len({r.path for r in result.imports})
        lines.append(
            f"Made {_plural(len(result.imports), 'relative import')} of {_plural(files, 'file')} that leave the output"
            f" tree absolute (`{first.relative}` -> `{first.absolute}`, ...)."
        )
    lines.append(f"Report: {result.out / REPORT_HTML}")
    if result.removed:
        lines.append(f"Removed {_plural(len(result.removed), 'stale file')} an earlier run wrote.")
    if rows:
        lines += ["", *_table(rows)]
    if left and verbose:
        lines += ["", f"Left as they were ({len(left)}):", *(f"  {line}" for line in shown)]
    elif broken := [line for d, line in zip(left, shown) if d.code in _FILE_ERRORS]:  # few, and always wanted
        lines += ["", f"Files not read, parsed or compiled ({len(broken)}):", *(f"  {line}" for line in broken)]
    if left:
        more = "" if verbose else " (`--verbose` lists them with the reason each was left, as does the report)"
        closing = f"{_plural(len(left), 'finding')} left{more}."
    else:
        closing = (
            f"All {_plural(len(result.found), 'finding')} rewritten." if result.found else "No graph breaks found."
        )
    lines += ["", closing]
    return "\n".join(lines) + "\n"


def _table(rows: list[RuleRow]) -> list[str]:
    header = ("code", "rule", "found", "rewritten", "left")
    total = ("total", "", *(str(sum(getattr(r, k) for r in rows)) for k in ("found", "rewritten", "left")))
    cells = [header, *((r.code, r.name, str(r.found), str(r.rewritten), str(r.left)) for r in rows), total]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    # Text columns left-aligned, counts right-aligned.
    return [
        "  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
        for row in cells
    ]


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
