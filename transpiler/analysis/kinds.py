"""The abstract values of the type analysis: what an expression holds under compilation."""

from __future__ import annotations

from enum import Enum


class Kind(Enum):
    TENSOR = "tensor"
    BOOL_TENSOR = "bool tensor"  # a tensor known to hold booleans (comparisons, masks)
    MAYBE_TENSOR = "optional tensor"  # unannotated `mask=None` parameters: may be a flag
    DATA_SCALAR = "data-dependent scalar"  # a Python value read out of tensor data
    SCALAR = "scalar"  # a Python value Dynamo treats as a constant: shapes, flags, literals
    NONE = "None"
    MODULE = "module"
    LOGGER = "logger"
    UNKNOWN = "unknown"

    @property
    def is_tensor(self) -> bool:
        return self is Kind.TENSOR or self is Kind.BOOL_TENSOR

    @property
    def may_be_tensor(self) -> bool:
        """Operations on it produce tensors (but its truth value is not known to be data)."""
        return self.is_tensor or self is Kind.MAYBE_TENSOR


def join(a: Kind, b: Kind) -> Kind:
    """Kind of a name assigned differently on two paths."""
    if a is b:
        return a
    if Kind.NONE in (a, b):
        other = b if a is Kind.NONE else a
        return Kind.MAYBE_TENSOR if other.may_be_tensor else Kind.UNKNOWN
    if a.is_tensor and b.is_tensor:
        return Kind.TENSOR
    return Kind.UNKNOWN
