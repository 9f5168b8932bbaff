"""Whole-project analysis: which classes are nn.Modules and which functions run compiled.

Joins the per-file summaries: base classes resolve across files (including
re-exports through `__init__.py`), and the call graph is followed from every
module's `forward` and every `torch.compile` target.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from transpiler.symbols import ClassInfo, FileSummary, FunctionInfo, is_library_module_class


@dataclass
class Project:
    classes: dict[str, ClassInfo]
    functions: dict[str, FunctionInfo]
    reexports: dict[str, str]

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

    def find_method(self, class_qualname: str, name: str, skip_self: bool = False) -> FunctionInfo | None:
        """Method lookup along the (depth-first) base-class order, within the project."""
        seen: set[str] = set()
        stack = [class_qualname]
        while stack:
            current = stack.pop(0)
            if current in seen or current not in self.classes:
                continue
            seen.add(current)
            cls = self.classes[current]
            if not (skip_self and current == class_qualname) and name in cls.methods:
                return cls.methods[name]
            stack[:0] = [self.canonical(b) for b in cls.bases]
        return None

    def compiled_functions(self, roots: set[tuple[str, str]]) -> dict[str, str]:
        """Qualified names of functions that run under compilation, each with the reason."""
        modules = self.module_classes()
        reasons: dict[str, str] = {}
        queue: deque[FunctionInfo] = deque()

        def enqueue(info: FunctionInfo | None, reason: str) -> None:
            # Dynamo does not trace into torch.compiler.disable'd functions (it breaks at the call).
            if info is not None and not info.disabled and info.qualname not in reasons:
                reasons[info.qualname] = reason
                queue.append(info)

        for qualname in sorted(modules):
            enqueue(self.classes[qualname].methods.get("forward"), f"forward of nn.Module {qualname}")
        for _, target in sorted(roots):
            enqueue(self.lookup(target), "passed to torch.compile")
        while queue:
            info = queue.popleft()
            reason = f"called from {info.qualname}"
            for kind, target in sorted(info.calls):
                if kind == "self" and info.class_qualname:
                    enqueue(self.find_method(info.class_qualname, target), reason)
                elif kind == "super" and info.class_qualname:
                    enqueue(self.find_method(info.class_qualname, target, skip_self=True), reason)
                elif kind == "name":
                    callee = self.lookup(target)
                    if callee is None:
                        cls = self.classes.get(self.canonical(target))
                        if cls is not None and cls.qualname not in modules:
                            callee = cls.methods.get("__init__")  # objects built in forward
                    enqueue(callee, reason)
        return reasons

    def lookup(self, qualname: str) -> FunctionInfo | None:
        """A function or a `Class.method` by qualified name."""
        qualname = self.canonical(qualname)
        if qualname in self.functions:
            return self.functions[qualname]
        head, _, last = qualname.rpartition(".")
        cls = self.classes.get(self.canonical(head)) if head else None
        return cls.methods.get(last) if cls else None
