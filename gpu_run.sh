set -x
(python -m pip install -q --no-index --no-deps .whl/*.whl; pip install -q -e . --no-deps --no-build-isolation) >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv
python - <<'PY'
import torch
p = torch.cuda.get_device_properties(0)
print("pci", getattr(p, "pci_bus_id", None), getattr(p, "pci_domain_id", None), getattr(p, "pci_device_id", None))
import sys; sys.path.insert(0, "benchmarks")
import energy
m = energy.EnergyMeter.for_device("cuda")
print("meter", m)
PY
python benchmarks/models_bench.py --prepare gpu_models --models gpt2,bert,llama > $OUT/prepare.log 2>&1; tail -2 $OUT/prepare.log
timeout 280 python benchmarks/models_bench.py --compiled gpu_models --device cuda --models gpt2,bert,llama --dtypes bfloat16 --first-call none --variants eager,compile,transpiled --json $OUT/energy.json > $OUT/energy.md 2> $OUT/energy.err; echo "bench rc=$?"
cat $OUT/energy.md | head -60
tail -5 $OUT/energy.err
for m in gpt2 llama; do timeout 100 python -m transpiler verify gpu_models/$m --device cuda --cases 4 > $OUT/verify_$m.txt 2>&1; echo "verify $m rc=$?"; tail -3 $OUT/verify_$m.txt; grep -A2 "different (" $OUT/verify_$m.txt | head -12; done
