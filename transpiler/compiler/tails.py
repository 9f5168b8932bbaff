"""Fusing across an `if`: the statements right before an `if` and those right after it are copied
into both of its branches, where that lets them form one region in the branch that skips the body.

GPT-2's block adds the attention's residual, may run cross attention, then normalises: the `if`
ends the region between the add and the norm.

    hidden_states = attn_output + residual
    if encoder_hidden_states is not None:
        ...  # cross attention
    residual = hidden_states
    hidden_states = self.ln_2(hidden_states)

becomes

    # transpile: line 1 and lines 4-5 copied into both branches to fuse (docs/compiler.md: ...)
    if encoder_hidden_states is not None:
        hidden_states = attn_output + residual
        ...  # cross attention
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
    else:
        hidden_states = attn_output + residual  # with the next two lines: one region, both outputs
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)

Each path runs the same statements in the same order as before; only the test of the `if` moves
ahead of the statements before it, so it may read nothing they bind and run no code of the user's
(docs/compiler.md, "Fusing across an `if`", lists what is refused). An `if` is rewritten only when
the else branch then has a region with compute ops of both sides; every other line keeps its text.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, replace

from transpiler.compiler.hoisting import Hoisting, alone_on_its_lines
from transpiler.compiler.ir import Region

# Statements that may be copied: straight-line code (which ones fuse, the regions found decide).
_STRAIGHT = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)
_JUMPS = (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)  # leave the body wherever they are
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


@dataclass(frozen=True)
class _Tail:
    """One `if` and the statements around it that would be copied into both branches."""

    statement: ast.If
    before: tuple[ast.stmt, ...]  # the end of the run of statements before it
    after: tuple[ast.stmt, ...]  # the start of the run after it


def copy_tails(
    tree: ast.Module, text: str, hoisted: Callable[[str], Hoisting], on_disk: Callable[[int], int] = lambda n: n
) -> tuple[str, tuple[tuple[int, int], ...]]:
    """`text` with the statements around some `if`s copied into both branches, where that makes them fuse,
    and per line of the result the first and last line of `text` it comes from.

    Which `if`s: each candidate is tried, and kept (narrowed to the region it forms) while the regions that
    `hoisted(text)` finds in the rewritten text fuse across it; `hoisted` is the statement-splitting pass's
    query, memoised by the pipeline (transpiler/compiler/passes.py), so the last try is also that pass's answer.
    `on_disk(line)`: the line of the file on disk that a line of `text` comes from, for the comment naming them."""
    lines = text.splitlines(keepends=True)
    tails = _candidates(tree, lines)
    while tails:
        moved, ranges, copies = _apply(lines, tails, on_disk)
        split = hoisted(moved)
        shown = [split.origin.region(r) for r in split.regions]  # on the lines of `moved`
        kept = [t for t in (_fused(tail, copy, shown) for tail, copy in zip(tails, copies)) if t is not None]
        if kept == tails:
            return moved, tuple(ranges)
        tails = kept  # dropped or narrowed to the region: copy less, and look again
    return text, tuple((n, n) for n in range(1, len(lines) + 1))


def _fused(tail: _Tail, copies: list[tuple[int, int]], regions: list[Region]) -> _Tail | None:
    """`tail` narrowed to the region its copies in the else branch form (`copies`: the lines of each
    statement's copy there), or None when no region computes on both sides of the `if`."""
    before, after = copies[: len(tail.before)], copies[len(tail.before) :]
    for region in regions:
        lines = {node.line for node in region.nodes}
        if any(first <= line <= last for first, last in before for line in lines) and any(
            first <= line <= last for first, last in after for line in lines
        ):
            return replace(
                tail,
                before=tuple(s for s, (first, _) in zip(tail.before, before) if first >= region.first_line),
                after=tuple(s for s, (_, last) in zip(tail.after, after) if last <= region.last_line),
            )
    return None


# -- which `if`s -----------------------------------------------------------------------------------
def _candidates(tree: ast.Module, lines: list[str]) -> list[_Tail]:
    """Every `if` in a function whose copy keeps the meaning, with the runs of straight-line statements
    around it, in text order; an `if` inside the span of an earlier one is left out."""
    found: dict[int, _Tail] = {}
    encoded = [line.encode("utf-8") for line in lines]
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if not isinstance(block, list):
                    continue
                for index, statement in enumerate(block):
                    if isinstance(statement, ast.If) and id(statement) not in found:
                        tail = _tail(block, index, lines, encoded)
                        if tail is not None:
                            found[id(statement)] = tail
    kept, end = [], 0
    for tail in sorted(found.values(), key=lambda t: t.before[0].lineno):
        if tail.before[0].lineno > end:
            kept.append(tail)
            end = tail.after[-1].end_lineno
    return kept


def _tail(block: list[ast.stmt], index: int, lines: list[str], encoded: list[bytes]) -> _Tail | None:
    """The `if` at `block[index]` with the straight-line statements around it, or None where copying
    them could change what runs (docs/compiler.md lists the rules) or there is nothing on one side."""
    statement = block[index]
    # With an `else` (or `elif`), the two sides would not meet in either branch.
    if statement.orelse or not _pure_test(statement.test) or _leaves(statement.body) or not _indent(statement, lines):
        return None
    read = {n.id for n in ast.walk(statement.test) if isinstance(n, ast.Name)}
    before = []
    for previous in reversed(block[:index]):
        # The test now runs before these statements: it may read nothing they bind.
        if not _straight(previous) or isinstance(previous, ast.Return) or _bound(previous) & read:
            break
        before.insert(0, previous)
    after = []
    for following in block[index + 1 :]:
        if not _straight(following):
            break
        after.append(following)
        if isinstance(following, ast.Return):
            break
    if not before or not after:
        return None
    if not alone_on_its_lines(before[0], encoded) or not alone_on_its_lines(after[-1], encoded):
        return None
    return _Tail(statement, tuple(before), tuple(after))


def _pure_test(test: ast.expr) -> bool:
    """`is`/`is not` comparisons of names, attributes and constants, under `not`, `and`, `or`: no call,
    no `__bool__` of a user's object (a tensor's reads its data), so it reads the same before or after
    the copied statements and cannot fail differently."""
    if isinstance(test, ast.BoolOp):
        return all(_pure_test(value) for value in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _pure_test(test.operand)
    if isinstance(test, ast.Compare):
        return all(isinstance(op, (ast.Is, ast.IsNot)) for op in test.ops) and all(
            _plain(o) for o in (test.left, *test.comparators)
        )
    return False


def _plain(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant))


def _leaves(body: list[ast.stmt]) -> bool:
    """Whether the body can end other than by running to its end or raising: `return`, `yield`, `await`,
    or `break`/`continue` of a loop around the `if`."""
    pending = [(statement, False) for statement in body]  # (node, inside a loop of the body)
    while pending:
        node, in_loop = pending.pop()
        if isinstance(node, _JUMPS) or (isinstance(node, (ast.Break, ast.Continue)) and not in_loop):
            return True
        if isinstance(node, _SCOPES):
            continue
        inner = {id(s) for s in node.body} if isinstance(node, _LOOPS) else set()
        pending += [(child, in_loop or id(child) in inner) for child in ast.iter_child_nodes(node)]
    return False


def _straight(statement: ast.stmt) -> bool:
    """Straight-line code that can move a level in: no string spanning lines (indenting would change it)."""
    return isinstance(statement, _STRAIGHT) and not any(
        isinstance(n, (ast.Constant, ast.JoinedStr)) and n.lineno != n.end_lineno for n in ast.walk(statement)
    )


def _bound(statement: ast.stmt) -> set[str]:
    """Names the statement binds or updates in place (`h.add_(x)`: `h`)."""
    bound = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for node in ast.walk(statement):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
        ):
            if node.func.attr.endswith("_") and not node.func.attr.startswith("__"):
                bound.add(node.func.value.id)
    return bound


