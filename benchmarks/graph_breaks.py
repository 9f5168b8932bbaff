"""How many graph breaks do the fixes remove? Counted by `torch._dynamo.explain`, before and after.

    python benchmarks/graph_breaks.py [--models gpt2,bert] [--unsafe] [--json out.json]

Each case is a model package copied into a temporary directory three times:
`before` (the copy as it is), `safe` (the copy after `fix_project` with the safe
fixes) and, with `--unsafe`, `unsafe` (the safe and the unsafe fixes). The three
versions differ only by the fixes: the `transformers` copies have their relative
imports that leave the package (`from ...modeling_utils import`) made absolute
(`from transformers.modeling_utils import`) in every version, so they import the
installed library. Each version is imported in turn under the same package name
(sys.modules is purged in between), built with the same seed, given the state_dict
of `before`, put in eval mode, and then

- run under `torch._dynamo.explain` (graph count, break count, break reasons), and
- run eagerly; its output (logits / last_hidden_state / the tensor returned) is
  compared with that of `before`: identical (`torch.equal`), close
  (`torch.testing.assert_close`) or different.

The cases are (a) the fixture models of fixtures/models and fixtures/finetune.py,
built from the table `FIXTURE_CASES` (constructor arguments and input shapes; the
fixtures are one package, fixed together), and (b) `transformers` models built
from tiny random configs (2 layers, hidden 32, batch 2, sequence 8; no download),
from the table `HF_CASES`; `-eager` cases use the attention written in the modeling
file and a padded batch, MoE cases the expert loop written there.

Counting: `explain` misses a break before the first traced op (a leading print)
and can count more graphs than it gives reasons for (resumed frames); the totals
therefore also give dynamo's own `graph_break` counter. Break reasons are sorted
into kinds (`BREAK_KINDS`) by whether a meaning-preserving rewrite of the source
exists for them; the remaining breaks are listed by source line. Prints markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import logging
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch._dynamo
from torch import nn
from torch._dynamo.utils import counters

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the transpiler, when run as `python benchmarks/graph_breaks.py`

from transpiler.lint import engine  # noqa: E402
from transpiler.lint.fixer import fix_project  # noqa: E402

SEQ = 8  # tokens per sequence
BATCH = 2

# --------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One model: which package it lives in, how to build it, and its inputs."""

    name: str
    package: str  # "fixtures", or the directory under transformers/models ("gpt2")
    build: Callable[[Callable[[str], ModuleType]], nn.Module]  # gets `module(submodule name)`
    inputs: Callable[[], dict[str, Any]]
    note: str = ""


def tokens(vocab: int = 64, seq: int = SEQ) -> torch.Tensor:
    return torch.randint(1, vocab, (BATCH, seq))


def causal_mask(seq: int = SEQ) -> torch.Tensor:
    return torch.full((seq, seq), float("-inf")).triu(1)


def fixture(name: str, module: str, cls: str, args: tuple, inputs: Callable[[], dict[str, Any]]) -> Case:
    return Case(name, "fixtures", lambda m: getattr(m(module), cls)(*args), inputs)


