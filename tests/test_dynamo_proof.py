"""Every rule's claim, checked against the real TorchDynamo (torch._dynamo.explain, fullgraph=True).

INVALID examples must break the graph at exactly the lines the linter reports
(or recompile on later calls, for the recompilation family; or compile as one graph,
for the performance family, whose findings are not breaks), with one of the
graph-break codes the rule names; VALID examples must compile as one graph
without recompiling.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.dynamo_harness import run_example  # noqa: E402
from tests.rule_examples import examples, lint_snippet  # noqa: E402
from transpiler.lint.rule import REGISTRY  # noqa: E402

# Rules whose break makes Dynamo skip the whole frame instead of splitting it.
FRAME_SKIPPING = {"TP501", "TP502", "TP512", "TP515"}


@pytest.mark.parametrize(("rule", "source"), examples("INVALID"))
def test_invalid_example_is_confirmed_by_dynamo(rule, source):
    lines = sorted({d.line for d in lint_snippet(source) if d.code == rule.code})
    assert lines, f"{rule.code} does not report its own example"
    report = run_example(source, name=rule.code)
    if rule.family == "recompile":
        assert report.recompiles(), report.summary()
        return
    if rule.family == "perf":  # a slower spelling, not a break: it compiles as one graph
        assert report.clean() and not report.recompiles(), report.summary()
        return
    for line in lines:
        assert report.breaks_at(line), f"{rule.code} reports line {line}; Dynamo: {report.summary()}"
    if rule.dynamo_codes:
        assert set(rule.dynamo_codes) & set(
            report.gb_codes
        ), f"{rule.code} predicts {rule.dynamo_codes}; Dynamo reported {report.gb_codes}"
    if rule.code in FRAME_SKIPPING:
        assert report.frame_skipped, report.summary()


@pytest.mark.parametrize(("rule", "source"), examples("VALID"))
def test_valid_example_compiles_as_one_graph(rule, source):
    report = run_example(source, name=rule.code)
    assert report.clean(), report.summary()
    assert not report.recompiles(), report.summary()


# Whole-program cases: each line the linter reports must break under Dynamo, and each
# line marked `# break` must be reported (the analysis follows calls, not just forward).
PROGRAMS = {
    "helpers-typed-from-call-sites": """
import torch
from torch import nn


def attend(q, k, mask):
    scores = q @ k.transpose(-2, -1)
    if mask.any():  # break
        scores = scores.masked_fill(mask, -1e9)
    return normalise(scores)


def normalise(s):
    if s.sum() > 0:  # break
        s = s / s.sum()
    return s


def scale(h, factor):
    if factor > 1:
        h = h * factor
    return h


class Model(nn.Module):
    def forward(self, x):
        q = x.view(2, 4)
        y = attend(q, q, (q @ q.T) > 0)
        return scale(y, x.shape[0]).sum() + self.helper(x)

    def helper(self, t):
        if t.mean() > 0:  # break
            return t * 2
        return -t
""",
    "inherited-forward-calls-override": """
import torch
from torch import nn


class Base(nn.Module):
    def forward(self, x):
        return self.mix(x + 1) * 2

    def mix(self, x):
        return x


class Model(Base):
    def mix(self, x):
        print("mixing")  # break
        return x - 1
""",
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_whole_program_findings_are_dynamo_breaks(name):
    source = PROGRAMS[name].lstrip("\n")
    reported = sorted({d.line for d in lint_snippet(source) if REGISTRY[d.code].family == "break"})
    marked = [n for n, line in enumerate(source.splitlines(), 1) if line.endswith("# break")]
    assert reported == marked
    report = run_example(source, name=name)
    for line in reported:
        assert report.breaks_at(line), f"line {line}: {report.summary()}"