def _header_end(statement: ast.If, lines: list[str]) -> int:
    """The last line of the `if`'s header (`):` may follow the test), before comments above the body."""
    end = statement.test.end_lineno
    for n in range(end + 1, statement.body[0].lineno):
        if lines[n - 1].strip() and not lines[n - 1].lstrip().startswith("#"):
            end = n
    return end


def _indent(statement: ast.If, lines: list[str]) -> str | None:
    """What the body is indented by beyond the `if`; None when the body shares the header's line."""
    if statement.body[0].lineno <= _header_end(statement, lines):
        return None
    outer, inner = (_leading(lines[n - 1]) for n in (statement.lineno, statement.body[0].lineno))
    return inner[len(outer) :] if inner.startswith(outer) and len(inner) > len(outer) else None


def _leading(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


# -- rewriting the text ----------------------------------------------------------------------------
def _apply(
    lines: list[str], tails: list[_Tail], on_disk: Callable[[int], int]
) -> tuple[str, list[tuple[int, int]], list[list[tuple[int, int]]]]:
    """The text with each tail copied into both branches; per line, the lines of the text it comes from;
    per tail, the lines of each copied statement's copy in the else branch."""
    out: list[str] = []
    ranges: list[tuple[int, int]] = []
    copies: list[list[tuple[int, int]]] = []

    def keep(first: int, last: int) -> None:
        for n in range(first, last + 1):
            out.append(lines[n - 1])
            ranges.append((n, n))

    def indented(statements: tuple[ast.stmt, ...], extra: str) -> None:
        for n in range(statements[0].lineno, statements[-1].end_lineno + 1):
            line = lines[n - 1] if lines[n - 1].endswith(("\n", "\r")) else lines[n - 1] + "\n"  # the file's last
            out.append(extra + line if line.strip() else line)
            ranges.append((n, n))

    done = 0  # lines of the text copied so far
    for tail in tails:
        statement, before, after = tail.statement, tail.before, tail.after
        outer, extra = _leading(lines[statement.lineno - 1]), _indent(statement, lines)
        newline = lines[statement.lineno - 1][len(lines[statement.lineno - 1].rstrip("\r\n")) :] or "\n"
        keep(done + 1, before[0].lineno - 1)
        keep(before[-1].end_lineno + 1, statement.lineno - 1)  # blanks and comments before the `if`
        spans = f"{_span(before, on_disk)} and {_span(after, on_disk)}"
        out.append(
            f'{outer}# transpile: {spans} copied into both branches to fuse (docs/compiler.md: "Fusing across an if"){newline}'
        )
        ranges.append((statement.lineno, statement.lineno))
        header = _header_end(statement, lines)
        keep(statement.lineno, header)
        indented(before, extra)
        keep(header + 1, statement.end_lineno)
        indented(after, extra)
        out.append(f"{outer}else:{newline}")
        ranges.append((statement.lineno, statement.lineno))
        copies.append(_placed(len(out), before, after))
        indented(before, extra)
        indented(after, extra)
        keep(statement.end_lineno + 1, after[0].lineno - 1)  # blanks and comments after the body
        done = after[-1].end_lineno
    keep(done + 1, len(lines))
    return "".join(out), ranges, copies


def _placed(at: int, before: tuple[ast.stmt, ...], after: tuple[ast.stmt, ...]) -> list[tuple[int, int]]:
    """The lines each statement of `before` then `after` will have when both are appended after line `at`."""
    placed = []
    for run in (before, after):
        start = at - run[0].lineno + 1
        placed += [(start + s.lineno, start + s.end_lineno) for s in run]
        at += run[-1].end_lineno - run[0].lineno + 1
    return placed


def _span(statements: tuple[ast.stmt, ...], on_disk: Callable[[int], int]) -> str:
    first, last = on_disk(statements[0].lineno), on_disk(statements[-1].end_lineno)
    return f"line {first}" if first == last else f"lines {first}-{last}"