# Constructor arguments and input shapes of every nn.Module of the fixtures. Left out:
# BaseBlock (abstract: its `mix` raises NotImplementedError).
FIXTURE_CASES = [
    fixture(
        "Attention",
        "models.attention",
        "Attention",
        (32, 4),
        lambda: {"x": torch.randn(BATCH, SEQ, 32), "mask": causal_mask()},
    ),
    fixture("PatchEmbed", "models.clean", "PatchEmbed", (), lambda: {"x": torch.randn(BATCH, 3, 18, 18)}),
    fixture("GatedMLP", "models.clean", "GatedMLP", (), lambda: {"x": torch.randn(BATCH, SEQ, 16)}),
    fixture(
        "MaskedMeanPool",
        "models.clean",
        "MaskedMeanPool",
        (),
        lambda: {
            "x": torch.randn(BATCH, SEQ, 16),
            "mask": torch.arange(SEQ).expand(BATCH, SEQ) < torch.tensor([[3], [SEQ]]),
        },
    ),
    fixture("RMSNorm", "models.layers", "RMSNorm", (32,), lambda: {"x": torch.randn(BATCH, SEQ, 32)}),
    fixture("MLP", "models.layers", "MLP", (32, 64), lambda: {"x": torch.randn(BATCH, SEQ, 32)}),
    fixture("ResidualMLP", "models.layers", "ResidualMLP", (32, 64), lambda: {"x": torch.randn(BATCH, SEQ, 32)}),
    fixture("Router", "models.moe", "Router", (32, 4, 2), lambda: {"x": torch.randn(BATCH * SEQ, 32)}),
    fixture("MoE", "models.moe", "MoE", (32, 64), lambda: {"x": torch.randn(BATCH, SEQ, 32)}),
    fixture(
        "TransformerBlock",
        "models.transformer",
        "TransformerBlock",
        (32, 4, 64),
        lambda: {"x": torch.randn(BATCH, SEQ, 32), "mask": causal_mask()},
    ),
    fixture("TinyTransformer", "models.transformer", "TinyTransformer", (), lambda: {"tokens": tokens()}),
    fixture("ConvBlock", "models.vision", "ConvBlock", (8, 16, 2), lambda: {"x": torch.randn(BATCH, 8, 16, 16)}),
    fixture("TinyResNet", "models.vision", "TinyResNet", (), lambda: {"x": torch.randn(BATCH, 3, 16, 16)}),
    fixture("Classifier", "finetune", "Classifier", (), lambda: {"tokens": tokens()}),
]

# A tiny decoder / encoder: the config keys most `transformers` text models share.
TINY = dict(
    vocab_size=99,
    hidden_size=32,
    intermediate_size=37,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
    pad_token_id=0,
)
DECODER = TINY | dict(num_key_value_heads=2, use_cache=False)
MOE = DECODER | dict(num_local_experts=4, num_experts_per_tok=2)


def hf(
    name: str,
    package: str,
    model: str,
    config: dict[str, Any],
    inputs: Callable[[], dict[str, Any]] | None = None,
    config_class: str | None = None,
    note: str = "",
) -> Case:
    """A `transformers` model `package.modeling_<package>.<model>` built from `<Prefix>Config(**config)`."""
    prefix = model.split("For")[0].removesuffix("Model").removesuffix("LMHead")

    def build(module: Callable[[str], ModuleType]) -> nn.Module:
        configuration = module(f"configuration_{package}")
        cls = config_class or next(
            n for n in dir(configuration) if n.endswith("Config") and n.lower() == f"{prefix}config".lower()
        )
        return getattr(module(f"modeling_{package}"), model)(getattr(configuration, cls)(**config))

    return Case(name, package, build, inputs or (lambda: {"input_ids": tokens(99)}), note)


EAGER = {"attn_implementation": "eager"}  # the attention written in the modeling file, as used for output_attentions
EXPERTS = {"experts_implementation": "eager"}  # the expert loop written in the modeling file (default: grouped_mm)
GPT2 = dict(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64, use_cache=False)
ENCODER_DECODER = dict(
    vocab_size=99,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    max_position_embeddings=64,
    use_cache=False,
    pad_token_id=0,
)
IMAGE = dict(image_size=32, patch_size=8, num_channels=3)


def seq2seq() -> dict[str, Any]:
    return {"input_ids": tokens(99), "decoder_input_ids": tokens(99)}


def pixels() -> dict[str, Any]:
    return {"pixel_values": torch.randn(BATCH, 3, 32, 32)}


def padded() -> dict[str, Any]:
    """A batch whose second sequence ends in three padding tokens: the mask is not all ones."""
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, -3:] = 0
    return {"input_ids": tokens(99), "attention_mask": mask}


