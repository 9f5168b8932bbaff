"""TP1xx: side effects and calls into libraries Dynamo cannot trace (printing, logging, I/O, clocks, RNGs)."""

from __future__ import annotations

import ast

from typing import TYPE_CHECKING

from rewrites.base import CallRule, GuardableCall
from transpiler.analysis.walker import Context
from transpiler.analysis.kinds import Kind
from transpiler.lint.rule import Fix

if TYPE_CHECKING:
    import libcst as cst

    from transpiler.lint.rule import Edit

_GUARD_HINT = "guard it with `if not torch.compiler.is_compiling():`"


class PrintInCompiledCode(GuardableCall):
    """## What it does
    Checks for `print()` calls in code that runs under `torch.compile`.

    ## Why is this bad?
    Dynamo cannot put `print` in a graph: it ends the graph before the call,
    runs the print in Python and starts a new graph after it. Every print costs
    a graph break; inside a loop or `try` block it costs the whole function.

    ## Fix safety
    Safe: a call that is a statement of its own is guarded with
    `if not torch.compiler.is_compiling():`, so eager runs print exactly as
    before and compiled runs skip it. With `--side-effects remove` the statement
    is deleted instead (eager runs change too: an explicit opt-in). A call whose
    value is used is not fixed.
    """

    code = "TP101"
    name = "print-in-compiled-code"
    summary = "`print()` in compiled code"
    message = f"`print()` in compiled code breaks the graph; {_GUARD_HINT}"
    dynamo_codes = ("GB0059",)
    callees = frozenset({"builtins.print"})
    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                print("activations", y.shape)
                return y * 2
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                if not torch.compiler.is_compiling():
                    print("activations", y.shape)
                return y * 2
        """]


_LOG_METHODS = frozenset("debug info warning warn error exception critical fatal log warning_once info_once".split())


class LoggingInCompiledCode(GuardableCall):
    """## What it does
    Checks for calls to `logging` functions and logger methods in compiled code.

    ## Why is this bad?
    Dynamo does not trace `logging.Logger` methods (GB0291) nor the module-level
    `logging.info` family; each call is a graph break.

    ## Fix safety
    Safe: a call that is a statement of its own is guarded with
    `if not torch.compiler.is_compiling():`, so eager runs log exactly as
    before and compiled runs skip it. With `--side-effects remove` the statement
    is deleted instead (eager runs change too: an explicit opt-in). A call whose
    value is used is not fixed.
    Alternatively register the logger methods in
    `torch._dynamo.config.ignore_logging_functions`.
    """

    code = "TP102"
    name = "logging-in-compiled-code"
    summary = "logging call in compiled code"
    message = f"`{{callee}}()` in compiled code breaks the graph; {_GUARD_HINT}"
    dynamo_codes = ("GB0291", "GB4841")
    callees = frozenset(f"logging.{m}" for m in _LOG_METHODS)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _LOG_METHODS:
            receiver = func.value
            if ctx.kind(receiver) is Kind.LOGGER or (
                isinstance(receiver, ast.Call) and ctx.names.is_logger_factory(receiver)
            ):
                self.report(ctx, node, callee=ast.unparse(func))
                return
        super().visit_Call(node, ctx)

    INVALID = [
        """
        import logging

        import torch
        from torch import nn

        logger = logging.getLogger(__name__)


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                logger.info("input shape %s", x.shape)
                return y * 2
        """,
        """
        import logging

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                logging.warning("slow path")
                return y * 2
        """,
    ]
    VALID = ["""
        import logging

        import torch
        from torch import nn

        logger = logging.getLogger(__name__)


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                if not torch.compiler.is_compiling():
                    logger.info("input shape %s", x.shape)
                return y * 2
        """]


class WarningsInCompiledCode(GuardableCall):
    """## What it does
    Checks for `warnings.warn()` in compiled code.

    ## Why is this bad?
    `warnings.warn` is a C function Dynamo has marked as skipped (GB0007): the
    graph breaks at every call, even when the warning is filtered out.

    ## Fix safety
    Safe: a call that is a statement of its own is guarded with
    `if not torch.compiler.is_compiling():`, so eager runs warn exactly as
    before and compiled runs skip it. With `--side-effects remove` the statement
    is deleted instead (eager runs change too: an explicit opt-in). A call whose
    value is used is not fixed.
    """

    code = "TP103"
    name = "warnings-in-compiled-code"
    summary = "`warnings.warn()` in compiled code"
    message = f"`{{callee}}()` in compiled code breaks the graph; {_GUARD_HINT}"
    dynamo_codes = ("GB0007",)
    callees = frozenset({"warnings.warn", "warnings.warn_explicit"})
    INVALID = ["""
        import warnings

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                warnings.warn("legacy input format")
                return y * 2
        """]
    VALID = ["""
        import warnings

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                if not torch.compiler.is_compiling():
                    warnings.warn("legacy input format")
                return y * 2
        """]


class FileIoInCompiledCode(GuardableCall):
    """## What it does
    Checks for file, stream and filesystem I/O (`open()`, `sys.stdout.write()`,
    `pprint.pprint()`, `os.makedirs()`, `os.path.exists()`, `shutil.copy()`, ...)
    in compiled code.

    ## Why is this bad?
    Dynamo cannot trace `open` (GB0059), methods of C-level stream objects
    (GB0156) nor the `os` functions behind the filesystem calls (GB0007): each
    call is a graph break, and the I/O happens outside the graph.

    ## Fix safety
    Safe: a call that is a statement of its own is guarded with
    `if not torch.compiler.is_compiling():`, so eager runs write exactly as
    before and compiled runs skip it. With `--side-effects remove` the statement
    is deleted instead (eager runs change too: an explicit opt-in). A call whose
    value is used is not fixed.
    I/O through a file object (`with open(...)`) has no automatic fix: move it
    out of the compiled function.
    """

    code = "TP104"
    name = "file-io-in-compiled-code"
    summary = "file or stream I/O in compiled code"
    message = "`{callee}()` in compiled code breaks the graph; move I/O out of the compiled function"
    dynamo_codes = ("GB0059", "GB0156")
    callees = frozenset(
        {"builtins.open", "sys.stdout.write", "sys.stderr.write", "sys.stdout.flush", "sys.stderr.flush"}
        # Filesystem calls: C functions Dynamo skips (GB0007), or streams it cannot trace (GB0156).
        | {f"os.{f}" for f in "makedirs mkdir remove unlink listdir getcwd".split()}
        | {f"os.path.{f}" for f in "exists isfile isdir getsize".split()}
        | {f"shutil.{f}" for f in "copy copyfile copytree rmtree move which".split()}
        | {"pprint.pprint"}
    )
    INVALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                with open("/dev/null", "w") as sink:
                    sink.write(str(y.shape))
                return y * 2
        """,
        """
        import sys

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                sys.stdout.write("step\\n")
                return y * 2
        """,
    ]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return y * 2


        def save_shape(model, x):
            with open("/dev/null", "w") as sink:
                sink.write(str(model(x).shape))
        """]


class ClockInCompiledCode(CallRule):
    """## What it does
    Checks for clock reads (`time.time()`, `time.perf_counter()`, ...) in compiled code.

    ## Why is this bad?
    Clock functions are C builtins Dynamo skips (GB0007; GB9193 in newer
    releases). The graph breaks, and a time measured inside a compiled region
    does not time the graph anyway.

    ## Fix safety
    No automatic fix: time the compiled call from outside, or use the profiler.
    """

    code = "TP105"
    name = "clock-in-compiled-code"
    summary = "clock read in compiled code"
    message = "`{callee}()` in compiled code breaks the graph; time the compiled call from outside"
    dynamo_codes = ("GB0007", "GB9193")
    callees = frozenset(
        f"time.{f}"
        for f in "time time_ns perf_counter perf_counter_ns monotonic monotonic_ns process_time process_time_ns".split()
    )
    INVALID = ["""
        import time

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                start = time.perf_counter()
                return y * 2, start
        """]
    VALID = ["""
        import time

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return y * 2


        def timed(model, x):
            start = time.perf_counter()
            out = model(x)
            return out, time.perf_counter() - start
        """]


class PythonRandomInCompiledCode(CallRule):
    """## What it does
    Checks for calls to Python's `random` module that Dynamo does not model
    (`random.random()`, `random.gauss()`, `random.seed()`, ...).

    ## Why is this bad?
    These are skipped C functions (GB0007): the graph breaks and the value is
    baked into nothing. (`random.randint`, `random.uniform` and
    `random.randrange` with constant arguments are supported and not reported.)

    ## Fix safety
    Replacing them with `torch.rand` changes the random stream: unsafe, and not
    automatic.
    """

    code = "TP106"
    name = "python-random-in-compiled-code"
    summary = "Python `random` call in compiled code"
    message = "`{callee}()` in compiled code breaks the graph; use torch's generators (`torch.rand`, `torch.randn`)"
    dynamo_codes = ("GB0007",)
    callees = frozenset(f"random.{f}" for f in "random gauss seed normalvariate".split())
    INVALID = ["""
        import random

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                noise = random.gauss(0.0, 0.1)
                return y * noise
        """]
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                noise = torch.randn(()) * 0.1
                return y * noise
        """]


