"""The `transpile` command line."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import click

from transpiler.cli.config import ConfigError, Settings, load_settings, settings_fingerprint
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
    "--format", "fmt", type=click.Choice(["text", "json", "sarif", "github"]), default="text", show_default=True
)
@click.option("--statistics", is_flag=True, help="Count findings per rule instead of listing them.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Cache directory (default: ~/.cache/transpile).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Worker processes (default: one per core).")
@click.option("--fix", is_flag=True, help="Apply the safe fixes in place.")
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Also apply (and mark) the unsafe fixes.")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff and write nothing.")
@click.option("--show-fixes", is_flag=True, help="List what was fixed, and why the rest was not.")
@click.option(
    "--side-effects",
    type=click.Choice(["guard", "remove"]),
    help="Fix prints/logging/warnings by guarding (default) or removing them.",
)
def lint(
    paths: tuple[Path, ...],
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    exclude: tuple[str, ...],
    extend_exclude: tuple[str, ...],
    force_exclude: bool | None,
    fmt: str,
    statistics: bool,
    exit_zero: bool,
    no_cache: bool,
    cache_dir: Path | None,
    jobs: int | None,
    fix: bool,
    unsafe_fixes: bool | None,
    diff: bool,
    show_fixes: bool,
    side_effects: str | None,
) -> None:
    """Report constructs that break TorchDynamo's graphs or make it recompile.

    PATHS are files or directories (default: the current directory). With
    `--fix`, fixes are applied in place and only what is left is reported. Exit
    status: 0 clean (or all fixed), 1 findings left (with `--diff`: changes to
    make), 2 bad usage, bad configuration or internal error.
    """
    if statistics and fmt != "text":
        raise click.UsageError("--statistics works only with --format text")
    if fix and diff:
        raise click.UsageError("--diff shows the fixes without applying them; use it without --fix")
    code = _guarded(
        lambda: _lint(
            list(paths) or [Path(".")],
            {
                "select": _codes(select),
                "extend_select": _codes(extend_select),
                "ignore": _codes(ignore),
                "exclude": exclude or None,
                "extend_exclude": extend_exclude or None,
                "force_exclude": force_exclude,
                "cache_dir": str(cache_dir.absolute()) if cache_dir else None,
                "unsafe_fixes": unsafe_fixes,
                "side_effects": side_effects,
            },
            _Output(fmt, statistics, show_fixes),
            no_cache,
            jobs,
            "diff" if diff else "fix" if fix else None,
        )
    )
    sys.exit(EXIT_CLEAN if exit_zero else code)


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
class _Output:
    fmt: str
    statistics: bool
    show_fixes: bool


def _settings(paths: list[Path], overrides: dict) -> Settings:
    """The settings of the nearest configuration above all of `paths`, with `overrides`."""
    from transpiler.lint.rule import REGISTRY

    from transpiler.pipeline.rules import load_rules

    load_rules()  # selectors must name rules that exist
    start = Path(os.path.commonpath([os.path.abspath(p) for p in paths]))
    return load_settings(start if start.is_dir() else start.parent, overrides, REGISTRY.keys())


def _linter(settings: Settings, files: list[Path], cache, jobs: int | None):
    """`lint_files(overlay=None, advance=None)`: the lint of `files` under `settings`, through `cache`
    (None: uncached); `overlay` maps paths to contents read in place of the disk's."""
    # The run allocates millions of small acyclic objects (syntax trees, cached results);
    # the cycle collector would rescan them over and over for nothing (3x slower cache loads).
    gc.disable()
    from transpiler.lint import engine

    selection = settings_fingerprint(settings)

    def lint_files(overlay=None, advance=None):
        return engine.lint(files, settings.is_selected, selection, cache, jobs, advance, overlay)

    return lint_files