HF_CASES = [
    hf("gpt2", "gpt2", "GPT2LMHeadModel", GPT2),
    hf("gpt2-eager", "gpt2", "GPT2LMHeadModel", GPT2 | EAGER, padded),
    hf("bert", "bert", "BertModel", TINY),
    hf("bert-eager", "bert", "BertModel", TINY | EAGER, padded),
    hf(
        "distilbert", "distilbert", "DistilBertModel", dict(vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37)
    ),
    hf("roberta", "roberta", "RobertaModel", TINY),
    hf("llama", "llama", "LlamaForCausalLM", DECODER),
    hf("llama-eager", "llama", "LlamaForCausalLM", DECODER | EAGER, padded),
    hf("mistral", "mistral", "MistralForCausalLM", DECODER),
    hf("qwen2", "qwen2", "Qwen2ForCausalLM", DECODER),
    hf("qwen3", "qwen3", "Qwen3ForCausalLM", DECODER | dict(head_dim=8)),
    hf("gemma", "gemma", "GemmaForCausalLM", DECODER | dict(head_dim=8)),
    hf("phi", "phi", "PhiForCausalLM", DECODER),
    hf("phi3", "phi3", "Phi3ForCausalLM", DECODER),
    hf("gpt_neox", "gpt_neox", "GPTNeoXForCausalLM", TINY | dict(use_cache=False)),
    hf("opt", "opt", "OPTForCausalLM", TINY | dict(ffn_dim=37, word_embed_proj_dim=32, use_cache=False)),
    hf("falcon", "falcon", "FalconForCausalLM", TINY | dict(use_cache=False)),
    hf("bloom", "bloom", "BloomForCausalLM", dict(vocab_size=99, hidden_size=32, n_layer=2, n_head=4, use_cache=False)),
    hf("mixtral", "mixtral", "MixtralForCausalLM", MOE | EXPERTS),
    hf(
        "qwen2_moe",
        "qwen2_moe",
        "Qwen2MoeForCausalLM",
        DECODER
        | EXPERTS
        | dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16),
    ),
    hf(
        "olmoe",
        "olmoe",
        "OlmoeForCausalLM",
        DECODER | EXPERTS | dict(num_experts=4, num_experts_per_tok=2),
    ),
    hf(
        "switch_transformers",
        "switch_transformers",
        "SwitchTransformersModel",
        dict(
            vocab_size=99,
            d_model=32,
            d_kv=8,
            d_ff=37,
            num_layers=2,
            num_decoder_layers=2,
            num_heads=4,
            num_experts=4,
            expert_capacity=8,
            num_sparse_encoder_layers=1,
            num_sparse_decoder_layers=1,
            use_cache=False,
        ),
        seq2seq,
    ),
    hf(
        "mamba",
        "mamba",
        "MambaModel",
        dict(vocab_size=99, hidden_size=32, state_size=4, num_hidden_layers=2, use_cache=False),
    ),
    hf(
        "t5",
        "t5",
        "T5Model",
        dict(vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, use_cache=False),
        seq2seq,
    ),
    hf("bart", "bart", "BartModel", ENCODER_DECODER, seq2seq),
    hf("vit", "vit", "ViTModel", TINY | IMAGE, pixels),
    hf(
        "clip",
        "clip",
        "CLIPModel",
        dict(text_config=TINY | dict(max_position_embeddings=SEQ), vision_config=TINY | IMAGE, projection_dim=16),
        lambda: {"input_ids": tokens(99)} | pixels(),
    ),
    hf(
        "whisper",
        "whisper",
        "WhisperModel",
        ENCODER_DECODER | dict(num_mel_bins=16, max_source_positions=8, max_target_positions=32),
        lambda: {"input_features": torch.randn(BATCH, 16, 16), "decoder_input_ids": tokens(99)},
    ),
]

# --------------------------------------------------------------------------- copies and fixes

