"""TP1xx: side effects and calls into libraries Dynamo cannot trace (printing, logging, I/O, clocks, RNGs)."""

from __future__ import annotations

import ast

from rewrites.base import CallRule, GuardableCall
from transpiler.analysis.walker import Context
from transpiler.analysis.kinds import Kind

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
    Checks for file and stream I/O (`open()`, `sys.stdout.write()`) in compiled code.

    ## Why is this bad?
    Dynamo cannot trace `open` (GB0059) nor methods of C-level stream objects
    (GB0156): each call is a graph break, and the I/O happens outside the graph.

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
        if name.startswith("numpy.random."):
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
    VALID = ["""
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                scale = torch.rand(())
                return y * scale
        """]


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
    No automatic fix: seed once outside, or pass a `torch.Generator`.
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
