"""The `transpile` command line."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import click

from transpiler.cli.config import ConfigError, Settings, load_settings, settings_fingerprint
from transpiler.source.diagnostics import Diagnostic
from transpiler.source.discovery import DiscoveryError, discover
from transpiler.source.writing import WriteError, check_writable, write_atomic

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a process that Ctrl-C ended
# Below this many files a progress bar only flickers.
_PROGRESS_MIN_FILES = 200


def _codes(values: tuple[str, ...]) -> tuple[str, ...] | None:
    """`--select A,B --select C` -> ("A", "B", "C"); None when the option was not given."""
    if not values:
        return None
    return tuple(c.strip().upper() for value in values for c in value.split(",") if c.strip())


def _fail(message: str) -> None:
    click.echo(f"transpile: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


class _DefaultCommandGroup(click.Group):
    """A group that runs its `default_command` when the first argument names no subcommand
    and no option of the group: `transpile SRC -o OUT` means `transpile build SRC -o OUT`.
    (A source directory named like a subcommand needs `build` spelled out, or `./lint`.)"""

    default_command = "build"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        own_options = {opt for param in self.get_params(ctx) for opt in (*param.opts, *param.secondary_opts)}
        if args and args[0] not in self.commands and args[0] not in own_options:
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultCommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="transpile")
def main() -> None:
    """Ahead-of-time compiler for PyTorch models.

    `transpile SRC... -o OUT` (the `build` command) writes SRC with its graph
    breaks rewritten into OUT; `transpile lint` finds graph breaks.
    """


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--select", multiple=True, metavar="CODES", help="Rule codes or prefixes to enable (comma-separated).")
@click.option("--extend-select", multiple=True, metavar="CODES", help="Codes or prefixes to enable in addition.")
@click.option("--ignore", multiple=True, metavar="CODES", help="Rule codes or prefixes to disable.")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Replace the excluded file patterns.")
@click.option("--extend-exclude", multiple=True, metavar="GLOB", help="Exclude more file patterns.")
@click.option(
    "--force-exclude/--no-force-exclude",
    default=None,
    help="Apply excludes to paths named explicitly too (for pre-commit).",
)
@click.option(
    "--respect-gitignore/--no-respect-gitignore",
    default=None,
    help="Skip what .gitignore files ignore when walking directories (default: on).",
)
@click.option(
    "--format",
    "--output-format",
    "fmt",
    type=click.Choice(["text", "json", "sarif", "github"]),
    default="text",
    show_default=True,
)
@click.option("--statistics", is_flag=True, help="Count findings per rule instead of listing them.")
@click.option("-e", "--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="Exit 1 when a fix was applied, even if nothing is left.")
@click.option("-q", "--quiet", is_flag=True, help="Print the findings only, without the closing summary.")
@click.option(
    "--config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Read the settings from this file (a pyproject.toml's [tool.transpile], or a TOML file of the keys).",
)
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Cache directory (default: ~/.cache/transpile).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Worker processes (default: one per core).")
@click.option("--fix", is_flag=True, help="Apply the safe fixes in place.")
@click.option(
    "--fix-only", is_flag=True, help="Apply the fixes, report nothing that is left and exit 0 (implies --fix)."
)
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Also apply (and mark) the unsafe fixes.")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff and write nothing.")
@click.option("--show-fixes", is_flag=True, help="List what was fixed, and why the rest was not.")
@click.option(
    "--side-effects",
    type=click.Choice(["guard", "remove"]),
    help="Fix prints/logging/warnings by guarding (default) or removing them.",
)
@click.option(
    "--stdin-filename",
    type=click.Path(path_type=Path),
    help="The file's name when its text is read from standard input (PATH `-`): for settings and output.",
)
def lint(
    paths: tuple[Path, ...],
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    exclude: tuple[str, ...],
    extend_exclude: tuple[str, ...],
    force_exclude: bool | None,
    respect_gitignore: bool | None,
    fmt: str,
    statistics: bool,
    exit_zero: bool,
    exit_non_zero_on_fix: bool,
    quiet: bool,
    config: Path | None,
    no_cache: bool,
    cache_dir: Path | None,
    jobs: int | None,
    fix: bool,
    fix_only: bool,
    unsafe_fixes: bool | None,
    diff: bool,
    show_fixes: bool,
    side_effects: str | None,
    stdin_filename: Path | None,
) -> None:
    """Report constructs that break TorchDynamo's graphs or make it recompile.

    PATHS are files or directories (default: the current directory), or `-` to
    read one file from standard input (named by `--stdin-filename`; with `--fix`
    the fixed text is printed and the findings go to standard error). With
    `--fix`, fixes are applied in place and only what is left is reported. Exit
    status: 0 clean (or all fixed), 1 findings left (with `--diff`: changes to
    make), 2 bad usage, bad configuration or internal error.
    """
    if statistics and fmt != "text":
        raise click.UsageError("--statistics works only with --format text")
    if (fix or fix_only) and diff:
        raise click.UsageError("--diff shows the fixes without applying them; use it without --fix")
    stdin = Path("-") in paths or (not paths and stdin_filename is not None)
    if stdin and len(paths) > 1:
        raise click.UsageError("`-` (standard input) cannot be linted with other paths")
    overrides = {
        "select": _codes(select),
        "extend_select": _codes(extend_select),
        "ignore": _codes(ignore),
        "exclude": exclude or None,
        "extend_exclude": extend_exclude or None,
        "force_exclude": force_exclude,
        "respect_gitignore": respect_gitignore,
        "cache_dir": str(cache_dir.absolute()) if cache_dir else None,
        "unsafe_fixes": unsafe_fixes,
        "side_effects": side_effects,
    }
    output = _Output(fmt, statistics, show_fixes, quiet, fix_only)
    mode = "diff" if diff else "fix" if fix or fix_only else None
    run = _Run(overrides, config, no_cache, jobs, _Exits(exit_zero, exit_non_zero_on_fix))
    if stdin:
        sys.exit(_guarded(lambda: _lint_stdin(stdin_filename, run, output, mode)))
    sys.exit(_guarded(lambda: _lint(list(paths) or [Path(".")], run, output, mode)))


def _guarded(run: Callable[[], int]) -> int:
    """`run()`, with bad paths, bad configuration, an output that cannot be written and internal errors turned
    into exit status 2, and an interrupt into 130 (what was written by then is complete: writes are atomic)."""
    try:
        return run()
    except KeyboardInterrupt:
        click.echo("transpile: interrupted", err=True)
        return EXIT_INTERRUPTED
    except (ConfigError, DiscoveryError, WriteError) as err:
        _fail(str(err))
    except Exception as err:  # an internal error must still exit 2 with a short message
        if os.environ.get("TRANSPILE_TRACEBACK"):
            raise
        _fail(f"internal error: {type(err).__name__}: {err} (set TRANSPILE_TRACEBACK=1 for the traceback)")


@dataclass(frozen=True)
class _Exits:
    """The exit status options both commands take, as ruff's: `--exit-zero` turns findings left into 0 (never a
    usage or internal error), `--exit-non-zero-on-fix` makes any fix applied 1."""

    zero: bool = False
    on_fix: bool = False

    def status(self, left: int, fixed: int) -> int:
        if self.zero:
            return EXIT_CLEAN
        return EXIT_FINDINGS if left or (self.on_fix and fixed) else EXIT_CLEAN


@dataclass(frozen=True)
class _Run:
    """What a lint or build run is given beyond its paths: setting overrides, `--config`, the cache and the exits."""

    overrides: dict
    config: Path | None
    no_cache: bool
    jobs: int | None
    exits: _Exits


@dataclass(frozen=True)
class _Output:
    fmt: str
    statistics: bool
    show_fixes: bool
    quiet: bool = False
    fix_only: bool = False


def _settings(paths: list[Path], overrides: dict, config: Path | None = None) -> Settings:
    """The settings of `config`, or of the nearest configuration above all of `paths`, with `overrides`."""
    from transpiler.lint.rule import REGISTRY

    from transpiler.pipeline.rules import load_rules

    load_rules()  # selectors must name rules that exist
    start = Path(os.path.commonpath([os.path.abspath(p) for p in paths]))
    return load_settings(start if start.is_dir() else start.parent, overrides, REGISTRY.keys(), config)


def _linter(settings: Settings, files: list[Path], cache, jobs: int | None, given: Mapping[Path, bytes] = {}):
    """`lint_files(overlay=None, advance=None)`: the lint of `files` under `settings`, through `cache`
    (None: uncached); `overlay` maps paths to contents read in place of the disk's, over `given`'s.
    Findings per-file-ignores turns off are dropped here, so that neither lint nor build fixes them."""
    # The run allocates millions of small acyclic objects (syntax trees, cached results);
    # the cycle collector would rescan them over and over for nothing (3x slower cache loads).
    gc.disable()
    from transpiler.lint import engine

    selection = settings_fingerprint(settings)

    def lint_files(overlay=None, advance=None):
        contents = {**given, **(overlay or {})}
        found = engine.lint(files, settings.is_selected, selection, cache, jobs, advance, contents)
        return [d for d in found if not _per_file_ignored(settings, d)] if settings.per_file_ignores else found

    return lint_files


def _per_file_ignored(settings: Settings, d: Diagnostic) -> bool:
    ignored = settings.ignored_in(d.path)
    return bool(ignored) and any(s == "ALL" or d.code.startswith(s) for s in ignored)


def _excluded_entry(settings: Settings) -> Callable[[Path], bool]:
    """What walking a directory skips: the excludes, and what .gitignore files ignore (unless turned off)."""
    if not settings.respect_gitignore:
        return settings.is_excluded_entry
    from transpiler.cli import gitignore

    if not gitignore.available():
        click.echo(f"transpile: warning: {gitignore.MISSING}", err=True)
        return settings.is_excluded_entry
    ignored = gitignore.GitIgnore().ignored
    return lambda path: settings.is_excluded_entry(path) or ignored(path)


def _lint(paths: list[Path], run: _Run, output: _Output, mode: str | None) -> int:
    settings = _settings(paths, run.overrides, run.config)
    found = discover(paths, settings.is_excluded, _excluded_entry(settings), force_exclude=settings.force_exclude)
    skipped = [s.diagnostic("skipped") for s in found.skipped if settings.is_selected("TP902")]
    return _check(settings, found.files, {}, skipped, run, output, mode, sys.stdout)


def _lint_stdin(name: Path | None, run: _Run, output: _Output, mode: str | None) -> int:
    """`transpile lint - [--stdin-filename NAME]`: one file's text from standard input, named NAME (or `-`)
    for the settings, the module name and the output. As ruff: with `--fix` the fixed text is printed to
    standard output (the text unchanged when nothing applies) and the findings to standard error; a NAME
    that the excludes match with `--force-exclude` is not linted."""
    data = click.get_binary_stream("stdin").read()
    path = name or Path("-")
    settings = _settings([path if name else Path(".")], run.overrides, run.config)
    excluded = name is not None and settings.force_exclude and settings.is_excluded(name)
    files = [] if excluded else [path]
    report = sys.stderr if mode == "fix" else sys.stdout
    return _check(settings, files, {path: data}, [], run, output, mode, report)


def _check(
    settings: Settings,
    files: list[Path],
    given: dict[Path, bytes],
    extra: list[Diagnostic],
    run: _Run,
    output: _Output,
    mode: str | None,
    report,
) -> int:
    """Lint (and with `mode` "fix" or "diff", fix) `files`, some read from `given` rather than disk; write the
    report to `report` and return the exit status."""
    from transpiler.lint.formats import render

    cache = _cache(settings, run.no_cache)
    lint_files = _linter(settings, files, cache, run.jobs, given)
    fixed = None
    if mode is None:
        with _progress(len(files)) as advance:
            diagnostics = lint_files(advance=advance)
    else:
        from transpiler.lint.fixer import encode_like, fix_project

        fixed = fix_project(files, lint_files, settings.unsafe_fixes, settings.side_effects, given)
        diagnostics = fixed.remaining
        if mode == "diff":
            sys.stdout.write(_diff(fixed.sources, given))
            return EXIT_FINDINGS if fixed.sources else EXIT_CLEAN
        _write_fixes({p: t for p, t in fixed.sources.items() if p not in given})
        for path, data in given.items():  # standard input's text, fixed or not, goes back to standard output
            out = click.get_binary_stream("stdout")
            out.write(encode_like(data, fixed.sources[path]) if path in fixed.sources else data)
            out.flush()
    count = len(fixed.applied) if fixed else 0
    if output.fix_only:
        if count:
            report.write(f"Fixed {count} problem{'' if count == 1 else 's'}.\n")
        return run.exits.status(0, count)
    diagnostics = diagnostics + extra
    color = output.fmt == "text" and report.isatty() and "NO_COLOR" not in os.environ
    rendered = render(
        diagnostics,
        output.fmt,
        rules=_rule_infos() if output.fmt == "sarif" else None,
        statistics=output.statistics,
        color=color,
        unsafe_fixes=settings.unsafe_fixes,
        fixed=count,
        edits=_edits(diagnostics, given, settings.side_effects) if output.fmt in ("json", "sarif") else None,
        summary=not output.quiet,
    )
    report.write(rendered)
    if output.show_fixes and output.fmt == "text":
        report.write(_fix_listing(fixed.applied if fixed else [], diagnostics))
    return run.exits.status(len(diagnostics), count)


def _edits(diagnostics: list[Diagnostic], given: Mapping[Path, bytes], side_effects: str) -> dict:
    """Each fixable finding's fix as text edits of its file (files that cannot be read again give none)."""
    from transpiler.lint.fixer import fix_edits
    from transpiler.source.reading import decode, read_source

    by_path: dict[str, list[Diagnostic]] = {}
    for d in diagnostics:
        if d.fix is not None:
            by_path.setdefault(d.path, []).append(d)
    edits = {}
    for path, found in by_path.items():
        try:
            text = decode(given[Path(path)]) if Path(path) in given else read_source(Path(path))
            edits.update(fix_edits(text, found, side_effects))
        except Exception:  # a file changed or gone since it was linted: its findings keep their titles only
            continue
    return edits