TRANSFORMERS_MODELS = Path(importlib.util.find_spec("transformers").origin).parent / "models"
# `from ...x import` (3 dots: transformers) / `from ..y.z import` (2 dots: transformers.models)
_RELATIVE = re.compile(r"^(\s*from\s+)(\.{2,})([\w.]*)(\s+import\b)", re.MULTILINE)
_OUTSIDE = {2: "transformers.models", 3: "transformers"}


def absolute_imports(text: str) -> str:
    """Relative imports that leave a transformers model package, made absolute (same line count)."""

    def replace(match: re.Match) -> str:
        head, dots, rest, tail = match.groups()
        base = _OUTSIDE[len(dots)]
        return f"{head}{base}{'.' + rest if rest else ''}{tail}"

    return _RELATIVE.sub(replace, text)


def hf_package_name(package: str) -> str:
    return f"hf_{package}"  # not a name an installed distribution uses ("bert", "t5" might be)


def copy_package(package: str, root: Path) -> Path:
    """The package's sources under `root`, importable as `root` on sys.path; returns the package dir."""
    if package == "fixtures":
        target = root / "fixtures"
        (target / "models").mkdir(parents=True)
        shutil.copy(REPO / "fixtures" / "__init__.py", target)
        shutil.copy(REPO / "fixtures" / "finetune.py", target)
        for source in (REPO / "fixtures" / "models").glob("*.py"):
            shutil.copy(source, target / "models")
        return target
    target = root / hf_package_name(package)
    target.mkdir(parents=True)
    for source in (TRANSFORMERS_MODELS / package).glob("*.py"):
        # The package's own __init__ is a lazy module with generated import structure: a plain one will do.
        text = (
            '"""Copy of a transformers model package."""\n'
            if source.name == "__init__.py"
            else absolute_imports(source.read_text())
        )
        (target / source.name).write_text(text)
    return target


def model_files(package_dir: Path) -> list[Path]:
    if package_dir.name == "fixtures":
        return sorted(package_dir.rglob("*.py"))
    return sorted(package_dir.glob("modeling_*.py"))


def lint(files: list[Path], overlay: dict | None = None) -> list:
    return engine.lint(files, lambda code: True, "graph_breaks", None, jobs=1, overlay=overlay)


@dataclass
class Version:
    """One copy of a package: where it is, and what the fixer did to it."""

    label: str  # before / safe / unsafe
    root: Path
    findings: int
    fixes: int = 0
    fixed_codes: Counter = field(default_factory=Counter)
    error: str | None = None  # the fixer failed: this copy is left unfixed


def prepare(package: str, scratch: Path, labels: list[str]) -> dict[str, Version]:
    """Copies of `package`, one per label, the `safe` / `unsafe` ones fixed in place."""
    versions = {}
    before_dir = copy_package(package, scratch / package / "before")
    files = model_files(before_dir)
    versions["before"] = Version("before", before_dir.parent, len(lint(files)))
    for label in labels:
        root = scratch / package / label
        shutil.copytree(before_dir.parent, root)
        fixed_files = model_files(root / before_dir.name)
        try:
            result = fix_project(fixed_files, lambda overlay: lint(fixed_files, overlay), unsafe=label == "unsafe")
        except Exception as error:  # a rule under construction: report it, measure the rest
            versions[label] = Version(label, root, versions["before"].findings, error=_one_line(error))
            continue
        for path, text in result.sources.items():
            Path(path).write_text(text)
        versions[label] = Version(
            label, root, len(result.remaining), len(result.applied), Counter(d.code for d in result.applied)
        )
    return versions


@contextlib.contextmanager
def imported(root: Path, package: str) -> Iterator[Callable[[str], ModuleType]]:
    """`module(sub)` imports `<package>.<sub>` from `root`; every module of the package is dropped afterwards."""
    name = "fixtures" if package == "fixtures" else hf_package_name(package)

    def drop() -> None:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]

    drop()
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        yield lambda sub: importlib.import_module(f"{name}.{sub}")
    finally:
        sys.path.remove(str(root))
        drop()


