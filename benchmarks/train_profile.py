"""One training step of eager and transpiled models under torch.profiler: CUDA kernel time and the top ops.

    python benchmarks/models_bench.py --prepare gpu_models --models gpt2,llama
    python benchmarks/train_profile.py llama,gpt2          # run from the repository root, on a CUDA machine

Each model as benchmarks/train_bench.py builds it (`--no-dropout`), three steps, the transpiled runtime's
compiles waited for, two more steps, then one step profiled; the transpiled kernels' counters after it.
"""

import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_bench import MODELS_BY_NAME, batch, build, make_step, transpiled_runtime  # noqa: E402

compiled = Path("gpu_models").resolve()
for name in sys.argv[1].split(","):
    model = MODELS_BY_NAME[name]
    for variant in ("eager", "transpiled"):
        module, runnable, opt, vocab = build(model, variant, "cuda", compiled, None, False)
        step = make_step(runnable, opt, batch(model, "cuda", vocab, 1), "cuda")
        for _ in range(3):
            step()
        if variant == "transpiled":
            transpiled_runtime(model, compiled).wait_for_kernels()
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        events = prof.key_averages()
        total = sum(e.device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
        cpu = max(e.cpu_time_total for e in events)
        print(f"== {name} {variant}: CUDA kernel time {total / 1e3:.2f} ms, longest CPU op {cpu / 1e3:.2f} ms")
        print(events.table(sort_by="device_time_total", row_limit=14, max_name_column_width=60))
        if variant == "transpiled":
            runtime = transpiled_runtime(model, compiled)
            for k in runtime.KERNELS:
                if k.counts:
                    print(f"   {k.name}: {dict(k.counts)}")