def _rule_infos() -> dict:
    """What SARIF says of each rule: its summary, its documentation's first section and where that lives."""
    from transpiler.lint.formats import RuleInfo
    from transpiler.lint.rule import REGISTRY
    from transpiler.source.diagnostics import rule_url

    from transpiler.cli.ruledocs import description

    return {
        code: RuleInfo(code, rule.name, rule.summary, rule_url(code, rule.name), rule.dynamo_codes, description(rule))
        for code, rule in sorted(REGISTRY.items())
    }


def _diff(sources: dict[Path, str], given: Mapping[Path, bytes] = {}) -> str:
    """Unified diffs of the fixed sources against the files on disk (nothing is written)."""
    import difflib

    from transpiler.source.reading import decode, read_source

    chunks = []
    for path in sorted(sources):
        before = decode(given[path]) if path in given else read_source(path)
        chunks.extend(
            difflib.unified_diff(
                before.splitlines(keepends=True),
                sources[path].splitlines(keepends=True),
                fromfile=f"a/{path}",
                tofile=f"b/{path}",
            )
        )
    return "".join(chunks)


def _write_fixes(sources: dict[Path, str]) -> None:
    from transpiler.source.reading import encode_source

    for path, text in sources.items():
        write_atomic(path, encode_source(path, text))


