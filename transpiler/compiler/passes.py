"""The compiler's passes over one file, in the order the build runs them.

A file enters as a `Unit`: its text as the build compiles it (the lint's fixes applied) and its
provenance, the lines of the file on disk each line comes from. Each pass is a function from unit to
unit with a name; `PASSES` is the list the build runs (transpiler/pipeline/compiling.py) and
`transpile explain --passes` prints after each pass. Then the emitters write the host module and the
kernels (emit/), running `KERNEL_PASSES` on each region.

    provenance -> graph_sites -> fuse_across_ifs -> split_statements -> regions -> linear_sites
               -> conv_sites -> backwards                                      (this module)
    per region:   legalize -> lowering                                              (the emitters)

The two source passes are speculative: a statement is copied across an `if` or split only where
that makes it fuse, so they ask which regions a text would have (`Unit.hoisted`). The answers are
memoised per text within the unit, so the last question each pass asks is the next pass's answer
and no text is analysed twice.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from transpiler.compiler.autodiff import Backward, backwards_of
from transpiler.compiler.graphing import Hazard, graph_sites
from transpiler.compiler.hoisting import Hoisting, hoist_regions
from transpiler.compiler.convs import conv_sites
from transpiler.compiler.ir import ConvSite, Epilogue, GraphSite, NotFused, NotGraphed, Origin, Region, format_region
from transpiler.compiler.linears import epilogue_sites
from transpiler.compiler.lowering import NotLowerable, has_reductions, kernel_view, lower
from transpiler.compiler.tails import copy_tails


@dataclass(frozen=True)
class Unit:
    """One file on its way through the passes."""

    path: str  # as generated comments name it (the path in the tree)
    module: str
    is_package: bool
    compiled: frozenset[str] | None  # functions that run compiled (None: all)
    tensor_params: Mapping[str, frozenset[str]] | None  # helper parameters the project's call sites type
    text: str  # what the last pass produced
    origin: Origin  # per line of `text`, its lines in the file on disk (`origin.source`)
    regions: tuple[Region, ...] = ()  # on the lines of `text`
    epilogues: tuple[Epilogue, ...] = ()
    convs: tuple[ConvSite, ...] = ()
    splits: int = 0  # statements split
    hazards: Mapping[str, Hazard] = field(default_factory=dict)  # per function, a graph break the fixes left in it
    graphs: tuple[GraphSite, ...] = ()  # blocks whose forward replays as a CUDA graph
    not_graphed: tuple[NotGraphed, ...] = ()  # blocks whose forward does not, and why
    not_fused: tuple[NotFused, ...] = ()  # tensor statements left eager, and why (lines of the file on disk)
    backwards: Mapping[str, Backward] = field(default_factory=dict)  # per region name, its backward (on `text`)
    no_backward: tuple[tuple[str, str], ...] = ()  # (region name, why) for the regions without one
    _hoisted: dict[str, Hoisting] = field(default_factory=dict, repr=False, compare=False)

    @property
    def disk(self) -> str:
        return self.origin.source

    def hoisted(self, text: str) -> Hoisting:
        """The statements of `text` split where that fuses them, and the regions then (memoised per text)."""
        if text not in self._hoisted:
            self._hoisted[text] = hoist_regions(
                ast.parse(text), self.path, self.module, self.is_package, text, self.compiled, self.tensor_params
            )
        return self._hoisted[text]

    def shown(self, region: Region) -> Region:
        """`region` on the lines of the file on disk: what comments and reports name."""
        return self.origin.region(region)


@dataclass(frozen=True)
class Pass:
    name: str
    summary: str
    run: Callable[[Unit], Unit]


def start(
    path: str,
    module: str,
    is_package: bool,
    disk: str,
    text: str,
    compiled: frozenset[str] | None = None,
    tensor_params: Mapping[str, frozenset[str]] | None = None,
    hazards: Mapping[str, Hazard] | None = None,
) -> Unit:
    """The unit of a file whose text on disk is `disk` and which the build compiles as `text`; `hazards`: per
    function (`Class.method`), a graph-break finding the lint's fixes left in it."""
    origin = Origin(disk, provenance(disk, text))
    return Unit(path, module, is_package, compiled, tensor_params or None, text, origin, hazards=dict(hazards or {}))


