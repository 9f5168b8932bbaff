"""Tolerances for reductions, from their rounding-error bounds: kernel results against a float64 reference.

The sum of n floating values, accumulated with unit roundoff u in any order (serial, in
vector lanes, pairwise, split over threads), differs from the exact sum by at most

    gamma(n - 1) * sum(|x_i|),   gamma(k) = k*u / (1 - k*u)

(Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 4.2). A
test needs a bound that holds for every order, since a kernel's order depends on the
machine's vector width and thread count: a fixed relative tolerance does not (a sum of
values of both signs cancels, and its relative error is unbounded). Everything else a
reduction kernel does (exp, a division, a square root, the final rounding to a half
dtype) costs a few roundings relative to the value it produces.

So an output y of a reduction over n values is checked as

    |y - y64| <= gamma(n + ROUNDINGS) * magnitude + (ROUNDINGS * u + u_out) * |y64|
                 [+ ROUNDINGS * u_out * rounded]

where `magnitude` is what the sum's error scales with, in the output's units (for a
sum, the sum of |x|; for a softmax, the probability itself; per op in `magnitude`), u
the unit roundoff of the accumulation (float32 for the half dtypes too: kernels and
torch accumulate them in float32) and u_out that of the output's dtype, which the result
is rounded to once. Where eager holds intermediates in a half dtype too (rounding each,
as the kernels must), `rounded` is what those roundings move y by, per unit u_out. NaN
must be where the reference has NaN, and infinities equal.
"""

from __future__ import annotations

import torch

# Elementwise roundings an output may carry besides the sum's: the terms' own (an exp, a
# subtraction) and the result's (a division, a square root), in the accumulation format.
ROUNDINGS = 4