def _fix_listing(applied: list, remaining: list) -> str:
    """`--show-fixes`: the fixes applied, then the findings left and why."""
    from transpiler.lint.fixer import why_not_fixed

    lines = []
    if applied:
        lines.append(f"Fixed {len(applied)} problem{'' if len(applied) == 1 else 's'}:")
        lines += [f"  {d.path}:{d.line}:{d.col}: {d.code} {d.fix.title} ({d.fix.safety})" for d in sorted(applied)]
    if remaining:
        lines.append("Not fixed:")
        lines += [f"  {d.path}:{d.line}:{d.col}: {d.code} {why_not_fixed(d)}" for d in remaining]
    return "\n".join(lines) + "\n" if lines else ""


def _cache(settings: Settings, no_cache: bool):
    """The lint's result cache under `settings`, or None with `no_cache`."""
    from transpiler.lint import engine

    return None if no_cache else engine.Cache(_cache_dir(settings))


def _cache_dir(settings: Settings) -> Path:
    from transpiler.lint import engine

    return Path(settings.root, settings.cache_dir) if settings.cache_dir else engine.default_cache_dir()


def _progress(total: int):
    """A progress bar on stderr for long runs on a terminal; otherwise nothing. `advance(n, phase="linting")`
    ticks the bar of `phase` (each phase's bar appears when it first ticks, `total` long)."""
    if total < _PROGRESS_MIN_FILES or not sys.stderr.isatty():
        return nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    class _Bar:
        def __enter__(self):
            self.progress = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.progress.__enter__()
            tasks = {}

            def advance(n: int, phase: str = "linting") -> None:
                if phase not in tasks:
                    tasks[phase] = self.progress.add_task(phase, total=total)
                self.progress.advance(tasks[phase], n)

            return advance

        def __exit__(self, *exc):
            return self.progress.__exit__(*exc)

    return _Bar()


