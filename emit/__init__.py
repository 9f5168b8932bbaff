"""Code generation: Triton and C++ kernels, the emitted Python modules, runtime support.

Empty until the compiler issues land; the linter and rewrites do not depend on it.
"""
