"""The op registry (transpiler/compiler/ops.py) and each backend's table of its text (emit/cpp/ops.py,
emit/triton/ops.py): every op of the registry has exactly one entry per backend, a template or a reason why
none renders it, and no table names an op the registry lacks. The registry's own facts agree with each other."""

from __future__ import annotations

import ast
import string
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType

import pytest

import emit.cpp.kernels as cpp_kernels
import emit.triton.kernels as triton_kernels
from emit.cpp import ops as cpp
from emit.triton import ops as triton
from transpiler.compiler import ops
from transpiler.compiler.regions import MIN_OPS

ROOT = Path(__file__).resolve().parent.parent
# Per backend: its table module, the table of templates, the table of ops it renders otherwise (each with why).
BACKENDS: dict[str, tuple[ModuleType, str, str]] = {
    "cpp": (cpp, "CPP_OPS", "RENDERED_ELSEWHERE"),
    "triton": (triton, "TRITON_OPS", "RENDERED_ELSEWHERE"),
}
REGISTRY = list(ops.BY_NAME)


def keys_as_written(module: ModuleType, table: str) -> list[str]:
    """The keys of the dict literal assigned to `table` in `module`'s source, repeats kept (the dict drops them)."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    for node in tree.body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id == table:
            assert isinstance(node.value, ast.Dict), f"{table} is not written as a dict literal"
            return [ast.literal_eval(key) for key in node.value.keys]
    raise AssertionError(f"no {table} in {module.__file__}")


def coverage_problems(
    registry: Iterable[str], templates: list[str], elsewhere: list[str], reasons: Mapping[str, str]
) -> list[str]:
    """What breaks "exactly one entry per op": an op in neither table, twice in one or in both; an entry naming no op
    of the registry; a reason left empty. `templates` and `elsewhere`: the tables' keys as written (with any repeat)."""
    registry = list(registry)
    entries = [*templates, *elsewhere]
    problems = [f"{op}: {entries.count(op)} entries" for op in registry if entries.count(op) != 1]
    problems += [f"{op}: not an op of the registry" for op in dict.fromkeys(entries) if op not in registry]
    problems += [f"{op}: no reason given" for op in elsewhere if not reasons[op].strip()]
    return problems


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_op_has_exactly_one_entry_per_backend(backend):
    module, templates, elsewhere = BACKENDS[backend]
    written = [keys_as_written(module, templates), keys_as_written(module, elsewhere)]
    # The literals read are the tables the backend uses.
    assert [set(keys) for keys in written] == [set(getattr(module, templates)), set(getattr(module, elsewhere))]
    assert coverage_problems(REGISTRY, *written, getattr(module, elsewhere)) == []


def test_the_coverage_check_fails_on_a_removed_a_repeated_or_an_unknown_entry():
    """The check above can fail: each way of breaking a backend's table is reported, naming the op."""
    templates, elsewhere = keys_as_written(cpp, "CPP_OPS"), keys_as_written(cpp, "RENDERED_ELSEWHERE")
    reasons = cpp.RENDERED_ELSEWHERE
    assert coverage_problems(REGISTRY, templates, elsewhere, reasons) == []
    without_exp = [t for t in templates if t != "exp"]
    assert coverage_problems(REGISTRY, without_exp, elsewhere, reasons) == ["exp: 0 entries"]
    assert coverage_problems(REGISTRY, [*templates, "exp"], elsewhere, reasons) == ["exp: 2 entries"]
    assert coverage_problems(REGISTRY, templates, [*elsewhere, "sum"], reasons) == ["sum: 2 entries"]
    assert coverage_problems(REGISTRY, [*templates, "sum"], elsewhere, reasons) == ["sum: 2 entries"]
    unknown = coverage_problems(REGISTRY, [*templates, "cube"], elsewhere, reasons)
    assert unknown == ["cube: not an op of the registry"]
    assert coverage_problems(REGISTRY, templates, elsewhere, {**reasons, "sum": " "}) == ["sum: no reason given"]
    # A new op of the registry with no backend entry.
    assert coverage_problems([*REGISTRY, "cube"], templates, elsewhere, reasons) == ["cube: 0 entries"]


def _fields(template: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}