@main.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="SRC...")
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), required=True, help="Output directory (created or updated)."
)
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Also apply the unsafe fixes.")
@click.option(
    "--side-effects",
    type=click.Choice(["guard", "remove"]),
    help="Guard prints/logging/warnings (default) or remove them.",
)
@click.option("--select", multiple=True, metavar="CODES", help="Rule codes or prefixes to enable (comma-separated).")
@click.option("--extend-select", multiple=True, metavar="CODES", help="Codes or prefixes to enable in addition.")
@click.option("--ignore", multiple=True, metavar="CODES", help="Rule codes or prefixes to disable.")
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    help="Worker processes for the lint and the compile (default: one per core).",
)
@click.option("--no-cache", is_flag=True, help="Neither read nor write the lint cache.")
@click.option(
    "--format",
    "--output-format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Format of the summary.",
)
@click.option("--no-kernels", is_flag=True, help="Write the rewritten source only: no fused kernels.")
@click.option(
    "--targets",
    metavar="TARGETS",
    help="Also build the kernels ahead of time for these CPU levels and CUDA capabilities (as `transpile precompile`).",
)
@click.option(
    "--signatures",
    "signatures",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Recorded call signatures of the Triton kernels, for CUDA targets (see `transpile precompile`).",
)
@click.option("-e", "--exit-zero", is_flag=True, help="Exit 0 even when findings are left.")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="Exit 1 when a fix was applied, even if nothing is left.")
@click.option(
    "-v", "--verbose", is_flag=True, help="Name every region and class, and list each finding left with its reason."
)
@click.option("-q", "--quiet", is_flag=True, help="Print only the findings left, one a line.")
@click.option(
    "--config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Read the settings from this file (a pyproject.toml's [tool.transpile], or a TOML file of the keys).",
)
def build(
    sources: tuple[Path, ...],
    output: Path,
    unsafe_fixes: bool | None,
    side_effects: str | None,
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    jobs: int | None,
    no_cache: bool,
    fmt: str,
    no_kernels: bool,
    targets: str | None,
    signatures: tuple[Path, ...],
    exit_zero: bool,
    exit_non_zero_on_fix: bool,
    verbose: bool,
    quiet: bool,
    config: Path | None,
) -> None:
    """Write SRC (files or directories) into OUT with the graph breaks rewritten.

    `transpile SRC -o OUT` is short for `transpile build SRC -o OUT`. The sources are
    never modified: every file is mirrored under OUT at the same relative path,
    rewritten where a fix applies and copied unchanged otherwise. The summary counts
    what was done; `--verbose` names it all, `-q` prints only the findings left.
    Exit status: 0 when no finding is left, 1 when some are (see the summary), 2 bad
    usage, bad configuration or internal error.
    """
    if verbose and quiet:
        raise click.UsageError("--verbose and --quiet ask for opposite things; use one")
    if targets is not None and no_kernels:
        raise click.UsageError("--targets builds the kernels --no-kernels leaves out; use one")
    overrides = {
        "select": _codes(select),
        "extend_select": _codes(extend_select),
        "ignore": _codes(ignore),
        "unsafe_fixes": unsafe_fixes,
        "side_effects": side_effects,
    }
    run = _Run(overrides, config, no_cache, jobs, _Exits(exit_zero, exit_non_zero_on_fix))
    detail = "verbose" if verbose else "quiet" if quiet else "compact"
    if signatures and targets is None:
        raise click.UsageError("--signatures are compiled for --targets: name the CUDA targets")
    ahead = (targets, signatures) if targets is not None else None
    sys.exit(_guarded(lambda: _build(list(sources), output, run, fmt, detail, not no_kernels, ahead)))


