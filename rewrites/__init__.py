"""Lint rules (and, later, their fixes), one module per graph-break family.

The code table, families by hundreds:

    TP1xx  side_effects      printing, logging, I/O, clocks, RNGs, serialization
    TP2xx  control_flow      branching and asserting on tensor values
    TP3xx  conversions       tensor values read into Python objects
    TP4xx  dynamic_shapes    operators with data-dependent output shapes
    TP5xx  unsupported       untraceable Python/autograd; breaks that skip whole frames
    TP6xx  recompilation     code that recompiles the graph on later calls
    TP7xx  performance       code with a faster torch equivalent (no graph break)
    TP9xx  meta              the lint run itself

Importing this package registers every rule in `transpiler.lint.rule.REGISTRY`.
"""

from rewrites import (  # noqa: F401
    control_flow,
    conversions,
    dynamic_shapes,
    meta,
    performance,
    recompilation,
    side_effects,
    unsupported,
)

FAMILIES = {
    "TP1": side_effects,
    "TP2": control_flow,
    "TP3": conversions,
    "TP4": dynamic_shapes,
    "TP5": unsupported,
    "TP6": recompilation,
    "TP7": performance,
    "TP9": meta,
}
