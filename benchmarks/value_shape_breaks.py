"""Dynamo's graph breaks of the value and shape families (`.item()` and conversions, dynamic-shape
operators, `one_hot`/`bincount` sizes, tensors formatted into strings) before and after the fixes,
default and `--unsafe-fixes`.

Each program is a small module written in the styles these breaks take in model code (losses,
metrics, routing, normalisation); it is fixed by the same fixer `transpile` runs, run by
`torch._dynamo.explain` on its inputs, and its outputs compared with the original's in eager.

    python benchmarks/value_shape_breaks.py          # the table, and totals per build

Default fixes must give the same outputs bit for bit (NaN where NaN was), unsafe ones within rounding.
"""

from __future__ import annotations

import contextlib
import io
import sys
import textwrap
import warnings
from pathlib import Path

import torch
import torch._dynamo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.rule_examples import fix_snippet  # noqa: E402

HEADER = """
import logging
import math

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)
        self.classes = nn.Linear(4, 3)
        self.table = nn.Embedding(6, 3)
        self.eps = 1e-6

    def forward(self, x):
"""

PROGRAMS = {
    "loss-normalised-by-item": """
        total = x.abs().sum().item()
        return x / (total + self.eps)
    """,
    "max-scale-clamped": """
        scale = max(x.abs().amax().item(), 1e-3)
        return self.proj(x / scale) * scale
    """,
    "float-mean-threshold": """
        mean = float(x.mean())
        return torch.where(x > mean, x, x * 0.1)
    """,
    "item-compared-as-factor": """
        peak = x.amax().item()
        return x * (peak > 0.5) + (x - peak) ** 2
    """,
    "int-count-divides": """
        n = int((x > 0).sum())
        return x.sum(-1) / (n + 1)
    """,
    "math-sqrt-of-energy": """
        norm = math.sqrt(x.pow(2).sum())
        return x / (norm + self.eps)
    """,
    "item-in-place-update": """
        y = self.proj(x)
        y.mul_(x.std().item())
        y.clamp_(min=-x.abs().mean().item())
        return y
    """,
    "item-returned-metric": """
        loss = x.pow(2).mean()
        return loss, loss.item()
    """,
    "item-in-branch": """
        if x.sum().item() > 0:
            x = x * 2
        return x
    """,
    "masked-mean-loss": """
        per_token = self.proj(x).pow(2).sum(-1)
        valid = per_token > 1.0
        return per_token[per_token > 1.0].mean() + valid.float().mean()
    """,
    "masked-sum-over-rows": """
        keep = x.amax(-1) > 0
        return x[keep].sum() * x
    """,
    "masked-count-normaliser": """
        y = self.proj(x)
        return y.sum() / y[y > 0].numel()
    """,
    "masked-select-mean": """
        y = self.proj(x)
        return torch.masked_select(y, y > 0).mean() * y
    """,
    "nan-filtered-sum": """
        y = torch.log(self.proj(x))
        return y[~torch.isnan(y)].sum() + x
    """,
    "nonzero-scatter-back": """
        y = self.proj(x)
        y[torch.where(y < 0)] = 0.0
        return y
    """,
    "nonzero-indices-gathered": """
        idx = (x > 0).nonzero(as_tuple=True)
        return x[idx].sum() * x
    """,
    "masked-values-copied": """
        y = self.proj(x)
        y[y > 0] = x[y > 0]
        return y
    """,
    "selection-returned": """
        return x[x > 0] * 2
    """,
    "bincount-minlength": """
        labels = (x.abs() * 2).long().clamp(max=3).flatten()
        counts = torch.bincount(labels, minlength=4)
        return x * counts.float().mean()
    """,
    "bincount-no-minlength": """
        labels = (x.abs() * 2).long().clamp(max=3).flatten()
        return x * torch.bincount(labels).float().max()
    """,
    "one-hot-into-linear": """
        labels = torch.arange(x.shape[0] + 4) % 4
        return self.classes(F.one_hot(labels).float()).sum() + x
    """,
    "one-hot-into-embedding": """
        labels = torch.arange(x.numel() + 6).view(-1) % 6
        codes = F.one_hot(labels).to(x.dtype)
        return (codes @ self.table.weight).sum() * x
    """,
    "one-hot-as-target": """
        labels = (x.abs() * 2).long().clamp(max=5)
        target = F.one_hot(labels).float()
        return (target * x.unsqueeze(-1)).sum(-1)
    """,
    "unique-count": """
        values = torch.unique((x * 2).round())
        return x * values.numel()
    """,
    "percent-formatted-log": """
        msg = "energy %.4f" % x.pow(2).sum()
        logger.info(msg)
        return x * 2
    """,
    "item-formatted-for-print": """
        loss = self.proj(x).pow(2).mean()
        line = "loss %.3f, peak %d" % (loss.item(), int(x.argmax()))
        print(line)
        return loss * x
    """,
    "repr-for-print": """
        text = repr(x.mean())
        print("mean", text)
        return x * 2
    """,
    "format-returned": """
        return x * 2, format(x.abs().max(), ".2f")
    """,
    "percent-returned": """
        return x * 2, "max %6.3f" % x.abs().max()
    """,
    "masked-max": """
        y = self.proj(x)
        return y[y > 0].max() * x
    """,
    "masked-min-int": """
        labels = (x * 3).long()
        return x * labels[labels > -2].min()
    """,
    "one-hot-cross-entropy": """
        logp = self.proj(x).log_softmax(-1)
        labels = torch.arange(x.shape[0]) + 1
        return -(F.one_hot(labels).float() * logp).sum(-1).mean() * x
    """,
    "arange-from-count": """
        n = (x > 0).sum()
        return torch.arange(n).float().sum() * x
    """,
}
# Held out (session 10): centring, thresholds, masking and normalisation as model code writes them,
# added after the "safe by proof" work without running the fixes on them first; their own total is printed.
HELD_OUT = {
    "centred-by-global-mean": """
        mu = x.mean().item()
        return self.proj(x - mu)
    """,
    "stable-exp-by-max": """
        h = self.proj(x)
        h = h - h.max().item()
        return h.exp()
    """,
    "peak-subtracted-in-place": """
        h = self.proj(x)
        h.sub_(h.max().item())
        return h.exp()
    """,
    "threshold-by-mean": """
        t = x.mean().item()
        return x * (x > t)
    """,
    "fill-masked-with-min": """
        s = self.proj(x)
        return s.masked_fill(s < 0, s.min().item())
    """,
    "normalise-by-absmax": """
        return x / x.abs().max().item()
    """,
    "clip-at-three-sigma": """
        sd = x.std().item()
        return x.clamp(-3 * sd, 3 * sd)
    """,
    "positive-count-weight": """
        n = x[x > 0].numel()
        return x * n
    """,
    "masked-l1-over-valid": """
        valid = x != 0
        return x[valid].abs().sum() / valid.sum()
    """,
    "zero-negatives-via-nonzero": """
        y = self.proj(x)
        y[(y < 0).nonzero(as_tuple=True)] = 0.0
        return y
    """,
    "float-mean-offset": """
        m = float(self.proj(x).mean())
        return x - m
    """,
    "kth-value-threshold": """
        kth = x.flatten().kthvalue(3).values.item()
        return torch.where(x >= kth, x, 0.0)
    """,
}
PROGRAMS.update(HELD_OUT)