def _build(
    sources: list[Path],
    out: Path,
    run: _Run,
    fmt: str,
    detail: str,
    kernels: bool,
    ahead: tuple[str, tuple[Path, ...]] | None = None,
) -> int:
    from transpiler.pipeline import build as transpile
    from transpiler.pipeline.precompiling import PrecompileError, parse_targets, precompile, render

    try:
        levels = parse_targets(ahead[0]) if ahead is not None else ()  # before the work, not after it
    except PrecompileError as error:
        raise click.UsageError(str(error)) from error
    settings = _settings(sources, run.overrides, run.config)
    # The copy is of the whole tree, .gitignore'd files included (data files a model reads are often ignored).
    layout = transpile.plan(sources, out, settings.is_excluded_entry)
    check_writable(layout.out)  # before the work, not after it
    cache = _cache(settings, run.no_cache)
    jobs = run.jobs
    lint_files = _linter(settings, layout.python_files, cache, jobs)

    def facts(overlay):  # the lint's last round analysed these very files: answered from its cache
        from transpiler.lint.engine import project_facts

        return project_facts(layout.python_files, overlay, cache, jobs)

    with _progress(len(layout.python_files)) as advance:
        result = transpile.build(
            layout, lint_files, settings.unsafe_fixes, settings.side_effects, advance, kernels, facts, jobs
        )
    sys.stdout.write(transpile.render_summary(result, fmt, settings.unsafe_fixes, detail))
    status = run.exits.status(len(result.remaining), len(result.applied))
    if levels:
        try:
            precompiled = precompile(layout.out, levels, jobs or os.cpu_count() or 1, ahead[1])
        except PrecompileError as error:
            _fail(str(error))
        # On stderr: stdout is the summary, JSON with `--format json`.
        sys.stderr.write(render(precompiled, layout.out))
        status = max(status, EXIT_FINDINGS if precompiled.failed else EXIT_CLEAN)
    return status


