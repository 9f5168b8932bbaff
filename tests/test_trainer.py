"""A transpiled transformers model trains in Hugging Face's `Trainer` with the original's loss curve.

LLaMA and GPT-2 from the installed transformers, each transpiled whole, on tiny configs: the same weights,
data and seeds for the original and the transpiled model, a few AdamW steps on the CPU. The logged losses
agree within float32 rounding, the backward kernels ran (the regions' gradients are generated code, not
eager autograd's), and the trained weights agree as far as AdamW lets rounding through.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.transpiled import importable

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # Trainer's requirement

PACKAGE = "transpiled_trainer"
MODELS = Path(transformers.__file__).parent / "models"
VOCAB, SEQ, STEPS = 96, 12, 4


def gpt2_config(dropout: float):
    return transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=32, bos_token_id=0, eos_token_id=0,
        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
    )  # fmt: skip


CONFIGS = {  # test id: (family, class, config)
    "llama": (
        "llama",
        "LlamaForCausalLM",
        lambda: transformers.LlamaConfig(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
            vocab_size=VOCAB, max_position_embeddings=32,
        ),
    ),
    "gpt2": ("gpt2", "GPT2LMHeadModel", lambda: gpt2_config(0.0)),
    # Dropout stays eager (docs/compiler.md): under the Trainer's seed both models drop the same elements.
    "gpt2 with dropout": ("gpt2", "GPT2LMHeadModel", lambda: gpt2_config(0.1)),
}  # fmt: skip
FAMILIES = sorted({family for family, _, _ in CONFIGS.values()})


@pytest.fixture(scope="module")
def transpiled(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("trainer")
    with importable(base, {MODELS / family: base / PACKAGE / family for family in FAMILIES}, (PACKAGE,)):
        yield base


class Tokens(torch.utils.data.Dataset):
    """Fixed random token sequences, labels the inputs (causal LM)."""

    def __init__(self, n: int) -> None:
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(7))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, k: int) -> dict:
        return {"input_ids": self.ids[k], "labels": self.ids[k]}


def train(model, out: Path) -> tuple[list[float], dict[str, torch.Tensor]]:
    arguments = transformers.TrainingArguments(
        output_dir=str(out), max_steps=STEPS, per_device_train_batch_size=4, learning_rate=1e-3, logging_steps=1,
        report_to=[], save_strategy="no", use_cpu=True, seed=0, data_seed=0, dataloader_num_workers=0,
        disable_tqdm=True,
    )  # fmt: skip
    trainer = transformers.Trainer(model=model, args=arguments, train_dataset=Tokens(16))
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("model", CONFIGS)
def test_the_transpiled_model_trains_with_the_original_loss_curve(transpiled, tmp_path, model):
    model, name, config = CONFIGS[model]
    original_class = getattr(importlib.import_module(f"transformers.models.{model}.modeling_{model}"), name)
    compiled_class = getattr(importlib.import_module(f"{PACKAGE}.{model}.modeling_{model}"), name)
    runtime = importlib.import_module(f"{PACKAGE}.{model}._transpile_runtime")
    torch.manual_seed(0)
    original = original_class(config())
    compiled = compiled_class(config())
    compiled.load_state_dict(original.state_dict())
    backward = [k for k in runtime.KERNELS if k.name.endswith("_backward")]
    before = sum(k.counts.get("cpp", 0) for k in backward)

    expected, expected_weights = train(original, tmp_path / "original")
    actual, weights = train(compiled, tmp_path / "transpiled")

    assert len(actual) == len(expected) == STEPS
    # Losses near log(VOCAB) = 4.6, in float32: the kernels round once where eager rounds per op.
    torch.testing.assert_close(torch.tensor(actual), torch.tensor(expected), rtol=1e-4, atol=1e-4)
    assert sum(k.counts.get("cpp", 0) for k in backward) > before, {k.name: dict(k.counts) for k in backward}
    # AdamW steps every weight by about lr whatever its gradient's size; a gradient that is rounding noise (~0)
    # may take a step of either sign: weights agree to 2 * lr per step.
    for key, value in expected_weights.items():
        torch.testing.assert_close(weights[key], value, rtol=0, atol=2 * 1e-3 * STEPS)
