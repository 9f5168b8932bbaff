"""The abstract values of the type analysis: what an expression holds under compilation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    TENSOR = "tensor"
    BOOL_TENSOR = "bool tensor"  # a tensor known to hold booleans (comparisons, masks)
    MAYBE_TENSOR = "optional tensor"  # unannotated `mask=None` parameters: may be a flag
    # A NumPy array made from a tensor (`t.detach().cpu().numpy()`, `np.mean(a)` of one): Dynamo traces
    # it as a tensor, so it breaks where a tensor would (`float(a)`, `if a.any():`, `a.item()`); at run
    # time it is no torch.Tensor, so no fix rewrites code that holds one (walker.py).
    ARRAY = "NumPy array"
    # A torch.Generator (made in the function, or passed to every call of it as one): Dynamo cannot
    # trace its use (TP522).
    GENERATOR = "torch.Generator"
    DATA_SCALAR = "data-dependent scalar"  # a Python value read out of tensor data
    SCALAR = "scalar"  # a Python value Dynamo treats as a constant: shapes, flags, literals
    NONE = "None"
    MODULE = "module"
    LOGGER = "logger"
    UNKNOWN = "unknown"

    @property
    def is_tensor(self) -> bool:
        """Traced as a tensor by Dynamo (a NumPy array made from a tensor included)."""
        return self is Kind.TENSOR or self is Kind.BOOL_TENSOR or self is Kind.ARRAY

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
        if other is Kind.GENERATOR:
            return Kind.GENERATOR  # `gen = None`, then `gen = torch.Generator()` when evaluating: used as one
        return Kind.MAYBE_TENSOR if other.may_be_tensor else Kind.UNKNOWN
    if a.is_tensor and b.is_tensor:
        return Kind.ARRAY if Kind.ARRAY in (a, b) else Kind.TENSOR
    return Kind.UNKNOWN


def join_tensors(kinds: Iterable[Kind]) -> Kind:
    """The one kind that every value of `kinds` is: a tensor kind or a generator, or UNKNOWN (also for no
    values, and for NumPy arrays beside tensors: a helper given both would be typed as holding torch tensors)."""
    found = set(kinds)
    if len(found) == 1:
        (kind,) = found
        return kind if kind.is_tensor or kind is Kind.GENERATOR else Kind.UNKNOWN
    return Kind.TENSOR if found <= {Kind.TENSOR, Kind.BOOL_TENSOR} else Kind.UNKNOWN


@dataclass(frozen=True)
class Returned:
    """What a call of one of the file's functions gives: a kind, or a tuple of kinds.

    `elements` are the kinds of a tuple of known length (`return a, b`,
    `-> tuple[Tensor, Tensor]`); `each` the kind of every element of one of
    any length (`-> tuple[Tensor, ...]`). The call itself is then a tuple, not a tensor.
    """

    kind: Kind = Kind.UNKNOWN
    elements: tuple[Kind, ...] = ()
    each: Kind | None = None

    def without_arrays(self) -> Returned:
        """The same with NumPy arrays unknown (for walks that do not type them)."""

        def plain(kind: Kind | None) -> Kind | None:
            return Kind.UNKNOWN if kind is Kind.ARRAY else kind

        return Returned(plain(self.kind), tuple(plain(e) for e in self.elements), plain(self.each))

    def unpacked(self, count: int) -> tuple[Kind, ...] | None:
        """Kinds of `count` names unpacked from the call, when the tuple says."""
        if self.each is not None:
            return (self.each,) * count
        if self.elements:
            return self.elements if len(self.elements) == count else None
        return None