@main.command()
@click.argument("output", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="OUT")
@click.option(
    "--targets",
    required=True,
    metavar="TARGETS",
    help="The targets, comma-separated: CPU levels (x86-64-v2, x86-64-v3, x86-64-v4) and CUDA capabilities"
    " (sm_80, sm_90, ...).",
)
@click.option(
    "--signatures",
    "signatures",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file of the Triton kernels' call signatures, recorded by a run with TRANSPILE_RECORD_SIGNATURES=FILE"
    " (repeatable; those of earlier runs are kept in the manifest).",
)
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Compilers run at once (default: one per core).")
def precompile(output: Path, targets: str, signatures: tuple[Path, ...], jobs: int | None) -> None:
    """Build the kernels of the output tree OUT ahead of time, for each target.

    C++ kernel files are built per CPU level into libraries beside them;
    Triton kernels are compiled per CUDA capability for the call signatures
    that runs recorded. Their hashes go into OUT/transpile-artifacts.json; the
    transpiled modules load what fits the machine, with no compiler, or build
    the kernels themselves (and say why) where nothing fits. Exit status: 0
    when everything was built, 1 when some failed (those kernels are built on
    first use), 2 bad usage.
    """
    sys.exit(_guarded(lambda: _precompile(output, targets, signatures, jobs)))


def _precompile(out: Path, targets: str, signatures: tuple[Path, ...], jobs: int | None) -> int:
    from transpiler.pipeline.build import NotBuilt
    from transpiler.pipeline.precompiling import PrecompileError, parse_targets, precompile, render

    try:
        result = precompile(out, parse_targets(targets), jobs or os.cpu_count() or 1, signatures)
    except (PrecompileError, NotBuilt) as error:
        _fail(str(error))
    sys.stdout.write(render(result, out))
    return EXIT_FINDINGS if result.failed else EXIT_CLEAN


@main.command()
@click.argument("output", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="OUT")
@click.option("--cases", type=click.IntRange(min=1), default=12, show_default=True, help="Cases computed per kernel.")
@click.option("--seed", type=int, default=0, show_default=True, help="The first seed of the drawn cases.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--no-gradients", is_flag=True, help="Check the forward kernels only, not their backward kernels.")
@click.option("--nonfinite", is_flag=True, help="Also draw NaN and infinities (their placement is judged strictly).")
@click.option(
    "--calls",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Also check each kernel on the calls a run captured here (TRANSPILE_CAPTURE_CALLS=DIR): a model's own inputs.",
)
@click.option("--format", "--output-format", "fmt", type=click.Choice(["text", "json"]), default="text")
def verify(
    output: Path, cases: int, seed: int, device: str, no_gradients: bool, nonfinite: bool, calls: Path | None, fmt: str
) -> None:
    """Run every kernel of the output tree OUT against its region's eager code.

    Each kernel is called beside the statements it replaces on generated
    inputs (shapes, dtypes, layouts, NaN and infinities), and on the calls a
    run captured (`--calls`), and under autograd where it trains. Per kernel:
    equal, within tolerance, different (with the first difference and a shrunk
    case, or the captured call) or not exercised (and why). Exit status: 0
    when no kernel is different, 1 when one is, 2 bad usage.
    """
    sys.exit(_guarded(lambda: _verify(output, cases, seed, device, not no_gradients, nonfinite, calls, fmt)))


