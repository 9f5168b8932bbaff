"""The generated Triton and kernels files read as black writes them, though the build never runs black.

emit/layout.py lays out the long lines itself; these tests run black (line length 120) over what the
emitters write and require that it change nothing: the goldens, and the kernel files of fuzzer-made
programs (tests/fuzzing.py), also with every name of the program made long, so that most statements
must be split. A line black would lay out differently fails with its diff.
"""

from __future__ import annotations

import ast
import difflib
import re
from pathlib import Path

import black
import pytest

from emit.layout import SKIP, hug_powers, layout
from emit.host.module import emit
from transpiler.pipeline.compiling import Compiled, Job, compile_file
from transpiler.source.discovery import module_name
from transpiler.lint.engine import project_facts
from transpiler.compiler.autodiff import backwards_of
from transpiler.compiler.regions import find_regions

pytest.importorskip("torch")
from tests import fuzzing  # noqa: E402  (draws programs with torch)

ROOT = Path(__file__).resolve().parent.parent
MODE = black.Mode(line_length=120)
# Seeds of fuzzer programs per backend's draw; each program is also emitted with long names.
SEEDS = range(120)


def assert_black_keeps(text: str, what: str) -> None:
    formatted = black.format_str(text, mode=MODE)
    if formatted != text:
        diff = "".join(difflib.unified_diff(text.splitlines(True), formatted.splitlines(True), "emitted", "black"))
        pytest.fail(f"black would change {what}:\n{diff[:4000]}")


def _kernel_files(text: str, path: str = "cases.py") -> list[tuple[str, str]]:
    regions = find_regions(ast.parse(text), path, "cases", False, text)
    if not regions:
        return []
    files = emit(text, regions, path, 0, backwards=backwards_of(regions)[0])  # the backward kernels read as black too
    return [(f.name, f.text) for f in files if f.name.endswith(("_triton.py", "_kernels.py"))]


def _long_names(program: fuzzing.Program) -> str:
    """The program's class with each input and local renamed `<name>_of_a_rather_long_descriptive_name`."""
    source = program.source()
    names = {i.name for i in program.inputs} | {s.target for s in program.body if s.target}
    for name in sorted(names, key=len, reverse=True):
        source = re.sub(rf"(?<![\w.]){re.escape(name)}\b", f"{name}_of_a_rather_long_descriptive_name", source)
    return source


GOLDEN = ROOT / "tests" / "golden" / "compiled"


@pytest.mark.parametrize(
    "name", sorted(p.name for p in GOLDEN.glob("_*.py") if p.name.endswith(("_triton.py", "_kernels.py")))
)
def test_goldens_are_black_formatted(name):
    assert_black_keeps((GOLDEN / name).read_text(), name)


@pytest.mark.parametrize("backend", fuzzing.BACKENDS)
def test_fuzzer_programs_emit_black_formatted_kernel_files(backend):
    emitted = 0
    for seed in SEEDS:
        program = fuzzing.generate(seed, backend)
        for variant in (program.source(), _long_names(program)):
            for name, text in _kernel_files(fuzzing.FILE_HEADER + variant):
                assert_black_keeps(text, f"{name} of seed {seed} ({backend}):\n{variant}")
                emitted += 1
    assert emitted >= len(SEEDS)  # most programs hold a region, each emitted twice


def test_a_long_module_path_is_black_formatted():
    """A long path lengthens the docstrings, comments, file names and `source=` of every kernel file."""
    path = "models/" + "a_directory_with_a_long_name/" * 3 + "modeling_a_model_with_a_rather_long_name_indeed.py"
    emitted = _kernel_files(fuzzing.FILE_HEADER + fuzzing.generate(1).source(), path)
    assert emitted and any(len(line) > 120 for _, text in emitted for line in text.splitlines())
    for name, text in emitted:
        assert_black_keeps(text, name)
        assert SKIP not in text
    kernels = dict(emitted)["_modeling_a_model_with_a_rather_long_name_indeed_kernels.py"]
    # the docstring's lines are text: left whole however long
    assert "(_modeling_a_model_with_a_rather_long_name_indeed_triton.py) or a C++ kernel\n" in kernels


def test_fixture_models_with_long_names_are_black_formatted(tmp_path):
    """The fixture models (norms, attention, MoE, vision) through the build's compile, every variable and
    parameter name made long, so that the kernels' lines must be split."""
    models = tmp_path / "models"
    models.mkdir()
    for path in (ROOT / "fixtures" / "models").glob("*.py"):
        (models / path.name).write_text(ast.unparse(_Longer().visit(ast.parse(path.read_text()))))
    files = sorted(models.glob("*.py"))
    facts = project_facts(files)
    compiled = [compile_file(Job(f, None, f"models/{f.name}", module_name(f), 0, f.stem), facts) for f in files]
    emitted = [(name, text) for c in compiled if isinstance(c, Compiled) for name, text in c.files]
    assert len([name for name, _ in emitted if name.endswith("_triton.py")]) >= 4
    for name, text in emitted:
        if name.endswith(("_triton.py", "_kernels.py")):
            assert_black_keeps(text, f"{name} with long names")


