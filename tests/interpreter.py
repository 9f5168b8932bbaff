"""A test-side fix for Triton's interpreter (`TRITON_INTERPRET=1`): loops bounded by a kernel argument.

The generated row kernels loop as the Triton tutorials do, `for start in range(0, R, RBLOCK):`. Under
the interpreter every scalar argument is a one-element numpy array, and Triton 3.6 turns one into a
Python int for `range` with `int(array)`, which numpy 2.4 refuses for arrays of one dimension
("only 0-dimensional arrays can be converted to Python scalars", triton-lang/triton#9171). The
kernels are right and compile on a GPU; the interpreter is what the tests run them on without one,
so the tests give the interpreter the conversion it means (`.item()`), not the kernels another loop.
"""

from __future__ import annotations


def convert_loop_bounds() -> None:
    """Make the interpreter's tensors convert to a Python int from any one-element array (idempotent)."""
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor  # called on every launch: it sets the tensor's methods
    if getattr(patch_tensor, "converts_loop_bounds", False):
        return

    def patched(tensor, scope) -> None:
        patch_tensor(tensor, scope)
        # Recorded in the launch's scope, so restored with the rest after the launch.
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    patched.converts_loop_bounds = True
    interpreter._patch_lang_tensor = patched