def _verify(
    out: Path, cases: int, seed: int, device: str, gradients: bool, nonfinite: bool, calls: Path | None, fmt: str
) -> int:
    from transpiler.pipeline.build import NotBuilt
    from transpiler.pipeline.verifying import VerifyError, render, verify

    try:
        verdicts = verify(out, cases, seed, device, gradients, nonfinite, calls)
    except (VerifyError, NotBuilt) as error:
        _fail(str(error))
    sys.stdout.write(render(verdicts, fmt))
    return EXIT_FINDINGS if any(v.outcome == "different" for v in verdicts) else EXIT_CLEAN


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--passes", is_flag=True, help="Print the IR after each compiler pass, in the order the build runs them.")
def explain(files: tuple[Path, ...], passes: bool) -> None:
    """Print the regions that would become fused kernels, as readable IR."""
    sys.exit(_guarded(lambda: _explain(list(files), passes)))


def _explain(files: list[Path], passes: bool) -> int:
    from transpiler.pipeline.explaining import ExplainError, explain_files
    from transpiler.source.discovery import not_regular

    for path in files:
        if (kind := not_regular(path)) is not None:  # reading a FIFO would block forever
            _fail(f"{path}: {kind}")
    try:
        for text in explain_files(files, passes):
            click.echo(text)
    except ExplainError as error:
        _fail(str(error))
    return EXIT_CLEAN


@main.command()
@click.argument("code", required=False)
def rules(code: str | None) -> None:
    """List the rules, or explain one (`transpile rules TP101`)."""
    from transpiler.lint.rule import REGISTRY
    from transpiler.pipeline.rules import load_rules

    load_rules()
    if code is None:
        for rule in sorted(REGISTRY.values(), key=lambda r: r.code):
            dynamo = ", ".join(rule.dynamo_codes)
            click.echo(f"{rule.code}  {rule.name:<40} {dynamo}")
        return
    rule = REGISTRY.get(code.upper())
    if rule is None:
        _fail(f"unknown rule code {code!r} (see `transpile rules`)")
    from transpiler.cli.ruledocs import explain

    click.echo(explain(rule), nl=False)


@main.command()
@click.option(
    "--stale",
    is_flag=True,
    help="Remove only the lint caches of other versions of transpile (they pile up with upgrades); keep the rest.",
)
@click.option("--cache-dir", type=click.Path(path_type=Path), help="The lint cache directory, if not the default.")
def clean(stale: bool, cache_dir: Path | None) -> None:
    """Remove transpile's caches: the lint's results and the C++ kernels built.

    Only what transpile wrote is removed: the lint cache's folders (one per
    version of the tool) and the kernel libraries with their records. Says what
    was removed, where, and how much space it freed.
    """
    sys.exit(_guarded(lambda: _clean(stale, cache_dir)))


def _clean(stale: bool, cache_dir: Path | None) -> int:
    from transpiler.cli.cleaning import kernel_cache_files, lint_cache_folders, remove

    settings = _settings([Path(".")], {"cache_dir": str(cache_dir.absolute()) if cache_dir else None})
    lint_dir = _cache_dir(settings)
    found = [("lint cache folder", lint_dir, lint_cache_folders(lint_dir, keep_current=stale))]
    if not stale:
        found.append(("C++ kernel file", *kernel_cache_files()))
    said = False
    for noun, where, paths in found:
        if paths:
            count, size = remove(paths)
            click.echo(f"Removed {count} {noun}{'' if count == 1 else 's'} ({size / 1e6:.1f} MB) from {where}.")
            said = True
    if not said:
        click.echo("Nothing to remove.")
    return EXIT_CLEAN


if __name__ == "__main__":
    main(prog_name="transpile")
