"""The build's compile phase: each Python file's regions compiled into its kernel files, in worker
processes, each file handed back as soon as it is done.

A file's compile depends only on its text and on the project's facts (which functions run compiled,
which parameters receive tensors), so files are independent. At most `_IN_FLIGHT_PER_WORKER` files per
worker are in flight and the caller writes each one as it comes back: memory does not grow with the
tree. A file whose compile fails (a RecursionError on an expression nested thousands deep, a bug) comes
back as a diagnostic, to be written without kernels; it never stops the others. Files larger than
`source.MAX_SOURCE_BYTES` are not compiled (the lint reported them already).
"""

from __future__ import annotations

import ast
import gc
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path

from transpiler.source.diagnostics import Diagnostic, file_diagnostic
from transpiler.lint.engine import ProjectFacts
from transpiler.source.reading import read_source
from transpiler.compiler.ir import Region
from transpiler.source.reading import MAX_SOURCE_BYTES

# Enough queued work that no worker waits for the writer, few enough files held at once to bound memory.
_IN_FLIGHT_PER_WORKER = 2
# Fewer files than this are compiled in-process: starting workers costs more than it saves.
_PARALLEL_MIN_FILES = 8


@dataclass(frozen=True)
class Job:
    """One Python file to compile."""

    src: Path
    text: str | None  # the build's rewritten text, or None: the file as it is on disk
    shown: str  # the path its generated comments name (machine-independent: see transpile.shown_path)
    module: str
    depth: int  # directories between the output root and the module
    stem: str  # of its kernel files' names (emit.host.module.kernel_stems)
    hazards: tuple[tuple[str, tuple[int, str]], ...] = ()  # (function, (line, graph break the fixes left in it))


@dataclass(frozen=True)
class Compiled:
    """A file with regions: what to write, and what the report shows."""

    src: Path
    regions: tuple[Region, ...]  # on the lines of the file on disk
    files: tuple[tuple[str, str], ...]  # (name, text): the module first, then its kernel files
    lines: dict[int, str]  # the lines of the text that the regions span
    graphed: tuple[str, ...] = ()  # classes whose forward replays as a CUDA graph
    not_graphed: tuple[tuple[str, int, str], ...] = ()  # blocks that do not: (class, line, why)
    not_fused: tuple[tuple[str, int, str], ...] = ()  # tensor statements left eager: (function, line, why)


@dataclass(frozen=True)
class Failed:
    """A file whose compile raised: written without kernels, reported by `diagnostic`."""

    src: Path
    diagnostic: Diagnostic


Outcome = Compiled | Failed | None  # None: nothing to compile (no region, or the lint reported why)


def compile_files(
    jobs: Iterable[Job],
    facts: ProjectFacts,
    workers: int,
    progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[Job, Outcome]]:
    """Each job with its outcome, in the order they finish; `progress(1)` after each."""
    jobs = list(jobs)
    gc_was_enabled = gc.isenabled()
    gc.enable()  # the CLI turns the collector off for the lint; region finding makes cyclic garbage
    try:
        if workers > 1 and len(jobs) >= _PARALLEL_MIN_FILES:
            outcomes = _in_pool(jobs, facts, workers)
        else:
            outcomes = ((job, compile_file(job, facts)) for job in jobs)
        for job, outcome in outcomes:
            if progress:
                progress(1)
            yield job, outcome
    finally:
        if not gc_was_enabled:
            gc.disable()


def _in_pool(jobs: list[Job], facts: ProjectFacts, workers: int) -> Iterator[tuple[Job, Outcome]]:
    pending = list(reversed(jobs))
    while pending:
        with ProcessPoolExecutor(workers, initializer=_start_worker, initargs=(facts,)) as pool:
            running: dict[Future, Job] = {}
            broken = False
            while (pending or running) and not broken:
                while pending and len(running) < workers * _IN_FLIGHT_PER_WORKER and not broken:
                    try:
                        running[pool.submit(_worker_compile, pending[-1])] = pending[-1]
                        pending.pop()
                    except BrokenProcessPool:  # it broke since the last answer: the job goes to the next pool
                        broken = True
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    job = running.pop(future)
                    outcome = _result(future, job)
                    broken = broken or isinstance(outcome, _Died)
                    yield job, outcome
            # A worker died (killed for memory, or crashed): the files the pool held in flight are lost with it,
            # reported as such; those not sent yet go to a new pool.
            for future, job in running.items():
                yield job, _result(future, job)


class _Died(Failed):
    """The outcome of a file whose worker process died."""


def _result(future: Future, job: Job) -> Outcome:
    try:
        return future.result()
    except BrokenProcessPool:
        return _Died(job.src, _failed(job, "the worker process compiling it died (out of memory?)").diagnostic)