# --------------------------------------------------------------------------- measuring

_GB = re.compile(r"/gb/gb(\d{3,5})\.html", re.IGNORECASE)


@dataclass
class Run:
    graphs: int = 0
    breaks: int = 0
    reasons: list[str] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)  # per reason: innermost user frame, `file:line: code`
    counted: int = 0  # dynamo's own graph_break counter (sees some breaks explain misses: a print before any op)
    error: str | None = None
    outputs: list[torch.Tensor] | None = None  # of the eager run
    seconds: float = 0.0


def tensors(output: Any) -> list[torch.Tensor]:
    """Every tensor of a model's output (a tensor, tuple, dict or transformers ModelOutput), in order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, dict):  # ModelOutput is an OrderedDict of the fields that are set
        output = list(output.values())
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in tensors(item)]
    return []


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Models print, log and warn; dynamo logs its breaks at WARNING: none of it belongs in the table."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(previous)


def measure(case: Case, version: Version, state: dict | None) -> tuple[Run, dict]:
    """Build `case` from `version`, explain it and run it eagerly."""
    run = Run()
    start = time.perf_counter()
    try:
        with imported(version.root, case.package) as module, quiet():
            torch.manual_seed(0)
            model = case.build(module)
            if state is not None:
                model.load_state_dict(state)
            state = model.state_dict()
            model.eval()
            torch.manual_seed(1)
            inputs = case.inputs()
            with torch.no_grad():
                torch.manual_seed(2)
                run.outputs = tensors(model(**inputs))
                torch._dynamo.reset()
                counters.clear()
                torch.manual_seed(2)
                explained = torch._dynamo.explain(model)(**inputs)
            run.graphs, run.breaks = explained.graph_count, explained.graph_break_count
            run.reasons = [r.reason for r in explained.break_reasons]
            run.sites = [site(r.user_stack, version.root) for r in explained.break_reasons]
            run.counted = sum(counters["graph_break"].values())
    except Exception as error:  # a case that fails is reported, not fatal
        run.error = _one_line(error)
    run.seconds = time.perf_counter() - start
    return run, state


def site(stack: list, root: Path) -> str:
    """`file:line: code` of the innermost frame of `stack` in the copied package (else the innermost frame)."""
    frames = [f for f in stack if f.filename.startswith(str(root))] or stack[-1:]
    if not frames:
        return "?"
    frame = frames[-1]
    return f"{Path(frame.filename).relative_to(root) if frame.filename.startswith(str(root)) else frame.filename}:{frame.lineno}: {(frame.line or '').strip()}"


def _one_line(error: Exception) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0][:200]


def compare(before: list[torch.Tensor] | None, after: list[torch.Tensor] | None) -> str:
    """identical (same dtype, shape, bits), close (assert_close) or DIFFERS, over every output tensor."""
    if before is None or after is None:
        return "n/a"
    if len(before) == len(after) and all(
        b.dtype == a.dtype and b.shape == a.shape and torch.equal(b, a) for b, a in zip(before, after)
    ):
        return "identical"
    try:
        torch.testing.assert_close(after, before, equal_nan=True)
        return "close"
    except AssertionError:
        return "DIFFERS"


# What kind of break a reason names, and whether a meaning-preserving source rewrite exists for it
# ("yes"; "depends" on how the value is used, see the site; "no": the break is the semantics).
BREAK_KINDS: list[tuple[re.Pattern, str, str]] = [
    (re.compile(r"Data-dependent branching|generic_jump TensorVariable"), "branch or assert on a tensor value", "yes"),
    (re.compile(r"Tensor\.item\(\)"), "`.item()`", "depends"),
    (re.compile(r"tolist"), "`.tolist()`", "depends"),
    (re.compile(r"Dynamic shape operator"), "data-dependent output shape (nonzero, unique, bincount, ...)", "no"),
    (re.compile(r"print|Failed to trace builtin operator"), "print", "yes"),
    (re.compile(r"logg", re.IGNORECASE), "logging", "yes"),
    (re.compile(r"warn", re.IGNORECASE), "warnings.warn", "yes"),
    (re.compile(r"skip|disable", re.IGNORECASE), "call of a skipped or compiler.disable'd function", "no"),
]
UNATTRIBUTED = ("graph without a reason (a frame resumed or re-entered)", "n/a")


def kind(reason: str) -> tuple[str, str]:
    for pattern, name, rewrite in BREAK_KINDS:
        if pattern.search(reason):
            return name, rewrite
    code = _GB.search(reason)
    first = next((line.strip() for line in reason.splitlines() if line.strip()), "")
    return f"other: {'GB' + code.group(1) + ' ' if code else ''}{first[:80]}", "?"


# The categories of issue 18's list, by Dynamo's graph-break code (the registry shipped with torch,
# torch/_dynamo/graph_break_registry.json, names each code's `Gb_type`). A reason whose code is in no
# group keeps its own `Gb_type` as its category.
CATEGORIES: list[tuple[str, frozenset[str]]] = [
    (".item()", frozenset({"GB0124"})),
    (".tolist() or a Python scalar of a tensor", frozenset({"GB0109"})),
    ("dynamic-shape operators", frozenset({"GB0036", "GB0037", "GB0038"})),
    ("data-dependent operators", frozenset({"GB0033"})),
    ("skipped functions", frozenset({"GB0007", "GB0008", "GB0009", "GB0098", "GB0099", "GB4297"})),
    ("breaks in loops", frozenset({"GB7000"})),
    ("data-dependent branching", frozenset({"GB0170"})),
    ("builtin operators on unsupported values", frozenset({"GB0059", "GB0193", "GB0213", "GB0215"})),
    ("RNN/GRU/LSTM modules", frozenset({"GB0014"})),
    ("unsupported method calls", frozenset({"GB0156", "GB0117", "GB6270", "GB7489"})),
    ("unsupported function calls", frozenset({"GB0147", "GB0148"})),
    ("arguments Dynamo cannot convert to proxies", frozenset({"GB0055", "GB0047"})),
    ("repr() of a tensor", frozenset({"GB0569"})),
    ("copy.deepcopy", frozenset({"GB4198", "GB0179"})),
    ("numpy", frozenset({"GB0105", "GB0231", "GB0290", "GB0293", "GB0294"})),
    ("torch.Generator", frozenset({"GB7650"})),
    ("logging", frozenset({"GB0291"})),
    ("python_type() of a tensor", frozenset({"GB4841"})),
    ("one_hot without num_classes", frozenset({"GB0246"})),
    ("torch._dynamo.graph_break()", frozenset({"GB0025"})),
    ("generator objects", frozenset({"GB0003", "GB0253", "GB8335"})),
    ("requires_grad_()", frozenset({"GB0125", "GB0206", "GB8985", "GB7324"})),
    ("torch.autograd.grad", frozenset({"GB9186", "GB0371", "GB0372", "GB6663"})),
    ("unsupported context managers", frozenset({"GB0142", "GB0066"})),
]
_GROUP_OF = {code: name for name, codes in CATEGORIES for code in codes}
# Reasons Dynamo gives without a code (2.13 words a data-dependent jump as `generic_jump TensorVariable()`).
_UNCODED = [(re.compile(r"generic_jump TensorVariable|Data-dependent branching"), "GB0170")]


def _registry() -> dict[str, str]:
    """Dynamo's graph-break codes by their `Gb_type` (the first line of a reason)."""
    path = Path(torch._dynamo.__file__).parent / "graph_break_registry.json"
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {entry[0]["Gb_type"]: code for code, entry in entries.items() if entry}


