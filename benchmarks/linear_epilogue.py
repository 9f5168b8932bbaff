"""Linear + activation on the GPU: F.linear then the activation, against cuBLASLt's fused epilogue.

    python benchmarks/linear_epilogue.py        # needs a CUDA device and triton (for do_bench)

`torch._addmm_activation(bias, x, w.t(), use_gelu)` runs the matmul with the bias and a
ReLU or GELU applied in cuBLASLt's epilogue. Its GELU is the tanh approximation, so it can
stand only for `gelu(approximate='tanh')`-class activations (GPT-2's `gelu_new`), not the
exact GELU of BERT and ViT. The shapes are the MLP up-projections of the models that
benchmarks/models_bench.py runs. Device time per call (`triton.testing.do_bench`, median).
"""

import torch
import torch.nn.functional as F
from triton.testing import do_bench

SHAPES = ((4096, 768, 3072, "GPT-2 / BERT MLP"), (6304, 768, 3072, "ViT MLP"), (4096, 1024, 2816, "LLaMA MLP"))


def main() -> None:
    print(
        "| tokens x in -> out | dtype | activation | linear + activation us | fused epilogue us | speed-up | max abs diff |"
    )
    print("|---|---|---|---|---|---|---|")
    for m, k, n, name in SHAPES:
        for dtype in (torch.bfloat16, torch.float32):
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
            b = torch.randn(n, device="cuda", dtype=dtype)
            for act, separate in (
                ("gelu (tanh)", lambda: F.gelu(F.linear(x, w, b), approximate="tanh")),
                ("relu", lambda: F.relu(F.linear(x, w, b))),
            ):
                fused = lambda: torch._addmm_activation(b, x, w.t(), use_gelu=act != "relu")  # noqa: E731
                apart, together = (do_bench(f, warmup=50, rep=300) * 1e3 for f in (separate, fused))
                diff = (fused().float() - separate().float()).abs().max().item()
                print(
                    f"| {m}x{k}->{n} ({name}) | {str(dtype)[6:]} | {act} | {apart:.1f} | {together:.1f} | {apart / together:.2f}x | {diff:.1e} |"
                )


if __name__ == "__main__":
    main()
