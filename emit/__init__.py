"""The back end: from the compiler's regions (transpiler/compiler: ir, ops, lowering, dtypes) to the files
written beside each module.

- `host/`: the host code, the one writer of the emitted Python module (`module.py`: each region
  replaced by a guarded kernel call, the original statements kept as its fallback, and the kernel file
  with each region's eager reference and its `Kernel`), with the calls of unaligned linear layers
  (`linears.py`) and the classes that stand in for the original's (`twins.py`).
- `triton/` and `cpp/`: one backend each, a region's kernel as Triton (CUDA) and as C++ (CPU) source
  text; neither imports the other.
- `layout.py`: generated lines laid out as black lays them out, shared by the writers above.
- `runtime/`: copied verbatim into every output as `_transpile_runtime/`; it imports only the standard
  library, torch and triton, never transpile.

Imports point one way (tests/test_architecture.py): `emit` is imported only by transpiler/pipeline and
transpiler/cli, and imports nothing of transpiler's but the compiler's IR, ops, lowering and dtypes.
"""
