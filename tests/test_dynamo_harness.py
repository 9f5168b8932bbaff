"""Tests for tests/dynamo_harness.py (observed behaviour of torch 2.13 CPU)."""

from __future__ import annotations

import linecache
import textwrap

import pytest

torch = pytest.importorskip("torch")

from tests.dynamo_harness import DynamoReport, ExampleError, gb_codes_in, run_example  # noqa: E402


def src(body: str) -> str:
    return textwrap.dedent(body).lstrip("\n")


def line_of(source: str, needle: str) -> int:
    hits = [i for i, ln in enumerate(source.splitlines(), 1) if needle in ln]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


PRINT = src("""
    import torch
    from torch import nn

    class Model(nn.Module):
        def forward(self, x):
            y = x + 1
            print("hello")
            return y * 2
    """)

IF_TENSOR = src("""
    import torch
    from torch import nn

    class Model(nn.Module):
        def forward(self, x):
            y = x + 1
            if y.sum() > 0:
                y = y - 1
            return y * 2
    """)

ITEM = src("""
    import torch
    from torch import nn

    class Model(nn.Module):
        def forward(self, x):
            y = x + 1
            v = y.sum().item()
            return y * v
    """)

LOOP_PRINT = src("""
    import torch
    from torch import nn

    class Model(nn.Module):
        def forward(self, x):
            y = x + 1
            for i in range(2):
                print("step", i)
            return y * 2
    """)

CLEAN = src("""
    import torch
    from torch import nn

    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2
    """)

STEP = src("""
    import torch
    from torch import nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.step = 0

        def forward(self, x):
            self.step += 1
            return x * 2
    """)


def test_print_breaks_at_print_line():
    r = run_example(PRINT, "print")
    line = line_of(PRINT, "print(")
    assert isinstance(r, DynamoReport)
    assert r.break_lines == {line}
    assert r.breaks_at(line)
    assert not r.breaks_at(line - 1)
    assert r.graph_count == 2 and r.graph_break_count == 1
    assert "GB0059" in r.explain_gb_codes
    assert r.fullgraph_error is not None and r.fullgraph_error_line == line
    assert not r.clean()
    assert not r.frame_skipped
    # a graph break gives 2 compiled frames on call 0, but that is no recompile
    assert r.frame_counts[0] == 2 and not r.recompiles()


def test_tensor_if_breaks_at_if_line():
    r = run_example(IF_TENSOR, "if_tensor")
    line = line_of(IF_TENSOR, "if y.sum() > 0")
    assert line in r.break_lines
    assert r.breaks_at(line)
    assert "GB0170" in r.gb_codes
    assert r.fullgraph_error_line == line
    assert not r.clean()


def test_item_breaks_under_explain_but_fullgraph_captures_it():
    r = run_example(ITEM, "item")
    line = line_of(ITEM, ".item()")
    assert r.break_lines == {line}
    assert r.breaks_at(line)
    assert "GB0124" in r.explain_gb_codes
    # fullgraph=True turns on capture_scalar_outputs: no error (graph-breaks.md §2)
    assert r.fullgraph_error is None
    assert not r.clean()


def test_print_in_for_loop_skips_whole_frame():
    r = run_example(LOOP_PRINT, "loop_print")
    line = line_of(LOOP_PRINT, "print(")
    assert r.graph_count == 0
    assert r.break_lines == set()  # explain sees nothing ...
    assert r.frame_skipped  # ... because the whole frame ran eagerly
    assert "GB7000" in r.gb_codes
    assert r.fullgraph_error_line == line
    assert r.breaks_at(line)
    assert not r.clean()


def test_break_before_first_op_is_missed_by_explain_but_breaks_at_sees_it():
    source = src("""
        import torch
        from torch import nn

        class Model(nn.Module):
            def forward(self, x):
                print("first")
                y = x + 1
                return y * 2
        """)
    r = run_example(source, "print_first")
    line = line_of(source, "print(")
    assert r.break_lines == set() and r.graph_count == 1  # explain misses it
    assert any("GB0059" in gb_codes_in(t) for t in r.counter_break_reasons)  # dynamo counted it
    assert r.fullgraph_error_line == line
    assert r.breaks_at(line)
    assert not r.clean()


