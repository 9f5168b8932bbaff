"""The fixture zoo under fixtures/: golden lint output, and the models stay real, runnable code.

`fixtures/expected.txt` holds the exact text output of

    transpile lint fixtures/ --no-cache

run from the repository root. It is one file for the whole tree, not one per
directory, because the analysis is whole-project: base classes, re-exports and
the call graph cross directories (fixtures/finetune.py subclasses a model of
fixtures/models/), so only a single run over fixtures/ gives the real answers.

After an intended change of the rules or the fixtures, regenerate it with

    TRANSPILE_UPDATE_GOLDEN=1 python -m pytest tests/test_fixtures.py

(which also rewrites fixtures/expected_fixes.diff, the fixes of every fixture)

and review the diff: lines that appear or vanish are findings gained or lost.
"""

from __future__ import annotations

import importlib
import inspect
import io
import os
import pkgutil
import re
import tokenize
import warnings
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from transpiler.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
GOLDEN = FIXTURES / "expected.txt"
UPDATE = os.environ.get("TRANSPILE_UPDATE_GOLDEN") == "1"
LINE = re.compile(r"^(?P<path>\S+?):(?P<line>\d+):(?P<col>\d+): (?P<code>[A-Z]+\d+) ")


def run_lint(*paths: str) -> tuple[int, str]:
    """`transpile lint PATHS --no-cache` in-process, with the repository root as working directory."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        env = {"NO_COLOR": "1", "TRANSPILE_TRACEBACK": "1"}
        result = CliRunner().invoke(main, ["lint", *paths, "--no-cache"], env=env, catch_exceptions=False)
    finally:
        os.chdir(cwd)
    return result.exit_code, result.stdout


def findings(output: str) -> list[tuple[str, int, str]]:
    """(path, line, code) of each finding line of a text report."""
    return [(m["path"], int(m["line"]), m["code"]) for m in map(LINE.match, output.splitlines()) if m]


@pytest.fixture(scope="module")
def fixture_lint() -> tuple[int, str]:
    return run_lint("fixtures/")


# -- golden output -------------------------------------------------------------------


def test_lint_output_matches_golden(fixture_lint):
    code, output = fixture_lint
    if UPDATE:
        GOLDEN.write_text(output, encoding="utf-8")
        warnings.warn(f"TRANSPILE_UPDATE_GOLDEN=1: rewrote {GOLDEN.relative_to(ROOT)}", stacklevel=1)
        return
    assert GOLDEN.exists(), "no golden file; create it with TRANSPILE_UPDATE_GOLDEN=1"
    expected = GOLDEN.read_text(encoding="utf-8")
    assert output == expected, (
        "lint output differs from fixtures/expected.txt; if the change is intended, "
        "regenerate with TRANSPILE_UPDATE_GOLDEN=1 and review the diff"
    )
    assert code == 1  # findings present


FIXES_GOLDEN = FIXTURES / "expected_fixes.diff"


def test_fixes_match_golden():
    """The rewrite of every fixture, as a reviewable diff (`lint --diff --unsafe-fixes`)."""
    code, output = run_lint("fixtures/", "--diff", "--unsafe-fixes")
    if UPDATE:
        FIXES_GOLDEN.write_text(output, encoding="utf-8")
        warnings.warn(f"TRANSPILE_UPDATE_GOLDEN=1: rewrote {FIXES_GOLDEN.relative_to(ROOT)}", stacklevel=1)
        return
    assert output == FIXES_GOLDEN.read_text(encoding="utf-8"), (
        "fixes differ from fixtures/expected_fixes.diff; if intended, regenerate with TRANSPILE_UPDATE_GOLDEN=1"
    )
    assert code == 1 and output.count("+++ b/") >= 5


def test_golden_paths_are_relative_to_the_repository_root(fixture_lint):
    _, output = fixture_lint
    paths = {path for path, _, _ in findings(output)}
    assert paths and all(p.startswith("fixtures/") and (ROOT / p).is_file() for p in paths)


@pytest.mark.parametrize(
    "path", ["fixtures/models/attention.py", "fixtures/models/transformer.py", "fixtures/finetune.py"]
)
def test_a_file_linted_alone_is_reported_as_in_the_whole_tree(path, fixture_lint):
    """pre-commit passes changed files alone: base classes in other files are found as context."""
    _, whole = fixture_lint
    _, alone = run_lint(path)
    expected = [f for f in findings(whole) if f[0] == path]
    assert expected and findings(alone) == expected


def test_clean_models_have_no_findings():
    code, output = run_lint("fixtures/models/clean.py")
    assert (code, output) == (0, "All checks passed!\n")


def test_clean_models_have_no_findings_in_the_whole_tree_run(fixture_lint):
    _, output = fixture_lint
    assert not [f for f in findings(output) if f[0] == "fixtures/models/clean.py"]


def test_each_spelling_file_has_its_one_print_seen(fixture_lint):
    _, output = fixture_lint
    spellings = sorted(p.name for p in (FIXTURES / "spellings").glob("*.py") if p.name != "__init__.py")
    found = findings(output)
    for name in spellings:
        codes = [c for path, _, c in found if path == f"fixtures/spellings/{name}"]
        assert codes == ([] if name == "not_compiled.py" else ["TP101"]), name


def test_broken_files_are_reported_not_crashed_on(fixture_lint):
    _, output = fixture_lint
    broken = {path.rpartition("/")[2]: c for path, _, c in findings(output) if path.startswith("fixtures/broken/")}
    assert broken == {"syntax_error.py": "TP901", "latin1_no_cookie.py": "TP902", "binary.py": "TP902"}
    assert (FIXTURES / "broken" / "empty.py").read_bytes() == b""


def test_one_noqa_in_the_fixtures_and_it_only_silences_its_code(fixture_lint):
    directives = [
        (p.relative_to(ROOT).as_posix(), tok.start[0])
        for p in sorted(FIXTURES.rglob("*.py"))
        if p.parent.name != "broken"
        for tok in tokenize.generate_tokens(io.StringIO(p.read_text(encoding="utf-8")).readline)
        if tok.type == tokenize.COMMENT and "noqa" in tok.string
    ]
    assert [path for path, _ in directives] == ["fixtures/suppression.py"]
    _, output = fixture_lint
    assert [c for path, n, c in findings(output) if (path, n) == directives[0]] == ["TP301"]


# -- the fixtures are real code -----------------------------------------------------------

# Constructor and small inputs for every nn.Module class defined under fixtures/models.
MODELS = {
    "RMSNorm": (lambda m: m.RMSNorm(16), lambda: (torch.randn(2, 5, 16),)),
    "MLP": (lambda m: m.MLP(16, 32), lambda: (torch.randn(2, 5, 16),)),
    "ResidualMLP": (lambda m: m.ResidualMLP(16, 32), lambda: (torch.randn(2, 5, 16),)),
    "Attention": (
        lambda m: m.Attention(16, 4),
        lambda: (torch.randn(2, 5, 16), torch.full((5, 5), float("-inf")).triu(1)),
    ),
    "TransformerBlock": (lambda m: m.TransformerBlock(16, 4, 32), lambda: (torch.randn(2, 5, 16),)),
    "TinyTransformer": (lambda m: m.TinyTransformer(), lambda: (torch.randint(0, 64, (2, 8)),)),
    "Router": (lambda m: m.Router(16, 4, 2), lambda: (torch.randn(10, 16),)),
    "MoE": (lambda m: m.MoE(16, 32), lambda: (torch.randn(2, 5, 16),)),
    "ConvBlock": (lambda m: m.ConvBlock(3, 8, stride=2), lambda: (torch.randn(2, 3, 8, 8),)),
    "TinyResNet": (lambda m: m.TinyResNet(), lambda: (torch.randn(2, 3, 16, 16),)),
    "PatchEmbed": (lambda m: m.PatchEmbed(), lambda: (torch.randn(2, 3, 10, 10),)),
    "GatedMLP": (lambda m: m.GatedMLP(), lambda: (torch.randn(2, 5, 16),)),
    "MaskedMeanPool": (lambda m: m.MaskedMeanPool(), lambda: (torch.randn(2, 5, 16), torch.rand(2, 5) > 0.2)),
    "DecoderBlock": (lambda m: m.DecoderBlock(), lambda: (torch.randn(2, 5, 16), torch.randn(2, 5, 16))),
}
ABSTRACT = {"BaseBlock"}  # `mix` is left to subclasses
CLEAN = ["PatchEmbed", "GatedMLP", "MaskedMeanPool", "DecoderBlock"]


def model_modules():
    import fixtures.models as package

    return [importlib.import_module(f"fixtures.models.{info.name}") for info in pkgutil.iter_modules(package.__path__)]


def module_classes_of(module):
    return {
        name: cls
        for name, cls in vars(module).items()
        if inspect.isclass(cls) and issubclass(cls, nn.Module) and cls.__module__ == module.__name__
    }


@pytest.fixture
def quiet():
    """Seeded RNG, and no warnings from the models' eager runs (transformers, deliberate NaN checks)."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_every_fixture_model_is_covered_by_the_runner():
    defined = {name for module in model_modules() for name in module_classes_of(module)}
    assert defined - ABSTRACT == set(MODELS)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.usefixtures("quiet")