def provenance(disk: str, text: str) -> tuple[tuple[int, int], ...]:
    """Per line of `text` (the file after the lint's fixes), the first and last line of `disk` it comes from.

    Unchanged lines map to themselves; a rewritten run of lines maps to the run it replaces, and an
    inserted line (an import a fix adds) to the line it stands before."""
    old, new = disk.splitlines(), text.splitlines()
    if old == new:
        return tuple((n, n) for n in range(1, len(new) + 1))
    ranges: list[tuple[int, int]] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            ranges += [(i1 + k + 1, i1 + k + 1) for k in range(j2 - j1)]
        elif tag in ("replace", "insert"):
            first = min(i1 + 1, max(len(old), 1))
            ranges += [(first, max(first, i2))] * (j2 - j1)
    return tuple(ranges)


def _composed(origin: Origin, ranges: tuple[tuple[int, int], ...]) -> Origin:
    """`origin` after a pass rewrote the text, `ranges` giving each new line's lines in the text before."""
    before = origin.ranges
    return Origin(origin.source, tuple((before[a - 1][0], before[b - 1][1]) for a, b in ranges))


def _graph_sites(unit: Unit) -> Unit:
    # On the text before the compiler's own passes: the hazards name its functions, which no pass renames.
    sites, refused = graph_sites(ast.parse(unit.text), unit.hazards)
    on_disk = tuple(replace(n, line=unit.origin.ranges[n.line - 1][0]) for n in refused)
    return replace(unit, graphs=tuple(sites), not_graphed=on_disk)


def _fuse_across_ifs(unit: Unit) -> Unit:
    on_disk = unit.origin.ranges
    text, ranges = copy_tails(ast.parse(unit.text), unit.text, unit.hoisted, lambda n: on_disk[n - 1][0])
    return replace(unit, text=text, origin=_composed(unit.origin, ranges))


def _split_statements(unit: Unit) -> Unit:
    split = unit.hoisted(unit.text)
    unit._hoisted.setdefault(split.text, split)  # splitting again finds nothing more to split
    return replace(unit, text=split.text, origin=_composed(unit.origin, split.origin.ranges), splits=split.splits)


def _regions(unit: Unit) -> Unit:
    # The regions of the split text, found while splitting it (the hoisted temporaries typed as tensors).
    found = unit.hoisted(unit.text)
    if found.text != unit.text:
        raise ValueError("the regions pass runs on split text: after split_statements")
    on_disk = tuple(replace(n, line=unit.origin.ranges[n.line - 1][0]) for n in found.not_fused)
    return replace(unit, regions=tuple(found.regions), not_fused=on_disk)


def _linear_sites(unit: Unit) -> Unit:
    if not unit.regions:
        return unit  # a file without regions is not compiled at all
    tree = ast.parse(unit.text)
    sites = epilogue_sites(tree, unit.module, unit.is_package, unit.text, unit.compiled, list(unit.regions))
    return replace(unit, epilogues=tuple(sites), not_fused=_outside(unit, sites))


def _conv_sites(unit: Unit) -> Unit:
    if not unit.regions:
        return unit  # a file without regions is not compiled at all
    tree = ast.parse(unit.text)
    sites = conv_sites(tree, unit.module, unit.is_package, unit.text, unit.compiled, list(unit.regions))
    return replace(unit, convs=tuple(sites), not_fused=_outside(unit, sites))


def _backwards(unit: Unit) -> Unit:
    derived, refused = backwards_of(unit.regions, ast.parse(unit.text) if unit.regions else None)
    return replace(unit, backwards=derived, no_backward=refused)


def _outside(unit: Unit, sites: list) -> tuple[NotFused, ...]:
    """The statements left eager that a site of the pass (a linear + activation, a conv + norm) does not take."""
    taken = [(unit.origin.ranges[s.first - 1][0], unit.origin.ranges[s.last - 1][1]) for s in sites]
    return tuple(n for n in unit.not_fused if not any(first <= n.line <= last for first, last in taken))


PASSES = (
    Pass(
        "graph_sites",
        "models and blocks whose forward replays as a CUDA graph, and the attributes it reads",
        _graph_sites,
    ),
    Pass(
        "fuse_across_ifs", "statements around an `if` copied into both branches where that fuses them", _fuse_across_ifs
    ),
    Pass("split_statements", "statements split so that their pointwise part joins a region", _split_statements),
    Pass("regions", "fusible runs of statements as IR, callees inlined, typed by the walker", _regions),
    Pass("linear_sites", "linear layers followed by an activation: one matmul with the activation", _linear_sites),
    Pass("conv_sites", "a convolution feeding a batch norm: one folded convolution in eval", _conv_sites),
    Pass("backwards", "each region's backward, derived in reverse mode (autodiff.py), or why it has none", _backwards),
)


