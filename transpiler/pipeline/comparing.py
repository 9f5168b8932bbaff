"""Whether a transpiled computation gives what eager PyTorch gives, on the same inputs: values within the rounding
the chain of ops allows (widened by eager's own distance from the same computation in float64), NaN placement,
shapes, dtypes, which input each output aliases, what the call did to its inputs, and which error it raised.

One judge for `transpile verify` (each kernel against its region's eager code, pipeline/verifying.py) and for the
differential fuzzer (each generated module against its original, tests/fuzzing.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch.overrides import TorchFunctionMode

# The machine epsilon of each floating dtype.
EPS = {torch.float64: 2.0**-52, torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}


def value_mismatch(
    actual: torch.Tensor,
    expected: torch.Tensor,
    wide: torch.Tensor | None,
    ops: int,
    length: int,
    computed: torch.dtype | None = None,
    exact: torch.Tensor | None = None,
) -> str | None:
    """Where `actual` differs from eager's `expected` by more than the op chain's rounding allows, or None.

    The bound per element: `rtol * (|expected| + 1)` from the epsilon of the result dtype, or of
    float32 where eager computed an op in it (`computed`: the narrowest floating dtype of any op's
    result; a float32 gelu cast to float64 carries float32's rounding, and a kernel computing it in
    double before rounding differs from torch's float gelu by an ulp of float32), the chain's
    op count and the reduced length, plus twice the distance between eager and `wide`, the same
    program run with float32 inputs, buffers and parameters widened to float64 (explicit casts
    kept): an ill-conditioned element (a cancellation, an overflow at the boundary, a comparison
    of nearly equal values) is allowed to differ as much as eager's own rounding moved it.
    Integers and bools are exact but for such elements; NaN placement is exact too, but where
    `exact`, the program run with every floating input, buffer and parameter in float64, has a NaN
    or infinity where eager has none, or the other way round: eager's overflow or cancellation
    there is its own rounding (a half or bfloat16 layer norm whose float32 statistics overflow).
    Half and bfloat16 widen only such elements, and those where eager is further from `exact` than
    the op chain's roundings in them allow: a missed rounding to them must stay visible.
    """
    exp = expected.detach().double()
    act = actual.detach().double()
    cond = torch.zeros_like(exp)
    if wide is not None and wide.shape == expected.shape:
        w = wide.detach().double()
        cond = torch.where(
            torch.isnan(exp) == torch.isnan(w),
            (exp - w).abs().nan_to_num(nan=0.0, posinf=math.inf),
            torch.full_like(exp, math.inf),
        )
        cond = torch.where((exp == w) | (torch.isnan(exp) & torch.isnan(w)), torch.zeros_like(cond), cond)
    if exact is not None and exact.shape == expected.shape:
        ex = exact.detach().double()
        unstable = (torch.isnan(exp) != torch.isnan(ex)) | (torch.isinf(exp) != torch.isinf(ex))
        cond = torch.where(unstable, torch.full_like(exp, math.inf), cond)
        if computed in (torch.float16, torch.bfloat16):
            # Eager further from the exact value than the chain's roundings in that dtype can take it: its
            # own cancellation (eager's CPU layer norm of a near-constant half row is a fused multiply-add's
            # residue times 1/sqrt(eps)), which may differ as much; a missed rounding stays inside the budget.
            distance = (exp - ex).abs().nan_to_num(nan=0.0, posinf=0.0)
            far = distance > 4 * EPS[computed] * (ops + 1) * length * (ex.abs().nan_to_num(posinf=0.0) + 1)
            cond = torch.where(far, torch.maximum(cond, distance), cond)
    if expected.dtype.is_floating_point:
        # Only float32 widens the bound: a missed rounding to half or bfloat16 must stay visible.
        eps = max(EPS.get(expected.dtype, 2.0**-23), EPS[computed] if computed == torch.float32 else 0.0)
        rtol = 4 * eps * (ops + 1) * length
    else:
        rtol = 0.0
    with torch.no_grad():
        nan_differs = torch.isnan(act) != torch.isnan(exp)
        close = (act == exp) | ((act - exp).abs() <= rtol * (exp.abs() + 1) + 2 * cond)
        close = close | (torch.isnan(act) & torch.isnan(exp))
        bad = (~close & ~nan_differs) | (nan_differs & ~torch.isinf(cond))
    if not bad.any():
        return None
    index = tuple(int(i) for i in bad.nonzero()[0])
    return (
        f"{int(bad.sum())} of {bad.numel()} elements differ, first at {list(index)}: "
        f"eager {expected[index].item()!r}, transpiled {actual[index].item()!r}"
    )


class Narrowest(TorchFunctionMode):
    """Records the narrowest floating dtype of any op's tensor result (the largest epsilon)."""

    def __init__(self) -> None:
        super().__init__()
        self.dtype: torch.dtype | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for value in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(value, torch.Tensor) and value.dtype in EPS:
                if self.dtype is None or EPS[value.dtype] > EPS[self.dtype]:
                    self.dtype = value.dtype
        return result


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.untyped_storage().nbytes() > 0


def error_outcome(eager_error: str | None, error: str | None, when: str = "") -> tuple[str, str] | None:
    """The outcome of a call where either side raised (None where neither did)."""
    if eager_error and not error:
        return "missing error", f"{when}eager raises {eager_error}, transpiled returns"
    if error and not eager_error:
        return "extra error", f"{when}transpiled raises {error}, eager returns"
    if error and error == eager_error:
        return "ok", f"{when}eager raises {eager_error}, transpiled too"
    if error:
        return "different error", f"{when}eager raises {eager_error}, transpiled {error}"
    return None


def outputs_mismatch(
    names: Sequence[str], ops: int, length: int, actual, expected, wide, exact, computed, eager_in, ours_in
) -> tuple[str, str] | None:
    """The first difference between the outputs: count, shape, dtype, values (`value_mismatch` for a chain of `ops`
    ops reducing rows of `length`), or which input (of `names`) each aliases."""
    if len(actual) != len(expected):
        return "wrong shape", f"{len(expected)} outputs in eager, {len(actual)} transpiled"
    for k, (a, e) in enumerate(zip(actual, expected)):
        if a.shape != e.shape:
            return "wrong shape", f"output {k}: eager {tuple(e.shape)}, transpiled {tuple(a.shape)}"
        if a.dtype != e.dtype:
            return "wrong dtype", f"output {k}: eager {e.dtype}, transpiled {a.dtype}"
        mismatch = value_mismatch(a, e, wide[k] if wide else None, ops, length, computed, exact[k] if exact else None)
        if mismatch:
            return "wrong value", f"output {k} ({e.dtype}): {mismatch}"
        eager_alias = [i for i, x in enumerate(eager_in) if shares_storage(e, x)]
        ours_alias = [i for i, x in enumerate(ours_in) if shares_storage(a, x)]
        if eager_alias != ours_alias:
            named = lambda idx: [names[i] for i in idx] or "no input"  # noqa: E731
            return "side effect", f"output {k} aliases {named(eager_alias)} in eager, {named(ours_alias)} transpiled"
    return None


def inputs_mismatch(
    names: Sequence[str], ops: int, length: int, eager_in, ours_in, wide_in, exact_in
) -> tuple[str, str] | None:
    """An input (of `names`) the call changed otherwise than eager's call changed it."""
    wide_in = wide_in or [None] * len(eager_in)
    exact_in = exact_in or [None] * len(eager_in)
    for name, e, a, w, x in zip(names, eager_in, ours_in, wide_in, exact_in):
        mismatch = value_mismatch(a, e, w, ops, length, exact=x)
        if mismatch:
            return "side effect", f"input {name} after the call: {mismatch}"
    return None