def unit_roundoff(dtype: torch.dtype) -> float:
    """u of the format a kernel stores `dtype` in: half and bfloat16 have 11 and 8 significant bits."""
    return {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[dtype]


def accumulation_roundoff(dtype: torch.dtype) -> float:
    """u of the format sums of `dtype` are accumulated in (float32 for the half dtypes, as torch does)."""
    return unit_roundoff(torch.float64 if dtype == torch.float64 else torch.float32)


def gamma(n: int, dtype: torch.dtype) -> float:
    """Higham's gamma(n): the relative error bound of n roundings in the accumulation format of `dtype`."""
    nu = n * accumulation_roundoff(dtype)
    assert nu < 0.5, "the bound needs n*u well below 1"
    return nu / (1 - nu)


def likely_gamma(n: int, dtype: torch.dtype, confidence: float = 6.0) -> float:
    """A bound on the relative error of n roundings that holds with probability at least
    1 - 2*n*exp(-confidence**2 / 2) (2e-11 * n at 6) when the rounding errors are independent
    and of mean zero: confidence * sqrt(n) * u, to first order (Higham and Mary, "A new approach
    to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019).
    gamma(n) holds always but grows with n, not sqrt(n): for long rows it says nothing."""
    return confidence * n**0.5 * accumulation_roundoff(dtype)


def magnitude(
    op: str, x: torch.Tensor, dim: int, y: torch.Tensor, dtype: torch.dtype, correction: int = 1
) -> torch.Tensor:
    """What the error of `op` over `dim` of x (float64) scales with, broadcastable to its float64 result y.

    sum, mean: the sum of |x| (over n for the mean). amax, amin: 0, nothing is rounded.
    var: a sum of squares of deviations (non-negative: relative error) plus the mean's
    error d = gamma(n)*sum|x|/n, which adds n*d**2/(n - correction); std: half of var's
    relative error. `dtype`: the format the kernel computes in. logsumexp and log_softmax: log of a positive sum, an absolute error of its
    relative one. softmax: a quotient by a positive sum, relative.
    """
    n = x.shape[dim]
    absolute_sum = x.abs().sum(dim, keepdim=True)
    finite = torch.where(torch.isfinite(y), y, torch.zeros_like(y))
    if op == "sum":
        return absolute_sum
    if op == "mean":
        return absolute_sum / n
    if op in ("amax", "amin"):
        return torch.zeros_like(absolute_sum)
    if op in ("var", "std"):
        variance = x.var(dim, correction=correction, keepdim=True)
        # n*d**2/(n - correction), divided by the gamma that `assert_within` multiplies a magnitude by.
        shifted = gamma(n, dtype) * (absolute_sum / n) ** 2 * n / max(n - correction, 1)
        bound = 2 * variance + shifted
        return bound if op == "var" else bound / (2 * variance.sqrt()).clamp_min(torch.finfo(torch.float64).tiny)
    if op in ("logsumexp", "log_softmax"):
        return torch.ones_like(absolute_sum)
    if op == "softmax":
        return 2 * finite.abs()
    raise ValueError(f"no error model for {op}")


def logsumexp_rounded(x: torch.Tensor, dim: int, y: torch.Tensor) -> torch.Tensor:
    """What the elementwise roundings of a logsumexp scale with (`assert_within`'s `rounded`, y's shape):
    torch's is tensor ops, each rounded in the dtype, which the kernels round alike: x - max (an error of
    its size, which exp makes relative), exp, the sum, its log, and the final add, of |y|."""
    spread = (x - x.amax(dim, keepdim=True)).abs().nan_to_num(nan=0.0, posinf=0.0).amax(dim)
    return spread.reshape(y.shape) + y.abs().nan_to_num(posinf=0.0) + 3


def layer_norm_magnitude(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, y: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """y = (h - mean) * rsqrt(var + eps) * weight + bias over the last dim: (magnitude, rounded).

    The mean's absolute error, scaled by |weight| * rsqrt, plus the relative error of rsqrt(var) on
    |y - bias|; an error of u * |h| in h (h rounded to its dtype first) moves y by u * |weight| * rsqrt
    * (|h| + mean |h|), and the variance relatively by 2u.
    """
    n = h.shape[-1]
    scale = torch.rsqrt(h.var(-1, correction=0, keepdim=True) + eps)
    mean_size = h.abs().sum(-1, keepdim=True) / n
    magnitude = weight.abs() * scale * mean_size + 2 * (y - bias).abs()
    return magnitude, weight.abs() * scale * (h.abs() + mean_size) + 2 * (y - bias).abs() + y.abs()


def assert_within(
    actual: torch.Tensor,
    expected: torch.Tensor,
    n: int,
    magnitude: torch.Tensor,
    dtype: torch.dtype | None = None,
    rounded: torch.Tensor | None = None,
    final_rounding: float = 1.0,
) -> None:
    """`actual` against the float64 `expected` of a reduction over n values, within the bound above.

    `dtype`: the format the kernel computed in when it is not `actual`'s (a float64 call of a region
    that casts to float32 is only as precise as float32). `rounded`: what the elementwise roundings
    scale with, where not |expected| (an intermediate stored in a half dtype, then normalised).
    `final_rounding`: the error of the result's rounding to its dtype, in units of u_out (1: to
    nearest; 2: truncated, a whole ulp).
    """
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    dtype = dtype or actual.dtype
    got, want = actual.double().cpu(), expected.double().cpu()
    assert torch.equal(torch.isnan(got), torch.isnan(want)), "NaN in other places"
    infinite = torch.isinf(want)
    assert torch.equal(got[infinite], want[infinite]), "other infinities"
    finite = torch.isfinite(want)
    u_out = unit_roundoff(dtype)
    bound = (
        gamma(n + ROUNDINGS, dtype) * magnitude.double().cpu()
        + (ROUNDINGS * accumulation_roundoff(dtype) + final_rounding * u_out) * want.abs()
    )
    if rounded is not None:
        bound = bound + ROUNDINGS * u_out * rounded.double().cpu()
    # A result that underflows to a subnormal loses its relative precision: allow its absolute spacing.
    bound = bound + ROUNDINGS * torch.finfo(dtype).tiny
    # A magnitude of NaN comes from a NaN or infinite input in the row, whose result the checks above compare.
    bound = torch.nan_to_num(bound, nan=torch.inf).expand_as(want)
    if not want.numel():
        return
    error = (got - want).abs()
    excess = torch.where(finite, error - bound, torch.zeros_like(error))
    worst = int(excess.argmax())
    assert excess.max() <= 0, (
        f"{int((excess > 0).sum())} of {want.numel()} values beyond the bound: worst {got.flatten()[worst].item()!r} "
        f"against {want.flatten()[worst].item()!r}, error {error.flatten()[worst].item():.3g} > bound "
        f"{bound.flatten()[worst].item():.3g} (n={n}, {dtype})"
    )


def softmax_rounded(probs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """What softmax(z) moves by, per unit u_out, when each z_i carries a rounding error u_out*|z_i|:
    p_i changes relatively by |z_i| + sum_j p_j |z_j| (0 where p is 0: masked columns), and by its
    own rounding."""
    weighted = torch.where(probs > 0, probs * z.abs(), torch.zeros_like(probs))
    return weighted + probs * weighted.sum(-1, keepdim=True) + probs