def test_rnn_submodule_skips_frame():
    source = src("""
        import torch
        from torch import nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(8, 8)

            def forward(self, x):
                y = x + 1
                out, _ = self.rnn(y.view(1, 1, 8))
                return out.view(8) * 2
        """)
    r = run_example(source, "gru")
    assert r.frame_skipped and r.graph_count == 0 and r.forward_cache_entries == 0
    assert "GB0014" in r.gb_codes
    assert r.breaks_at(line_of(source, "self.rnn(y"))


def test_clean_example_is_clean_and_does_not_recompile():
    r = run_example(CLEAN, "clean")
    assert r.clean(), r.summary()
    assert r.graph_count == 1 and r.graph_break_count == 0
    assert r.fullgraph_error is None and r.fullgraph_error_line is None
    assert not r.frame_skipped
    assert r.frame_count == 1
    assert r.recompile_reasons == []
    assert not r.recompiles()


def test_int_attribute_counter_recompiles():
    r = run_example(STEP, "step", calls=3)
    assert r.recompile_reasons_captured
    assert r.frame_count == 3  # one compile per call
    assert r.recompiles()
    assert len(r.recompile_reasons) == 2
    assert any("step" in reason for reason in r.recompile_reasons)
    # it is not a graph break
    assert r.graph_break_count == 0 and not r.break_lines and r.fullgraph_error is None


def test_make_inputs_and_int_argument_recompile():
    source = src("""
        import torch
        from torch import nn

        class Model(nn.Module):
            def forward(self, x, k):
                if k > 3:
                    return x * 2
                return x - 1

        def make_inputs(call):
            return (torch.randn(4), [2, 4, 5][call])
        """)
    r = run_example(source, "int_arg", calls=3)
    assert r.clean()
    assert r.recompiles()
    # k == 2 guard fails at k=4; automatic dynamic then covers k=5 (graph-breaks.md §5)
    assert r.frame_count == 2 and r.recompile_count == 1
    assert "k == 2" in r.recompile_reasons[0]


def test_break_in_nested_helper_reports_innermost_example_line():
    source = src("""
        import torch
        from torch import nn

        def helper(t):
            print("inside helper")
            return t

        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                y = helper(y)
                return y * 2
        """)
    r = run_example(source, "nested")
    line = line_of(source, "print(")
    assert line in r.break_lines
    assert r.fullgraph_error_line == line
    assert r.fullgraph_error_lines[0] == line_of(source, "y = helper(y)")


def test_line_numbers_registered_in_linecache():
    r = run_example(PRINT, "linecache_check")
    line = line_of(PRINT, "print(")
    assert "print(" in linecache.getline(r.filename, line)


def test_same_name_different_source_gets_distinct_filename():
    a = run_example(CLEAN, "dup")
    b = run_example(PRINT, "dup")
    assert a.filename != b.filename
    assert b.breaks_at(line_of(PRINT, "print("))


def test_broken_example_raises_example_error():
    bad = src("""
        import torch
        from torch import nn

        class Model(nn.Module):
            def forward(self, x):
                return x @ torch.randn(3, 3)
        """)
    with pytest.raises(ExampleError, match="broken"):
        run_example(bad, "bad")
    with pytest.raises(ExampleError):
        run_example("x = 1\n", "no_model")
    with pytest.raises(ExampleError):
        run_example("def f(:\n", "syntax")


def test_dynamo_state_is_left_clean():
    import logging

    import torch._dynamo.convert_frame as cf

    hook = cf.get_and_maybe_log_recompilation_reasons
    handler_filters = [list(h.filters) for h in logging.getLogger("torch").handlers]
    run_example(STEP, "state")
    assert cf.get_and_maybe_log_recompilation_reasons is hook
    assert [list(h.filters) for h in logging.getLogger("torch").handlers] == handler_filters


def test_global_torch_state_changed_by_forward_is_restored():
    source = src("""
        import torch
        from torch import nn

        class Model(nn.Module):
            def forward(self, x):
                y = x + 1
                torch.set_grad_enabled(False)
                torch.use_deterministic_algorithms(True, warn_only=True)
                return y * 2
        """)
    assert torch.is_grad_enabled()
    det = torch.are_deterministic_algorithms_enabled()
    r = run_example(source, "global_state")
    assert torch.is_grad_enabled()
    assert torch.are_deterministic_algorithms_enabled() == det
    # within the recompile phase, call 1 starts with the state call 0 left behind
    assert r.recompiles()
    assert any("GLOBAL_STATE" in reason for reason in r.recompile_reasons)