def source(body: str) -> str:
    return textwrap.dedent(HEADER).lstrip() + textwrap.indent(textwrap.dedent(body).strip() + "\n", " " * 8)


def _model(text: str):
    namespace: dict = {}
    exec(compile(text, "<program>", "exec"), namespace)
    torch.manual_seed(0)
    return namespace["Model"]().eval()


def breaks(text: str, x: torch.Tensor) -> int:
    """Dynamo's breaks; a function it gives up on (no graph: `"%f" % t`) or fails in (`format(t)`) counts one."""
    torch._dynamo.reset()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the programs' own prints
            explained = torch._dynamo.explain(_model(text).forward)(x.clone())
    except Exception:
        return 1
    finally:
        torch._dynamo.reset()
    return explained.graph_break_count if explained.graph_count else 1


def same_outputs(original: str, fixed: str, x: torch.Tensor, exact: bool) -> bool:
    """The same outputs: bit for bit (NaN where NaN was) when `exact`, else within rounding."""
    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):  # the programs' own prints
        expected, actual = _model(original)(x.clone()), _model(fixed)(x.clone())
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    for e, a in zip(expected, actual):
        if isinstance(e, str) or isinstance(a, str):
            if e != a:
                return False
            continue
        if not (torch.is_tensor(e) and torch.is_tensor(a)):
            e, a = torch.as_tensor(e), torch.as_tensor(a)  # numbers, or a number kept as a 0-d tensor
        if e.dtype != a.dtype and e.dim() > 0 or not torch.allclose(e.double(), a.double(), equal_nan=True):
            return False
        if exact and not (e.dtype == a.dtype and torch.equal(e.nan_to_num(), a.nan_to_num())):
            return False
    return len(expected) == len(actual)


def main() -> None:
    warnings.filterwarnings("ignore")
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(0))
    counts: dict[str, dict[str, int]] = {}
    changed = []
    print(f"{'program':28} before default unsafe  same")
    for name, body in PROGRAMS.items():
        original = source(body)
        row = {"before": breaks(original, x)}
        same = True
        for build, unsafe in (("default", False), ("unsafe", True)):
            _, fixed = fix_snippet(original, unsafe=unsafe)
            row[build] = breaks(fixed, x)
            same = same and same_outputs(original, fixed, x, exact=not unsafe)
        if not same:
            changed.append(name)
        counts[name] = row
        print(f"{name:28} {row['before']:6} {row['default']:7} {row['unsafe']:6}  {'yes' if same else 'NO'}")
    for label, names in (("", PROGRAMS), ("held out: ", HELD_OUT)):
        before, default, unsafe = (sum(counts[n][k] for n in names) for k in ("before", "default", "unsafe"))
        print(
            f"{label}{len(names)} programs, {before} breaks; removed by default fixes: {before - default} "
            f"({(before - default) / before:.0%}), with --unsafe-fixes: {before - unsafe} "
            f"({(before - unsafe) / before:.0%}); outputs changed: {len([c for c in changed if c in names])}"
        )
    print(f"changed: {changed}")


if __name__ == "__main__":
    main()
