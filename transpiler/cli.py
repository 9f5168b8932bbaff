"""The `transpile` command line."""

from __future__ import annotations

import gc
import os
import sys
from contextlib import nullcontext
from pathlib import Path

import click

from transpiler.config import ConfigError, load_settings, settings_fingerprint
from transpiler.discovery import DiscoveryError, discover

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="transpile")
def main() -> None:
    """Ahead-of-time compiler for PyTorch models; `transpile lint` finds graph breaks."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--select", multiple=True, metavar="CODES", help="Rule codes or prefixes to enable (comma-separated).")
@click.option("--extend-select", multiple=True, metavar="CODES", help="Codes or prefixes to enable in addition.")
@click.option("--ignore", multiple=True, metavar="CODES", help="Rule codes or prefixes to disable.")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Replace the excluded file patterns.")
@click.option("--extend-exclude", multiple=True, metavar="GLOB", help="Exclude more file patterns.")
@click.option("--force-exclude/--no-force-exclude", default=None, help="Apply excludes to paths named explicitly too (for pre-commit).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif", "github"]), default="text", show_default=True)
@click.option("--statistics", is_flag=True, help="Count findings per rule instead of listing them.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Cache directory (default: ~/.cache/transpile).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Worker processes (default: one per core).")
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
) -> None:
    """Report constructs that break TorchDynamo's graphs or make it recompile.

    PATHS are files or directories (default: the current directory). Exit
    status: 0 clean, 1 findings, 2 bad usage, bad configuration or internal error.
    """
    if statistics and fmt != "text":
        raise click.UsageError("--statistics works only with --format text")
    try:
        code = _lint(
            list(paths) or [Path(".")],
            {
                "select": _codes(select),
                "extend_select": _codes(extend_select),
                "ignore": _codes(ignore),
                "exclude": exclude or None,
                "extend_exclude": extend_exclude or None,
                "force_exclude": force_exclude,
                "cache_dir": str(cache_dir.absolute()) if cache_dir else None,
            },
            fmt,
            statistics,
            no_cache,
            jobs,
        )
    except (ConfigError, DiscoveryError) as err:
        _fail(str(err))
    except Exception as err:  # an internal error must still exit 2 with a short message
        if os.environ.get("TRANSPILE_TRACEBACK"):
            raise
        _fail(f"internal error: {type(err).__name__}: {err} (set TRANSPILE_TRACEBACK=1 for the traceback)")
    sys.exit(EXIT_CLEAN if exit_zero else code)


def _lint(paths: list[Path], overrides: dict, fmt: str, statistics: bool, no_cache: bool, jobs: int | None) -> int:
    # The run allocates millions of small acyclic objects (syntax trees, cached results);
    # the cycle collector would rescan them over and over for nothing (3x slower cache loads).
    gc.disable()
    from transpiler import engine
    from transpiler.formats import render

    start = Path(os.path.commonpath([os.path.abspath(p) for p in paths]))
    settings = load_settings(start if start.is_dir() else start.parent, overrides)
    files = discover(paths, settings.is_excluded, settings.is_excluded_entry, force_exclude=settings.force_exclude)
    cache_dir = Path(settings.root, settings.cache_dir) if settings.cache_dir else engine.default_cache_dir()
    cache = None if no_cache else engine.Cache(cache_dir)
    with _progress(len(files)) as advance:
        diagnostics = engine.lint(files, settings.is_selected, settings_fingerprint(settings), cache, jobs, advance)
    color = fmt == "text" and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    rules = engine.rule_infos() if fmt == "sarif" else None
    sys.stdout.write(render(diagnostics, fmt, rules=rules, statistics=statistics, color=color))
    return EXIT_FINDINGS if diagnostics else EXIT_CLEAN


def _progress(total: int):
    """A progress bar on stderr for long runs on a terminal; otherwise nothing."""
    if total < _PROGRESS_MIN_FILES or not sys.stderr.isatty():
        return nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    class _Bar:
        def __enter__(self):
            self.progress = Progress(
                "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                console=Console(stderr=True), transient=True,
            )
            self.progress.__enter__()
            task = self.progress.add_task("linting", total=total)
            return lambda n: self.progress.advance(task, n)

        def __exit__(self, *exc):
            return self.progress.__exit__(*exc)

    return _Bar()


@main.command()
@click.argument("code", required=False)
def rules(code: str | None) -> None:
    """List the rules, or explain one (`transpile rules TP101`)."""
    from transpiler import engine
    from transpiler.rule import REGISTRY

    engine.load_rules()
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