class NumpyRandomInCompiledCode(CallRule):
    """## What it does
    Checks for `numpy.random` calls in compiled code.

    ## Why is this bad?
    The value comes from NumPy's global generator; Dynamo treats it as
    data-dependent (GB0033) and breaks the graph.

    ## Fix safety
    Replacing it with torch's generators changes the random stream: unsafe, and
    not automatic.
    """

    code = "TP107"
    name = "numpy-random-in-compiled-code"
    summary = "`numpy.random` call in compiled code"
    message = "`{callee}()` in compiled code breaks the graph; use torch's generators (`torch.rand`, `torch.randn`)"
    dynamo_codes = ("GB0033",)

    def visit_Call(self, node: ast.Call, ctx: Context) -> None:
        name = ctx.qualname(node.func) or ""
        if name.startswith("numpy.random.") and name != "numpy.random.seed":  # seeding is traced
            self.report(ctx, node, callee=ast.unparse(node.func))

    INVALID = ["""
        import numpy as np
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                scale = np.random.rand()
                return y * scale
        """]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                scale = torch.rand(())
                return y * scale
        """,
        """
        import numpy as np
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                np.random.seed(0)
                return y * 2
        """,
    ]


class FrameInspectionInCompiledCode(CallRule):
    """## What it does
    Checks for interpreter-frame inspection (`inspect.stack()`,
    `inspect.currentframe()`, `sys._getframe()`) in compiled code.

    ## Why is this bad?
    Frames are what Dynamo replaces; it skips these functions (GB0007) and
    breaks the graph. (`inspect.signature` is supported and not reported.)

    ## Fix safety
    No automatic fix: compute what the frame was needed for outside.
    """

    code = "TP108"
    name = "frame-inspection-in-compiled-code"
    summary = "frame inspection in compiled code"
    message = "`{callee}()` in compiled code breaks the graph; inspect frames outside the compiled function"
    dynamo_codes = ("GB0007",)
    callees = frozenset(
        {"inspect.stack", "inspect.currentframe", "inspect.getouterframes", "inspect.trace", "sys._getframe"}
    )
    INVALID = ["""
        import inspect

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                caller = inspect.stack()[1].function
                return y * 2
        """]
    VALID = ["""
        import inspect

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                params = inspect.signature(self.forward).parameters
                return y * len(params)
        """]


class SerializationInCompiledCode(GuardableCall):
    """## What it does
    Checks for serialization calls (`pickle`, `json`, `torch.save`, `torch.load`)
    in compiled code.

    ## Why is this bad?
    Dynamo cannot trace the C encoders behind them (GB0007, GB0156); the graph
    breaks and the call runs in Python.

    ## Fix safety
    Safe: a call that is a statement of its own is guarded with
    `if not torch.compiler.is_compiling():`, so eager runs write exactly as
    before and compiled runs skip it. With `--side-effects remove` the statement
    is deleted instead (eager runs change too: an explicit opt-in). A call whose
    value is used is not fixed.
    Otherwise serialize outside the compiled function.
    """

    code = "TP109"
    name = "serialization-in-compiled-code"
    summary = "serialization call in compiled code"
    message = "`{callee}()` in compiled code breaks the graph; serialize outside the compiled function"
    dynamo_codes = ("GB0007", "GB0156")
    callees = frozenset(
        {
            "pickle.dumps",
            "pickle.dump",
            "pickle.loads",
            "pickle.load",
            "json.dumps",
            "json.dump",
            "torch.save",
            "torch.load",
        }
    )
    INVALID = [
        """
        import json

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                meta = json.dumps({"rows": 8})
                return y * 2, meta
        """,
        """
        import io

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                torch.save(y.detach(), io.BytesIO())
                return y * 2
        """,
    ]
    VALID = ["""
        import json

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return y * 2


        def describe(model):
            return json.dumps({"parameters": sum(p.numel() for p in model.parameters())})
        """]


class GlobalSeedInCompiledCode(CallRule):
    """## What it does
    Checks for calls that reseed or read the state of a global generator
    (`torch.manual_seed`, `torch.cuda.manual_seed`, `torch.get_rng_state`) in
    compiled code. (`torch.seed()` is traced and not reported.)

    ## Why is this bad?
    Reseeding mutates global generator state that Dynamo does not trace
    (GB0007); the graph breaks at every call.

    ## Fix safety
    No automatic fix: seed once outside the compiled function. (Passing a
    `torch.Generator` to the random operators breaks too: TP522.)
    """

    code = "TP110"
    name = "global-seed-in-compiled-code"
    summary = "global RNG reseeding in compiled code"
    message = "`{callee}()` in compiled code breaks the graph; seed outside the compiled function"
    dynamo_codes = ("GB0007",)
    callees = frozenset(
        {
            "torch.manual_seed",
            "torch.random.manual_seed",
            "torch.cuda.manual_seed",
            "torch.cuda.manual_seed_all",
            "torch.get_rng_state",
            "torch.set_rng_state",
        }
    )
    INVALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                torch.manual_seed(0)
                return y * torch.rand(8)
        """]
    VALID = [
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return y * torch.rand(8)


        def run(model, x):
            torch.manual_seed(0)
            return model(x)
        """,
        """
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                seed = torch.seed()
                return y * 2, seed
        """,
    ]


class ProcessStateInCompiledCode(CallRule):
    """## What it does
    Checks for calls that read or change interpreter and process state:
    `os.getpid()`, `uuid.uuid4()`, `datetime.datetime.now()`, `gc.collect()`,
    `threading.Lock()`, `traceback.format_stack()`, `torch.set_num_threads()`.

    ## Why is this bad?
    They are C functions Dynamo skips (GB0007) or methods it cannot trace
    (GB0156): each call is a graph break, and its value would be a constant
    in a graph anyway.

    ## Fix safety
    No automatic fix: do it outside the compiled function.
    """

    code = "TP111"
    name = "process-state-in-compiled-code"
    summary = "process or interpreter state call in compiled code"
    message = "`{callee}()` in compiled code breaks the graph; call it outside the compiled function"
    dynamo_codes = ("GB0007", "GB0156")
    callees = frozenset(
        {
            "os.getpid",
            "uuid.uuid1",
            "uuid.uuid4",
            "datetime.datetime.now",
            "datetime.datetime.utcnow",
            "gc.collect",
            "threading.Lock",
            "threading.RLock",
            "traceback.format_stack",
            "traceback.print_stack",
            "torch.set_num_threads",
        }
    )
    INVALID = [
        """
        import uuid

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                run_id = uuid.uuid4()
                return y * 2, run_id
        """,
        """
        import gc

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                gc.collect()
                return y * 2
        """,
    ]
    VALID = ["""
        import uuid

        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                return y * 2


        def tagged(model, x):
            return model(x), uuid.uuid4()
        """]


class NumpyIoInCompiledCode(GuardableCall):
    """## What it does
    Checks for NumPy calls that save arrays or format them for printing
    (`np.save()`, `np.savez()`, `np.savetxt()`, `np.set_printoptions()`,
    `np.array2string()`, ...) in compiled code.

    ## Why is this bad?
    Dynamo traces NumPy through `torch._numpy`, which has no counterpart for
    these functions (GB0294); writing to a file object is an untraceable method
    call besides (GB0156). Each call is a graph break, typically a debugging
    dump left in `forward`. (Array math such as `np.mean` or `np.isnan` is
    traced and not reported; so is `np.random.seed`.)

    ## Fix safety
    Safe: a call that is a statement of its own is guarded with
    `if not torch.compiler.is_compiling():`, so eager runs save exactly as
    before and compiled runs skip it. With `--side-effects remove` the statement
    is deleted instead (eager runs change too: an explicit opt-in). A call whose
    value is used is not fixed.
    """

    code = "TP112"
    name = "numpy-io-in-compiled-code"
    summary = "NumPy saving or array printing in compiled code"
    message = f"`{{callee}}()` in compiled code breaks the graph; {_GUARD_HINT}"
    dynamo_codes = ("GB0294", "GB0156")
    # None of these has a `torch._numpy` counterpart (tests/test_rules_recall.py checks it).
    callees = frozenset(
        f"numpy.{f}"
        for f in "save savez savez_compressed savetxt set_printoptions array2string array_repr array_str".split()
    )
    INVALID = ["""
        import io

        import numpy as np
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                np.save(io.BytesIO(), y.detach().numpy())
                return y * 2
        """]
    VALID = [
        """
        import io

        import numpy as np
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                if not torch.compiler.is_compiling():
                    np.save(io.BytesIO(), y.detach().numpy())
                return y * 2
        """,
        """
        import numpy as np
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                spread = np.std(y.detach().numpy())
                return y * 2, spread
        """,
    ]


_TRANGES = frozenset(f"tqdm.{m}trange" for m in ("", "auto.", "notebook.", "std."))
_TQDMS = frozenset(f"tqdm.{m}tqdm" for m in ("", "auto.", "notebook.", "std."))


class ProgressBarInCompiledCode(GuardableCall):
    """## What it does
    Checks for `tqdm` progress bars (`tqdm(...)`, `trange(...)`, `tqdm.write()`)
    in compiled code, such as a sampling loop `for t in tqdm(timesteps):`.

    ## Why is this bad?
    A progress bar reads the clock and writes to the terminal: Dynamo skips
    the clock (GB0007) and cannot trace the bar's generator (GB0003). Around a
    loop the break skips the whole function.

    ## Fix safety
    Safe. A bar that is only iterated (`for t in tqdm(xs, desc=...)`, also
    inside `enumerate` or `zip`) becomes
    `(xs if torch.compiler.is_compiling() else tqdm(xs, desc=...))`, and
    `trange(n, ...)` becomes `range(n)` under compile: the loop sees the same
    items, eager runs show the bar as before. A call that is a statement of its
    own (`tqdm.write(...)`) is guarded with `if not torch.compiler.is_compiling():`.
    With `--side-effects remove` the bar is dropped (`xs`, `range(n)`) or the
    statement deleted, in eager runs too. A bar kept in a variable
    (`bar = tqdm(total=n)`) is not fixed.
    """

    code = "TP113"
    name = "progress-bar-in-compiled-code"
    summary = "`tqdm` progress bar in compiled code"
    message = "`{callee}()` in compiled code breaks the graph; iterate without the bar under compile"
    dynamo_codes = ("GB0007", "GB0003", "GB0008")
    callees = _TQDMS | _TRANGES | frozenset(f"{bar}.write" for bar in _TQDMS)
    INVALID = [
        """
        import torch
        from torch import nn
        from tqdm import tqdm


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                for scale in tqdm([1.0, 0.5], desc="denoise", disable=True):
                    y = y * scale
                return y * 2
        """,
        """
        import torch
        from torch import nn
        from tqdm.auto import trange


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                for step, _ in enumerate(trange(3, disable=True)):
                    y = y * 2 + step
                return y
        """,
    ]
    VALID = ["""
        import torch
        from torch import nn
        from tqdm import tqdm


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                scales = [1.0, 0.5]
                for scale in scales if torch.compiler.is_compiling() else tqdm(scales, disable=True):
                    y = y * scale
                return y * 2
        """]

    def plan(self, node: ast.AST, ctx: Context) -> dict:
        assert isinstance(node, ast.Call)
        statement = ctx.statement
        if isinstance(statement, ast.Expr) and statement.value is node:
            return super().plan(node, ctx)
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if (
            isinstance(statement, (ast.For, ast.AsyncFor))
            and _iterated_by(node, statement.iter, ctx)
            and positional
            and len(positional) == len(node.args)
            and not ctx.qualname(node.func).endswith(".write")
        ):
            iterated = "range" if ctx.qualname(node.func) in _TRANGES else "first"
            return self.make_fix("iterate without the bar under compile", "Call", node, data=("iterable", iterated))
        return {"no_fix": "only a bar that is iterated at once, or a statement of its own, can be skipped"}

    def apply_fix(self, node: "cst.CSTNode", fix: Fix, edit: "Edit") -> "cst.CSTNode":
        if not fix.data:
            return super().apply_fix(node, fix, edit)
        import libcst as cst

        assert isinstance(node, cst.Call)
        positional = [a for a in node.args if a.keyword is None]
        if fix.data[1] == "range":  # `trange(*args, **kw)` is `tqdm(range(*args), **kw)`
            plain = cst.Call(cst.Name("range"), [cst.Arg(a.value) for a in positional])
        else:
            plain = positional[0].value
        if edit.side_effects == "remove":
            return plain
        return cst.IfExp(
            test=cst.Call(edit.torch("compiler.is_compiling")),
            body=plain,
            orelse=node,
            lpar=[cst.LeftParen()],
            rpar=[cst.RightParen()],
        )


def _iterated_by(call: ast.Call, iterable: ast.expr, ctx: Context) -> bool:
    """`call` is the loop's iterable, or an argument of `enumerate`/`zip` that is."""
    if iterable is call:
        return True
    if isinstance(iterable, ast.Call) and ctx.qualname(iterable.func) in ("builtins.enumerate", "builtins.zip"):
        return any(arg is call for arg in iterable.args)
    return False