@pytest.mark.parametrize("backend", BACKENDS)
def test_templates_name_only_the_ops_operands(backend):
    module, templates, _ = BACKENDS[backend]
    for name, entry in getattr(module, templates).items():
        operands = {str(n) for n in range(ops.BY_NAME[name].arity)}
        variants = [entry.template, getattr(entry, "bool_template", None), getattr(entry, "scalar_template", None)]
        variants += [text for _, text in getattr(entry, "constant_operand", ())]
        for text in filter(None, variants):
            assert _fields(text) <= operands | {"type"}, (name, text)


def test_the_activations_render_through_every_backends_templates():
    """An activation chosen at run time is computed by its op's template (a switch over ACTIVATION_OPS)."""
    for op in ops.ACTIVATION_OPS:
        assert op in cpp.CPP_OPS and op in triton.TRITON_OPS, op
        assert ops.BY_NAME[op].arity == 1, op


def test_the_row_ops_are_those_the_row_kernels_render():
    rows = {op.name for op in ops.ROW_OPS}
    assert set(cpp_kernels.ROW_REDUCTIONS) | {"row_size"} == rows
    assert set(triton_kernels._REDUCTIONS) | {"row_size"} == rows
    assert rows <= set(cpp.RENDERED_ELSEWHERE) and rows <= set(triton.RENDERED_ELSEWHERE)


def test_integer_exact_ops_keep_integers():
    """An op exact on integers in C++ computes them in their own type: none that makes floats of integers."""
    assert cpp.INTEGER_OPS and not any(ops.BY_NAME[name].int_to_float for name in cpp.INTEGER_OPS)


@pytest.mark.parametrize("op", ops.BY_NAME.values(), ids=lambda op: op.name)
def test_operand_facts_name_operands_of_the_op(op):
    positions = [*op.constant_operands, *op.dtype_operands, *op.bool_operands, *op.kind_operands]
    positions += [p for p in (op.dim_operand, op.keepdim_operand, op.integer_operand) if p is not None]
    assert all(0 <= p < op.arity for p in positions)
    assert op.integer_operand is None or op.integer_operand in op.constant_operands
    if op.dim_operand is not None or op.keepdim_operand is not None:
        assert op.kind is ops.OpKind.REDUCTION
        assert {op.dim_operand, op.keepdim_operand} - {None} <= set(op.constant_operands)
    assert bool(op.operand_conditions) == (op.kind is ops.OpKind.SHIFTED)
    assert all("{x}" in condition for condition in op.operand_conditions)


def test_reductions_reduce_along_an_operand_or_the_last_dim():
    """Every reduction but layer_norm takes its dim as operand 1; those without keepdim keep the input's shape."""
    reductions = {op.name: op for op in ops.REDUCTIONS}
    assert {name for name, op in reductions.items() if op.dim_operand is None} == {"layer_norm"}
    kept = {name for name, op in reductions.items() if op.keepdim_operand is None}
    assert kept == {"softmax", "log_softmax", "layer_norm"}


def test_module_facts_belong_to_the_ops_module_spellings():
    for op in ops.BY_NAME.values():
        spelled = {s.split("(")[0].removeprefix("module:") for s in op.spellings if s.startswith("module:")}
        for module in op.modules:
            assert module.cls in spelled, (op.name, module.cls)
            assert all("{m}" in c or "{x}" in c for c in module.conditions)
    # Dropout is no op of the registry: its call stays eager around the kernels (docs/compiler.md), so that its
    # random draws are eager's in training.
    assert "torch.nn.Dropout" not in ops.MODULES
    assert not any("Dropout" in s for op in ops.BY_NAME.values() for s in op.spellings)


def test_costs_and_names():
    assert ops.ACTIVATION.cost == MIN_OPS  # a run-time activation alone is worth a kernel
    assert ops.TRIVIAL == {"identity", "pos", "to", "to_like"}
    for pattern, required in ops.KERNEL_PATTERNS.items():
        assert pattern not in ops.BY_NAME and required <= set(ops.BY_NAME), pattern
    assert all(name in ops.ACTIVATION_OPS and ops.BY_NAME[name].arity == 1 for name in ops.EPILOGUE_OPS)
