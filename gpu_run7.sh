(python -m pip install -q --no-index --no-deps .whl/*.whl; pip install -q -e . --no-deps --no-build-isolation) >/dev/null 2>&1
timeout 240 python -m pytest -m gpu -p no:warnings -q -rf tests/ 2>&1 | tail -4
rm -rf gpu_models; python benchmarks/models_bench.py --prepare gpu_models > $OUT/prepare.txt 2>&1
tail -1 $OUT/prepare.txt