_BY_TYPE: dict[str, str] = {}


def break_code(reason: str) -> str | None:
    """Dynamo's `GBxxxx` code of a break reason: its help link, its first line's `Gb_type`, or a known wording."""
    found = _GB.search(reason)
    if found:
        return "GB" + found.group(1).zfill(4)
    if not _BY_TYPE:
        _BY_TYPE.update(_registry())
    first = next((line.strip() for line in reason.splitlines() if line.strip()), "")
    if first in _BY_TYPE:
        return _BY_TYPE[first]
    return next((code for pattern, code in _UNCODED if pattern.search(reason)), None)


def category(reason: str) -> str:
    """Issue 18's category of a break reason (a print is told apart from other builtins by name)."""
    code = break_code(reason)
    if code == "GB0059" and re.search(r"\bprint\b", reason):
        return "print"
    if code in _GROUP_OF:
        return _GROUP_OF[code]
    first = next((line.strip() for line in reason.splitlines() if line.strip()), "?")
    return f"other: {code + ' ' if code else ''}{first[:80]}"


def kinds(run: Run) -> Counter:
    """Breaks of a run by (kind, rewrite); explain may count more breaks than it gives reasons for."""
    found = Counter(kind(reason) for reason in run.reasons)
    if run.breaks > len(run.reasons):
        found[UNATTRIBUTED] += run.breaks - len(run.reasons)
    return found


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated case names (default: all)")
    parser.add_argument("--unsafe", action="store_true", help="also measure the version with the unsafe fixes")
    parser.add_argument("--json", type=Path, help="write every measurement here")
    options = parser.parse_args()
    cases = FIXTURE_CASES + HF_CASES
    if options.models:
        wanted = options.models.split(",")
        unknown = set(wanted) - {c.name for c in cases}
        if unknown:
            sys.exit(f"unknown models: {', '.join(sorted(unknown))}; known: {', '.join(c.name for c in cases)}")
        cases = [c for c in cases if c.name in wanted]
    labels = ["safe", "unsafe"] if options.unsafe else ["safe"]
    logging.getLogger("transformers").setLevel(logging.ERROR)

    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graph_breaks_") as scratch:
        prepared: dict[str, dict[str, Version]] = {}
        for case in cases:
            if case.package not in prepared:
                prepared[case.package] = prepare(case.package, Path(scratch), labels)
            versions = prepared[case.package]
            before, state = measure(case, versions["before"], None)
            row = {
                "name": case.name,
                "package": case.package,
                "before": before,
                "findings": {"before": versions["before"].findings},
            }
            for label in labels:
                after, _ = measure(case, versions[label], state)
                row[label] = after
                row["findings"][label] = versions[label].findings
                row[f"fixes_{label}"] = versions[label].fixes
                row[f"fixed_codes_{label}"] = dict(versions[label].fixed_codes)
                row[f"output_{label}"] = compare(before.outputs, after.outputs)
                row[f"fix_error_{label}"] = versions[label].error
            rows.append(row)
            print(
                f"  {case.name}: {before.breaks} -> " + ", ".join(f"{row[l].breaks} ({l})" for l in labels),
                file=sys.stderr,
            )
    print(render(rows, labels, time.perf_counter() - started))
    if options.json:
        options.json.write_text(json.dumps([_jsonable(r) for r in rows], indent=1))