def test_fixture_model_runs_eagerly(name):
    module = next(m for m in model_modules() if name in module_classes_of(m))
    build, inputs = MODELS[name]
    model = build(module)
    for training in (True, False):
        model.train(training)
        out = model(*inputs())
        for tensor in out if isinstance(out, tuple) else (out,):
            assert isinstance(tensor, torch.Tensor) and tensor.isfinite().all()


@pytest.mark.usefixtures("quiet")
def test_transformer_training_loop_runs():
    from fixtures.models.transformer import TinyTransformer, train

    tokens = torch.randint(0, 64, (2, 8))
    losses = train(TinyTransformer(), [(tokens, tokens)] * 3)
    assert len(losses) == 3 and losses[-1] < losses[0]


@pytest.mark.parametrize("name", CLEAN)
@pytest.mark.usefixtures("quiet")
def test_clean_models_compile_to_one_graph(name):
    """The negatives are real: Dynamo itself finds no break in them (fullgraph=True)."""
    import fixtures.models.clean as clean

    build, inputs = MODELS[name]
    model = build(clean).eval()
    args = inputs()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(*args), model(*args))


@pytest.mark.usefixtures("quiet")
def test_finetune_and_suppression_fixtures_run():
    from fixtures import finetune, suppression

    model = finetune.Classifier(classes=3)
    batches = [(torch.randint(1, 64, (4, 8)), torch.randint(0, 3, (4,))) for _ in range(2)]
    with torch.compiler.set_stance("force_eager"):
        finetune.finetune(model, batches)
    assert model(batches[0][0]).shape == (4, 3)
    assert finetune.token_dropout(torch.randint(1, 64, (4, 8))).shape == (4, 8)
    loss = torch.tensor(0.5)
    assert suppression.LossScaler()(loss).item() == 512.0


