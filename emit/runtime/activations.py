"""Activation modules chosen at run time (`self.act = ACT2FN[...]`): which op a kernel computes for one.

Each kernel file holds an `Activations` table (from transpiler/compiler/ops.py `ACTIVATIONS`): exact
classes, the instance attributes their forward depends on, the code kernels switch on, and the
op in eager PyTorch. A module of any other class (subclasses included), with other attribute
values or with hooks takes the original code. The first time a process meets a class, its
forward is checked against the op on a probe tensor: a library version whose class computes
something else is caught there, and that class always takes the original code.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import torch

# Values spread over where activations differ (tails, the bend near 0), and 0 itself.
_PROBE = torch.cat([torch.linspace(-6.0, 6.0, 97), torch.zeros(1)])
# Classes whose forward was compared with an op: (class, code) -> agreed. Per process.
_VERIFIED: dict[tuple[type, int], bool] = {}


class Activation(NamedTuple):
    cls: str  # `type(m).__module__` + "." + `type(m).__qualname__`
    attributes: dict[str, object]  # instance attribute -> the value it must have
    code: int  # what kernels switch on
    op: Callable[[torch.Tensor], torch.Tensor]  # the op in eager PyTorch
    eager_kernels: int = 1  # kernels the module's own forward launches


class Activations:
    """The activation modules kernels compute themselves, and the codes they know them by."""

    def __init__(self, *entries: Activation) -> None:
        self._by_class: dict[str, list[Activation]] = {}
        for entry in entries:
            self._by_class.setdefault(entry.cls, []).append(entry)
        self._by_type: dict[type, list[Activation]] = {}  # the same, by class object: it runs on every call

    def entry(self, module: object) -> Activation | None:
        """`module`'s table entry, or None when the kernel must not compute it.

        It runs on every call of a kernel that takes an activation module: loops written out, no
        generator, and the agreement with the op checked once per class (`_VERIFIED`).
        """
        cls = type(module)
        entries = self._by_type.get(cls)
        if entries is None:
            entries = self._by_type[cls] = self._by_class.get(f"{cls.__module__}.{cls.__qualname__}", [])
        if not entries or _hooked(module):
            return None
        for entry in entries:
            for name, value in entry.attributes.items():
                if not _same(getattr(module, name, _MISSING), value):
                    break
            else:
                verified = _VERIFIED.get((cls, entry.code))
                if verified is None:
                    verified = _VERIFIED[cls, entry.code] = _agrees(module, entry.op)
                return entry if verified else None
        return None


_MISSING = object()


def _same(value: object, expected: object) -> bool:
    """Equal and of one type; partials (`functools.partial(F.gelu, approximate="tanh")`) by their parts."""
    if isinstance(expected, functools.partial):
        return (
            isinstance(value, functools.partial)
            and value.func is expected.func
            and value.args == expected.args
            and value.keywords == expected.keywords
        )
    return type(value) is type(expected) and value == expected


_MODULES = torch.nn.modules.module  # holds the global forward hooks


def _hooked(module: object) -> bool:
    """Hooks run around forward: the kernel would skip them. (Runs on every call: no generator.)"""
    return bool(
        getattr(module, "_forward_hooks", None)
        or getattr(module, "_forward_pre_hooks", None)
        or _MODULES._global_forward_hooks
        or _MODULES._global_forward_pre_hooks
    )


def _agrees(module, op) -> bool:
    """Whether `module` computes `op` on the probe (float32, CPU), to float32 rounding."""
    try:
        with torch.no_grad():
            got, wanted = module(_PROBE.clone()), op(_PROBE.clone())
        return bool(
            got.shape == wanted.shape
            and got.dtype == wanted.dtype
            and torch.allclose(got, wanted, rtol=1e-4, atol=1e-5)
        )
    except Exception:  # whatever the module does, it is not the op
        return False
