"""The lint pipeline: discover -> analyse each file (cached, in parallel) -> resolve the project -> report.

Per-file results depend only on the file's bytes, its module name and the tool's
code, so they are cached under a hash of exactly those; the cross-file step
(module classes, call graph), suppressions and rule selection are cheap and run
every time.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from transpiler.lint.cache import Store
from transpiler.source.diagnostics import Diagnostic, file_diagnostic, Fix, rule_url
from transpiler.source.discovery import module_name
from transpiler.analysis.kinds import Kind
from transpiler.analysis.project import Project
from transpiler.lint.rule import REGISTRY, Finding
from transpiler.source.reading import SourceError, noqa_directives, parse
from transpiler.analysis.symbols import ClassInfo, FileSummary, FunctionInfo, is_library_module_class

# Files smaller than this in total are analysed in-process: a pool costs more than it saves.
_PARALLEL_MIN_BYTES = 1 << 20
_CHUNK = 8


@dataclass
class FileResult:
    path: str
    module: str
    summary: FileSummary | None = None
    # Findings per function qualified name; columns already 1-based characters.
    findings: dict[str, list[Finding]] = field(default_factory=dict)
    error: Diagnostic | None = None
    noqa: dict[int, tuple[int, frozenset[str] | None]] = field(default_factory=dict)


_checker = None


def require_rules() -> None:
    """The engine runs whatever rules are registered; the caller registers them (rules are plugins of the
    linter: transpiler/pipeline/rules.py imports the project's own, `rewrites/`)."""
    if not REGISTRY:
        raise RuntimeError("no lint rules are registered: call transpiler.pipeline.rules.load_rules() first")


def rule_infos():
    from transpiler.lint.formats import RuleInfo

    require_rules()
    return {
        code: RuleInfo(code, rule.name, rule.summary, rule_url(code, rule.name), rule.dynamo_codes)
        for code, rule in sorted(REGISTRY.items())
    }


def _get_checker():
    global _checker
    if _checker is None:
        require_rules()
        from transpiler.analysis.walker import Walker

        _checker = Walker(cls() for _, cls in sorted(REGISTRY.items()))
    return _checker


# The checker recurses along expressions; long operator chains (`a + b + ... `, a few
# hundred terms) are legal Python and need more than the default 1,000 frames.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))


def analyze_source(
    path: str, data: bytes, module: str, is_package: bool, tensor_params: dict[str, frozenset[str]] | None = None
) -> FileResult:
    """Everything about one file that does not depend on other files.

    `tensor_params` (from the project's call sites) types parameters of the named
    functions as tensors; without it, unannotated parameters of helpers are unknown.
    """
    result = FileResult(path, module)
    require_rules()
    try:
        source = parse(data)
    except SourceError as err:
        rule = REGISTRY[err.code]
        result.error = Diagnostic(path, err.line, err.col, err.line, err.col, err.code, rule.name, err.message)
        return result
    try:
        summary, findings = _get_checker().check(source.tree, module, is_package, source.text, tensor_params)
    except RecursionError:
        message = "cannot analyse: expressions nested deeper than the analysis supports"
        result.error = file_diagnostic(path, "TP901", message)
        return result
    result.summary = summary
    result.findings = {
        qualname: [
            Finding(
                f.code,
                f.line,
                source.char_col(f.line, f.col),
                f.end_line,
                source.char_col(f.end_line, f.end_col),
                f.message,
                f.blocks,
                f.fix and replace(f.fix, target=source.char_span(*f.fix.target)),
                f.no_fix,
            )
            for f in found
        ]
        for qualname, found in findings.items()
    }
    if "noqa" in source.text:
        result.noqa = noqa_directives(source.text)
    return result


def code_fingerprint() -> str:
    """Changes whenever the tool's code changes (version bumps and editable installs alike)."""
    digest = hashlib.sha256()
    try:
        from importlib.metadata import version

        digest.update(version("transpile").encode())
    except Exception:
        pass
    root = Path(__file__).resolve().parents[2]
    for package in ("transpiler", "rewrites"):
        for file in sorted((root / package).rglob("*.py")):
            stat = file.stat()
            digest.update(f"{file.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()[:16]


def default_cache_dir() -> Path:
    base = os.environ.get("TRANSPILE_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    if os.environ.get("TRANSPILE_CACHE_DIR"):
        return Path(base)
    return Path(base or Path.home() / ".cache") / "transpile"


class Cache(Store):
    """Per-file results keyed by content hash, module name and code fingerprint, in a private
    directory, read back as data only (transpiler/lint/cache.py)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, code_fingerprint(), _CACHED_CLASSES, (FileResult, RunResult))

    @staticmethod
    def key(data: bytes, module: str, is_package: bool) -> str:
        return hashlib.sha256(data + f"\0{module}\0{is_package}".encode()).hexdigest()


def _task(item: tuple) -> FileResult:
    return analyze_source(*item)


# Files read from memory instead of disk, passed down from `lint(..., overlay=...)`: a fix run
# lints its edited sources before (or without ever) writing them.
Overlay = Mapping[Path, bytes]
_DISK: Overlay = MappingProxyType({})


def _as_overlay(overlay: Mapping[Path, bytes] | None) -> Overlay:
    return {Path(p): data for p, data in overlay.items()} if overlay else _DISK


def _read(path: Path, overlay: Overlay) -> tuple[bytes | None, Diagnostic | None]:
    if path in overlay:
        return overlay[path], None
    try:
        return path.read_bytes(), None
    except OSError as err:
        message = f"cannot read file: {err.strerror or err}"
        return None, file_diagnostic(str(path), "TP902", message)


@dataclass
class RunResult:
    """What a whole run produced, and the context files it depended on (path, content hash)."""

    diagnostics: list[Diagnostic]
    context: list[tuple[str, str]]


def lint(
    files: list[Path],
    is_selected: Callable[[str], bool],
    selection: str,
    cache: Cache | None,
    jobs: int | None = None,
    progress: Callable[[int], None] | None = None,
    overlay: Mapping[Path, bytes] | None = None,
) -> list[Diagnostic]:
    """The whole pipeline over `files`. `selection` fingerprints the settings that
    `is_selected` applies; with a cache, an unchanged run is answered in one read.
    `overlay` gives the contents of some files in place of what is on disk."""
    return _lint(files, is_selected, selection, cache, jobs, progress, _as_overlay(overlay))


# Every class a cache entry holds: reading one resolves no other name (transpiler/lint/cache.py).
_CACHED_CLASSES = (FileResult, RunResult, FileSummary, ClassInfo, FunctionInfo, Finding, Fix, Diagnostic, Kind)


def _lint(files, is_selected, selection, cache, jobs, progress, overlay: Overlay) -> list[Diagnostic]:
    require_rules()
    contents = [_read(path, overlay) for path in files]
    keys = [
        _file_key(path, data) if cache is not None and data is not None else None
        for path, (data, _) in zip(files, contents)
    ]
    run_key = None
    if cache is not None:
        digest = hashlib.sha256(selection.encode())
        for path, key in zip(files, keys):
            digest.update(f"\0{path}\0{key or '-'}".encode())
        run_key = digest.hexdigest()
        previous = cache.get(run_key)
        if isinstance(previous, RunResult) and all(_digest(Path(p), overlay) == h for p, h in previous.context):
            if progress:
                progress(len(files))
            return previous.diagnostics
    results = analyze_files(files, cache, jobs, progress, contents, keys)
    context = with_context(results, cache, jobs, overlay)
    diagnostics = resolve(results, is_selected, context, cache, jobs, overlay)
    if cache is not None and run_key is not None:
        cache.put(run_key, RunResult(diagnostics, [(c.path, _digest(Path(c.path), overlay)) for c in context]))
    return diagnostics


def _file_key(path: Path, data: bytes) -> str:
    return Cache.key(data, module_name(path), path.name == "__init__.py")


def _digest(path: Path, overlay: Overlay) -> str | None:
    data, _ = _read(path, overlay)
    return None if data is None else hashlib.sha256(data).hexdigest()


def analyze_files(
    files: list[Path],
    cache: Cache | None,
    jobs: int | None = None,
    progress: Callable[[int], None] | None = None,
    contents: list[tuple[bytes | None, Diagnostic | None]] | None = None,
    keys: list[str | None] | None = None,
    overlay: Overlay = _DISK,
) -> list[FileResult]:
    """Per-file results (from the cache or computed, in parallel for large inputs).
    `contents` (bytes or read errors) and `keys` (cache keys) are given when the caller
    has computed them already; otherwise files are read from `overlay`, then from disk."""
    require_rules()
    results: dict[int, FileResult] = {}
    todo: list[tuple[int, tuple[str, bytes, str, bool], str | None]] = []
    for index, path in enumerate(files):
        data, error = contents[index] if contents is not None else _read(path, overlay)
        if data is None:
            results[index] = FileResult(str(path), "", error=error)
            continue
        module, is_package = module_name(path), path.name == "__init__.py"
        key = (keys[index] if keys is not None else _file_key(path, data)) if cache else None
        cached = cache.get(key) if cache and key else None
        if cached is not None:
            cached.path = str(path)
            if cached.error is not None:
                cached.error = replace(cached.error, path=str(path))
            results[index] = cached
            if progress:
                progress(1)
        else:
            todo.append((index, (str(path), data, module, is_package), key))
    computed = _compute([item for _, item, _ in todo], jobs, progress)
    for (index, _, key), result in zip(todo, computed):
        results[index] = result
        if cache and key:
            cache.put(key, result)
    return [results[i] for i in range(len(files))]


def _compute(items: list[tuple], jobs: int | None, progress: Callable[[int], None] | None = None) -> list[FileResult]:
    """`analyze_source(*item)` for each item, in worker processes when there is enough to do."""
    total_bytes = sum(len(item[1]) for item in items)
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if workers > 1 and total_bytes >= _PARALLEL_MIN_BYTES and len(items) > 1:
        _get_checker()  # build once before forking, so workers inherit it
        with ProcessPoolExecutor(max_workers=workers) as pool:
            return list(_tick(pool.map(_task, items, chunksize=_CHUNK), progress))
    return list(_tick(map(_task, items), progress))


def _tick(results: Iterable[FileResult], progress: Callable[[int], None] | None) -> Iterable[FileResult]:
    for result in results:
        if progress:
            progress(1)
        yield result


def with_context(
    results: list[FileResult], cache: Cache | None, jobs: int | None = None, overlay: Overlay = _DISK
) -> list[FileResult]:
    """Add the project files that define the base classes of the linted classes.

    A class is a module only if its bases lead to `nn.Module`; when pre-commit
    passes `attention.py` alone, its base class in `layers.py` is still needed.
    Missing bases (and the packages that re-export them) are looked up next to the
    files already read, round after round, and analysed as context: their own
    findings are not reported.
    """
    known = {os.path.abspath(r.path) for r in results}
    roots = _source_roots(results)
    context: list[FileResult] = []
    for _ in range(16):  # each round follows one more step of inheritance or re-export
        project = Project.from_summaries([r.summary for r in results + context if r.summary is not None])
        wanted = set()
        modules = project.module_classes()
        # Only classes with a `forward` (and their bases) can make compiled code.
        unresolved = [
            c.qualname for c in project.classes.values() if "forward" in c.methods and c.qualname not in modules
        ]
        for ancestor in {q for c in unresolved for q in project.mro(c)}:
            for base in project.classes[ancestor].bases:
                target = project.canonical(base)
                if target not in project.classes and not is_library_module_class(target):
                    wanted.update(_module_files(target, roots))
        new = sorted(p for p in wanted if os.path.abspath(p) not in known)
        if not new:
            break
        known.update(os.path.abspath(p) for p in new)
        context += analyze_files(new, cache, jobs, overlay=overlay)
    return context


def _source_roots(results: list[FileResult]) -> set[Path]:
    """Directories that module names are relative to (where the top-level packages live)."""
    roots = set()
    for result in results:
        if result.module:
            path = Path(result.path).absolute()
            depth = result.module.count(".") + (path.name != "__init__.py")
            roots.add(path.parents[depth - 1] if depth else path.parent)
    return roots


def _module_files(qualname: str, roots: set[Path]) -> list[Path]:
    """Files that may define `qualname` (`pkg.mod.Class`: pkg/mod.py or pkg/mod/__init__.py)."""
    parts = qualname.split(".")
    found = []
    for cut in range(len(parts) - 1, 0, -1):
        relative = Path(*parts[:cut])
        for root in roots:
            for candidate in (root / relative.with_suffix(".py"), root / relative / "__init__.py"):
                if candidate.is_file():
                    found.append(candidate)
        if found:
            break
    return found


@dataclass(frozen=True)
class ProjectFacts:
    """What the whole project says about each function: compiled or not, which parameters are tensors."""

    compiled: frozenset[str]
    tensor_params: dict[str, frozenset[str]]


def project_facts(
    files: list[Path], overlay: Mapping[Path, bytes] | None = None, cache: Cache | None = None, jobs: int | None = None
) -> ProjectFacts:
    """Which functions of `files` run compiled, and their parameters known to receive tensors (the per-file
    analyses through `cache` and `jobs` worker processes, as the lint's)."""
    overlay = _as_overlay(overlay)
    results = analyze_files(files, cache, jobs, overlay=overlay)
    everything = [*results, *with_context(results, cache, jobs, overlay)]
    summaries = [r.summary for r in everything if r.summary is not None]
    project = Project.from_summaries(summaries)
    compiled = project.compiled_functions({root for s in summaries for root in s.compile_roots})
    return ProjectFacts(frozenset(compiled), project.tensor_parameters(compiled))


def resolve(
    results: list[FileResult],
    is_selected: Callable[[str], bool],
    context: list[FileResult] = (),
    cache: Cache | None = None,
    jobs: int | None = None,
    overlay: Overlay = _DISK,
) -> list[Diagnostic]:
    """Keep findings of compiled functions, apply selection and `# noqa`, report unused noqa.

    `context` files take part in the project analysis but are not reported on; helpers are
    checked again from `overlay`'s text where it has their file.
    """
    require_rules()
    everything = [*results, *context]
    summaries = [r.summary for r in everything if r.summary is not None]
    project = Project.from_summaries(summaries)
    roots = {root for s in summaries for root in s.compile_roots}
    compiled = project.compiled_functions(roots)
    _propagate_tensor_arguments(project, compiled, everything, cache, jobs, overlay)
    diagnostics: list[Diagnostic] = []
    for result in results:
        if result.error is not None:
            if is_selected(result.error.code):
                diagnostics.append(result.error)
            continue
        found: dict[tuple, Finding] = {}
        for qualname, findings in result.findings.items():
            if qualname in compiled:
                for f in findings:
                    if is_selected(f.code):
                        found.setdefault((f.line, f.col, f.code), f)
        diagnostics.extend(
            _suppress(result, sorted(found.values(), key=lambda f: (f.line, f.col, f.code)), is_selected)
        )
    return sorted(diagnostics)


_PROPAGATION_ROUNDS = 4  # forward -> helper -> helper -> helper


def _propagate_tensor_arguments(
    project: Project,
    compiled: dict[str, str],
    results: list[FileResult],
    cache: Cache | None,
    jobs: int | None,
    overlay: Overlay,
) -> None:
    """Re-check helpers whose untyped parameters receive tensors at every compiled call site.

    `def attend(q, k, mask)` called from a `forward` with tensors is checked with
    tensor parameters; its own calls then pass tensors on, round after round.
    The findings of re-checked files are replaced in place; the call graph itself
    does not change (only argument kinds do).
    """
    owner: dict[str, FileResult] = {}
    for result in results:
        if result.summary is not None:
            owner.update(dict.fromkeys(result.summary.functions, result))
            for cls in result.summary.classes.values():
                owner.update(dict.fromkeys((m.qualname for m in cls.methods.values()), result))
    applied: dict[str, frozenset[str]] = {}
    for _ in range(_PROPAGATION_ROUNDS):
        found = project.tensor_parameters(compiled)
        grown = {q: p for q, p in found.items() if q in owner and not p <= applied.get(q, frozenset())}
        if not grown:
            break
        for qualname, params in grown.items():
            applied[qualname] = applied.get(qualname, frozenset()) | params
        files = list({id(owner[q]): owner[q] for q in grown}.values())
        requests = [(result, {q: p for q, p in applied.items() if owner[q] is result}) for result in files]
        for (result, wanted), fresh in zip(requests, _recheck(requests, cache, jobs, overlay)):
            if fresh is None or fresh.summary is None:
                continue
            for qualname in wanted:
                result.findings.pop(qualname, None)
            result.findings.update(fresh.findings)
            for qualname in wanted:
                old, new = project.lookup(qualname), _function(fresh.summary, qualname)
                if old is not None and new is not None:
                    old.tensor_args = new.tensor_args  # its own calls now pass tensors on


def _function(summary: FileSummary, qualname: str):
    if qualname in summary.functions:
        return summary.functions[qualname]
    head, _, name = qualname.rpartition(".")
    cls = summary.classes.get(head)
    return cls.methods.get(name) if cls else None


def _recheck(
    requests: list[tuple[FileResult, dict[str, frozenset[str]]]],
    cache: Cache | None,
    jobs: int | None,
    overlay: Overlay,
) -> list[FileResult | None]:
    """For each (file, tensor_params): the named functions checked again with those parameters
    as tensors (a result holding only them), through the cache and the worker pool."""
    answers: list[FileResult | None] = [None] * len(requests)
    missing: list[tuple[int, tuple, str]] = []
    for index, (result, tensor_params) in enumerate(requests):
        data, _ = _read(Path(result.path), overlay)
        if data is None:
            continue
        is_package = result.path.endswith("__init__.py")
        signature = repr(sorted((q, sorted(p)) for q, p in tensor_params.items()))
        key = hashlib.sha256(f"{Cache.key(data, result.module, is_package)}\0{signature}".encode()).hexdigest()
        answers[index] = cache.get(key) if cache else None
        if answers[index] is None:
            missing.append((index, (result.path, data, result.module, is_package, tensor_params), key))
    for (index, _, key), fresh in zip(missing, _compute([item for _, item, _ in missing], jobs)):
        answers[index] = fresh
        if cache:
            cache.put(key, fresh)
    for (result, _), fresh in zip(requests, answers):
        if fresh is not None:
            fresh.path = result.path
    return answers


def _suppress(result: FileResult, findings: list[Finding], is_selected: Callable[[str], bool]) -> list[Diagnostic]:
    used: dict[int, set[str]] = {}
    kept: list[Diagnostic] = []
    for f in findings:
        directive = result.noqa.get(f.line)
        if directive is not None and (directive[1] is None or f.code in directive[1]):
            used.setdefault(f.line, set()).add(f.code)
            continue
        rule = REGISTRY[f.code]
        safety = f.fix.safety if f.fix else None
        kept.append(
            Diagnostic(
                result.path,
                f.line,
                f.col,
                f.end_line,
                f.end_col,
                f.code,
                rule.name,
                f.message,
                safety,
                rule.dynamo_codes,
                f.fix,
                f.no_fix,
            )
        )
    if is_selected("TP900"):
        unused_rule = REGISTRY["TP900"]
        for line, (col, codes) in sorted(result.noqa.items()):
            if codes is None:
                continue  # a bare noqa may be meant for another linter
            ours = sorted(c for c in codes if c.startswith("TP"))
            unknown = [c for c in ours if c not in REGISTRY]
            unused = [c for c in ours if c in REGISTRY and c not in used.get(line, ()) and is_selected(c)]
            if unknown or unused:
                parts = [f"unused: {', '.join(unused)}"] if unused else []
                parts += [f"unknown: {', '.join(unknown)}"] if unknown else []
                message = f"unused `noqa` directive ({'; '.join(parts)})"
                kept.append(Diagnostic(result.path, line, col, line, col, "TP900", unused_rule.name, message))
    return kept