@pytest.mark.usefixtures("quiet")
def test_spelling_fixtures_run():
    from fixtures.spellings import (
        compile_call,
        compile_decorator,
        from_torch_import_nn,
        from_torch_nn_import_module,
        import_torch,
        import_torch_nn_as_nn,
        modulelist_subclass,
        not_compiled,
        pretrained_model,
        pretrained_modeling_utils,
        sequential_subclass,
    )

    x = torch.randn(2, 8)
    models = [
        import_torch_nn_as_nn.ScaleNet(),
        from_torch_import_nn.ShiftNet(),
        from_torch_nn_import_module.ProjectNet(),
        import_torch.SquashNet(),
        sequential_subclass.make_stack(),
        pretrained_model.TinyPreTrainedModel(pretrained_model.TinyConfig()),
        pretrained_modeling_utils.LibPreTrainedModel(pretrained_modeling_utils.LibConfig()),
    ]
    for model in models:
        assert model(x).shape == (2, 8)
    assert modulelist_subclass.make_heads()(x).shape == (3, 2, 8)
    with torch.compiler.set_stance("force_eager"):  # run the compiled functions eagerly
        assert compile_decorator.fused_gelu(x).shape == (2, 8)
        assert compile_call.fast_swish(x).shape == (2, 8)
    assert not_compiled.Tokenizer().forward("abc").tolist() == [33, 34, 35]
    assert isinstance(not_compiled.describe(x), float)
