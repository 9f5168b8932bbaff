"""Auto classes that build the output tree's classes: a transpiled model's sub-models run its kernels too.

transformers builds sub-models through Auto classes (`self.language_model =
AutoModel.from_config(config.text_config)`), which map the config's class to a model class
of the original package (`Gemma3TextModel` from `transformers.models.gemma3.modeling_gemma3`).
Inside a transpiled module that class has a twin of the same name in the output tree, with
the kernels: `auto_class` gives the module its own subclass of the Auto class whose mapping
answers the twin for every class of the original tree, and the original class for the rest.
The original Auto class and the original package are left as they are.

Code that decides by a class's module name (transformers' `is_custom_code()`: a class whose module
is not transformers' is custom code, initialised differently) must see the original's name:
`as_original` makes the module's classes answer `is_custom_code()` as their originals do.
"""

from __future__ import annotations

import functools
import importlib


def auto_class(auto: type, module: str, original: str, depth: int) -> type:
    """`auto` (a transformers Auto class) for the transpiled module named `module`, transpiled from the
    module named `original`, `depth` directories below the output root."""
    out_root, tree_root = module.rsplit(".", depth + 1)[0], original.rsplit(".", depth + 1)[0]
    if out_root == module or tree_root == original:  # not imported as a package: no tree to look in
        return auto
    attributes = {
        "_model_mapping": _TwinMapping(auto._model_mapping, out_root, tree_root),
        "__module__": auto.__module__,
    }
    return type(auto.__name__, (auto,), {**attributes, "__qualname__": auto.__qualname__, "__doc__": auto.__doc__})


def twin(cls: type, out_root: str, tree_root: str) -> type:
    """The class of the output tree transpiled from `cls`, or `cls` when it is not from the tree."""
    name = getattr(cls, "__module__", "")
    if name != tree_root and not name.startswith(tree_root + "."):
        return cls
    module = importlib.import_module(out_root + name[len(tree_root) :])
    found = getattr(module, cls.__qualname__, None) if "." not in cls.__qualname__ else None
    return found if isinstance(found, type) and found.__name__ == cls.__name__ else cls


class _TwinMapping:
    """An Auto class's config -> model mapping, answering twins (`from_config` reads `in` and `[]`)."""

    def __init__(self, mapping, out_root: str, tree_root: str) -> None:
        self._mapping, self._out_root, self._tree_root = mapping, out_root, tree_root

    def __getitem__(self, key):
        value = self._mapping[key]
        if isinstance(value, (list, tuple)):
            return type(value)(twin(v, self._out_root, self._tree_root) for v in value)
        return twin(value, self._out_root, self._tree_root)

    def __contains__(self, key) -> bool:
        return key in self._mapping

    def __getattr__(self, name: str):  # keys(), register(), ... of the original mapping
        return getattr(self._mapping, name)


def as_original(namespace: dict, original: str) -> None:
    """The classes of the transpiled module `namespace` (its globals), transpiled from the module named
    `original`, answer `is_custom_code()` (a classmethod they inherit) as their originals do: the inherited
    code runs with `original` as the class's module name. Subclasses defined elsewhere answer as before."""
    module = namespace["__name__"]
    for value in list(namespace.values()):
        if not isinstance(value, type) or value.__module__ != module or "is_custom_code" in vars(value):
            continue
        inherited = getattr(getattr(value, "is_custom_code", None), "__func__", None)
        if inherited is not None and not getattr(inherited, "_transpile_as_original", False):
            value.is_custom_code = classmethod(_answer_as(inherited, module, original))


def _answer_as(inherited, module: str, original: str):
    @functools.wraps(inherited)
    def answer(cls, *args, **kwargs):
        return inherited(_Renamed(cls, original) if cls.__module__ == module else cls, *args, **kwargs)

    answer._transpile_as_original = True
    return answer


class _Renamed:
    """`cls` as seen by code that reads its `__module__`: the original's name; every other attribute the class's."""

    def __init__(self, cls: type, module: str) -> None:
        self._cls, self.__module__ = cls, module

    def __getattr__(self, name: str):
        return getattr(self._cls, name)