def _lint(
    paths: list[Path], overrides: dict, output: _Output, no_cache: bool, jobs: int | None, mode: str | None
) -> int:
    from transpiler.lint import engine
    from transpiler.lint.formats import render

    settings = _settings(paths, overrides)
    found = discover(paths, settings.is_excluded, settings.is_excluded_entry, force_exclude=settings.force_exclude)
    files = found.files
    lint_files = _linter(settings, files, _cache(settings, no_cache), jobs)
    fixed = None
    if mode is None:
        with _progress(len(files)) as advance:
            diagnostics = lint_files(advance=advance)
    else:
        from transpiler.lint.fixer import fix_project

        fixed = fix_project(files, lint_files, settings.unsafe_fixes, settings.side_effects)
        diagnostics = fixed.remaining
        if mode == "diff":
            sys.stdout.write(_diff(fixed.sources))
            return EXIT_FINDINGS if fixed.sources else EXIT_CLEAN
        _write_fixes(fixed.sources)
    diagnostics = diagnostics + [s.diagnostic("skipped") for s in found.skipped if settings.is_selected("TP902")]
    color = output.fmt == "text" and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    rules = engine.rule_infos() if output.fmt == "sarif" else None
    count = len(fixed.applied) if fixed else 0
    sys.stdout.write(
        render(
            diagnostics,
            output.fmt,
            rules=rules,
            statistics=output.statistics,
            color=color,
            unsafe_fixes=settings.unsafe_fixes,
            fixed=count,
        )
    )
    if output.show_fixes and output.fmt == "text":
        sys.stdout.write(_fix_listing(fixed.applied if fixed else [], diagnostics))
    return EXIT_FINDINGS if diagnostics else EXIT_CLEAN


def _diff(sources: dict[Path, str]) -> str:
    """Unified diffs of the fixed sources against the files on disk (nothing is written)."""
    import difflib

    from transpiler.source.reading import read_source

    chunks = []
    for path in sorted(sources):
        before = read_source(path)
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
    from transpiler.lint.fixer import why_not_fixed

    """`--show-fixes`: the fixes applied, then the findings left and why."""
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

    cache_dir = Path(settings.root, settings.cache_dir) if settings.cache_dir else engine.default_cache_dir()
    return None if no_cache else engine.Cache(cache_dir)


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
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Format of the summary.",
)
@click.option("--no-kernels", is_flag=True, help="Write the rewritten source only: no fused kernels.")
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
) -> None:
    """Write SRC (files or directories) into OUT with the graph breaks rewritten.

    `transpile SRC -o OUT` is short for `transpile build SRC -o OUT`. The sources are
    never modified: every file is mirrored under OUT at the same relative path,
    rewritten where a fix applies and copied unchanged otherwise. Exit status: 0 when
    no finding is left, 1 when some are (see the summary), 2 bad usage, bad
    configuration or internal error.
    """
    overrides = {
        "select": _codes(select),
        "extend_select": _codes(extend_select),
        "ignore": _codes(ignore),
        "unsafe_fixes": unsafe_fixes,
        "side_effects": side_effects,
    }
    sys.exit(_guarded(lambda: _build(list(sources), output, overrides, fmt, no_cache, jobs, not no_kernels)))


def _build(
    sources: list[Path], out: Path, overrides: dict, fmt: str, no_cache: bool, jobs: int | None, kernels: bool
) -> int:
    from transpiler.pipeline import build as transpile

    settings = _settings(sources, overrides)
    layout = transpile.plan(sources, out, settings.is_excluded_entry)
    check_writable(layout.out)  # before the work, not after it
    cache = _cache(settings, no_cache)
    lint_files = _linter(settings, layout.python_files, cache, jobs)

    def facts(overlay):  # the lint's last round analysed these very files: answered from its cache
        from transpiler.lint.engine import project_facts

        return project_facts(layout.python_files, overlay, cache, jobs)

    with _progress(len(layout.python_files)) as advance:
        result = transpile.build(
            layout, lint_files, settings.unsafe_fixes, settings.side_effects, advance, kernels, facts, jobs
        )
    sys.stdout.write(transpile.render_summary(result, fmt, settings.unsafe_fixes))
    return EXIT_FINDINGS if result.remaining else EXIT_CLEAN


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
    click.echo(f"# {rule.name} ({rule.code})\n\n{rule.docs()}")


if __name__ == "__main__":
    main(prog_name="transpile")
