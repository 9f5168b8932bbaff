"""Run a lint rule's example snippet under TorchDynamo and report what happened.

A snippet is a complete Python module source that defines ``class Model(nn.Module)``
(constructible with no arguments) and optionally ``make_inputs(call: int) -> tuple``
(default: ``(torch.randn(8),)`` on every call).  :func:`run_example` runs it

1. eagerly (must succeed, else :class:`ExampleError`),
2. under ``torch._dynamo.explain`` (graph / break counts, break lines, reasons),
3. under ``torch.compile(fullgraph=True, backend="eager")`` (error text and line),
4. under ``torch.compile(backend=CompileCounter())`` for ``calls`` calls
   (compiled frame count, guard-failure / recompile reasons, whole-frame skip),

and returns a :class:`DynamoReport`.  Line numbers are line numbers of the snippet
source (1-based), which is compiled under a fake filename registered in
``linecache``.  Every phase starts from ``torch._dynamo.reset()``, a fresh
``Model().eval()`` and the same RNG seed; torch's log handlers and Python warnings
are silenced (and captured) for the duration and restored afterwards.

Observed on torch 2.13 (see /work/shared/graph-breaks.md): ``explain`` misses a
break that happens before the first traced op, and reports 0 graphs with no
break reasons when the whole frame is skipped (break inside a loop / ``try`` /
user context manager); ``DynamoReport.breaks_at`` therefore also accepts the
innermost line of the ``fullgraph=True`` error.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import linecache
import logging
import re
import sys
import threading
import time
import traceback
import types
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch._dynamo
import torch._dynamo.testing
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["DynamoReport", "ExampleError", "run_example", "gb_codes_in", "load_example", "example_inputs"]

_GB_RE = re.compile(r"/gb/gb(\d{3,5})\.html", re.IGNORECASE)
_COUNTER = itertools.count()
_LOCK = threading.Lock()  # dynamo state is global: one run_example at a time


class ExampleError(RuntimeError):
    """The example snippet itself is broken (does not compile, has no Model, or
    raises when run eagerly)."""


def gb_codes_in(text: str | None) -> list[str]:
    """``GBnnnn`` codes mentioned in a dynamo message (via its graph-break-site URL)."""
    if not text:
        return []
    seen: dict[str, None] = {}
    for m in _GB_RE.finditer(text):
        seen[f"GB{m.group(1)}"] = None
    return list(seen)


@dataclass
class DynamoReport:
    name: str
    filename: str  # fake filename the snippet was compiled under, e.g. "<example foo>"
    source: str
    # -- torch._dynamo.explain (fullgraph=False) --
    graph_count: int = 0
    graph_break_count: int = 0  # explain's graph_count - 1, clamped at 0
    break_lines: set[int] = field(default_factory=set)  # innermost example line per break
    break_reasons: list[str] = field(default_factory=list)
    explain_error: str | None = None  # explain itself raised (text)
    # New entries of torch._dynamo.utils.counters during the explain run:
    # "graph_break" (resumed breaks; includes some explain misses) and
    # "unimplemented" (every Unsupported raised while tracing: the GB0170 text of a
    # data-dependent branch, whose explain reason is only "generic_jump ...", and
    # frame skips such as GB7000).  Counters are global, so these may also hold
    # reasons from library frames dynamo tried while the example ran (e.g. GB0003
    # from inside inspect.stack()).
    counter_break_reasons: list[str] = field(default_factory=list)
    unimplemented_reasons: list[str] = field(default_factory=list)
    # -- torch.compile(fullgraph=True, backend="eager") --
    fullgraph_error: str | None = None
    fullgraph_error_type: str | None = None
    fullgraph_error_line: int | None = None  # innermost example line in the error
    fullgraph_error_lines: list[int] = field(default_factory=list)  # outer -> inner
    # -- torch.compile(backend=CompileCounter()), `calls` calls --
    frame_count: int = 0  # graphs compiled over all calls (a break => >1 on call 0)
    frame_counts: list[int] = field(default_factory=list)  # cumulative, after each call
    # one entry per recompilation attempt (guard failures of all cache entries,
    # joined); includes the attempt refused at config.recompile_limit (8), after
    # which the frame runs eagerly and nothing more is recorded
    recompile_reasons: list[str] = field(default_factory=list)
    recompile_reasons_captured: bool = False  # False if the hook was unavailable
    recompile_limit_hit: bool = False
    recompile_error: str | None = None  # a compiled call raised (text)
    # -- whole-frame skip --
    frame_skipped: bool = False
    forward_cache_entries: int | None = None  # dynamo cache entries on Model.forward
    eager_op_count: int | None = None  # aten ops run by one eager forward
    # -- misc --
    captured_logs: list[str] = field(default_factory=list)  # torch WARNING+ log lines
    captured_warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    # ----- convenience -----
    @property
    def gb_codes(self) -> list[str]:
        """GB codes from explain reasons, dynamo counter reasons (graph_break and
        unimplemented) and the fullgraph error, de-duplicated in order."""
        out: dict[str, None] = {}
        for text in [
            *self.break_reasons,
            *self.counter_break_reasons,
            *self.unimplemented_reasons,
            self.fullgraph_error,
        ]:
            for c in gb_codes_in(text):
                out[c] = None
        return list(out)

    @property
    def explain_gb_codes(self) -> list[str]:
        out: dict[str, None] = {}
        for text in self.break_reasons:
            for c in gb_codes_in(text):
                out[c] = None
        return list(out)

    @property
    def fullgraph_gb_codes(self) -> list[str]:
        return gb_codes_in(self.fullgraph_error)

    @property
    def fullgraph_ok(self) -> bool:
        return self.fullgraph_error is None

    @property
    def recompile_count(self) -> int:
        return len(self.recompile_reasons)

    def breaks_at(self, line: int) -> bool:
        """True if explain reported a break at ``line``, or the innermost example
        line of the fullgraph=True error is ``line`` (explain misses breaks before
        the first traced op and whole-frame skips)."""
        return line in self.break_lines or (self.fullgraph_error is not None and self.fullgraph_error_line == line)

    def clean(self) -> bool:
        """No explain breaks, at least one graph, no skip, fullgraph compile OK."""
        return (
            self.explain_error is None
            and not self.break_lines
            and not self.break_reasons
            and self.graph_break_count == 0
            and self.graph_count >= 1
            and not self.frame_skipped
            and self.fullgraph_error is None
        )

    def recompiles(self) -> bool:
        """Guards failed on a later call and dynamo recompiled.

        Uses the captured guard-failure reasons (exact).  Only when those could
        not be captured, falls back to "more frames compiled after call 0"
        (a graph break alone makes frame_count > 1 on the first call, and a
        data-dependent branch taking a new path compiles a new resume function
        without any guard failure, so frame_count > 1 is not a recompile signal).
        """
        if self.recompile_reasons_captured:
            return bool(self.recompile_reasons) or self.recompile_limit_hit
        if not self.frame_counts:
            return self.frame_count > 1
        return self.frame_count > self.frame_counts[0]

    def summary(self) -> str:
        return (
            f"{self.name}: graphs={self.graph_count} breaks={self.graph_break_count} "
            f"lines={sorted(self.break_lines)} gb={self.gb_codes} "
            f"fullgraph={'OK' if self.fullgraph_ok else f'ERR@{self.fullgraph_error_line}'} "
            f"skipped={self.frame_skipped} frames={self.frame_counts} "
            f"recompiles={self.recompile_count}"
        )


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: A002
        self.count += 1
        return func(*args, **(kwargs or {}))


class _DropAndCapture(logging.Filter):
    def __init__(self, sink: list[str]) -> None:
        super().__init__()
        self.sink = sink

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            try:
                msg = record.getMessage()
            except Exception:  # pragma: no cover - malformed record
                msg = str(record.msg)
            self.sink.append(f"{record.name}: {msg}")
        return False


@contextlib.contextmanager
def _quiet_torch_logs(sink: list[str]) -> Iterator[None]:
    """Drop (and capture WARNING+ of) every record reaching a handler of a
    ``torch*`` logger; torch installs stderr handlers with propagate=False."""
    flt = _DropAndCapture(sink)
    touched: list[logging.Handler] = []
    loggers = [logging.getLogger("torch")]
    for lname, lg in list(logging.root.manager.loggerDict.items()):
        if lname.startswith("torch") and isinstance(lg, logging.Logger):
            loggers.append(lg)
    for lg in loggers:
        for h in lg.handlers:
            if flt not in h.filters:
                h.addFilter(flt)
                touched.append(h)
    try:
        yield
    finally:
        for h in touched:
            h.removeFilter(flt)


@contextlib.contextmanager
def _capture_recompile_reasons(sink: list[str]) -> Iterator[bool]:
    """Wrap dynamo's guard-failure reason collector (torch 2.13:
    ``torch._dynamo.convert_frame.get_and_maybe_log_recompilation_reasons``,
    called exactly when a frame with existing cache entries is recompiled)."""
    try:
        import torch._dynamo.convert_frame as cf
    except Exception:  # pragma: no cover
        yield False
        return
    orig = getattr(cf, "get_and_maybe_log_recompilation_reasons", None)
    if orig is None:  # pragma: no cover - other torch versions
        yield False
        return

    def wrapper(*args: Any, **kwargs: Any) -> list[str]:
        reasons = orig(*args, **kwargs)
        if not kwargs.get("skip_logging", False):
            # one entry per recompilation: the failure of every cache entry
            sink.append("\n".join(str(r) for r in reasons) if reasons else "Unable to find recompilation reasons")
        return reasons

    cf.get_and_maybe_log_recompilation_reasons = wrapper
    try:
        yield True
    finally:
        cf.get_and_maybe_log_recompilation_reasons = orig


@dataclass
class _GlobalTorchState:
    """Global torch state an example's forward may change (the GLOBAL_STATE
    guard fields of graph-breaks.md §5 that are settable from Python, plus
    print options); restored after every phase."""

    grad: bool
    deterministic: bool
    deterministic_warn_only: bool
    default_dtype: torch.dtype
    num_threads: int
    print_opts: dict

    @classmethod
    def save(cls) -> "_GlobalTorchState":
        from torch._tensor_str import PRINT_OPTS

        return cls(
            grad=torch.is_grad_enabled(),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
            default_dtype=torch.get_default_dtype(),
            num_threads=torch.get_num_threads(),
            print_opts=dict(vars(PRINT_OPTS)),
        )

    def restore(self) -> None:
        from torch._tensor_str import PRINT_OPTS

        torch.set_grad_enabled(self.grad)
        if (
            torch.are_deterministic_algorithms_enabled() != self.deterministic
            or torch.is_deterministic_algorithms_warn_only_enabled() != self.deterministic_warn_only
        ):
            torch.use_deterministic_algorithms(self.deterministic, warn_only=self.deterministic_warn_only)
        if torch.get_default_dtype() != self.default_dtype:
            torch.set_default_dtype(self.default_dtype)
        if torch.get_num_threads() != self.num_threads:
            torch.set_num_threads(self.num_threads)
        vars(PRINT_OPTS).update(self.print_opts)


def _counter_snapshot() -> dict[str, Counter]:
    from torch._dynamo.utils import counters

    return {k: Counter(counters.get(k, {})) for k in ("graph_break", "unimplemented")}


def _counter_diff(before: dict[str, Counter]) -> dict[str, list[str]]:
    from torch._dynamo.utils import counters

    out: dict[str, list[str]] = {}
    for k, old in before.items():
        new = Counter(counters.get(k, {}))
        out[k] = [str(key) for key, n in new.items() if n > old.get(key, 0)]
    return out


def _example_lines_in_text(text: str, filename: str) -> list[int]:
    pat = re.compile(r'File "' + re.escape(filename) + r'", line (\d+)')
    return [int(m.group(1)) for m in pat.finditer(text)]


def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        chain.append(e)
        todo.append(e.__cause__)
        todo.append(e.__context__)
    return chain


def _example_lines_in_exception(exc: BaseException, filename: str) -> list[int]:
    """Example-file lines (outer -> inner) for the first exception in the
    cause/context chain that mentions the example: its message ("from user
    code:" block), its ``real_stack`` (dynamo), then its traceback frames."""
    for e in _exception_chain(exc):
        lines = _example_lines_in_text(str(e), filename)
        if lines:
            return lines
        real = getattr(e, "real_stack", None)
        if real:
            lines = [f.lineno for f in real if f.filename == filename and f.lineno]
            if lines:
                return lines
    for e in _exception_chain(exc):
        tb_lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == filename and f.lineno]
        if tb_lines:
            return tb_lines
    return []