class _Longer(ast.NodeTransformer):
    """Every variable and parameter but `self` renamed `<name>_with_a_rather_long_name` (classes, functions
    and imports keep their names)."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        stores = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.bound = (stores | {n.arg for n in ast.walk(node) if isinstance(n, ast.arg)}) - {"self"}
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id += "_with_a_rather_long_name" * (node.id in self.bound)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg += "_with_a_rather_long_name" * (node.arg in self.bound)
        return node


# -- the layout itself ---------------------------------------------------------------------------------------
LINES = [
    "        row = index0 * a_long_name_stride0 + index1 * a_long_name_stride1 + index2 * a_long_name_stride2_xxxxxxxxxxxxxxxxxx",
    "            value = widen(tl.load(value_ptr + value_row + col * value_stride_with_a_long_name_xxxxxxxxxxxxxxxxxx, mask=mask))",
    "    tl.store(an_output_out_ptr + an_output_out_row + col * an_output_out_stride, an_output.to(an_output_out_ptr.dtype.element_ty), mask=mask)",
    "    return (hidden_states_3, hidden_states_2,)",
    "    return (first_element_with_a_long_name_xxxxxxxxxxxxxxxxxxxxxxxxxxx, second_element_with_a_long_name_xxxxxxxxxxxxxxxxxx)",
    "def fused_norm_reference(residual, hidden_states, final_layer_norm_weight, final_layer_norm_bias, final_layer_norm_epsilon):",
    "def fused_norm_reference(a_single_parameter_with_a_name_so_long_that_the_line_cannot_hold_it_on_one_line_with_its_def_xxxxxx):",
    "    t = torch.nn.functional.layer_norm(hidden_states_1, final_layer_norm_weight.shape, final_layer_norm_weight, final_layer_norm_bias, eps)",
    "    out = a_fairly_long_operand_name * tl.sigmoid(1.702 * a_fairly_long_operand_name_that_makes_the_line_too_long_xxxxxxxxxx)",
    "    out = a_fairly_long_operand_name * another_fairly_long_operand_name - yet_another_long_operand_name * one_more_name_xxxxxxx",
    'k = Kernel("k", k_reference, shapes=Shapes(inputs=("x",), steps=(Step("t0", ("x",)), Step("t1", ("t0",)),), outputs=("t1",)))',
]


@pytest.mark.parametrize("line", LINES)
def test_a_line_is_laid_out_as_black_does(line):
    laid = "\n".join(layout(line)) + "\n"
    assert_black_keeps(_in_context(line, laid), f"the layout of {line!r}")
    assert SKIP not in laid
    assert (laid != line + "\n" or ",)" in line) and all(len(part) <= 120 for part in laid.splitlines())


def _in_context(line: str, laid: str) -> str:
    """`laid` where black sees it as the line would stand: in a function body, nested as deep as it is indented."""
    depth = (len(line) - len(line.lstrip())) // 4
    blocks = ["def f():\n"] * bool(depth) + [f"{'    ' * d}if c:\n" for d in range(1, depth)]
    return "".join(blocks) + laid + ("    pass\n" if line.startswith("def ") else "")


def test_an_unhandled_shape_keeps_its_line_and_black_leaves_it():
    # batch norm's Triton statement with transformers' names: black splits its head again, at the first bracket
    alpha = "((1.0 / tl.sqrt_rn(normalization_running_var + normalization_eps)) * normalization_weight)"
    shift = f"(normalization_bias - normalization_running_mean * {alpha})"
    line = f"    hidden_states_1 = hidden_states * {alpha} + {shift}"
    (laid,) = layout(line)
    assert laid == line + SKIP
    assert_black_keeps(_in_context(line, laid + "\n"), "a skipped line")


@pytest.mark.parametrize(
    ("expression", "hugged"),
    [
        ("x ** 2", "x**2"),
        ("x ** -0.5", "x**-0.5"),
        ("self.a.b ** y", "self.a.b**y"),
        ("f(x) ** 2", "f(x) ** 2"),
        ("x ** f(2)", "x ** f(2)"),
        ('x ** float("inf")', 'x ** float("inf")'),
        ("x ** 1e-05", "x**1e-05"),
    ],
)
def test_powers_are_hugged_as_black_does(expression, hugged):
    assert hug_powers(expression) == hugged
    assert black.format_str(f"y = {expression}\n", mode=MODE) == f"y = {hugged}\n"
