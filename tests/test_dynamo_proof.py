"""Every rule's claim, checked against the real TorchDynamo (torch._dynamo.explain, fullgraph=True).

INVALID examples must break the graph at exactly the lines the linter reports
(or recompile on later calls, for the recompilation family), with one of the
graph-break codes the rule names; VALID examples must compile as one graph
without recompiling.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.dynamo_harness import run_example  # noqa: E402
from tests.rule_examples import examples, lint_snippet  # noqa: E402

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
    for line in lines:
        assert report.breaks_at(line), f"{rule.code} reports line {line}; Dynamo: {report.summary()}"
    if rule.dynamo_codes:
        assert set(rule.dynamo_codes) & set(report.gb_codes), (
            f"{rule.code} predicts {rule.dynamo_codes}; Dynamo reported {report.gb_codes}"
        )
    if rule.code in FRAME_SKIPPING:
        assert report.frame_skipped, report.summary()


@pytest.mark.parametrize(("rule", "source"), examples("VALID"))
def test_valid_example_compiles_as_one_graph(rule, source):
    report = run_example(source, name=rule.code)
    assert report.clean(), report.summary()
    assert not report.recompiles(), report.summary()
