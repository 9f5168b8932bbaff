(python -m pip install -q --no-index --no-deps .whl/*.whl; pip install -q -e . --no-deps --no-build-isolation) >/dev/null 2>&1
[ -f gpu_models/prepared.json ] || python benchmarks/models_bench.py --prepare gpu_models > $OUT/prepare.txt 2>&1
python benchmarks/models_bench.py --compiled gpu_models --device cuda --models gpt2,bert,llama,vit,resnet \
  --dtypes bfloat16 --variants eager,compile,compile-graphs,transpiled --first-call none --budget 1 --attempts 1 \
  --json $OUT/models_gpu_issue17_s12_bf16.json > $OUT/models_bench_bf16.txt 2>&1
grep "^| [a-z0-9]* | bfloat16 | [0-9]" $OUT/models_bench_bf16.txt | cut -d'|' -f1-12