def _format_exc(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"


def _default_make_inputs(call: int) -> tuple:
    return (torch.randn(8),)


def load_example(source: str, name: str) -> types.ModuleType:
    """Execute a snippet as a fresh module (its lines visible to `inspect` and Dynamo)."""
    return _load(source, name)[1]


def example_inputs(module: types.ModuleType, call: int = 0) -> tuple:
    """The snippet's `make_inputs(call)` as a tuple (default: one `torch.randn(8)`)."""
    args = (getattr(module, "make_inputs", None) or _default_make_inputs)(call)
    return tuple(args) if isinstance(args, (tuple, list)) else (args,)


def _load(source: str, name: str) -> tuple[str, types.ModuleType]:
    n = next(_COUNTER)
    filename = f"<example {name}>"
    cached = linecache.cache.get(filename)
    if cached is not None and "".join(cached[2]) != source:
        filename = f"<example {name}#{n}>"
    lines = source.splitlines(True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    # mtime None => linecache.checkcache() leaves the entry alone
    linecache.cache[filename] = (len(source), None, lines, filename)
    modname = f"_transpile_example_{n}"
    mod = types.ModuleType(modname)
    mod.__file__ = filename
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as e:
        raise ExampleError(f"example {name!r} does not compile: {e}") from e
    sys.modules[modname] = mod
    try:
        exec(code, mod.__dict__)
    except Exception as e:
        sys.modules.pop(modname, None)
        raise ExampleError(f"example {name!r} raised while executing its module body: {_format_exc(e)}") from e
    if not isinstance(mod.__dict__.get("Model"), type) or not issubclass(mod.Model, torch.nn.Module):
        sys.modules.pop(modname, None)
        raise ExampleError(f"example {name!r} does not define class Model(nn.Module)")
    return filename, mod


# --------------------------------------------------------------------------- #
# main entry point
# --------------------------------------------------------------------------- #


def run_example(source: str, name: str = "example", calls: int = 3, *, seed: int = 0) -> DynamoReport:
    """Run ``source`` eagerly, under explain, fullgraph=True and a CompileCounter
    for ``calls`` calls; return a :class:`DynamoReport`.  Raises
    :class:`ExampleError` if the snippet itself is broken."""
    with _LOCK:
        return _run_example(source, name, calls, seed)


def _run_example(source: str, name: str, calls: int, seed: int) -> DynamoReport:
    t_start = time.perf_counter()
    filename, mod = _load(source, name)
    report = DynamoReport(name=name, filename=filename, source=source)
    Model = mod.Model
    make_inputs: Callable[[int], tuple] = getattr(mod, "make_inputs", None) or _default_make_inputs

    def inputs(i: int) -> tuple:
        args = make_inputs(i)
        return tuple(args) if isinstance(args, (tuple, list)) else (args,)

    def fresh() -> torch.nn.Module:
        return Model().eval()

    @contextlib.contextmanager
    def phase(label: str) -> Iterator[None]:
        t0 = time.perf_counter()
        torch._dynamo.reset()
        state = _GlobalTorchState.save()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                yield
            finally:
                state.restore()  # an example may flip grad mode etc. in forward
                torch._dynamo.reset()
                report.timings[label] = time.perf_counter() - t0

    fwd_code = getattr(getattr(Model, "forward", None), "__code__", None)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_quiet_torch_logs(report.captured_logs))
            wlist = stack.enter_context(warnings.catch_warnings(record=True))

            # 1. eager: must work
            with phase("eager"):
                try:
                    fresh()(*inputs(0))
                except Exception as e:
                    raise ExampleError(
                        f"example {name!r} is broken: eager Model().eval()(*make_inputs(0)) " f"raised {_format_exc(e)}"
                    ) from e
            with phase("eager_ops"):
                counter = _OpCounter()
                try:
                    m = fresh()
                    args = inputs(0)
                    with counter:
                        m(*args)
                    report.eager_op_count = counter.count
                except Exception:
                    report.eager_op_count = None

            # 2. explain
            with phase("explain"):
                before = _counter_snapshot()
                try:
                    m = fresh()
                    out = torch._dynamo.explain(m)(*inputs(0))
                    report.graph_count = int(out.graph_count)
                    report.graph_break_count = max(0, int(out.graph_break_count))
                    for br in out.break_reasons:
                        report.break_reasons.append(str(getattr(br, "reason", br)))
                        frames = [
                            f
                            for f in (getattr(br, "user_stack", None) or [])
                            if getattr(f, "filename", None) == filename
                        ]
                        if frames and frames[-1].lineno:
                            report.break_lines.add(int(frames[-1].lineno))
                except Exception as e:
                    report.explain_error = _format_exc(e)
                diff = _counter_diff(before)
                report.counter_break_reasons = diff["graph_break"]
                report.unimplemented_reasons = diff["unimplemented"]

            # 3. fullgraph=True
            with phase("fullgraph"):
                try:
                    m = fresh()
                    torch.compile(m, fullgraph=True, backend="eager")(*inputs(0))
                except Exception as e:
                    report.fullgraph_error = _format_exc(e)
                    report.fullgraph_error_type = type(e).__qualname__
                    report.fullgraph_error_lines = _example_lines_in_exception(e, filename)
                    if report.fullgraph_error_lines:
                        report.fullgraph_error_line = report.fullgraph_error_lines[-1]

            # 4. recompiles (+ whole-frame skip)
            with phase("recompile"):
                cnt = torch._dynamo.testing.CompileCounter()
                reasons: list[str] = []
                with _capture_recompile_reasons(reasons) as captured:
                    report.recompile_reasons_captured = captured
                    try:
                        cm = torch.compile(fresh(), backend=cnt)
                        for i in range(calls):
                            cm(*inputs(i))
                            report.frame_counts.append(int(cnt.frame_count))
                            if i == 0 and fwd_code is not None:
                                report.forward_cache_entries = _cache_entries(fwd_code)
                    except Exception as e:
                        report.recompile_error = _format_exc(e)
                report.frame_count = int(cnt.frame_count)
                report.recompile_reasons = reasons
                report.recompile_limit_hit = any(
                    "recompile_limit" in s or "cache_size_limit" in s for s in report.captured_logs
                )

            report.captured_warnings = [f"{w.category.__name__}: {w.message}" for w in wlist]
    finally:
        sys.modules.pop(mod.__name__, None)
        torch._dynamo.reset()

    # a generator forward never runs its body in the harness (calling it only
    # creates the generator), but dynamo still refuses the frame (GB0003)
    is_generator = fwd_code is not None and bool(
        fwd_code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR)
    )
    did_tensor_work = bool(report.eager_op_count) or report.eager_op_count is None or is_generator
    report.frame_skipped = did_tensor_work and (
        report.forward_cache_entries == 0 or (report.explain_error is None and report.graph_count == 0)
    )
    report.timings["total"] = time.perf_counter() - t_start
    return report


def _cache_entries(code: types.CodeType) -> int | None:
    try:
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

        return len(_debug_get_cache_entry_list(code))
    except Exception:  # pragma: no cover - private API moved
        return None


if __name__ == "__main__":  # manual smoke test: python tests/dynamo_harness.py
    _SRC = (
        "import torch\nfrom torch import nn\n\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        y = x + 1\n"
        "        print('hi')\n"
        "        return y * 2\n"
    )
    for _ in range(2):
        r = run_example(_SRC, "smoke")
        print(r.summary(), {k: round(v, 3) for k, v in r.timings.items()})