_facts: ProjectFacts | None = None  # the worker's copy, sent once when it starts


def _start_worker(facts: ProjectFacts) -> None:
    global _facts
    _facts = facts
    gc.enable()  # forked from a parent that may have turned it off
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the pool


def _worker_compile(job: Job) -> Outcome:
    return compile_file(job, _facts)


def compile_file(job: Job, facts: ProjectFacts) -> Outcome:
    """The kernels of one file, or why it could not be compiled; never raises for a bad file (set
    TRANSPILE_TRACEBACK=1 to let an internal error raise with its traceback)."""
    try:
        text = job.text if job.text is not None else read_source(job.src)
    except (OSError, UnicodeDecodeError, SyntaxError, LookupError):
        return None  # the lint reported it
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
        return None  # the lint reported it: too large to analyse
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # the lint reported it
    try:
        return _compile(job, text, tree, facts)
    except RecursionError:
        return _failed(job, "cannot compile: an expression is nested deeper than the compiler supports")
    except Exception as error:  # a bug must cost one file its kernels, not the whole tree its output
        if os.environ.get("TRANSPILE_TRACEBACK"):
            raise
        return _failed(job, f"cannot compile: internal error: {type(error).__name__}: {error}")


def _failed(job: Job, why: str) -> Failed:
    message = f"{why}; written without kernels"
    return Failed(job.src, file_diagnostic(str(job.src), "TP901", message))


def _compile(job: Job, text: str, tree: ast.Module, facts: ProjectFacts) -> Compiled | None:
    from emit.host.graphs import graph_forwards
    from emit.host.linears import route_linears, route_siblings
    from emit.host.module import emit, is_generated, newlines_like
    from emit.host.twins import twins
    from transpiler.compiler.linears import linear_sites, sibling_groups
    from transpiler.compiler.passes import compile_unit, start

    if is_generated(text):
        return None  # an earlier output used as input: its kernels are compiled already
    is_package = job.src.name == "__init__.py"
    # Only this module's helpers: with none, the passes that type them again are skipped altogether.
    typed = {q: p for q, p in facts.tensor_params.items() if q.startswith(f"{job.module}.")} or None
    # Generated comments quote the file as it is on disk, not the text the lint's fixes made of it.
    disk = text if job.text is None else read_source(job.src)
    unit = start(job.shown, job.module, is_package, disk, text, frozenset(facts.compiled), typed, dict(job.hazards))
    unit = compile_unit(unit)  # the passes in order (transpiler/compiler/passes.py)
    not_graphed = tuple((n.cls, n.line, n.reason) for n in unit.not_graphed)
    not_fused = tuple((n.function, n.line, n.reason) for n in unit.not_fused)
    graphed = tuple(site.cls for site in unit.graphs)
    if not unit.regions:
        if not unit.graphs:
            return None
        module = graph_forwards(text, list(unit.graphs), job.depth, job.shown)
        files = ((job.src.name, newlines_like(module, text)),)
        return Compiled(job.src, (), files, {}, graphed, not_graphed, not_fused)
    regions = list(unit.regions)
    emitted = emit(
        unit.text, regions, job.shown, job.depth, unit.origin, unit.epilogues, job.stem, unit.convs, unit.backwards
    )
    # Unaligned linear layers' calls in the emitted module, routed through the runtime's `linear`.
    sites = linear_sites(emitted[0].text, job.module, is_package, set(facts.compiled))
    module = route_linears(emitted[0].text, sites, job.depth)
    # Linear layers applied to one input (attention's q, k and v projections): one matmul in autocast training.
    module = route_siblings(module, sibling_groups(module, job.module, is_package, set(facts.compiled)), job.depth)
    module = twins(module, job.module, job.depth)  # classes that stand in for the original's: Auto classes, names
    module = graph_forwards(module, list(unit.graphs), job.depth, job.shown)
    emitted[0] = replace(emitted[0], text=newlines_like(module, text))  # the source's line endings
    shown = tuple(unit.shown(r) for r in regions)
    numbered = disk.splitlines()
    lines = {n: numbered[n - 1] for r in shown for n in range(r.first_line, r.last_line + 1) if n <= len(numbered)}
    files = tuple((f.name, f.text) for f in emitted)
    return Compiled(job.src, shown, files, lines, graphed, not_graphed, not_fused)


def compiled_modules(facts: ProjectFacts) -> frozenset[str]:
    """Every module (and class) that holds a compiled function: a file whose module is not one of them has
    no region, and is not sent to a worker at all."""
    return frozenset(q.rsplit(".", n)[0] for q in facts.compiled for n in range(1, q.count(".") + 1))