def compile_unit(unit: Unit, after: Callable[[Pass, Unit], None] | None = None) -> Unit:
    """`unit` after every pass of PASSES; `after(pass, unit)` sees each result (explain prints them)."""
    for step in PASSES:
        unit = step.run(unit)
        if after is not None:
            after(step, unit)
    return unit


# -- per region, in the emitters ---------------------------------------------------------------------
@dataclass(frozen=True)
class RegionPass:
    name: str
    summary: str
    run: Callable[[Region], Region]


def _legalize(region: Region) -> Region:
    return kernel_view(region)[0]


def _lowering(region: Region) -> Region:
    return lower(region).region if has_reductions(region) else region


KERNEL_PASSES = (
    RegionPass("legalize", "casts to a computed value's dtype fixed, or given a stand-in input", _legalize),
    RegionPass("lowering", "reductions and norms as row primitives (rows, columns, row values)", _lowering),
)


def explain(unit: Unit) -> list[str]:
    """The IR after each pass of PASSES and of KERNEL_PASSES, as `transpile explain --passes` prints it."""
    out: list[str] = []

    def show(step: Pass, result: Unit) -> None:
        out.append(f"== after {step.name}: {step.summary}")
        if step.name in ("fuse_across_ifs", "split_statements"):
            changed = result.text != previous[0]
            out.append(
                f"   (the text {'changed' if changed else 'is unchanged'}: {len(result.text.splitlines())} lines)"
            )
            if changed:
                out.extend(_diff(previous[0], result.text))
            previous[0] = result.text
        elif step.name == "graph_sites":
            for g in result.graphs:
                out.append(f"   {g.cls}.forward: replayed, reads {', '.join(g.reads) or 'nothing'}")
            for n in result.not_graphed:
                out.append(f"   {n.cls}.forward: not replayed: {n.reason} ({result.path}:{n.line})")
        elif step.name == "regions":
            out.extend(format_region(result.shown(r)) for r in result.regions)
            out.append(f"   ({len(result.regions)} region{'s' * (len(result.regions) != 1)})")
        elif step.name == "linear_sites":
            for site in result.epilogues:
                first, last = result.origin.ranges[site.first - 1][0], result.origin.ranges[site.last - 1][1]
                out.append(
                    f"   {site.target} = self.{site.activation}(self.{site.layer}({site.argument}))  ({result.path}:{first}-{last})"
                )
            out.append(f"   ({len(result.epilogues)} site{'s' * (len(result.epilogues) != 1)})")
        elif step.name == "backwards":
            out.extend(format_region(result.shown(b.region)) for b in result.backwards.values())
            out.extend(
                f"   {name}: no backward ({why}): autograd takes the source's statements"
                for name, why in result.no_backward
            )
        elif step.name == "conv_sites":
            for site in result.convs:
                first, last = result.origin.ranges[site.first - 1][0], result.origin.ranges[site.last - 1][1]
                call = f"self.{site.norm}(self.{site.conv}({site.argument}))"
                call = f"self.{site.activation}({call})" if site.activation else call
                out.append(f"   {site.target} = {call}  ({result.path}:{first}{f'-{last}' * (last != first)})")
            out.append(f"   ({len(result.convs)} site{'s' * (len(result.convs) != 1)})")

    previous = [unit.text]
    unit = compile_unit(unit, show)
    if unit.not_fused:
        out.append("== tensor code left eager (no region, linear or convolution site takes it), and why")
        out.extend(f"   {n.function} ({unit.path}:{n.line}): {n.reason}" for n in unit.not_fused)
    regions: list[Region | None] = [unit.shown(r) for r in unit.regions]
    for step in KERNEL_PASSES:
        out.append(f"== after {step.name} (per region, in the emitters): {step.summary}")
        for n, region in enumerate(regions):
            if region is None:
                continue
            try:
                regions[n] = step.run(region)
                changed = regions[n] != region
                out.append(format_region(regions[n]) if changed else f"   {region.name}: unchanged")
            except NotLowerable as why:
                out.append(f"   {region.name}: no kernel ({why}): the source's statements run")
                regions[n] = None
    return out


def _diff(before: str, after: str) -> list[str]:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", n=1, lineterm="")
    return [f"   {line}" for line in lines]
