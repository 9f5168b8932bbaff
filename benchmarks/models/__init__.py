"""Pointwise-heavy modules as a user would write them: the cases of `benchmarks/kernels.py`.

One module per file, tensors only in `forward` (scalars are attributes set in
`__init__`), no graph breaks: `transpile` turns each `forward` into one fused region.
"""
