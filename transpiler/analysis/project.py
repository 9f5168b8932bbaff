"""Whole-project analysis: which classes are nn.Modules and which functions run compiled.

Joins the per-file summaries: base classes resolve across files (including
re-exports through `__init__.py`), and the call graph is followed from every
module's `forward` and every `torch.compile` target.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from transpiler.analysis.symbols import ClassInfo, FileSummary, FunctionInfo, is_library_module_class


@dataclass
class Project:
    classes: dict[str, ClassInfo]
    functions: dict[str, FunctionInfo]
    reexports: dict[str, str]
    _mro: dict[str, list[str]] = field(default_factory=dict)
    # Resolved call edges among compiled functions: (caller, edge, callee qualified name).
    edges: list[tuple[FunctionInfo, tuple[str, str], str]] = field(default_factory=list)
    _modules: set[str] | None = None

    @classmethod
    def from_summaries(cls, summaries: list[FileSummary]) -> "Project":
        classes = {qn: c for s in summaries for qn, c in s.classes.items()}
        functions = {qn: f for s in summaries for qn, f in s.functions.items()}
        reexports = {
            f"{s.module}.{name}": target
            for s in summaries
            for name, target in s.aliases.items()
            if target != f"{s.module}.{name}"
        }
        return cls(classes, functions, reexports)

    def canonical(self, qualname: str) -> str:
        """Follow re-exports (`from .modeling import Model` in a package) to the definition."""
        for _ in range(16):
            if qualname in self.classes or qualname in self.functions:
                return qualname
            target = self.reexports.get(qualname)
            if target is None:
                head, _, last = qualname.rpartition(".")
                if head and head in self.reexports:  # a name inside a re-exported module
                    target = f"{self.reexports[head]}.{last}"
                else:
                    return qualname
            qualname = target
        return qualname

    def module_classes(self) -> set[str]:
        if self._modules is None:
            self._modules = self._module_classes()
        return self._modules

    def _module_classes(self) -> set[str]:
        memo: dict[str, bool] = {}

        def is_module(qualname: str, depth: int = 0) -> bool:
            if qualname in memo:
                return memo[qualname]
            memo[qualname] = False  # cycles and unknown bases are not modules
            if is_library_module_class(qualname):
                memo[qualname] = True
            elif depth < 64 and qualname in self.classes:
                memo[qualname] = any(is_module(self.canonical(b), depth + 1) for b in self.classes[qualname].bases)
            return memo[qualname]

        return {qn for qn in self.classes if is_module(qn)}

    def mro(self, class_qualname: str) -> list[str]:
        """Project classes in method-lookup order (depth-first, left to right, without repeats)."""
        cached = self._mro.get(class_qualname)
        if cached is not None:
            return cached
        order: list[str] = []
        stack = [class_qualname]
        while stack:
            current = stack.pop(0)
            if current in order or current not in self.classes:
                continue
            order.append(current)
            stack[:0] = [self.canonical(b) for b in self.classes[current].bases]
        self._mro[class_qualname] = order
        return order

    def find_method(self, receiver: str, name: str, after: str | None = None) -> FunctionInfo | None:
        """`name` as looked up on an instance of `receiver`; with `after`, as `super()` does in that class."""
        order = self.mro(receiver)
        if after is not None:
            order = order[order.index(after) + 1 :] if after in order else []
        for qualname in order:
            method = self.classes[qualname].methods.get(name)
            if method is not None:
                return method
        return None

    def compiled_functions(self, roots: set[tuple[str, str]]) -> dict[str, str]:
        """Qualified names of functions that run under compilation, each with the reason.

        Methods are followed together with the class of `self` they run for, so
        that `self.mix()` in an inherited `forward` finds the subclass override.
        """
        modules = self.module_classes()
        reasons: dict[str, str] = {}
        seen: set[tuple[str, str | None]] = set()
        queue: deque[tuple[FunctionInfo, str | None]] = deque()

        self.edges = []

        def enqueue(info: FunctionInfo | None, receiver: str | None, reason: str, edge: tuple | None = None) -> None:
            # Dynamo does not trace into torch.compiler.disable'd functions (it breaks at the call).
            if info is None or info.disabled:
                return
            if edge is not None:
                self.edges.append((edge[0], edge[1], info.qualname))
            if (info.qualname, receiver) in seen:
                return
            seen.add((info.qualname, receiver))
            reasons.setdefault(info.qualname, reason)
            queue.append((info, receiver))

        for qualname in sorted(modules):
            enqueue(self.find_method(qualname, "forward"), qualname, f"forward of nn.Module {qualname}")
        for _, target in sorted(roots):
            callee = self.lookup(target)
            enqueue(callee, callee.class_qualname if callee else None, "passed to torch.compile")
        while queue:
            info, receiver = queue.popleft()
            reason = f"called from {info.qualname}"
            for kind, target in sorted(info.calls):
                edge = (info, (kind, target))
                if kind in ("self", "super") and info.class_qualname:
                    after = info.class_qualname if kind == "super" else None
                    callee = self.find_method(receiver or info.class_qualname, target, after)
                    enqueue(callee, receiver, reason, edge)
                elif kind == "name":
                    callee = self.lookup(target)
                    owner = callee.class_qualname if callee else None
                    if callee is None:
                        cls = self.classes.get(self.canonical(target))
                        if cls is not None and cls.qualname not in modules:
                            callee, owner = cls.methods.get("__init__"), cls.qualname  # objects built in forward
                    enqueue(callee, owner, reason, edge)
        return reasons

    def tensor_parameters(self, compiled: dict[str, str]) -> dict[str, frozenset[str]]:
        """Open parameters that every compiled call site passes a tensor to, per function.

        Reads the call edges of the last `compiled_functions`, with the callers'
        current `tensor_args` (they change when a caller is re-checked).
        """
        incoming: dict[str, list[frozenset[int | str]]] = {}
        unique = {(caller.qualname, edge, callee): caller for caller, edge, callee in self.edges}
        for (_, edge, callee), caller in unique.items():  # once per site, whatever the receivers
            incoming.setdefault(callee, []).extend(caller.tensor_args.get(edge, ()))
        found = {}
        for qualname, sites in incoming.items():
            info = self.lookup(qualname)
            if info is None or qualname not in compiled or not info.open_params or info.unseen_calls:
                continue
            positions = {name: index for index, name in enumerate(info.params)}
            tensors = frozenset(
                p for p in info.open_params if all(p in site or positions.get(p) in site for site in sites)
            )
            if tensors:
                found[qualname] = tensors
        return found

    def lookup(self, qualname: str) -> FunctionInfo | None:
        """A function or a `Class.method` by qualified name."""
        qualname = self.canonical(qualname)
        if qualname in self.functions:
            return self.functions[qualname]
        head, _, last = qualname.rpartition(".")
        cls = self.classes.get(self.canonical(head)) if head else None
        return cls.methods.get(last) if cls else None