def _jsonable(row: dict) -> dict:
    out = {}
    for key, value in row.items():
        if isinstance(value, Run):
            value = {k: v for k, v in asdict(value).items() if k != "outputs"}
        out[key] = value
    return out


def render(rows: list[dict], labels: list[str], seconds: float) -> str:
    versions = ["before", *labels]
    head = ["model", "breaks before"] + [f"breaks after ({l})" for l in labels]
    head += ["findings before"] + [f"findings after ({l})" for l in labels]
    head += [f"fixes ({l})" for l in labels] + [f"output ({l})" for l in labels]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    # Findings and fixes belong to a package: shown on its first case only (the fixtures are one package).
    first_of_package = {}
    for row in rows:
        first_of_package.setdefault(row["package"], row["name"])
    for row in rows:
        first = first_of_package[row["package"]] == row["name"]
        cells = [row["name"]] + [("error" if row[v].error else str(row[v].breaks)) for v in versions]
        cells += [str(row["findings"][v]) if first else "″" for v in versions]
        cells += [_fixes(row, l) if first else "″" for l in labels] + [row[f"output_{l}"] for l in labels]
        lines.append("| " + " | ".join(cells) + " |")
    packages = [r for r in rows if first_of_package[r["package"]] == r["name"]]

    ok = [r for r in rows if not any(r[v].error for v in versions)]
    total = {v: sum(r[v].breaks for r in ok) for v in versions}
    counted = {v: sum(r[v].counted for r in ok) for v in versions}
    by_kind = {v: sum((kinds(r[v]) for r in ok), Counter()) for v in versions}
    lines.append("")
    lines.append(f"Totals over the {len(ok)} models that ran in every version:")
    lines.append("")
    for label in labels:
        rewritable = {
            v: sum(n for (_, rewrite), n in by_kind[v].items() if rewrite == "yes") for v in ("before", label)
        }
        differs = sum(r[f"output_{label}"] == "DIFFERS" for r in rows)
        lines.append(
            f"- {label}: breaks {total['before']} -> {total[label]} ({_share(total['before'], total[label])} removed); "
            f"breaks of a kind with a meaning-preserving rewrite {rewritable['before']} -> {rewritable[label]} "
            f"({_share(rewritable['before'], rewritable[label])} removed); dynamo's graph_break counter "
            f"{counted['before']} -> {counted[label]}; outputs that differ: {differs}; "
            f"lint findings {sum(r['findings']['before'] for r in packages)} -> "
            f"{sum(r['findings'][label] for r in packages)}, fixes applied {sum(r[f'fixes_{label}'] for r in packages)} "
            f"(over {len(packages)} packages)"
        )
    failures = {
        (r["package"] if "fixer" in what else r["name"], what, error)
        for r in rows
        for what, error in _errors(r, labels)
    }
    for name, what, error in sorted(failures):
        lines.append(f"- {name} ({what}) failed: {error}")

    lines += ["", "Breaks by kind (explain's reasons):", ""]
    lines += [
        "| kind | meaning-preserving rewrite | " + " | ".join(versions) + " |",
        "|---|---|" + "---|" * len(versions),
    ]
    for key in sorted(set().union(*by_kind.values()), key=lambda k: -by_kind["before"][k]):
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(str(by_kind[v][key]) for v in versions) + " |")

    last = labels[-1]
    sites = Counter((kind(reason)[0], where) for r in ok for reason, where in zip(r[last].reasons, r[last].sites))
    if sites:
        lines += ["", f"Remaining breaks ({last}), by site:", "", "| count | kind | site |", "|---|---|---|"]
        lines += [
            f"| {n} | {k} | `{where}` |"
            for (k, where), n in sorted(sites.items(), key=lambda item: (item[0][1], item[0][0]))
        ]
    lines += [
        "",
        f"Python {platform.python_version()}, torch {torch.__version__}, transformers {_version('transformers')}, "
        f"{platform.machine()} with {os.cpu_count()} CPUs, {seconds:.0f} s",
    ]
    return "\n".join(lines)


def _fixes(row: dict, label: str) -> str:
    codes = row[f"fixed_codes_{label}"]
    detail = " (" + ", ".join(f"{code} x{n}" for code, n in sorted(codes.items())) + ")" if codes else ""
    return f"{row[f'fixes_{label}']}{detail}"


def _share(before: int, after: int) -> str:
    return f"{100 * (before - after) / before:.0f}%" if before else "n/a"


def _errors(row: dict, labels: list[str]) -> Iterator[tuple[str, str]]:
    for version in ["before", *labels]:
        if row[version].error:
            yield version, row[version].error
    for label in labels:
        if row[f"fix_error_{label}"]:
            yield f"fixer, {label}", row[f"fix_error_{label}"]


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
