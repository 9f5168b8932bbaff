"""The host code of conv + batch-norm sites (transpiler/compiler/convs.py): the runtime's folded convolution
(emit/runtime/conv.py `conv_bn`), with the site's statements kept below it as the fallback."""

from __future__ import annotations

import re

from emit.host.module import _condition, runtime_import
from transpiler.compiler.ir import CONV_BN, ConvSite


def folded_conv(site: ConvSite, original: list[str], result: str) -> list[str]:
    """The lines replacing `original` (the site's statements, a region's guarded call among them maybe): one
    folded convolution where the runtime can (it returns None otherwise), else the statements."""
    indent = re.match(r"[ \t]*", original[0]).group()
    activation = f"self.{site.activation}" if site.activation else "None"
    args = [f"self.{site.conv}", f"self.{site.norm}", activation, site.argument]
    lines = [
        f"{indent}# transpile: in eval, the batch norm folded into the convolution (one convolution), else the statements below\n",
        *_condition(indent, ["not torch.compiler.is_compiling()"], result, CONV_BN, args),
        f"{indent}    {site.target} = {result}\n",
        f"{indent}else:\n",
    ]
    return lines + [f"    {line}" if line.strip() else line for line in original]


def conv_import(depth: int) -> list[str]:
    """The module's import of the runtime's `conv_bn`, in a module `depth` directories below the output root."""
    return [
        '# Convolutions followed by a batch norm: folded in eval (docs/compiler.md, "Convolutions and batch norms")\n',
        *runtime_import(depth, "conv", f"conv_bn as {CONV_BN}"),
    ]
